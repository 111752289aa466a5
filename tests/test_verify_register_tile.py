"""VerifyRegisterTile: a drawn program whose register tile cannot live in registers is
rejected, and the search draws another."""

import random

import pytest

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
    rejected, apply_all = 0, check.apply_all

    def counted(sch, decisions=None):
        nonlocal rejected
        try:
            return apply_all(sch, decisions)
        except tt.ScheduleError:
            rejected += 1
            raise

    check.apply_all = counted  # type: ignore[method-assign]
    strategy = ReplayTrace()
    strategy.init(SearchContext(func, gen.generate(func), gen, set(), random.Random(3)))
    batch = strategy.generate(6)
    assert rejected > 0, "no draw was rejected: the test shows nothing"
    assert len(batch) == 6
    assert all(_most_vectors(check, c.sch) <= check.max_vectors for c in batch)
    ins = random_inputs(func)
    check_close(tt.build(batch[0].sch)(*ins), evaluate(func, ins)[0])
