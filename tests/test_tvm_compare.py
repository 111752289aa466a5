"""The optional TVM comparison (benchmarks/tvm_compare.py) without TVM: a failed TVM run
is a table cell, not a crash of the suite, and it uses the suite's FLOP counts."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from bench_modules import load

import tensortune as tt

tvm_compare = load("tvm_compare")


def test_tvm_flops_are_the_suites():
    assert sorted(tvm_compare.FLOPS) == sorted(tt.workloads.names())
    for name, flops in tvm_compare.FLOPS.items():
        assert flops == pytest.approx(tt.workloads.flops(name), rel=0.01), name


@pytest.mark.skipif(importlib.util.find_spec("tvm") is not None, reason="TVM installed here")
def test_a_tvm_run_that_fails_comes_back_as_its_error_text():
    res = tvm_compare.run(sys.executable, "nrm", [2, 4], threads=2)
    assert isinstance(res, str)
    assert "tvm" in res        # No module named 'tvm'
