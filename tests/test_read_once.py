"""A reduction whose largest input is read once per element (a matrix-vector product) is
scheduled as one without reuse: MultiLevelTiling leaves it, AddRFactor puts the
contiguous reduction axis in the lanes; the suite's matmuls and convolutions keep their
reuse; draws of such spaces are exact."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.space import PostOrderApply, sample
from tensortune.space.schedule_rule import has_reuse

TARGET = tt.Target.host()


def _gemv(M: int, K: int):
    A = te.placeholder((M, K), name="A")
    x = te.placeholder((K,), name="x")
    k = te.reduce_axis(K, name="k")
    y = te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), name="y")
    return te.create_func([A, x, y], name="gemv")


def _block(f, name: str):
    sch = tt.Schedule(f)
    return sch.get(sch.get_block(name))


def test_matrix_vector_products_have_no_reuse_and_the_suites_blocks_keep_theirs():
    assert not has_reuse(_block(_gemv(256, 128), "y"))
    # One row of a dense layer: the weight, read once, bounds it.
    assert not has_reuse(_block(tt.workloads.get("dense", M=1), "matmul"))
    # Each element of the largest input used many times: matmuls, convolutions (DEP's
    # input is read by nine taps), attention.
    for name in ("gmm", "dense", "bmm", "c2d", "dep", "t2d", "tbg", "c1d"):
        f = tt.workloads.get(name)
        sch = tt.Schedule(f)
        tiled = [b for b in sch.block_names() if has_reuse(sch.get(sch.get_block(b)))]
        assert tiled, name


def test_a_matrix_vector_product_is_not_tiled_but_rfactored_into_the_lanes():
    f = _gemv(256, 512)
    texts = [str(t.as_python()) for t in PostOrderApply.default(TARGET).generate(f)]
    # MultiLevelTiling's tiles (n=4 tiles, a sampled tile per spatial axis) are absent.
    assert not any("n=4" in t or "sample_tile(" in t for t in texts)
    assert any("rfactor" in t for t in texts)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 40), K=st.integers(32, 300), seed=st.integers(0, 1000))
def test_draws_of_a_matrix_vector_products_spaces_are_exact(M, K, seed):
    f = _gemv(M, K)
    gen = PostOrderApply.default(TARGET)
    x = random_inputs(f, seed=seed)
    want = evaluate(f, x)[0]
    built = 0
    for space in gen.generate(f):
        d = sample(f, space, seed, gen.postprocs)
        if d is not None:
            check_close(tt.build(d)(*[np.copy(a) for a in x]), want)
            built += 1
    assert built
