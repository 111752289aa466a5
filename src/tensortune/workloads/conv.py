"""Convolution workloads of the suite (NCHW, weights OIHW): C1D, C2D, C3D, GRP, DIL, DEP,
T2D and CONVLAYER. Padding is an explicit stage, so schedules can inline or place it.

Example:
    >>> func = conv2d(1, 8, 8, 10, 10, 3, pad=1)
"""

from __future__ import annotations

from .. import te
from ..te.tensor import Tensor
from ..tir.stmt import PrimFunc


def pad(x: Tensor, pads: tuple[int, ...], name: str = "pad") -> Tensor:
    """Zero-pad the trailing len(pads) axes of x by pads[d] on both sides."""
    lead = x.ndim - len(pads)
    shape = list(x.shape[:lead]) + [n + 2 * p for n, p in zip(x.shape[lead:], pads)]

    def f(*idx):
        conds, src = [], list(idx[:lead])
        for d, p in enumerate(pads):
            i = idx[lead + d]
            if p:
                conds += [i >= p, i < x.shape[lead + d] + p]
            src.append(i - p)
        if not conds:
            return x[tuple(src)]
        return te.if_then_else(te.all(*conds), x[tuple(src)], 0.0)

    import inspect

    params = [inspect.Parameter(f"i{d}", inspect.Parameter.POSITIONAL_ONLY)
              for d in range(x.ndim)]
    f.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return te.compute(shape, f, name=name)


def conv2d(N: int = 1, C: int = 64, K: int = 64, H: int = 56, W: int = 56, R: int = 3,
           stride: int = 1, pad: int | None = None, dilation: int = 1, groups: int = 1,
           relu: bool = True, name: str = "c2d") -> PrimFunc:
    """relu(conv2d(x, w)) (relu optional); grouped and dilated variants by arguments."""
    p = pad if pad is not None else (R // 2) * dilation
    x = te.placeholder((N, C, H, W), name="x")
    w = te.placeholder((K, C // groups, R, R), name="w")
    xp = _pad(x, (p, p))
    OH = (H + 2 * p - dilation * (R - 1) - 1) // stride + 1
    OW = (W + 2 * p - dilation * (R - 1) - 1) // stride + 1
    cg, kg = C // groups, K // groups
    rc = te.reduce_axis(cg, name="rc")
    ry = te.reduce_axis(R, name="ry")
    rx = te.reduce_axis(R, name="rx")
    conv = te.compute(
        (N, K, OH, OW),
        lambda n, k, y, z: te.sum(
            xp[n, k // kg * cg + rc, y * stride + ry * dilation, z * stride + rx * dilation]
            * w[k, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv")
    if not relu:
        return te.create_func([x, w, conv], name=name)
    out = te.compute(conv.shape, lambda n, k, y, z: te.relu(conv[n, k, y, z]), name="relu")
    return te.create_func([x, w, out], name=name)


def _pad(x: Tensor, pads: tuple[int, ...]) -> Tensor:
    return pad(x, pads, name="pad")


def depthwise(N: int = 1, C: int = 128, H: int = 56, W: int = 56, R: int = 3,
              p: int = 1) -> PrimFunc:
    """Depthwise conv2d: one RxR filter per channel."""
    x = te.placeholder((N, C, H, W), name="x")
    w = te.placeholder((C, 1, R, R), name="w")
    xp = _pad(x, (p, p))
    ry = te.reduce_axis(R, name="ry")
    rx = te.reduce_axis(R, name="rx")
    out = te.compute((N, C, H + 2 * p - R + 1, W + 2 * p - R + 1),
                     lambda n, c, y, z: te.sum(xp[n, c, y + ry, z + rx] * w[c, 0, ry, rx],
                                               axis=[ry, rx]), name="conv")
    return te.create_func([x, w, out], name="dep")


def conv1d(N: int = 1, C: int = 64, K: int = 128, L: int = 256, R: int = 3,
           p: int = 1) -> PrimFunc:
    x = te.placeholder((N, C, L), name="x")
    w = te.placeholder((K, C, R), name="w")
    xp = _pad(x, (p,))
    rc = te.reduce_axis(C, name="rc")
    rx = te.reduce_axis(R, name="rx")
    out = te.compute((N, K, L + 2 * p - R + 1),
                     lambda n, k, z: te.sum(xp[n, rc, z + rx] * w[k, rc, rx], axis=[rc, rx]),
                     name="conv")
    return te.create_func([x, w, out], name="c1d")


def conv3d(N: int = 1, C: int = 16, K: int = 32, D: int = 8, H: int = 28, W: int = 28,
           R: int = 3, p: int = 1) -> PrimFunc:
    x = te.placeholder((N, C, D, H, W), name="x")
    w = te.placeholder((K, C, R, R, R), name="w")
    xp = _pad(x, (p, p, p))
    rc = te.reduce_axis(C, name="rc")
    rd = te.reduce_axis(R, name="rd")
    ry = te.reduce_axis(R, name="ry")
    rx = te.reduce_axis(R, name="rx")
    out = te.compute(
        (N, K, D + 2 * p - R + 1, H + 2 * p - R + 1, W + 2 * p - R + 1),
        lambda n, k, d, y, z: te.sum(xp[n, rc, d + rd, y + ry, z + rx] * w[k, rc, rd, ry, rx],
                                     axis=[rc, rd, ry, rx]), name="conv")
    return te.create_func([x, w, out], name="c3d")


def conv2d_transpose(N: int = 1, C: int = 64, K: int = 32, H: int = 28, W: int = 28,
                     R: int = 4, stride: int = 2, p: int = 1) -> PrimFunc:
    """Transposed conv2d, weights [C_in, C_out, R, R] as in PyTorch: zero-insert the input
    by ``stride``, pad by R-1-p, and correlate with the flipped kernel."""
    x = te.placeholder((N, C, H, W), name="x")
    w = te.placeholder((C, K, R, R), name="w")
    q = R - 1 - p
    DH, DW = (H - 1) * stride + 1 + 2 * q, (W - 1) * stride + 1 + 2 * q
    xd = te.compute(
        (N, C, DH, DW),
        lambda n, c, y, z: te.if_then_else(
            te.all(y >= q, y < DH - q, z >= q, z < DW - q,
                   (y - q) % stride == 0, (z - q) % stride == 0),
            x[n, c, (y - q) // stride, (z - q) // stride], 0.0),
        name="dilate_pad")
    rc = te.reduce_axis(C, name="rc")
    ry = te.reduce_axis(R, name="ry")
    rx = te.reduce_axis(R, name="rx")
    out = te.compute(
        (N, K, DH - R + 1, DW - R + 1),
        lambda n, k, y, z: te.sum(xd[n, rc, y + ry, z + rx] * w[rc, k, R - 1 - ry, R - 1 - rx],
                                  axis=[rc, ry, rx]), name="conv")
    return te.create_func([x, w, out], name="t2d")


def conv_layer(N: int = 1, C: int = 128, K: int = 128, H: int = 28, W: int = 28,
               R: int = 3, p: int = 1) -> PrimFunc:
    """relu(conv2d(x, w) * scale[k] + shift[k]): a conv with folded batch norm."""
    x = te.placeholder((N, C, H, W), name="x")
    w = te.placeholder((K, C, R, R), name="w")
    scale = te.placeholder((K,), name="scale")
    shift = te.placeholder((K,), name="shift")
    xp = _pad(x, (p, p))
    rc = te.reduce_axis(C, name="rc")
    ry = te.reduce_axis(R, name="ry")
    rx = te.reduce_axis(R, name="rx")
    conv = te.compute((N, K, H + 2 * p - R + 1, W + 2 * p - R + 1),
                      lambda n, k, y, z: te.sum(xp[n, rc, y + ry, z + rx] * w[k, rc, ry, rx],
                                                axis=[rc, ry, rx]), name="conv")
    out = te.compute(conv.shape, lambda n, k, y, z: te.relu(conv[n, k, y, z] * scale[k]
                                                            + shift[k]), name="out")
    return te.create_func([x, w, scale, shift, out], name="convlayer")
