"""AddRFactor's second step (a serial sum over a run of partial sums) emitted as a vector
tree (codegen/tree_sum.py): the same result as the reference on random inputs, for
random row lengths, factors and layouts of the partial sums."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.reference import check_close, evaluate, random_inputs


def _row_sum(m: int, n: int) -> tt.tir.PrimFunc:
    x = te.placeholder((m, n), name="X")
    j = te.reduce_axis(n, name="j")
    s = te.compute((m,), lambda i: te.sum(x[i, j] * x[i, j], axis=j), name="S")
    return te.create_func([x, s], name="row_sum")


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 5), vecs=st.integers(1, 6), f_lanes=st.sampled_from([8, 16, 32, 64]),
       axis=st.integers(0, 1), vectorize=st.booleans(), parallel=st.booleans())
def test_rfactor_sum_as_a_vector_tree_matches_the_reference(m, vecs, f_lanes, axis,
                                                           vectorize, parallel):
    func = _row_sum(m, f_lanes * vecs)
    sch = tt.Schedule(func)
    blk = sch.get_block("S")
    i, j = sch.get_loops(blk)
    _, ji = sch.split(j, [None, f_lanes])
    rf = sch.rfactor(ji, axis)
    if vectorize:   # the partial sums' own loop over the factor, spatial in the rf block
        sch.vectorize(sch.get_loops(rf)[-1])
    if parallel:
        sch.parallel(sch.get_loops(blk)[0])
    kernel = tt.build(sch)
    x = random_inputs(func, seed=m * 100 + vecs)
    want = evaluate(func, x)[-1]
    got = kernel(*x)
    check_close(got, want, rtol=1e-5)
    if axis == 1:
        # S_rf[i, j1] is contiguous in j1 when the factor axis is last: the tree is used
        # (every factor drawn is 8 to 64 floats, whole vectors of 4 or more lanes).
        assert "_v[0]" in kernel.source, kernel.source


def test_tree_sum_adds_onto_an_accumulator_whose_init_was_decomposed_out():
    """A sum decomposed into its init and its update (``decompose_reduction``): the loop
    has no init of its own, so the tree is added onto what the accumulator holds."""
    func = _row_sum(3, 64)
    sch = tt.Schedule(func)
    blk = sch.get_block("S")
    i, j = sch.get_loops(blk)
    _, ji = sch.split(j, [None, 16])
    sch.rfactor(ji, 1)
    sch.decompose_reduction(blk, sch.get_loops(blk)[1])
    kernel = tt.build(sch)
    x = random_inputs(func, seed=7)
    assert "_v[0]" in kernel.source
    check_close(kernel(*x), evaluate(func, x)[-1], rtol=1e-5)
    assert np.all(kernel(*x) > 0)
