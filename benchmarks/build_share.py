"""What building a batch's sources in shared units (``codegen.joint``) saves: wall and gcc
CPU seconds of the same batches built one source per gcc run and ``--share`` per unit.

Run: python benchmarks/build_share.py [--workloads c3d,t2d] [--batches 4] [--size 16]
     [--share 4] [--rounds 2] [--captured reqs.pkl ...]

For each workload, ``--batches`` batches of ``--size`` programs are drawn from its design
spaces with a fixed seed (the rewritten form ``tune`` searches) and their C written. With
``--captured``, the batches are instead those a tuning run built: the C of each request
to write C in a ``benchmarks/pool_replay.py capture`` file (a search's batches hold
fewer design spaces than random draws, so more of their sources share a unit). Each
round builds every batch both ways, each in a fresh kernel cache, which way goes first
alternating by round, with the builder's two threads as in a tuning run. Prints per
workload and way: wall seconds and gcc's user + system CPU seconds (the children's
rusage), summed over the batches, and the ratios of shared to separate. With
``--full-units N``, only the first N units that hold ``--share`` sources (as a two-worker
builder deals the batches) are built, one gcc run at a time, so CPU seconds are not
shared with a second build: gcc's own saving, per joined source.
"""

from __future__ import annotations

import argparse
import pickle
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from benchmarks.build_cost import draw_forever  # noqa: E402
from tensortune.codegen import Target, compile_source  # noqa: E402
from tensortune.codegen.joint import join  # noqa: E402
from tensortune.measure import BuildInput, LocalBuilder  # noqa: E402
from tensortune.measure.builder import write_c  # noqa: E402
from tensortune.schedule import Schedule  # noqa: E402
from tensortune.space import PostOrderApply  # noqa: E402


def batches(name: str, n: int, size: int, target: Target) -> list[list[BuildInput]]:
    out: list[BuildInput] = []
    for c in draw_forever(tt.workloads.get(name), PostOrderApply.default(target)):
        if len(out) == n * size:
            break
        if c is None:
            continue
        src, _ = write_c(lambda c=c: c.sch.func, target)
        if src is not None:
            out.append(BuildInput(c.sch.func, src))
    return [out[i:i + size] for i in range(0, len(out), size)]


def captured(path: Path, target: Target) -> list[list[BuildInput]]:
    func, _, calls = pickle.loads(path.read_bytes())
    out = []
    for kind, traces in calls:
        if kind != "emit":
            continue
        batch = []
        for t in traces:
            sch = Schedule.from_trace(func, t, verify=False)
            src, _ = write_c(lambda sch=sch: sch.func, target)
            if src is not None:
                batch.append(BuildInput(sch.func, src))
        out.append(batch)
    return out


def full_units(bl: list[list[BuildInput]], target: Target, share: int, n: int
               ) -> list[list[BuildInput]]:
    builder = LocalBuilder(target, max_workers=2, share=share)
    units = [[b[i] for i in u] for b in bl for u in builder._units(b) if len(u) == share]
    return units[:n]


def build_units(units: list[list[BuildInput]], target: Target, joined: bool
                ) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        c0, t0 = _cpu(), time.perf_counter()
        for u in units:
            srcs = [x.source or "" for x in u]
            for src in [join(srcs)] if joined else srcs:
                compile_source(src, target, Path(d))
        return time.perf_counter() - t0, _cpu() - c0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build_all(batch_list: list[list[BuildInput]], target: Target, share: int
              ) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        builder = LocalBuilder(target, cache_dir=Path(d), share=share)
        c0, t0 = _cpu(), time.perf_counter()
        for b in batch_list:
            got = builder.build(b)
            bad = [r.error_msg for r in got if not r.ok]
            if bad:
                raise SystemExit(f"a build failed: {bad[0]}")
        return time.perf_counter() - t0, _cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--workloads", default="c3d,t2d")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--share", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--captured", type=Path, nargs="*", default=[])
    ap.add_argument("--full-units", type=int, default=0)
    args = ap.parse_args()
    target = Target.host()
    print("workload  round  separate wall/CPU s  shared wall/CPU s  wall ratio  CPU ratio")
    todo = [(p.stem, lambda p=p: captured(p, target)) for p in args.captured] or [
        (n, lambda n=n: batches(n, args.batches, args.size, target))
        for n in args.workloads.split(",")]
    for name, make in todo:
        bl = make()
        units = full_units(bl, target, args.share, args.full_units) if args.full_units else []
        for r in range(args.rounds):
            ways = [1, args.share] if r % 2 == 0 else [args.share, 1]
            got = {w: build_units(units, target, w > 1) if units else
                   build_all(bl, target, w) for w in ways}
            (sw, sc), (jw, jc) = got[1], got[args.share]
            print(f"{name:9s} {r:5d}  {sw:8.1f} / {sc:6.1f}     {jw:8.1f} / {jc:6.1f}    "
                  f"{jw / sw:9.3f}  {jc / sc:9.3f}", flush=True)


if __name__ == "__main__":
    main()
