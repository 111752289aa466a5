"""The inputs candidates are checked on (``reference_case``): both signs where the
reference is finite there, positive numbers for a square root or logarithm of an input
(an optimizer's step), and a clear error where neither gives a finite reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensortune as tt
from tensortune import te
from tensortune.reference import CHECK_SPANS, CheckError, reference_case


def _adam_step(n: int = 256) -> tt.tir.PrimFunc:
    p, m, v = (te.placeholder((n,), name=x) for x in ("P", "M", "V"))
    out = te.compute((n,), lambda i: p[i] - 0.01 * m[i] / (te.sqrt(v[i]) + 1e-8), name="O")
    return te.create_func([p, m, v, out], name="adam_step")


def test_a_function_finite_on_both_signs_is_checked_on_both():
    x = te.placeholder((64,), name="X")
    y = te.compute((64,), lambda i: te.max(x[i], 0.0), name="Y")
    ins, outs = reference_case(te.create_func([x, y], name="relu"))
    assert ins[0].min() < 0 < ins[0].max()
    np.testing.assert_array_equal(outs[0], np.maximum(ins[0].astype(np.float64), 0.0))


def test_a_square_root_of_an_input_is_tuned_on_positive_inputs():
    func = _adam_step()
    ins, outs = reference_case(func)
    low, high = CHECK_SPANS[1]
    assert all(low <= a.min() and a.max() <= high for a in ins)
    assert all(np.isfinite(o).all() for o in outs)
    res = tt.tune(func, trials=4, seed=0)
    p, m, v = ins
    want = p.astype(np.float64) - 0.01 * m / (np.sqrt(v.astype(np.float64)) + 1e-8)
    np.testing.assert_allclose(res.kernel(p, m, v), want, rtol=1e-5, atol=1e-6)


def test_a_reference_not_finite_on_any_span_is_a_clear_error():
    x = te.placeholder((8, 8), name="X")
    y = te.compute((8, 8), lambda i, j: te.log(x[i, j] - 2.0), name="Y")
    func = te.create_func([x, y], name="shifted_log")
    with pytest.raises(CheckError, match=r"shifted_log: its output 0 \(Y\) is nan at index "
                                         r"\(0, 0\) on random inputs in \(-1, 1\) and "
                                         r"\(0.5, 1.5\)"):
        tt.tune(func, trials=2, seed=0)
