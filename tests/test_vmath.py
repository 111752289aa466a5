"""Vector math of vectorized loops (codegen/vmath.py) against float64 references.

Each function is built as a vectorized elementwise kernel, the C is checked to use the
vector helper (so the scalar libm fallback is not what passed), and the outputs are
compared over wide ranges, random draws and edge values.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te


def _elementwise(fn, n: int = 256, dtype: str = "float32") -> tt.Kernel:
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    sch = tt.Schedule(te.create_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    _, inner = sch.split(i, [None, 16])
    sch.vectorize(inner)
    return tt.build(sch)


def _body(k: tt.Kernel) -> str:
    """The kernel's own C: the preamble defines every helper, used or not."""
    return k.source.split("int32_t tt_kernel(")[1]


def _max_rel(k: tt.Kernel, a: np.ndarray, ref: np.ndarray, floor: float = 0.0) -> float:
    got = k(a).astype(np.float64)
    return float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), floor)))


def test_tanh_is_vector_code_and_accurate():
    k = _elementwise(te.tanh)
    assert "tt_vtanh_f32x" in _body(k)
    edges = [0.0, -0.0, 1e-30, -1e-6, 1e-3, 0.6249, 0.625, -0.6251, 1.0, -3.0, 9.0,
             20.0, -50.0, 100.0, 1e4, -1e30]
    a = np.concatenate([np.linspace(-6, 6, 256 - len(edges) - 64),
                        np.random.default_rng(0).standard_normal(64) * 0.3, edges])
    a = a.astype(np.float32)
    ref = np.tanh(a.astype(np.float64))
    # Relative error near 0 too (the small branch), absolute 1e-38 where ref is 0.
    assert _max_rel(k, a, ref, floor=1e-38) < 4e-7


def test_log_is_vector_code_and_accurate():
    k = _elementwise(te.log)
    assert "tt_vlog_f32x" in _body(k)
    rng = np.random.default_rng(1)
    a = np.concatenate([np.exp(rng.uniform(-80, 80, 200)), rng.uniform(0.5, 2.0, 40),
                        [1.0, 2.0, 0.5, 0.7071067, 0.7071068, 1.4142135, 1e-38, 1e-40,
                         1e-45, 3.4e38, 0.999999, 1.000001, 10.0, 1e-10, 7.0, 123.0]])
    a = a.astype(np.float32)
    ref = np.log(a.astype(np.float64))
    # Absolute error near log = 0 (x close to 1), relative elsewhere.
    assert _max_rel(k, a, ref, floor=1.0) < 3e-7
    special = np.array([0.0, -0.0, -1.0, np.inf, np.nan] + [1.0] * 251, np.float32)
    out = k(special)
    assert out[0] == -np.inf and out[1] == -np.inf
    assert np.isnan(out[2]) and out[3] == np.inf and np.isnan(out[4])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sqrt_and_fabs_are_vector_code_and_exact(dtype):
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(256) * 10.0).astype(dtype)
    ks = _elementwise(te.sqrt, dtype=dtype)
    kf = _elementwise(te.abs, dtype=dtype)
    assert "tt_vsqrt_" in _body(ks) and "tt_vfabs_" in _body(kf)
    pos = np.abs(a)
    np.testing.assert_array_equal(ks(pos), np.sqrt(pos))   # sqrt is correctly rounded
    np.testing.assert_array_equal(kf(a), np.abs(a))
    assert np.isnan(ks(-pos - 1.0)).all()


def test_a_call_without_vector_form_stays_scalar_and_correct():
    k = _elementwise(lambda x: te.pow(x, 1.5))
    assert "tt_v" not in _body(k).split("tt_packed")[0]
    a = np.random.default_rng(3).uniform(0.1, 4.0, 256).astype(np.float32)
    np.testing.assert_allclose(k(a), a.astype(np.float64) ** 1.5, rtol=1e-6)


@functools.cache
def _kernels() -> tuple[tt.Kernel, tt.Kernel, tt.Kernel]:
    return (_elementwise(te.tanh), _elementwise(te.exp),
            _elementwise(lambda x: te.log(te.abs(x) + 1e-3)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-60.0, 60.0, width=32), min_size=16, max_size=16))
def test_vector_tanh_exp_log_match_float64_on_any_lanes(xs):
    a = np.array(xs * 16, np.float32)
    kt, ke, kl = _kernels()
    a64 = a.astype(np.float64)
    assert _max_rel(kt, a, np.tanh(a64), floor=1e-38) < 4e-7
    assert _max_rel(ke, a, np.exp(a64)) < 1e-6
    shifted = (np.abs(a) + np.float32(1e-3)).astype(np.float64)  # the sum is float32
    assert _max_rel(kl, a, np.log(shifted), floor=1.0) < 3e-7
