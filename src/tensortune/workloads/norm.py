"""Normalisation workloads of the suite: SMX (row softmax) and LNM (layer norm).

Example:
    >>> func = softmax(4, 16)
"""

from __future__ import annotations

from .. import te
from ..tir.stmt import PrimFunc


def softmax(M: int = 512, N: int = 1024) -> PrimFunc:
    """Row softmax in three stages: row max, sum of exp(x - max), divide."""
    X = te.placeholder((M, N), name="X")
    j = te.reduce_axis(N, name="j")
    mx = te.compute((M,), lambda i: te.max(X[i, j], axis=j), name="rowmax")
    j2 = te.reduce_axis(N, name="j2")
    sm = te.compute((M,), lambda i: te.sum(te.exp(X[i, j2] - mx[i]), axis=j2), name="rowsum")
    Y = te.compute((M, N), lambda i, n: te.exp(X[i, n] - mx[i]) / sm[i], name="Y")
    return te.create_func([X, Y], name="softmax")


def layernorm(M: int = 512, N: int = 768, eps: float = 1e-5) -> PrimFunc:
    """Layer norm over the last axis with gamma and beta."""
    X = te.placeholder((M, N), name="X")
    gamma = te.placeholder((N,), name="gamma")
    beta = te.placeholder((N,), name="beta")
    j = te.reduce_axis(N, name="j")
    total = te.compute((M,), lambda i: te.sum(X[i, j], axis=j), name="rowsum")
    j2 = te.reduce_axis(N, name="j2")
    sq = te.compute((M,), lambda i: te.sum(
        (X[i, j2] - total[i] * (1.0 / N)) * (X[i, j2] - total[i] * (1.0 / N)), axis=j2),
        name="sqsum")
    Y = te.compute((M, N), lambda i, n: (X[i, n] - total[i] * (1.0 / N))
                   / te.sqrt(sq[i] * (1.0 / N) + eps) * gamma[n] + beta[n], name="Y")
    return te.create_func([X, gamma, beta, Y], name="layernorm")
