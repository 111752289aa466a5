"""Graph operators: each one's fusion pattern and its definition in the tensor-expression
language, so a fused group of nodes becomes one ``PrimFunc`` by composing definitions.

Patterns order what may fuse (as in TVM's Relay): element-wise and broadcast ops join the
group of the anchor they follow (an epilogue); injective ops (reshape, permute, concat)
fuse into their consumer; reductions (pooling, softmax, layer norm) anchor their own
group; an anchor (conv2d, dense, matmul) never joins another.

Example:
    >>> x = te.placeholder((1, 8, 6, 6), name="x")
    >>> y = OPS["max_pool2d"].compute([x], {"kernel": (2, 2), "stride": (2, 2),
    ...                                    "padding": (0, 0)}, "pool")
    >>> y.shape
    (1, 8, 3, 3)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from .. import te
from ..errors import TEError
from ..te.tensor import Tensor
from ..workloads.conv import pad as te_pad
from .ir import GraphError, Node

LOWEST = -3.4028234e38  # max-pool padding: below every float32 value but finite in C


class Pattern(IntEnum):
    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCE = 3
    ANCHOR = 4
    OPAQUE = 5


Compute = Callable[[list[Tensor], dict[str, Any], str], Tensor]


@dataclass(frozen=True)
class OpDef:
    name: str
    pattern: Pattern
    compute: Compute


OPS: dict[str, OpDef] = {}


def _op(name: str, pattern: Pattern) -> Callable[[Compute], Compute]:
    def reg(fn: Compute) -> Compute:
        OPS[name] = OpDef(name, pattern, fn)
        return fn
    return reg


def infer(node: Node, inputs: list[Node]) -> tuple[tuple[int, ...], str]:
    """Shape and dtype of ``node``, by building its definition on placeholders."""
    if node.op not in OPS:
        raise GraphError(f"{node.source or node.name}: unsupported operator {node.op!r}")
    phs = [te.placeholder(i.shape, i.dtype, name=f"in{k}") for k, i in enumerate(inputs)]
    try:
        out = OPS[node.op].compute(phs, node.attrs, "t")
    except (TEError, ValueError, IndexError) as e:
        shapes = ", ".join(str(list(i.shape)) for i in inputs)
        raise GraphError(f"{node.source or node.name}: {node.op} on inputs of shapes "
                         f"{shapes} with {node.attrs}: {e}") from e
    return out.shape, out.dtype


# -- element-wise ------------------------------------------------------------------------

def _unary(name: str, f: Callable[[Any, dict[str, Any]], Any]) -> None:
    _op(name, Pattern.ELEMWISE)(
        lambda ins, a, n: te.compute(ins[0].shape, lambda *i: f(ins[0][i], a), name=n))


_unary("relu", lambda x, a: te.max(x, 0.0))
_unary("sigmoid", lambda x, a: te.sigmoid(x))
_unary("tanh", lambda x, a: te.tanh(x))
_unary("exp", lambda x, a: te.exp(x))
_unary("sqrt", lambda x, a: te.sqrt(x))
_unary("rsqrt", lambda x, a: 1.0 / te.sqrt(x))
_unary("abs", lambda x, a: te.abs(x))
_unary("log", lambda x, a: te.log(x))
_unary("neg", lambda x, a: x * -1.0)
_unary("clip", lambda x, a: te.min(te.max(x, float(a["lo"])), float(a["hi"])))
_unary("gelu", lambda x, a: (
    x * 0.5 * (te.tanh((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)) + 1.0)
    if a.get("approximate") == "tanh" else x * 0.5 * (te.erf(x * (1 / math.sqrt(2))) + 1.0)))

# Comparisons give a mask of 1.0 and 0.0 in float32 (PyTorch's are bool): ``where`` and
# ``masked_fill`` read it as true where it is not 0.
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "gt": lambda a, b: a > b, "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b,
    "le": lambda a, b: a <= b, "eq": te.eq, "ne": te.ne}


def _mask(cmp: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: te.if_then_else(cmp(a, b), 1.0, 0.0)


_SCALAR = {"add": lambda x, c: x + c, "sub": lambda x, c: x - c, "mul": lambda x, c: x * c,
           "div": lambda x, c: x / c, "pow": lambda x, c: te.pow(x, c),
           "rsub": lambda x, c: c - x, "rdiv": lambda x, c: c / x,
           "rpow": lambda x, c: te.pow(c, x),
           **{name: _mask(cmp) for name, cmp in _COMPARE.items()}}


@_op("scalar", Pattern.ELEMWISE)
def _scalar(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    f, c = _SCALAR[a["fn"]], float(a["value"])
    return te.compute(ins[0].shape, lambda *i: f(ins[0][i], c), name=n)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    nd = max(len(s) for s in shapes)
    out = []
    for d in range(nd):
        dims = {s[d - nd + len(s)] for s in shapes if d - nd + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _bcast(t: Tensor, idx: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    """``t`` read at the broadcast index ``idx`` of an output of ``shape``: leading axes
    dropped, axes of size 1 read at 0 where the output's is longer. Where both are 1 the
    index stays the loop variable: a consumer that reads its producer at exactly its own
    indices can be folded into the producer's tile (reverse_compute_inline)."""
    lead = len(idx) - t.ndim
    return t[tuple(0 if t.shape[d] == 1 and shape[lead + d] != 1 else idx[lead + d]
                   for d in range(t.ndim))]


_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "maximum": te.maximum, "minimum": te.minimum,
           "pow": te.pow,
           **{name: _mask(cmp) for name, cmp in _COMPARE.items()}}


def _binary(name: str) -> None:
    f = _BINARY[name]

    def compute(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
        shape = broadcast_shape(ins[0].shape, ins[1].shape)
        return te.compute(shape, lambda *i: f(_bcast(ins[0], i, shape),
                                              _bcast(ins[1], i, shape)), name=n)
    _op(name, Pattern.BROADCAST)(compute)


for _name in _BINARY:
    _binary(_name)


@_op("where", Pattern.BROADCAST)
def _where(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``b`` where the mask ``c`` is not 0, else ``f`` (``torch.where``, ``masked_fill``)."""
    c, t, f = ins
    shape = broadcast_shape(c.shape, t.shape, f.shape)
    return te.compute(shape, lambda *i: te.if_then_else(te.ne(_bcast(c, i, shape), 0.0),
                                                        _bcast(t, i, shape),
                                                        _bcast(f, i, shape)), name=n)


# -- anchors -------------------------------------------------------------------------------

@_op("conv2d", Pattern.ANCHOR)
def _conv2d(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """NCHW input; the weight is laid out [C / groups, R, S, K] (PyTorch's OIHW with the
    output channel moved last, at import) so that the output channels, which fill the
    vector lanes in a tuned conv, are contiguous in the weight without a copy per call.
    Bias is a separate broadcast add."""
    x, w = ins
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    g = a.get("groups", 1)
    N, C, H, W = x.shape
    cg, R, S, K = w.shape
    if C != cg * g or K % g:
        raise ValueError(f"{C} input channels, weight {list(w.shape)} and groups={g} disagree")
    xp = te_pad(x, (ph, pw), name=f"{n}_pad") if ph or pw else x
    OH = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    kg = K // g
    rc, ry, rx = te.reduce_axis(cg, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    if g == 1:
        def body(b, k, y, z):
            return te.sum(xp[b, rc, y * sh + ry * dh, z * sw + rx * dw] * w[rc, ry, rx, k],
                          axis=[rc, ry, rx])
    else:
        def body(b, k, y, z):
            return te.sum(xp[b, k // kg * cg + rc, y * sh + ry * dh, z * sw + rx * dw]
                          * w[rc, ry, rx, k], axis=[rc, ry, rx])
    return te.compute((N, K, OH, OW), body, name=n)


@_op("dense", Pattern.ANCHOR)
def _dense(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """x[..., K] times w[K, N] (the weight stored transposed from nn.Linear's [N, K], so
    the output's columns are contiguous in both)."""
    x, w = ins
    K = x.shape[-1]
    if w.shape[0] != K:
        raise ValueError(f"input has {K} features but the weight is {list(w.shape)}")
    k = te.reduce_axis(K, "k")
    return te.compute(x.shape[:-1] + (w.shape[1],),
                      lambda *i: te.sum(x[i[:-1] + (k,)] * w[k, i[-1]], axis=k), name=n)


@_op("matmul", Pattern.ANCHOR)
def _matmul(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """a[..., M, K] @ b[..., K, N], batch axes broadcast."""
    x, y = ins
    if x.ndim < 2 or y.ndim < 2 or x.shape[-1] != y.shape[-2]:
        raise ValueError(f"cannot multiply {list(x.shape)} by {list(y.shape)}")
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
    k = te.reduce_axis(x.shape[-1], "k")

    def body(*i):
        b = i[:-2]
        return te.sum(_bcast_batch(x, b, (i[-2], k)) * _bcast_batch(y, b, (k, i[-1])), axis=k)
    return te.compute(batch + (x.shape[-2], y.shape[-1]), body, name=n)


def _bcast_batch(t: Tensor, batch: tuple[Any, ...], last: tuple[Any, Any]) -> Any:
    lead = len(batch) - (t.ndim - 2)
    idx = tuple(0 if t.shape[d] == 1 else batch[lead + d] for d in range(t.ndim - 2))
    return t[idx + last]


# -- reductions ----------------------------------------------------------------------------

def _pool_out(size: int, k: int, s: int, p: int, ceil: bool) -> int:
    span = size + 2 * p - k
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= size + p:  # PyTorch: the last window must start inside
        o -= 1
    return o


@_op("max_pool2d", Pattern.REDUCE)
def _max_pool(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    x = ins[0]
    (kh, kw), (sh, sw), (ph, pw) = a["kernel"], a["stride"], a["padding"]
    N, C, H, W = x.shape
    OH = _pool_out(H, kh, sh, ph, a.get("ceil_mode", False))
    OW = _pool_out(W, kw, sw, pw, a.get("ceil_mode", False))
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    def body(b, c, y, z):
        iy, ix = y * sh + ry - ph, z * sw + rx - pw
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        return te.max(te.if_then_else(inside, x[b, c, iy, ix], LOWEST), axis=[ry, rx])
    return te.compute((N, C, OH, OW), body, name=n)


@_op("avg_pool2d", Pattern.REDUCE)
def _avg_pool(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    x = ins[0]
    (kh, kw), (sh, sw), (ph, pw) = a["kernel"], a["stride"], a["padding"]
    N, C, H, W = x.shape
    ceil = a.get("ceil_mode", False)
    OH, OW = _pool_out(H, kh, sh, ph, ceil), _pool_out(W, kw, sw, pw, ceil)
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    def total(b, c, y, z):
        iy, ix = y * sh + ry - ph, z * sw + rx - pw
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        return te.sum(te.if_then_else(inside, x[b, c, iy, ix], 0.0), axis=[ry, rx])
    s = te.compute((N, C, OH, OW), total, name=f"{n}_sum")

    def count(lo_pad: int, hi: int, k: int, pos: Any, stride: int) -> Any:
        start = pos * stride - lo_pad
        end = te.min(start + k, hi + lo_pad)
        if a.get("count_include_pad", True):
            return end - start
        return te.min(end, hi) - te.max(start, 0)
    return te.compute(s.shape, lambda b, c, y, z: s[b, c, y, z] / te.float32(
        count(ph, H, kh, y, sh) * count(pw, W, kw, z, sw)), name=n)


# -- injective -----------------------------------------------------------------------------

def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]


@_op("reshape", Pattern.INJECTIVE)
def _reshape(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    x, shape = ins[0], tuple(int(s) for s in a["shape"])
    if math.prod(shape) != math.prod(x.shape):
        raise ValueError(f"cannot reshape {list(x.shape)} to {list(shape)}")
    so, si = _strides(shape), _strides(x.shape)

    def body(*i):
        flat = i[0] * so[0]
        for v, st in zip(i[1:], so[1:]):
            flat = flat + v * st
        # the leading index needs no modulo, the last no division
        return x[tuple((flat if st == 1 else flat // st) if d == 0 else
                       (flat if st == 1 else flat // st) % x.shape[d]
                       for d, st in enumerate(si))]
    return te.compute(shape, body, name=n)


@_op("permute", Pattern.INJECTIVE)
def _permute(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    x, dims = ins[0], [d % ins[0].ndim for d in a["dims"]]
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"dims {a['dims']} are not a permutation of {x.ndim} axes")
    inv = [dims.index(d) for d in range(x.ndim)]
    return te.compute(tuple(x.shape[d] for d in dims),
                      lambda *i: x[tuple(i[inv[d]] for d in range(x.ndim))], name=n)


@_op("slice", Pattern.INJECTIVE)
def _slice(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x[index]`` with ints, stepped slices and new axes: ``a["index"]`` has an entry
    per axis of ``x``, ``("i", k)`` (the axis dropped at k) or ``("s", start, step,
    length)``, and ``("n",)`` where a new axis of 1 goes."""
    x, spec = ins[0], a["index"]
    if sum(1 for e in spec if e[0] != "n") != x.ndim:
        raise ValueError(f"an index of {len(spec)} axes for a tensor of {x.ndim}")
    # Indexing down to one element gives a 0-d tensor, held as shape (1,) (reductions.py).
    shape = tuple(e[3] if e[0] == "s" else 1 for e in spec if e[0] != "i") or (1,)

    def body(*o: Any) -> Any:
        it = iter(o)
        src = []
        for e in spec:
            if e[0] == "n":
                next(it)
            else:
                src.append(e[1] if e[0] == "i" else e[1] + e[2] * next(it))
        return x[tuple(src)]
    return te.compute(shape, body, name=n)


@_op("concat", Pattern.INJECTIVE)
def _concat(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    axis = a["axis"] % ins[0].ndim
    offs = [0]
    for t in ins:
        if t.shape[:axis] + t.shape[axis + 1:] != ins[0].shape[:axis] + ins[0].shape[axis + 1:]:
            raise ValueError(f"concat on axis {axis}: shapes {[list(t.shape) for t in ins]}")
        offs.append(offs[-1] + t.shape[axis])

    def body(*i):
        v = ins[-1][i[:axis] + (i[axis] - offs[-2],) + i[axis + 1:]]
        for t, o in reversed(list(zip(ins[:-1], offs[:-2]))):
            sub = i[:axis] + (i[axis] - o,) + i[axis + 1:]
            v = te.if_then_else(i[axis] < o + t.shape[axis], t[sub], v)
        return v
    shape = ins[0].shape[:axis] + (offs[-1],) + ins[0].shape[axis + 1:]
    return te.compute(shape, body, name=n)


@_op("embedding", Pattern.OPAQUE)
def _embedding(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """table[ids] along a new last axis; ids out of range are clamped (PyTorch raises)."""
    ids, table = ins
    if ids.dtype != "int32":
        raise ValueError(f"embedding indices must be int32, got {ids.dtype}")
    V = table.shape[0]
    return te.compute(ids.shape + (table.shape[1],), lambda *i: table[
        te.min(te.max(ids[i[:-1]], 0), V - 1), i[-1]], name=n)
