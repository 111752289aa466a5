"""Reductions with few outputs: a reduction too narrow to share among the cores (a
whole-array sum) forks a space of partial results per core (AddRFactor), and an output
reduction's partial results are placed among its loops (RandomComputeLocation). Draws of
both are exact on random shapes."""

import numpy as np
from drawing import exact_draws
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import emit_c, lower
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.space import AddRFactor, PostOrderApply, sample

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")


def _total(rows: int, n: int):
    A = te.placeholder((rows, n), name="A")
    i = te.reduce_axis(n, name="i")
    S = te.compute((rows,), lambda r: te.sum(A[r, i], axis=i), name="S")
    return te.create_func([A, S], name="total")


def _chansum(N: int, C: int, H: int, W: int):
    X = te.placeholder((N, C, H, W), name="X")
    n, y, x = (te.reduce_axis(N, name="n"), te.reduce_axis(H, name="y"),
               te.reduce_axis(W, name="x"))
    S = te.compute((C,), lambda c: te.sum(X[n, c, y, x], axis=[n, y, x]), name="S")
    return te.create_func([X, S], name="chansum")


def _per_core(f, cores: int = 2):
    sch = tt.Schedule(f)
    return AddRFactor(lanes=LANES, cores=cores).apply(sch, sch.get_block("S"))


def test_a_whole_array_sum_forks_partials_per_core_accumulated_in_a_local_tile():
    f = _total(1, 64 * LANES)
    got = _per_core(f)
    assert len(got) == 3          # plain, a divisor in the lanes, per core
    text = str(got[2].func)
    assert "S_rf_rf_local = alloc(" in text and 'block("S_rf_rf_init"' in text
    # Jobs decision 1, one job per core: this sum is small enough to run on one core too.
    drawn = sample(f, got[2].trace, seed=0,
                   postprocs=PostOrderApply.default(TARGET).postprocs, post_decisions=[[1, 0]])
    assert drawn is not None
    # The parts run in parallel, the run of each part's partials in the lanes.
    assert "parallel(" in str(drawn.func) and "vectorized(" in str(drawn.func)


def test_the_fork_needs_few_outputs_and_an_extent_of_whole_vectors_per_part():
    def forked(f, cores: int = 2) -> bool:
        return any("S_rf_rf" in str(s.func) for s in _per_core(f, cores))

    assert forked(_total(1, 64 * LANES))
    # Enough rows to share out: no fork; the same rows on more cores: forked.
    assert not forked(_total(8, 64 * LANES), cores=2)
    assert forked(_total(8, 64 * LANES), cores=8)
    # No part of whole vectors (a prime extent): no fork.
    assert not forked(_total(1, 1009))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 3), vectors=st.integers(2, 40), seed=st.integers(0, 1000))
def test_draws_of_the_per_core_space_are_exact(rows, vectors, seed):
    f = _total(rows, 2 * vectors * LANES)
    gen = PostOrderApply.default(TARGET)
    forked = [t for t in gen.generate(f) if "S_rf_rf_local" in str(sample(f, t, seed=0).func)]
    assert forked
    assert exact_draws(f, forked[0], seed)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(1, 3), C=st.integers(2, 6), H=st.integers(1, 9),
       W=st.integers(32, 70), seed=st.integers(0, 1000))
def test_an_output_reductions_partials_are_placed_in_its_loops_and_exact(N, C, H, W, seed):
    """A per-channel sum over N, H, W: its rfactored partials placed in the channel loop
    (the first loop among the location's candidates) are local in the C, not a heap
    array the reduction loads and stores every step; those draws and random ones are
    exact."""
    f = _chansum(N, C, H, W)
    gen = PostOrderApply.default(TARGET)
    x = random_inputs(f, seed=seed)
    want = evaluate(f, x)[0]
    placed = 0
    for space in gen.generate(f):
        locs = [i for i, ins in enumerate(space.insts) if ins.kind == "sample_compute_location"]
        for dec in ({i: 1 for i in locs}, {}):
            d = sample(f, space, seed, gen.postprocs, decisions=dec)
            if d is None:
                continue
            if locs and dec:
                c = emit_c(lower(d.func), TARGET)
                # A local array, or registers when it is one element.
                assert "S_rf = (float*)tt_alloc" not in c and "float S_rf" in c
                placed += 1
            check_close(tt.build(d)(*[np.copy(a) for a in x]), want)
    assert placed
