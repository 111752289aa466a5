"""Gathered copies (codegen/gather.py): a pack that moves an axis into the lanes reads
its rows through an in-register transpose, and keeps its meaning."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import lower
from tensortune.codegen.c import emit_c
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.stmt import PrimFunc

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")


def _pack(co: int, ci: int, kh: int, kw: int, scale: bool = False) -> PrimFunc:
    """A conv weight pack: packed[a, b, c, d, l] = w[a * LANES + l, b, c, d]."""
    w = te.placeholder((co, ci, kh, kw), name="w")
    packed = te.compute((co // LANES, ci, kh, kw, LANES),
                        lambda a, b, c, d, lane: w[a * LANES + lane, b, c, d] * 2.0
                        if scale else w[a * LANES + lane, b, c, d], name="packed")
    return te.create_func([w, packed], name="pack")


def _run(f: PrimFunc, sch: tt.Schedule, seed: int) -> str:
    src = emit_c(lower(sch.func), TARGET)
    inputs = random_inputs(f, seed=seed)
    check_close(tt.build(sch)(*[np.copy(x) for x in inputs]), evaluate(f, inputs)[0])
    return src


@settings(max_examples=20, deadline=None)
@given(vectors=st.integers(1, 3), ci=st.integers(1, 9), kh=st.integers(1, 3),
       kw=st.integers(1, 3), parallel=st.booleans())
def test_gathered_packs_compute_the_reference(vectors, ci, kh, kw, parallel):
    """Random pack shapes, the outer loop parallel or not: the packed copy equals the
    reference, and goes through the transpose whenever the loops inside the lane
    strip's walk 4 or more source elements in all."""
    f = _pack(LANES * vectors, ci, kh, kw)
    sch = tt.Schedule(f)
    blk = sch.get_block("packed")
    loops = sch.get_loops(blk)
    sch.vectorize(loops[-1])
    if parallel:
        sch.parallel(loops[0])
    src = _run(f, sch, seed=vectors * 1000 + ci * 100 + kh * 10 + kw)
    assert ("tt_zip1_" in src) == ((ci * kh * kw) % 4 == 0 and LANES >= 4)


def test_a_reordered_walk_or_a_second_gathered_load_keeps_the_plain_loop():
    """Loops that do not walk the source contiguously (kw outside kh), or a value with
    two loads along the lanes, leave the copy to the ordinary vector loop, still
    correct."""
    f = _pack(2 * LANES, 4, 3, 3)
    sch = tt.Schedule(f)
    a, b, c, d, lane = sch.get_loops(sch.get_block("packed"))
    sch.reorder(a, b, d, c, lane)
    sch.vectorize(lane)
    assert "tt_zip" not in _run(f, sch, seed=7)
    w = te.placeholder((2 * LANES, 4, 3, 3), name="w")
    v = te.placeholder((2 * LANES, 4, 3, 3), name="v")
    two = te.compute((2, 4, 3, 3, LANES), lambda a, b, c, d, lane:
                     w[a * LANES + lane, b, c, d] + v[a * LANES + lane, b, c, d], name="packed")
    g = te.create_func([w, v, two], name="pack2")
    sch = tt.Schedule(g)
    sch.vectorize(sch.get_loops(sch.get_block("packed"))[-1])
    assert "tt_zip" not in _run(g, sch, seed=8)


def test_a_load_under_a_select_is_not_gathered():
    """The transpose loads every row whole; a padded read's select leaves out rows that
    lie outside the buffer, so a load under a select is never the gathered one."""
    from tensortune.codegen.gather import _gathered_load
    from tensortune.tir.expr import BinOp, BufferLoad, FloatImm, IntImm, Select, Var
    from tensortune.tir.stmt import Buffer, BufferStore

    src, dst = Buffer("w", (LANES, 8)), Buffer("p", (8, LANES))
    i, lane = Var("i"), Var("lane")
    load = BufferLoad(src, (lane, i))
    scaled = BufferStore(dst, (i, lane), BinOp("*", load, FloatImm(2.0), "float32"))
    assert _gathered_load(scaled, lane) is load
    padded = BufferStore(dst, (i, lane), Select(BinOp("<", i, IntImm(7), "bool"), load,
                                                FloatImm(0.0), "float32"))
    assert _gathered_load(padded, lane) is None


def _scaled_pack(co: int, ci: int, kh: int, kw: int) -> PrimFunc:
    """A pack whose value scales and shifts the gathered load by terms the same in every
    lane, one of them per input channel (a loop of the walk): the shape of Winograd's
    blocked epilogue, ``max(Y[..] * scale[k] + shift[k], 0)``."""
    w = te.placeholder((co, ci, kh, kw), name="w")
    s = te.placeholder((ci,), name="s")
    packed = te.compute((co // LANES, ci, kh, kw, LANES), lambda a, b, c, d, lane:
                        te.max(w[a * LANES + lane, b, c, d] * s[b] + 0.5, 0.0),
                        name="packed")
    return te.create_func([w, s, packed], name="scaled_pack")


@settings(max_examples=15, deadline=None)
@given(vectors=st.integers(1, 2), ci=st.integers(1, 8), kh=st.integers(1, 3),
       kw=st.integers(1, 3), plain_scale=st.booleans())
def test_a_computed_value_goes_through_the_transpose_and_keeps_its_meaning(
        vectors, ci, kh, kw, plain_scale):
    """The value computed from the gathered load (a constant scale, or a scale per
    input channel, a shift and a ReLU) is applied to each transposed row: the same
    blocks as a plain copy's, and the reference's result."""
    f = _pack(LANES * vectors, ci, kh, kw, scale=True) if plain_scale \
        else _scaled_pack(LANES * vectors, ci, kh, kw)
    sch = tt.Schedule(f)
    sch.vectorize(sch.get_loops(sch.get_block("packed"))[-1])
    src = _run(f, sch, seed=vectors * 1000 + ci * 100 + kh * 10 + kw)
    assert ("tt_zip1_" in src) == ((ci * kh * kw) % 4 == 0 and LANES >= 4)


def test_a_gathered_pack_in_a_tuned_space_is_transposed(drawn_sources):
    """TBG's K pack (each lane ``h * d`` floats from its neighbour) in drawn programs of
    the default spaces: some go through the transpose, and every draw is correct."""
    from tensortune.space import PostOrderApply

    f = tt.workloads.get("tbg", s=2 * LANES, h=2, d=16)
    spaces = PostOrderApply.default(TARGET).generate(f)
    assert any("tt_zip1_" in src for src in drawn_sources(f, spaces, 6))
