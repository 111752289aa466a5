"""Vector math of vectorized loops (codegen/vmath.py) against float64 references.

Each function is built as a vectorized elementwise kernel, the C is checked to use the
vector helper (so the scalar libm fallback is not what passed), and the outputs are
compared over wide ranges, random draws and edge values.
"""

from __future__ import annotations

import dataclasses
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


def test_float64_log_and_tanh_are_vector_code_and_accurate_to_an_ulp():
    rng = np.random.default_rng(4)
    kl = _elementwise(te.log, n=4096, dtype="float64")
    assert "tt_vlog_f64x" in _body(kl)
    edges = [1.0, 2.0, 0.5, 0.7071067811865475, 0.7071067811865476, 1.4142135623730951,
             2.2250738585072014e-308, 1e-310, 5e-324, 1.7976931348623157e308, 1.0 + 1e-15]
    a = np.concatenate([np.exp(rng.uniform(-700, 700, 3000)), rng.uniform(0.5, 2.0, 1000),
                        edges, np.full(96 - len(edges), 3.0)])
    # Relative error, against 1 where log(a) is near 0 (a next to 1).
    assert _max_rel(kl, a, np.log(a), floor=1.0) < 4.5e-16
    special = kl(np.concatenate([[0.0, -1.0, np.inf, np.nan], np.ones(4092)]))[:4]
    assert special[0] == -np.inf and np.isnan(special[1]) and special[2] == np.inf
    assert np.isnan(special[3])
    kt = _elementwise(te.tanh, n=4096, dtype="float64")
    assert "tt_vtanh_f64x" in _body(kt)
    edges = [0.0, -0.0, 1e-300, 1e-8, 0.6249, 0.625, -0.6251, 400.0, -400.0]
    x = np.concatenate([np.linspace(-20, 20, 3000), rng.standard_normal(1000) * 0.3, edges,
                        np.full(96 - len(edges), 0.1)])
    assert _max_rel(kt, x, np.tanh(x), floor=1e-300) < 4.5e-16


@functools.cache
def _kernels64() -> tuple[tt.Kernel, tt.Kernel, tt.Kernel]:
    return (_elementwise(te.exp, dtype="float64"), _elementwise(te.tanh, dtype="float64"),
            _elementwise(lambda x: te.log(te.abs(x) + 1e-3), dtype="float64"))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-708.0, 709.0), min_size=16, max_size=16))
def test_float64_vector_exp_tanh_log_match_numpy_on_any_lanes(xs):
    a = np.array(xs * 16, np.float64)
    ke, kt, kl = _kernels64()
    assert _max_rel(ke, a, np.exp(a)) < 4.5e-16
    assert _max_rel(kt, a, np.tanh(a), floor=1e-300) < 4.5e-16
    assert _max_rel(kl, a, np.log(np.abs(a) + 1e-3), floor=1.0) < 4.5e-16


def _min_max_kernel(dtype: str, lanes: int, target: tt.Target) -> tt.Kernel:
    A = te.placeholder((64,), name="A", dtype=dtype)
    B = te.placeholder((64,), name="B", dtype=dtype)
    C = te.compute((64,), lambda i: te.maximum(A[i], B[i]), name="C")
    D = te.compute((64,), lambda i: te.minimum(B[i], A[i]), name="D")
    sch = tt.Schedule(te.create_func([A, B, C, D]))
    for name in ("C", "D"):
        (i,) = sch.get_loops(sch.get_block(name))
        _, inner = sch.split(i, [None, lanes])
        sch.vectorize(inner)
    return tt.build(sch, target=target)


@functools.cache
def _min_max_kernels(dtype: str) -> list[tt.Kernel]:
    """Vector max and min at every width, built for the host (gcc's x86 builtins where
    it has the ISA) and, on x86, with AVX-512 off (the 512-bit lane loop beside the
    256-bit builtin) and with AVX off (lane loops at 256 and 512 bits)."""
    host = tt.Target.host()
    targets = [host]
    for feature, off in (("avx512f", "-mno-avx512f"), ("avx", "-mno-avx")):
        if feature in host.features:
            targets.append(dataclasses.replace(host, flags=host.flags + (off,)))
    widths = (4, 8, 16) if dtype == "float32" else (2, 4, 8)
    return [_min_max_kernel(dtype, w, t) for t in targets for w in widths]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_vector_min_max_are_the_lane_rule_with_nan_and_signed_zeros(dtype, data):
    """max(a, b) is `a > b ? a : b` and min(b, a) `b < a ? b : a` lane by lane: with a
    NaN on either side the second operand, and of two zeros the second one."""
    special = st.sampled_from([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0])
    value = st.one_of(st.floats(-1e6, 1e6, width=32 if dtype == "float32" else 64), special)
    a = np.array(data.draw(st.lists(value, min_size=64, max_size=64)), dtype)
    b = np.array(data.draw(st.lists(value, min_size=64, max_size=64)), dtype)
    refs = np.where(a > b, a, b), np.where(b < a, b, a)
    for k in _min_max_kernels(dtype):
        assert "tt_vmax_" in _body(k) and "tt_vmin_" in _body(k)
        for got, ref in zip(k(a, b), refs):
            # Bit for bit, so the sign of a zero and the place of a NaN count.
            np.testing.assert_array_equal(got.view(f"u{a.itemsize}"), ref.view(f"u{a.itemsize}"))


def test_vector_min_max_use_gcc_builtins_where_the_isa_has_them():
    from tensortune.codegen.vmath import vector_math
    f32x16, f64x2 = vector_math("float32", 16), vector_math("float64", 2)
    assert "#if defined(__AVX512F__)" in f32x16
    assert "__builtin_ia32_maxps512_mask(a, b, a, (unsigned short)-1, 4)" in f32x16
    assert "__builtin_ia32_minpd(a, b)" in f64x2
    # A width with no builtin keeps only the lane loop.
    assert "__builtin_ia32" not in vector_math("float32", 2)
    assert "#if" not in vector_math("float32", 2)


def test_float64_exp_is_vector_code_and_accurate_to_an_ulp():
    k = _elementwise(te.exp, n=4096, dtype="float64")
    assert "tt_vexp_f64x" in _body(k)
    rng = np.random.default_rng(3)
    edges = [0.0, -0.0, 1e-300, -1e-16, 0.34657, 0.34658, -0.34658, 1.0, -1.0, 700.0,
             709.0, 709.7, 709.78, -700.0, -708.0, -708.39]
    a = np.concatenate([np.linspace(-708, 709.7, 4096 - len(edges) - 1000),
                        rng.uniform(-3, 3, 1000), edges])
    # NumPy's exp is correctly rounded here to within an ulp; ours within two of it.
    assert _max_rel(k, a, np.exp(a)) < 4.5e-16
    # Past the range: the largest double above (not inf, as the float32 exp stops at its
    # own range); 0 from -709 down and at -inf (not the least normal, which a later
    # division makes a denormal).
    b = np.concatenate([[800.0, -800.0, -np.inf, -709.5], np.full(4092, 0.5)])
    got = k(b)
    assert np.isfinite(got[0]) and got[0] > 1.79e308
    assert got[1] == got[2] == got[3] == 0.0


@pytest.mark.parametrize("c", [1.0, 2.0, 3, 4.0, 0.5, -0.5, -1.0, -2.0])
def test_pow_of_a_small_constant_is_written_out_as_vector_code(c):
    # libm's scalar powf per element ran pow(x, 3) 20x slower than PyTorch.
    k = _elementwise(lambda x: te.pow(x, c))
    assert "pow" not in _body(k)
    a = np.random.default_rng(5).uniform(0.05, 4.0, 256).astype(np.float32)
    a[::2] *= -1 if float(c).is_integer() else 1     # negative bases where defined
    ref = np.power(a.astype(np.float64), float(c))
    assert _max_rel(k, a, ref) < 4e-7


def test_pow_of_another_exponent_stays_a_call():
    x = te.placeholder((4,), name="X")
    assert "pow(" in str(te.pow(x[0], 1.7)) and "pow(" in str(te.pow(x[0], x[1]))
