"""Region analysis: which part of a buffer a loop nest touches.

A region is, per dimension, a start expression in the variables of the enclosing (outer)
loops and a constant extent. Affine indices give exact regions; anything else falls back
to constant bounds (a superset) and reports that it is inexact.

Example:
    >>> region(i0 * 8 + i1, inner={i1: (0, 7)}, ranges={i0: (0, 3), i1: (0, 7)})
    (i0 * 8, 8, True)
"""

from __future__ import annotations

from .arith import Ranges, bound, simplify
from .expr import BinOp, Expr, IntImm, Var, as_int, structural_equal
from .functor import free_vars, substitute
from .linear import from_linear, linear


def conjuncts(e: Expr | None) -> list[Expr]:
    """The terms of a conjunction ``a && b && ...`` (none for None)."""
    if e is None:
        return []
    if isinstance(e, BinOp) and e.op == "&&":
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


def conjunction(terms: list[Expr]) -> Expr | None:
    """``terms[0] && terms[1] && ...`` folded from the left (None for no terms), each
    distinct term once; the inverse of ``conjuncts``."""
    out: Expr | None = None
    kept: list[Expr] = []
    for t in terms:
        if any(structural_equal(t, k) for k in kept):
            continue
        kept.append(t)
        out = t if out is None else BinOp("&&", out, t, "bool")
    return out


def _split(e: Expr, inner: Ranges) -> tuple[Expr, dict[Var, int]] | None:
    """``e`` as (a part free of inner variables, affine coefficients of inner variables)."""
    if not (free_vars(e) & set(inner)):
        return e, {}
    if isinstance(e, Var):
        return IntImm(0), {e: 1}
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        a, b = _split(e.a, inner), _split(e.b, inner)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "+" else -1
        coefs = dict(a[1])
        for v, k in b[1].items():
            coefs[v] = coefs.get(v, 0) + sign * k
        return BinOp(e.op, a[0], b[0], "int32"), coefs
    if isinstance(e, BinOp) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            m = as_int(simplify(x))
            sub = _split(y, inner) if m is not None else None
            if m is not None and sub is not None:
                return BinOp("*", sub[0], IntImm(m), "int32"), {v: c * m for v, c in
                                                                  sub[1].items()}
    return None


def region(idx: Expr, inner: Ranges, ranges: Ranges) -> tuple[Expr, int, bool]:
    """(start in outer variables, extent, exact) of ``idx`` as ``inner`` vars vary.

    Any sub-expression of outer variables alone (say ``f // 56`` of a fused loop) is an
    opaque offset; the inner variables must enter affinely for the region to be exact."""
    # Loops of extent 1 are constants here: their variable contributes nothing.
    fixed: dict[Var, Expr] = {v: IntImm(r[0]) for v, r in ranges.items() if r[0] == r[1]}
    e = simplify(substitute(idx, fixed), ranges)
    inner = {v: r for v, r in inner.items() if v not in fixed}
    parts = _split(e, inner)
    if parts is not None:
        outer, coefs = parts
        lo, hi = _span(coefs, inner)
        return simplify(BinOp("+", outer, IntImm(lo), "int32"), ranges), hi - lo + 1, True
    shrunk = _divided(e, inner, ranges)
    if shrunk is not None:
        return shrunk
    bnd = bound(idx, ranges)
    if bnd is None:
        raise ValueError(f"cannot bound index {idx}")
    return IntImm(bnd[0]), bnd[1] - bnd[0] + 1, False


def _span(coefs: dict[Var, int], inner: Ranges) -> tuple[int, int]:
    """Least and greatest value of ``sum(k * v)`` as the inner variables vary."""
    lo = hi = 0
    for v, k in coefs.items():
        a, b = inner[v]
        lo, hi = lo + min(k * a, k * b), hi + max(k * a, k * b)
    return lo, hi


def _divided(e: Expr, inner: Ranges, ranges: Ranges) -> tuple[Expr, int, bool] | None:
    """The region of ``a // c`` (a strip index) from the region of ``a``: a superset
    (marked inexact), but per iteration of the outer loops. A strip copy placed under its
    tile loop then spans that tile's strips, not all of them, and fits on the stack.
    When the start's outer terms are multiples of ``c``, ``(c X + k) // c = X + k // c``;
    otherwise the start is ``(X + k) // c`` and the extent one strip more."""
    if not (isinstance(e, BinOp) and e.op == "//" and isinstance(e.b, IntImm)
            and e.b.value > 0):
        return None
    c = e.b.value
    parts = _split(e.a, inner)
    if parts is None:
        return None
    lo, hi = _span(parts[1], inner)
    lin = linear(simplify(parts[0], ranges))
    if lin is not None and not any(k % c for _, k in lin[0].values()):
        base = {key: (x, k // c) for key, (x, k) in lin[0].items()}
        first = lin[1] + lo
        return (simplify(from_linear((base, first // c)), ranges),
                (lin[1] + hi) // c - first // c + 1, False)
    start = simplify(BinOp("//", BinOp("+", parts[0], IntImm(lo), "int32"), e.b, "int32"),
                     ranges)
    return start, (c - 1 + hi - lo) // c + 1, False


def is_dense(idx: Expr, inner: Ranges, ranges: Ranges) -> bool:
    """Whether ``idx`` takes every value of its region as ``inner`` vars vary (no holes:
    ``8 * a + b`` with b in [0, 2) over a in [0, 4) has holes)."""
    fixed: dict[Var, Expr] = {v: IntImm(r[0]) for v, r in ranges.items() if r[0] == r[1]}
    e = simplify(substitute(idx, fixed), ranges)
    inner = {v: r for v, r in inner.items() if v not in fixed}
    parts = _split(e, inner)
    if parts is None:
        return False
    span = 0
    for k, (a, b) in sorted((abs(k), inner[v]) for v, k in parts[1].items()):
        if b > a and k > span + 1:
            return False
        span += k * (b - a)
    return True


def union(regions: list[tuple[Expr, int, bool]], n: int) -> tuple[Expr, int, bool]:
    """The smallest region of the form (start, extent) holding all ``regions``, clipped to
    a dimension of size ``n``; starts must differ by constants to stay exact."""
    lo0, ext0, exact = regions[0]
    lo_min, hi_max = 0, ext0
    for lo, ext, ex in regions[1:]:
        diff = linear(simplify(BinOp("-", lo, lo0, "int32")))
        if diff is None or diff[0]:
            return IntImm(0), n, False
        exact = exact and ex
        lo_min, hi_max = min(lo_min, diff[1]), max(hi_max, diff[1] + ext)
    ext = hi_max - lo_min
    if ext >= n:
        # Writes stay in bounds, so this is the whole dimension when it starts at or below 0.
        starts_low = isinstance(lo0, IntImm) and lo0.value + lo_min <= 0
        return IntImm(0), n, exact and starts_low and lo0.value + hi_max >= n  # type: ignore
    if not exact:
        return simplify(BinOp("+", lo0, IntImm(lo_min), "int32")), ext, False
    return simplify(BinOp("+", lo0, IntImm(lo_min), "int32")), ext, exact


def flop_count(func) -> float:
    """Floating-point operations of an unscheduled function: per block, its domain size
    times the float operations of its body (a multiply-add counts 2)."""
    from .expr import Call
    from .functor import blocks_in, iter_exprs, stmt_exprs, walk

    total = 0.0
    for blk in blocks_in(func.body):
        size = 1
        for iv in blk.iter_vars:
            size *= iv.extent
        ops = 0
        for st in walk(blk.body):
            for e in stmt_exprs(st):
                ops += sum(1 for x in iter_exprs(e)
                           if isinstance(x, (BinOp, Call)) and x.dtype in ("float32", "float64")
                           and getattr(x, "op", "") not in ("<", "<=", ">", ">=", "==", "!="))
        total += size * ops
    return float(total)
