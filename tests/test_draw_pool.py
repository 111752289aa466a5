"""Proposals drawn in worker processes (``DrawPool``): the same programs as drawn here, a
correct tuned kernel, and a fall-back to drawing here when a worker is lost."""

import random
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.cost_model.cost_model import RandomModel
from tensortune.database import Database
from tensortune.measure import LocalBuilder, LocalRunner
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.search import EvolutionarySearch, SearchContext
from tensortune.search.draw_pool import DrawPool, PoolError, Shares
from tensortune.search.search_strategy import ReplayTrace
from tensortune.search.tuning_task import TuningTask
from tensortune.space import PostOrderApply, ScheduleFn

FUNC = tt.workloads.get("gmm", M=24, N=40, K=12)
GEN = PostOrderApply.default(tt.Target.host())
SPACES = GEN.generate(FUNC)


class _ScoredAtRandom(RandomModel):
    """Random scores that count as trained, so the evolution runs its generations."""

    @property
    def trained(self) -> bool:
        return True


def _propose(strategy, pool, seed, n):
    ctx = SearchContext(FUNC, SPACES, GEN, rng=random.Random(seed))
    ctx.pool = pool
    strategy.init(ctx)
    return strategy.generate(n)


@pytest.mark.parametrize("make", [ReplayTrace,
                                  lambda: EvolutionarySearch(_ScoredAtRandom(3), population=12,
                                                             generations=2)],
                         ids=["replay", "evolutionary"])
def test_a_pool_proposes_the_programs_drawn_here(make):
    here = _propose(make(), None, 11, 8)
    with DrawPool(FUNC, SPACES, GEN.postprocs, workers=2) as pool:
        there = _propose(make(), pool, 11, 8)
        procs = list(pool._procs)
    # The workers ended by themselves when closed (not killed), with status 0.
    assert [p.returncode for p in procs] == [0, 0]
    assert len(here) == 8
    assert [c.program for c in there] == [c.program for c in here]
    assert [c.decisions for c in there] == [c.decisions for c in here]
    assert [c.niche for c in there] == [c.niche for c in here]
    assert all(np.array_equal(a.features(), b.features()) for a, b in zip(here, there))
    # A pooled candidate arrives as its trace and is replayed only when built.
    assert all(c._sch is None for c in there)
    assert all(c.sch.func.structural_hash() == c.program for c in there)
    ins = random_inputs(FUNC)
    check_close(tt.build(there[0].sch)(*ins), evaluate(FUNC, ins)[0])


def test_tuning_with_draw_workers_returns_a_correct_kernel(tmp_path):
    res = tt.tune(FUNC, trials=24, database=tmp_path / "t.db", seed=2, draw_workers=2,
                  retime_top=0, sched_variants=0, load_guard=False)
    assert res.trials == 24 and res.record is not None
    ins = random_inputs(FUNC)
    check_close(res.kernel(*ins), evaluate(FUNC, ins)[0])


def test_a_closed_task_draws_here(tmp_path):
    task = TuningTask(FUNC, Database(tmp_path / "t.db"), tt.Target.host(), seed=2,
                      draw_workers=2, load_guard=False)
    batch = task.strategy.generate(4)
    assert len(batch) == 4 and all(c._sch is None and c.request for c in batch)
    task.close()
    assert task.strategy.ctx.pool is None
    later = task.strategy.generate(4)
    assert len(later) == 4 and all(c._sch is not None for c in later)


def test_a_lost_worker_leaves_the_search_drawing_here():
    with DrawPool(FUNC, SPACES, GEN.postprocs, workers=2) as pool:
        first = _propose(ReplayTrace(), pool, 5, 4)
        for proc in pool._procs:
            proc.kill()
            proc.wait()
        ctx = SearchContext(FUNC, SPACES, GEN, rng=random.Random(5))
        ctx.pool = pool
        strategy = ReplayTrace()
        strategy.init(ctx)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = strategy.generate(4)
    assert ctx.pool is None
    assert any("draw worker stopped" in str(w.message) for w in caught)
    # Drawn here with the same seeds: the same programs as the pool drew before.
    assert [c.program for c in again] == [c.program for c in first]
    assert all(c._sch is not None for c in again)


def test_a_space_that_cannot_be_pickled_is_drawn_here(tmp_path):
    class LocalPostproc:   # a class local to a function cannot be pickled
        def apply_all(self, sch, decisions=None):
            return None

    with pytest.raises(PoolError, match="cannot be sent to a worker"):
        DrawPool(FUNC, SPACES, [LocalPostproc()], workers=2)

    def template(sch):
        blk = sch.get_block("C")
        i, _, _ = sch.get_loops(blk)
        sch.parallel(i)

    space = ScheduleFn(template, postprocs=[LocalPostproc()])
    task = TuningTask(FUNC, Database(tmp_path / "t.db"), tt.Target.host(), space=space,
                      draw_workers=2, load_guard=False)
    assert task.strategy.ctx.pool is None


def test_the_workers_write_the_c_written_here():
    from tensortune.codegen import emit_c, lower

    target = tt.Target.host()
    with DrawPool(FUNC, SPACES, GEN.postprocs, workers=2) as pool:
        cands = _propose(ReplayTrace(), pool, 7, 5)
        assert all(c.request is not None and not c.trace_json for c in cands)
        items = [(c.request, c.program) for c in cands]
        emitted = pool.emit(items, target)
        # From the traces the workers sent back: the same C again.
        again = pool.emit([trace for _, _, _, trace in emitted] + ["not a trace"], target)
        # A request said to draw another program: an error, not that program's C.
        wrong = pool.emit([(cands[0].request, cands[1].program)], target)
    assert len(emitted) == 5 and len(again) == 6
    for c, (source, error, seconds, trace), (source2, _, _, trace2) in zip(cands, emitted,
                                                                            again):
        assert error is None and seconds > 0
        assert source == emit_c(lower(c.sch.func), target) == source2
        assert tt.Schedule.from_trace(FUNC, trace).func.structural_hash() == c.program
        assert trace2 == trace
    source, error, _, _ = again[-1]
    assert source is None and "malformed trace JSON" in error
    [(source, error, _, _)] = wrong
    assert source is None and "no longer draws program" in error


def test_a_candidate_whose_c_fails_in_a_worker_is_a_codegen_record(tmp_path):
    task = TuningTask(FUNC, Database(tmp_path / "t.db"), tt.Target.host(), seed=3,
                      draw_workers=2, load_guard=False)
    try:
        batch = task.strategy.generate(3)
        good = batch[1].sch.trace.as_json()      # replayed here from its request
        batch[1]._sch = None
        batch[1].trace_json = good.replace('"split"', '"no_such_primitive"')
        with LocalRunner() as runner:
            builder = LocalBuilder(task.target)
            recs = task._measure(builder, runner, batch, task._emit(batch, builder.target),
                                 None)
    finally:
        task.close()
    assert [r.error_kind for r in recs] == [None, "codegen", None]
    assert "no_such_primitive" in recs[1].error_msg
    # The records keep the traces the workers drew, and those replay to the programs.
    for c, r in zip([batch[0], batch[2]], [recs[0], recs[2]]):
        assert r.trace == c.trace_json
        assert tt.Schedule.from_trace(task.func, r.trace).func.structural_hash() == c.program


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 120), st.integers(1, 4), st.lists(st.integers(0, 3), max_size=400))
def test_shares_deal_every_item_once(n, workers, order):
    shares = Shares(n, workers)
    size = -(-n // workers)
    dealt: list[int] = []
    first: dict[int, range] = {}
    # Workers ask in any order; then each asks until nothing is left.
    for w in [w % workers for w in order] + [w for w in range(workers) for _ in range(n + 1)]:
        got = shares.next(w)
        if got is None:
            continue
        assert len(got) >= 1
        first.setdefault(w, got)
        dealt += list(got)
    assert sorted(dealt) == list(range(n))
    assert all(shares.next(w) is None for w in range(workers))
    # A worker's first chunk is the front of its own share, or from another's share
    # (its own was taken while it had not asked yet).
    for w, got in first.items():
        assert got.start == w * size or not w * size <= got.start < (w + 1) * size


def test_a_failing_request_raises_and_leaves_the_pool_usable():
    with DrawPool(FUNC, SPACES, GEN.postprocs, workers=2) as pool:
        good = [(0, {}, [], seed) for seed in range(6)]
        before = pool.draw(good)
        # Space 99 does not exist: an error in the worker other than an illegal decision.
        with pytest.raises(RuntimeError, match="drawing a candidate in a worker failed"):
            pool.draw(good[:3] + [(99, {}, [], 1)] + good[3:])
        # Every reply of the failed request was read: the next one gets its own.
        after = pool.draw(good)
    assert [d.program for d in after] == [d.program for d in before]


def test_workers_leave_on_their_own_when_closed_or_hung_up_on():
    """A closed pool's workers exit by themselves with status 0 (``os._exit``, which skips
    freeing the replay cache), not killed on the close's timeout; a worker whose caller
    hangs up without a word (a caller that died) leaves too, instead of lingering."""
    pool = DrawPool(FUNC, SPACES, GEN.postprocs, workers=2)
    assert len(_propose(ReplayTrace(), pool, 5, 4)) == 4   # the workers hold a cache now
    procs = list(pool._procs)
    pool.close()
    assert [p.returncode for p in procs] == [0, 0]        # a kill would read -9

    pool = DrawPool(FUNC, SPACES, GEN.postprocs, workers=2)
    assert len(_propose(ReplayTrace(), pool, 6, 4)) == 4
    procs, conns = list(pool._procs), list(pool._conns)
    pool._procs, pool._conns = [], []
    for conn in conns:
        conn.close()
    assert [p.wait(30) for p in procs] == [0, 0]
