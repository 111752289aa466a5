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


def test_transfer_model_from_other_workloads(tmp_path):
    from tensortune.database import Database, TuningRecord
    from tensortune.search.tune import transfer_model

    db = Database(tmp_path / "t.db")
    rng = np.random.default_rng(1)
    for w in ("other1", "other2"):
        db.add_workload(w, w, "", 1e6)
        for i in range(40):
            x = rng.random(FEATURES)
            lat = 1e-3 / (0.1 + x[5])  # faster when feature 5 is large
            db.add(TuningRecord(w, "t", "{}", f"{w}-{i}", [lat], features=list(x)))
    assert transfer_model(db, "mine", "other-target") is None   # nothing for that machine
    base = transfer_model(db, "mine", "t")
    assert base is not None and base.trained
    probe = rng.random((50, FEATURES))
    pred = base.predict(probe)
    assert np.corrcoef(pred, probe[:, 5])[0, 1] > 0.7
    own = LGBMModel()
    own.base = base
    assert own.trained and own.predict(probe).shape == (50,)
    # Records from an older feature set (another length) in the same database are left
    # out rather than breaking the stack of feature rows.
    db.add_workload("old", "old", "", 1e6)
    for i in range(40):
        db.add(TuningRecord("old", "t", "{}", f"old-{i}", [1e-3],
                            features=list(rng.random(FEATURES - 2))))
    again = transfer_model(db, "mine", "t")
    assert again is not None and again.predict(probe).shape == (50,)


def test_transferred_model_weight_follows_its_ranking_of_own_measurements():
    from tensortune.cost_model import rank_correlation

    rng = np.random.default_rng(2)
    x = rng.random((300, FEATURES))
    good, bad = LGBMModel(), LGBMModel()
    good.update(x[:200], x[:200, 4])          # ranks this workload's programs well
    bad.update(x[:200], -x[:200, 4])          # ranks them backwards
    for base, expect_used in ((good, True), (bad, False)):
        own = LGBMModel()
        own.base = base
        own.update(x[200:], x[200:, 4] + 0.01 * rng.random(100))
        assert (own.base_weight > 0.3) == expect_used
        if not expect_used:   # a misleading base model changes nothing
            assert own.base_weight == 0.0
            assert np.allclose(own.predict(x[:10]), own.booster.predict(x[:10]))
    assert abs(rank_correlation(np.arange(5.0), np.arange(5.0) ** 3) - 1.0) < 1e-12
    assert rank_correlation(np.arange(5.0), np.ones(5)) == 0.0
