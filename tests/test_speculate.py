"""Guarded register tiles (a row count that does not divide the axis): the tail rows are
computed anyway in the local accumulators (codegen/speculate.py), so the reduction loop
carries no test and only the write-back keeps it. Meaning is kept on random shapes and
inputs, with the tile's outer loop serial or parallel."""

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.codegen import lower
from tensortune.codegen.speculate import speculate_tails
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.arith import evaluate_grid
from tensortune.tir.expr import BinOp, FloatImm, IntImm, Var
from tensortune.tir.functor import walk
from tensortune.tir.stmt import Allocate, Buffer, BufferStore, For, IfThenElse, PrimFunc, Seq
from tensortune.workloads.linalg import gmm


def _tiled(m: int, rows: int, mid: int, par: bool, k: int = 12) -> tuple[tt.Schedule,
                                                                       PrimFunc]:
    """C[m, 16] = A[m, k] @ B: i split [outer, mid, rows] (rows need not divide m), the
    rows unrolled inside the k loop into local accumulators, j vectorized."""
    f = gmm(m, 16, k)
    sch = tt.Schedule(f)
    blk = sch.get_block("C")
    i, j, kk = sch.get_loops(blk)
    outer = -(-m // (rows * mid))
    i0, i1, i2 = sch.split(i, [outer, mid, rows])
    sch.reorder(i0, i1, kk, i2, j)
    wb = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(wb, i1)
    sch.unroll(i2)
    sch.vectorize(j)
    rows_wb, cols_wb = sch.get_loops(wb)[-2:]  # the write-back as the tiling rule has it
    sch.unroll(rows_wb)
    sch.vectorize(cols_wb)
    if par:
        sch.parallel(i0)
    return sch, f


def _tests_in_k_loops(low: PrimFunc) -> int:
    """Tail tests (``<``-style, not the init's ``k == 0``) inside the k loops."""
    return sum(isinstance(x, IfThenElse) and x.cond.op != "=="
               for lp in walk(low.body) if isinstance(lp, For) and lp.extent == 12
               for x in walk(lp.body))


@settings(max_examples=30, deadline=None)
@given(m=st.integers(8, 40), rows=st.sampled_from([3, 5, 6, 7]), mid=st.integers(1, 4),
       par=st.booleans())
def test_guarded_tiles_compute_the_reference(m, rows, mid, par):
    sch, f = _tiled(m, rows, mid, par)
    inputs = random_inputs(f, seed=m * 10 + rows)
    check_close(tt.build(sch)(*[np.copy(a) for a in inputs]), evaluate(f, inputs)[0])


def test_the_reduction_loop_has_no_tail_test():
    """60 rows in tiles of 7 under a parallel loop (the test reads the parallel
    variable): before, each tail row's FMA sat under a test in the k loop; now none does,
    and the write-back still tests its rows (A's rows past 59 are clamped, not read)."""
    sch, _ = _tiled(60, 7, 3, par=True)
    low = lower(sch.func)
    assert _tests_in_k_loops(low) == 0
    stores = [x for x in walk(low.body) if isinstance(x, IfThenElse)
              for s in walk(x.then) if isinstance(s, BufferStore) and s.buffer.name == "C"]
    assert stores, "the write-back lost its tail test"
    kernel = tt.build(sch).source.split("int32_t tt_kernel(", 1)[1]
    assert "tt_mini(" in kernel  # A's row index clamped to 59 (the helper is defined above)


def test_a_partial_sum_read_without_the_test_keeps_it():
    """A local buffer whose element is read by a statement without the tail test (here
    a sum over both slots) must keep the test on its stores: slot 1 is only valid when
    the test holds, and the sum reads it regardless."""
    i = Var("i")
    loc = Buffer("acc", (2,), "float32", "local")
    out = Buffer("out", (4,), "float32")
    guard = IntImm(1) < (i * 2 + 1)  # a tail-style test on an outer loop variable
    from tensortune.tir.expr import BufferLoad, FloatImm
    body = For(i, 3, Seq((
        BufferStore(loc, (IntImm(0),), FloatImm(1.0)),
        IfThenElse(guard, BufferStore(loc, (IntImm(1),), FloatImm(2.0))),
        BufferStore(out, (i,), BinOp("+", BufferLoad(loc, (IntImm(0),)),
                                     BufferLoad(loc, (IntImm(1),)), "float32")),
    )))
    def spec(b):
        return speculate_tails(PrimFunc("f", (out,), Allocate(loc, b))).body

    kept = spec(body)
    assert any(isinstance(x, IfThenElse) for x in walk(kept))
    # The same store, read only under the same test, loses it.
    reader = IfThenElse(guard, BufferStore(out, (i,), BufferLoad(loc, (IntImm(1),))))
    body2 = For(i, 3, Seq((IfThenElse(guard, BufferStore(loc, (IntImm(1),),
                                                         FloatImm(2.0))), reader)))
    ifs = [x for x in walk(spec(body2)) if isinstance(x, IfThenElse)]
    assert len(ifs) == 1 and isinstance(ifs[0].then, BufferStore) \
        and ifs[0].then.buffer is out


def test_a_tail_reading_past_an_owned_buffer_grows_it():
    """Rows 1, 3, 5 of a 4-row buffer the kernel allocates: the tail row reads row 5, so
    the buffer gains two rows (indices unchanged) instead of a clamp, and the test is
    dropped."""
    from tensortune.tir.expr import BufferLoad, FloatImm

    i, r = Var("i"), Var("r")
    pad = Buffer("pad", (1, 4, 6), "float32")
    loc = Buffer("acc", (1,), "float32", "local")
    out = Buffer("out", (4,), "float32")
    guard = BinOp("<", i * 2 + 1, IntImm(4), "bool")  # the tile's second row
    upd = BufferStore(loc, (IntImm(0),), BinOp("+", BufferLoad(loc, (IntImm(0),)),
                                              BufferLoad(pad, (IntImm(0), i * 2 + 1, r)),
                                              "float32"))
    body = For(i, 3, Allocate(loc, Seq((
        IfThenElse(guard, BufferStore(loc, (IntImm(0),), FloatImm(0.0))),
        For(r, 6, IfThenElse(guard, upd)),
        IfThenElse(guard, BufferStore(out, (i * 2 + 1,), BufferLoad(loc, (IntImm(0),)))),
    ))))
    f = speculate_tails(PrimFunc("f", (out,), body, (pad,)))
    assert f.alloc_buffers[0].shape == (1, 6, 6)
    ifs = [x for x in walk(f.body) if isinstance(x, IfThenElse)]
    assert len(ifs) == 1 and ifs[0].then.buffer is out  # only the write-back's test


def _unit_batch_split() -> tuple[PrimFunc, tt.Schedule]:
    """A small conv whose unit batch loop is split by 2, with the ReLU computed under
    it: the tail row n = 1 reads past ``pad`` and stores past ``conv``."""
    f = tt.workloads.get("c2d", C=3, K=4, H=6, W=5)
    sch = tt.Schedule(f)
    loops = lambda b: sch.get_loops(sch.get_block(b))  # noqa: E731
    sch.fuse(*loops("pad")[0:2])
    sch.reverse_compute_at(sch.get_block("relu"), loops("conv")[0])
    sch.fuse(*loops("pad")[0:2])
    sch.split(loops("conv")[0], [None, 2])
    return f, sch


def test_a_tail_of_a_split_unit_loop_stays_inside_the_buffers():
    """The property test's crash (a segfault): split the unit batch loop of a conv by 2,
    with the ReLU computed under it. The tail row n = 1 reads ``pad[1, ...]`` and stores
    ``conv[1, ...]``; the buffers grew in their second dimension, which changed the stride
    of the first, and the compacted ``conv`` was never grown for the store at all. Both
    now grow in the first dimension, and the kernel computes the reference."""
    f, sch = _unit_batch_split()
    low = lower(sch.func)
    shapes = {x.buffer.name: x.buffer.shape for x in walk(low.body) if isinstance(x, Allocate)}
    shapes.update({b.name: b.shape for b in low.alloc_buffers})
    assert shapes["pad"] == (2, 3, 8, 7) and shapes["conv"] == (2, 4, 6, 5)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def _stored_zeros(s, buf) -> set[int]:
    """Flat indices of ``buf`` that the loop nest ``s`` (constant extents, integer
    arithmetic of its loop variables in the indices) stores 0.0 to."""
    out: set[int] = set()

    def run(s, env):
        if isinstance(s, For):
            for i in range(s.extent):
                run(s.body, {**env, s.var: i})
        elif isinstance(s, Seq):
            for x in s.stmts:
                run(x, env)
        elif (isinstance(s, BufferStore) and s.buffer is buf and isinstance(s.value, FloatImm)
              and s.value.value == 0.0):
            flat = 0
            for i, n in zip(s.indices, buf.shape):
                flat = flat * n + int(evaluate_grid(i, env))
            out.add(flat)

    run(s, {})
    return out


def test_rows_a_tail_reads_past_a_buffer_are_zeroed_before_it():
    """What a buffer grew by for its tail rows is never written by the program, and
    memory never written often holds denormals as floats, which made some programs
    1.5-3.0x slower by an amount that depended on the memory: the kernel now stores
    zeros there first, whether the buffer is the function's or a local allocation."""
    _, sch = _unit_batch_split()
    low = lower(sch.func)
    (pad,) = [b for b in low.alloc_buffers if b.name == "pad"]
    first = low.body.stmts[0] if isinstance(low.body, Seq) else low.body
    assert _stored_zeros(first, pad) == set(range(3 * 8 * 7, 2 * 3 * 8 * 7))
    (conv,) = [x for x in walk(low.body) if isinstance(x, Allocate) and x.buffer.name == "conv"]
    first = conv.body.stmts[0] if isinstance(conv.body, Seq) else conv.body
    assert _stored_zeros(first, conv.buffer) == set(range(4 * 6 * 5, 2 * 4 * 6 * 5))


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(
    [dict(C=8, K=16, H=7, W=7), dict(C=4, K=32, H=10, W=5), dict(C=8, K=8, H=13, W=11)]))
# The pad computed inside the vector loop over channels: 600 KB of C, lane by lane, that
# gcc did not compile in 60 s, until such stores ran once for all lanes (60 KB).
@example(seed=185, shape=dict(C=4, K=32, H=10, W=5))
def test_sampled_conv_candidates_compute_the_reference(seed, shape):
    """Random candidates of C2D's design spaces at small awkward sizes (7, 13, 11 rows:
    most row tiles are guarded, their tails read past the padded input): results equal
    the reference."""
    from tensortune.space import PostOrderApply, sample

    f = tt.workloads.get("c2d", **shape)
    gen = PostOrderApply.default(tt.Target.host())
    spaces = gen.generate(f)
    sch = sample(f, spaces[seed % len(spaces)], seed, gen.postprocs)
    if sch is None:
        return
    inputs = random_inputs(f, seed=seed)
    check_close(tt.build(sch)(*[np.copy(a) for a in inputs]), evaluate(f, inputs)[0])

