"""Scalar expressions shared by the tensor-expression language and the loop IR.

Nodes are immutable dataclasses. As in TVM, every comparison operator (``==`` included)
builds an expression, hashing is by identity, and ``structural_equal`` compares trees.
Two ``Var`` objects with the same name are different variables.

Example:
    >>> i = Var("i")
    >>> e = i * 4 + 1
    >>> str(e)
    'i * 4 + 1'
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Union

from ..errors import TEError

FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int32", "int64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)

_RANK = {"bool": 0, "int32": 1, "int64": 2, "float32": 3, "float64": 4}


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def dtype_bytes(dtype: str) -> int:
    """Bytes per element as the generated C stores it (a bool is an int32_t)."""
    return 8 if dtype in ("float64", "int64") else 4


def check_dtype(dtype: str, where: str) -> str:
    if dtype not in DTYPES:
        raise TEError(f"{where}: unknown dtype {dtype!r}; valid dtypes are {', '.join(DTYPES)}")
    return dtype


class Expr:
    """Base class of expressions; provides operator overloading."""

    dtype: str

    def __add__(self, o: ExprLike) -> Expr:
        return binary("+", self, o)

    def __radd__(self, o: ExprLike) -> Expr:
        return binary("+", o, self)

    def __sub__(self, o: ExprLike) -> Expr:
        return binary("-", self, o)

    def __rsub__(self, o: ExprLike) -> Expr:
        return binary("-", o, self)

    def __mul__(self, o: ExprLike) -> Expr:
        return binary("*", self, o)

    def __rmul__(self, o: ExprLike) -> Expr:
        return binary("*", o, self)

    def __truediv__(self, o: ExprLike) -> Expr:
        return binary("/", self, o)

    def __rtruediv__(self, o: ExprLike) -> Expr:
        return binary("/", o, self)

    def __floordiv__(self, o: ExprLike) -> Expr:
        return binary("//", self, o)

    def __rfloordiv__(self, o: ExprLike) -> Expr:
        return binary("//", o, self)

    def __mod__(self, o: ExprLike) -> Expr:
        return binary("%", self, o)

    def __rmod__(self, o: ExprLike) -> Expr:
        return binary("%", o, self)

    def __neg__(self) -> Expr:
        return binary("-", const(0, self.dtype), self)

    def __lt__(self, o: ExprLike) -> Expr:
        return binary("<", self, o)

    def __le__(self, o: ExprLike) -> Expr:
        return binary("<=", self, o)

    def __gt__(self, o: ExprLike) -> Expr:
        return binary(">", self, o)

    def __ge__(self, o: ExprLike) -> Expr:
        return binary(">=", self, o)

    def __eq__(self, o: object) -> Expr:  # type: ignore[override]
        return binary("==", self, o)  # type: ignore[arg-type]

    def __ne__(self, o: object) -> Expr:  # type: ignore[override]
        return binary("!=", self, o)  # type: ignore[arg-type]

    __hash__ = object.__hash__

    def __and__(self, o: ExprLike) -> Expr:
        return binary("&&", self, o)

    def __or__(self, o: ExprLike) -> Expr:
        return binary("||", self, o)

    def __invert__(self) -> Expr:
        return Not(self)

    def __bool__(self) -> bool:
        raise TEError(
            "an expression has no truth value while the program is being described; "
            "use te.if_then_else(cond, a, b) instead of `if`/`and`/`or`"
        )

    def __str__(self) -> str:
        from .printer import expr_str

        return expr_str(self)

    def __getstate__(self) -> dict[str, Any]:
        # ``simplify``'s answers per ranges (``_simp``) are keyed by the ranges of the
        # node's variables in the order of its ``free_vars`` set, which follows the
        # variables' identities: unpickled in a draw worker the set may iterate in
        # another order, and a key would then name other ranges (``(a * 4 + b) // 4``
        # kept as ``a`` for a < 8, b < 4 came back as ``a`` for a < 4, b < 8 in 141 of
        # 300 tries). So they stay in the process that found them.
        state = self.__dict__
        if "_simp" in state:
            state = {k: v for k, v in state.items() if k != "_simp"}
        return state


ExprLike = Union[Expr, int, float, bool]

_var_ids = itertools.count()


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable (a loop or block iteration variable). Compared by identity."""

    name: str
    dtype: str = "int32"
    uid: int = field(default_factory=lambda: next(_var_ids))

    def __repr__(self) -> str:
        return f"Var({self.name})"


@dataclass(frozen=True, eq=False, repr=False)
class IntImm(Expr):
    value: int
    dtype: str = "int32"

    def __repr__(self) -> str:
        return f"IntImm({self.value})"


@dataclass(frozen=True, eq=False, repr=False)
class FloatImm(Expr):
    value: float
    dtype: str = "float32"

    def __repr__(self) -> str:
        return f"FloatImm({self.value}, {self.dtype})"


ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max")
CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("&&", "||")


@dataclass(frozen=True, eq=False, repr=False)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str

    def __repr__(self) -> str:
        return f"BinOp({self.op!r}, {self.a!r}, {self.b!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``cond ? t : f``; both branches are values, only one is used."""

    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    dtype: str
    value: Expr


MATH_FUNCS = ("exp", "log", "sqrt", "tanh", "erf", "fabs", "pow", "floor", "ceil", "sin", "cos")


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A math intrinsic such as ``exp`` or ``pow``."""

    name: str
    args: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class BufferLoad(Expr):
    buffer: Any  # tir.stmt.Buffer; Any avoids an import cycle
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return str(self.buffer.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """A reduction (only as the whole body of a te.compute): combiner over ``axes``."""

    combiner: str  # "sum" | "max" | "min"
    source: Expr
    axes: tuple[Any, ...]  # te.ReduceVar
    dtype: str


def const(value: ExprLike, dtype: str | None = None) -> Expr:
    """Turn a Python number into an immediate of ``dtype`` (inferred when None)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int) and (dtype is None or not is_float(dtype)):
        return IntImm(value, dtype or "int32")
    if isinstance(value, (int, float)):
        return FloatImm(float(value), dtype if dtype and is_float(dtype) else "float32")
    raise TEError(f"cannot use {value!r} of type {type(value).__name__} in an expression")


def promote(a: str, b: str) -> str:
    return a if _RANK[a] >= _RANK[b] else b


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    """Build ``a op b`` with NumPy-like dtype promotion; Python numbers adopt the other side."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise TEError(f"binary {op!r} needs at least one expression operand")
    if not isinstance(a, Expr):
        assert isinstance(b, Expr)
        a = const(a, b.dtype if not isinstance(a, float) or is_float(b.dtype) else None)
    if not isinstance(b, Expr):
        b = const(b, a.dtype if not isinstance(b, float) or is_float(a.dtype) else None)
    if op in LOGIC_OPS:
        return BinOp(op, a, b, "bool")
    dtype = promote(a.dtype, b.dtype)
    if dtype == "bool" and op not in ("==", "!="):
        dtype = "int32"
    if a.dtype != dtype:
        a = Cast(dtype, a) if not isinstance(a, (IntImm, FloatImm)) else const(a.value, dtype)
    if b.dtype != dtype:
        b = Cast(dtype, b) if not isinstance(b, (IntImm, FloatImm)) else const(b.value, dtype)
    if op == "/" and not is_float(dtype):
        op = "//"  # integer division in index arithmetic is floor division
    if op in CMP_OPS:
        return BinOp(op, a, b, "bool")
    if op not in ARITH_OPS:
        raise TEError(f"unknown operator {op!r}")
    return BinOp(op, a, b, dtype)


def as_int(e: ExprLike) -> int | None:
    """The value of an integer constant, else None."""
    if isinstance(e, bool):
        return int(e)
    if isinstance(e, int):
        return e
    if isinstance(e, IntImm):
        return e.value
    return None


def structural_equal(a: object, b: object) -> bool:
    """Whether two expressions (or tuples of them) are the same tree; variables and
    buffers must be the same objects."""
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(structural_equal(x, y) for x, y in zip(a, b))
    if type(a) is not type(b) or isinstance(a, Var) or not isinstance(a, Expr):
        return False if isinstance(a, (Expr, tuple)) or isinstance(b, (Expr, tuple)) \
            else a == b
    from dataclasses import fields

    return all(structural_equal(getattr(a, f.name), getattr(b, f.name))
               for f in fields(a))  # type: ignore[arg-type]
