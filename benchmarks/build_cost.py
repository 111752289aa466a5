"""What a code-generation change costs gcc and the kernels: compile time and speed of the
same programs built two ways. By default: with lane loops for strided write-backs
(``codegen.lane_loop``) and without them (each tile lane a statement of its own, as
before 2026-11-26). With ``--scalar-lanes``: lane loops as emitted, and with gcc free to
vectorize them (their ``TT_SCALAR_LOOP`` marks taken out, as before 2026-11-27). With
``--flags``: the same C built with the target's gcc flags and with those flags added.

Run: python benchmarks/build_cost.py [--workloads c2d,c3d] [--draws 20] [--rounds 5]
     [--scalar-lanes | --flags="-fno-tree-loop-vectorize"] [--db tuning.db --top 5]

For each workload, ``--draws`` programs are drawn from its design spaces with a fixed
seed, and with ``--db`` the ``--top`` fastest records of the workload in that database
are added (the programs a search keeps, which random draws rarely are). Where the two
builds differ, both are compiled in a
fresh cache (gcc's user + system CPU time, read from the child's rusage), checked
against the float64 reference and timed in ``--rounds`` rounds, the two versions of a
program one after the other, which goes first alternating (each keeps its best median).
Prints, per workload: programs drawn, how many the change touched, mean gcc CPU seconds
per touched program before and after, and the geometric mean and the range of the
kernels' time after / before.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import random
import resource
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from tensortune.codegen import Target, compile_source, emit_c, lower, simd  # noqa: E402
from tensortune.database import Database  # noqa: E402
from tensortune.measure.runner import LocalRunner, RunInput  # noqa: E402
from tensortune.reference import evaluate, random_inputs  # noqa: E402
from tensortune.rewrite import rewrite as rewritten_form  # noqa: E402
from tensortune.search.records import replay  # noqa: E402
from tensortune.search.search_strategy import Candidate, SearchContext  # noqa: E402
from tensortune.space import PostOrderApply  # noqa: E402

CONVS = "c2d,c3d,grp,dil,convlayer,t2d,c1d,dep"


def sources(func: tt.PrimFunc, target: Target) -> tuple[str, str]:
    """The C of ``func`` without lane loops, then with them."""
    low = lower(func)
    saved = simd.lane_loop, simd.lane_group
    simd.lane_loop = lambda *a: False   # type: ignore[assignment]
    simd.lane_group = lambda *a: 0      # type: ignore[assignment]
    try:
        before = emit_c(low, target)
    finally:
        simd.lane_loop, simd.lane_group = saved
    return before, emit_c(low, target)


def unmarked(source: str) -> str:
    """``source`` with its lane loops left to gcc's vectorizer."""
    return "\n".join(line for line in source.split("\n")
                     if line.strip() != "TT_SCALAR_LOOP;")


def gcc_seconds(source: str, target: Target, cache: Path) -> tuple[str, float]:
    """The library's path and the CPU time gcc took to build it."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    lib = compile_source(source, target, cache)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return str(lib), (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def draw_forever(func: tt.PrimFunc, gen: PostOrderApply, lanes: int = 16
                 ) -> Iterator[Candidate | None]:
    """Seeded draws (seed 0) from the design spaces of the form of ``func`` that ``tune``
    searches (its rewrite where one applies, for vectors of ``lanes`` floats); None where
    a draw was illegal."""
    func = rewritten_form(func, lanes) or func
    spaces = gen.generate(func)
    ctx = SearchContext(func, spaces, gen, set(), random.Random(0))
    while True:
        yield ctx.draw(ctx.rng.randrange(len(spaces)))


def programs(func: tt.PrimFunc, gen: PostOrderApply, target: Target,
             draws: int, db: Database | None, top: int) -> list[tuple[tt.PrimFunc, bool]]:
    """``draws`` seeded random programs of the form of ``func`` that ``tune`` searches
    (its rewrite where one applies), then its ``top`` records in ``db``; each with
    whether it is such a record."""
    lanes = target.lanes("float32")
    drawn = itertools.islice(draw_forever(func, gen, lanes), draws)
    out = [(c.sch.func, False) for c in drawn if c is not None]
    func = rewritten_form(func, lanes) or func
    if db is not None:
        out += [(replay(func, r).func, True)
                for r in db.top_k(func.structural_hash(), target.fingerprint(), top)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--workloads", default=CONVS)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--flags", default="", help="gcc flags added for the 'after' build; "
                    "without them, lane loops are what differs")
    ap.add_argument("--scalar-lanes", action="store_true", help="lane loops as emitted "
                    "against the same C with gcc free to vectorize them")
    ap.add_argument("--db", default=None, help="a tuning database: its best records too")
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    target = Target.host()
    extra = tuple(args.flags.split())
    after_target = dataclasses.replace(target, flags=target.flags + extra)
    db = Database(args.db) if args.db else None
    gen = PostOrderApply.default(target)
    print("workload  programs  touched  gcc s before  gcc s after  time after/before (range)")
    for name in args.workloads.split(","):
        func = tt.workloads.get(name)
        progs = programs(func, gen, target, args.draws, db, args.top)
        x = random_inputs(func)
        want = evaluate(func, x)
        pairs, secs = [], ([], [])   # type: ignore[var-annotated]
        with tempfile.TemporaryDirectory() as tmp:
            for f, stored in progs:
                if extra:
                    before = after = emit_c(lower(f), target)
                else:
                    if args.scalar_lanes:
                        after = emit_c(lower(f), target)
                        before = unmarked(after)
                    else:
                        before, after = sources(f, target)
                    if before == after:
                        continue
                (lb, sb), (la, sa) = (gcc_seconds(s, t, Path(tmp)) for s, t in
                                      ((before, target), (after, after_target)))
                secs[0].append(sb)
                secs[1].append(sa)
                pairs.append((f, lb, la, stored))
            best = [[float("inf")] * 2 for _ in pairs]
            with LocalRunner() as runner:
                for rnd in range(args.rounds):
                    for i, (f, lb, la, _) in enumerate(pairs):
                        # Who goes first alternates: a pair's first timing read up to
                        # 1.25x slow in one order and level in the other (RESULTS.md).
                        order = [(0, lb), (1, la)]
                        for j, lib in order[::-1] if rnd % 2 else order:
                            r = runner.run([RunInput(lib, f, name, x, want)])[0]
                            if not r.ok:
                                raise SystemExit(f"{name}: {lib} failed: {r.error_msg}")
                            best[i][j] = min(best[i][j], statistics.median(r.latencies))
        if not pairs:
            print(f"{name:9s} {len(progs):8d}  {0:7d}")
            continue
        ratio = [a / b for b, a in best]
        tops = ""
        if db is not None:
            tops = "  best records: " + " ".join(
                f"{r:.3f}" for r, p in zip(ratio, pairs) if p[3])
        print(f"{name:9s} {len(progs):8d}  {len(pairs):7d}  {statistics.mean(secs[0]):12.3f}  "
              f"{statistics.mean(secs[1]):11.3f}  "
              f"{float(np.exp(np.mean(np.log(ratio)))):.3f} "
              f"({min(ratio):.3f}-{max(ratio):.3f}){tops}", flush=True)


if __name__ == "__main__":
    main()
