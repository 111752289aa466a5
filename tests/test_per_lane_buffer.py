"""A buffer allocated inside a vectorized loop is each lane's own (a padded input computed
inside a vector loop over output channels): it is a vector variable and the loop stays
vector code (``SimdEmitter._privatize``). A store the same in every lane to a buffer
that outlives the loop is not run once for all lanes: the loop is emitted lane by lane,
where running it once would change what the lanes see. Both keep the loop's meaning."""

import ctypes
import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import compile_source, emit_c, lower
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.expr import BinOp, BufferLoad, Expr, FloatImm, IntImm, Var
from tensortune.tir.stmt import Allocate, Buffer, BufferStore, For, ForKind, PrimFunc, Seq, Stmt

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")
# A promoted tile's element subscripted by a constant lane: the loop went lane by lane.
BY_LANE = re.compile(r"acc_r\d+\[\d+\]")


def _padded_row_conv(h: int, k: int, r: int) -> PrimFunc:
    """out[y, c] = sum_q pad[y + q] * w[q, c], pad the input row with r // 2 zeros each side."""
    x = te.placeholder((h,), name="x")
    w = te.placeholder((r, k), name="w")
    p = r // 2
    pad = te.compute((h + 2 * p,), lambda i: te.if_then_else(
        te.all(i >= p, i < h + p), x[i - p], 0.0), name="pad")
    q = te.reduce_axis(r, name="q")
    out = te.compute((h, k), lambda y, c: te.sum(pad[y + q] * w[q, c], axis=q), name="out")
    return te.create_func([x, w, out], name="padded_row_conv")


@settings(max_examples=12, deadline=None)
@given(h=st.integers(2, 9), vectors=st.sampled_from([1, 2, 1.5, 2.25]),
       r=st.sampled_from([1, 3, 5]), tile=st.booleans(), seed=st.integers(0, 1000))
def test_a_pad_computed_inside_the_vector_loop_stays_vector_code(h, vectors, r, tile, seed):
    """The pad computed at the vectorized loop over output channels (the innermost
    location the search may sample): each lane's copy of the same element is one store,
    the update is vector code, the results equal the reference."""
    k = int(vectors * LANES)
    f = _padded_row_conv(h, k, r)
    sch = tt.Schedule(f)
    blk = sch.get_block("out")
    y, c, q = sch.get_loops(blk)
    sch.reorder(y, q, c)
    if tile:   # the channels held in registers, as the search's tiles are
        wb = sch.cache_write(blk, 0, "local")
        sch.reverse_compute_at(wb, y)
        sch.vectorize(sch.get_loops(wb)[-1])
    c = sch.get_loops(blk)[-1]
    sch.vectorize(c)
    sch.compute_at(sch.get_block("pad"), c)
    src = emit_c(lower(sch.func), TARGET)
    # The pad's one store, once per vector chunk, not once per lane.
    assert len(re.findall(r"\bpad\w*\s*=", src)) <= len(re.findall(r"tt_ld_f32x", src))
    assert "tt_ld_f32x" in src
    ins = random_inputs(f, seed=seed)
    check_close(tt.build(sch)(*[np.copy(a) for a in ins]), evaluate(f, ins)[0])


N = 2 * LANES   # two vectors


def _loop(case: str) -> tuple[PrimFunc, Callable]:
    """A vectorized loop over j writing a promoted tile acc (then copied to out), with a
    scalar t stored the same in every lane; ``case`` says where. Returns the function and
    the sequential answer (lane by lane, as the loop means)."""
    x, w, out = Buffer("x", (N,)), Buffer("w", (N,)), Buffer("out", (N,))
    acc = Buffer("acc", (N,), scope="local")
    t = Buffer("t", (1,), scope="local")
    j, j0, j1 = Var("j"), Var("j0"), Var("j1")
    zero = (IntImm(0),)

    def mul(a: Expr, b: Expr) -> Expr:
        return BinOp("*", a, b, "float32")

    update = BufferStore(acc, (j,), mul(BufferLoad(t, zero), BufferLoad(w, (j,))))
    body: Stmt
    if case == "safe":         # t = 3 x[0]; acc[j] = t w[j]
        body = Allocate(t, Seq((BufferStore(t, zero, mul(BufferLoad(x, zero), FloatImm(3.0))),
                                update)))
        pre: list[Stmt] = []
    elif case == "reads_written":   # t = acc[0] + 1 (acc[0] written by lane 0); acc[j] = t w[j]
        body = Seq((BufferStore(t, zero, BinOp("+", BufferLoad(acc, zero), FloatImm(1.0),
                                                "float32")), update))
        pre = [For(j0, N, BufferStore(acc, (j0,), BufferLoad(x, (j0,))), ForKind.VECTORIZED)]
    else:                       # "read_before": acc[j] = t w[j]; t = x[0] (t was 5)
        body = Seq((update, BufferStore(t, zero, BufferLoad(x, zero))))
        pre = [BufferStore(t, zero, FloatImm(5.0))]
    loop = For(j, N, body, ForKind.VECTORIZED)
    back = For(j1, N, BufferStore(out, (j1,), BufferLoad(acc, (j1,))), ForKind.VECTORIZED)
    inner: Stmt = Seq((*pre, loop, back))
    if case != "safe":
        inner = Allocate(t, inner)
    func = PrimFunc("invariant_store", (x, w, out), Allocate(acc, inner), num_outputs=1)

    def sequential(xv: np.ndarray, wv: np.ndarray) -> np.ndarray:
        a, tv = (xv.copy(), 5.0) if case != "safe" else (np.zeros(N, "float32"), 0.0)
        for lane in range(N):
            if case == "safe":
                tv = xv[0] * 3
                a[lane] = tv * wv[lane]
            elif case == "reads_written":
                tv = a[0] + 1
                a[lane] = tv * wv[lane]
            else:
                a[lane] = tv * wv[lane]
                tv = xv[0]
        return a

    return func, sequential


@pytest.mark.parametrize("case", ["safe", "reads_written", "read_before"])
def test_an_invariant_store_runs_once_only_where_the_lanes_cannot_tell(case):
    """A t local to the loop is each lane's own, vector code. A t that outlives it goes
    lane by lane: run once for all lanes, ``t = acc[0] + 1`` would miss lane 0's store to
    acc[0], and ``t = x[0]`` after a read of t would give every lane the value lane 0
    read. All three compute what the loop means."""
    func, sequential = _loop(case)
    src = emit_c(func, TARGET)
    assert (BY_LANE.search(src) is None) == (case == "safe")
    rng = np.random.default_rng(3)
    xv, wv = (rng.standard_normal(N).astype("float32") for _ in range(2))
    out = np.full(N, 7.0, "float32")
    lib = ctypes.CDLL(str(compile_source(src, TARGET)))
    lib.tt_kernel(*[a.ctypes.data_as(ctypes.c_void_p) for a in (xv, wv, out)])
    np.testing.assert_allclose(out, sequential(xv, wv), rtol=1e-6)
