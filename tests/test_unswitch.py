"""Guarded register tiles (a row count that does not divide the axis): the tail guards
leave the reduction loop, by partitioning (codegen/partition.py) when the tile's outer
loop is the guard's only variable, by unswitching (codegen/unswitch.py) when a parallel
loop's variable is in it too. Meaning is kept on random shapes and inputs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.codegen import lower
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.functor import walk
from tensortune.tir.stmt import For, IfThenElse, PrimFunc
from tensortune.workloads.linalg import gmm


def _tiled(m: int, rows: int, mid: int, par: bool) -> tuple[tt.Schedule, PrimFunc]:
    """C[m, 16] = A[m, 12] @ B: i split [outer, mid, rows] (rows need not divide m), the
    rows unrolled inside the k loop, j vectorized; the outer loop parallel or serial."""
    f = gmm(m, 16, 12)
    sch = tt.Schedule(f)
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    outer = -(-m // (rows * mid))
    i0, i1, i2 = sch.split(i, [outer, mid, rows])
    sch.reorder(i0, i1, k, i2, j)
    sch.unroll(i2)
    sch.vectorize(j)
    if par:
        sch.parallel(i0)
    return sch, f


def _k_loops(low: PrimFunc) -> list[For]:
    return [s for s in walk(low.body) if isinstance(s, For) and s.extent == 12]


@settings(max_examples=30, deadline=None)
@given(m=st.integers(2, 40), rows=st.sampled_from([3, 5, 6, 7]), mid=st.integers(1, 4),
       par=st.booleans())
def test_guarded_tiles_compute_the_reference(m, rows, mid, par):
    sch, f = _tiled(m, rows, mid, par)
    inputs = random_inputs(f, seed=m * 10 + rows)
    check_close(tt.build(sch)(*[np.copy(a) for a in inputs]), evaluate(f, inputs)[0])


def _guard_free_k_loops(low: PrimFunc) -> int:
    """k loops with no tail guard inside (the init's ``k == 0`` test does not count)."""
    return sum(not any(isinstance(x, IfThenElse) and x.cond.op != "==" for x in walk(lp.body))
               for lp in _k_loops(low))


def test_a_serial_tail_is_partitioned_out_of_the_reduction():
    """28 rows in tiles of 6 (4 full tiles, then 4 rows): the tile loop splits into
    [0, 4) and [4, 5), and no k loop keeps a guard (the tail's two extra rows are gone)."""
    sch, _ = _tiled(28, 6, 5, par=False)
    low = lower(sch.func)
    loops = _k_loops(low)
    assert len(loops) == 2 and _guard_free_k_loops(low) == 2


def test_a_parallel_tail_is_unswitched():
    """60 rows in tiles of 7, the outer split parallel: the guard reads the parallel
    loop's variable, so the tile runs under one test, as a guard-free copy and a
    guarded one."""
    sch, _ = _tiled(60, 7, 3, par=True)
    low = lower(sch.func)
    loops = _k_loops(low)
    assert len(loops) == 2, len(loops)
    assert _guard_free_k_loops(low) == 1
