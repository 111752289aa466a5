"""How fast the search turns decisions into programs and programs into C: milliseconds
per draw, per mutant, per feature vector and per C source.

Run: python benchmarks/replay_speed.py [--workloads c3d,bmm,convlayer_winograd]
[--draws 100] [--emit 16]

For each workload, ``--draws`` candidates are drawn from its design spaces (a full replay
of a trace plus the post-processor, as EvolutionarySearch does for every fresh member of
its population), then half of them mutated and replayed, with a fixed seed, so two
versions of the code replay the same decisions; then the cost model's features of every
drawn program are extracted (as the search scores each), then the C of the first
``--emit`` drawn programs is written (lowering and the emitter, as for every candidate a
search builds). The collector runs with the draw workers' thresholds
(``draw_worker.GC_THRESHOLDS``), where a search does this work; ``--default-gc`` keeps
Python's own. A name ``<workload>_winograd`` is that workload's Winograd form
(``search.forms``). Prints milliseconds per draw, per mutant, per feature vector and
per C source, and a hash of the programs drawn, of the features and of the C: equal
hashes mean the same programs, features and C. CPU seconds on a
shared host move by 10-30% from run to run; for a small difference, run it under
``valgrind --tool=callgrind`` and compare instruction counts.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from tensortune.codegen import Target  # noqa: E402
from tensortune.cost_model import extract  # noqa: E402
from tensortune.measure.builder import write_c  # noqa: E402
from tensortune.rewrite.winograd import winograd  # noqa: E402
from tensortune.search.draw_worker import GC_THRESHOLDS  # noqa: E402
from tensortune.search.mutator import mutate  # noqa: E402
from tensortune.search.search_strategy import SearchContext  # noqa: E402
from tensortune.space import PostOrderApply  # noqa: E402

SUITE = "gmm,dense,c2d,bmm,c1d,c3d,grp,dil,dep,t2d,nrm,smx,lnm,convlayer,tbg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--workloads", default=SUITE)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--emit", type=int, default=16)
    ap.add_argument("--default-gc", action="store_true",
                    help="keep Python's collector thresholds instead of the draw workers'")
    args = ap.parse_args()
    if not args.default_gc:
        gc.set_threshold(*GC_THRESHOLDS)
    target = Target.host()
    gen = PostOrderApply.default(target)
    print("workload            ms/draw  ms/mutant  programs      ms/feat  features      "
          "ms/C  C")
    for name in args.workloads.split(","):
        func = tt.workloads.get(name.removesuffix("_winograd"))
        if name.endswith("_winograd"):
            form = winograd(func)
            if form is None:
                raise SystemExit(f"{name}: {func.name} has no Winograd form")
            func = form
        spaces = gen.generate(func)
        ctx = SearchContext(func, spaces, gen, set(), random.Random(0))
        h = hashlib.sha256()
        t0 = time.perf_counter()
        cands = [ctx.draw(ctx.rng.randrange(len(spaces))) for _ in range(args.draws)]
        t1 = time.perf_counter()
        mutants = 0
        for c in [c for c in cands if c is not None][: args.draws // 2]:
            h.update(c.program.encode())
            m = mutate(c, spaces[c.space], ctx.rng)
            if m is not None:
                mutants += 1
                d = ctx.draw(c.space, m[0], m[1])
                h.update(b"-" if d is None else d.program.encode())
        t2 = time.perf_counter()
        feats = hashlib.sha256()
        drawn = [c for c in cands if c is not None]
        for c in drawn:
            feats.update(extract(c.sch.func).tobytes())
        t3 = time.perf_counter()
        src = hashlib.sha256()
        chosen = drawn[: args.emit]
        for c in chosen:
            source, error = write_c(lambda c=c: c.sch.func, target)   # as the builder does
            src.update((source or error or "").encode())
        t4 = time.perf_counter()
        print(f"{name:19s} {1e3 * (t1 - t0) / args.draws:7.1f}  "
              f"{1e3 * (t2 - t1) / max(mutants, 1):9.1f}  {h.hexdigest()[:12]}  "
              f"{1e3 * (t3 - t2) / max(len(drawn), 1):7.1f}  {feats.hexdigest()[:12]}  "
              f"{1e3 * (t4 - t3) / max(len(chosen), 1):6.1f}  {src.hexdigest()[:12]}")


if __name__ == "__main__":
    main()
