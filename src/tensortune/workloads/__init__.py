"""The benchmark suite (../shared/workloads.md) as built-in, shape-parameterised functions.

Example:
    >>> from tensortune import workloads
    >>> func = workloads.get("c2d")                 # the suite's shape
    >>> small = workloads.get("gmm", M=64, N=64, K=64)
    >>> workloads.names()[:3]
    ['gmm', 'dense', 'c2d']
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import TensorTuneError
from ..tir.stmt import PrimFunc
from .conv import conv1d, conv2d, conv2d_transpose, conv3d, conv_layer, depthwise
from .linalg import bmm, dense, gmm, nrm, tbg
from .norm import layernorm, softmax

_REGISTRY: dict[str, tuple[Callable[..., PrimFunc], float, dict[str, Any]]] = {
    # name: (builder, FLOPs at the suite shape, small shape for tests)
    "gmm": (gmm, 2.15e9, dict(M=32, N=48, K=24)),
    "dense": (dense, 6.04e8, dict(M=16, K=32, N=48)),
    "c2d": (conv2d, 2.31e8, dict(C=8, K=8, H=10, W=10)),
    "bmm": (bmm, 2.52e7, dict(b=2, M=16, N=24, K=8)),
    "c1d": (conv1d, 1.26e7, dict(C=8, K=16, L=20)),
    "c3d": (conv3d, 1.73e8, dict(C=4, K=8, D=4, H=6, W=6)),
    "grp": (partial(conv2d, groups=4, relu=False, name="grp"), 5.78e7,
            dict(C=8, K=8, H=10, W=10)),
    "dil": (partial(conv2d, dilation=2, relu=False, name="dil"), 2.31e8,
            dict(C=8, K=8, H=12, W=12)),
    "dep": (depthwise, 7.23e6, dict(C=8, H=10, W=10)),
    "t2d": (conv2d_transpose, 5.14e7, dict(C=8, K=4, H=6, W=6)),
    "nrm": (nrm, 4.19e6, dict(b=2, M=16, N=24)),
    "smx": (softmax, 2.6e6, dict(M=8, N=40)),
    "lnm": (layernorm, 3.1e6, dict(M=8, N=48)),
    "convlayer": (conv_layer, 2.31e8, dict(C=8, K=8, H=10, W=10)),
    "tbg": (tbg, 2.52e7, dict(s=16, h=2, d=8)),
}
ALIASES = {"softmax": "smx", "layernorm": "lnm", "conv2d": "c2d", "matmul": "gmm"}


def names() -> list[str]:
    """Names of the suite's workloads, in the order of workloads.md."""
    return list(_REGISTRY)


def _entry(name: str):
    key = ALIASES.get(name.lower(), name.lower())
    if key not in _REGISTRY:
        raise TensorTuneError(f"unknown workload {name!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[key]


def get(name: str, small: bool = False, **shape: Any) -> PrimFunc:
    """The workload ``name`` at the suite's shape, its small test shape, or ``**shape``."""
    build, _, small_shape = _entry(name)
    args = dict(small_shape) if small else {}
    args.update(shape)
    try:
        return build(**args)
    except TypeError as e:
        raise TensorTuneError(f"workload {name!r}: bad shape arguments {shape}: {e}") from e


def resolve(spec: str, small: bool = False, **shape: Any) -> PrimFunc:
    """A suite workload by name, or ``path/to/file.py:name`` where ``name`` is a PrimFunc
    or a function returning one (called with ``**shape``)."""
    if ":" not in spec:
        return get(spec, small=small, **shape)
    from ..user_file import load_attr

    obj = load_attr(spec)
    func = obj
    if callable(obj) and not isinstance(obj, PrimFunc):
        import inspect

        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):   # no signature to check (a builtin): just call it
            sig = None
        if sig is not None:
            try:
                sig.bind(**shape)
            except TypeError as e:
                raise TensorTuneError(f"{spec}: bad shape arguments {shape}: {e}; it takes "
                                      f"{sig}") from e
        func = obj(**shape)
    if not isinstance(func, PrimFunc):
        raise TensorTuneError(f"{spec} gave {type(func).__name__}, not a function from "
                              "te.create_func")
    return func


def flops(name: str) -> float:
    """FLOPs of the suite's shape (a multiply-add counts 2), as in workloads.md."""
    return _entry(name)[1]


__all__ = ["bmm", "conv1d", "conv2d", "conv2d_transpose", "conv3d", "conv_layer", "dense",
           "depthwise", "flops", "get", "gmm", "layernorm", "names", "nrm", "resolve",
           "softmax", "tbg"]
