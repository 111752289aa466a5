"""The optional TVM comparison (benchmarks/tvm_compare.py) without TVM: a failed TVM run
is a table cell, not a crash of the suite, and it uses the suite's FLOP counts."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

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
    import glob
    import tempfile

    left = set(glob.glob(f"{tempfile.gettempdir()}/tvm-nrm-4-*"))
    res = tvm_compare.run(sys.executable, "nrm", [2, 4], threads=2)
    assert isinstance(res, str)
    assert "tvm" in res        # No module named 'tvm'
    assert set(glob.glob(f"{tempfile.gettempdir()}/tvm-nrm-4-*")) == left   # removed


@pytest.mark.skipif(importlib.util.find_spec("tvm") is not None, reason="TVM installed here")
def test_a_tvm_timer_that_cannot_compile_raises_its_error_text(tmp_path):
    with pytest.raises(tvm_compare.TvmError, match="tvm"):
        tvm_compare.TvmTimer(sys.executable, "nrm", [str(tmp_path)])


def fake_interpreter(tmp_path, rounds_ok: int) -> str:
    """An executable that speaks the timing child's protocol, as TVM's would, without
    TVM: a ready line, then latencies per round; after ``rounds_ok`` rounds it dies."""
    path = tmp_path / "fakepy"
    path.write_text(f"""#!{sys.executable}
import json, sys
print(json.dumps({{"ready": 2}}), flush=True)
for i, _ in enumerate(sys.stdin):
    if i >= {rounds_ok}:
        sys.exit("kernel crashed")
    print(json.dumps([0.002 - 0.0001 * i, 0.001 + 0.0001 * i]), flush=True)
""")
    path.chmod(0o755)
    return str(path)


def tuned(tmp_path) -> object:
    work = tmp_path / "work"
    work.mkdir()
    (work / "database_workload.json").write_text("{}\n")
    records = [f"record {i}\n" for i in range(4)]
    return tvm_compare.TvmTuned(str(work), records, 10.0, 0.4)


def test_checkpoint_dirs_hold_the_first_n_records(tmp_path):
    dirs = tvm_compare.checkpoint_dirs(tuned(tmp_path), [1, 3])
    for d, n in zip(dirs, [1, 3]):
        with open(f"{d}/database_tuning_record.json") as f:
            assert f.readlines() == [f"record {i}\n" for i in range(n)]
    assert all(Path(d).parent == tmp_path / "work" for d in dirs)


def test_the_timer_returns_each_rounds_latencies(tmp_path):
    dirs = [str(tmp_path), str(tmp_path)]
    with tvm_compare.TvmTimer(fake_interpreter(tmp_path, 5), "nrm", dirs) as t:
        assert t.round() == [0.002, 0.001]
        assert t.round() == pytest.approx([0.0019, 0.0011])


def test_the_suite_keeps_tvms_best_round_and_a_failed_round_fails_its_cells(tmp_path):
    suite = load("tune_suite")
    tc = suite.tvm_compare
    run = tc.TvmTuned(**vars(tuned(tmp_path)))
    with suite.tvm_timer(fake_interpreter(tmp_path, 3), "nrm", run, [1, 3], 2) as timed:
        for _ in range(3):
            timed.round()
        assert timed.best == pytest.approx([0.0018, 0.001])
        cells = suite.tvm_cells("nrm", run, timed.best, [4.0, 4.0], 4.0)
        g64, g256 = 4.19e6 / 0.0018 / 1e9, 4.19e6 / 0.001 / 1e9     # 2.3 and 4.2 GFLOP/s
        assert cells[:4] == [f"{g64:.1f}", f"{4.0 / g64:.2f}x", f"{g256:.1f}", f"{4.0 / g256:.2f}x"]
        assert cells[4:] == ["0.40", "10.0x"]
        timed.round()                      # the child dies on its fourth round
        assert timed.best is None
        assert suite.tvm_cells("nrm", run, timed.best, [4.0, 4.0], 4.0)[0] == "failed"
    assert not os.path.exists(run.work)    # the run's dirs go once its kernels are timed
    with suite.tvm_timer(sys.executable, "nrm", "tune failed", [1, 3], 2) as timed:
        assert timed is None


def test_a_checkpoint_timer_that_fails_to_start_still_removes_the_runs_dirs(tmp_path):
    dead = tmp_path / "deadpy"
    dead.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('no TVM here')\n")
    dead.chmod(0o755)
    run = tuned(tmp_path)
    with pytest.raises(tvm_compare.TvmError, match="no TVM here"):
        with tvm_compare.checkpoint_timer(str(dead), "nrm", run, [1, 3]):
            pytest.fail("the timer started")
    assert not os.path.exists(run.work)


def test_a_timer_without_its_database_dirs_is_refused(tmp_path):
    # TVM would create an empty database in the current directory for "".
    for bad in ("", str(tmp_path / "missing")):
        with pytest.raises(tvm_compare.TvmError, match="no tuning database dir"):
            tvm_compare.TvmTimer(fake_interpreter(tmp_path, 5), "nrm", [bad])


def test_the_suite_builds_in_a_kernel_cache_of_its_own(tmp_path, monkeypatch):
    from tensortune.codegen.compile import CACHE_DIR_ENV, default_cache_dir

    suite = load("tune_suite")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "users"))
    with suite.kernel_cache(None) as d:
        assert default_cache_dir() == Path(d) and Path(d).is_dir()
        assert not Path(d).is_relative_to(tmp_path)
    assert not Path(d).exists()                  # a fresh one is removed at the end
    assert default_cache_dir() == tmp_path / "users"     # and the setting restored
    monkeypatch.delenv(CACHE_DIR_ENV)
    with suite.kernel_cache(str(tmp_path / "named")) as d:
        assert default_cache_dir() == tmp_path / "named"
    assert CACHE_DIR_ENV not in os.environ


def test_the_suites_retiming_waits_for_a_quiet_host_within_its_budget(tmp_path, capsys):
    """``interleaved(quiet_s=...)``: while the last checkpoint's kernel reads over 1.1x of
    the search's timing, each round waits, at most ``quiet_s`` seconds in all; the
    timings still come back. A search timing 1000x faster than the kernel can run makes
    every reading slow, so the whole budget is spent (steps of a second)."""
    import dataclasses

    suite = load("tune_suite")
    func = tt.workloads.get("gmm", M=16, N=32, K=8)
    db = str(tmp_path / "t.db")
    res = tt.tune(func, trials=4, database=db, seed=0, strategy="replay", retime_top=0,
                  load_guard=False, progress=None)
    x = suite.random_inputs(func)
    fast = dataclasses.replace(res, history=[(t, lat / 1000) for t, lat in res.history])
    ours = suite.interleaved(fast, db, [2, 4], x, None, None, rounds=2, quiet_s=2.0)
    assert "waited 2 s for a quiet host" in capsys.readouterr().out
    assert all(0 < t < float("inf") for t in ours[:2])
    suite.interleaved(res, db, [2, 4], x, None, None, rounds=2, quiet_s=0.0)
    assert "waited" not in capsys.readouterr().out      # no budget: no waiting
