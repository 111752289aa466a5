"""How well the cost model ranks programs it has not seen, on records already measured.

For each workload, the records of one tuning database train the model and the records of
another (a different run of the same workload) test it; a second split trains on the first
half of one run and tests on the second half. Two more splits, averaged over workloads:
"online" trains on the first h records of the test run and tests on the next 64, for
h = 64, 96, ..., 192 (what the search asks of the model after each batch), and "other
workloads" trains on every other workload of the test run and tests on this one (the
transferred model a new workload starts from). Scores:

- Spearman rank correlation of predicted and measured throughput on the test records;
- top-k: the best measured latency among the test records divided by the best latency
  among the k the model ranks highest (1.0: the model's top k hold the best program),
  TenSet's metric for a model that picks what to measure.

No machine time is spent: the programs are re-derived from their traces (their features
are recomputed with the current ``tensortune.cost_model.extract``), the labels are the
latencies stored.

Example:
    python benchmarks/cost_model_eval.py benchmarks/out/a.db benchmarks/out/b.db
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

import tensortune as tt
from tensortune.cost_model import LGBMModel, extract, normalized_throughput
from tensortune.cost_model.cost_model import rank_correlation
from tensortune.database import Database
from tensortune.search.tune import replay, tuned_func


def dataset(db: Database, name: str, target: tt.Target) -> tuple[np.ndarray, np.ndarray]:
    """Features and latencies (inf for failures) of a workload's records, in the order
    they were measured."""
    func = tuned_func(tt.workloads.get(name), db, target)
    recs = sorted(db.records(func.structural_hash(), target.fingerprint()),
                  key=lambda r: r.created)
    feats = [extract(replay(func, r).func) for r in recs]
    return np.asarray(feats), np.asarray([r.latency for r in recs])


Data = tuple[np.ndarray, np.ndarray]


def scores(train: Data, test: Data, ks: tuple[int, ...] = (1, 5, 10)) -> list[float]:
    """[spearman, top-k for each k] of a model trained on ``train``, tested on ``test``."""
    model = LGBMModel()
    model.update(train[0], normalized_throughput(train[1]))
    pred = model.predict(test[0])
    ok = np.isfinite(test[1])
    rho = rank_correlation(pred[ok], 1.0 / test[1][ok])
    order = np.argsort(-pred)
    best = test[1].min()
    return [rho] + [best / test[1][order[:k]].min() for k in ks]


def online(d: Data, first: int = 64, step: int = 32, window: int = 64) -> list[list[float]]:
    """Scores of a model trained on the first h records, tested on the next ``window``."""
    return [scores((d[0][:h], d[1][:h]), (d[0][h:h + window], d[1][h:h + window]))
            for h in range(first, len(d[0]) - 15, step)]


def other_workloads(sets: dict[str, Data], name: str) -> list[float]:
    """Scores of a model trained on every workload but ``name``, tested on ``name``. Each
    workload's latencies are put on one scale first, as relative to its own best (1.0
    for the best, inf for failures), so the pooled labels are the per-workload
    normalised throughputs, as in ``transfer_model``."""
    rest = [d for n, d in sets.items() if n != name]
    x = np.concatenate([d[0] for d in rest])
    with np.errstate(divide="ignore"):
        rel = np.concatenate([1.0 / normalized_throughput(d[1]) for d in rest])
    return scores((x, rel), sets[name])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("train_db")
    p.add_argument("test_db")
    p.add_argument("--workloads", default=",".join(tt.workloads.names()))
    args = p.parse_args(argv)
    target = tt.Target.host()
    a, b = Database(args.train_db), Database(args.test_db)
    cols = ["spearman", "top1", "top5", "top10"]
    print(f"{'workload':10} {'split':11} " + " ".join(f"{c:>8}" for c in cols))
    across: list[list[float]] = []
    halves: list[list[float]] = []
    later: list[list[float]] = []
    tests: dict[str, Data] = {}
    for name in args.workloads.lower().split(","):
        try:
            db_ = dataset(b, name, target)
            da = db_ if args.train_db == args.test_db else dataset(a, name, target)
        except Exception as e:  # noqa: BLE001 - a database without this workload
            print(f"{name.upper():10} skipped: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        tests[name] = db_
        later += online(db_)
        s1 = scores(da, db_)
        n = len(db_[0]) // 2
        s2 = scores((db_[0][:n], db_[1][:n]), (db_[0][n:], db_[1][n:]))
        across.append(s1)
        halves.append(s2)
        for split, s in (("across runs", s1), ("halves", s2)):
            print(f"{name.upper():10} {split:11} " + " ".join(f"{v:8.3f}" for v in s))
    transfer = [other_workloads(tests, n) for n in tests] if len(tests) > 1 else []
    for split, rows in (("across runs", across), ("halves", halves), ("online", later),
                        ("other wkls", transfer)):
        if rows:
            mean = [statistics.mean(col) for col in zip(*rows)]
            print(f"{'MEAN':10} {split:11} " + " ".join(f"{v:8.3f}" for v in mean))


if __name__ == "__main__":
    main()
