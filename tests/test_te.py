"""The tensor-expression language: construction, printing, and its error messages."""

import pytest

import tensortune as tt
from tensortune import te


def _mm(M=8, N=8, K=8):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_print_shows_loops_and_blocks():
    A, B, C = _mm()
    text = str(te.create_func([A, B, C], name="mm"))
    assert "def mm(A: float32[8, 8], B: float32[8, 8], C: float32[8, 8]):" in text
    assert "for k in range(8):" in text
    assert 'with block("C", vi=S(i), vj=S(j), vk=R(k)):' in text
    assert "init: C[vi, vj] = 0.0" in text


def test_reduce_axis_with_offset_range():
    A = te.placeholder((10,), name="A")
    k = te.reduce_axis((2, 7), name="k")
    S = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="S")
    f = te.create_func([A, S])
    import numpy as np

    a = np.arange(10, dtype="float32") + 1
    assert tt.build(f)(a)[0] == pytest.approx(a[2:7].sum())


@pytest.mark.parametrize("make, msg", [
    (lambda: te.placeholder((0, 3), name="A"), "positive ints"),
    (lambda: te.placeholder((3,), "float16", name="A"), "unknown dtype 'float16'"),
    (lambda: te.placeholder((3, 3), name="A")[1], "indexed with 1 indices"),
    (lambda: te.reduce_axis((5, 5), name="k"), "empty range"),
    (lambda: te.compute((3,), lambda i, j: i, name="T"), "takes 2 index arguments"),
])
def test_construction_errors(make, msg):
    with pytest.raises(tt.TEError, match=msg):
        make()


def test_nested_reduction_is_rejected():
    A = te.placeholder((4,), name="A")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(tt.TEError, match="whole body"):
        te.compute((1,), lambda i: te.sum(A[k], axis=k) * 2.0, name="S")


def test_create_func_argument_errors():
    A, B, C = _mm()
    with pytest.raises(tt.TEError, match="not listed as an input"):
        te.create_func([A, C])
    with pytest.raises(tt.TEError, match="list inputs first"):
        te.create_func([A, C, B])
    A2 = te.placeholder((8, 8), name="A")
    D = te.compute((8, 8), lambda i, j: A2[i, j] + C[i, j], name="D")
    with pytest.raises(tt.TEError, match="two different tensors are named 'A'"):
        te.create_func([A, B, A2, D])


def test_a_reduce_axis_read_outside_its_reduction_is_rejected():
    # It reached the IR verifier as "uses variable(s) ['r'] outside the loops..."
    A = te.placeholder((4, 4), name="A")
    r, q = te.reduce_axis(4, "r"), te.reduce_axis(4, "q")
    with pytest.raises(tt.TEError, match="compute 'B': reduce axis r is read outside a "
                       "reduction over it"):
        te.compute((4,), lambda i: A[i, r], name="B")
    with pytest.raises(tt.TEError, match="compute 'C': reduce axis q is read outside"):
        te.compute((4,), lambda i: te.sum(A[r, q], axis=r), name="C")
    te.create_func([A, te.compute((4,), lambda i: te.sum(A[i, r], axis=r), name="D")])


def test_out_of_bounds_read_is_rejected_unless_guarded():
    A = te.placeholder((8,), name="A")
    with pytest.raises(tt.TEError, match=r"reads A out of bounds on axis 0.*\[1, 8\]"):
        te.create_func([A, te.compute((8,), lambda i: A[i + 1], name="B")])
    ok = te.compute((8,), lambda i: te.if_then_else(i < 7, A[i + 1], 0.0), name="B")
    te.create_func([A, ok])


def test_expression_has_no_truth_value():
    A = te.placeholder((4,), name="A")
    with pytest.raises(tt.TEError, match="if_then_else"):
        te.compute((4,), lambda i: A[i] if i < 2 else 0.0, name="B")
