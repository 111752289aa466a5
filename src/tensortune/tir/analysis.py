"""Region analysis: which part of a buffer a loop nest touches.

A region is, per dimension, a start expression in the variables of the enclosing (outer)
loops and a constant extent. Affine indices give exact regions; anything else falls back
to constant bounds (a superset) and reports that it is inexact.

Example:
    >>> region(i0 * 8 + i1, inner={i1: (0, 7)}, ranges={i0: (0, 3), i1: (0, 7)})
    (i0 * 8, 8, True)
"""

from __future__ import annotations

from .arith import Ranges, affine, bound, from_affine, simplify
from .expr import BinOp, Expr, IntImm


def region(idx: Expr, inner: Ranges, ranges: Ranges) -> tuple[Expr, int, bool]:
    """(start in outer variables, extent, exact) of ``idx`` as ``inner`` vars vary."""
    aff = affine(simplify(idx, ranges))
    if aff is not None:
        outer = {v: k for v, k in aff[0].items() if v not in inner}
        lo, ext = aff[1], 1
        for v, k in aff[0].items():
            if v in inner:
                a, b = inner[v]
                lo += min(k * a, k * b)
                ext += abs(k) * (b - a)
        return from_affine(outer, lo), ext, True
    bnd = bound(idx, ranges)
    if bnd is None:
        raise ValueError(f"cannot bound index {idx}")
    return IntImm(bnd[0]), bnd[1] - bnd[0] + 1, False


def union(regions: list[tuple[Expr, int, bool]], n: int) -> tuple[Expr, int, bool]:
    """The smallest region of the form (start, extent) holding all ``regions``, clipped to
    a dimension of size ``n``; starts must differ by constants to stay exact."""
    lo0, ext0, exact = regions[0]
    lo_min, hi_max = 0, ext0
    for lo, ext, ex in regions[1:]:
        diff = affine(simplify(BinOp("-", lo, lo0, "int32")))
        if diff is None or diff[0]:
            return IntImm(0), n, False
        exact = exact and ex
        lo_min, hi_max = min(lo_min, diff[1]), max(hi_max, diff[1] + ext)
    ext = hi_max - lo_min
    if ext >= n:
        # An in-bounds region as long as the dimension can only start at 0.
        return IntImm(0), n, exact and ext == n
    return simplify(BinOp("+", lo0, IntImm(lo_min), "int32")), ext, exact
