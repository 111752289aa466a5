"""Matrix workloads of the suite: GMM, DENSE, BMM, TBG, NRM.

Example:
    >>> func = gmm(64, 64, 64)
"""

from __future__ import annotations

from .. import te
from ..tir.stmt import PrimFunc


def gmm(M: int = 1024, N: int = 1024, K: int = 1024) -> PrimFunc:
    """C[i, j] = sum_k A[i, k] * B[k, j]."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_func([A, B, C], name="gmm")


def dense(M: int = 128, K: int = 768, N: int = 3072) -> PrimFunc:
    """Y = relu(X W^T + b) with W stored [N, K]."""
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((N, K), name="W")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis(K, name="k")
    mm = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="matmul")
    Y = te.compute((M, N), lambda i, j: te.relu(mm[i, j] + bias[j]), name="Y")
    return te.create_func([X, W, bias, Y], name="dense")


def bmm(b: int = 12, M: int = 128, N: int = 128, K: int = 64) -> PrimFunc:
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]."""
    A = te.placeholder((b, M, K), name="A")
    B = te.placeholder((b, K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((b, M, N), lambda n, i, j: te.sum(A[n, i, k] * B[n, k, j], axis=k),
                   name="C")
    return te.create_func([A, B, C], name="bmm")


def tbg(s: int = 128, h: int = 12, d: int = 64) -> PrimFunc:
    """Transposed batch matmul: C[h, i, j] = sum_d Q[i, h, d] * K[j, h, d]."""
    Q = te.placeholder((s, h, d), name="Q")
    K = te.placeholder((s, h, d), name="K")
    r = te.reduce_axis(d, name="r")
    C = te.compute((h, s, s), lambda n, i, j: te.sum(Q[i, n, r] * K[j, n, r], axis=r),
                   name="C")
    return te.create_func([Q, K, C], name="tbg")


def nrm(b: int = 8, M: int = 512, N: int = 512) -> PrimFunc:
    """out[b] = sqrt(sum_ij A[b, i, j]^2)."""
    A = te.placeholder((b, M, N), name="A")
    i = te.reduce_axis(M, name="i")
    j = te.reduce_axis(N, name="j")
    sq = te.compute((b,), lambda n: te.sum(A[n, i, j] * A[n, i, j], axis=[i, j]), name="sumsq")
    out = te.compute((b,), lambda n: te.sqrt(sq[n]), name="out")
    return te.create_func([A, out], name="nrm")
