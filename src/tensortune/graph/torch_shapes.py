"""The torch functions and tensor methods ``from_torch`` imports that move data or pick
from it: ``t``, ``.T``/``.mT``, ``expand``, ``repeat``, ``stack``, ``roll``, ``flip``,
``tril``/``triu``, ``pixel_shuffle``, ``einsum``, and ``max``/``min`` (of two tensors,
or over a dim: the values and the indices).

Example:
    >>> sorted(SHAPE_FUNCS)[:3]
    ['broadcast_to', 'einsum', 'expand']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .ir import GraphError
from .torch_functions import TensorRef, _kw

if TYPE_CHECKING:
    from .from_torch import _Importer as Importer

Handler = Callable[["Importer", list[Any], dict[str, Any], str], Any]


def _permuted(s: Importer, x: Any, dims: tuple[int, ...], w: str) -> TensorRef:
    return s.op("permute", [s.tensor(x, w)], w, dims=dims)


def _swap_last(nd: int) -> tuple[int, ...]:
    return (*range(nd - 2), nd - 1, nd - 2)


def _t(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    nd = len(s.shape(a[0]))
    return s.arg(a[0]) if nd < 2 else _permuted(s, a[0], tuple(range(nd))[::-1], w)


def _getattr(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    """``x.T``, ``x.mT``, and ``.values``/``.indices`` of ``max``/``min`` over a dim."""
    v, attr = s.arg(a[0]), a[1]
    if isinstance(v, (list, tuple)) and attr in ("values", "indices"):
        return v[0 if attr == "values" else 1]
    if attr in ("T", "mT", "mH", "H"):
        nd = len(s.shape(a[0]))
        return _permuted(s, a[0], tuple(range(nd))[::-1] if attr in ("T", "H")
                         else _swap_last(nd), w)
    raise GraphError(f"{w}: the tensor attribute {attr!r} is not supported (T, mT are)")


def _same(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    """``expand``, ``expand_as``, ``broadcast_to``: the example run knows the shape."""
    return s.op("broadcast", [s.tensor(a[0], w)], w, shape=tuple(s.values[s.current].shape))


def _repeat(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    reps = s.arg(a[1:]) if len(a) > 2 or isinstance(s.arg(a[1]), int) else s.arg(a[1])
    return s.op("tile", [s.tensor(a[0], w)], w, reps=tuple(int(r) for r in reps))


def _stack(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    parts, dim = s.arg(a[0]), int(s.arg(_kw(a, k, 1, "dim", 0)))
    shape = s.shape(parts[0])
    dim %= len(shape) + 1
    one = shape[:dim] + (1,) + shape[dim:]
    return s.op("concat", [s.reshape(p, one, w).name for p in parts], w, axis=dim)


def _extreme(op: str) -> Handler:
    """``max``/``min``: of two tensors (``maximum``), over every axis, or over a dim (its
    values and indices, each computed where the model reads it)."""
    def handle(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
        other = s.arg(_kw(a, k, 1, "dim", k.get("other")))
        if isinstance(other, TensorRef) or isinstance(other, s.torch.Tensor):
            return s.op("maximum" if op == "max" else "minimum",
                        [s.tensor(a[0], w), s.tensor(other, w)], w)
        x = s.tensor(a[0], w)
        axes = tuple(range(len(s.shape(a[0])))) if other is None else (int(other),)
        keep = bool(s.arg(_kw(a, k, 2, "keepdim", False)))
        vals = s.op("amax" if op == "max" else "amin", [x], w, axes=axes, keepdim=keep)
        if other is None:
            return vals
        return [vals, s.op("argmax" if op == "max" else "argmin", [x], w, axis=int(other),
                           keepdim=keep)]
    return handle


def _roll(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    shifts, dims = s.arg(_kw(a, k, 1, "shifts", 0)), s.arg(_kw(a, k, 2, "dims", None))
    if dims is None or dims == () or dims == []:
        raise GraphError(f"{w}: roll without dims (over the flattened tensor) is not "
                         "supported; give dims")
    shifts = tuple(shifts) if isinstance(shifts, (list, tuple)) else (shifts,)
    dims = tuple(dims) if isinstance(dims, (list, tuple)) else (dims,)
    return s.op("roll", [s.tensor(a[0], w)], w, shifts=shifts, dims=dims)


def _einsum(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    ops = s.arg(a[1]) if len(a) == 2 and isinstance(s.arg(a[1]), (list, tuple)) else a[1:]
    return s.op("einsum", [s.tensor(t, w) for t in ops], w, equation=str(a[0]))


def shuffle(s: Importer, x: Any, r: int, down: bool, w: str) -> TensorRef:
    """``pixel_shuffle``, (N, C r^2, H, W) -> (N, C, H r, W r), as reshape, permute,
    reshape; ``down`` for ``pixel_unshuffle``, the other way."""
    n, c, h, wd = s.shape(x)
    if down:
        y = s.reshape(x, (n, c, h // r, r, wd // r, r), w)
        y = _permuted(s, y, (0, 1, 3, 5, 2, 4), w)
        return s.reshape(y, (n, c * r * r, h // r, wd // r), w)
    y = _permuted(s, s.reshape(x, (n, c // (r * r), r, r, h, wd), w), (0, 1, 4, 2, 5, 3), w)
    return s.reshape(y, (n, c // (r * r), h * r, wd * r), w)


SHAPE_FUNCS: dict[str, Handler] = {
    "t": _t, "getattr": _getattr, "expand": _same, "expand_as": _same,
    "broadcast_to": _same, "repeat": _repeat, "stack": _stack, "roll": _roll,
    "flip": lambda s, a, k, w: s.op("flip", [s.tensor(a[0], w)], w, dims=tuple(
        int(d) for d in s.arg(_kw(a, k, 1, "dims", ())))),
    "tril": lambda s, a, k, w: s.op("triangle", [s.tensor(a[0], w)], w, upper=False,
                                    k=int(s.arg(_kw(a, k, 1, "diagonal", 0)))),
    "triu": lambda s, a, k, w: s.op("triangle", [s.tensor(a[0], w)], w, upper=True,
                                    k=int(s.arg(_kw(a, k, 1, "diagonal", 0)))),
    "einsum": _einsum,
    "pixel_shuffle": lambda s, a, k, w: shuffle(s, a[0], int(s.arg(a[1])), False, w),
    "pixel_unshuffle": lambda s, a, k, w: shuffle(s, a[0], int(s.arg(a[1])), True, w),
}

# Functions that may return several tensors (``max``/``min`` over a dim, ``topk``,
# ``sort``): their list goes
# to ``getitem``/``getattr``, as ``torch_functions.SPLITS``' does.
def _topk(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> list[TensorRef]:
    """``torch.topk``: its values and indices (sorted: ``sorted=False`` leaves PyTorch
    any order, so this one is among them), each computed where the model reads it."""
    x = s.tensor(a[0], w)
    kw = {"k": int(s.arg(_kw(a, k, 1, "k", None))), "axis": int(s.arg(_kw(a, k, 2, "dim", -1))),
          "largest": bool(s.arg(_kw(a, k, 3, "largest", True)))}
    return [s.op("topk", [x], w, **kw), s.op("topk_indices", [x], w, **kw)]


def _sort(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> list[TensorRef]:
    """``torch.sort``: its values and indices, stable (equal values in their order, what
    ``stable=True`` asks; without it PyTorch may order them either way)."""
    x = s.tensor(a[0], w)
    kw = {"axis": int(s.arg(_kw(a, k, 1, "dim", -1))),
          "descending": bool(s.arg(_kw(a, k, 2, "descending", False)))}
    return [s.op("sort", [x], w, **kw), s.op("sort_indices", [x], w, **kw)]


def _argsort(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    """``torch.argsort``: ``sort``'s indices (stable)."""
    return _sort(s, a, k, w)[1]


SHAPE_FUNCS["argsort"] = _argsort


SHAPE_SPLITS: dict[str, Handler] = {"max": _extreme("max"), "min": _extreme("min"),
                                    "topk": _topk, "sort": _sort}
