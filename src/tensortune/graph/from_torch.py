"""Import a PyTorch module into the graph IR through torch.fx.

The module is traced symbolically, then run once on the example inputs so that every
non-tensor value (``x.size(0)``, a shape tuple) is known: tensortune compiles for static
shapes. Batch norm is folded into the convolution before it when it is that
convolution's only reader (inference), else it becomes a per-channel multiply-add.
PyTorch is an optional extra; only this module imports it.

Example:
    >>> graph = from_torch(model.eval(), torch.randn(1, 3, 32, 32))
    >>> print(graph)
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .ir import Graph, GraphError
from .torch_functions import FUNCS, SPLITS, TensorRef, Unsupported, to_numpy
from .torch_layers import LAYER_FUNCS, as_root, layer_module
from .torch_shapes import SHAPE_FUNCS, SHAPE_SPLITS

HANDLERS = {**FUNCS, **SHAPE_FUNCS, **LAYER_FUNCS}
# Functions that may return several tensors; ``getitem`` too, on a nested result
# (``lstm(x)[1]`` is the pair ``(h_n, c_n)``).
MANY = {**SPLITS, **SHAPE_SPLITS, "getitem": FUNCS["getitem"]}

# Drawn at random, so never folded: these whole names, their ``_``/``_like`` forms, dropouts.
_RANDOM = ("rand", "randn", "randint", "randperm", "random", "normal", "bernoulli", "uniform",
           "multinomial", "exponential", "geometric", "cauchy", "log_normal", "poisson", "rrelu")
# Functions whose values depend on their input's shape alone.
_SHAPE_ONLY = ("zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full")


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


class _Importer:
    def __init__(self, module: Any, examples: tuple[Any, ...]) -> None:
        import torch
        import torch.fx

        self.torch = torch
        try:
            self.gm = torch.fx.symbolic_trace(as_root(torch, module))
        except Exception as e:  # fx raises many kinds; all mean "cannot trace this"
            raise GraphError(f"torch.fx could not trace {type(module).__name__}: {e}; "
                             "control flow on tensor values cannot be traced") from e
        self.values: dict[str, Any] = {}
        interp = torch.fx.Interpreter(self.gm)
        run_node = interp.run_node

        def record(n: Any) -> Any:
            out = run_node(n)
            self.values[n.name] = out
            return out
        interp.run_node = record  # type: ignore[method-assign]
        with torch.no_grad():
            interp.run(*examples)
        self.g = Graph()
        self.env: dict[str, Any] = {}
        self.current = ""
        self.consts: dict[int, tuple[Any, str]] = {}   # id -> (tensor kept alive, node)
        self.transposed: dict[int, tuple[Any, str]] = {}   # the same, of a weight's .T
        self.modules = dict(self.gm.named_modules())
        self.folded: dict[str, Any] = {}   # conv node name -> the batch norm folded into it
        self._find_folds()

    def _find_folds(self) -> None:
        nn = self.torch.nn
        for n in self.gm.graph.nodes:
            if n.op != "call_module" or not isinstance(self.modules[n.target], nn.BatchNorm2d):
                continue
            src = n.args[0]
            if (getattr(src, "op", None) == "call_module"
                    and isinstance(self.modules[src.target], nn.Conv2d) and len(src.users) == 1):
                self.folded[src.name] = self.modules[n.target]

    # -- argument helpers --------------------------------------------------------------
    def arg(self, a: Any) -> Any:
        if hasattr(a, "op") and hasattr(a, "name"):   # an fx.Node
            return self.env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def tensor(self, a: Any, where: str) -> str:
        v = self.arg(a)
        if isinstance(v, TensorRef):
            return v.name
        if isinstance(v, Unsupported):
            raise GraphError(v.why)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = self.torch.full((1,), float(v))   # a number where a tensor goes (where)
        if isinstance(v, self.torch.Tensor):
            if id(v) not in self.consts:
                # A bool mask (a causal mask buffer) as the 1.0 / 0.0 the comparisons give.
                arr = to_numpy(v.float() if v.dtype == self.torch.bool else v)
                self.consts[id(v)] = (v, self.g.const("c", arr))
            return self.consts[id(v)][1]
        raise GraphError(f"{where}: expected a tensor argument, got {v!r}")

    def op(self, op: str, ins: list[str], where: str, **attrs: Any) -> TensorRef:
        return TensorRef(self.g.op(op, ins, source=where, **attrs))

    def binary(self, fn: str, a: Any, b: Any, where: str) -> Any:
        a, b = self.arg(a), self.arg(b)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return getattr(operator, "truediv" if fn == "div" else fn)(a, b)
        if isinstance(b, (int, float)):
            return self.op("scalar", [self.tensor(a, where)], where, fn=fn, value=float(b))
        if isinstance(a, (int, float)):
            rfn = {"add": "add", "mul": "mul", "sub": "rsub", "div": "rdiv", "gt": "lt",
                   "lt": "gt", "ge": "le", "le": "ge", "eq": "eq", "ne": "ne"}[fn]
            return self.op("scalar", [self.tensor(b, where)], where, fn=rfn, value=float(a))
        return self.op(fn, [self.tensor(a, where), self.tensor(b, where)], where)

    def shape(self, a: Any) -> tuple[int, ...]:
        return self.g.nodes[self.tensor(a, "shape")].shape

    def reshape(self, x: Any, shape: Any, where: str) -> TensorRef:
        shape = [int(s) for s in (shape[0] if len(shape) == 1 and
                                  isinstance(shape[0], (list, tuple)) else shape)]
        n = int(np.prod(self.shape(x)))
        if -1 in shape:
            k = shape.index(-1)
            shape[k] = n // max(1, -int(np.prod(shape)))
        return self.op("reshape", [self.tensor(x, where)], where, shape=tuple(shape))

    # -- the walk ------------------------------------------------------------------------
    def run(self) -> Graph:
        for n in self.gm.graph.nodes:
            where = f"node {n.name} ({n.op} {getattr(n.target, '__name__', n.target)})"
            if n.op == "placeholder":
                v = self.values[n.name]
                self.env[n.name] = TensorRef(self.g.input(
                    n.name, tuple(v.shape),
                    "int32" if not v.is_floating_point() else "float32"))
            elif n.op == "get_attr":
                # a parameter stays a torch tensor until it is read as a graph value, so
                # that weights can be folded and re-laid out at import
                self.env[n.name] = self.values[n.name]
            elif n.op == "output":
                outs = self.arg(n.args[0])
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                if any(isinstance(o, (list, tuple)) for o in outs):
                    raise GraphError(f"{where}: the model returns a nested tuple (an LSTM's "
                                     "(out, (h, c))); return tensors, or a flat tuple of "
                                     "them")
                self.g.outputs = [self.tensor(o, where) if not isinstance(o, TensorRef) else o.name
                                  for o in outs]
                # The outputs' example values: of each fx node returned, or of the one
                # node that returned a tuple (``torch.max(x, 1)``).
                raw = n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]
                examples = [self.values.get(getattr(o, "name", "")) for o in raw]
                if len(examples) == 1 and isinstance(examples[0], (list, tuple)):
                    examples = list(examples[0])
                for k, v in enumerate(examples):
                    if isinstance(v, self.torch.Tensor):
                        self.g.output_shapes[k] = tuple(v.shape)
                        dtype = str(v.dtype).removeprefix("torch.")
                        if dtype in ("float32", "float64", "int32", "int64", "bool"):
                            self.g.output_dtypes[k] = dtype
            else:
                value = self.values[n.name]
                name = n.target if isinstance(n.target, str) else n.target.__name__
                self.current = n.name
                if isinstance(value, self.torch.Tensor) and "dropout" not in name and \
                        name.removesuffix("_").removesuffix("_like") not in _RANDOM and (
                        name in _SHAPE_ONLY or not (
                            self._reads_graph(n.args) or self._reads_graph(n.kwargs))):
                    # Computed from constants alone (``torch.arange(T)``, a mask made in
                    # forward, a transposed or normalized weight), or from only the shape
                    # of a value (``zeros_like``): folded, as the example run made it.
                    self.env[n.name] = value
                    continue
                if name in MANY and n.op != "call_module":
                    self.env[n.name] = MANY[name](self, list(n.args), dict(n.kwargs), where)
                    continue
                many = (layer_module(self, n, self.modules[n.target], where)
                        if n.op == "call_module" and isinstance(value, tuple) else None)
                if many is not None:
                    self.env[n.name] = many
                    continue
                if isinstance(value, (tuple, list)) and any(
                        isinstance(v, self.torch.Tensor) for v in value):
                    what = (f"module {type(self.modules[n.target]).__name__}"
                            if n.op == "call_module" else f"operator {name!r}")
                    raise GraphError(f"unsupported {what} at {where}: it returns several "
                                     "tensors")
                if not isinstance(value, self.torch.Tensor):
                    # sizes, shape tuples, ints: known from the example run
                    self.env[n.name] = value
                    continue
                if n.op == "call_module":
                    self.env[n.name] = self.module(n, self.modules[n.target], where)
                else:
                    fn = HANDLERS.get(name)
                    if fn is None:
                        raise GraphError(f"unsupported operator {name!r} at {where}; "
                                         f"supported: {', '.join(sorted(HANDLERS))}")
                    self.env[n.name] = fn(self, list(n.args), dict(n.kwargs), where)
        return self.g.prune()

    def _reads_graph(self, a: Any) -> bool:
        """Whether the fx arguments ``a`` read a value the graph computes (an input or
        anything made from one), not only constants."""
        if hasattr(a, "op") and hasattr(a, "name"):
            return self._reads_graph(self.env.get(a.name))
        if isinstance(a, (list, tuple)):
            return any(self._reads_graph(x) for x in a)
        if isinstance(a, dict):
            return any(self._reads_graph(x) for x in a.values())
        return isinstance(a, (TensorRef, Unsupported))

    def module(self, n: Any, m: Any, where: str) -> Any:
        nn = self.torch.nn
        x = n.args[0]
        if isinstance(m, nn.Conv2d):
            return self.conv(x, m, where, self.folded.get(n.name))
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            if getattr(n.args[0], "name", None) in self.folded:
                return self.env[n.args[0].name]
            return self.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, m.eps,
                                   where)
        if isinstance(m, nn.Linear):
            return self.linear(x, m.weight, m.bias, where)
        if isinstance(m, (nn.Dropout, nn.Identity)):
            return self.arg(x)
        for kind, op in ((nn.ReLU, "relu"), (nn.GELU, "gelu"), (nn.Sigmoid, "sigmoid"),
                         (nn.Tanh, "tanh"), (nn.SiLU, "silu"), (nn.Hardswish, "hardswish"),
                         (nn.Hardsigmoid, "hardsigmoid"), (nn.LeakyReLU, "leaky_relu"),
                         (nn.ELU, "elu"), (nn.Softplus, "softplus"),
                         (nn.LogSoftmax, "log_softmax")):
            if isinstance(m, kind):
                return self.op(op, [self.tensor(x, where)], where, **_module_attrs(m, op))
        if isinstance(m, (nn.ReLU6, nn.Hardtanh)):
            lo, hi = (0.0, 6.0) if isinstance(m, nn.ReLU6) else (m.min_val, m.max_val)
            return self.op("clip", [self.tensor(x, where)], where, lo=lo, hi=hi)
        if isinstance(m, nn.MaxPool2d):
            return self.pool("max_pool2d", x, m.kernel_size, m.stride, m.padding, where,
                             ceil_mode=m.ceil_mode, dilation=m.dilation)
        if isinstance(m, nn.AvgPool2d):
            return self.pool("avg_pool2d", x, m.kernel_size, m.stride, m.padding, where,
                             ceil_mode=m.ceil_mode, count_include_pad=m.count_include_pad,
                             divisor_override=m.divisor_override)
        if isinstance(m, nn.AdaptiveAvgPool2d):
            return self.adaptive(x, m.output_size, where)
        if isinstance(m, nn.Flatten):
            return self.flatten(x, m.start_dim, m.end_dim, where)
        if isinstance(m, nn.Softmax):
            return self.op("softmax", [self.tensor(x, where)], where, axis=m.dim)
        if isinstance(m, nn.LayerNorm):
            return self.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps, where)
        rms: Any = getattr(nn, "RMSNorm", None)     # PyTorch 2.4 and later
        if rms is not None and isinstance(m, rms):
            return self.rms_norm(x, m.normalized_shape, m.weight, m.eps, where)
        if isinstance(m, nn.Embedding):
            table = self.g.const("table", to_numpy(m.weight))
            return self.op("embedding", [self.tensor(x, where), table], where)
        got = layer_module(self, n, m, where)
        if got is not None:
            return got
        raise GraphError(f"unsupported module {type(m).__name__} at {where}")

    def batch_norm(self, x: Any, mean: Any, var: Any, w: Any, b: Any, eps: float,
                   where: str) -> Any:
        """Inference batch norm over axis 1 as a per-channel multiply-add."""
        if mean is None or var is None:
            raise GraphError(f"{where}: batch norm without running statistics is not "
                             "supported (track_running_stats=False normalises per batch)")
        s = (to_numpy(w) if w is not None else 1.0) / np.sqrt(to_numpy(var) + eps)
        t = (to_numpy(b) if b is not None else 0.0) - to_numpy(mean) * s
        trail = (1,) * (len(self.shape(x)) - 2)
        y = self.binary("mul", x, self.torch.from_numpy(np.reshape(s, (-1, *trail))), where)
        return self.binary("add", y, self.torch.from_numpy(np.reshape(t, (-1, *trail))), where)

    def conv(self, x: Any, m: Any, where: str, bn: Any = None) -> TensorRef:
        if m.padding_mode != "zeros":      # padded apart, then a convolution without
            if isinstance(m.padding, str):
                raise GraphError(f"{where}: padding={m.padding!r} is not supported; give ints")
            ph, pw = _pair(m.padding)
            x = self.op("pad", [self.tensor(x, where)], where, mode=m.padding_mode,
                        pads=((0, 0), (0, 0), (ph, ph), (pw, pw)))
            padding: Any = 0
        else:
            padding = m.padding
        w = to_numpy(m.weight)
        b = to_numpy(m.bias) if m.bias is not None else None
        if bn is not None:   # fold: bn(conv(x)) = conv(x) * s + t, s into the weights
            s = to_numpy(bn.weight) / np.sqrt(to_numpy(bn.running_var) + bn.eps)
            w = w * s.reshape(-1, 1, 1, 1)
            b = ((b if b is not None else 0.0) - to_numpy(bn.running_mean)) * s + to_numpy(bn.bias)
        return self.conv_arrays(x, w, b, m.stride, padding, m.dilation, m.groups, where)

    def conv_arrays(self, x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any,
                    groups: int, where: str) -> TensorRef:
        if isinstance(padding, str):
            raise GraphError(f"{where}: padding={padding!r} is not supported; give ints")
        if not isinstance(w, np.ndarray):
            raise GraphError(f"{where}: a convolution with a computed weight is not "
                             "supported; the weight must be a parameter")
        # weights [C / groups, R, S, K]: see graph.ops.conv2d
        y = self.op("conv2d", [self.tensor(x, where), self.g.const("w", w.transpose(1, 2, 3, 0))],
                    where,
                    stride=_pair(stride), padding=_pair(padding),
                    dilation=_pair(dilation), groups=int(groups))
        if b is None:
            return y
        return self.op("add", [y.name, self.g.const("b", np.reshape(b, (-1, 1, 1)))], where)

    def pool(self, op: str, x: Any, k: Any, s: Any, p: Any, where: str, **attrs: Any) -> TensorRef:
        if op == "max_pool2d" and _pair(attrs.pop("dilation", 1)) != (1, 1):
            raise GraphError(f"{where}: max pooling with dilation is not supported")
        if attrs.pop("divisor_override", None) is not None:
            raise GraphError(f"{where}: avg pooling with divisor_override is not supported")
        return self.op(op, [self.tensor(x, where)], where, kernel=_pair(k),
                       stride=_pair(s if s is not None and s != [] else k),
                       padding=_pair(p), **attrs)

    def adaptive(self, x: Any, size: Any, where: str, op: str = "avg_pool2d") -> TensorRef:
        """Adaptive average (or, with ``op`` "max_pool2d", max) pooling to ``size`` (an
        int, or a pair whose None keeps that axis): a mean or max over the plane for 1 x 1,
        else a pooling of even windows."""
        H, W = self.shape(x)[2:]
        size = (H, W) if size is None else (size, size) if isinstance(size, int) else size
        oh, ow = int(size[0] or H), int(size[1] or W)
        if (oh, ow) == (1, 1):
            return self.op("mean" if op == "avg_pool2d" else "amax", [self.tensor(x, where)],
                           where, axes=(2, 3), keepdim=True)
        if H % oh or W % ow:
            raise GraphError(f"{where}: adaptive pooling of {H}x{W} to {oh}x{ow} has uneven "
                             "windows; only output sizes that divide the input are supported")
        return self.pool(op, x, (H // oh, W // ow), (H // oh, W // ow), 0, where)

    def linear(self, x: Any, weight: Any, bias: Any, where: str) -> TensorRef:
        """``x @ weight.T + bias`` with nn.Linear's [out, in] weight (a torch tensor or an
        array; ``bias`` may be None): a ``dense`` op and a broadcast add."""
        if isinstance(weight, self.torch.Tensor):
            # Transposed once per weight: an unrolled RNN's steps all call this with
            # theirs (a 64-step LSTM's import spent 3.6 of 3.8 s transposing and hashing
            # its 4 MiB state weight again each step; RESULTS.md).
            if id(weight) not in self.transposed:
                self.transposed[id(weight)] = (weight, self.g.const("w", to_numpy(weight).T))
            wt = self.transposed[id(weight)][1]
        else:
            wt = self.g.const("w", np.asarray(weight).T)
        y = self.op("dense", [self.tensor(x, where), wt], where)
        if bias is None:
            return y
        return self.binary("add", y, bias if isinstance(bias, self.torch.Tensor) else
                           self.torch.from_numpy(np.ascontiguousarray(bias)), where)

    def flatten(self, x: Any, start: int, end: int, where: str) -> TensorRef:
        shp = self.shape(x)
        start, end = start % len(shp), end % len(shp)
        new = shp[:start] + (int(np.prod(shp[start:end + 1])),) + shp[end + 1:]
        return self.reshape(x, new, where)

    def layer_norm(self, x: Any, shape: Any, w: Any, b: Any, eps: float, where: str) -> TensorRef:
        shape = tuple(shape) if isinstance(shape, (list, tuple)) else (int(shape),)
        gamma = to_numpy(w) if w is not None else np.ones(shape, "float32")
        beta = to_numpy(b) if b is not None else np.zeros(shape, "float32")
        return self.op("layer_norm", [self.tensor(x, where), self.g.const("gamma", gamma),
                                      self.g.const("beta", beta)], where, eps=float(eps))

    def rms_norm(self, x: Any, shape: Any, w: Any, eps: float | None, where: str) -> TensorRef:
        shape = tuple(shape) if isinstance(shape, (list, tuple)) else (int(shape),)
        gamma = to_numpy(w) if w is not None else np.ones(shape, "float32")
        # PyTorch's default eps: the machine epsilon of the input's type (float32 here).
        eps = float(np.finfo(np.float32).eps) if eps is None else float(eps)
        return self.op("rms_norm", [self.tensor(x, where), self.g.const("gamma", gamma)],
                       where, eps=eps)


def _module_attrs(m: Any, op: str) -> dict[str, Any]:
    """The graph op's attributes from an activation module's own."""
    if op == "gelu":
        return {"approximate": m.approximate}
    if op == "leaky_relu":
        return {"slope": float(m.negative_slope)}
    if op == "elu":
        return {"alpha": float(m.alpha)}
    if op == "softplus":
        return {"beta": float(m.beta), "threshold": float(m.threshold)}
    if op == "log_softmax":
        return {"axis": -1 if m.dim is None else int(m.dim)}
    return {}


def from_torch(module: Any, *examples: Any) -> Graph:
    """The graph of ``module`` (an ``nn.Module`` in eval mode) for these example inputs."""
    if getattr(module, "training", False):
        raise GraphError(f"{type(module).__name__} is in training mode; call .eval() first "
                         "(batch norm and dropout are compiled for inference)")
    return _Importer(module, examples).run()
