"""Reductions of the graph: mean, sum, amax, amin, var and std over given axes, softmax and
log-softmax along one, and layer and RMS norms over the trailing axes their weights span.
Each anchors a kernel of its own (``Pattern.REDUCE``); element-wise ops after it fuse in.

Example:
    >>> x = te.placeholder((4, 8), name="x")
    >>> OPS["amax"].compute([x], {"axes": (-1,), "keepdim": True}, "m").shape
    (4, 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import te
from ..te.tensor import Tensor
from .ops import Pattern, _op


def reduce_over(x: Tensor, a: dict[str, Any], combiner: Callable[..., Any], n: str
                ) -> Tensor:
    """``x`` reduced by ``combiner`` (``te.sum``, ``te.max``, ...) over ``a["axes"]``,
    keeping them as 1s with ``a["keepdim"]``: the body of mean, sum, amax and amin.

    Example:
        >>> reduce_over(x, {"axes": (-1,), "keepdim": True}, te.sum, "s").shape
        (4, 1)
    """
    axes, keep = sorted(d % x.ndim for d in a["axes"]), a.get("keepdim", False)
    rs = [te.reduce_axis(x.shape[d], f"r{d}") for d in axes]
    # A reduction over every axis gives a 0-d tensor, held as shape (1,) (the graph's
    # ``output_shapes`` gives it back its own shape).
    shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape)
                  if keep or d not in axes) or (1,)

    return te.compute(shape, lambda *i: combiner(x[_source(x.ndim, axes, keep, rs, i)[0]],
                                                 axis=rs), name=n)


def _source(ndim: int, axes: list[int], keep: bool, rs: list[Any], i: tuple[Any, ...]
            ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """For output index ``i`` of a reduction over ``axes`` (kept as 1s with ``keep``): the
    input's index, the reduction variables ``rs`` on the reduced axes, and the index of
    the same element in a keepdim result (0 on the reduced axes)."""
    it, src, kept = iter(i), [], []
    for d in range(ndim):
        if d in axes:
            src.append(rs[axes.index(d)])
            kept.append(0)
            if keep:
                next(it)
        else:
            v = next(it)
            src.append(v)
            kept.append(v)
    return tuple(src), tuple(kept)


@_op("mean", Pattern.REDUCE)
def _mean(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    x = ins[0]
    count = math.prod(x.shape[d % x.ndim] for d in a["axes"])
    s = reduce_over(x, a, te.sum, f"{n}_sum")
    return te.compute(s.shape, lambda *i: s[i] * (1.0 / count), name=n)


def _spread(ins: list[Tensor], a: dict[str, Any], n: str, root: bool) -> Tensor:
    """var (or std, its square root) over ``a["axes"]``: the squared deviations from the
    mean, summed and divided by the count less ``a["correction"]`` (1 by default, as
    PyTorch's)."""
    x = ins[0]
    axes = sorted(d % x.ndim for d in a["axes"])
    count = math.prod(x.shape[d] for d in axes)
    total = reduce_over(x, {"axes": axes, "keepdim": True}, te.sum, f"{n}_sum")

    def row(i: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(0 if d in axes else v for d, v in enumerate(i))
    dev = te.compute(x.shape, lambda *i: (x[i] - total[row(i)] * (1.0 / count)) * (
        x[i] - total[row(i)] * (1.0 / count)), name=f"{n}_dev")
    ss = reduce_over(dev, a, te.sum, f"{n}_ss")
    corr = float(a.get("correction", 1))
    scale = 1.0 / (count - corr) if count > corr else float("nan")   # PyTorch's nan
    if root:
        return te.compute(ss.shape, lambda *i: te.sqrt(ss[i] * scale), name=n)
    return te.compute(ss.shape, lambda *i: ss[i] * scale, name=n)


_op("var", Pattern.REDUCE)(lambda ins, a, n: _spread(ins, a, n, False))
_op("std", Pattern.REDUCE)(lambda ins, a, n: _spread(ins, a, n, True))


def _plain(combiner: Callable[..., Any]) -> Callable[[list[Tensor], dict[str, Any], str],
                                                   Tensor]:
    def compute(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
        return reduce_over(ins[0], a, combiner, n)
    return compute


for _name, _combiner in (("sum", te.sum), ("amax", te.max), ("amin", te.min)):
    _op(_name, Pattern.REDUCE)(_plain(_combiner))


def _last_axis_reduce(x: Tensor, axis: int) -> tuple[int, Callable[..., tuple[Any, ...]]]:
    axis %= x.ndim

    def at(i: tuple[Any, ...], r: Any) -> tuple[Any, ...]:
        return i[:axis] + (r,) + i[axis + 1:]
    return axis, at


def _max_and_sum(x: Tensor, a: dict[str, Any], n: str
                 ) -> tuple[Callable[..., tuple[Any, ...]], Tensor, Tensor]:
    """Along ``a["axis"]``: the max of ``x`` and the sum of e^(x - max) (kept as a 1), and
    the index of an element's row in them."""
    axis, at = _last_axis_reduce(x, a.get("axis", -1))
    r1, r2 = te.reduce_axis(x.shape[axis], "r1"), te.reduce_axis(x.shape[axis], "r2")
    red = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    mx = te.compute(red, lambda *i: te.max(x[at(i, r1)], axis=r1), name=f"{n}_max")
    sm = te.compute(red, lambda *i: te.sum(te.exp(x[at(i, r2)] - mx[i]), axis=r2),
                    name=f"{n}_sum")
    return at, mx, sm


@_op("softmax", Pattern.REDUCE)
def _softmax(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    x = ins[0]
    at, mx, sm = _max_and_sum(x, a, n)
    return te.compute(x.shape, lambda *i: te.exp(x[i] - mx[at(i, 0)]) / sm[at(i, 0)], name=n)


@_op("log_softmax", Pattern.REDUCE)
def _log_softmax(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    x = ins[0]
    at, mx, sm = _max_and_sum(x, a, n)
    return te.compute(x.shape, lambda *i: x[i] - mx[at(i, 0)] - te.log(sm[at(i, 0)]), name=n)


def _trailing(x: Tensor, gamma: Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The trailing axes of ``x`` a norm's weight spans, and the leading ones; a
    ValueError if the weight's shape is not ``x``'s trailing shape."""
    inner = x.shape[-gamma.ndim:]
    if inner != gamma.shape:
        raise ValueError(f"normalized shape {list(gamma.shape)} is not the trailing shape of "
                         f"{list(x.shape)}")
    return inner, x.shape[:-gamma.ndim]


@_op("rms_norm", Pattern.REDUCE)
def _rms_norm(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * gamma over the trailing axes gamma spans (LLaMA's
    RMSNorm, ``nn.RMSNorm``)."""
    x, gamma = ins
    inner, lead = _trailing(x, gamma)
    cnt, eps = math.prod(inner), float(a.get("eps", 1e-6))
    r = [te.reduce_axis(s, f"r{d}") for d, s in enumerate(inner)]
    ss = te.compute(lead, lambda *i: te.sum(x[i + tuple(r)] * x[i + tuple(r)], axis=r),
                    name=f"{n}_sumsq")
    k = len(lead)
    return te.compute(x.shape, lambda *i: x[i] / te.sqrt(ss[i[:k]] * (1.0 / cnt) + eps)
                      * gamma[i[k:]], name=n)


@_op("layer_norm", Pattern.REDUCE)
def _layer_norm(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """Normalise over the trailing axes that gamma and beta span."""
    x, gamma, beta = ins
    inner, lead = _trailing(x, gamma)
    cnt, eps = math.prod(inner), float(a.get("eps", 1e-5))
    r1 = [te.reduce_axis(s, f"r{d}") for d, s in enumerate(inner)]
    r2 = [te.reduce_axis(s, f"q{d}") for d, s in enumerate(inner)]
    mu = te.compute(lead, lambda *i: te.sum(x[i + tuple(r1)], axis=r1), name=f"{n}_mean")
    var = te.compute(lead, lambda *i: te.sum(
        (x[i + tuple(r2)] - mu[i] * (1.0 / cnt)) * (x[i + tuple(r2)] - mu[i] * (1.0 / cnt)),
        axis=r2), name=f"{n}_var")
    k = len(lead)
    return te.compute(x.shape, lambda *i: (x[i] - mu[i[:k]] * (1.0 / cnt)) / te.sqrt(
        var[i[:k]] * (1.0 / cnt) + eps) * gamma[i[k:]] + beta[i[k:]], name=n)


@_op("group_norm", Pattern.REDUCE)
def _group_norm(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` (N, C, *) normalised over each of ``a["groups"]`` groups of channels and all
    the axes after them, then scaled and shifted per channel by gamma and beta, both [C]
    (``nn.GroupNorm``; ``nn.InstanceNorm2d`` is one group per channel)."""
    x, gamma, beta = ins
    g, eps = int(a["groups"]), float(a.get("eps", 1e-5))
    C, rest = x.shape[1], x.shape[2:]
    if C % g or gamma.shape != (C,) or beta.shape != (C,):
        raise ValueError(f"{C} channels in {g} groups with weights {list(gamma.shape)}, "
                         f"{list(beta.shape)}")
    cg = C // g
    cnt = cg * math.prod(rest)

    def axes(tag: str) -> list[Any]:
        return [te.reduce_axis(cg, f"{tag}c")] + [
            te.reduce_axis(s, f"{tag}{d}") for d, s in enumerate(rest)]

    r1, r2 = axes("r"), axes("q")

    def at(b: Any, grp: Any, r: list[Any]) -> Any:
        return x[(b, grp * cg + r[0], *r[1:])]
    mu = te.compute((x.shape[0], g), lambda b, j: te.sum(at(b, j, r1), axis=r1),
                    name=f"{n}_mean")
    var = te.compute((x.shape[0], g), lambda b, j: te.sum(
        (at(b, j, r2) - mu[b, j] * (1.0 / cnt)) * (at(b, j, r2) - mu[b, j] * (1.0 / cnt)),
        axis=r2), name=f"{n}_var")
    return te.compute(x.shape, lambda b, c, *s: (x[(b, c, *s)] - mu[b, c // cg] * (1.0 / cnt))
                      / te.sqrt(var[b, c // cg] * (1.0 / cnt) + eps) * gamma[c] + beta[c],
                      name=n)


def _along(t: Tensor, i: tuple[Any, ...], axis: int, pos: Any) -> Any:
    """``t`` at index ``i`` with position ``pos`` on ``axis`` in place of ``i[axis]``."""
    return t[i[:axis] + (pos,) + i[axis + 1:]]


# Axes up to this long keep the one-stage masked sum (a few thousand terms a row).
CUMSUM_DIRECT = 64


@_op("cumsum", Pattern.REDUCE)
def _cumsum(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """Running sums along ``a["axis"]``, as a blocked scan: with blocks of about the
    square root of the axis's length L, each element is the sum of its own block up to
    it plus the sums of the blocks before it. That is about L^1.5 terms a row; a masked
    sum over the whole axis (what axes up to ``CUMSUM_DIRECT`` still get) is L^2."""
    x = ins[0]
    axis = int(a["axis"]) % x.ndim
    length = x.shape[axis]

    def at(t: Tensor, i: tuple[Any, ...], pos: Any) -> Any:
        return _along(t, i, axis, pos)

    if length <= CUMSUM_DIRECT:
        r = te.reduce_axis(length, "r")
        return te.compute(x.shape, lambda *i: te.sum(
            te.if_then_else(r <= i[axis], at(x, i, r), 0.0), axis=r), name=n)
    size = math.isqrt(length - 1) + 1           # ceil(sqrt(L))
    blocks = -(-length // size)
    last = length - 1
    r, q, c = (te.reduce_axis(size, "r"), te.reduce_axis(size, "q"),
               te.reduce_axis(blocks, "c"))
    # Indices past the axis's end are masked, and clamped so that no load reads them.
    part = te.compute(x.shape, lambda *i: te.sum(te.if_then_else(
        r <= i[axis] % size, at(x, i, te.minimum(i[axis] // size * size + r, last)), 0.0),
        axis=r), name=f"{n}_part")
    bshape = x.shape[:axis] + (blocks,) + x.shape[axis + 1:]
    total = te.compute(bshape, lambda *i: te.sum(te.if_then_else(
        i[axis] * size + q <= last, at(x, i, te.minimum(i[axis] * size + q, last)), 0.0),
        axis=q), name=f"{n}_block")
    before = te.compute(bshape, lambda *i: te.sum(te.if_then_else(
        c < i[axis], at(total, i, c), 0.0), axis=c), name=f"{n}_before")
    return te.compute(x.shape, lambda *i: part[i] + at(before, i, i[axis] // size), name=n)


def _arg_extreme(combiner: Callable[..., Any]) -> Callable[[list[Tensor], dict[str, Any], str],
                                                         Tensor]:
    """argmax/argmin over ``a["axis"]`` (every axis, flattened, when None): the first
    index where the extreme is, as int32 (a max, then the least index that holds it)."""
    def compute(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
        x = ins[0]
        axis = a.get("axis")
        axes = tuple(range(x.ndim)) if axis is None else (int(axis) % x.ndim,)
        keep = bool(a.get("keepdim", False))
        ext = reduce_over(x, {"axes": axes, "keepdim": True}, combiner, f"{n}_value")
        rs = [te.reduce_axis(x.shape[d], f"r{d}") for d in axes]
        count = math.prod(x.shape[d] for d in axes)
        flat: Any = 0
        for d, r in zip(axes, rs):          # the index within the reduced axes, row-major
            flat = flat * x.shape[d] + r
        shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape)
                      if keep or d not in axes) or (1,)

        def body(*i: Any) -> Any:
            src, at = _source(x.ndim, list(axes), keep, rs, i)
            hit = te.eq(x[src], ext[at])
            return te.min(te.if_then_else(hit, flat, count), axis=rs)
        return te.compute(shape, body, name=n)
    return compute


_op("argmax", Pattern.REDUCE)(_arg_extreme(te.max))
_op("argmin", Pattern.REDUCE)(_arg_extreme(te.min))


# A top-k is k passes over its axis, each a stage: kept to small k (a classifier's top 5).
TOPK_MAX = 64


def _topk_positions(x: Tensor, axis: int, k: int, largest: bool, n: str) -> list[Tensor]:
    """For j < k, the position along ``axis`` of the j-th largest (``largest``, else
    smallest) element of each row: the extreme of the positions not taken by earlier
    stages, at the least such position on a tie (PyTorch orders equal values in no
    fixed way). Each is int32 over the other axes ((1,) for a 1-d ``x``)."""
    count = x.shape[axis]
    outer = x.shape[:axis] + x.shape[axis + 1:]
    fill = -math.inf if largest else math.inf
    comb = te.max if largest else te.min
    found: list[Tensor] = []
    for j in range(k):
        def src(i: tuple[Any, ...], r: Any) -> tuple[Any, ...]:
            return (i[:axis] + (r,) + i[axis:]) if outer else (r,)

        def free(i: tuple[Any, ...], r: Any, prev: tuple[Tensor, ...] = tuple(found)) -> Any:
            return te.all(*[te.ne(r, p[i]) for p in prev]) if prev else None

        def pick(cond: Any, a: Any, b: Any) -> Any:
            return a if cond is None else te.if_then_else(cond, a, b)
        r, q = te.reduce_axis(count, f"r{j}"), te.reduce_axis(count, f"q{j}")
        ext = te.compute(outer or (1,), lambda *i, r=r: comb(
            pick(free(i, r), x[src(i, r)], fill), axis=r), name=f"{n}_value{j}")

        def first(*i: Any, q: Any = q, ext: Tensor = ext) -> Any:
            hit = te.eq(x[src(i, q)], ext[i])
            taken = free(i, q)
            return te.min(te.if_then_else(hit if taken is None else te.all(taken, hit),
                                          q, count), axis=q)
        found.append(te.compute(outer or (1,), first, name=f"{n}_at{j}"))
    return found


def _topk(indices: bool) -> Callable[[list[Tensor], dict[str, Any], str], Tensor]:
    """``torch.topk``'s values or indices (int32) along ``a["axis"]``, sorted."""
    def compute(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
        x = ins[0]
        axis, k = int(a["axis"]) % x.ndim, int(a["k"])
        if not 0 < k <= min(TOPK_MAX, x.shape[axis]):
            raise ValueError(f"topk of k={k} along an axis of {x.shape[axis]}: k from 1 to "
                             f"{min(TOPK_MAX, x.shape[axis])} is supported")
        found = _topk_positions(x, axis, k, bool(a.get("largest", True)), n)
        shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]

        def at(*i: Any) -> Any:
            rest = (i[:axis] + i[axis + 1:]) or (0,)
            pos: Any = found[k - 1][rest]
            for j in range(k - 2, -1, -1):
                pos = te.if_then_else(te.eq(i[axis], j), found[j][rest], pos)
            return pos if indices else _along(x, i, axis, pos)
        return te.compute(shape, at, name=n)
    return compute


_op("topk", Pattern.INJECTIVE)(_topk(False))
_op("topk_indices", Pattern.INJECTIVE)(_topk(True))


# A sort here counts, for each element, the elements before it: n^2 a row.
SORT_MAX = 2048


def _sort(indices: bool) -> Callable[[list[Tensor], dict[str, Any], str], Tensor]:
    """``torch.sort``'s values or indices (int32) along ``a["axis"]``, stable (equal
    values keep their order, as ``stable=True`` gives): each element's rank is the
    count of those that come before it, and output j is the element whose rank is j."""
    def compute(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
        x = ins[0]
        axis = int(a["axis"]) % x.ndim
        count = x.shape[axis]
        if count > SORT_MAX:
            raise ValueError(f"sort along an axis of {count}: up to {SORT_MAX} is supported")
        desc = bool(a.get("descending", False))

        def at(t: Tensor, i: tuple[Any, ...], pos: Any) -> Any:
            return _along(t, i, axis, pos)
        r, q = te.reduce_axis(count, "r"), te.reduce_axis(count, "q")

        def rank(*i: Any) -> Any:
            mine, other = at(x, i, i[axis]), at(x, i, r)
            ahead = te.any(other > mine if desc else other < mine,
                           te.all(te.eq(other, mine), r < i[axis]))
            return te.sum(te.if_then_else(ahead, 1, 0), axis=r)
        ranks = te.compute(x.shape, rank, name=f"{n}_rank")
        return te.compute(x.shape, lambda *i: te.sum(te.if_then_else(
            te.eq(at(ranks, i, q), i[axis]), q if indices else at(x, i, q),
            0 if indices else 0.0), axis=q), name=n)
    return compute


_op("sort", Pattern.REDUCE)(_sort(False))
_op("sort_indices", Pattern.REDUCE)(_sort(True))
