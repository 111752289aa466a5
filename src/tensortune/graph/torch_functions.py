"""The torch functions and tensor methods ``from_torch`` imports: ``FUNCS`` maps each
name (``add``, ``conv2d``, ``softmax``, ...) to a handler ``(importer, args, kwargs,
where)`` that adds its graph op, where is the fx node named in errors.

Example:
    >>> sorted(FUNCS)[:4]
    ['adaptive_avg_pool2d', 'add', 'avg_pool2d', 'batch_norm']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .ir import GraphError

if TYPE_CHECKING:
    from .from_torch import _Importer as Importer


class TensorRef:
    """A tensor value of the fx graph: the name of its graph node."""

    def __init__(self, name: str) -> None:
        self.name = name


class Unsupported:
    """A tensor the graph does not compute (``nn.MultiheadAttention``'s weights): an
    error, saying ``why``, only where the model reads it."""

    def __init__(self, why: str) -> None:
        self.why = why


def to_numpy(t: Any) -> np.ndarray:
    """A torch tensor's values as a NumPy array."""
    return t.detach().cpu().numpy()


def _kw(args: list[Any], kwargs: dict[str, Any], i: int, key: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(key, default)


def _unary(op: str) -> Callable[..., Any]:
    return lambda s, a, k, w: s.op(op, [s.tensor(a[0], w)], w)


def _permute(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    dims = a[1:] if len(a) > 2 or isinstance(a[1], int) else a[1]
    return s.op("permute", [s.tensor(a[0], w)], w, dims=tuple(int(d) for d in s.arg(dims)))


def _transpose(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    nd = len(s.shape(a[0]))
    d0, d1 = _kw(a, k, 1, "dim0", 0) % nd, _kw(a, k, 2, "dim1", 1) % nd
    dims = list(range(nd))
    dims[d0], dims[d1] = d1, d0
    return s.op("permute", [s.tensor(a[0], w)], w, dims=tuple(dims))


def _same_shape(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    # squeeze/unsqueeze: the example run knows the result's shape; a reshape to it is exact
    return s.reshape(a[0], tuple(s.values[s.current].shape), w)


def _softmax(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    return s.op("softmax", [s.tensor(a[0], w)], w, axis=int(s.arg(_kw(a, k, 1, "dim", -1))))


def _dims(s: Importer, a: list[Any], k: dict[str, Any]) -> tuple[int, ...]:
    """A reduction's ``dim`` argument as a tuple of axes: all of them when None or
    empty."""
    dims = s.arg(_kw(a, k, 1, "dim", None))
    if dims is None or dims == () or dims == []:
        return tuple(range(len(s.shape(a[0]))))
    return (dims,) if isinstance(dims, int) else tuple(dims)


def _reduce(op: str, s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    """mean, sum, amax or amin over ``dim`` (all axes when None or empty)."""
    return s.op(op, [s.tensor(a[0], w)], w, axes=_dims(s, a, k),
                keepdim=bool(s.arg(_kw(a, k, 2, "keepdim", False))))


def _mean(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    return _reduce("mean", s, a, k, w)


def _spread(op: str, s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    """var or std: ``correction`` (or the older ``unbiased``, a bool after ``dim``)."""
    if "correction" in k:
        corr = s.arg(k["correction"])
    elif "unbiased" in k or (len(a) > 2 and isinstance(s.arg(a[2]), bool)):
        corr = int(bool(s.arg(k["unbiased"] if "unbiased" in k else a[2])))
    else:
        corr = 1
    keep = s.arg(k.get("keepdim", a[3] if len(a) > 3 else False))
    return s.op(op, [s.tensor(a[0], w)], w, axes=_dims(s, a, k), keepdim=bool(keep),
                correction=1 if corr is None else float(corr))


def index_spec(shape: tuple[int, ...], index: Any, where: str) -> tuple[tuple[Any, ...], ...]:
    """The ``slice`` op's index for ``x[index]`` on a tensor of ``shape``: ints, slices
    with a positive step, None (a new axis of 1) and one Ellipsis (``x[..., :d]``,
    ``mask[:T, :T]``, ``x[:, None]``).

    Example:
        >>> index_spec((4, 6), (slice(None), None, slice(0, 6, 2)), "x")
        (('s', 0, 1, 4), ('n',), ('s', 0, 2, 3))
    """
    items = index if isinstance(index, tuple) else (index,)
    named = sum(1 for it in items if it is not Ellipsis and it is not None)
    if named > len(shape):
        raise GraphError(f"{where}: {named} indices for a tensor of {len(shape)} axes")
    out: list[tuple[Any, ...]] = []
    for it in items:
        d = sum(1 for e in out if e[0] != "n")      # the axis of ``shape`` this one reads
        if it is None:
            out.append(("n",))
        elif it is Ellipsis:
            out += [("s", 0, 1, shape[d + j]) for j in range(len(shape) - named)]
        elif isinstance(it, int) and not isinstance(it, bool):
            if not -shape[d] <= it < shape[d]:
                raise GraphError(f"{where}: index {it} is out of range for axis {d} of "
                                 f"{shape[d]}")
            out.append(("i", it % shape[d]))
        elif isinstance(it, slice):
            start, stop, step = it.indices(shape[d])
            if step <= 0 or len(range(start, stop, step)) == 0:
                raise GraphError(f"{where}: slice {it} of axis {d} (length {shape[d]}) is "
                                 "empty or steps backwards, which is not supported")
            out.append(("s", start, step, len(range(start, stop, step))))
        else:
            what = ("a tensor (x[ids], x[mask])" if isinstance(it, TensorRef) or
                    hasattr(it, "shape") else type(it).__name__)
            raise GraphError(f"{where}: indexing with {what} is not supported (ints, "
                             "slices, None and ... are)")
    used = sum(1 for e in out if e[0] != "n")
    out += [("s", 0, 1, shape[d]) for d in range(used, len(shape))]
    return tuple(out)


def _getitem(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    """``x[index]`` on a tensor (a ``slice`` op), or a part of ``split``/``chunk``."""
    v, index = s.arg(a[0]), a[1]
    if isinstance(v, (list, tuple)):
        return v[s.arg(index)]
    index = tuple(slice(s.arg(i.start), s.arg(i.stop), s.arg(i.step))
                  if isinstance(i, slice) else s.arg(i)
                  for i in (index if isinstance(index, tuple) else (index,)))
    return s.op("slice", [s.tensor(a[0], w)], w,
                index=index_spec(s.shape(a[0]), index, w))


def axis_slice(s: Importer, x: Any, axis: int, start: int, length: int, w: str) -> TensorRef:
    """``length`` elements of ``x`` from ``start`` along ``axis``, whole along the rest (a
    ``slice`` op): a part of split or chunk, a gate's columns.

    Example:
        >>> axis_slice(s, qkv, -1, 16, 16, where)      # qkv[..., 16:32]
    """
    shape = s.shape(x)
    axis %= len(shape)
    index = tuple(("s", start, 1, length) if d == axis else ("s", 0, 1, n)
                  for d, n in enumerate(shape))
    return s.op("slice", [s.tensor(x, w)], w, index=index)


def split_parts(s: Importer, a: list[Any], k: dict[str, Any], w: str, chunks: bool
                ) -> list[Any]:
    """``torch.split(x, size or sizes, dim)`` or ``torch.chunk(x, n, dim)``: one
    ``slice`` op per part, as a list that ``getitem`` picks from."""
    shape = s.shape(a[0])
    how, dim = s.arg(_kw(a, k, 1, "chunks" if chunks else "split_size_or_sections", None)), \
        int(s.arg(_kw(a, k, 2, "dim", 0))) % len(shape)
    n = shape[dim]
    if chunks:
        size = -(-n // int(how))
        sizes = [min(size, n - i) for i in range(0, n, size)]
    elif isinstance(how, int):
        sizes = [min(how, n - i) for i in range(0, n, how)]
    else:
        sizes = [int(x) for x in how]
    parts, at = [], 0
    for sz in sizes:
        parts.append(axis_slice(s, a[0], dim, at, sz, w))
        at += sz
    return parts


def _clamp(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    lo, hi = s.arg(_kw(a, k, 1, "min", None)), s.arg(_kw(a, k, 2, "max", None))
    if not all(v is None or isinstance(v, (int, float)) for v in (lo, hi)):
        raise GraphError(f"{w}: clamp takes number bounds here; tensor bounds are not "
                         "supported")
    # An open side: the float32 extreme, finite in C.
    return s.op("clip", [s.tensor(a[0], w)], w, lo=-3.4028234e38 if lo is None else float(lo),
                hi=3.4028234e38 if hi is None else float(hi))


def _dropout(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    """Nothing at inference (``nn.Dropout`` in eval mode passes ``training=False``); a
    dropout that would drop is an error, not a silent identity."""
    if s.arg(_kw(a, k, 2, "training", True)) and float(s.arg(_kw(a, k, 1, "p", 0.5))) > 0:
        raise GraphError(f"{w}: dropout with training=True drops at random; call .eval() "
                         "on the module, or pass training=False")
    return s.arg(a[0])


def _pow(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    """``x ** c``, ``x.pow(c)``, ``torch.pow(x, c)``: for a number ``c`` (RMSNorm's
    square) a scalar op, which ``te.pow`` writes out for the small exponents; ``c ** x``
    and a tensor to a tensor's power are libm's ``pow`` per element."""
    base, c = s.arg(a[0]), s.arg(_kw(a, k, 1, "exponent", None))
    if isinstance(base, (int, float)) and not isinstance(base, bool):
        return s.op("scalar", [s.tensor(c, w)], w, fn="rpow", value=float(base))
    if not isinstance(c, (int, float)) or isinstance(c, bool):
        return s.op("pow", [s.tensor(base, w), s.tensor(c, w)], w)
    return s.op("scalar", [s.tensor(base, w)], w, fn="pow", value=float(c))


def _compare(name: str) -> Callable[[Importer, list[Any], dict[str, Any], str], Any]:
    """A comparison (``x > 0``, ``mask == 0``): a mask of 1.0 and 0.0."""
    def handle(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
        return s.binary(name, a[0], a[1], w)
    return handle


def _to_float(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    """``x.float()``: the graph's masks and floats are float32 already; integers are
    converted (times 1.0)."""
    ref = s.tensor(a[0], w)
    if s.g.nodes[ref].dtype == "float32":
        return s.arg(a[0])
    return s.op("scalar", [ref], w, fn="mul", value=1.0)


# Functions that return several tensors, each a ``slice`` op: the importer keeps the list
# and ``getitem`` picks from it (any other tuple of tensors is an error).
SPLITS: dict[str, Callable[[Importer, list[Any], dict[str, Any], str], list[Any]]] = {
    "split": lambda s, a, k, w: split_parts(s, a, k, w, chunks=False),
    "chunk": lambda s, a, k, w: split_parts(s, a, k, w, chunks=True),
}

FUNCS: dict[str, Callable[[Importer, list[Any], dict[str, Any], str], Any]] = {
    "add": lambda s, a, k, w: s.binary("add", a[0], a[1], w),
    "iadd": lambda s, a, k, w: s.binary("add", a[0], a[1], w),
    "sub": lambda s, a, k, w: s.binary("sub", a[0], a[1], w),
    "mul": lambda s, a, k, w: s.binary("mul", a[0], a[1], w),
    "truediv": lambda s, a, k, w: s.binary("div", a[0], a[1], w),
    "div": lambda s, a, k, w: s.binary("div", a[0], a[1], w),
    "relu": _unary("relu"), "gelu": lambda s, a, k, w: s.op(
        "gelu", [s.tensor(a[0], w)], w, approximate=k.get("approximate", "none")),
    "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"), "exp": _unary("exp"),
    "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"), "neg": _unary("neg"),
    "abs": _unary("abs"), "log": _unary("log"), "silu": _unary("silu"),
    "hardswish": _unary("hardswish"), "hardsigmoid": _unary("hardsigmoid"),
    "erf": _unary("erf"), "square": _unary("square"), "reciprocal": _unary("reciprocal"),
    "leaky_relu": lambda s, a, k, w: s.op("leaky_relu", [s.tensor(a[0], w)], w, slope=float(
        s.arg(_kw(a, k, 1, "negative_slope", 0.01)))),
    "elu": lambda s, a, k, w: s.op("elu", [s.tensor(a[0], w)], w,
                                   alpha=float(s.arg(_kw(a, k, 1, "alpha", 1.0)))),
    "softplus": lambda s, a, k, w: s.op("softplus", [s.tensor(a[0], w)], w,
                                        beta=float(s.arg(_kw(a, k, 1, "beta", 1.0))),
                                        threshold=float(s.arg(_kw(a, k, 2, "threshold", 20.0)))),
    "clamp": _clamp, "clip": _clamp, "dropout": _dropout, "pow": _pow,
    "maximum": lambda s, a, k, w: s.op("maximum", [s.tensor(a[0], w), s.tensor(a[1], w)], w),
    "minimum": lambda s, a, k, w: s.op("minimum", [s.tensor(a[0], w), s.tensor(a[1], w)], w),
    "sum": lambda s, a, k, w: _reduce("sum", s, a, k, w),
    "amax": lambda s, a, k, w: _reduce("amax", s, a, k, w),
    "amin": lambda s, a, k, w: _reduce("amin", s, a, k, w),
    **{name: _compare(name) for name in ("gt", "lt", "ge", "le", "eq", "ne")},
    "float": _to_float, "getitem": _getitem,
    "where": lambda s, a, k, w: s.op("where", [s.tensor(a[0], w), s.tensor(a[1], w),
                                               s.tensor(a[2], w)], w),
    "masked_fill": lambda s, a, k, w: s.op("where", [s.tensor(a[1], w), s.tensor(a[2], w),
                                                     s.tensor(a[0], w)], w),
    "var": lambda s, a, k, w: _spread("var", s, a, k, w),
    "std": lambda s, a, k, w: _spread("std", s, a, k, w),
    "log_softmax": lambda s, a, k, w: s.op("log_softmax", [s.tensor(a[0], w)], w, axis=int(
        s.arg(_kw(a, k, 1, "dim", -1)))),
    "rms_norm": lambda s, a, k, w: s.rms_norm(a[0], s.arg(a[1]),
                                              s.arg(_kw(a, k, 2, "weight", None)),
                                              s.arg(_kw(a, k, 3, "eps", None)), w),
    "relu6": lambda s, a, k, w: s.op("clip", [s.tensor(a[0], w)], w, lo=0.0, hi=6.0),
    "hardtanh": lambda s, a, k, w: s.op("clip", [s.tensor(a[0], w)], w,
                                        lo=float(_kw(a, k, 1, "min_val", -1.0)),
                                        hi=float(_kw(a, k, 2, "max_val", 1.0))),
    "matmul": lambda s, a, k, w: s.op("matmul", [s.tensor(a[0], w), s.tensor(a[1], w)], w),
    "bmm": lambda s, a, k, w: s.op("matmul", [s.tensor(a[0], w), s.tensor(a[1], w)], w),
    "softmax": _softmax, "mean": _mean,
    "permute": _permute, "transpose": _transpose,
    "reshape": lambda s, a, k, w: s.reshape(a[0], s.arg(a[1:]), w),
    "view": lambda s, a, k, w: s.reshape(a[0], s.arg(a[1:]), w),
    "flatten": lambda s, a, k, w: s.flatten(a[0], int(_kw(a, k, 1, "start_dim", 0)),
                                            int(_kw(a, k, 2, "end_dim", -1)), w),
    "contiguous": lambda s, a, k, w: s.arg(a[0]),
    "cat": lambda s, a, k, w: s.op("concat", [s.tensor(t, w) for t in a[0]], w,
                                   axis=int(_kw(a, k, 1, "dim", 0))),
    "linear": lambda s, a, k, w: _linear(s, a, k, w),
    "batch_norm": lambda s, a, k, w: _batch_norm(s, a, k, w),
    "conv2d": lambda s, a, k, w: _conv2d(s, a, k, w),
    "layer_norm": lambda s, a, k, w: s.layer_norm(
        a[0], s.arg(a[1]), s.arg(_kw(a, k, 2, "weight", None)),
        s.arg(_kw(a, k, 3, "bias", None)), float(_kw(a, k, 4, "eps", 1e-5)), w),
    "adaptive_avg_pool2d": lambda s, a, k, w: s.adaptive(a[0], s.arg(a[1]), w),
    "max_pool2d": lambda s, a, k, w: s.pool(
        "max_pool2d", a[0], s.arg(a[1]), s.arg(_kw(a, k, 2, "stride", None)),
        s.arg(_kw(a, k, 3, "padding", 0)), w, dilation=s.arg(_kw(a, k, 4, "dilation", 1)),
        ceil_mode=bool(_kw(a, k, 5, "ceil_mode", False))),
    "avg_pool2d": lambda s, a, k, w: s.pool(
        "avg_pool2d", a[0], s.arg(a[1]), s.arg(_kw(a, k, 2, "stride", None)),
        s.arg(_kw(a, k, 3, "padding", 0)), w, ceil_mode=bool(_kw(a, k, 4, "ceil_mode", False)),
        count_include_pad=bool(_kw(a, k, 5, "count_include_pad", True)),
        divisor_override=_kw(a, k, 6, "divisor_override", None)),
}


def _batch_norm(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    if _kw(a, k, 5, "training", False):
        raise GraphError(f"{w}: batch norm in training mode; call .eval() on the model")
    return s.batch_norm(a[0], s.arg(_kw(a, k, 1, "running_mean", None)),
                        s.arg(_kw(a, k, 2, "running_var", None)),
                        s.arg(_kw(a, k, 3, "weight", None)), s.arg(_kw(a, k, 4, "bias", None)),
                        float(_kw(a, k, 7, "eps", 1e-5)), w)


def _conv2d(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    weight, bias = s.arg(_kw(a, k, 1, "weight", None)), s.arg(_kw(a, k, 2, "bias", None))
    return s.conv_arrays(a[0], to_numpy(weight) if isinstance(weight, s.torch.Tensor) else weight,
                         None if bias is None else to_numpy(bias), s.arg(_kw(a, k, 3, "stride", 1)),
                         s.arg(_kw(a, k, 4, "padding", 0)), s.arg(_kw(a, k, 5, "dilation", 1)),
                         int(_kw(a, k, 6, "groups", 1)), w)


def _linear(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    weight, bias = s.arg(a[1]), s.arg(_kw(a, k, 2, "bias", None))
    if not isinstance(weight, s.torch.Tensor):
        raise GraphError(f"{w}: linear with a computed weight is not supported; use matmul")
    return s.linear(a[0], weight, bias, w)


FUNCS["squeeze"] = FUNCS["unsqueeze"] = _same_shape
