"""The transfer model: what a new tuning run's cost model knows before it has measured.

A tuning run's own model learns from its own records; until it has enough, and mixed in
after (``LGBMModel.base``, weighted by how well it ranks this workload's records), a
model trained on other workloads ranks its candidates. It trains on the database's
records of the other workloads measured on this machine, each workload's throughputs
normalised by its own best so that they share one scale, at most ``MAX_ROWS`` of them;
with fewer than ``MIN_ROWS``, on the bundled prior (``cost_model.prior``) instead.

Tried and not kept: training on the database's rows together with the prior's rows of
the workloads the database lacks. In the suite's order (LNM after two convolutions, DEP
after twelve workloads), eight seeds each against the database's rows alone: the best
after 16 trials 1.10x on LNM and 0.89x on DEP, after 64 trials 0.96x and 0.94x, after
256 trials 1.02x and 1.03x (RESULTS.md): too small and too mixed beside the seeds' own
spread to change what a run starts from.

Example:
    >>> base = transfer_model(db, func.structural_hash(), target.fingerprint(), "lnm",
    ...                       vector_bytes=target.vector_bytes)
    >>> None if base is None else base.predict(features)
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from ..cost_model import FEATURES, LGBMModel, normalized_throughput
from ..cost_model.prior import prior_model
from ..database import Database

# The fewest records of other workloads the transfer model trains on; with fewer, the
# bundled prior ranks a new run's first candidates.
MIN_ROWS = 32
# The most it trains on. Training runs before a run's first draw, once per task of a
# whole model, and grows with the rows: reading and training on 47,500 rows of twenty
# workloads took 3.55 s, on the suite's 3,462 0.27 s (RESULTS.md). Each workload keeps
# an equal share, at least ``MIN_SHARE``, so one tuned for thousands of trials does not
# crowd out the rest.
MAX_ROWS = 8192
MIN_SHARE = 256


def database_rows(db: Database, workload: str, target: str, max_rows: int = MAX_ROWS
                  ) -> tuple[list[list[float]], list[float]]:
    """(features, normalised throughputs) of the records of every workload but
    ``workload`` measured on ``target``, each workload's throughputs against its own
    best record. A workload with more than its share of ``max_rows`` (``share``) gives
    its fastest quarter of the share and a fixed random draw of its other records.
    Records whose features came from another version of the feature set (another
    length) are left out: a database outlives the code that filled it; so are
    workloads with no successful record."""
    tables = []
    for stored in db.timings(target, exclude=workload).values():
        y = normalized_throughput([lat for lat, _ in stored])
        if y.any():
            tables.append((stored, y))
    k = share(len(tables), max_rows)
    xs: list[list[float]] = []
    ys: list[float] = []
    for stored, y in tables:
        for i in _sample(y, k):
            ft = json.loads(stored[i][1])
            if len(ft) == FEATURES:
                xs.append(ft)
                ys.append(float(y[i]))
    return xs, ys


def share(workloads: int, max_rows: int = MAX_ROWS) -> int:
    """The most rows each of ``workloads`` workloads gives the transfer model."""
    return max(MIN_SHARE, max_rows // max(1, workloads))


def _sample(y: np.ndarray, k: int) -> list[int]:
    """Indices of ``k`` of the rows scored ``y`` (all of them when there are no more):
    the fastest ``k // 4``, the rest drawn with a fixed seed, in stored order."""
    if len(y) <= k:
        return list(range(len(y)))
    order = np.argsort(-y, kind="stable")
    best = order[: k // 4]
    rest = np.random.default_rng(0).choice(order[k // 4:], k - len(best), replace=False)
    return sorted(int(i) for i in np.concatenate([best, rest]))


def transfer_model(db: Database, workload: str, target: str, name: str | None = None,
                   prior: bool = True, vector_bytes: int = 32, kin: Sequence[str] = ()
                   ) -> LGBMModel | None:
    """A model trained on the database's records of the other workloads for ``target``
    (``database_rows``); with fewer than ``MIN_ROWS`` of them, the bundled prior's shared
    model (``prior_model``: ``workload``, ``name`` and the ``kin`` names left out, trained
    once per process), or None without ``prior``. ``kin``: the names of the other forms
    of the same computation (``search.forms``): the suite's curves measure what a first
    run gets, and that has seen no program of the computation in any form."""
    xs, ys = database_rows(db, workload, target)
    if len(xs) < MIN_ROWS:
        if not prior:
            return None
        return prior_model(frozenset({workload}),
                           frozenset({name, *kin} if name else kin), vector_bytes)
    base = LGBMModel()
    base.update(np.asarray(xs), np.asarray(ys))
    return base
