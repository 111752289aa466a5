"""Layers tuned with their weights marked fixed (``tt.tune(..., weights=...)``) against the
same layers tuned as plain functions, each run as a bound kernel (``Kernel.bind``: the
marked one packs its weights there, once), with PyTorch CPU in the same alternating
rounds.

Run: python benchmarks/fixed_weights.py [--workloads dense,c2d,convlayer] [--trials 64]
         [--seed 0] [--rounds 5] [--db FILE]

A suite layer's weights are every input after its first (``x``, ``X`` or ``A``): what a
model holds fixed. Each kernel is timed by ``median_time`` over Python calls of the bound
kernel (about a microsecond a call), and each one's best median over the rounds is kept.
The marked search times its programs without the stages that read only the weights, so
it may choose programs the plain search would not: both columns are searches of the same
budget and seed. The third column is the plain search's program marked afterwards and
bound: what packing at bind gives the same program, apart from the search.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import tensortune as tt
from tensortune.reference import random_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.baselines import median_time, setup_torch, torch_fn  # noqa: E402

LAYERS = ("gmm", "dense", "c2d", "c1d", "c3d", "grp", "dil", "dep", "t2d", "lnm", "convlayer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--workloads", default="dense,c2d,convlayer")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--db", default=None, help="keep the records (default: in memory)")
    args = ap.parse_args()
    target = tt.Target.host()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {target}")
    print(setup_torch(target.cores))
    print("| workload | weights | plain ms | marked ms | plain's program packed at bind ms | "
          "packed KiB (marked) | PyTorch ms | plain / marked | marked vs PyTorch | "
          "plain vs PyTorch | tune s plain / marked |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.workloads.split(","):
        if name not in LAYERS:
            raise SystemExit(f"{name}: not a layer with weights; choose from {LAYERS}")
        row(name, args, target)


def row(name: str, args: argparse.Namespace, target: tt.Target) -> None:
    func = tt.workloads.get(name)
    weights = [b.name for b in func.inputs[1:]]
    ins = [a.astype(b.dtype) for a, b in zip(random_inputs(func, seed=args.seed), func.inputs)]
    runs, secs = [], []
    for marked in (False, True):
        res = tt.tune(func, trials=args.trials, database=args.db, seed=args.seed,
                      weights=weights if marked else ())
        secs.append(res.seconds)
        runs.append(res.kernel.bind(*ins))
        if not marked:
            sch = res.schedule()
            after = replace(sch.func, weights=tuple(range(1, len(func.inputs))))
            runs.append(tt.build(after, target).bind(*ins))
    runs = [runs[0], runs[2], runs[1]]          # plain, marked, plain's program cut
    want = runs[0]()
    for run in runs[1:]:
        got = run()
        for a, b in zip(want if isinstance(want, tuple) else (want,),
                        got if isinstance(got, tuple) else (got,)):
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-3)
    fns = [*runs, torch_fn(name, ins)]
    best = [float("inf")] * 4
    for _ in range(args.rounds):        # alternated: a drift in speed hits all four
        for i, fn in enumerate(fns):
            if fn is not None:
                best[i] = min(best[i], median_time(fn))
    plain, mk, cut, torch_s = best
    packed = sum(p.nbytes for p in runs[1].packed) / 1024
    vs = (lambda a: f"{torch_s / a:.2f}x") if torch_s < float("inf") else (lambda a: "-")
    print(f"| {name.upper()} | {','.join(weights)} | {plain * 1e3:.3f} | {mk * 1e3:.3f} | "
          f"{cut * 1e3:.3f} | {packed:.0f} | {torch_s * 1e3:.3f} | {plain / mk:.2f}x | {vs(mk)} | "
          f"{vs(plain)} | {secs[0]:.0f} / {secs[1]:.0f} |", flush=True)


if __name__ == "__main__":
    main()
