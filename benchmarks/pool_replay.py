"""How long a search's draws and C writing take in the draw pool, on the very requests a
tuning run made: wall seconds, the workers' CPU seconds and the cores they kept busy.

Run: python benchmarks/pool_replay.py capture --workload c3d --trials 128 --out reqs.pkl
     python benchmarks/pool_replay.py time reqs.pkl [--rounds 3]

``capture`` tunes the workload (seed 1, a scratch database and kernel cache) and saves
the function, its design spaces and every request the run sent its ``DrawPool`` (the
draws of each evolution, the candidates whose C it wrote). ``time`` sends them again, in
order, to a fresh two-worker pool per round and prints per round: wall seconds, the
workers' user + system CPU seconds (from ``/proc``, Linux) and CPU / wall.
Run ``time`` from two checkouts on one capture file (``PYTHONPATH=other/src``),
alternating, to compare how they deal, draw and write; the requests carry their seeds,
so both trees replay the same programs. Which worker gets which request, and so what
its replay cache holds, depends on timing: expect a few percent from round to round.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from tensortune.codegen import Target  # noqa: E402
from tensortune.search import draw_pool  # noqa: E402
from tensortune.space import PostOrderApply  # noqa: E402


def capture(workload: str, trials: int, out: Path) -> None:
    calls: list[tuple[str, list[Any]]] = []
    draw, emit = draw_pool.DrawPool.draw, draw_pool.DrawPool.emit

    def record_draw(self: draw_pool.DrawPool, requests: list[Any]) -> Any:
        calls.append(("draw", list(requests)))
        return draw(self, requests)

    def record_emit(self: draw_pool.DrawPool, items: list[Any], target: Target) -> Any:
        calls.append(("emit", list(items)))
        return emit(self, items, target)

    draw_pool.DrawPool.draw = record_draw  # type: ignore[method-assign]
    draw_pool.DrawPool.emit = record_emit  # type: ignore[method-assign]
    tune_mod = importlib.import_module("tensortune.search.tuning_task")
    seen: dict[str, Any] = {}
    init = tune_mod.TuningTask.__init__

    def keep(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        seen["func"], seen["spaces"] = self.func, self.strategy.ctx.spaces

    tune_mod.TuningTask.__init__ = keep
    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_CACHE_HOME"] = d
        tt.tune(tt.workloads.get(workload), trials=trials, database=f"{d}/db.sqlite",
                seed=1)
    out.write_bytes(pickle.dumps((seen["func"], seen["spaces"], calls)))
    print(f"{workload}: {len(calls)} requests, {sum(len(c) for _, c in calls)} items "
          f"-> {out}")


def _cpu(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` so far (Linux)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def time_once(func: Any, spaces: Any, calls: list[tuple[str, list[Any]]]
              ) -> tuple[float, float]:
    target = Target.host()
    postprocs = PostOrderApply.default(target).postprocs
    with draw_pool.DrawPool(func, spaces, postprocs, 2) as pool:
        pool.draw([(0, {}, [], 0)] * 2)   # started, imports done
        pids = [p.pid for p in pool._procs]
        cpu0, t0 = _cpu(pids), time.perf_counter()
        for kind, items in calls:
            if kind == "draw":
                pool.draw(items)
            else:
                pool.emit(items, target)
        return time.perf_counter() - t0, _cpu(pids) - cpu0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--workload", default="c3d")
    c.add_argument("--trials", type=int, default=128)
    c.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("time")
    t.add_argument("file", type=Path)
    t.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.cmd == "capture":
        capture(args.workload, args.trials, args.out)
        return
    func, spaces, calls = pickle.loads(args.file.read_bytes())
    for r in range(args.rounds):
        wall, cpu = time_once(func, spaces, calls)
        print(f"round {r}: {wall:.1f} s wall, {cpu:.1f} s workers' CPU, "
              f"{cpu / wall:.2f} cores", flush=True)


if __name__ == "__main__":
    main()
