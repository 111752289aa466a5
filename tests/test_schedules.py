"""Targeted schedules that matter for speed, checked for correctness at awkward shapes
(tails everywhere): register-tiled GEMM, packing via transform_layout, rfactor, conv."""

import numpy as np
import pytest

import tensortune as tt
from tensortune.examples import SCHEDULES, conv_tile
from tensortune.reference import check_close, evaluate, random_inputs


def packed_gemm(sch: tt.Schedule, nr: int = 32) -> None:
    """B packed once into [N/nr, K, nr] panels with transform_layout, tile in registers."""
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, nr])
    sch.reorder(jo, io, k, ii, ji)
    bp = sch.cache_read(c, 1, "global")
    sch.transform_layout(bp, "B_global", lambda kk, jj: (jj // nr, kk, jj % nr))
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, io)
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.parallel(jo)


@pytest.mark.parametrize("name, shape", [
    ("gmm", dict(M=64, N=64, K=32)), ("gmm", dict(M=37, N=70, K=19)),
    ("dense", dict(M=16, K=24, N=64)), ("dense", dict(M=13, K=7, N=40)),
    ("c2d", dict(C=5, K=64, H=4, W=14)), ("c2d", dict(C=8, K=24, H=8, W=16)),
    ("c2d", dict(C=3, K=20, H=5, W=11)),
])
def test_benchmark_schedules_at_awkward_shapes(name, shape):
    # The conv tile's channel count follows the vector width (64 on AVX-512, 32 on AVX2):
    # a channel tail is a tail on either machine for K = 24 and 20.
    tiled = name != "c2d" or shape["K"] % conv_tile()[0] == 0
    f = tt.workloads.get(name, **shape)
    sch = SCHEDULES[name](tt.Schedule(f))
    k = tt.build(sch)
    ins = random_inputs(f)
    check_close(k(*ins), evaluate(f, ins)[0])
    # The accumulator tile lives in vector registers, not in a local array, unless a
    # channel tail (K not a multiple of the 64-channel tile) makes it partial.
    assert ("_local_r0" in k.source) == tiled


def test_packed_gemm_via_transform_layout():
    f = tt.workloads.get("gmm", M=20, N=72, K=9)
    sch = tt.Schedule(f)
    packed_gemm(sch)
    assert "B_global = alloc(float32[3, 9, 32]" in str(sch.func)
    a, b = random_inputs(f)
    check_close(tt.build(sch)(a, b), a.astype(np.float64) @ b)


def test_rfactor_norm():
    f = tt.workloads.get("nrm", b=3, M=8, N=40)
    sch = tt.Schedule(f)
    s = sch.get_block("sumsq")
    n, i, j = sch.get_loops(s)
    j0, j1 = sch.split(j, [None, 16])
    rf = sch.rfactor(j1, 0)
    loops = sch.get_loops(rf)
    assert len(loops) == 4  # n, i, j0 (reductions) around j1, now a spatial axis
    sch.vectorize(loops[-1])
    assert "sumsq_rf = alloc(float32[16, 3]" in str(sch.func)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


@pytest.mark.parametrize("outer", [True, False])
def test_rfactor_of_a_guarded_reduction_split(outer):
    """K = 9 split 4 x 3 leaves the last outer slot (k_0 = 3) with no reduction step.
    Rfactored on k_0, that slot is still summed at the end, so it must be initialised
    though no update runs there (it was left uninitialised: found by the property test).
    On k_1, the slots are the inner index and every one is touched."""
    f = tt.workloads.get("gmm", M=12, N=20, K=9)
    sch = tt.Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, [4, None])
    sch.rfactor(k0 if outer else k1, 0)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_copy_inside_a_partitioned_padding_loop():
    """The input's copy placed in the padding's row loop: partitioning that loop at the
    padded rows gives the copy's buffer one allocation per part. The first part never
    touches it and was kept in registers, and that promotion leaked into the middle
    part, whose copy loop indexes the buffer with a variable (a codegen assertion; found
    by the property test). Each allocation now decides for itself."""
    f = tt.workloads.get("c2d", C=3, K=4, H=6, W=5)
    sch = tt.Schedule(f)
    sch.cache_read(sch.get_block("pad"), 0)
    sch.fuse(*sch.get_loops(sch.get_block("x_global"))[0:2])
    sch.compute_at(sch.get_block("x_global"), sch.get_loops(sch.get_block("pad"))[2])
    sch.vectorize(sch.get_loops(sch.get_block("x_global"))[2])
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_conv_with_padding_computed_at_rows():
    f = tt.workloads.get("c2d", C=4, K=8, H=9, W=11)
    sch = tt.Schedule(f)
    conv = sch.get_block("conv")
    n, k, y, x, rc, ry, rx = sch.get_loops(conv)
    sch.compute_at(sch.get_block("pad"), y)
    sch.reverse_compute_at(sch.get_block("relu"), y)
    sch.parallel(k)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])
    assert "pad = alloc(float32[1, 4, 11, 13]" in str(sch.func)


def test_vectorized_loop_emits_vector_fma():
    t = tt.Target.host()
    if "fma" not in t.features and "avx512f" not in t.features:
        pytest.skip("host has no x86 FMA")
    import subprocess

    reg = "zmm" if t.vector_bytes == 64 else "ymm"

    f = tt.workloads.get("gmm", M=64, N=64, K=64)
    src = tt.build(SCHEDULES["gmm"](tt.Schedule(f))).source
    asm = subprocess.run([t.cc, *t.flags, "-S", "-x", "c", "-", "-o", "-"], input=src,
                         capture_output=True, text=True, check=True).stdout
    fma = [ln for ln in asm.splitlines() if "vfmadd" in ln and reg in ln]
    assert fma, f"expected {reg} FMA instructions in the generated assembly"
    # The FMAs read their accumulators from registers (no stack operand).
    assert not any("rsp" in ln for ln in fma)


def test_guarded_load_is_never_read_speculatively():
    """Padding inlined into a conv vectorized along x: the select's load must not run for
    lanes outside the input (the kernel would read past the buffer): it is one vector
    load only where every lane is inside (codegen/guarded_load.py), never a vector
    select over a load of all the lanes."""
    f = tt.workloads.get("c2d", C=2, K=2, H=4, W=16)
    sch = tt.Schedule(f)
    sch.compute_inline(sch.get_block("pad"))
    loops = sch.get_loops(sch.get_block("conv"))
    sch.reorder(*loops[:3], *loops[4:], loops[3])
    sch.vectorize(sch.get_loops(sch.get_block("conv"))[-1])
    k = tt.build(sch)
    body = k.source.split("int32_t tt_kernel(")[1]
    assert "tt_vsel" not in body and "x_g" in body
    ins = random_inputs(f)
    check_close(k(*ins), evaluate(f, ins)[0])


def test_vector_exp_is_accurate():
    from tensortune import te

    A = te.placeholder((4, 64), name="A")
    B = te.compute((4, 64), lambda i, j: te.exp(A[i, j]), name="B")
    sch = tt.Schedule(te.create_func([A, B]))
    _, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    k = tt.build(sch)
    assert "tt_vexp_f32x" in k.source.split("int32_t tt_kernel(")[1]  # the body's C
    a = np.linspace(-80, 80, 256).astype("float32").reshape(4, 64)
    a[0, :6] = [-20.0, -1e-3, 0.0, 1e-3, 1.0, 20.0]
    # The top of float32's range (2^n with n = 128 would overflow) and its bottom.
    a[1, :6] = [88.0, 88.3, 88.5, 88.7, -87.0, -87.3]
    a[2] = np.random.default_rng(0).uniform(-30, 30, 64)
    ref = np.exp(a.astype(np.float64))
    assert np.max(np.abs(k(a) - ref) / ref) < 1e-6
    # Below the range and at -inf: exactly 0 (a masked softmax's weights), never a
    # tiny normal that a division turns into a denormal.
    a[3, :4] = [-88.4, -100.0, -1e30, -np.inf]
    assert np.all(k(a)[3, :4] == 0.0)


def test_vector_division_by_a_row_value_multiplies_by_its_reciprocal():
    from tensortune import te

    A = te.placeholder((8, 64), name="A")
    s = te.placeholder((8,), name="s")
    B = te.compute((8, 64), lambda i, j: (A[i, j] + 1.0) / s[i], name="B")
    f = te.create_func([A, s, B])
    sch = tt.Schedule(f)
    _, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    k = tt.build(sch)
    assert "* (1.0f / " in k.source.split("int32_t tt_kernel(")[1]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 64)).astype("float32")
    sv = (rng.uniform(0.1, 10.0, 8) * rng.choice([-1, 1], 8)).astype("float32")
    ref = (a.astype(np.float64) + 1.0) / sv[:, None]
    # One extra rounding at most: the reciprocal, then the product.
    assert np.all(np.abs(k(a, sv) - ref) <= 3e-7 * np.abs(ref) + 1e-30)


def test_vector_erf_is_accurate():
    import math

    from tensortune import te

    A = te.placeholder((8, 64), name="A")
    B = te.compute((8, 64), lambda i, j: te.erf(A[i, j]), name="B")
    sch = tt.Schedule(te.create_func([A, B]))
    _, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    k = tt.build(sch)
    assert "tt_verf_f32x" in k.source.split("int32_t tt_kernel(")[1]  # the body's C
    a = np.concatenate([np.linspace(-6, 6, 480), [-1e-30, -1e-6, 0.0, 1e-6, 1e-3, 0.5,
                                                   3.9, 4.0, 4.1, 50.0, -50.0, 2.0, -2.0,
                                                   1e-20, 0.1, -0.1] + [1.0] * 16])
    a = a.astype("float32").reshape(8, 64)
    ref = np.vectorize(math.erf)(a.astype(np.float64))
    err = np.abs(k(a) - ref)
    assert np.all(err <= 1e-6 * np.abs(ref) + 1e-40)
