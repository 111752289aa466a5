"""Loop unswitching (codegen/unswitch.py): a select on a condition the loop does not
change leaves the loop; the copies keep the meaning of the select."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import lower
from tensortune.codegen.unswitch import MAX_COPIES, unswitch_loops
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.expr import Select
from tensortune.tir.functor import iter_exprs, stmt_exprs, walk
from tensortune.tir.stmt import For, ForKind, IfThenElse, PrimFunc


def _table(rows: int, coefs: list[list[float]], n: int) -> PrimFunc:
    """out[e, i] = sum_j coefs[e][j] * x[j, i]: the formula picked by a select on e."""
    x = te.placeholder((len(coefs[0]), n), name="x")

    def value(e, i):
        def formula(r):
            out = x[0, i] * coefs[r][0]
            for j in range(1, len(coefs[r])):
                out = out + x[j, i] * coefs[r][j]
            return out
        v = formula(rows - 1)
        for r in range(rows - 2, -1, -1):
            v = te.if_then_else(e == r, formula(r), v)
        return v

    out = te.compute((rows, n), value, name="out")
    return te.create_func([x, out], name="table")


def _selects_in_loops(body) -> list[Select]:
    """The selects left in the stores of innermost loops."""
    found = []
    for loop in walk(body):
        if isinstance(loop, For) and not any(isinstance(s, For) for s in walk(loop.body)):
            found += [sub for s in walk(loop.body) for e in stmt_exprs(s)
                      for sub in iter_exprs(e) if isinstance(sub, Select)]
    return found


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 6), terms=st.integers(1, 4), n=st.integers(2, 100),
       vec=st.booleans(), parallel=st.booleans(), data=st.data())
def test_unswitched_tables_compute_the_reference(rows, terms, n, vec, parallel, data):
    """Random formula tables (non-zero coefficients), the inner loop vectorized or not,
    the outer loop parallel or not: the kernel equals the reference, and no select is
    left inside the inner loop (at least 2 long: a loop of one is folded away and its
    select is then on the loop around it)."""
    coefs = [[data.draw(st.sampled_from([-2.0, -1.0, -0.5, 0.25, 0.5, 1.0, 3.0]))
              for _ in range(terms)] for _ in range(rows)]
    f = _table(rows, coefs, n)
    sch = tt.Schedule(f)
    e, i = sch.get_loops(sch.get_block("out"))
    if vec:
        sch.vectorize(i)
    if parallel:
        sch.parallel(e)
    low = lower(sch.func)
    assert not _selects_in_loops(low.body)
    inputs = random_inputs(f, seed=rows * 1000 + n)
    check_close(tt.build(sch)(*[np.copy(a) for a in inputs]), evaluate(f, inputs)[0])


def test_a_long_row_in_a_copy_loops_over_its_vectors():
    """Each copy's vector row of at least MIN_ROLLED_CHUNKS whole vectors is a loop that
    gcc is told not to unroll (four copies here); a shorter row, or one outside any copy,
    is written out as before; both compute the reference."""
    from tensortune.codegen.simd import MIN_ROLLED_CHUNKS

    lanes = tt.Target.host().lanes("float32")
    coefs = [[1.0, -0.5], [0.25, 3.0], [-2.0, 1.0], [0.5, 0.5]]
    for chunks, rolled in ((MIN_ROLLED_CHUNKS, 4), (MIN_ROLLED_CHUNKS - 1, 0)):
        for rows in (4, 1):
            f = _table(rows, coefs[:rows], chunks * lanes)
            sch = tt.Schedule(f)
            sch.vectorize(sch.get_loops(sch.get_block("out"))[1])
            k = tt.build(sch)
            assert k.source.count("#pragma GCC unroll 1") == (rolled if rows == 4 else 0)
            inputs = random_inputs(f, seed=chunks)
            check_close(k(*[np.copy(a) for a in inputs]), evaluate(f, inputs)[0])


def test_a_condition_on_the_loop_itself_stays():
    """``select(i < 3, ...)`` changes with i: the i loop is not unswitched (that is
    partitioning's case), and the e loop around it is not either (i is bound inside)."""
    x = te.placeholder((4, 8), name="x")
    out = te.compute((4, 8), lambda e, i: te.if_then_else(i * e < 3, x[e, i], x[e, i] * 2.0),
                     name="out")
    f = te.create_func([x, out], name="inner")
    low = lower(tt.Schedule(f).func)
    assert not any(isinstance(s, IfThenElse) for s in walk(low.body))
    assert _selects_in_loops(low.body)


def test_a_condition_that_reads_memory_stays():
    """A select on a loaded value is not a condition on loop variables: kept."""
    x = te.placeholder((4, 8), name="x")
    g = te.placeholder((4,), name="g")
    out = te.compute((4, 8), lambda e, i: te.if_then_else(g[e] > 0.0, x[e, i], 0.0),
                     name="out")
    f = te.create_func([x, g, out], name="loaded")
    low = lower(tt.Schedule(f).func)
    assert _selects_in_loops(low.body)


def test_too_many_copies_leave_the_loop_whole():
    """A table of more formulas than MAX_COPIES is left as it is."""
    rows = MAX_COPIES + 1
    f = _table(rows, [[1.0 + r] for r in range(rows)], 8)
    low = lower(tt.Schedule(f).func)
    assert _selects_in_loops(low.body)
    small = lower(tt.Schedule(_table(MAX_COPIES, [[1.0 + r] for r in range(MAX_COPIES)],
                                     8)).func)
    assert not _selects_in_loops(small.body)


def test_parallel_loops_are_not_copied():
    """The unswitch happens inside a parallel loop, never around it."""
    f = _table(4, [[1.0], [2.0], [3.0], [4.0]], 16)
    sch = tt.Schedule(f)
    e, _ = sch.get_loops(sch.get_block("out"))
    sch.parallel(e)
    low = unswitch_loops(lower(sch.func).body)
    tops = [s for s in walk(low) if isinstance(s, For) and s.kind == ForKind.PARALLEL]
    assert len(tops) == 1 and isinstance(tops[0].body, IfThenElse)


def test_many_independent_conditions_stop_early():
    """Twenty conditions, each on its own outer variable, would make 2^20 copies; the
    pass gives up after ``MAX_COPIES`` and leaves the loop as it was."""
    x = te.placeholder((64,), name="x")
    n = 20
    shape = (2,) * n + (64,)

    def value(*idx):
        v = x[idx[-1]]
        for a in idx[:-1]:
            v = v * te.if_then_else(a == 0, 2.0, 3.0)
        return v

    import inspect

    params = [inspect.Parameter(f"i{d}", inspect.Parameter.POSITIONAL_ONLY)
              for d in range(n + 1)]
    value.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    many = te.compute(shape, value, name="many")
    f = te.create_func([x, many], name="many")
    low = lower(tt.Schedule(f).func)   # without the early stop: 2^20 copies, no end
    assert _selects_in_loops(low.body)


def _picked_exprs():
    """Float expressions over loads of one buffer whose selects test either ``a < 3``
    (built afresh each time: structurally equal, not the same object) or ``b < 5``."""
    from tensortune.tir.expr import BinOp, BufferLoad, FloatImm, IntImm, Var
    from tensortune.tir.stmt import Buffer

    a, b = Var("a"), Var("b")
    buf = Buffer("X", (16,), "float32")
    leaves = st.one_of(st.integers(0, 15).map(lambda i: BufferLoad(buf, (IntImm(i),))),
                       st.floats(-2, 2, allow_nan=False).map(lambda v: FloatImm(v)))

    def extend(sub):
        cond = st.sampled_from([(a, 3), (b, 5)]).map(
            lambda t: BinOp("<", t[0], IntImm(t[1]), "bool"))
        return st.one_of(
            st.tuples(sub, sub).map(lambda t: BinOp("+", t[0], t[1], "float32")),
            st.tuples(cond, sub, sub).map(lambda t: Select(t[0], t[1], t[2], "float32")))

    return st.recursive(leaves, extend, max_leaves=12), a


@settings(max_examples=150, deadline=None)
@given(data=st.data(), value=st.booleans())
def test_deciding_a_condition_matches_a_rewrite_of_every_node(data, value):
    """``_decide`` walks only the branch it keeps; it must give what the post-order
    rewrite of every node gives."""
    from tensortune.codegen.unswitch import _decide
    from tensortune.tir.expr import BinOp, IntImm, structural_equal
    from tensortune.tir.functor import rewrite_expr, rewrite_stmt
    from tensortune.tir.printer import stmt_str
    from tensortune.tir.stmt import Buffer, BufferStore, For

    exprs, a = _picked_exprs()
    e = data.draw(exprs)
    cond = BinOp("<", a, IntImm(3), "bool")
    i = tt.tir.Var("i")
    loop = For(i, 4, BufferStore(Buffer("Y", (4,), "float32"), (i,), e))

    def pick(x):
        if isinstance(x, Select) and structural_equal(x.cond, cond):
            return x.t if value else x.f
        return x

    want = rewrite_stmt(loop, expr_fn=lambda x: rewrite_expr(x, pick))
    assert stmt_str(_decide(loop, cond, value)) == stmt_str(want)
