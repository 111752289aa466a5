"""Hand-written schedules (primitives only, no hand C) for GMM, C2D and DENSE against NumPy,
PyTorch CPU (when installed) and the machine's measured peak, all in one run.

Run: python benchmarks/hand_schedules.py [--repeat 7] [--markdown]

Every tensortune kernel is checked against the float64 reference before it is timed;
timings are medians of C timing loops (first call discarded) in the runner's worker.
Baselines are medians of repeated calls after a warm-up, on the same random inputs.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from benchmarks.baselines import median_time, numpy_fn, setup_torch, torch_fn  # noqa: E402
from tensortune.examples import SCHEDULES  # noqa: E402
from tensortune.measure import measure  # noqa: E402
from tensortune.measure.peak import bandwidth, fma_peak  # noqa: E402
from tensortune.reference import random_inputs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--markdown", action="store_true", help="print a RESULTS.md table")
    args = ap.parse_args()
    target = tt.Target.host()
    torch_info = setup_torch(target.cores)
    peak = fma_peak(target.cores, target)
    bw = bandwidth(target.cores, target)
    print(f"{datetime.date.today()} | {platform.node()} | {target}")
    print(f"measured peak: {peak:.0f} GFLOP/s float32 FMA ({target.cores} threads), "
          f"triad {bw:.1f} GB/s | NumPy {np.__version__} | {torch_info}")
    rows = []
    for name, schedule in SCHEDULES.items():
        func = tt.workloads.get(name)
        flops = tt.workloads.flops(name)
        res = measure(schedule(tt.Schedule(func)), repeat=args.repeat, min_repeat_ms=50)
        if not res.ok:
            print(f"{name}: FAILED {res.error_kind}: {res.error_msg}")
            continue
        ours = flops / res.median / 1e9
        ins = random_inputs(func)
        np_fn, th_fn = numpy_fn(name, ins), torch_fn(name, ins)
        npg = flops / median_time(np_fn) / 1e9 if np_fn else None
        thg = flops / median_time(th_fn) / 1e9 if th_fn else None
        rows.append((name, res.median * 1e3, ours, 100 * ours / peak, npg, thg))
    head = ("workload", "ms", "GFLOP/s", "% peak", "NumPy GFLOP/s", "PyTorch GFLOP/s",
            "vs PyTorch")
    fmt = "| " + " | ".join(["{}"] * len(head)) + " |"
    print(fmt.format(*head))
    print("|" + "---|" * len(head))
    for name, ms, g, pct, npg, thg in rows:
        print(fmt.format(name.upper(), f"{ms:.3f}", f"{g:.1f}", f"{pct:.1f}",
                         f"{npg:.1f}" if npg else "-", f"{thg:.1f}" if thg else "-",
                         f"{g / thg:.2f}x" if thg else "-"))


if __name__ == "__main__":
    main()
