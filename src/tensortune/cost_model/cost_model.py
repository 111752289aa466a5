"""Cost models: predict how fast a candidate will be from its features.

``LGBMModel`` is a LightGBM gradient-boosted regressor on normalised throughput (each
workload's best latency divided by the candidate's, so 1.0 is the best seen; failures
count 0), each row weighted by that throughput (at least 0.05), as Ansor's XGBoost model
weights them: the search needs the fast programs ranked right. LightGBM rather than
XGBoost: a far smaller wheel, and it retrains on a few thousand rows in tens of
milliseconds, so retraining after every batch stays a small part of tuning time.
``RandomModel`` predicts noise, for ablations. Models save and load, and ``fit`` on
other workloads' records gives a warm start (transfer).

Example:
    >>> model = LGBMModel()
    >>> model.update(features, scores)        # all data so far
    >>> model.predict(new_features)
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TensorTuneError


def normalized_throughput(latencies: Sequence[float]) -> np.ndarray:
    """Training targets: best latency / latency (1.0 for the best), 0 for failures."""
    lat = np.asarray(latencies, dtype=np.float64)
    ok = np.isfinite(lat)
    if not ok.any():
        return np.zeros(len(lat))
    return np.where(ok, lat[ok].min() / np.where(ok, lat, 1.0), 0.0)


class CostModel:
    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        """Train on all data seen so far (features, normalised throughput)."""

    def predict(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @property
    def trained(self) -> bool:
        return False

    def save(self, path: str | Path) -> None:
        with open(path, "wb") as f:
            pickle.dump(self, f)

    @staticmethod
    def load(path: str | Path) -> CostModel:
        with open(path, "rb") as f:
            obj = pickle.load(f)
        if not isinstance(obj, CostModel):
            raise TensorTuneError(f"{path} does not hold a tensortune cost model")
        return obj


class RandomModel(CostModel):
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.rng.random(len(x))


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ties broken by position); 0 when either is constant."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


class LGBMModel(CostModel):
    """``base`` is a model trained on other workloads (transfer). Its predictions are mixed
    in with a weight that follows how well it ranks this workload's own measurements
    (half its rank correlation, 0 when it misleads): a base model that knew other
    workloads can steer a search away from this one's best programs."""

    def __init__(self, num_rounds: int = 80, min_rows: int = 16) -> None:
        self.num_rounds = num_rounds
        self.min_rows = min_rows
        self.booster: Any = None
        self.base: LGBMModel | None = None
        self.base_weight = 0.0

    @property
    def trained(self) -> bool:
        return self.booster is not None or (self.base is not None and self.base.trained)

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        if len(x) < self.min_rows:
            return
        import lightgbm as lgb

        params = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 31,
                  "min_data_in_leaf": 2, "verbose": -1, "num_threads": 1, "seed": 0}
        # Rows weighted by their throughput (failures a little): the search only needs
        # the fast programs ranked right, and slow ones otherwise dominate the loss.
        y = np.asarray(y)
        weight = np.maximum(y, 0.05)
        self.booster = lgb.train(params, lgb.Dataset(np.asarray(x), y, weight=weight),
                                 num_boost_round=self.num_rounds)
        if self.base is not None and self.base.trained:
            rho = rank_correlation(self.base.predict(np.asarray(x)), np.asarray(y))
            self.base_weight = 0.5 * max(0.0, rho)

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if self.booster is not None:
            own = np.asarray(self.booster.predict(x))
            if self.base is not None and self.base.trained:
                w = self.base_weight
                return own if w == 0 else (1 - w) * own + w * self.base.predict(x)
            return own
        if self.base is not None and self.base.trained:
            return self.base.predict(x)
        return np.zeros(len(x))


def make(name: str | CostModel | None) -> CostModel:
    if isinstance(name, CostModel):
        return name
    if name in (None, "lgbm", "xgb", "gbt"):
        return LGBMModel()
    if name == "random":
        return RandomModel()
    raise TensorTuneError(f"unknown cost model {name!r}; use 'lgbm' or 'random'")
