"""Loop partitioning at guard bounds (codegen/partition.py): padded copies keep their
meaning, and the middle part of a padded row carries no guard (it becomes vector code)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import lower
from tensortune.codegen.c import emit_c
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.expr import Select
from tensortune.tir.functor import iter_exprs, walk
from tensortune.tir.stmt import BufferStore, For, PrimFunc
from tensortune.workloads.conv import pad

TARGET = tt.Target.host()


def _padded(h: int, w: int, ph: int, pw: int, scale: bool) -> PrimFunc:
    x = te.placeholder((3, h, w), name="x")
    xp = pad(x, (ph, pw))
    out = te.compute(xp.shape, lambda c, i, j: xp[c, i, j] * 2.0, name="out") if scale \
        else xp
    return te.create_func([x, out], name="padded")


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 12), w=st.integers(1, 40), ph=st.integers(0, 3),
       pw=st.integers(0, 3), vec=st.booleans(), split=st.sampled_from([None, 2, 3, 8]),
       scale=st.booleans())
def test_partitioned_pads_compute_the_reference(h, w, ph, pw, vec, split, scale):
    """Random pad widths and row lengths, the row loop vectorized or split (so a guard
    may involve two loops, which is left alone): results equal the reference."""
    f = _padded(h, w, ph, pw, scale)
    sch = tt.Schedule(f)
    if scale:
        sch.compute_inline(sch.get_block("pad"))
    blk = sch.get_block("out" if scale else "pad")
    loops = sch.get_loops(blk)
    inner = loops[-1]
    if split is not None and (w + 2 * pw) % split == 0:
        _, inner = sch.split(inner, [None, split])
    if vec:
        sch.vectorize(inner)
    inputs = random_inputs(f, seed=h * 100 + w)
    check_close(tt.build(sch)(*[np.copy(a) for a in inputs]), evaluate(f, inputs)[0])


def test_the_middle_of_a_padded_row_has_no_guard():
    """A 56-wide row padded by 1 on each side: the loop splits into 1 + 56 + 1, the 56
    carry no select and become vector stores; the padding rows stay whole zero rows."""
    f = _padded(6, 56, 1, 1, False)
    sch = tt.Schedule(f)
    sch.vectorize(sch.get_loops(sch.get_block("pad"))[-1])
    low = lower(sch.func)
    rows = [s for s in walk(low.body) if isinstance(s, For) and s.extent == 56]
    assert rows, "no 56-long loop: the row was not partitioned"
    for loop in rows:
        stores = [s for s in walk(loop.body) if isinstance(s, BufferStore)]
        selects = [e for s in stores for e in iter_exprs(s.value) if isinstance(e, Select)]
        assert not selects  # the rows' guard was partitioned away too
    assert any(s.extent == 58 for s in walk(low.body) if isinstance(s, For))  # pad rows
    src = emit_c(low, TARGET)
    # The widest vector that divides the 56-long row: 8 lanes on AVX2, and on AVX-512
    # too (56 is not a multiple of 16), so no store needs a tail.
    lanes = TARGET.lanes("float32")
    width = max(w for w in (2, 4, 8, 16, 32) if w <= lanes and 56 % w == 0)
    assert f"tt_st_f32x{width}(" in src


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(["<", "<=", ">", ">="]),
       sign=st.sampled_from([1, -1, 2, -2, 3, -5, 6, -7]),
       a=st.integers(-20, 20), b=st.integers(-20, 20))
def test_guard_intervals_match_brute_force(op, sign, a, b):
    """``k * v + a OP b`` (a tile's tail guard has k = the tile size): the interval the
    partitioner derives is exactly the set of v in [-40, 40] where the comparison holds."""
    from tensortune.codegen.partition import _interval
    from tensortune.tir.expr import BinOp, IntImm, Var

    v = Var("v")
    lhs = BinOp("+", BinOp("*", IntImm(sign), v, "int32"), IntImm(a), "int32")
    lo, hi = _interval(BinOp(op, lhs, IntImm(b), "bool"), v)
    py = {"<": lambda x, y: x < y, "<=": lambda x, y: x <= y,
          ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}[op]
    for x in range(-40, 41):
        assert py(sign * x + a, b) == (lo <= x < hi), (x, lo, hi)


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(["<", "<=", ">", ">="]),
       sign=st.sampled_from([1, -1, 2, -16, 16]), lane=st.sampled_from([1, -1, 3]),
       width=st.integers(1, 16), a=st.integers(-40, 40), b=st.integers(-40, 40))
def test_guard_intervals_with_lanes_hold_for_every_lane(op, sign, lane, width, a, b):
    """``k * v + m * l + a OP b`` with ``l`` a vector loop's lane in [0, width): the
    interval is exactly the v where the comparison holds for every lane."""
    from tensortune.codegen.partition import _interval
    from tensortune.tir.expr import BinOp, IntImm, Var

    v, lv = Var("v"), Var("l")
    lhs = BinOp("+", BinOp("+", BinOp("*", IntImm(sign), v, "int32"),
                           BinOp("*", IntImm(lane), lv, "int32"), "int32"), IntImm(a), "int32")
    term = BinOp(op, lhs, IntImm(b), "bool")
    assert _interval(term, v) is None    # a lane in the term: only with the lanes given
    lo, hi = _interval(term, v, {lv: (0, width - 1)})
    py = {"<": lambda x, y: x < y, "<=": lambda x, y: x <= y,
          ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}[op]
    for x in range(-40, 41):
        every = all(py(sign * x + lane * t + a, b) for t in range(width))
        assert every == (lo <= x < hi), (x, lo, hi)


@settings(max_examples=15, deadline=None)
@given(M=st.integers(1, 6), N=st.integers(17, 300))
def test_a_reduction_split_into_vectors_and_a_tail_runs_all_but_its_end_as_vectors(M, N):
    """A row max split [None, 16] and rfactored (AddRFactor's fork for a row with no
    divisor of whole vectors): the reduction loop is cut where the guard starts to
    depend on the lane; the part before it has no guard and becomes vector code."""
    f = tt.workloads.get("smx", M=M, N=N)
    sch = tt.Schedule(f)
    i, j = sch.get_loops(sch.get_block("rowmax"))
    _, j1 = sch.split(j, [None, 16])
    sch.rfactor(j1, 1)
    rf = sch.get_block("rowmax_rf")
    sch.decompose_reduction(rf, sch.get_loops(rf)[1])
    sch.vectorize(sch.get_loops(sch.get_block("rowmax_rf"))[-1])
    kernel = tt.build(sch)
    x = random_inputs(f, seed=N)
    check_close(kernel(*x), evaluate(f, x)[0])
    if N >= 32 and TARGET.lanes("float32") == 16:
        assert "tt_vmax_f32x16(" in kernel.source
