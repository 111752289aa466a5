"""Operators of the tensor-expression language: reductions, selection, math, casts.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((8,), name="A")
    >>> R = te.compute((8,), lambda i: te.max(A[i], 0.0), name="R")   # element-wise relu
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from ..errors import TEError
from ..tir.expr import (
    BinOp,
    Call,
    Cast,
    Expr,
    ExprLike,
    FloatImm,
    IntImm,
    Not,
    Reduce,
    Select,
    binary,
    check_dtype,
    const,
    is_float,
)
from .tensor import ReduceVar


def _axes(axis: ReduceVar | Sequence[ReduceVar], what: str) -> tuple[ReduceVar, ...]:
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not isinstance(a, ReduceVar):
            raise TEError(f"te.{what}: axis must be te.reduce_axis objects, got {a!r}")
    if not axes:
        raise TEError(f"te.{what}: needs at least one reduce axis")
    return axes


def _reduce(combiner: str, expr: ExprLike, axis: ReduceVar | Sequence[ReduceVar]) -> Expr:
    e = const(expr)
    if e.dtype == "bool":
        raise TEError(f"te.{combiner}: cannot reduce a boolean expression; cast it first")
    return Reduce(combiner, e, _axes(axis, combiner), e.dtype)


def sum(expr: ExprLike, axis: ReduceVar | Sequence[ReduceVar]) -> Expr:  # noqa: A001
    """Sum of ``expr`` over the reduce axes."""
    return _reduce("sum", expr, axis)


def max(a: ExprLike, b: ExprLike | None = None, *, axis=None) -> Expr:  # noqa: A001
    """``max(expr, axis=k)`` reduces; ``max(a, b)`` is element-wise."""
    if axis is not None:
        return _reduce("max", a, axis)
    if b is None:
        raise TEError("te.max: give either two operands or an expression and axis=")
    return binary("max", a, b)


def min(a: ExprLike, b: ExprLike | None = None, *, axis=None) -> Expr:  # noqa: A001
    """``min(expr, axis=k)`` reduces; ``min(a, b)`` is element-wise."""
    if axis is not None:
        return _reduce("min", a, axis)
    if b is None:
        raise TEError("te.min: give either two operands or an expression and axis=")
    return binary("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("max", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("min", a, b)


def if_then_else(cond: ExprLike, t: ExprLike, f: ExprLike) -> Expr:
    """``t`` where ``cond`` holds else ``f``; only the chosen branch is evaluated, so ``t``
    may read out of bounds where ``cond`` is false (padding)."""
    c = const(cond)
    if c.dtype != "bool":
        raise TEError(f"te.if_then_else: condition must be a comparison, got {c}")
    te_, fe = const(t), const(f)
    if not isinstance(t, Expr) and isinstance(f, Expr):
        te_ = const(t, fe.dtype)
    if not isinstance(f, Expr) and isinstance(t, Expr):
        fe = const(f, te_.dtype)
    dtype = builtins.max((te_.dtype, fe.dtype), key=lambda d: ("bool", "int32", "int64",
                                                               "float32", "float64").index(d))
    return Select(c, cast(te_, dtype), cast(fe, dtype), dtype)


select = if_then_else


def eq(a: ExprLike, b: ExprLike) -> Expr:
    return binary("==", a, b)


def ne(a: ExprLike, b: ExprLike) -> Expr:
    return binary("!=", a, b)


def all(*conds: ExprLike) -> Expr:  # noqa: A001
    out = const(conds[0])
    for c in conds[1:]:
        out = binary("&&", out, c)
    return out


def any(*conds: ExprLike) -> Expr:  # noqa: A001
    out = const(conds[0])
    for c in conds[1:]:
        out = binary("||", out, c)
    return out


def logical_not(a: ExprLike) -> Expr:
    return Not(const(a))


def cast(x: ExprLike, dtype: str) -> Expr:
    check_dtype(dtype, "te.cast")
    e = const(x, dtype)
    return e if e.dtype == dtype else Cast(dtype, e)


def float32(x: ExprLike) -> Expr:
    return cast(x, "float32")


def float64(x: ExprLike) -> Expr:
    return cast(x, "float64")


def int32(x: ExprLike) -> Expr:
    return cast(x, "int32")


def _math(name: str, *args: ExprLike) -> Expr:
    es = [const(a, "float32") for a in args]
    fdt = [e.dtype for e in es if is_float(e.dtype)]
    dtype = "float64" if "float64" in fdt else "float32"
    return Call(name, tuple(cast(e, dtype) for e in es), dtype)


def exp(x: ExprLike) -> Expr:
    return _math("exp", x)


def log(x: ExprLike) -> Expr:
    return _math("log", x)


def sqrt(x: ExprLike) -> Expr:
    return _math("sqrt", x)


def tanh(x: ExprLike) -> Expr:
    return _math("tanh", x)


def erf(x: ExprLike) -> Expr:
    return _math("erf", x)


def abs(x: ExprLike) -> Expr:  # noqa: A001
    return _math("fabs", x)


def floor(x: ExprLike) -> Expr:
    return _math("floor", x)


def ceil(x: ExprLike) -> Expr:
    return _math("ceil", x)


def sin(x: ExprLike) -> Expr:
    return _math("sin", x)


def cos(x: ExprLike) -> Expr:
    return _math("cos", x)


# Exponents whose power is cheaper written out: a vectorized loop has no vector pow, and
# libm's scalar powf per element ran pow(x, 3) over 1024 x 1024 floats 20x slower than
# PyTorch (RESULTS.md; gcc itself turns only 2, 0.5 and -1 into these forms). x * x is
# the correctly rounded square, as pow's is; x * x * x is within an ulp of pow(x, 3).
# sqrt(x) differs from pow(x, 0.5) only at -0 (-0, not +0) and -inf (NaN, not +inf).
_POW_FORMS = {
    1.0: lambda x: x,
    2.0: lambda x: x * x,
    3.0: lambda x: x * x * x,
    4.0: lambda x: (x * x) * (x * x),
    0.5: lambda x: sqrt(x),
    -0.5: lambda x: 1.0 / sqrt(x),
    -1.0: lambda x: 1.0 / x,
    -2.0: lambda x: 1.0 / (x * x),
}


def pow(x: ExprLike, y: ExprLike) -> Expr:  # noqa: A001
    """``x`` to the power ``y``; a constant ``y`` of 1, 2, 3, 4, 0.5, -0.5, -1 or -2 is
    written out as products, a square root or a quotient (``_POW_FORMS``).

    Example:
        >>> te.pow(X[i], 2.0)       # X[i] * X[i]
    """
    c = y.value if isinstance(y, (IntImm, FloatImm)) else y
    if isinstance(c, (int, float)) and not isinstance(c, bool) and float(c) in _POW_FORMS:
        # The dtype _math would give the call: float64 if either side is.
        es = [const(a, "float32") for a in (x, y)]
        dtype = "float64" if "float64" in [e.dtype for e in es if is_float(e.dtype)] else \
            "float32"
        return _POW_FORMS[float(c)](cast(es[0], dtype))
    return _math("pow", x, y)


def sigmoid(x: ExprLike) -> Expr:
    e = const(x, "float32")
    return binary("/", const(1.0, e.dtype), binary("+", const(1.0, e.dtype), exp(-e)))


def relu(x: ExprLike) -> Expr:
    e = const(x, "float32")
    return BinOp("max", e, const(0.0, e.dtype), e.dtype)
