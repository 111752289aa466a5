"""Graph operators that move and resample data: ``broadcast`` (``expand``), ``roll``,
``flip``, ``triangle`` (``tril``/``triu``), ``tile`` (``repeat``), ``pad`` (constant,
reflect, replicate, circular), ``resample``
(``interpolate``, nearest, bilinear and bicubic); and two anchors like ``conv2d``: the
transposed convolution and ``einsum``.

Every index here is integer arithmetic on the loop variables (divisions, remainders and
selects), never a table lookup: the schedule rules see the accesses as they see a
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


@_op("roll", Pattern.INJECTIVE)
def _roll(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` shifted by ``a["shifts"][d]`` along ``a["dims"][d]``, wrapping around
    (``torch.roll``; Swin's shifted windows)."""
    x = ins[0]
    shift = {d % x.ndim: int(s) % x.shape[d % x.ndim] for s, d in zip(a["shifts"], a["dims"])}
    return te.compute(x.shape, lambda *i: x[tuple(
        (v + (x.shape[d] - shift[d])) % x.shape[d] if shift.get(d) else v
        for d, v in enumerate(i))], name=n)


@_op("flip", Pattern.INJECTIVE)
def _flip(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` reversed along ``a["dims"]``."""
    x = ins[0]
    dims = {d % x.ndim for d in a["dims"]}
    return te.compute(x.shape, lambda *i: x[tuple(
        x.shape[d] - 1 - v if d in dims else v for d, v in enumerate(i))], name=n)


@_op("triangle", Pattern.ELEMWISE)
def _triangle(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """The lower (``tril``) or upper (``triu``) triangle of the last two axes from
    diagonal ``a["k"]``, zeros elsewhere."""
    x, k, upper = ins[0], int(a.get("k", 0)), bool(a["upper"])
    if x.ndim < 2:
        raise ValueError(f"a triangle of a tensor of {x.ndim} axes")

    def body(*i: Any) -> Any:
        inside = i[-1] - i[-2] >= k if upper else i[-1] - i[-2] <= k
        return te.if_then_else(inside, x[i], 0.0)
    return te.compute(x.shape, body, name=n)


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


def _padded_index(j: Any, size: int, mode: str) -> Any:
    """The source index along an axis of ``size`` of the padded position ``j`` (``j``
    below 0 or from ``size`` on lies in the padding)."""
    if mode == "reflect":       # mirrored about the edge elements, which are not repeated
        # (clamped as well, which changes nothing: the bounds check cannot see that each
        # side of the select is in range where it is taken)
        mirrored = te.if_then_else(j < 0, 0 - j,
                                   te.if_then_else(j >= size, 2 * (size - 1) - j, j))
        return te.min(te.max(mirrored, 0), size - 1)
    if mode == "replicate":
        return te.min(te.max(j, 0), size - 1)
    return (j + size) % size    # circular


@_op("pad", Pattern.INJECTIVE)
def _pad(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` with ``a["pads"][d] = (before, after)`` elements around each axis (negative
    pads crop): of ``a["value"]`` in ``mode`` "constant" (the default), else the
    edge's mirror image ("reflect"), the edge element ("replicate") or the other end
    ("circular")."""
    x, pads, value = ins[0], a["pads"], float(a.get("value", 0.0))
    mode = a.get("mode", "constant")
    if len(pads) != x.ndim:
        raise ValueError(f"{len(pads)} pads for a tensor of {x.ndim} axes")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"pad mode {mode!r}: constant, reflect, replicate and circular are "
                         "supported")
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads))
    if min(shape) < 1:
        raise ValueError(f"pads {list(pads)} leave no element of {list(x.shape)}")
    if mode != "constant" and any(max(lo, hi) > (s - 1 if mode == "reflect" else s)
                                  for s, (lo, hi) in zip(x.shape, pads)):
        raise ValueError(f"{mode} pads {list(pads)} must be under the size of each axis of "
                         f"{list(x.shape)}")

    def body(*i: Any) -> Any:
        conds, src = [], []
        for d, (lo, hi) in enumerate(pads):
            j = i[d] - lo
            if mode != "constant" and (lo > 0 or hi > 0):
                src.append(_padded_index(j, x.shape[d], mode))
                continue
            src.append(j)
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


# The cubic convolution kernel's parameter, as PyTorch's bicubic resampling takes it.
CUBIC_A = -0.75


def _cubic_taps(o: Any, size: int, out: int, corners: bool) -> list[tuple[Any, Any]]:
    """Bicubic resampling along one axis: the output index ``o``'s four (input index,
    weight) taps. Its source position ``num / den`` is not clamped at 0 (PyTorch's
    ``area_pixel_compute_source_index`` with ``cubic``); the taps at ``floor - 1`` to
    ``floor + 2`` are clamped into the axis, and weighted by the cubic convolution
    kernel (Keys, ``CUBIC_A``) at the fraction ``t``."""
    if corners:
        num, den = o * (size - 1), max(out - 1, 1)
    else:
        num, den = (o * 2 + 1) * size - out, 2 * out
    # num >= -den / 2 here, so the floor of num / den is (num + den) // den - 1 with
    # the division's operand never negative.
    i0 = (num + den) // den - 1
    t = te.float32(num - i0 * den) * (1.0 / den)
    a = CUBIC_A

    def near(x: Any) -> Any:       # |x| <= 1
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0

    def far(x: Any) -> Any:        # 1 < |x| < 2
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a

    weights = [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
    return [(te.min(te.max(i0 + (k - 1), 0), size - 1), wk) for k, wk in enumerate(weights)]


@_op("resample", Pattern.INJECTIVE)
def _resample(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``x`` (N, C, *spatial) resized to ``a["size"]``: ``mode`` "nearest" (each output
    reads ``floor(o * in / out)``, the index PyTorch's float scale gives where one size
    divides the other), "nearest-exact" (``floor((o + 0.5) * in / out)``, likewise) or
    "bilinear"/"linear" (two neighbours per axis, weights from the exact source
    position) or "bicubic" (four per axis, ``_cubic_taps``; 2-d only, as PyTorch's)."""
    x, size, mode = ins[0], tuple(int(s) for s in a["size"]), a["mode"]
    spatial = x.shape[2:]
    if len(size) != len(spatial):
        raise ValueError(f"size {list(size)} for {len(spatial)} spatial axes")
    shape = x.shape[:2] + size
    if mode in ("nearest", "nearest-exact"):
        for s, o in zip(spatial, size):
            if o % s and s % o:
                raise ValueError(f"{mode} resampling of {s} to {o}: only sizes where one "
                                 "divides the other are supported")
        # "nearest-exact" reads floor((o + 0.5) * in / out): the same index where the
        # size grows by a whole factor r, ``o * r + r // 2`` where it shrinks by one.
        half = mode == "nearest-exact"
        return te.compute(shape, lambda *i: x[i[:2] + tuple(
            o // (out // s) if out >= s else o * (s // out) + (s // out // 2 if half else 0)
            for o, s, out in zip(i[2:], spatial, size))], name=n)
    corners = bool(a.get("align_corners", False))
    if mode == "bicubic":
        if len(spatial) != 2:
            raise ValueError(f"bicubic resampling of {len(spatial)} spatial axes: only 2")

        def cubic(*i: Any) -> Any:
            rows, cols = (_cubic_taps(o, s, out, corners)
                          for o, s, out in zip(i[2:], spatial, size))
            total: Any = None
            for r, wr in rows:
                for c, wc in cols:
                    term = x[i[:2] + (r, c)] * (wr * wc)
                    total = term if total is None else total + term
            return total
        return te.compute(shape, cubic, name=n)
    if mode not in ("bilinear", "linear"):
        raise ValueError(f"mode {mode!r}: nearest, nearest-exact, linear, bilinear and "
                         "bicubic are supported")

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
    """The gradient of a strided convolution (``nn.ConvTranspose2d``), NCHW: output row
    ``y`` sums input row ``i`` times kernel row ``r`` where ``i * stride - padding + r *
    dilation = y``. The weight is laid out [C, R, S, K], flipped in R and S at import
    (``graph.from_torch``); ``output_padding`` adds rows and columns at the end.

    Without dilation, output row ``y`` meets only the kernel rows ``r = (y + padding) %
    stride + t * stride``, ``t < ceil(R / stride)``: that many taps, not R (a 2 x 2
    kernel of stride 2 is one product per channel, the others' inputs are the zeros
    between spread rows). With dilation, a convolution of stride 1 over the input
    spread ``stride`` apart."""
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
    rc = te.reduce_axis(C, "rc")
    if (dh, dw) == (1, 1):
        ty, tx = te.reduce_axis(-(-R // sh), "ty"), te.reduce_axis(-(-S // sw), "tx")

        def taps(b: Any, k: Any, y: Any, z: Any) -> Any:
            ry, rx = (y + ph) % sh + ty * sh, (z + pw) % sw + tx * sw
            iy, ix = (y + ph) // sh - ty, (z + pw) // sw - tx
            conds = [iy >= 0, ix >= 0, iy < H, ix < W]
            conds += [ry < R] if R % sh else []
            conds += [rx < S] if S % sw else []
            return te.sum(te.if_then_else(te.all(*conds), x[b, rc, iy, ix] * w[
                rc, R - 1 - ry, S - 1 - rx, k], 0.0), axis=[rc, ty, tx])
        return te.compute((N, K, OH, OW), taps, name=n)
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
    ry, rx = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    return te.compute((N, K, OH, OW), lambda b, k, y, z: te.sum(
        xs[b, rc, y + ry * dh, z + rx * dw] * w[rc, ry, rx, k], axis=[rc, ry, rx]), name=n)


@_op("einsum", Pattern.ANCHOR)
def _einsum(ins: list[Tensor], a: dict[str, Any], n: str) -> Tensor:
    """``torch.einsum`` of one or more tensors: ``a["equation"]`` like "bij,bjk->bik",
    letters only, the letters missing from the output summed over. An axis of 1 may
    meet a longer one of the same letter (broadcast)."""
    eq = a["equation"].replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if "." in eq or len(terms) != len(ins) or not all(t.isalpha() for t in terms):
        raise ValueError(f"einsum {a['equation']!r} of {len(ins)} tensors: one term of "
                         "letters per tensor is supported (no ...)")
    size: dict[str, int] = {}
    for t, x in zip(terms, ins):
        if len(t) != x.ndim:
            raise ValueError(f"term {t!r} for a tensor of {x.ndim} axes")
        for c, s in zip(t, x.shape):
            if size.get(c, 1) not in (1, s) and s != 1:
                raise ValueError(f"letter {c!r} is {size[c]} and {s} long")
            size[c] = max(size.get(c, 1), s)
    if not arrow:          # the implicit output: the letters seen once, in order
        out = "".join(sorted(c for c in size if lhs.count(c) == 1))
    summed = [c for c in size if c not in out]
    rs = {c: te.reduce_axis(size[c], f"r{c}") for c in summed}

    def body(*i: Any) -> Any:
        at = {**dict(zip(out, i)), **rs}
        prod: Any = None
        for t, x in zip(terms, ins):
            v = x[tuple(0 if s == 1 and size[c] != 1 else at[c] for c, s in zip(t, x.shape))]
            prod = v if prod is None else prod * v
        return te.sum(prod, axis=list(rs.values())) if rs else prod
    return te.compute(tuple(size[c] for c in out), body, name=n)
