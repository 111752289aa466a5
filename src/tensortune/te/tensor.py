"""Tensors of the tensor-expression language: placeholders and computed tensors.

Example:
    >>> A = placeholder((4, 8), "float32", name="A")
    >>> k = reduce_axis(8, name="k")
    >>> from tensortune.te.ops import sum as te_sum
    >>> S = compute((4,), lambda i: te_sum(A[i, k], axis=k), name="S")
    >>> S.shape
    (4,)
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import TEError
from ..tir.expr import BufferLoad, Expr, ExprLike, Reduce, Var, check_dtype, const, is_float
from ..tir.functor import free_vars, iter_exprs
from ..tir.stmt import Buffer

# Buffer uid -> Tensor, so a compute can find the tensors its body reads.
_TENSORS: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


@dataclass(frozen=True, eq=False)
class ReduceVar(Var):
    """A reduction axis: iterates ``lo <= k < lo + extent``."""

    lo: int = 0
    extent: int = 1


def reduce_axis(dom: int | tuple[int, int], name: str = "k") -> ReduceVar:
    """A reduction axis over ``range(dom)`` or ``range(lo, hi)`` for ``dom=(lo, hi)``."""
    if isinstance(dom, tuple):
        if len(dom) != 2:
            raise TEError(f"reduce_axis {name!r}: dom must be an extent or (lo, hi), got {dom}")
        lo, hi = int(dom[0]), int(dom[1])
    else:
        lo, hi = 0, int(dom)
    if hi <= lo:
        raise TEError(f"reduce_axis {name!r}: empty range [{lo}, {hi})")
    return ReduceVar(name=name, lo=lo, extent=hi - lo)


@dataclass(frozen=True, eq=False)
class ComputeOp:
    axes: tuple[Var, ...]
    body: Expr
    inputs: tuple[Tensor, ...]


@dataclass(frozen=True, eq=False)
class Tensor:
    """A tensor: a placeholder (``op is None``) or the result of ``compute``."""

    buffer: Buffer
    op: ComputeOp | None = None
    _reg: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _TENSORS[self.buffer.uid] = self

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __getitem__(self, idx: ExprLike | tuple[ExprLike, ...]) -> Expr:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self.ndim:
            raise TEError(
                f"tensor {self.name} has {self.ndim} dimensions {list(self.shape)} but was "
                f"indexed with {len(idx)} indices"
            )
        out = []
        for d, i in enumerate(idx):
            e = const(i)
            if is_float(e.dtype):
                raise TEError(f"tensor {self.name} axis {d}: index must be an integer, got {e}")
            out.append(e)
        return BufferLoad(self.buffer, tuple(out))

    def __repr__(self) -> str:
        kind = "placeholder" if self.op is None else "compute"
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype}, {kind})"


def _check_shape(shape: Sequence[int], where: str) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in shape)
    except TypeError as e:
        raise TEError(f"{where}: shape must be a tuple of positive ints, got {shape!r}") from e
    if not out or any(s <= 0 for s in out):
        raise TEError(f"{where}: shape must be a non-empty tuple of positive ints, got {shape}")
    return out


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "X") -> Tensor:
    """An input tensor."""
    where = f"placeholder {name!r}"
    return Tensor(Buffer(name, _check_shape(shape, where), check_dtype(dtype, where)))


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., ExprLike],
    name: str = "T",
    dtype: str | None = None,
) -> Tensor:
    """A tensor whose element at each index is ``fcompute(*index)``.

    The body may be a reduction (``te.sum``/``te.max``/``te.min``) at its top level only.
    ``fcompute`` may take ``*idx`` to serve any rank (the axes are then named i0, i1, ...).
    """
    where = f"compute {name!r}"
    shp = _check_shape(shape, where)
    sig = inspect.signature(fcompute).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig):
        # ``lambda *idx: ...`` takes an index of any rank: axes are named i0, i1, ...
        params = [f"i{d}" for d in range(len(shp))]
    else:
        params = [p.name for p in sig]
    if len(params) != len(shp):
        raise TEError(
            f"{where}: fcompute takes {len(params)} index arguments but the shape "
            f"{list(shp)} has {len(shp)} dimensions"
        )
    axes = tuple(Var(p) for p in params)
    body = const(fcompute(*axes))
    if dtype is not None:
        check_dtype(dtype, where)
        if body.dtype != dtype:
            from .ops import cast

            if isinstance(body, Reduce):
                body = Reduce(body.combiner, cast(body.source, dtype), body.axes, dtype)
            else:
                body = cast(body, dtype)
    inputs: dict[int, Tensor] = {}
    for x in iter_exprs(body):
        if isinstance(x, Reduce) and x is not body:
            raise TEError(f"{where}: a reduction must be the whole body, not nested in {body}")
        if isinstance(x, BufferLoad):
            t = _TENSORS.get(x.buffer.uid)
            if t is None:
                raise TEError(f"{where}: reads buffer {x.buffer.name} that is not a tensor")
            inputs[x.buffer.uid] = t
    if body.dtype == "bool":
        raise TEError(f"{where}: the body is a boolean condition; cast it or use if_then_else")
    own = body.axes if isinstance(body, Reduce) else ()
    stray = [v.name for v in free_vars(body) if isinstance(v, ReduceVar)
             and not any(v is a for a in own)]
    if stray:
        raise TEError(f"{where}: reduce axis {', '.join(sorted(stray))} is read outside a "
                      "reduction over it; reduce over it (te.sum(..., axis=...)) or index "
                      "with the compute's own axes")
    buf = Buffer(name, shp, body.dtype)
    return Tensor(buf, ComputeOp(axes, body, tuple(inputs.values())))
