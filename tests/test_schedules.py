"""Targeted schedules that matter for speed, checked for correctness at awkward shapes
(tails everywhere): register-tiled GEMM, packing via transform_layout, rfactor, conv."""

import numpy as np
import pytest

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs


def gemm_schedule(sch: tt.Schedule, mr: int = 8, nr: int = 32, pack: bool = False) -> None:
    """The register-tiled GEMM of benchmarks/hand_schedules.py."""
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    sch.reorder(jo, io, k, ii, ji)
    bp = sch.cache_read(c, 1, "global")
    if pack:
        sch.transform_layout(bp, "B_global", lambda kk, jj: (jj // nr, kk, jj % nr))
    else:
        sch.compute_at(bp, jo)
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, io)
    init = sch.decompose_reduction(c, k)
    sch.unroll(ii)
    sch.vectorize(ji)
    for blk in (init, wb):
        loops = sch.get_loops(blk)
        sch.unroll(loops[-2])
        sch.vectorize(loops[-1])
    sch.parallel(jo)


@pytest.mark.parametrize("shape", [(64, 64, 32), (37, 70, 19)])
@pytest.mark.parametrize("pack", [False, True])
def test_register_tiled_gemm(shape, pack):
    M, N, K = shape
    f = tt.workloads.get("gmm", M=M, N=N, K=K)
    sch = tt.Schedule(f)
    gemm_schedule(sch, pack=pack)
    k = tt.build(sch)
    a, b = random_inputs(f)
    check_close(k(a, b), a.astype(np.float64) @ b)
    # The accumulator tile lives in vector registers, not in a local array.
    assert "C_local_r0" in k.source and "float C_local[" not in k.source


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


def test_vectorized_loop_emits_avx512_fma():
    if "avx512f" not in tt.Target.host().features:
        pytest.skip("host has no AVX-512")
    import subprocess

    f = tt.workloads.get("gmm", M=64, N=64, K=64)
    sch = tt.Schedule(f)
    gemm_schedule(sch)
    src = tt.build(sch).source
    t = tt.Target.host()
    asm = subprocess.run([t.cc, *t.flags, "-S", "-x", "c", "-", "-o", "-"], input=src,
                         capture_output=True, text=True, check=True).stdout
    fma = [ln for ln in asm.splitlines() if "vfmadd" in ln and "zmm" in ln]
    assert fma, "expected zmm FMA instructions in the generated assembly"
    # The FMAs read their accumulators from registers (no stack operand).
    assert not any("rsp" in ln for ln in fma)
