"""TiledTranspose: a copy that reads across its output's rows forks a space of vector by
vector blocks; draws are exact on random shapes and permutations, and copies that only
broadcast, reductions and shapes that are not whole vectors are left alone."""

from drawing import exact_draws
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.space import PostOrderApply, TiledTranspose

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")


def _transpose(B: int, M: int, N: int, scale: bool):
    A = te.placeholder((B, M, N), name="A")
    if scale:
        T = te.compute((B, N, M), lambda b, j, i: A[b, i, j] * 2.0 + 1.0, name="T")
    else:
        T = te.compute((B, N, M), lambda b, j, i: A[b, i, j], name="T")
    return te.create_func([A, T], name="transpose")


def test_the_fork_walks_vector_by_vector_blocks_with_the_output_row_innermost():
    f = _transpose(1, 2 * LANES, 3 * LANES, scale=False)
    sch = tt.Schedule(f)
    got = TiledTranspose(lanes=LANES).apply(sch, sch.get_block("T"))
    assert len(got) == 2
    loops = [got[1].get(lp) for lp in got[1].get_loops(got[1].get_block("T"))]
    assert [lp.extent for lp in loops] == [1, 3, 2, LANES, LANES]
    assert loops[-1].var.name.startswith("i")    # the output's last axis in the lanes


def test_broadcasts_reductions_and_partial_vectors_are_left_alone():
    rule = TiledTranspose(lanes=LANES)
    smx = tt.workloads.get("smx")
    sch = tt.Schedule(smx)
    for name in sch.block_names():
        assert len(rule.apply(sch, sch.get_block(name))) == 1, name
    sch = tt.Schedule(tt.workloads.get("gmm", M=64, N=64, K=64))
    assert len(rule.apply(sch, sch.get_block("C"))) == 1
    sch = tt.Schedule(_transpose(1, LANES + 1, 2 * LANES, scale=False))
    assert len(rule.apply(sch, sch.get_block("T"))) == 1
    sch = tt.Schedule(_transpose(1, LANES, 2 * LANES, scale=False))   # one block high
    assert len(rule.apply(sch, sch.get_block("T"))) == 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 3), m=st.integers(2, 4), n=st.integers(2, 4), scale=st.booleans(),
       seed=st.integers(0, 1000))
def test_draws_of_the_blocked_space_are_exact(B, m, n, scale, seed):
    f = _transpose(B, m * LANES, n * LANES, scale)
    spaces = PostOrderApply.default(TARGET).generate(f)
    assert len(spaces) == 2
    assert exact_draws(f, spaces[1], seed)
