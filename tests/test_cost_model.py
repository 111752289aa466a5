"""Features and cost models."""

import dataclasses

import numpy as np
import pytest

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
    from tensortune.cost_model.prior import prior_model
    from tensortune.database import Database, TuningRecord
    from tensortune.search.transfer import database_rows, transfer_model

    db = Database(tmp_path / "t.db")
    rng = np.random.default_rng(1)
    for w in ("other1", "other2"):
        db.add_workload(w, w, "", 1e6)
        for i in range(40):
            x = rng.random(FEATURES)
            lat = 1e-3 / (0.1 + x[5])  # faster when feature 5 is large
            db.add(TuningRecord(w, "t", "{}", f"{w}-{i}", [lat], features=list(x)))
    # Nothing for that machine: the bundled prior, or nothing without it.
    assert transfer_model(db, "mine", "other-target", prior=False) is None
    assert transfer_model(db, "mine", "other-target") is prior_model(frozenset({"mine"}),
                                                                     frozenset())
    # The rows of the computation's other forms (``kin``) are left out like its own.
    kin = transfer_model(db, "mine", "other-target", "gmm", kin=["bmm"])
    assert kin is prior_model(frozenset({"mine"}), frozenset({"gmm", "bmm"}))
    assert kin is not prior_model(frozenset({"mine"}), frozenset({"gmm"}))
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
    # The rows: the other workloads' records only, a failed one scored 0, each
    # workload's best 1.
    db.add_workload("mine", "mine", "", 1e6)
    db.add(TuningRecord("mine", "t", "{}", "mine-0", [1e-3], features=list(probe[0])))
    db.add(TuningRecord("other1", "t", "{}", "other1-bad", [], "wrong_result",
                        features=list(probe[1])))
    xs, ys = database_rows(db, "mine", "t")
    assert len(xs) == len(ys) == 81 and list(probe[0]) not in xs
    assert ys[xs.index(list(probe[1]))] == 0.0 and max(ys) == 1.0 and min(ys) == 0.0


def test_transfer_rows_keep_each_workloads_share_with_its_fastest(tmp_path, monkeypatch):
    from tensortune.database import Database, TuningRecord
    from tensortune.search import transfer

    db = Database(tmp_path / "t.db")
    rng = np.random.default_rng(3)
    lats = {}
    for w, n in (("big", 200), ("small", 12)):
        db.add_workload(w, w, "", 1e6)
        for i in range(n):
            lat = float(rng.uniform(1e-3, 9e-3))
            x = [lat, float(i)] + list(rng.random(FEATURES - 2))
            lats[(w, i)] = lat
            db.add(TuningRecord(w, "t", "{}", f"{w}-{i}", [lat], features=x))
    monkeypatch.setattr(transfer, "MIN_SHARE", 8)
    assert transfer.share(2, 100) == 50 and transfer.share(40, 100) == 8
    xs, ys = transfer.database_rows(db, "mine", "t", max_rows=100)
    big = sorted(lats[("big", i)] for i in range(200))
    got_big = [x[0] for x in xs if x[0] in big]
    # 50 of the 200: the 12 fastest among them, each scored against the best of all 200;
    # the small workload, under its share, whole.
    assert len(xs) == 62 and len(got_big) == 50 and set(big[:12]) <= set(got_big)
    for x, y in zip(xs, ys):
        if x[0] in big:
            assert y == pytest.approx(big[0] / x[0])
    assert sum(1 for x in xs if x[0] not in big) == 12
    # The draw is fixed: the same rows every time, in stored order.
    assert transfer.database_rows(db, "mine", "t", max_rows=100) == (xs, ys)
    ids = [int(x[1]) for x in xs if x[0] in big]
    assert ids == sorted(ids)


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


def _update_row(func):
    """The memory features of the matmul's update (the store whose loads touch most)."""
    from tensortune.cost_model.features import BASE, MEMORY_NAMES, store_rows

    rows = store_rows(func)
    row = max(rows, key=lambda r: r[BASE + MEMORY_NAMES.index("loaded")])
    return {n: row[BASE + i] for i, n in enumerate(MEMORY_NAMES)}


def _split_gmm(f, *inner: int):
    """A GMM schedule with its loops i, j (and k, given a third factor) split by the
    given inner factors; returns the schedule, the block and each loop's parts."""
    sch = tt.Schedule(f)
    c = sch.get_block("C")
    loops = sch.get_loops(c)
    parts = [sch.split(lp, [None, n]) for lp, n in zip(loops, inner)]
    return sch, c, parts + [[lp] for lp in loops[len(inner):]]


def test_register_tile_features_read_the_accumulator_tile():
    f = tt.workloads.get("gmm", M=64, N=64, K=64)
    sch, c, [(io, ii), (jo, ji), [k]] = _split_gmm(f, 4, 8)
    sch.reorder(io, jo, k, ii, ji)
    sch.decompose_reduction(c, k)
    sch.unroll(ii)
    sch.vectorize(ji)
    m = _update_row(sch.func)
    assert m["reduction"] == 1.0    # the k loop around the tile
    # The 4 x 8 tile: 32 accumulators; its loads touch 4 of A, 8 of B and the 32 slots.
    assert m["accumulators"] == np.log2(1 + 32)
    assert m["loaded"] == np.log2(1 + 4 + 8 + 32)
    assert m["flops_per_load"] == 32 * 2 / 44
    # Unscheduled, the innermost loop is the reduction itself and no run is unrolled:
    # one accumulator, reading one element of A, one of B and its slot.
    plain = _update_row(f)
    assert plain["accumulators"] == np.log2(2) and plain["loaded"] == np.log2(4)


def test_cache_traffic_falls_with_tiling_and_busy_counts_idle_cores():
    from tensortune.codegen import Target

    f = tt.workloads.get("gmm", M=256, N=256, K=256)
    tiled, _, [(io, ii), (jo, ji), (ko, ki)] = _split_gmm(f, 16, 16, 16)
    tiled.reorder(io, jo, ko, ii, ki, ji)
    plain, blocked = _update_row(f), _update_row(tiled.func)
    # Untiled, each row of B (1 KiB) is re-read for every (i, k): a 256 KiB B does not
    # stay in a 32 KiB L1. Tiled by 16, the three 1 KiB tiles do.
    assert blocked["l1_bytes"] < plain["l1_bytes"] - 2
    assert blocked["footprint"] == plain["footprint"]   # the same data in all

    par = tt.Schedule(tt.workloads.get("gmm", M=48, N=64, K=64))
    i = par.get_loops(par.get_block("C"))[0]
    io, ii = par.split(i, [3, None])
    par.parallel(io)
    cores = Target.host().cores
    expect = 3 / (cores * -(-3 // cores))
    assert _update_row(par.func)["busy"] == expect


def test_cost_model_eval_splits_score_a_learnable_workload():
    from bench_modules import load

    ev = load("cost_model_eval")
    online, other_workloads = ev.online, ev.other_workloads
    rng = np.random.default_rng(3)

    def run(scale: float):
        x = rng.random((160, FEATURES))
        return x, scale * 1e-3 / (0.2 + x[:, 6])   # faster when feature 6 is large

    a = run(1.0)
    rows = online(a)
    assert [len(r) for r in rows] == [4, 4, 4]        # h = 64, 96, 128
    assert min(r[0] for r in rows) > 0.6              # Spearman on the next records
    # Another workload's latencies are 5x as long; normalised per workload, the same
    # feature still ranks this one.
    pooled = other_workloads({"a": a, "b": run(5.0), "c": run(0.5)}, "a")
    assert pooled[0] > 0.6 and all(0 < t <= 1 for t in pooled[1:])


def test_bundled_prior_leaves_out_the_tuned_workload_and_other_feature_sets(tmp_path):
    from tensortune.cost_model.prior import PRIOR_FILE, bundled_rows, prior_model, write_prior

    rng = np.random.default_rng(3)
    groups = [(h, name, [(list(rng.random(FEATURES)), float(rng.random()) + 0.1)
                         for _ in range(n)])
              for h, name, n in (("h1", "gmm", 30), ("h2", "c2d", 20), ("h3", "gmm", 10))]
    groups.append(("h4", "old", [(list(rng.random(FEATURES - 3)), 1.0)] * 5))
    path = tmp_path / "p.npz"
    assert write_prior(groups, "test machine", path) == 60       # "old" rows dropped
    x, y = bundled_rows(path=path)
    assert x.shape == (60, FEATURES) and y.max() == 1.0 and (y > 0).all()
    assert len(bundled_rows(exclude_names={"gmm"}, path=path)[0]) == 20
    assert len(bundled_rows(exclude_hashes={"h1"}, path=path)[0]) == 30
    assert bundled_rows(exclude_names={"gmm", "c2d"}, path=path) is None
    np.savez(path, x=np.zeros((4, FEATURES + 1)), y=np.zeros(4), workload=np.array(["a"] * 4),
             name=np.array(["a"] * 4))
    assert bundled_rows(path=path) is None           # another feature set: not used
    # The shipped file holds the current feature set and trains a model.
    rows = bundled_rows(path=PRIOR_FILE)
    assert rows is not None and rows[0].shape[1] == FEATURES and len(rows[0]) > 1000
    model = prior_model(frozenset(), frozenset({"gmm"}))
    assert model is not None and model.trained
    # One file per SIMD width; a width without one gets no prior rather than another's.
    from tensortune.cost_model.prior import prior_file
    wide = bundled_rows(path=prior_file(64))
    assert wide is not None and len(wide[0]) > 1000 and len(wide[0]) != len(rows[0])
    m512 = prior_model(frozenset(), frozenset({"gmm"}), vector_bytes=64)
    assert m512 is not None and m512 is not model
    assert prior_model(frozenset(), frozenset({"gmm"}), vector_bytes=16) is None
    # Workloads the bundle does not hold share one model (a model's many subgraphs).
    assert prior_model(frozenset({"x1"}), frozenset({"my_op"})) is \
        prior_model(frozenset({"x2"}), frozenset({"other_op"}))


def test_a_fresh_tuning_run_ranks_its_first_batch_with_the_prior(tmp_path):
    import tensortune as tt
    from tensortune.database import Database
    from tensortune.search.tuning_task import TuningTask

    f = tt.workloads.get("gmm", M=32, N=32, K=16)
    # An AVX2-width target, so the test holds on hosts of any width (each width has its
    # own bundled file, and widths without one get none).
    avx2 = dataclasses.replace(tt.Target.host(), vector_bytes=32)
    with_prior = TuningTask(f, Database(tmp_path / "a.db"), avx2, seed=1)
    model = with_prior.strategy.model
    assert model.base is not None and model.trained and model.booster is None
    without = TuningTask(f, Database(tmp_path / "b.db"), avx2, seed=1, prior=False)
    assert without.strategy.model.base is None and not without.strategy.model.trained


def test_first_batch_ratio_rewards_a_ranking_that_knows_the_best():
    """benchmarks/first_batch.py: a predictor equal to the truth picks the population's
    best (ahead of random), one that is its opposite picks the worst (behind), and one
    that knows nothing is random (about even)."""
    from bench_modules import load

    ratio = load("first_batch").first_batch_ratio
    rng = np.random.default_rng(5)
    y = rng.random(96) ** 4        # a long tail of slow programs, as measured ones have
    args = dict(population=48, batch=16, reps=2000)
    assert ratio(y, y, greedy=13, rng=rng, **args) > 1.05
    assert ratio(-y, y, greedy=16, rng=rng, **args) < 0.8
    assert abs(ratio(rng.random(96), y, greedy=13, rng=rng, **args) - 1.0) < 0.03
