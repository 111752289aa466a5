"""VerifyRegisterTile: a drawn program whose register tile cannot live in registers is
rejected, and the search draws another."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.schedule.tree import iter_blocks
from tensortune.search.search_strategy import ReplayTrace, SearchContext
from tensortune.space import (
    ParallelVectorizeUnroll,
    PostOrderApply,
    VerifyRegisterTile,
    sample,
)


def _tiled_gmm(rows: int, cols: int, vectorize: bool = True) -> tt.Schedule:
    """GMM 64^3 with a ``rows`` x ``cols`` register tile: S S R S S."""
    sch = tt.Schedule(tt.workloads.get("gmm", M=64, N=64, K=64))
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, cols])
    sch.reorder(i0, j0, k, i1, j1)
    wb = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(wb, j0)
    sch.unroll(i1)
    if vectorize:
        sch.vectorize(j1)
    return sch


def _checked(tgt: tt.Target) -> PostOrderApply:
    """The default space, whose last post-processor is the check."""
    gen = PostOrderApply.default(tgt)
    assert isinstance(gen.postprocs[-1], VerifyRegisterTile)
    return gen


def _most_vectors(check: VerifyRegisterTile, sch: tt.Schedule) -> int:
    return max(check.tile_vectors(b, loops) for b, loops in iter_blocks(sch.func.body))


def test_tile_is_counted_in_vectors_of_the_loop_width():
    check = VerifyRegisterTile(max_vectors=64, lanes=16)
    assert _most_vectors(check, _tiled_gmm(8, 64)) == 32      # 8 rows x 4 vectors
    assert _most_vectors(check, _tiled_gmm(4, 8)) == 4         # 8 columns: half vectors
    assert _most_vectors(check, _tiled_gmm(2, 56)) == 8        # 56 = 16 + 16 + 16 + 8
    assert _most_vectors(check, _tiled_gmm(2, 16, vectorize=False)) == 32  # scalars


def test_a_tile_over_the_budget_is_rejected_naming_the_block():
    sch = _tiled_gmm(8, 64)
    VerifyRegisterTile(max_vectors=32, lanes=16).apply_all(sch)  # fits: nothing raised
    with pytest.raises(tt.ScheduleError, match=r"block 'C'.*32 vector accumulators.*16"):
        VerifyRegisterTile(max_vectors=16, lanes=16).apply_all(sch)


def test_a_block_without_a_local_accumulator_has_no_tile():
    sch = tt.Schedule(tt.workloads.get("gmm", M=64, N=64, K=64))  # writes C directly
    assert _most_vectors(VerifyRegisterTile(max_vectors=1, lanes=16), sch) == 0


def test_a_checked_space_draws_only_tiles_that_fit():
    """C2D's four spatial axes admit tiles of hundreds of vectors; without the check
    some draws hold one, with it none does, and it rejects exactly those draws."""
    tgt = tt.Target.host()
    func = tt.workloads.get("c2d")
    gen = _checked(tgt)
    check = gen.postprocs[-1]
    assert check.max_vectors == 2 * tgt.vector_registers
    spaces = gen.generate(func)
    rng = random.Random(0)
    unchecked, kept = [], []
    for _ in range(40):
        space = spaces[rng.randrange(len(spaces))]
        seed = rng.randrange(1 << 30)
        plain = sample(func, space, seed, [ParallelVectorizeUnroll(cores=tgt.cores)])
        assert plain is not None
        unchecked.append(_most_vectors(check, plain))
        sch = sample(func, space, seed, gen.postprocs)
        if sch is not None:
            kept.append(sch)
    assert max(unchecked) > check.max_vectors, "no draw to reject: the test shows nothing"
    assert kept and all(_most_vectors(check, s) <= check.max_vectors for s in kept)
    assert len(kept) == sum(v <= check.max_vectors for v in unchecked)


def test_search_fills_its_batch_from_draws_that_fit():
    tgt = tt.Target.host()
    func = tt.workloads.get("c2d", C=16, K=32, H=14, W=14)
    gen = _checked(tgt)
    check = gen.postprocs[-1]
    rejected = 0

    def counted(fn):
        def run(*args):
            nonlocal rejected
            try:
                return fn(*args)
            except tt.ScheduleError:
                rejected += 1
                raise
        return run

    # Rejected during the replay or at the end.
    check.check_partial = counted(check.check_partial)  # type: ignore[method-assign]
    check.apply_all = counted(check.apply_all)          # type: ignore[method-assign]
    strategy = ReplayTrace()
    strategy.init(SearchContext(func, gen.generate(func), gen, set(), random.Random(3)))
    batch = strategy.generate(6)
    assert rejected > 0, "no draw was rejected: the test shows nothing"
    assert len(batch) == 6
    assert all(_most_vectors(check, c.sch) <= check.max_vectors for c in batch)
    ins = random_inputs(func)
    check_close(tt.build(batch[0].sch)(*ins), evaluate(func, ins)[0])


class _AtTheEnd:
    """The check as a plain post-processor: run once, after the whole replay."""

    def __init__(self, check: VerifyRegisterTile) -> None:
        self.check = check

    def apply_all(self, sch: tt.Schedule, decisions: list | None = None) -> tt.Schedule:
        return self.check.apply_all(sch, decisions)


class _Counted(ParallelVectorizeUnroll):
    """ParallelVectorizeUnroll that counts the draws it sees."""

    calls = 0

    def apply_all(self, sch: tt.Schedule, decisions: list | None = None) -> tt.Schedule:
        _Counted.calls += 1
        return super().apply_all(sch, decisions)


def _fewest_vectors(check: VerifyRegisterTile, sch: tt.Schedule) -> int:
    """The most vectors of any tile of ``sch`` counted as ``check_partial`` counts them:
    its elements in whole vectors, however its loops are vectorized."""
    return max(-(-check._tile(b, loops)[0] // check.lanes)
               for b, loops in iter_blocks(sch.func.body))


_C3D = tt.workloads.get("c3d", N=1, C=16, K=32, D=6, H=10, W=10)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, (1 << 30) - 1), st.sampled_from(["c2d", "c3d", "dense4"]))
def test_the_check_during_the_replay_rejects_what_it_rejects_at_the_end(seed, name):
    """``sample`` runs ``check_partial`` during the replay: a draw is rejected exactly
    when the check at the end rejects it, a draw kept is the same program either way,
    and a draw whose tile holds too many elements for the registers however it is
    vectorized stops before the post-processors. Dense over 4 rows draws LowReuseDot's
    space, whose tile is vectorized only by the post-processors."""
    tgt = tt.Target.host()
    func = {"c2d": tt.workloads.get("c2d"), "c3d": _C3D,
            "dense4": tt.workloads.get("dense", M=4, K=128, N=64)}[name]
    gen = _checked(tgt)
    check = gen.postprocs[-1]
    pvu = _Counted(cores=tgt.cores)
    for space in gen.generate(func):
        calls = _Counted.calls
        early = sample(func, space, seed, [pvu, check])
        ran = _Counted.calls - calls
        late = sample(func, space, seed, [pvu, _AtTheEnd(check)])
        assert (early is None) == (late is None)
        if early is not None:
            assert early.func.structural_hash() == late.func.structural_hash()
            continue
        plain = sample(func, space, seed, [pvu])
        if plain is not None and _fewest_vectors(check, plain) > check.max_vectors:
            assert ran == 0     # stopped in the replay, before the post-processors


def test_the_check_during_the_replay_stops_doomed_draws():
    """MultiLevelTiling vectorizes a tile's innermost loop before its write-back, so the
    check counts the suite's C3D tiles (rows of 56 in whole vectors and a half) during
    the replay as it would at the end: every draw it rejects stops before the
    post-processors run."""
    tgt = tt.Target.host()
    gen = _checked(tgt)
    pvu = _Counted(cores=tgt.cores)
    func = tt.workloads.get("c3d")
    spaces = gen.generate(func)
    stopped, at_end = 0, 0
    for seed in range(40):
        space = spaces[seed % len(spaces)]
        calls = _Counted.calls
        if sample(func, space, seed, [pvu, gen.postprocs[-1]]) is None:
            if _Counted.calls == calls:
                stopped += 1
            else:
                at_end += 1
    assert stopped > 0, "no draw rejected: the test shows nothing"
    assert at_end == 0
