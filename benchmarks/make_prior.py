"""Rebuild the cost model's bundled prior for this machine's SIMD width
(``src/tensortune/cost_model/prior_<bits>.npz``) from tuning databases of the benchmark
suite.

    python benchmarks/make_prior.py benchmarks/out/suite-<stamp>.db [more.db ...]

Every record of this machine's target in each database becomes a row (its features and
its throughput relative to the best of its workload in the same database). Run it after
a change to the feature set: until then the old file holds another feature length and
is not used.
"""

from __future__ import annotations

import argparse
import sys

from tensortune.codegen import Target
from tensortune.cost_model.prior import prior_file, write_prior
from tensortune.database import Database


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("databases", nargs="+")
    args = ap.parse_args(argv)
    target = Target.host()
    groups = []
    for path in args.databases:
        db = Database(path)
        for wl, name, _, _ in db.workloads():
            recs = db.records(wl, target.fingerprint())
            groups.append((wl, name, [(r.features, r.latency) for r in recs]))
    path = prior_file(target.vector_bytes)
    n = write_prior(groups, str(target), path)
    print(f"{n} rows from {len(groups)} workload runs -> {path} "
          f"({path.stat().st_size / 1024:.0f} KiB)")
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
