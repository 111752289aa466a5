"""How fast the search turns decisions into programs and programs into C: milliseconds
per draw, per mutant and per C source.

Run: python benchmarks/replay_speed.py [--workloads c3d,bmm] [--draws 100] [--emit 16]

For each workload, ``--draws`` candidates are drawn from its design spaces (a full replay
of a trace plus the post-processor, as EvolutionarySearch does for every fresh member of
its population), then half of them mutated and replayed, with a fixed seed, so two
versions of the code replay the same decisions; then the C of the first ``--emit`` drawn
programs is written (lowering and the emitter, as for every candidate a search builds).
Prints milliseconds per draw, per mutant and per C source, and a hash of the programs
drawn and of the C: equal hashes mean the same programs and the same C. CPU seconds on a
shared host move by 10-30% from run to run; for a small difference, run it under
``valgrind --tool=callgrind`` and compare instruction counts.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensortune as tt  # noqa: E402
from tensortune.codegen import Target  # noqa: E402
from tensortune.measure.builder import write_c  # noqa: E402
from tensortune.search.mutator import mutate  # noqa: E402
from tensortune.search.search_strategy import SearchContext  # noqa: E402
from tensortune.space import PostOrderApply  # noqa: E402

SUITE = "gmm,dense,c2d,bmm,c1d,c3d,grp,dil,dep,t2d,nrm,smx,lnm,convlayer,tbg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=SUITE)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--emit", type=int, default=16)
    args = ap.parse_args()
    target = Target.host()
    gen = PostOrderApply.default(target)
    print("workload  ms/draw  ms/mutant  programs      ms/C  C")
    for name in args.workloads.split(","):
        func = tt.workloads.get(name)
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
        src = hashlib.sha256()
        chosen = [c for c in cands if c is not None][: args.emit]
        for c in chosen:
            source, error = write_c(lambda c=c: c.sch.func, target)   # as the builder does
            src.update((source or error or "").encode())
        t3 = time.perf_counter()
        print(f"{name:9s} {1e3 * (t1 - t0) / args.draws:7.1f}  "
              f"{1e3 * (t2 - t1) / max(mutants, 1):9.1f}  {h.hexdigest()[:12]}  "
              f"{1e3 * (t3 - t2) / max(len(chosen), 1):6.1f}  {src.hexdigest()[:12]}")


if __name__ == "__main__":
    main()
