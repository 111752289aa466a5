"""The reference evaluator's sums of products (contracted with einsum, never formed over
the whole domain) and its gathers (cut along axes their indices do not vary along) give
what a direct NumPy formula gives, however the domain is chunked."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tensortune import reference, te
from tensortune.reference import evaluate, random_inputs

dims = st.integers(1, 7)


def _func(kind: str, M: int, N: int, K: int, groups: int):
    A = te.placeholder((M, K * groups), name="A")
    B = te.placeholder((N * groups, K), name="B")
    k = te.reduce_axis(K, name="k")
    if kind == "matmul":       # both factors vary along k
        body = lambda i, j: te.sum(A[i, k] * B[j, k], axis=k)  # noqa: E731
    elif kind == "outer":      # neither factor varies along k: K times the term
        body = lambda i, j: te.sum(A[i, 0] * B[j, 0], axis=k)  # noqa: E731
    elif kind == "constant":   # one factor is a constant, the other ignores j
        body = lambda i, j: te.sum(A[i, k] * 3.0, axis=k)  # noqa: E731
    else:                      # grouped: A's column depends on j's group
        body = lambda i, j: te.sum(A[i, j // N * K + k] * B[j, k], axis=k)  # noqa: E731
    C = te.compute((M, N * groups), body, name="C")
    return te.create_func([A, B, C], name=kind)


def _numpy(kind: str, a: np.ndarray, b: np.ndarray, N: int, K: int, groups: int):
    a, b = a.astype(np.float64), b.astype(np.float64)
    if kind == "matmul":
        return a @ b.T
    if kind == "outer":
        return K * np.outer(a[:, 0], b[:, 0])
    if kind == "constant":
        return np.repeat(3.0 * a.sum(1, keepdims=True), N * groups, axis=1)
    return np.concatenate([a[:, g * K:(g + 1) * K] @ b[g * N:(g + 1) * N].T
                           for g in range(groups)], axis=1)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["matmul", "outer", "constant", "grouped"]), M=dims, N=dims,
       K=dims, groups=st.integers(1, 3), chunk=st.sampled_from([1, 5, 64, 1 << 22]))
def test_sums_of_products_match_numpy(kind, M, N, K, groups, chunk):
    groups = groups if kind == "grouped" else 1
    f = _func(kind, M, N, K, groups)
    a, b = random_inputs(f, seed=M * 100 + N * 10 + K)
    saved, reference._CHUNK = reference._CHUNK, chunk   # 1: a row per chunk
    try:
        got = evaluate(f, [a, b])[0]
    finally:
        reference._CHUNK = saved
    np.testing.assert_allclose(got, _numpy(kind, a, b, N, K, groups), rtol=1e-12,
                               atol=1e-12)


def test_a_gather_is_cut_along_axes_its_indices_do_not_vary_along():
    i = np.arange(4).reshape(4, 1, 1)
    j = np.arange(5).reshape(1, 5, 1)
    k = np.arange(6).reshape(1, 1, 6)
    cut = reference._uniform_axes_cut([i * 0 + j // 5 * 5 + k, i])
    assert [c.shape for c in cut] == [(1, 1, 6), (4, 1, 1)]
    # What varies stays: the first index still runs along k, the second along i.
    assert cut[0].ravel().tolist() == list(range(6))
    assert cut[1].ravel().tolist() == list(range(4))
