"""Graph operators that move and resample data: ``broadcast`` (``expand``), ``tile``
(``repeat``), ``pad`` with a constant, ``resample`` (``interpolate``, nearest and
bilinear), and the transposed convolution, an anchor like ``conv2d``.

Every index here is integer arithmetic on the loop variables (divisions and remainders by
constants), never a table lookup: the schedule rules see the accesses as they see a
convolution's, and a resample or pad fuses into the kernel that reads it.

Example:
    >>> x = te.placeholder((1, 4, 5, 5), name="x")
    >>> OPS["resample"].compute([x], {"size": (10, 10), "mode": "nearest"}, "up").shape
    (1, 4, 10, 10)
"""

from __future__ import annotations

from typing import Any

from .. import te
from ..te.tensor import Tensor
from .ops import Pattern, _bcast, _op


@_op("broadcast", Pattern.BROADCAST)
def _broadcast(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` read at every index of ``a["shape"]`` (``expand``, ``broadcast_to``)."""
    x, shape = ins[0], tuple(int(s) for s in a["shape"])
    lead = len(shape) - x.ndim
    if lead < 0 or any(s not in (1, shape[lead + d]) for d, s in enumerate(x.shape)):
        raise ValueError(f"cannot broadcast {list(x.shape)} to {list(shape)}")
    return te.compute(shape, lambda *i: _bcast(x, i, shape), name=n)


@_op("tile", Pattern.INJECTIVE)
def _tile(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` repeated ``a["reps"][d]`` times along each axis (``repeat``); more reps than
    axes add leading ones."""
    x, reps = ins[0], tuple(int(r) for r in a["reps"])
    if len(reps) < x.ndim or min(reps) < 1:
        raise ValueError(f"reps {list(reps)} for a tensor of {x.ndim} axes")
    lead = len(reps) - x.ndim
    shape = reps[:lead] + tuple(s * r for s, r in zip(x.shape, reps[lead:]))
    return te.compute(shape, lambda *i: x[tuple(
        i[lead + d] % s if r > 1 else i[lead + d]
        for d, (s, r) in enumerate(zip(x.shape, reps[lead:])))], name=n)


@_op("pad", Pattern.INJECTIVE)
def _pad(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` with ``a["pads"][d] = (before, after)`` elements of ``a["value"]`` around
    each axis (negative pads crop)."""
    x, pads, value = ins[0], a["pads"], float(a.get("value", 0.0))
    if len(pads) != x.ndim:
        raise ValueError(f"{len(pads)} pads for a tensor of {x.ndim} axes")
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads))
    if min(shape) < 1:
        raise ValueError(f"pads {list(pads)} leave no element of {list(x.shape)}")

    def body(*i: Any) -> Any:
        conds, src = [], []
        for d, (lo, hi) in enumerate(pads):
            src.append(i[d] - lo)
            if lo > 0:
                conds.append(i[d] >= lo)
            if hi > 0:
                conds.append(i[d] < x.shape[d] + lo)
        v = x[tuple(src)]
        return te.if_then_else(te.all(*conds), v, value) if conds else v
    return te.compute(shape, body, name=n)


def _source(o: Any, size: int, out: int, corners: bool) -> tuple[Any, Any, Any]:
    """Bilinear resampling along one axis as exact rationals: the output index ``o``'s
    source ``(num / den)``, clamped at 0, as the left neighbour ``i0``, the right one
    ``i1`` and the right one's weight (PyTorch's ``area_pixel_compute_source_index`` with
    the scale ``size / out``, or ``(size - 1) / (out - 1)`` with aligned corners)."""
    if corners:
        num, den = o * (size - 1), max(out - 1, 1)
    else:
        num, den = te.max((o * 2 + 1) * size - out, 0), 2 * out
    i0 = num // den
    i1 = te.min(i0 + 1, size - 1)
    w1 = te.float32(num - i0 * den) * (1.0 / den)
    return i0, i1, w1


@_op("resample", Pattern.INJECTIVE)
def _resample(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` (N, C, *spatial) resized to ``a["size"]``: ``mode`` "nearest" (each output
    reads ``floor(o * in / out)``, the index PyTorch's float scale gives where one size
    divides the other) or "bilinear"/"linear" (two neighbours per axis, weights from
    the exact source position)."""
    x, size, mode = ins[0], tuple(int(s) for s in a["size"]), a["mode"]
    spatial = x.shape[2:]
    if len(size) != len(spatial):
        raise ValueError(f"size {list(size)} for {len(spatial)} spatial axes")
    shape = x.shape[:2] + size
    if mode == "nearest":
        for s, o in zip(spatial, size):
            if o % s and s % o:
                raise ValueError(f"nearest resampling of {s} to {o}: only sizes where one "
                                 "divides the other are supported")
        return te.compute(shape, lambda *i: x[i[:2] + tuple(
            o // (out // s) if out >= s else o * (s // out)
            for o, s, out in zip(i[2:], spatial, size))], name=n)
    if mode not in ("bilinear", "linear"):
        raise ValueError(f"mode {mode!r}: nearest, linear and bilinear are supported")
    corners = bool(a.get("align_corners", False))

    def body(*i: Any) -> Any:
        taps = [_source(o, s, out, corners) for o, s, out in zip(i[2:], spatial, size)]
        total: Any = None
        for pick in range(1 << len(taps)):       # every corner of the cell
            idx: list[Any] = []
            w: Any = None
            for d, (i0, i1, w1) in enumerate(taps):
                right = pick >> d & 1
                idx.append(i1 if right else i0)
                wd = w1 if right else 1.0 - w1
                w = wd if w is None else w * wd
            term = x[i[:2] + tuple(idx)] * w
            total = term if total is None else total + term
        return total
    return te.compute(shape, body, name=n)


@_op("conv_transpose2d", Pattern.ANCHOR)
def _conv_transpose2d(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """The gradient of a strided convolution (``nn.ConvTranspose2d``), NCHW, as a
    convolution of stride 1 over the input spread ``stride`` apart with zeros between
    and ``dilation * (R - 1) - padding`` zeros around; the weight is laid out
    [C, R, S, K], flipped at import (``graph.from_torch``). ``output_padding`` adds
    rows and columns at the end."""
    x, w = ins
    (sh, sw), (ph, pw) = a["stride"], a["padding"]
    (dh, dw), (oph, opw) = a.get("dilation", (1, 1)), a.get("output_padding", (0, 0))
    N, C, H, W = x.shape
    wc, R, S, K = w.shape
    if wc != C:
        raise ValueError(f"{C} input channels but the weight is {list(w.shape)}")
    OH = (H - 1) * sh - 2 * ph + dh * (R - 1) + oph + 1
    OW = (W - 1) * sw - 2 * pw + dw * (S - 1) + opw + 1
    eh, ew = dh * (R - 1) - ph, dw * (S - 1) - pw     # zeros before the first input
    if eh < 0 or ew < 0:
        raise ValueError(f"padding {a['padding']} over dilation * (kernel - 1) is not "
                         "supported")
    SH, SW = OH + dh * (R - 1), OW + dw * (S - 1)

    def spread(b: Any, c: Any, y: Any, z: Any) -> Any:
        yy, zz = y - eh, z - ew
        conds = [yy >= 0, zz >= 0, yy < (H - 1) * sh + 1, zz < (W - 1) * sw + 1]
        if sh > 1:
            conds.append(yy % sh == 0)
        if sw > 1:
            conds.append(zz % sw == 0)
        return te.if_then_else(te.all(*conds), x[b, c, yy // sh if sh > 1 else yy,
                                                 zz // sw if sw > 1 else zz], 0.0)
    xs = te.compute((N, C, SH, SW), spread, name=f"{n}_spread")
    rc, ry, rx = te.reduce_axis(C, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    return te.compute((N, K, OH, OW), lambda b, k, y, z: te.sum(
        xs[b, rc, y + ry * dh, z + rx * dw] * w[rc, ry, rx, k], axis=[rc, ry, rx]), name=n)
