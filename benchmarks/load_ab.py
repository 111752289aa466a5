"""Does a busy machine cost the search, and does the load guard win it back?

Run: python benchmarks/load_ab.py --workload bmm --trials 128 --seeds 0,1,2
         [--arms quiet,guard,busy,busyguard] [--on 4 --off 6] [--out benchmarks/out/load]

Arms: ``quiet`` tunes on the machine as it is, ``busy`` with a second process that keeps
one core busy for about ``--on`` seconds out of every ``--on + --off`` (random lengths,
its own seed per run: a shared host's busy spells, made repeatable); ``guard`` in an arm's
name turns ``tune(load_guard=True)`` on, else it is off. Arms are interleaved per seed,
their order flipping with the seed. What counts is how fast the returned kernel really
is, so after all runs, with nothing else running, each run's best kernel is re-timed in
three alternating rounds (its quietest median kept), next to what its search recorded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from tensortune.measure import BuildInput, LocalBuilder, LocalRunner, RunInput  # noqa: E402
from tensortune.reference import random_inputs  # noqa: E402
from tensortune.tir.analysis import flop_count  # noqa: E402
from tensortune.tir.stmt import PrimFunc  # noqa: E402

# Runs as ``python -c``: a core kept busy in spells of random length.
BUSY = """
import random, sys, time
on, off = float(sys.argv[1]), float(sys.argv[2])
random.seed(int(sys.argv[3]))
time.sleep(random.uniform(0, off))
while True:
    end = time.time() + on * random.uniform(0.5, 1.5)
    while time.time() < end:
        sum(range(10000))
    time.sleep(off * random.uniform(0.5, 1.5))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--workload", default="bmm")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default="quiet,guard,busy,busyguard")
    ap.add_argument("--on", type=float, default=4.0)
    ap.add_argument("--off", type=float, default=6.0)
    ap.add_argument("--out", default="benchmarks/out/load")
    args = ap.parse_args()
    arms = args.arms.split(",")
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    func = tt.workloads.get(args.workload)
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for arm in arms if seed % 2 == 0 else arms[::-1]:
            busy = subprocess.Popen([sys.executable, "-c", BUSY, str(args.on), str(args.off),
                                     str(seed)]) if arm.startswith("busy") else None
            db = out / f"{args.workload}-{arm}-{seed}.db"
            t0 = time.time()
            try:
                res = tt.tune(func, trials=args.trials, seed=seed, retime_top=0,
                              database=str(db), load_guard="guard" in arm)
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
            row = {"arm": arm, "seed": seed, "search": round(res.gflops, 1),
                   "secs": round(time.time() - t0, 1), "waited": res.waited, "db": str(db)}
            runs.append(row)
            print(json.dumps(row), flush=True)
    quiet = retime([r["db"] for r in runs], func)
    print(f"\n{args.workload}, {args.trials} trials: GFLOP/s of each run's kernel, re-timed "
          "quietly (search record in brackets)")
    for arm in arms:
        mine = [(r, q) for r, q in zip(runs, quiet) if r["arm"] == arm]
        cells = " / ".join(f"{q:.1f} ({r['search']})" for r, q in mine)
        print(f"{arm}: mean {statistics.mean(q for _, q in mine):.1f}: {cells}; "
              f"{statistics.mean(r['secs'] for r, _ in mine):.0f} s a run, waited "
              f"{statistics.mean(r['waited'] for r, _ in mine):.1f} s")


def retime(dbs: list[str], func: PrimFunc, rounds: int = 3) -> list[float]:
    """Each database's best kernel timed in ``rounds`` alternating rounds: the best
    GFLOP/s of its medians."""
    kernels = [tt.compile(func, database=db, retime=False) for db in dbs]
    built = LocalBuilder().build([BuildInput(k.func, k.source) for k in kernels])
    best = [0.0] * len(dbs)
    with LocalRunner(check=False) as runner:
        for _ in range(rounds):
            for i, (k, b) in enumerate(zip(kernels, built)):
                assert b.lib_path is not None
                res = runner.run([RunInput(b.lib_path, k.func, f"k{i}",
                                           random_inputs(k.func), None)])[0]
                best[i] = max(best[i], flop_count(k.func) / res.median / 1e9)
    return best


if __name__ == "__main__":
    main()
