"""Linear forms of integer index expressions whose terms may be opaque atoms.

``linear`` reads ``f // 56 * 6272 + l * 16 + 3`` as coefficients of atoms (``f // 56``,
``l``) and a constant; ``arith.simplify`` cancels and merges such terms with it.

Example:
    >>> f, l = Var("f"), Var("l")
    >>> linear_parts(f // 7 * 96 + l * 16 + 3, {l})     # ({l: 16}, f // 7 * 96 + 3)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .expr import BinOp, Expr, IntImm, Var, as_int, is_float
from .functor import free_vars

Linear = tuple[dict[object, tuple[Expr, int]], int]


def linear(e: Expr) -> Linear | None:
    """Like ``affine`` but any non-affine integer sub-expression (``f // 56``) is an atom
    with a coefficient; atoms are keyed by their printed form."""
    if isinstance(e, IntImm):
        return None if e.dtype == "bool" else ({}, e.value)
    if is_float(e.dtype) or e.dtype == "bool":
        return None
    if isinstance(e, Var):
        return {e: (e, 1)}, 0
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        a, b = linear(e.a), linear(e.b)
        if a is not None and b is not None:
            sign = 1 if e.op == "+" else -1
            terms = dict(a[0])
            for key, (x, k) in b[0].items():
                terms[key] = (x, terms.get(key, (x, 0))[1] + sign * k)
            return {k: t for k, t in terms.items() if t[1]}, a[1] + sign * b[1]
    if isinstance(e, BinOp) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            c = as_int(x)
            sub = linear(y) if c is not None else None
            if c is not None and sub is not None:
                return {k: (t, n * c) for k, (t, n) in sub[0].items() if n * c}, sub[1] * c
    return {structural_key(e): (e, 1)}, 0


def structural_key(e: Expr) -> object:
    """A structural key: equal for equal trees, variables by identity."""
    if isinstance(e, Var):
        return ("v", e.uid)
    if isinstance(e, IntImm):
        return ("i", e.value, e.dtype)
    if isinstance(e, BinOp):
        return ("b", e.op, structural_key(e.a), structural_key(e.b))
    return ("o", id(e))


def from_linear(lin: Linear) -> Expr:
    out: Expr | None = None
    for x, k in lin[0].values():
        term: Expr = x if k == 1 else BinOp("*", x, IntImm(k), "int32")
        out = term if out is None else BinOp("+", out, term, "int32")
    if out is None:
        return IntImm(lin[1])
    if lin[1]:
        out = BinOp("+" if lin[1] > 0 else "-", out, IntImm(abs(lin[1])), "int32")
    return out


def linear_parts(e: Expr, keys: set[Var]) -> tuple[dict[Var, int], Expr] | None:
    """``e`` as (the coefficient of each of ``keys`` it holds, the rest), None when it is
    not linear or a key sits inside a non-affine term of the rest (``(i + l) // 16``).
    The rest keeps its opaque terms (``f // 56 * 6272``).

    Example:
        >>> linear_parts(f // 7 * 96 + l * 16 + 3, {l})     # ({l: 16}, f // 7 * 96 + 3)
    """
    lin = linear(e)
    if lin is None:
        return None
    rest = {k: t for k, t in lin[0].items() if k not in keys}
    if any(keys & free_vars(x) for x, _ in rest.values()):
        return None
    return {v: lin[0][v][1] for v in keys if v in lin[0]}, from_linear((rest, lin[1]))


def merge_divmod(lin: Linear) -> Linear | None:
    """``lin`` with each ``x // c * (k * c) + x % c * k`` made ``x * k`` (floor or truncated
    division alike), None when it holds no such pair. A loop fused and split back indexes
    a buffer so (the stride-phase copy's ``o // 2 * 2 + o % 2``), and the vector code
    generator sees a contiguous access only in the merged form. Pairs are merged until
    none is left, and ``x // b // c`` is taken as ``x // (b * c)`` (both positive): three
    loops fused index ``f // 9 * 9 + f // 3 % 3 * 3 + f % 3``, which is ``f``.

    Example:
        >>> simplify(f // 7 * 14 + f % 7 * 2 + 1)        # f * 2 + 1 (arith.simplify)
    """
    out = None
    while (merged := _merge_pairs(lin if out is None else out)) is not None:
        out = merged
    return out


def _merge_pairs(lin: Linear) -> Linear | None:
    """One pass of ``merge_divmod``."""
    terms, const = lin
    out = None
    for key, (m, _) in terms.items():
        if not (isinstance(m, BinOp) and m.op == "%" and (c := as_int(m.b)) is not None):
            continue
        cur = terms if out is None else out
        k = cur.get(key, (None, 0))[1]
        if not k:
            continue
        dkey = next((dk for dk in _quotient_keys(m.a, m.b, c, m.dtype)
                     if cur.get(dk, (None, 0))[1] == k * c), None)
        if dkey is None:
            continue
        inner = linear(m.a)
        if inner is None:
            continue
        out = dict(cur)
        del out[key], out[dkey]
        for ik, (x, n) in inner[0].items():
            out[ik] = (x, out.get(ik, (x, 0))[1] + n * k)
        const += inner[1] * k
    if out is None:
        return None
    return {key: t for key, t in out.items() if t[1]}, const


def _quotient_keys(x: Expr, d: Expr, c: int, dtype: str) -> Iterator[Any]:
    """The keys of ``x // c`` as a term may be written: that, then (asked only when it is
    absent) for ``x = a // b`` with b and c positive ``a // (b * c)``, the same value."""
    yield structural_key(BinOp("//", x, d, dtype))
    if c > 0 and isinstance(x, BinOp) and x.op == "//" and (b := as_int(x.b)) is not None \
            and b > 0:
        yield structural_key(BinOp("//", x.a, IntImm(b * c, x.b.dtype), dtype))
