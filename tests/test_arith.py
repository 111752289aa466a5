"""Integer arithmetic of the loop IR: simplification, affine and flat forms,
quotient and remainder merging, substitution and delinearization, each checked against
evaluation on random points (property-based)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_exprs import VARS as _VARS
from ir_exprs import int_exprs as _int_exprs

from tensortune.tir import Var
from tensortune.tir.arith import simplify
from tensortune.tir.stmt import Buffer


@settings(max_examples=60, deadline=None)
@given(outer_coef=st.integers(1, 64), coefs=st.lists(st.integers(-9, 9), min_size=1,
                                                      max_size=2),
       extents=st.lists(st.integers(1, 6), min_size=2, max_size=2), const=st.integers(0, 40),
       c=st.sampled_from([2, 8, 16]))
def test_the_region_of_a_strip_index_covers_every_value(outer_coef, coefs, extents, const, c):
    """``(k X + sum(a_i y_i) + b) // c``, X outer: for every X the region (start, extent)
    holds every value the inner loops produce, and spans at most one strip more than
    those values need; the buffer a strip copy compacts to is sized from it."""
    from tensortune.tir.analysis import region
    from tensortune.tir.arith import evaluate_grid
    from tensortune.tir.expr import BinOp, IntImm

    x = Var("x")
    ys = [Var(f"y{i}") for i in range(len(coefs))]
    e: object = BinOp("*", x, IntImm(outer_coef), "int32")
    for y, k in zip(ys, coefs):
        e = BinOp("+", e, BinOp("*", y, IntImm(k), "int32"), "int32")
    e = BinOp("//", BinOp("+", e, IntImm(const + 9 * 6 * 2), "int32"), IntImm(c), "int32")
    inner = {y: (0, n - 1) for y, n in zip(ys, extents)}
    ranges = {x: (0, 7), **inner}
    start, ext, _ = region(e, inner, ranges)
    for xv in range(8):
        env = {x: np.array([xv])}
        lo = int(np.atleast_1d(evaluate_grid(start, env))[0])
        grid = np.meshgrid(*[np.arange(n) for n in extents[:len(ys)]], indexing="ij")
        vals = np.atleast_1d(evaluate_grid(e, {x: np.full(grid[0].size, xv),
                                               **{y: g.ravel() for y, g in zip(ys, grid)}}))
        assert lo <= vals.min() and vals.max() < lo + ext
        assert ext <= vals.max() - vals.min() + 2


@settings(max_examples=300, deadline=None)
@given(e=_int_exprs(_VARS), his=st.lists(st.integers(0, 70), min_size=6, max_size=6),
       seed=st.integers(0, 2**16))
def test_simplify_matches_the_node_by_node_rewrite_under_any_ranges(e, his, seed):
    """``simplify`` builds an affine subtree's form at once and keeps its answers on the
    nodes (per the ranges of their variables). Under two sets of ranges, asked in turn of
    the same nodes, it must give what rewriting node by node from the leaves gives, and
    keep the value on random points of the ranges."""
    from tensortune.tir.arith import _simplify_node, evaluate_grid
    from tensortune.tir.functor import rewrite_expr

    rng = np.random.default_rng(seed)
    for rs in (his[:3], his[3:], his[:3]):
        ranges = {v: (0, h) for v, h in zip(_VARS, rs)}
        got = simplify(e, ranges)
        want = rewrite_expr(e, lambda x, r=ranges: _simplify_node(x, r))
        assert str(got) == str(want)
        env = {v: rng.integers(0, h + 1, 64) for v, h in zip(_VARS, rs)}
        before, after = evaluate_grid(e, env), evaluate_grid(got, env)
        assert before is not None and after is not None
        assert np.array_equal(np.broadcast_to(before, (64,)), np.broadcast_to(after, (64,)))


@settings(max_examples=200, deadline=None)
@given(e=_int_exprs(_VARS), to=_int_exprs(_VARS[1:]), which=st.integers(0, 2))
def test_substitute_matches_a_rewrite_of_every_node(e, to, which):
    """``substitute`` does not walk a subtree without the replaced variable; it must give
    what rewriting every node gives, and hand back the very node when nothing changed."""
    from tensortune.tir.functor import free_vars, rewrite_expr, substitute

    vmap = {_VARS[which]: to}
    got = substitute(e, vmap)
    want = rewrite_expr(e, lambda x: vmap.get(x) if isinstance(x, Var) else None)
    assert str(got) == str(want)
    if _VARS[which] not in free_vars(e):
        assert got is e


@settings(max_examples=200, deadline=None)
@given(idx=st.lists(_int_exprs(_VARS), min_size=1, max_size=3),
       shape=st.lists(st.integers(1, 40), min_size=3, max_size=3),
       his=st.lists(st.integers(0, 70), min_size=3, max_size=3))
def test_flat_forms_match_the_row_major_tree(idx, shape, his):
    """``flat_affine`` and ``simplify_flat`` fold a buffer's row-major offset without
    building its tree: the same terms in the same order as ``affine`` and ``simplify`` of
    ``Buffer.flat_index``, affine or not."""
    from tensortune.tir.arith import affine, flat_affine, simplify_flat

    buf = Buffer("t", tuple(shape[: len(idx)]))
    tree = buf.flat_index(tuple(idx))
    want = affine(tree)
    got = flat_affine(buf.shape, tuple(idx))
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert list(got[0].items()) == list(want[0].items()) and got[1] == want[1]
    ranges = {v: (0, h) for v, h in zip(_VARS, his)}
    assert str(simplify_flat(buf.shape, tuple(idx), ranges)) == str(simplify(tree, ranges))


def _summed_and_simplified(parts, order, seed):
    """``simplify`` of the sum of ``parts`` in ``order``, checked to keep its value on 64
    random points (negative ones included)."""
    from tensortune.tir.arith import evaluate_grid
    from tensortune.tir.expr import BinOp

    e = parts[order[0]]
    for i in order[1:]:
        e = BinOp("+", e, parts[i], "int32")
    got = simplify(e)
    rng = np.random.default_rng(seed)
    env = {v: rng.integers(-60, 90, 64) for v in _VARS}
    before, after = evaluate_grid(e, env), evaluate_grid(got, env)
    assert before is not None and after is not None
    assert np.array_equal(np.broadcast_to(before, (64,)), np.broadcast_to(after, (64,)))
    return got


@settings(max_examples=150, deadline=None)
@given(x=_int_exprs(_VARS), rest=_int_exprs(_VARS), c=st.sampled_from([2, 3, 7, 16]),
       k=st.sampled_from([1, 2, -3, 56]), order=st.permutations(range(3)),
       seed=st.integers(0, 2**16))
def test_a_quotient_and_remainder_pair_merges_and_keeps_its_value(x, rest, c, k, order,
                                                                  seed):
    """``x // c * (k * c) + x % c * k`` (in any order among other terms) becomes ``x * k``:
    no ``x % c`` is left, and the value is the same on random points, negative ones
    included (floor division)."""
    from tensortune.tir.expr import BinOp, IntImm

    def term(op: str, coef: int) -> BinOp:
        return BinOp("*", BinOp(op, x, IntImm(c), "int32"), IntImm(coef), "int32")

    parts = [term("//", k * c), term("%", k), rest]
    got = _summed_and_simplified(parts, order, seed)
    # The merge takes a pair whose quotient term is exactly k * c times x // c: a rest
    # with a quotient of its own (``b // 2``, adding to the pair's) is left as it is.
    if "%" not in str(rest) and "//" not in str(rest) and "//" not in str(x) \
            and "%" not in str(x):
        assert "%" not in str(got)


@settings(max_examples=120, deadline=None)
@given(x=_int_exprs(_VARS), rest=_int_exprs(_VARS), b=st.sampled_from([2, 3, 4]),
       c=st.sampled_from([2, 3, 7]), k=st.sampled_from([1, 2, -3, 128]),
       order=st.permutations(range(4)), seed=st.integers(0, 2**16))
def test_nested_quotients_and_remainders_merge_and_keep_their_value(x, rest, b, c, k, order,
                                                                    seed):
    """Three loops fused index ``x // (b*c) * (k*b*c) + x // c % b * (k*c) + x % c * k``:
    in any order among other terms it becomes ``x * k`` (``x // c // b`` is ``x // (b*c)``),
    with the same value on random points, negative ones included (floor division)."""
    from tensortune.tir.expr import BinOp, IntImm

    def times(e, coef: int) -> BinOp:
        return BinOp("*", e, IntImm(coef), "int32")

    def op(o: str, e, d: int) -> BinOp:
        return BinOp(o, e, IntImm(d), "int32")

    parts = [times(op("//", x, b * c), k * b * c), times(op("%", op("//", x, c), b), k * c),
             times(op("%", x, c), k), rest]
    got = _summed_and_simplified(parts, order, seed)
    # A fused loop's variable (other x may simplify inside the pairs first, a + a to a * 2,
    # and leave no pair to merge).
    if isinstance(x, Var) and all(o not in str(rest) for o in ("%", "//")):
        assert "%" not in str(got) and "//" not in str(got)


@settings(max_examples=100, deadline=None)
@given(extents=st.lists(st.integers(1, 9), min_size=1, max_size=4),
       offset=st.integers(0, 50), past=st.booleans())
def test_delinearize_gives_the_row_major_index_of_every_position(extents, offset, past):
    """``delinearize`` (what ``fuse`` binds each loop to, and a gathered copy's rows)
    gives the row-major index of every flat position, of an offset flat index too, whose
    outermost index may run past its extent (it has no modulo)."""
    from tensortune.tir.arith import delinearize, evaluate_grid

    f = Var("f")
    total = int(np.prod(extents))
    if not past:
        offset = min(offset, total - 1)
    hi = 3 * total if past else total - 1 - offset
    got = delinearize(f + offset, extents, {f: (0, hi)})
    flat = np.arange(hi + 1) + offset
    assert len(got) == len(extents)
    for k, e in enumerate(got):
        inner = int(np.prod(extents[k + 1:]))
        want = flat // inner if k == 0 else flat // inner % extents[k]
        values = evaluate_grid(e, {f: np.arange(hi + 1)})
        np.testing.assert_array_equal(np.broadcast_to(values, want.shape), want)
