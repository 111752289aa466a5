"""Features and cost models."""

import numpy as np

import tensortune as tt
from tensortune.cost_model import FEATURES, LGBMModel, RandomModel, extract
from tensortune.examples import SCHEDULES


def test_features_are_finite_and_distinguish_schedules():
    f = tt.workloads.get("gmm", M=64, N=64, K=64)
    a, b = extract(f), extract(SCHEDULES["gmm"](tt.Schedule(f)).func)
    assert a.shape == b.shape == (FEATURES,)
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and not np.allclose(a, b)


def test_lgbm_learns_a_ranking_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((200, FEATURES))
    y = x[:, 3] * 2 + x[:, 7] + 0.05 * rng.random(200)
    m = LGBMModel()
    m.update(x[:150], y[:150])
    pred = m.predict(x[150:])
    rank = np.corrcoef(np.argsort(np.argsort(pred)), np.argsort(np.argsort(y[150:])))[0, 1]
    assert rank > 0.8
    m.save(tmp_path / "m.pkl")
    assert np.allclose(LGBMModel.load(tmp_path / "m.pkl").predict(x[150:]), pred)
    assert RandomModel().predict(x[:5]).shape == (5,)
