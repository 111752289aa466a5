"""Padded lanes: a reduction with no axis of whole vectors is computed over a padded row;
equal results on random inputs and shapes, programs drawn from its space built and
checked, where the rewrite stays away, and a consumer narrower than its producer folded
in without writing past its output."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.errors import ScheduleError
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.rewrite import pad_lanes
from tensortune.rewrite.pad_lanes import MAX_WASTE
from tensortune.space import PostOrderApply, sample
from tensortune.tir.analysis import flop_count


def _matmul(M: int, N: int, K: int, epilogue: str = "relu", stride: int = 1):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N * stride), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j * stride], axis=k), name="C")
    if epilogue == "none":
        return te.create_func([A, B, C], name="mm")
    bias = te.placeholder((N,), name="bias")
    D = te.compute((M, N), lambda i, j: te.maximum(C[i, j] + bias[j], 0.0), name="D")
    return te.create_func([A, B, bias, D], name="mm_relu")


def _conv1d(C: int, K: int, L: int):
    """A 1-d convolution along the padded axis: its input is read at j + r."""
    x = te.placeholder((C, L + 2), name="x")
    w = te.placeholder((K, C, 3), name="w")
    rc, r = te.reduce_axis(C, name="rc"), te.reduce_axis(3, name="r")
    y = te.compute((K, L), lambda k, j: te.sum(x[rc, j + r] * w[k, rc, r], axis=[rc, r]),
                   name="y")
    return te.create_func([x, w, y], name="c1d")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 40), N=st.integers(16, 90), K=st.integers(1, 20),
       lanes=st.sampled_from([8, 16]), epilogue=st.sampled_from(["relu", "none"]))
def test_padded_form_computes_the_same(M, N, K, lanes, epilogue):
    assume(M % lanes and N % lanes)
    f = _matmul(M, N, K, epilogue)
    g = pad_lanes(f, lanes)
    padded = -(-N // lanes) * lanes
    if N < lanes or padded > MAX_WASTE * N:
        assert g is None
        return
    assert g is not None and f"float32[{K}, {padded}]" in str(g)
    ins = random_inputs(f, seed=M * 31 + N)
    check_close(evaluate(g, ins)[0], evaluate(f, ins)[0])
    assert flop_count(g) > flop_count(f)   # the padding is work (tune counts f's)


@pytest.mark.parametrize("func", [_matmul(97, 131, 67), _matmul(37, 131, 9, "none"),
                                  _conv1d(5, 7, 115)],
                         ids=["mm_relu_97x131", "mm_37x131", "conv1d_along_lanes"])
def test_programs_drawn_from_the_padded_space_are_exact(func):
    g = pad_lanes(func, tt.Target.host().lanes("float32"))
    assert g is not None
    spaces = PostOrderApply.default(tt.Target.host()).generate(g)
    ins = random_inputs(func)
    want = evaluate(func, ins)[0]
    gen = PostOrderApply.default(tt.Target.host())
    built = 0
    for space in spaces:
        for seed in range(3):
            sch = sample(g, space, seed, gen.postprocs)
            if sch is None:
                continue
            # Checked against the form as written, not the padded one.
            check_close(tt.build(sch)(*[np.copy(x) for x in ins]), want)
            built += 1
    assert built >= 2


def test_where_the_rewrite_stays_away():
    lanes = 16
    assert pad_lanes(tt.workloads.get("c2d"), lanes) is None     # channels fill the lanes
    assert pad_lanes(tt.workloads.get("gmm"), lanes) is None
    assert pad_lanes(_matmul(97, 12, 5), lanes) is None           # shorter than a vector
    assert pad_lanes(_matmul(97, 49, 5), lanes) is None           # 64 / 49 wastes too much
    assert pad_lanes(_matmul(96, 131, 5), lanes) is None          # 96 is whole vectors
    assert pad_lanes(_matmul(97, 131, 5, stride=2), lanes) is None  # B read at 2 j
    # Row reductions (no input read without a spatial axis) are not tiled: 500 rows of
    # softmax or layer norm would only gain a copy of their input.
    assert pad_lanes(tt.workloads.get("smx", M=500, N=77), lanes) is None
    assert pad_lanes(tt.workloads.get("lnm", M=500, N=77), lanes) is None


def test_tuning_a_prime_matmul_vectorizes_and_counts_the_real_work(tmp_path):
    f = _matmul(29, 131, 23)
    res = tt.tune(f, trials=4, database=tmp_path / "t.db", seed=0)
    assert "C_pad" in str(res.func)
    assert res.flops == flop_count(f)
    ins = random_inputs(f)
    want = evaluate(f, ins)[0]
    check_close(res.kernel(*ins), want)
    check_close(tt.compile(f, database=tmp_path / "t.db")(*ins), want)


def _wide_then_narrow():
    """T (10 x 20) written whole, R reading only its first 7 x 13."""
    A = te.placeholder((10, 20), name="A")
    T = te.compute((10, 20), lambda i, j: A[i, j] * 2.0 + 1.0, name="T")
    R = te.compute((7, 13), lambda i, j: te.maximum(T[i, j], 1.5), name="R")
    return te.create_func([A, R], name="narrow")


def test_reverse_inlining_a_narrower_consumer_guards_the_producer():
    f = _wide_then_narrow()
    sch = tt.Schedule(f)
    sch.reverse_compute_inline(sch.get_block("R"))
    text = str(sch.func)
    assert "i < 7" in text and "j < 13" in text
    a = np.random.default_rng(5).standard_normal((10, 20)).astype(np.float32)
    check_close(tt.build(sch)(a), np.maximum(a[:7, :13].astype(np.float64) * 2 + 1, 1.5))
    # Tiled with a tail first, then folded in: the guards join the tail's.
    sch = tt.Schedule(f)
    i, j = sch.get_loops(sch.get_block("T"))
    sch.split(j, [None, 8])
    sch.reverse_compute_inline(sch.get_block("R"))
    check_close(tt.build(sch)(a), np.maximum(a[:7, :13].astype(np.float64) * 2 + 1, 1.5))


def test_reverse_inlining_a_consumer_wider_than_its_producer_is_refused():
    A = te.placeholder((8,), name="A")
    T = te.compute((8,), lambda i: A[i] + 1.0, name="T")
    R = te.compute((8,), lambda i: T[i] * 2.0, name="R")
    f = te.create_func([A, R], name="same")
    sch = tt.Schedule(f)
    # Shrink the producer's domain by hand: it writes T over 5 points, R reads all 8.
    import dataclasses

    from tensortune.schedule.tree import replace_block
    from tensortune.tir.stmt import IterVar

    def shrink(b):
        return dataclasses.replace(b, iter_vars=(IterVar(b.iter_vars[0].var, 5, "S"),))
    sch.func = replace_block(sch.func, "T", shrink)
    with pytest.raises(ScheduleError, match="unwritten"):
        sch.reverse_compute_inline(sch.get_block("R"))


def test_reverse_inlining_a_guarded_consumer_is_refused():
    sch = tt.Schedule(_wide_then_narrow())
    _, j = sch.get_loops(sch.get_block("R"))
    sch.split(j, [None, 4])     # 13 = 4 x 4 - 3: R gets a guard
    with pytest.raises(ScheduleError, match="guard"):
        sch.reverse_compute_inline(sch.get_block("R"))
