"""The ``tensortune`` command line.

    tensortune example [--size 512] [--show]   schedule, build, check and time a matmul
    tensortune target                          the detected machine

Example:
    $ tensortune example --size 256
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _example(args: argparse.Namespace) -> int:
    import tensortune as tt
    from tensortune.examples import SCHEDULES
    from tensortune.measure import measure

    n = args.size
    func = tt.workloads.get("gmm", M=n, N=n, K=n)
    sch = SCHEDULES["gmm"](tt.Schedule(func))
    print(f"matmul {n}x{n}x{n} on {tt.Target.host()}\n")
    if args.show:
        print(sch.trace.as_python(), "\n")
        print(sch.func, "\n")
    base = measure(func, repeat=3, min_repeat_ms=20)
    res = measure(sch, repeat=5, min_repeat_ms=50)
    if not res.ok:
        print(f"scheduled kernel failed: {res.error_kind}: {res.error_msg}", file=sys.stderr)
        return 1
    flops = 2.0 * n ** 3
    a = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
    kernel = tt.build(sch)
    err = float(np.abs(kernel(a, a) - a.astype(np.float64) @ a).max())
    print(f"unscheduled : {base.median * 1e3:9.3f} ms  {flops / base.median / 1e9:8.1f} GFLOP/s")
    print(f"scheduled   : {res.median * 1e3:9.3f} ms  {flops / res.median / 1e9:8.1f} GFLOP/s"
          f"  (checked against float64, max abs error {err:.2e})")
    print("\nsee `tensortune example --show` for the schedule, its trace and the loop nest")
    return 0


def _target(args: argparse.Namespace) -> int:
    from tensortune import Target

    t = Target.host()
    print(t)
    print(f"fingerprint {t.fingerprint()} | flags {' '.join(t.flags)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tensortune", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("example", help="schedule, build, check and time a matmul")
    ex.add_argument("--size", type=int, default=512)
    ex.add_argument("--show", action="store_true", help="print the trace and loop nest")
    ex.set_defaults(fn=_example)
    tg = sub.add_parser("target", help="show the detected machine")
    tg.set_defaults(fn=_target)
    args = ap.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
