"""Calling a built kernel: outputs allocated or written in place, argument checks."""

import numpy as np
import pytest

import tensortune as tt
from tensortune.reference import evaluate, random_inputs


@pytest.fixture(scope="module")
def gmm():
    f = tt.workloads.get("gmm", M=8, N=16, K=4)
    return f, tt.build(f)


def test_out_parameter_and_source(gmm):
    f, k = gmm
    a, b = random_inputs(f)
    c = np.full((8, 16), 7.0, dtype="float32")
    assert k(a, b, out=c) is c
    np.testing.assert_allclose(c, evaluate(f, [a, b])[0], rtol=1e-5)
    assert "tt_kernel(float* restrict A" in k.source


@pytest.mark.parametrize("mutate, msg", [
    (lambda a, b: (a.astype("float64"), b), "expected dtype float32, got float64"),
    (lambda a, b: (a[:4], b), r"expected shape \(8, 4\), got \(4, 4\)"),
    (lambda a, b: (np.asfortranarray(a), b), "C-contiguous"),
    (lambda a, b: (a,), "takes 2 inputs"),
    (lambda a, b: ([[1.0]], b), "expected a numpy array"),
])
def test_bad_arguments(gmm, mutate, msg):
    f, k = gmm
    a, b = random_inputs(f)
    with pytest.raises(tt.KernelArgumentError, match=msg):
        k(*mutate(a, b))


def test_out_aliasing_input_is_rejected():
    f = tt.workloads.get("smx", M=4, N=4)
    k = tt.build(f)
    (x,) = random_inputs(f)
    with pytest.raises(tt.KernelArgumentError, match="overlaps argument 0"):
        k(x, out=x)
