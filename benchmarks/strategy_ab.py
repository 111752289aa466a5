"""Compare search-strategy settings on fresh databases, with the arms interleaved.

Run: python benchmarks/strategy_ab.py --workloads bmm,tbg --seeds 0,1,2 --trials 256
         [--arms off,niche] [--out benchmarks/out/ab]
     python benchmarks/strategy_ab.py --workloads dep,nrm --arms draw0,draw2 --trials 128

Each (seed, workload) runs every arm back to back, the order of the arms flipping with
the seed, so a host that gets busier or quieter over the hour weighs on every arm alike
(this 2-core host's noise is larger than most differences between settings). Each run
is ``tt.tune(func, trials, database=<fresh file>, seed, retime_top=0,
strategy=EvolutionarySearch(**arm))``, or with ``tt.tune`` keywords for the arms of
``TUNE_ARMS``; a line of JSON per run gives the best GFLOP/s by trial count, as recorded
during the search, the seconds and trials per second, and a table of the means ends the
run. Every run compiles into a kernel cache of its own, so an arm never reuses the
builds of the arm before it (the same seed proposes the same first batch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from benchmarks.tune_suite import best_at  # noqa: E402
from tensortune.search.evolutionary import EvolutionarySearch  # noqa: E402

# Named settings of EvolutionarySearch; add one here to compare it.
ARMS: dict[str, dict[str, object]] = {
    "off": {"niche_cap": None},
    "niche": {"niche_cap": 0.25, "niche_full": 32},
    "niche0": {"niche_cap": 0.25, "niche_full": 0},
}
# Named settings of ``tt.tune`` itself (default search strategy).
TUNE_ARMS: dict[str, dict[str, object]] = {
    "draw0": {"draw_workers": 0},
    "draw2": {"draw_workers": 2},
    "b16": {"double_after": None},
    "b16x2": {"double_after": 64},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--workloads", required=True)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--arms", default="off,niche", help=f"of {', '.join(ARMS)}")
    ap.add_argument("--out", default="benchmarks/out/ab")
    args = ap.parse_args()
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS and a not in TUNE_ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {unknown}; known: {sorted(ARMS) + sorted(TUNE_ARMS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    checkpoints = [k for k in (16, 32, 64, 128, 256, 512) if k <= args.trials]
    rows: list[dict] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in args.workloads.split(","):
            func = tt.workloads.get(name)
            order = arms if seed % 2 == 0 else arms[::-1]
            for arm in order:
                kw: dict = (dict(TUNE_ARMS[arm]) if arm in TUNE_ARMS else
                            {"strategy": EvolutionarySearch(**ARMS[arm])})  # type: ignore[arg-type]
                with tempfile.TemporaryDirectory(prefix="ab-cache-") as cache:
                    os.environ["XDG_CACHE_HOME"] = cache
                    t0 = time.time()
                    res = tt.tune(func, trials=args.trials, seed=seed, retime_top=0,
                                  database=str(out / f"{stamp}-{name}-{arm}-{seed}.db"), **kw)
                    secs = time.time() - t0
                row = {"wl": name, "arm": arm, "seed": seed, "secs": round(secs, 1),
                       "trials/s": round(res.trials / secs, 2),
                       **{f"@{k}": round(res.flops / best_at(res.history, k) / 1e9, 1)
                          for k in checkpoints}}
                rows.append(row)
                print(json.dumps(row), flush=True)
    last = f"@{checkpoints[-1]}"
    print(f"\nmean GFLOP/s {last} (per seed in brackets)")
    for name in args.workloads.split(","):
        cells = []
        for arm in arms:
            vals = [r[last] for r in rows if r["wl"] == name and r["arm"] == arm]
            rate = statistics.mean(r["trials/s"] for r in rows
                                   if r["wl"] == name and r["arm"] == arm)
            cells.append(f"{arm} {statistics.mean(vals):.1f} ({' / '.join(map(str, vals))}),"
                         f" {rate:.2f} trials/s")
        print(f"{name}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
