"""Integer arithmetic on index expressions: affine forms, interval bounds, simplification.

Ranges map a variable to its inclusive interval ``(lo, hi)``. Everything here is exact or
conservative: a bound may be wider than the truth, never narrower.

Example:
    >>> i0, i1 = Var("i0"), Var("i1")
    >>> str(simplify((i0 * 32 + i1) // 32, {i0: (0, 7), i1: (0, 31)}))
    'i0'
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .expr import BinOp, Expr, FloatImm, IntImm, Not, Select, Var, as_int, is_float
from .functor import free_vars, map_children, rewrite_stmt, substitute
from .linear import from_linear, linear, merge_divmod
from .stmt import Stmt, flat_index

Ranges = dict[Var, tuple[int, int]]
Affine = tuple[dict[Var, int], int]


def affine(e: Expr) -> Affine | None:
    """``e`` as ``sum(coef * var) + const`` if it is affine with integer coefficients.
    The result is kept on the (immutable) node and shared: do not modify it. Simplify
    asks it of every sub-expression, which without the memo is quadratic in depth."""
    memo = e.__dict__.get("_affine", _UNSET)
    if memo is _UNSET:
        memo = _affine(e)
        object.__setattr__(e, "_affine", memo)
    return memo


class _Sentinel:
    """A marker kept on IR nodes that stays itself through pickling: nodes go to the draw
    workers pickled, and a plain ``object()`` would arrive as a new object there, which
    the ``is`` tests below would take for an expression (the printer then met a bare
    object in a T2D search)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> str:
        return self.name        # pickled by reference to the module's global


_UNSET = _Sentinel("_UNSET")


def _affine(e: Expr) -> Affine | None:
    if isinstance(e, IntImm) and e.dtype != "bool":
        return {}, e.value
    if isinstance(e, Var):
        return {e: 1}, 0
    if isinstance(e, BinOp) and e.op in ("+", "-", "*") and not is_float(e.dtype):
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        if e.op == "*":
            if a[0] and b[0]:
                return None
            return _scaled(b, a[1]) if not a[0] else _scaled(a, b[1])
        return _summed(a, b, 1 if e.op == "+" else -1)
    return None


def _scaled(a: Affine, k: int) -> Affine:
    """``a * k``, zero terms dropped."""
    return {v: x * k for v, x in a[0].items() if x * k}, a[1] * k


def _summed(a: Affine, b: Affine, sign: int = 1) -> Affine:
    """``a + sign * b``: ``a``'s terms first, then ``b``'s new ones; zero terms dropped."""
    coefs = dict(a[0])
    for v, x in b[0].items():
        coefs[v] = coefs.get(v, 0) + sign * x
    return {v: x for v, x in coefs.items() if x}, a[1] + sign * b[1]


def flat_affine(shape: tuple[int, ...], indices: tuple[Expr, ...]) -> Affine | None:
    """``affine(Buffer.flat_index(indices))`` for a buffer of ``shape``, without building
    the row-major tree: the same terms in the same order (the C emitter and the features
    ask it of every access, and the tree was built only to be folded again).

    Example:
        >>> flat_affine((8, 16), (i, j * 2 + 1))     # ({i: 16, j: 2}, 1)
    """
    acc: Affine = ({}, 0)
    for idx, n in zip(indices, shape, strict=True):
        a = affine(idx)
        if a is None:
            return None
        acc = _summed(_scaled(acc, n), a)   # ``acc * n + idx``, as ``_affine`` folds it
    return acc


def canonical(aff: Affine) -> Expr:
    """The simplest form of an affine expression, as ``simplify`` gives it (kept on the
    node with its affine form, so the next simplify or affine of it is a lookup)."""
    out = from_affine(*aff)
    if out.__dict__.get("_affine", _UNSET) is _UNSET:
        object.__setattr__(out, "_affine", aff)
    object.__setattr__(out, "_canon", _SELF)
    return out


# Kept on a node for "the node itself": a node that refers to itself is a reference cycle,
# freed only by the cyclic collector, whose passes over every new node were an eighth to a
# third of a search's drawing time (BMM, C2D).
_SELF = _Sentinel("_SELF")


def simplify_flat(shape: tuple[int, ...], indices: tuple[Expr, ...],
                  ranges: Ranges | None = None) -> Expr:
    """``simplify(Buffer.flat_index(indices), ranges)`` for a buffer of ``shape``."""
    aff = flat_affine(shape, indices)
    if aff is not None:
        return canonical(aff)
    return simplify(flat_index(shape, indices), ranges)


def from_affine(coefs: dict[Var, int], c: int) -> Expr:
    out: Expr | None = None
    for v, k in coefs.items():
        if k == 0:
            continue
        term: Expr = v if k in (1, -1) else BinOp("*", v, IntImm(abs(k)), "int32")
        if out is None:
            out = term if k > 0 else BinOp("*", v, IntImm(k), "int32") if k != -1 else \
                BinOp("-", IntImm(0), v, "int32")
        else:
            out = BinOp("+" if k > 0 else "-", out, term, "int32")
    if out is None:
        return IntImm(c)
    if c:
        out = BinOp("+" if c > 0 else "-", out, IntImm(abs(c)), "int32")
    return out


def bound(e: Expr, ranges: Ranges) -> tuple[int, int] | None:
    """Inclusive integer interval of ``e`` over ``ranges``; None if unknown."""
    if isinstance(e, IntImm):
        return e.value, e.value
    if isinstance(e, Var):
        return ranges.get(e)
    aff = affine(e)
    if aff is not None:
        lo = hi = aff[1]
        for v, k in aff[0].items():
            r = ranges.get(v)
            if r is None:
                return None
            lo += min(k * r[0], k * r[1])
            hi += max(k * r[0], k * r[1])
        return lo, hi
    if isinstance(e, Select):
        t, f = bound(e.t, ranges), bound(e.f, ranges)
        return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
    if not isinstance(e, BinOp) or is_float(e.dtype):
        return None
    a, b = bound(e.a, ranges), bound(e.b, ranges)
    if a is None or b is None:
        if e.op == "%" and (c := as_int(e.b)) is not None and c > 0:
            return 0, c - 1
        return None
    if e.op == "+":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "-":
        return a[0] - b[1], a[1] - b[0]
    if e.op == "*":
        ps = [x * y for x in a for y in b]
        return min(ps), max(ps)
    if e.op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if e.op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if e.op in ("//", "%") and b[0] == b[1] and b[0] > 0:
        c = b[0]
        if e.op == "//":
            return a[0] // c, a[1] // c
        if a[0] // c == a[1] // c:
            return a[0] % c, a[1] % c
        return 0, c - 1
    if e.op in ("<", "<=", ">", ">=", "==", "!=", "&&", "||"):
        return 0, 1
    return None


def _simplify_node(e: Expr, ranges: Ranges) -> Expr | None:
    if isinstance(e, Not) and isinstance(e.a, IntImm):
        return IntImm(int(not e.a.value), "bool")
    if isinstance(e, Select) and isinstance(e.cond, IntImm):
        return e.t if e.cond.value else e.f
    if not isinstance(e, BinOp):
        return None
    a, b, op = e.a, e.b, e.op
    ca, cb = as_int(a), as_int(b)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm) and op in ("+", "-", "*", "/"):
        return FloatImm(_fold(op, a.value, b.value), e.dtype)
    if op == "&&":
        if ca is not None:
            return b if ca else IntImm(0, "bool")
        if cb is not None:
            return a if cb else IntImm(0, "bool")
        return None
    if op == "||":
        if ca is not None:
            return IntImm(1, "bool") if ca else b
        if cb is not None:
            return IntImm(1, "bool") if cb else a
        return None
    if is_float(e.dtype):
        if op == "*" and (_is_float_const(b, 1.0)):
            return a
        if op == "+" and _is_float_const(b, 0.0):
            return a
        return None
    if op in ("<", "<=", ">", ">=", "==", "!="):
        if is_float(a.dtype):
            return None
        d = bound(BinOp("-", a, b, "int32"), ranges)
        if d is None:
            return None
        lo, hi = d
        truth = {
            "<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0),
            ">=": (lo >= 0, hi < 0), "==": (lo == hi == 0, lo > 0 or hi < 0),
            "!=": (lo > 0 or hi < 0, lo == hi == 0),
        }[op]
        if truth[0]:
            return IntImm(1, "bool")
        if truth[1]:
            return IntImm(0, "bool")
        return None
    if op in ("min", "max"):
        ra, rb = bound(a, ranges), bound(b, ranges)
        if ra is not None and rb is not None:
            if ra[1] <= rb[0]:
                return a if op == "min" else b
            if rb[1] <= ra[0]:
                return b if op == "min" else a
        return None
    if op in ("//", "%") and cb is not None and cb > 0:
        ra = bound(a, ranges)
        if ra is not None and 0 <= ra[0] and ra[1] < cb:
            return IntImm(0) if op == "//" else a
        lin = linear(a)
        if lin is None:
            return None
        if cb == 1:
            return from_linear(lin) if op == "//" else IntImm(0)
        q = {key: t for key, t in lin[0].items() if t[1] % cb == 0}
        r = {key: t for key, t in lin[0].items() if t[1] % cb != 0}
        rest = from_linear((r, lin[1] % cb))
        rb_ = bound(rest, ranges)
        if rb_ is not None and 0 <= rb_[0] and rb_[1] < cb:
            if op == "//":
                return from_linear(({key: (x, k // cb) for key, (x, k) in q.items()},
                                    lin[1] // cb))
            return rest
        return None
    if op in ("+", "-", "*"):
        aff = affine(e)
        if aff is not None:
            return canonical(aff)   # with its affine form kept: its parent asks next
        lin = linear(e)
        if lin is not None and op in ("+", "-"):
            merged = merge_divmod(lin)
            if merged is not None:
                out = from_linear(merged)
                aff = affine(out)
                return out if aff is None else canonical(aff)
            return from_linear(lin)  # cancels equal atoms: (f // 56 + 3) - f // 56 -> 3
        if op == "+" and ca == 0:
            return b
        if op in ("+", "-") and cb == 0:
            return a
        if op == "*" and (ca == 1 or cb == 1):
            return b if ca == 1 else a
        if op == "*" and (ca == 0 or cb == 0):
            return IntImm(0)
    return None


def _is_float_const(e: Expr, v: float) -> bool:
    return isinstance(e, FloatImm) and e.value == v


def _fold(op: str, x: float, y: float) -> float:
    return {"+": x + y, "-": x - y, "*": x * y}.get(op, x / y if y else math.inf)


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """Fold constants, canonicalise affine index arithmetic, remove provably redundant
    division, modulo, min/max and comparisons."""
    return _simplify(e, ranges or {})


def delinearize(flat: Expr, extents: list[int], ranges: Ranges | None = None) -> list[Expr]:
    """The index along each of ``extents`` (outermost first) of the flat row-major index
    ``flat``, simplified over ``ranges``: ``flat // stride % extent``, the outermost
    without the modulo, so a flat index past the end runs on in it (what ``fuse`` binds
    each fused loop to).

    >>> delinearize(f, [4, 8])      # [f // 8, f % 8]
    """
    out: list[Expr] = []
    stride = 1
    for k in range(len(extents) - 1, -1, -1):
        e: Expr = BinOp("//", flat, IntImm(stride), "int32") if stride > 1 else flat
        if k > 0:
            e = BinOp("%", e, IntImm(extents[k]), "int32")
        out.append(simplify(e, ranges))
        stride *= extents[k]
    return out[::-1]


def substitute_simplified(s: Stmt, vmap: dict[Var, Expr], ranges: Ranges | None = None
                          ) -> Stmt:
    """``s`` with the variables of ``vmap`` replaced and every expression simplified
    (over ``ranges``): how the C emitter writes one copy of an unrolled loop's body.

    >>> copy = substitute_simplified(loop.body, {loop.var: IntImm(3)})   # iteration 3
    """
    return rewrite_stmt(s, expr_fn=lambda e: simplify(substitute(e, vmap), ranges))


def _simplify(e: Expr, r: Ranges) -> Expr:
    # An affine tree's simplest form is its affine form, whatever the ranges: it is built
    # at once instead of node by node from the leaves up (which rebuilt every level), and
    # kept on the node, since lowering and the C emitter simplify the same indices again.
    # The result is the one the node-by-node rewrite gives, term order included.
    if isinstance(e, (Var, IntImm, FloatImm)):
        return e
    canon = e.__dict__.get("_canon")
    if canon is not None:
        return e if canon is _SELF else canon
    aff = affine(e)
    if aff is not None:
        canon = canonical(aff)
        object.__setattr__(e, "_canon", canon)
        return canon
    # Any other tree depends on the ranges only through its own variables: its answers are
    # kept per their ranges, since an expanded loop's copies share every subtree without
    # its variable. From the second visit on: most trees a schedule primitive simplifies
    # are new and seen once, and finding their variables cost more than it saved.
    memo = e.__dict__.get("_simp")
    if memo is None:
        object.__setattr__(e, "_simp", {})
        return _simplify_children(e, r)
    key = tuple([r.get(v) for v in free_vars(e)])
    out = memo.get(key)
    if out is None:
        out = _simplify_children(e, r)
        memo[key] = _SELF if out is e else out
    return e if out is _SELF else out


def _simplify_children(e: Expr, r: Ranges) -> Expr:
    new = map_children(e, _simplify, r)
    out = _simplify_node(new, r)
    return new if out is None else out


def evaluate_grid(e: Expr, env: dict[Var, Any]) -> Any:
    """``e`` evaluated elementwise over NumPy integer arrays (one per variable): index
    arithmetic, comparisons and logic. None when ``e`` holds anything else (a load, a
    float, a variable not in ``env``), so callers can fall back to a symbolic answer.

    Example:
        >>> i = Var("i")
        >>> evaluate_grid((i + 3) // 2, {i: np.arange(4)})      # array([1, 2, 2, 3])
    """
    if isinstance(e, IntImm):
        return np.asarray(int(e.value), dtype=np.int64)
    if isinstance(e, Var):
        return env.get(e)
    if isinstance(e, Not):
        a = evaluate_grid(e.a, env)
        return None if a is None else np.logical_not(a)
    if isinstance(e, BinOp) and e.op in _GRID_OPS and not is_float(e.dtype):
        a, b = evaluate_grid(e.a, env), evaluate_grid(e.b, env)
        if a is None or b is None:
            return None
        if e.op in ("//", "%") and np.any(b == 0):
            return None
        return _GRID_OPS[e.op](a, b)
    return None


_GRID_OPS: dict[str, Any] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod,
    "min": np.minimum, "max": np.maximum, "<": np.less, "<=": np.less_equal,
    ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
    "&&": np.logical_and, "||": np.logical_or}
