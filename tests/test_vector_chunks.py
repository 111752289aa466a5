"""Vectorized loops whose extent is not a whole number of vectors: the code generator
emits whole vectors and then a half and a quarter vector (``chunk_plan``), in register
tiles too, and writes a buffer the kernel reads back in vectors no wider than its reads."""

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import examples, te
from tensortune.codegen.simd import chunk_plan, chunk_width
from tensortune.reference import check_close, evaluate, random_inputs

LANES = tt.Target.host().lanes("float32")


@given(extent=st.integers(1, 300), lanes=st.sampled_from([4, 8, 16]))
def test_chunk_plan_covers_the_loops_chunk_width_covers(extent, lanes):
    plan = chunk_plan(extent, lanes)
    width = chunk_width(extent, lanes)
    assert (plan is None) == (width is None)
    if plan is None:
        return
    allowed = [w for w in (lanes, lanes // 2, lanes // 4) if w >= 2]
    assert [off for off, _ in plan] == [sum(w for _, w in plan[:i]) for i in range(len(plan))]
    assert sum(w for _, w in plan) == extent
    widths = [w for _, w in plan]
    assert all(w in allowed for w in widths) and widths == sorted(widths, reverse=True)
    # Whole vectors first; at most one half and one quarter vector after them.
    assert sum(w < lanes for w in widths) <= 2
    assert len(plan) <= extent // width


def test_a_row_of_56_is_three_whole_vectors_and_a_half():
    assert chunk_plan(56, 16) == ((0, 16), (16, 16), (32, 16), (48, 8))
    assert chunk_plan(28, 8) == ((0, 8), (8, 8), (16, 8), (24, 4))
    assert chunk_plan(10, 16) is None


@settings(max_examples=12, deadline=None)
@given(whole=st.integers(1, 3), half=st.booleans(), quarter=st.booleans(),
       rows=st.integers(1, 3), k=st.integers(2, 7))
def test_a_register_tile_of_mixed_vector_widths_matches_the_reference(
        whole, half, quarter, rows, k):
    cols = whole * LANES + half * (LANES // 2) + quarter * (LANES // 4)
    # The GMM recipe: B packed in panels of ``cols``, a rows x cols tile in registers.
    func = tt.workloads.get("gmm", M=2 * rows + 1, N=2 * cols, K=k)
    sch = examples.gmm(tt.Schedule(func), mr=rows, nr=cols)
    kernel = tt.build(sch)
    plan = chunk_plan(cols, LANES)
    assert plan is not None
    # Every chunk of every row is a variable of its own width (the tile is in registers).
    declared = re.findall(r"tt_f32x(\d+) ((?:C_local_r\d+(?:, )?)+);", kernel.source)
    count: dict[int, int] = {}
    for w, names in declared:
        count[int(w)] = count.get(int(w), 0) + len(names.split(", "))
    expected: dict[int, int] = {}
    for _, w in plan:
        expected[w] = expected.get(w, 0) + rows
    assert count == expected
    ins = random_inputs(func)
    check_close(kernel(*ins), evaluate(func, ins)[0])


def _copy_then_window(width: int, read_in: int) -> tt.Schedule:
    """``b = a + 1`` computed per row of ``out[i, j] = b[i, j] * 2 + b[i, j + q]``: b's
    row (``width`` + q, a quarter vector) is written by one vectorized loop and read back by
    ``out`` in ``read_in``-wide vectors, some of them q floats off (so b stays an array)."""
    extra = LANES // 4
    a = te.placeholder((5, width + extra), name="a")
    b = te.compute((5, width + extra), lambda i, j: a[i, j] + 1.0, name="b")
    out = te.compute((5, width), lambda i, j: b[i, j] * 2.0 + b[i, j + extra], name="out")
    sch = tt.Schedule(te.create_func([a, out], name="copy_then_window"))
    i, j = sch.get_loops(sch.get_block("out"))
    _, ji = sch.split(j, [None, read_in])
    sch.vectorize(ji)
    sch.compute_at(sch.get_block("b"), i)
    sch.vectorize(sch.get_loops(sch.get_block("b"))[-1])
    return sch


def _store_widths(source: str, buf: str) -> set[int]:
    return {int(w) for w in re.findall(rf"tt_st_f32x(\d+)\(&{buf}\[", source)}


def test_a_buffer_read_back_in_narrow_vectors_is_written_in_them():
    """DEP's padded copy under an 8-lane tile ran 1.25x slower written 16 lanes at a time
    (RESULTS.md): a row read back in half vectors is written in half vectors."""
    width = LANES + LANES // 2
    narrow = _copy_then_window(width, LANES // 2)
    wide = _copy_then_window(width, width)
    k_narrow, k_wide = tt.build(narrow), tt.build(wide)
    assert _store_widths(k_narrow.source, "b") == {LANES // 2, LANES // 4}
    assert _store_widths(k_wide.source, "b") == {LANES, LANES // 2, LANES // 4}
    for sch, kernel in ((narrow, k_narrow), (wide, k_wide)):
        ins = random_inputs(sch.func)
        np.testing.assert_allclose(kernel(*ins), evaluate(sch.func, ins)[0], rtol=1e-6)


def _gelu(M: int, N: int):
    X = te.placeholder((M, N), name="X")
    Y = te.compute((M, N), lambda i, j: 0.5 * X[i, j] * (1.0 + te.tanh(
        0.79788456 * (X[i, j] + 0.044715 * X[i, j] * X[i, j] * X[i, j]))), name="Y")
    return te.create_func([X, Y], name="gelu")


@settings(max_examples=12, deadline=None)
@given(M=st.integers(1, 5), N=st.integers(1, 90), parallel=st.booleans())
def test_a_row_of_no_whole_quarter_vectors_vectorizes_all_but_its_tail(M, N, parallel):
    """77 = 64 + 8 + 4 + 1 on AVX-512: vectors up to the last quarter vector, the rest
    scalar; the whole row used to stay scalar (tanhf per element)."""
    f = _gelu(M, N)
    sch = tt.Schedule(f)
    i, j = sch.get_loops(sch.get_block("Y"))
    if parallel:
        sch.parallel(i)
    sch.vectorize(j)
    kernel = tt.build(sch)
    x = random_inputs(f, seed=N)
    check_close(kernel(*x), evaluate(f, x)[0])
    smallest = max(2, LANES // 4)
    calls = re.findall(r"tanhf\((?!float)", kernel.source)   # not its declaration
    if N >= smallest:
        assert "tt_vtanh_f32x" in kernel.source
        # Scalar tanh only for the elements after the last whole quarter vector.
        assert len(calls) == N % smallest
    else:
        assert len(calls) == 1    # a row shorter than any vector stays a scalar loop


def test_a_long_row_no_chunk_divides_is_vectorized_whole():
    """A row of 1001 (7 x 11 x 13) has no 8-64 chunk to split off: the default space
    vectorizes it whole, a loop over whole vectors and a tail, not scalar tanhf calls."""
    from tensortune.space import PostOrderApply, sample

    f = _gelu(64, 1001)   # rows enough to share out, so the row loop stays whole
    gen = PostOrderApply.default(tt.Target.host())
    x = random_inputs(f)
    want = evaluate(f, x)[0]
    for seed, space in enumerate(gen.generate(f)):
        sch = sample(f, space, seed, gen.postprocs)
        assert sch is not None and "vectorized(1001)" in str(sch.func)
        kernel = tt.build(sch)
        check_close(kernel(*x), want)
        assert "tt_vtanh_f32x" in kernel.source
        assert len(re.findall(r"tanhf\((?!float)", kernel.source)) == 1001 % max(2, LANES // 4)
