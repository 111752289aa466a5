"""The torch functions and modules ``from_torch`` imports beyond ``torch_functions``'
core: the 1-d and transposed convolutions, 1-d and adaptive max pooling, group and
instance norm, ``pad`` and the pad modules, ``interpolate``/``nn.Upsample``, ``prelu``,
``normalize``, ``cumsum``, more element-wise math (attention is ``torch_attention``'s, the
moving of data ``torch_shapes``'). Each is written
with the graph's ops (``graph.ops``, ``graph.layout_ops``), so it fuses and tunes like
the rest.

Example:
    >>> sorted(LAYER_FUNCS)[:3]
    ['adaptive_max_pool2d', 'avg_pool1d', 'ceil']
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .ir import GraphError
from .torch_attention import multihead, sdpa
from .torch_functions import TensorRef, _kw, _unary, axis_slice, to_numpy
from .torch_rnn import recurrent
from .torch_shapes import shuffle

if TYPE_CHECKING:
    from .from_torch import _Importer as Importer

Handler = Callable[["Importer", list[Any], dict[str, Any], str], Any]


def _prelu(s: Importer, x: Any, weight: Any, w: str) -> Any:
    """max(x, 0) + a min(x, 0), ``a`` one slope or one per channel (axis 1)."""
    slope = to_numpy(weight).reshape(-1)
    if slope.size == 1:
        return s.op("leaky_relu", [s.tensor(x, w)], w, slope=float(slope[0]))
    trail = (1,) * (len(s.shape(x)) - 2)
    neg = s.op("relu", [s.op("neg", [s.tensor(x, w)], w).name], w)
    scaled = s.binary("mul", neg, s.torch.from_numpy(slope.reshape(-1, *trail)), w)
    return s.binary("sub", s.op("relu", [s.tensor(x, w)], w), scaled, w)


def _normalize(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> Any:
    p, dim = float(s.arg(_kw(a, k, 1, "p", 2.0))), int(s.arg(_kw(a, k, 2, "dim", 1)))
    eps = float(s.arg(_kw(a, k, 3, "eps", 1e-12)))
    if p != 2.0:
        raise GraphError(f"{w}: normalize with p={p} is not supported (p=2 is)")
    sq = s.op("square", [s.tensor(a[0], w)], w)
    norm = s.op("sqrt", [s.op("sum", [sq.name], w, axes=(dim,), keepdim=True).name], w)
    floor = s.op("clip", [norm.name], w, lo=eps, hi=3.4028234e38)
    return s.binary("div", a[0], floor, w)


def _pad(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    pads, mode = [int(p) for p in s.arg(a[1])], s.arg(_kw(a, k, 2, "mode", "constant"))
    value = s.arg(_kw(a, k, 3, "value", None))
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise GraphError(f"{w}: pad mode {mode!r} is not supported (constant, reflect, "
                         "replicate and circular are)")
    nd = len(s.shape(a[0]))
    pairs = [(0, 0)] * nd
    for j in range(len(pads) // 2):          # (left, right) of the last axis first
        pairs[nd - 1 - j] = (pads[2 * j], pads[2 * j + 1])
    return s.op("pad", [s.tensor(a[0], w)], w, pads=tuple(pairs), mode=mode,
                value=0.0 if value is None else float(value))


def _one(v: Any) -> int:
    """A 1-d layer's size argument, an int or a 1-tuple."""
    return int(v[0] if isinstance(v, (list, tuple)) else v)


def _pool1d(op: str) -> Handler:
    """max_pool1d/avg_pool1d as the 2-d pool over rows of 1."""
    def handle(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
        n, c, length = s.shape(a[0])
        kernel = _one(s.arg(_kw(a, k, 1, "kernel_size", 1)))
        stride = s.arg(_kw(a, k, 2, "stride", None))
        at = 4 if op == "avg_pool2d" else 5        # where ceil_mode is in each signature
        extra: dict[str, Any] = {"ceil_mode": bool(s.arg(_kw(a, k, at, "ceil_mode", False)))}
        if op == "avg_pool2d":
            extra["count_include_pad"] = bool(s.arg(_kw(a, k, 5, "count_include_pad", True)))
        else:
            extra["dilation"] = (1, _one(s.arg(_kw(a, k, 4, "dilation", 1))))
        y = s.pool(op, s.reshape(a[0], (n, c, 1, length), w), (1, kernel),
                   (1, kernel if stride is None or stride == [] else _one(stride)),
                   (0, _one(s.arg(_kw(a, k, 3, "padding", 0)))), w, **extra)
        return s.reshape(y, (n, c, s.shape(y)[3]), w)
    return handle


def _arg(s: Importer, op: str, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    """argmax/argmin over ``dim`` (the flattened tensor when None)."""
    dim = s.arg(_kw(a, k, 1, "dim", None))
    return s.op(op, [s.tensor(a[0], w)], w, axis=None if dim is None else int(dim),
                keepdim=bool(s.arg(_kw(a, k, 2, "keepdim", False))))


def _adaptive_max(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    if s.arg(_kw(a, k, 2, "return_indices", False)):
        raise GraphError(f"{w}: adaptive max pooling with return_indices is not supported")
    return s.adaptive(a[0], s.arg(a[1]), w, "max_pool2d")


def _interpolate(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    mode = s.arg(_kw(a, k, 3, "mode", "nearest"))
    corners = s.arg(_kw(a, k, 4, "align_corners", None))
    factor = s.arg(_kw(a, k, 2, "scale_factor", None))
    if s.arg(_kw(a, k, 6, "antialias", False)):
        raise GraphError(f"{w}: interpolate with antialias is not supported")
    shape, out = s.shape(a[0]), tuple(s.values[s.current].shape)
    if factor is not None and not s.arg(_kw(a, k, 5, "recompute_scale_factor", None)):
        # PyTorch then scales by 1 / factor, which is in / out only where it is exact.
        fs = factor if isinstance(factor, (list, tuple)) else [factor] * (len(shape) - 2)
        if any(i * f != o for i, f, o in zip(shape[2:], fs, out[2:])):
            raise GraphError(f"{w}: interpolate by scale_factor={factor} of {list(shape)} "
                             "does not give whole sizes; pass size= instead")
    return s.op("resample", [s.tensor(a[0], w)], w, size=out[2:], mode=mode,
                align_corners=bool(corners))


def conv1d(s: Importer, x: Any, weight: Any, bias: Any, stride: Any, padding: Any,
           dilation: Any, groups: int, w: str) -> TensorRef:
    """A 1-d convolution as a 2-d one over rows of 1."""
    if isinstance(padding, str):
        raise GraphError(f"{w}: padding={padding!r} is not supported; give ints")
    (n, c, length), wt = s.shape(x), to_numpy(weight)
    rows = s.reshape(x, (n, c, 1, length), w)
    y = s.conv_arrays(rows, wt[:, :, None, :], None if bias is None else to_numpy(bias),
                      (1, _one(stride)), (0, _one(padding)), (1, _one(dilation)), groups, w)
    ys = s.shape(y)
    return s.reshape(y, (ys[0], ys[1], ys[3]), w)


def conv_transpose2d(s: Importer, x: Any, weight: Any, bias: Any, stride: Any, padding: Any,
                     output_padding: Any, groups: int, dilation: Any, w: str) -> TensorRef:
    """A transposed convolution; with groups, one per group of input channels (its rows
    of PyTorch's [C, K / groups, R, S] weight), their outputs concatenated."""
    from .from_torch import _pair

    wts = weight if isinstance(weight, np.ndarray) else to_numpy(weight)
    attrs = {"stride": _pair(stride), "padding": _pair(padding),
             "dilation": _pair(dilation), "output_padding": _pair(output_padding)}
    # PyTorch's [C, K, R, S] as the convolution's [C, R, S, K], flipped in R and S.
    parts = []
    per, xin = wts.shape[0] // groups, TensorRef(s.tensor(x, w))
    for g in range(groups):
        xg = xin if groups == 1 else axis_slice(s, xin, 1, g * per, per, w)
        wt = np.ascontiguousarray(wts[g * per:(g + 1) * per].transpose(0, 2, 3, 1)[:, ::-1, ::-1])
        parts.append(s.op("conv_transpose2d", [s.tensor(xg, w), s.g.const("w", wt)], w,
                          **attrs).name)
    y = TensorRef(parts[0]) if groups == 1 else s.op("concat", parts, w, axis=1)
    if bias is None:
        return y
    return s.op("add", [y.name, s.g.const("b", to_numpy(bias).reshape(-1, 1, 1))], w)


def conv_transpose1d(s: Importer, x: Any, weight: Any, bias: Any, stride: Any, padding: Any,
                     output_padding: Any, groups: int, dilation: Any, w: str) -> TensorRef:
    """A 1-d transposed convolution as a 2-d one over rows of 1."""
    n, c, length = s.shape(x)
    rows = s.reshape(x, (n, c, 1, length), w)
    y = conv_transpose2d(s, rows, to_numpy(weight)[:, :, None, :], bias, (1, _one(stride)),
                         (0, _one(padding)), (0, _one(output_padding)), groups,
                         (1, _one(dilation)), w)
    ys = s.shape(y)
    return s.reshape(y, (ys[0], ys[1], ys[3]), w)


def group_norm(s: Importer, x: Any, groups: int, weight: Any, bias: Any, eps: float,
               w: str) -> TensorRef:
    c = s.shape(x)[1]
    gamma = to_numpy(weight) if weight is not None else np.ones(c, "float32")
    beta = to_numpy(bias) if bias is not None else np.zeros(c, "float32")
    return s.op("group_norm", [s.tensor(x, w), s.g.const("gamma", gamma),
                               s.g.const("beta", beta)], w, groups=int(groups), eps=float(eps))


def as_root(torch: Any, module: Any) -> Any:
    """``module`` itself, or, for one of torch.nn's own layers, a module that calls it on
    one input: torch.fx traces the root's forward (a layer's has checks on the input's
    shape that cannot be traced) and keeps torch.nn's layers below the root whole."""
    if not type(module).__module__.startswith("torch.nn.modules") or isinstance(
            module, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)):
        return module
    required = [p for p in inspect.signature(module.forward).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
    if len(required) != 1:       # a layer of several inputs (attention): traced as it is
        return module

    class Root(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = module

        def forward(self, x: Any) -> Any:     # fx cannot trace ``*xs``
            return self.layer(x)
    return Root()


def layer_module(s: Importer, n: Any, m: Any, w: str) -> Any:
    """The graph value of the modules this file imports, or None for another module."""
    nn, x = s.torch.nn, n.args[0] if n.args else None
    if isinstance(m, nn.Conv1d):
        padding = m.padding
        if m.padding_mode != "zeros":
            x = _pad(s, [x, (m.padding[0],) * 2, m.padding_mode], {}, w)
            padding = 0
        return conv1d(s, x, m.weight, m.bias, m.stride, padding, m.dilation, m.groups, w)
    if isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
        if n.args[1:] or n.kwargs.get("output_size") is not None:
            raise GraphError(f"{w}: {type(m).__name__} with output_size is not supported")
        fn = conv_transpose1d if isinstance(m, nn.ConvTranspose1d) else conv_transpose2d
        return fn(s, x, m.weight, m.bias, m.stride, m.padding, m.output_padding, m.groups,
                  m.dilation, w)
    if isinstance(m, nn.GroupNorm):
        return group_norm(s, x, m.num_groups, m.weight if m.affine else None,
                          m.bias if m.affine else None, m.eps, w)
    if isinstance(m, (nn.InstanceNorm1d, nn.InstanceNorm2d)):
        if m.track_running_stats:
            return s.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, m.eps, w)
        return group_norm(s, x, s.shape(x)[1], m.weight, m.bias, m.eps, w)
    if isinstance(m, nn.Upsample):
        return _interpolate(s, [x], {"scale_factor": m.scale_factor, "mode": m.mode,
                                     "align_corners": m.align_corners,
                                     "recompute_scale_factor": m.recompute_scale_factor}, w)
    if isinstance(m, nn.PReLU):
        return _prelu(s, x, m.weight, w)
    if isinstance(m, nn.Mish):
        return s.op("mish", [s.tensor(x, w)], w)
    if isinstance(m, nn.MultiheadAttention):
        return multihead(s, n, m, w)
    if isinstance(m, (nn.LSTM, nn.GRU, nn.RNN)):
        return recurrent(s, n, m, w)
    if isinstance(m, nn.PixelShuffle):
        return shuffle(s, x, m.upscale_factor, False, w)
    if isinstance(m, nn.PixelUnshuffle):
        return shuffle(s, x, m.downscale_factor, True, w)
    if isinstance(m, (nn.MaxPool1d, nn.AvgPool1d)):
        op = "max_pool2d" if isinstance(m, nn.MaxPool1d) else "avg_pool2d"
        kw = {"ceil_mode": m.ceil_mode}
        kw.update({"dilation": m.dilation} if op == "max_pool2d" else
                  {"count_include_pad": m.count_include_pad})
        return _pool1d(op)(s, [x, m.kernel_size, m.stride, m.padding], kw, w)
    if isinstance(m, nn.AdaptiveMaxPool2d):
        return _adaptive_max(s, [x, m.output_size, m.return_indices], {}, w)
    pads = {nn.ReflectionPad1d: "reflect", nn.ReflectionPad2d: "reflect",
            nn.ReplicationPad1d: "replicate", nn.ReplicationPad2d: "replicate",
            nn.ZeroPad2d: "constant", nn.ConstantPad1d: "constant", nn.ConstantPad2d: "constant"}
    for kind, mode in pads.items():
        if isinstance(m, kind):
            return _pad(s, [x, m.padding, mode, getattr(m, "value", 0.0)], {}, w)
    return None


def _conv_transpose(fn: Callable[..., TensorRef], s: Importer, a: list[Any],
                    k: dict[str, Any], w: str) -> TensorRef:
    return fn(s, a[0], s.arg(_kw(a, k, 1, "weight", None)), s.arg(_kw(a, k, 2, "bias", None)),
              s.arg(_kw(a, k, 3, "stride", 1)), s.arg(_kw(a, k, 4, "padding", 0)),
              s.arg(_kw(a, k, 5, "output_padding", 0)), int(_kw(a, k, 6, "groups", 1)),
              s.arg(_kw(a, k, 7, "dilation", 1)), w)


LAYER_FUNCS: dict[str, Handler] = {
    "sin": _unary("sin"), "cos": _unary("cos"), "floor": _unary("floor"),
    "ceil": _unary("ceil"), "sign": _unary("sign"), "mish": _unary("mish"),
    "prelu": lambda s, a, k, w: _prelu(s, a[0], s.arg(_kw(a, k, 1, "weight", None)), w),
    "normalize": _normalize, "pad": _pad, "interpolate": _interpolate,
    "conv1d": lambda s, a, k, w: conv1d(
        s, a[0], s.arg(_kw(a, k, 1, "weight", None)), s.arg(_kw(a, k, 2, "bias", None)),
        s.arg(_kw(a, k, 3, "stride", 1)), s.arg(_kw(a, k, 4, "padding", 0)),
        s.arg(_kw(a, k, 5, "dilation", 1)), int(_kw(a, k, 6, "groups", 1)), w),
    "conv_transpose2d": lambda s, a, k, w: _conv_transpose(conv_transpose2d, s, a, k, w),
    "conv_transpose1d": lambda s, a, k, w: _conv_transpose(conv_transpose1d, s, a, k, w),
    "group_norm": lambda s, a, k, w: group_norm(
        s, a[0], int(s.arg(_kw(a, k, 1, "num_groups", 1))), s.arg(_kw(a, k, 2, "weight", None)),
        s.arg(_kw(a, k, 3, "bias", None)), float(s.arg(_kw(a, k, 4, "eps", 1e-5))), w),
    "scaled_dot_product_attention": sdpa,
    "max_pool1d": _pool1d("max_pool2d"), "avg_pool1d": _pool1d("avg_pool2d"),
    "adaptive_max_pool2d": _adaptive_max,
    "cumsum": lambda s, a, k, w: s.op("cumsum", [s.tensor(a[0], w)], w,
                                      axis=int(s.arg(_kw(a, k, 1, "dim", 0)))),
    "argmax": lambda s, a, k, w: _arg(s, "argmax", a, k, w),
    "argmin": lambda s, a, k, w: _arg(s, "argmin", a, k, w),
}
