"""How much the bundled prior's ranking of a first batch beats random draws, on records
already measured.

Before a tuning run has measured anything, EvolutionarySearch draws a population of
programs from the design spaces, the prior's model (trained on the other workloads'
rows, ``cost_model.prior``) ranks them, and the batch is the best-ranked ones plus a
random share; ReplayTrace's first batch is random draws. Given a database of random
draws of each workload (a replay run), this replays that choice many times by
resampling: a population drawn from the records, the batch picked as the search picks
it, its best normalised throughput, against the best of as many random records. A
ratio above 1 says the prior's first batch is ahead of random in expectation. The
mutations that follow the first draws in a real run are not modelled; the curves
(``tune_suite.py --curves``) measure those.

No machine time is spent after the database is filled.

Example:
    python benchmarks/first_batch.py --db /tmp/replay.db --tune gmm,dense --trials 96
    python benchmarks/first_batch.py --db /tmp/replay.db --prior other_prior.npz
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import tensortune as tt
from tensortune.cost_model.cost_model import normalized_throughput, rank_correlation
from tensortune.cost_model.prior import prior_file, prior_model
from tensortune.database import Database
from tensortune.search import EvolutionarySearch


def first_batch_ratio(pred: np.ndarray, y: np.ndarray, population: int, batch: int,
                      greedy: int, reps: int, rng: np.random.Generator) -> float:
    """Mean best ``y`` of the search's first batch (the ``greedy`` best-predicted of a
    random ``population``, then random others of it) over that of ``batch`` random
    records."""
    ours, rand = [], []
    pop = min(population, len(y))
    for _ in range(reps):
        idx = rng.choice(len(y), size=pop, replace=False)
        order = idx[np.argsort(-pred[idx], kind="stable")]
        rest = rng.choice(order[greedy:], size=min(batch - greedy, pop - greedy),
                          replace=False)
        ours.append(y[np.concatenate([order[:greedy], rest])].max())
        rand.append(y[rng.choice(len(y), size=batch, replace=False)].max())
    return float(np.mean(ours) / np.mean(rand))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--db", required=True, help="a database of random draws (replay runs)")
    ap.add_argument("--tune", default="", help="workloads to replay-tune into --db first")
    ap.add_argument("--trials", type=int, default=96)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--prior", default=None, help="a prior file (default: the bundled one)")
    search = EvolutionarySearch()   # its defaults are the first batch's
    ap.add_argument("--population", type=int, default=search.population)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--eps", type=float, default=search.eps_greedy,
                    help="the batch's random share")
    ap.add_argument("--reps", type=int, default=3000)
    args = ap.parse_args(argv)
    target = tt.Target.host()
    for name in [w for w in args.tune.split(",") if w]:
        tt.tune(tt.workloads.get(name), trials=args.trials, strategy="replay",
                seed=args.seed, database=args.db, retime_top=0, progress=None)
    path = Path(args.prior) if args.prior else prior_file(target.vector_bytes)
    greedy = EvolutionarySearch(eps_greedy=args.eps).greedy_share(args.batch)
    db = Database(args.db)
    rng = np.random.default_rng(0)
    print(f"prior {path}; population {args.population}, batch {args.batch} "
          f"({greedy} ranked, {args.batch - greedy} random)")
    print("| workload | records | rank correlation | first batch / random |")
    print("|---|---|---|---|")
    for wl, name, _, _ in db.workloads():
        recs = db.records(wl, target.fingerprint())
        if len(recs) < args.population or any(not r.features for r in recs):
            print(f"| {name} | {len(recs)} | - | - (fewer records than the population, "
                  "or some without features) |")
            continue
        # This workload's own rows left out, as a tuning run leaves them out.
        model = prior_model(frozenset({wl}), frozenset({name}), path=path)
        if model is None:
            print(f"no prior rows in {path} for this feature set")
            return 1
        x = np.asarray([r.features for r in recs], dtype=np.float64)
        y = normalized_throughput([r.latency for r in recs])
        pred = model.predict(x)
        ratio = first_batch_ratio(pred, y, args.population, args.batch, greedy,
                                  args.reps, rng)
        print(f"| {name} | {len(recs)} | {rank_correlation(pred, y):+.2f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
