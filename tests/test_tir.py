"""The loop IR: verifier, simplifier, printer."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from ir_exprs import VARS as _VARS
from ir_exprs import int_exprs as _int_exprs

import tensortune as tt
from tensortune.tir import Block, BufferStore, For, IterVar, PrimFunc, Var, verify
from tensortune.tir.arith import bound, simplify
from tensortune.tir.stmt import Buffer


def _func(body, params, allocs=()):
    return PrimFunc("f", tuple(params), body, tuple(allocs), 1)


def test_verifier_catches_malformed_ir():
    A = Buffer("A", (4,))
    B = Buffer("B", (4,))
    i, v = Var("i"), Var("v")
    ok = For(i, 4, Block("B", (IterVar(v, 4, "S"),), (i,), BufferStore(B, (v,), A[v])))
    verify(_func(ok, [A, B]))
    stray = For(i, 4, Block("B", (IterVar(v, 4, "S"),), (i,), BufferStore(B, (v,), A[i])))
    with pytest.raises(tt.IRError, match=r"block B: uses variable\(s\) \['i'\]"):
        verify(_func(stray, [A, B]))
    C = Buffer("C", (4, 4))
    rank = For(i, 4, Block("B", (IterVar(v, 4, "S"),), (i,), BufferStore(C, (v,), A[v])))
    with pytest.raises(tt.IRError, match="C has rank 2 but is indexed with 1"):
        verify(_func(rank, [A, B, C]))
    unknown = For(i, 4, Block("B", (IterVar(v, 4, "S"),), (i,), BufferStore(C, (v, v), A[v])))
    with pytest.raises(tt.IRError, match="neither a parameter nor allocated"):
        verify(_func(unknown, [A, B]))
    w = Var("w")
    nested = For(i, 4, For(w, 0, Block("B", (IterVar(v, 4, "S"),), (i,),
                                       BufferStore(B, (v,), A[v]))))
    with pytest.raises(tt.IRError, match="extent 0"):
        verify(_func(nested, [A, B]))


def test_simplify_and_bounds():
    i0, i1, f = Var("i0"), Var("i1"), Var("f")
    r = {i0: (0, 7), i1: (0, 31), f: (0, 223)}
    assert str(simplify((i0 * 32 + i1) // 32, r)) == "i0"
    assert str(simplify((i0 * 32 + i1) % 32, r)) == "i1"
    assert str(simplify((f // 56 * 16 + i1 % 16) // 16, r)) == "f // 56"
    assert str(simplify(i0 * 32 + i1 < 256, r)) == "True"
    assert bound((f % 3) * 2 + i1, r) == (0, 35)
    # Two different variables with the same name never cancel.
    a, b = Var("x"), Var("x")
    assert str(simplify((a // 2 + 1) - b // 2, {a: (0, 9), b: (0, 9)})) != "1"


def test_producers_and_consumers():
    sch = tt.Schedule(tt.workloads.get("smx", small=True))
    y = sch.get_block("Y")
    names = sorted(sch._get(b, type(y), "t") for b in sch.get_producers(y))
    assert names == ["rowmax", "rowsum"]
    cons = sch.get_consumers(sch.get_block("rowmax"))
    assert sorted(sch._get(b, type(y), "t") for b in cons) == ["Y", "rowsum"]


def test_memoized_analyses_match_a_fresh_walk():
    # free_vars, affine and iter_blocks keep their answer on the immutable node; a node
    # shared by two trees, or asked again after an edit, must still get the right answer.
    from tensortune.schedule.tree import iter_blocks
    from tensortune.tir.arith import affine
    from tensortune.tir.functor import free_vars, iter_exprs

    i, j, k = Var("i"), Var("j"), Var("k")
    shared = i * 4 + j
    left, right = shared + k, shared * 2
    for e in (shared, left, right, left):
        assert free_vars(e) == {x for x in iter_exprs(e) if isinstance(x, Var)}
    assert affine(left) == ({i: 4, j: 1, k: 1}, 0)
    assert affine(right) == ({i: 8, j: 2}, 0)
    assert affine(shared) == ({i: 4, j: 1}, 0)      # the parents did not change it
    assert affine(shared // 2) is None

    sch = tt.Schedule(tt.workloads.get("gmm", small=True))
    before = [(b.name, [lp.var.name for lp in p]) for b, p in iter_blocks(sch.func.body)]
    blk = sch.get_block("C")
    sch.split(sch.get_loops(blk)[0], [None, 2])
    after = [(b.name, [lp.var.name for lp in p]) for b, p in iter_blocks(sch.func.body)]
    assert before != after and len(after[0][1]) == len(before[0][1]) + 1
    outer = sch.func.body
    assert isinstance(outer, For)
    inner = [(b.name, [lp.var.name for lp in p]) for b, p in iter_blocks(outer.body, (outer,))]
    assert inner == after


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["gmm", "c2d", "nrm", "convlayer"]), pick=st.integers(0, 10**6),
       action=st.sampled_from(["delete", "wrap", "seq"]), seed=st.integers(0, 50))
def test_replace_loop_rebuilds_what_a_walk_of_the_whole_tree_rebuilds(name, pick, action,
                                                                     seed):
    """``replace_loop`` rebuilds only the path to the loop (from a kept index); on sampled
    programs it must give what replacing it by a walk of the whole tree gives, deletions
    (loops left empty go too) and sequences spliced into their parent included."""
    from tensortune.codegen import Target
    from tensortune.schedule.tree import _loops, mutate, replace_loop
    from tensortune.space import PostOrderApply, sample
    from tensortune.tir.printer import func_str
    from tensortune.tir.stmt import Seq

    func = tt.workloads.get(name, small=True)
    gen = PostOrderApply.default(Target.host())
    spaces = gen.generate(func)
    sch = sample(func, spaces[seed % len(spaces)], seed, gen.postprocs)
    assume(sch is not None)   # a draw a post-processor rejected: hypothesis draws again
    assert sch is not None
    f = sch.func
    loops = list(_loops(f.body))
    var = loops[pick % len(loops)]

    def fn(lp):
        if action == "delete":
            return None
        if action == "wrap":
            return For(Var("w"), 1, lp)
        return Seq((lp.body, lp))

    want = mutate(f.body, lambda s: isinstance(s, For) and s.var is var, fn)
    want_f = f.with_body(want if want is not None else Seq(()))
    assert func_str(replace_loop(f, var, fn)) == func_str(want_f)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["gmm", "c2d", "nrm", "convlayer"]), pick=st.integers(0, 10**6),
       seed=st.integers(0, 50))
def test_rewrite_stmt_keeps_what_did_not_change(name, pick, seed):
    """``rewrite_stmt`` keeps every statement none of whose parts changed. On sampled
    programs, substituting one loop's variable gives what rebuilding every statement
    gives, and the statements that do not use that variable are the same objects."""
    from tensortune.codegen import Target
    from tensortune.schedule.tree import _loops
    from tensortune.space import PostOrderApply, sample
    from tensortune.tir.expr import IntImm
    from tensortune.tir.functor import free_vars, rewrite_stmt, substitute, walk
    from tensortune.tir.printer import stmt_str
    from tensortune.tir.stmt import Seq

    func = tt.workloads.get(name, small=True)
    gen = PostOrderApply.default(Target.host())
    spaces = gen.generate(func)
    sch = sample(func, spaces[seed % len(spaces)], seed, gen.postprocs)
    assume(sch is not None)
    assert sch is not None
    body = sch.func.body
    assert rewrite_stmt(body) is body and rewrite_stmt(body, lambda e: e) is body
    var = list(_loops(body))[pick % len(_loops(body))]
    vmap = {var: var + IntImm(1)}

    def rebuild(s):   # every statement anew, as rewrite_stmt did before it kept them
        if isinstance(s, For):
            return For(s.var, s.extent, rebuild(s.body), s.kind, s.annotations)
        if isinstance(s, Seq):
            return Seq(tuple(rebuild(x) for x in s.stmts))
        if isinstance(s, BufferStore):
            return BufferStore(s.buffer, tuple(substitute(i, vmap) for i in s.indices),
                               substitute(s.value, vmap))
        if isinstance(s, Block):
            return Block(s.name, s.iter_vars, tuple(substitute(b, vmap) for b in s.bindings),
                         rebuild(s.body), None if s.init is None else rebuild(s.init),
                         None if s.predicate is None else substitute(s.predicate, vmap))
        raise AssertionError(f"unexpected statement {type(s).__name__}")

    got = rewrite_stmt(body, lambda e: substitute(e, vmap))
    assert stmt_str(got) == stmt_str(rebuild(body))
    kept = {id(s) for s in walk(got)}
    for blk in walk(body):
        if isinstance(blk, Block) and not any(var in free_vars(b) for b in blk.bindings) \
                and (blk.predicate is None or var not in free_vars(blk.predicate)):
            assert id(blk) in kept


def test_simplify_and_substitute_leave_no_reference_cycles():
    """What ``simplify`` and ``substitute`` keep on nodes refers to other nodes, never
    back to the node itself, and ``substitute`` makes no self-referring closure: their
    garbage is freed at once, not left to the cyclic collector (whose passes were an eighth
    to a third of a search's drawing time)."""
    import gc

    from tensortune.tir.arith import simplify_flat
    from tensortune.tir.functor import substitute

    a, b, c = _VARS
    exprs = [a * 4 + b, (a * 8 + b) // 8, (a * 16 + b * 2 + 1) % 16, (a + 3) // 2 + b,
             tt.te.max(a, b) + c * 2, (a // 4) * 4 + a % 4]
    ranges = {a: (0, 31), b: (0, 7), c: (0, 3)}
    gc.collect()
    gc.disable()
    try:
        for _ in range(2):   # the second pass reads what the first kept
            for e in exprs:
                simplify(e, ranges)
                simplify(e, {a: (0, 3), b: (0, 1), c: (0, 1)})
                simplify(substitute(e, {a: b * 2 + c}), ranges)
                simplify_flat((32, 8), (e, b), ranges)
        del e
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_simplified_expressions_survive_pickling():
    """Nodes reach the draw workers pickled, with the marks simplify keeps on them: a
    mark must stay the module's marker there, not become an object taken for an
    expression (a T2D search once failed printing one)."""
    import pickle

    from tensortune.tir.printer import expr_str

    x, y = Var("x"), Var("y")
    for e in (x * 4 + y * 2 + 3, (x + 1) // 2 + y % 3):
        s = simplify(e, {x: (0, 7), y: (0, 5)})
        simplify(s, {x: (0, 7), y: (0, 5)})          # a second visit keeps its mark
        back = pickle.loads(pickle.dumps(s))
        again = simplify(back, {x: (0, 7), y: (0, 5)})
        assert expr_str(again, str) == expr_str(s, str)


def test_an_unpickled_expression_is_simplified_for_its_own_ranges():
    """``simplify`` keeps a tree's answers per the ranges of its variables, keyed in the
    order its variable set iterates, which follows the variables' identities; unpickled
    (in a draw worker) the set may iterate in another order. An answer found for
    a < 8, b < 4 must not come back for a < 4, b < 8, whatever the order."""
    import pickle

    from tensortune.tir.expr import BinOp, IntImm
    from tensortune.tir.functor import free_vars

    orders = set()
    for _ in range(40):    # the set's order after unpickling differs about half the time
        a, b = Var("a"), Var("b")
        e = BinOp("//", BinOp("+", BinOp("*", a, IntImm(4), "int32"), b, "int32"),
                  IntImm(4), "int32")
        for _ in range(2):   # the second visit keeps its answer
            assert str(simplify(e, {a: (0, 7), b: (0, 3)})) == "a"
        back = pickle.loads(pickle.dumps(e))
        a2, b2 = back.a.a.a, back.a.b
        orders.add([v.name for v in free_vars(e)] == [v.name for v in free_vars(back)])
        assert str(simplify(back, {a2: (0, 3), b2: (0, 7)})) == str(back)
        assert str(simplify(back, {a2: (0, 7), b2: (0, 3)})) == "a"
    assert orders == {True, False}    # both orders met: the test saw the hazard


def _float_exprs(bufs, vars_):
    """Float expressions over loads of ``bufs`` (integer index trees) and constants."""
    from tensortune.tir.expr import BinOp, BufferLoad, FloatImm, Select

    idx = _int_exprs(vars_)
    leaves = st.one_of(
        st.tuples(st.sampled_from(bufs), idx).map(lambda t: BufferLoad(t[0], (t[1],))),
        st.floats(-4, 4, allow_nan=False).map(lambda v: FloatImm(v)))

    def extend(sub):
        return st.one_of(
            st.tuples(st.sampled_from(["+", "-", "*"]), sub, sub)
            .map(lambda t: BinOp(t[0], t[1], t[2], "float32")),
            st.tuples(idx, sub, sub).map(
                lambda t: Select(BinOp("<", t[0], t[0] * 2, "bool"), t[1], t[2], "float32")))

    return st.recursive(leaves, extend, max_leaves=10)


_BUFS = [Buffer("A", (64,), "float32"), Buffer("B", (64,), "float32")]


@settings(max_examples=200, deadline=None)
@given(e=_float_exprs(_BUFS, _VARS), shifts=st.lists(st.integers(0, 3), min_size=2,
                                                      max_size=2))
def test_retargeting_buffers_in_one_walk_matches_one_at_a_time(e, shifts):
    """``retarget_many`` redirects every buffer it is given in one walk: it must give what
    retargeting them one at a time gives, and what rewriting every node gives."""
    from tensortune.tir.expr import BufferLoad, IntImm
    from tensortune.tir.functor import retarget, retarget_many, rewrite_expr
    from tensortune.tir.printer import stmt_str

    news = [Buffer("N", (68,), "float32"), Buffer("M", (68,), "float32")]

    def shifted(k):
        return lambda i: tuple(x + IntImm(k) for x in i)

    out = Buffer("O", (64,), "float32")
    store = BufferStore(out, (_VARS[0],), e)
    got = retarget_many(store, {b: (n, shifted(k)) for b, n, k in zip(_BUFS, news, shifts)})
    one = store
    for b, n, k in zip(_BUFS, news, shifts):
        one = retarget(one, b, n, shifted(k))
    assert stmt_str(got) == stmt_str(one)
    by = {b: (n, shifted(k)) for b, n, k in zip(_BUFS, news, shifts)}
    want = rewrite_expr(e, lambda x: BufferLoad(by[x.buffer][0], by[x.buffer][1](x.indices))
                        if isinstance(x, BufferLoad) and x.buffer in by else None)
    assert stmt_str(got) == stmt_str(BufferStore(out, (_VARS[0],), want))
