"""The inputs candidates are checked on (``reference_case``): both signs where the
reference is finite there, positive numbers for a square root or logarithm of an input
(an optimizer's step), and a clear error where neither gives a finite reference; or the
user's own (``tune(..., inputs=...)``, ``given_case``), checked against the function.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensortune as tt
from tensortune import te
from tensortune.reference import CHECK_SPANS, CheckError, given_case, reference_case


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


def _shifted_log() -> tt.tir.PrimFunc:
    x = te.placeholder((8, 8), name="X")
    y = te.compute((8, 8), lambda i, j: te.log(x[i, j] - 2.0), name="Y")
    return te.create_func([x, y], name="shifted_log")


def test_a_reference_not_finite_on_any_span_is_a_clear_error():
    with pytest.raises(CheckError, match=r"shifted_log: its output 0 \(Y\) is nan at index "
                                         r"\(0, 0\) on random inputs in \(-1, 1\) and "
                                         r"\(0.5, 1.5\).*inputs=\[\.\.\.\]"):
        tt.tune(_shifted_log(), trials=2, seed=0)


def test_the_users_own_inputs_are_what_candidates_are_checked_on():
    x = np.random.default_rng(5).uniform(2.5, 3.5, (8, 8)).astype(np.float32)
    res = tt.tune(_shifted_log(), trials=4, seed=0, inputs=[x])
    np.testing.assert_allclose(res.kernel(x), np.log(x.astype(np.float64) - 2.0),
                               rtol=1e-5, atol=1e-6)
    ins, outs = given_case(_shifted_log(), [x])
    np.testing.assert_array_equal(ins[0], x)


@pytest.mark.parametrize("inputs, message", [
    ([], r"shifted_log takes 1 input \(X\), got 0"),
    ([np.full((8, 4), 3.0, np.float32)],
     r"input 0 \(X\) must be float32 of shape \(8, 8\), got float32 of shape \(8, 4\)"),
    ([np.full((8, 8), 3.0)], r"input 0 \(X\) must be float32 .* got float64"),
    ([np.full((8, 8), 1.5, np.float32)], r"its output 0 \(Y\) is nan at index \(0, 0\) on "
                                         r"the given inputs"),
])
def test_bad_given_inputs_are_clear_errors(inputs, message):
    with pytest.raises(CheckError, match=message):
        tt.tune(_shifted_log(), trials=2, seed=0, inputs=inputs)


def test_indices_into_a_short_table_are_checked_on_the_users_indices():
    """Random ints are drawn in [0, 8): into a table of 4 rows they read past its end, so
    no candidate passes; the user's indices are in range and it tunes."""
    table = te.placeholder((4, 32), name="T")
    index = te.placeholder((64,), dtype="int32", name="I")
    out = te.compute((64, 32), lambda i, j: table[index[i], j], name="O")
    func = te.create_func([table, index, out], name="embed")
    t = np.random.default_rng(0).uniform(-1, 1, (4, 32)).astype(np.float32)
    ix = np.random.default_rng(1).integers(0, 4, 64).astype(np.int32)
    res = tt.tune(func, trials=4, seed=0, inputs=[t, ix])
    assert res.errors == 0
    np.testing.assert_array_equal(res.kernel(t, ix), t[ix])


def test_compile_checks_a_stale_best_on_the_users_own_inputs(tmp_path):
    """A best record timed with other C than this code generator writes is timed and
    checked again by ``tt.compile``: on the inputs the user gives it, since random ones
    make this reference NaN; without them, the error says to pass them."""
    import dataclasses

    from tensortune.database import Database
    from tensortune.measure import source_hash

    func = _shifted_log()
    x = np.random.default_rng(6).uniform(2.5, 3.5, (8, 8)).astype(np.float32)
    path = tmp_path / "log.db"
    tt.tune(func, trials=4, seed=0, inputs=[x], database=path, retime_top=0)
    db = Database(path)
    wl, fp = func.structural_hash(), tt.Target.host().fingerprint()
    best = db.top_k(wl, fp, 1)[0]
    db.update_timing(dataclasses.replace(best, source="0" * 16))   # "an older tensortune"
    with pytest.raises(CheckError, match=r"shifted_log: .* nan .*compile"):
        tt.compile(func, database=db)
    kernel = tt.compile(func, database=db, inputs=[x])
    again = next(r for r in db.records(wl, fp) if r.program == best.program)
    assert again.ok and again.source == source_hash(kernel.source)
    np.testing.assert_allclose(kernel(x), np.log(x.astype(np.float64) - 2.0),
                               rtol=1e-5, atol=1e-6)
