"""LowReuseDot: a dense layer over a few rows (its weight reused 2-8 times) gets a space of
dot products along the weight's rows beside MultiLevelTiling's tiles; the lane sum it
leaves is not rfactored again; draws of the space are exact on random shapes."""

from drawing import exact_draws
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.codegen import emit_c, lower
from tensortune.space import LowReuseDot, PostOrderApply, sample

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")


def _dots(f) -> list:
    return [t for t in PostOrderApply.default(TARGET).generate(f)
            if "matmul_rf_local" in str(sample(f, t, seed=0).func)]


def test_a_few_rows_fork_dot_products_with_the_rows_unrolled_inside_the_reduction():
    f = tt.workloads.get("dense", M=4, K=8 * LANES, N=96)
    sch = tt.Schedule(f)
    got = LowReuseDot(lanes=LANES).apply(sch, sch.get_block("matmul"))
    assert len(got) == 2
    text = str(got[1].func)
    # Per output column: the reduction's outer loop, then the four rows unrolled, then
    # the vector run; the rows' accumulators a local tile.
    assert text.index("for j in range(96)") < text.index("for k_0 in range(") < \
        text.index("for i in unroll(4)") < text.index("for k_1 in range(")
    assert "matmul_rf_local = alloc(" in text and 'block("matmul_rf_init"' in text


def test_many_rows_or_no_reuse_are_left_to_the_other_rules():
    rule = LowReuseDot(lanes=LANES)
    for f in (tt.workloads.get("dense", M=16), tt.workloads.get("gmm"),
              tt.workloads.get("dense", M=1), tt.workloads.get("bmm"),
              tt.workloads.get("dep")):
        sch = tt.Schedule(f)
        name = next(b for b in sch.block_names() if sch.get(sch.get_block(b)).is_reduction)
        assert len(rule.apply(sch, sch.get_block(name))) == 1, f.name
    # A reduction that is not whole vectors is left alone too.
    sch = tt.Schedule(tt.workloads.get("dense", M=4, K=8 * LANES + 3, N=32))
    assert len(rule.apply(sch, sch.get_block("matmul"))) == 1


def test_the_lane_sum_is_a_vector_tree_not_another_rfactor():
    f = tt.workloads.get("dense", M=4, K=8 * LANES, N=64)
    for space in _dots(f):
        assert str(space.as_python()).count("rfactor(") == 1
        d = sample(f, space, 0, PostOrderApply.default(TARGET).postprocs)
        assert d is not None
        # The accumulators are registers: no local array left in the C.
        assert "float matmul_rf_local[" not in emit_c(lower(d.func), TARGET)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(2, 8), vectors=st.integers(2, 12), N=st.integers(9, 70),
       seed=st.integers(0, 1000))
def test_draws_of_the_dot_space_are_exact(M, vectors, N, seed):
    # N > M: the weight is the largest input (else the rows are, read once).
    f = tt.workloads.get("dense", M=M, K=vectors * LANES, N=N)
    spaces = _dots(f)
    assert spaces
    assert exact_draws(f, spaces[0], seed)
