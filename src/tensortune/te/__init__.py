"""The tensor-expression language: describe a computation, then ``create_func``.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((64, 64), "float32", name="A")
    >>> B = te.placeholder((64, 64), "float32", name="B")
    >>> k = te.reduce_axis(64, name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> func = te.create_func([A, B, C], name="gmm")
"""

from .lower import create_func
from .ops import (
    abs,
    all,
    any,
    cast,
    ceil,
    cos,
    eq,
    erf,
    exp,
    float32,
    float64,
    floor,
    if_then_else,
    int32,
    log,
    logical_not,
    max,
    maximum,
    min,
    minimum,
    ne,
    pow,
    relu,
    select,
    sigmoid,
    sin,
    sqrt,
    sum,
    tanh,
)
from .tensor import ReduceVar, Tensor, compute, placeholder, reduce_axis

__all__ = [
    "ReduceVar", "Tensor", "abs", "all", "any", "cast", "ceil", "compute", "cos",
    "create_func", "eq", "erf", "exp", "float32", "float64", "floor", "if_then_else", "int32",
    "log", "logical_not", "max", "maximum", "min", "minimum", "ne", "placeholder", "pow",
    "reduce_axis", "relu", "select", "sigmoid", "sin", "sqrt", "sum", "tanh",
]
