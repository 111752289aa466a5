"""Transposed stores (codegen/transpose.py): a tile whose lanes run across its output's
rows is written through an in-register transpose, and keeps its meaning."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import lower
from tensortune.codegen.c import emit_c
from tensortune.codegen.transpose import _one_apart
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.expr import BinOp, IntImm, Var
from tensortune.tir.stmt import PrimFunc

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")


def _transposing(rows: int, cols: int) -> PrimFunc:
    """out[i, j] = 2 a[j, i] + b[i] - c[j]: read along i, written along j."""
    a = te.placeholder((cols, rows), name="a")
    b = te.placeholder((rows,), name="b")
    c = te.placeholder((cols,), name="c")
    out = te.compute((rows, cols), lambda i, j: a[j, i] * 2.0 + b[i] - c[j], name="out")
    return te.create_func([a, b, c, out], name="transposing")


def _schedule(f: PrimFunc, block_rows: int, strips: bool) -> tt.Schedule:
    """Lanes along i, ``block_rows`` of j unrolled outside them; with ``strips`` the
    tile is written into a copy laid out [cols / 16, rows, 16] (as DENSE's write-back)."""
    sch = tt.Schedule(f)
    blk = sch.get_block("out")
    if strips:
        sch.cache_write(blk, 0, "global")
        sch.transform_layout(blk, "out_global", "lambda a0, a1: (a1 // 16, a0, a1 % 16)")
    i, j = sch.get_loops(blk)
    io, ii = sch.split(i, [None, LANES])
    jo, ji = sch.split(j, [None, block_rows])
    sch.reorder(io, jo, ji, ii)
    sch.unroll(ji)
    sch.vectorize(ii)
    return sch


@settings(max_examples=20, deadline=None)
@given(block_rows=st.sampled_from([2, 4, 8, 16]), row_vectors=st.integers(1, 3),
       col_blocks=st.integers(1, 3), strips=st.booleans())
def test_transposed_write_backs_compute_the_reference(block_rows, row_vectors, col_blocks,
                                                       strips):
    """Random block heights, tile counts and output layouts: the kernel's output equals
    the reference, and the transpose is used whenever a block of 4 or more rows exists
    and the lanes are at most a cache line apart."""
    rows, cols = LANES * row_vectors, 16 * col_blocks
    f = _transposing(rows, cols)
    sch = _schedule(f, block_rows, strips)
    src = emit_c(lower(sch.func), TARGET)
    # the output's rows are `cols` floats apart, the strips' 16: a cache line or less
    near = strips or cols * 4 <= 64
    assert ("tt_zip1_" in src) == (near and 4 <= block_rows <= LANES)
    inputs = random_inputs(f, seed=block_rows * 100 + row_vectors * 10 + col_blocks)
    check_close(tt.build(sch)(*[np.copy(x) for x in inputs]), evaluate(f, inputs)[0])


def test_contiguous_stores_stay_plain_vector_stores():
    """Lanes along the output's own rows: each loop stores whole vectors, no transpose."""
    a = te.placeholder((32, 64), name="a")
    out = te.compute((32, 64), lambda i, j: a[i, j] * 3.0, name="out")
    f = te.create_func([a, out], name="scale")
    sch = tt.Schedule(f)
    i, j = sch.get_loops(sch.get_block("out"))
    jo, ji = sch.split(j, [None, LANES])
    io, ii = sch.split(i, [None, 8])
    sch.reorder(io, jo, ii, ji)
    sch.unroll(ii)
    sch.vectorize(ji)
    src = emit_c(lower(sch.func), TARGET)
    assert "tt_zip" not in src and f"tt_st_f32x{LANES}(" in src


def test_one_apart_sees_through_strip_divisions():
    """``(8 j + k) // 16 * 2048 + (8 j + k) % 16``: one apart for k < 8 (a block never
    crosses a strip), not for 16 rows from an 8-aligned start."""
    j = Var("j")
    ranges = {j: (0, 11)}

    def strip(k: int):
        x = BinOp("+", BinOp("*", j, IntImm(8), "int32"), IntImm(k), "int32")
        return BinOp("+", BinOp("*", BinOp("//", x, IntImm(16), "int32"), IntImm(2048),
                                "int32"), BinOp("%", x, IntImm(16), "int32"), "int32")

    assert _one_apart([strip(k) for k in range(8)], ranges)
    assert not _one_apart([strip(k) for k in range(16)], ranges)
    assert not _one_apart([strip(k) for k in range(8)], {})  # j's range unknown


def test_dense_strip_write_backs_are_transposed_and_exact(drawn_sources):
    """DENSE with output rows 4 KiB apart, its rows in the lanes (space 1): draws whose
    register tile has 4 or more columns write it through the transpose, and every draw
    computes what the reference does."""
    from tensortune.space import PostOrderApply

    f = tt.workloads.get("dense", M=2 * LANES, K=8, N=1024)
    space = PostOrderApply.default(TARGET).generate(f)[1]
    assert any("tt_zip1_" in src for src in drawn_sources(f, [space], 12))


def test_lanes_far_apart_keep_scalar_stores():
    """A conv's NCHW write-back (channels in the lanes, 784 floats apart) is left to
    scalar stores: there the transpose measured slower."""
    f = _transposing(LANES, 784)
    src = emit_c(lower(_schedule(f, 4, False).func), TARGET)
    assert "tt_zip" not in src
