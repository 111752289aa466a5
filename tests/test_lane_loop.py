"""Lane loops (codegen/lane_loop.py): a register tile written back through strided stores
is stored by a loop over each vector's lanes, and keeps its meaning."""

import ctypes
import re
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import compile_source, lower
from tensortune.codegen.c import emit_c
from tensortune.codegen.simd import chunk_plan
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.expr import BinOp, BufferLoad, Expr, FloatImm, IntImm, Var
from tensortune.tir.stmt import Allocate, Buffer, BufferStore, For, ForKind, PrimFunc, Seq

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")
LOOP = '_Pragma("GCC unroll 1")'


def _at_b(m: int, n: int, k: int, epilogue: str | None, strided_a: bool) -> PrimFunc:
    """out[i, j] = sum_k A[k, i] B[k, j], and with ``epilogue`` then * scale[i] + bias[j]
    and ReLU ("lanes": scale runs along the tile's lanes, bias is the same in all of
    them), or + D[i, j] and ReLU ("strided": D read ``n`` floats apart across the
    lanes). With the tile's lanes along i, the output's lanes are ``n`` floats apart.
    With ``strided_a`` A is stored [i, k], so the reduction itself reads the lanes ``k``
    apart."""
    a = te.placeholder((m, k) if strided_a else (k, m), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, name="r")
    c = te.compute((m, n), lambda i, j: te.sum(
        (a[i, r] if strided_a else a[r, i]) * b[r, j], axis=r), name="C")
    if epilogue is None:
        return te.create_func([a, b, c], name="at_b")
    if epilogue == "lanes":
        scale = te.placeholder((m,), name="scale")
        bias = te.placeholder((n,), name="bias")
        out = te.compute((m, n), lambda i, j: te.max(c[i, j] * scale[i] + bias[j], 0.0),
                         name="out")
        return te.create_func([a, b, scale, bias, out], name="at_b_scaled")
    d = te.placeholder((m, n), name="D")
    out = te.compute((m, n), lambda i, j: te.max(c[i, j] + d[i, j], 0.0), name="out")
    return te.create_func([a, b, d, out], name="at_b_plus")


def _schedule(f: PrimFunc, width: int, cols: int, epilogue: str | None) -> tt.Schedule:
    """A ``cols`` x ``width`` accumulator tile in registers, lanes along i, written back
    (with the epilogue inlined into the write-back) one column of lanes at a time."""
    sch = tt.Schedule(f)
    blk = sch.get_block("C")
    i, j, r = sch.get_loops(blk)
    io, ii = sch.split(i, [None, width])
    jo, ji = sch.split(j, [None, cols])
    sch.reorder(io, jo, r, ji, ii)
    sch.unroll(ji)
    sch.vectorize(ii)
    wb = sch.cache_write(blk, 0, "local")
    sch.transform_layout(blk, "C_local", "lambda a0, a1: (a1, a0)")
    sch.reverse_compute_at(wb, jo)
    if epilogue:
        sch.reverse_compute_inline(sch.get_block("out"))
    loops = sch.get_loops(wb)
    sch.reorder(loops[3], loops[2])
    sch.unroll(loops[3])
    sch.vectorize(loops[2])
    sch.decompose_reduction(blk, r)
    return sch


@settings(max_examples=16, deadline=None)
@given(width=st.sampled_from([LANES, LANES // 2, LANES + LANES // 2]),
       tiles=st.integers(1, 3), cols=st.sampled_from([1, 2, 3]), n_tiles=st.integers(1, 3),
       epilogue=st.sampled_from([None, "lanes", "strided"]), strided_a=st.booleans())
def test_lane_loops_compute_the_reference(width, tiles, cols, n_tiles, epilogue, strided_a):
    """Random tile widths (whole, half and one and a half vectors), tile counts, with
    and without an epilogue: the output equals the reference on random inputs; the
    write-back is a loop over each vector's lanes; a loop that writes the tile and cannot
    be vector code (A read across the lanes) stays unrolled, a statement per lane. An
    epilogue that is vector code along the lanes runs before the lane loop, which then
    only copies; one that reads across the lanes (D) stays in the loop."""
    m, n = width * tiles, cols * n_tiles * 8   # rows 32+ bytes apart: never transposed
    f = _at_b(m, n, 8, epilogue, strided_a)
    sch = _schedule(f, width, cols, epilogue)
    src = emit_c(lower(sch.func), TARGET)
    plan = chunk_plan(width, LANES)
    assert plan is not None
    # a loop per vector width; sibling write-backs share them when their lanes are more
    # than a cache line apart (nearer ones are transpose.py's)
    widths = len({w for _, w in plan})
    shared = cols > 1 and n * 4 > 64
    assert src.count(LOOP) == widths * (1 if shared else cols)
    # kept scalar only where the lanes are more than a cache line apart
    assert src.count("TT_SCALAR_LOOP;") == (src.count(LOOP) if n * 4 > 64 else 0)
    assert ("C_local_r0[1] = (C_local_r0[1] +" in src) == strided_a
    lane_bodies = re.findall(re.escape(LOOP) + r"\n(.*?)\n\s*\}\n", src, re.S)
    assert len(lane_bodies) == src.count(LOOP)
    arithmetic = any("tt_maxf" in body for body in lane_bodies)
    assert arithmetic == (epilogue == "strided")
    inputs = random_inputs(f, seed=width * 1000 + tiles * 100 + cols * 10 + n_tiles)
    check_close(tt.build(sch)(*[np.copy(x) for x in inputs]), evaluate(f, inputs)[-1])



def _write_backs(dependent: bool) -> PrimFunc:
    """A two-vector tile acc = 2 x written back by two sibling loops, out[:, 0] and
    out[:, 1] (lanes 64 floats apart); with ``dependent`` the second writes out2[:, 1]
    and reads out[:, 0], which the first writes."""
    x = Buffer("x", (2 * LANES,))
    out, out2 = Buffer("out", (LANES, 64)), Buffer("out2", (LANES, 64))
    acc = Buffer("acc", (2 * LANES,), scope="local")
    v0, v1, v2 = Var("v0"), Var("v1"), Var("v2")
    init = For(v0, 2 * LANES, BufferStore(acc, (v0,), BinOp(
        "*", BufferLoad(x, (v0,)), FloatImm(2.0), "float32")), ForKind.VECTORIZED)
    first = For(v1, LANES, BufferStore(out, (v1, IntImm(0)), BufferLoad(acc, (v1,))),
                ForKind.VECTORIZED)
    value: Expr = BufferLoad(acc, (BinOp("+", v2, IntImm(LANES), "int32"),))
    if dependent:
        value = BinOp("+", value, BufferLoad(out, (v2, IntImm(0))), "float32")
    second = For(v2, LANES, BufferStore(out2 if dependent else out, (v2, IntImm(1)), value),
                 ForKind.VECTORIZED)
    return PrimFunc("write_backs", (x, out, out2), Allocate(acc, Seq((init, first, second))),
                    num_outputs=2)


@pytest.mark.parametrize("dependent", [False, True])
def test_sibling_write_backs_share_a_loop_only_when_independent(dependent):
    """Two sibling write-backs share one lane loop; not when one reads what the other
    stores (its stores would be reordered past that read). Both compute the same."""
    f = _write_backs(dependent)
    src = emit_c(f, TARGET)
    assert src.count(LOOP) == (2 if dependent else 1)
    x = np.random.default_rng(5).standard_normal(2 * LANES).astype("float32")
    out = np.full((LANES, 64), 7.0, "float32")
    out2 = np.full((LANES, 64), 7.0, "float32")
    lib = ctypes.CDLL(str(compile_source(src, TARGET)))
    lib.tt_kernel(*[a.ctypes.data_as(ctypes.c_void_p) for a in (x, out, out2)])
    np.testing.assert_array_equal(out[:, 0], 2 * x[:LANES])
    got = out2[:, 1] if dependent else out[:, 1]
    want = 2 * x[LANES:] + (2 * x[:LANES] if dependent else 0)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _vectorized_lines(src: str, tmp_path) -> set[int]:
    """The source lines of the loops gcc reports as vectorized when it builds ``src``."""
    path = tmp_path / "k.c"
    path.write_text(src)
    cmd = [TARGET.cc, *TARGET.flags, "-std=gnu99", "-shared", "-fPIC", "-fopt-info-vec-optimized",
           "-o", str(tmp_path / "k.so"), str(path)]
    report = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return {int(m.group(1)) for m in re.finditer(r"k\.c:(\d+):\d+: optimized: loop vectorized",
                                                report)}


@pytest.mark.skipif("gcc" not in TARGET.cc_version.lower(), reason="gcc's report")
def test_lane_loops_stay_scalar(tmp_path):
    """gcc leaves a lane loop a scalar loop: vectorized, it is again a store per lane and
    vector, as costly to compile as the unrolled form it replaced. Without the marker
    gcc does vectorize this one, so the check can fail."""
    f = _write_backs(False)
    src = emit_c(f, TARGET)
    lines = src.splitlines()
    loops = {i + 2 for i, line in enumerate(lines) if line.strip() == LOOP}
    assert loops and all(lines[i - 1].strip().startswith("for (") for i in loops)
    assert all(lines[i].strip() == "TT_SCALAR_LOOP;" for i in loops)
    assert not _vectorized_lines(src, tmp_path) & loops
    unmarked = src.replace("TT_SCALAR_LOOP;", ";")
    assert _vectorized_lines(unmarked, tmp_path) & loops
