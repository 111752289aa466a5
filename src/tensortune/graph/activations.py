"""Element-wise activations and small math beyond ``ops.py``'s: SiLU (language models'
MLPs), leaky ReLU (detectors), hard swish and hard sigmoid (MobileNetV3), softplus, ELU,
mish (YOLOv4), erf, square, reciprocal, sign, sin, cos, floor and ceil. Each is an
element-wise graph op, so it fuses into the kernel of the op before it like a ReLU does.

Example:
    >>> x = te.placeholder((4, 8), name="x")
    >>> OPS["silu"].compute([x], {}, "act").shape
    (4, 8)
"""

from __future__ import annotations

from typing import Any

from .. import te
from .ops import _unary


def _silu(x: Any, a: dict[str, Any]) -> Any:
    return x * te.sigmoid(x)


def _leaky_relu(x: Any, a: dict[str, Any]) -> Any:
    # max(x, 0) + s min(x, 0) is x or s x exactly, for any slope s.
    return te.max(x, 0.0) + te.min(x, 0.0) * float(a.get("slope", 0.01))


def _hardswish(x: Any, a: dict[str, Any]) -> Any:
    return x * te.min(te.max(x + 3.0, 0.0), 6.0) * (1.0 / 6.0)


def _hardsigmoid(x: Any, a: dict[str, Any]) -> Any:
    return te.min(te.max(x * (1.0 / 6.0) + 0.5, 0.0), 1.0)


def _softplus(x: Any, a: dict[str, Any]) -> Any:
    # log(1 + e^(b x)) / b, and x itself where b x is over the threshold (PyTorch's rule;
    # e^(b x) may overflow there, and that lane's value is not the one kept).
    b, t = float(a.get("beta", 1.0)), float(a.get("threshold", 20.0))
    return te.if_then_else(x * b > t, x, te.log(te.exp(x * b) + 1.0) * (1.0 / b))


def _elu(x: Any, a: dict[str, Any]) -> Any:
    return te.if_then_else(x > 0.0, x, (te.exp(x) - 1.0) * float(a.get("alpha", 1.0)))


def _mish(x: Any, a: dict[str, Any]) -> Any:
    # x tanh(softplus(x)), softplus as PyTorch's (x itself over 20).
    return x * te.tanh(te.if_then_else(x > 20.0, x, te.log(te.exp(x) + 1.0)))


def _sign(x: Any, a: dict[str, Any]) -> Any:
    return te.if_then_else(x > 0.0, 1.0, te.if_then_else(x < 0.0, -1.0, 0.0))


for _name, _f in (("silu", _silu), ("leaky_relu", _leaky_relu), ("hardswish", _hardswish),
                  ("hardsigmoid", _hardsigmoid), ("softplus", _softplus), ("elu", _elu),
                  ("erf", lambda x, a: te.erf(x)), ("square", lambda x, a: x * x),
                  ("reciprocal", lambda x, a: 1.0 / x), ("mish", _mish), ("sign", _sign),
                  ("sin", lambda x, a: te.sin(x)), ("cos", lambda x, a: te.cos(x)),
                  ("floor", lambda x, a: te.floor(x)), ("ceil", lambda x, a: te.ceil(x))):
    _unary(_name, _f)
