"""The command line: the built-in example and target."""

import sqlite3

import pytest

from tensortune.cli import main


def test_example_runs_and_checks(capsys):
    assert main(["example", "--size", "64", "--show"]) == 0
    out = capsys.readouterr().out
    assert "checked against float64" in out and "sch.split(" in out


def test_help_names_the_workloads_and_shows_examples(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "tensortune tune my_ops.py:matmul_relu" in out
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "gmm, dense, c2d" in out and "path/to/file.py:func" in out
    assert "keeps its records only with it" in out


def test_target(capsys):
    assert main(["target"]) == 0
    assert "fingerprint" in capsys.readouterr().out


def test_tune_show_and_db_commands(tmp_path, capsys):
    db = str(tmp_path / "c.db")
    assert main(["tune", "gmm", "--shape", "M=32,N=32,K=16", "--trials", "4", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "tuning summary" in out and "bound" in out and "roofline" in out
    assert main(["show", "gmm", "--shape", "M=32,N=32,K=16", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert "sch.sample_perfect_tile(" in shown and "timed with other C" not in shown
    sqlite3.connect(db).execute("UPDATE records SET source = 'older'").connection.commit()
    assert main(["show", "gmm", "--shape", "M=32,N=32,K=16", "--db", db]) == 0
    assert "timed with other C" in capsys.readouterr().out
    assert main(["db", "list", "--db", db]) == 0
    listed = capsys.readouterr().out
    from tensortune.database import Database
    from tensortune.measure.roofline import latency_text

    best = min(r.latency for r in Database(db).records())
    row = next(line for line in listed.splitlines() if "gmm" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # the workload, its hash, its records, those of this machine, the best, its GFLOP/s
    assert cells[2:6] == ["4", "4", latency_text(best), f"{2 * 32 * 32 * 16 / best / 1e9:.1f}"]
    assert main(["db", "export", str(tmp_path / "e.jsonl"), "--db", db]) == 0


def test_an_interrupted_tune_says_what_it_kept(tmp_path, capsys, monkeypatch):
    import tensortune as tt

    db = str(tmp_path / "i.db")
    assert main(["tune", "gmm", "--shape", "M=32,N=32,K=16", "--trials", "3", "--db", db]) == 0
    capsys.readouterr()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tt, "tune", interrupted)
    assert main(["tune", "gmm", "--shape", "M=32,N=32,K=16", "--trials", "9", "--db", db]) == 130
    assert "interrupted; 3 records are in" in capsys.readouterr().err
    assert main(["tune", "gmm", "--shape", "M=32,N=32,K=16", "--trials", "9"]) == 130
    assert "without --db the records were in memory only" in capsys.readouterr().err
    fresh = str(tmp_path / "never.db")
    assert main(["tune", "gmm", "--shape", "M=32,N=32,K=16", "--trials", "9", "--db", fresh]) \
        == 130
    assert "interrupted; nothing was measured" in capsys.readouterr().err


def test_a_peak_read_on_a_busy_machine_is_not_shown_as_a_percent(capsys, monkeypatch):
    from tensortune.measure import peak

    real = peak.fma_peak
    readings = iter([0.001])      # the first reading as a busy machine gave it, then real

    def first_low(*args, **kwargs):
        return next(readings, None) or real(*args, **kwargs)

    monkeypatch.setattr(peak, "fma_peak", first_low)
    assert main(["tune", "gmm", "--shape", "M=32,N=32,K=16", "--trials", "3"]) == 0
    out = capsys.readouterr().out
    assert "> peak reading" in out and "% peak" not in out.split("tuning summary")[0]
    assert "the first reading met a slower machine" in " ".join(out.split())


@pytest.mark.parametrize("percent", [None, 100.2, 1234.0])
def test_the_live_line_fits_80_columns_where_reading_binds(capsys, monkeypatch, percent):
    # NRM's 8 MiB are read at the memory's bandwidth long before its FLOPs bind. A kernel
    # can read a little above a bandwidth read while the machine was slowed (100.2% on a
    # CI run), which once pushed the times out of 80 columns: every percent is forced.
    from tensortune.measure.roofline import Roofline

    if percent is not None:
        monkeypatch.setattr(Roofline, "percent_at", lambda self, latency: percent)
    assert main(["tune", "nrm", "--trials", "2"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("tuned"))
    assert "% of bound" in line and "…" not in line and len(line) <= 80, line
    if percent is not None:
        assert (" 100% of bound" if percent < 1000 else ">999% of bound") in line, line


def test_a_latency_is_shown_in_the_unit_that_shows_it():
    # A 1000-element sum's 64 ns read "0.0000 ms" in the summary and in show
    from tensortune.measure.roofline import latency_text

    shown = [latency_text(s) for s in (6.4e-8, 1.62e-6, 9.99e-5, 1e-4, 7.021e-4, 1.5)]
    assert shown == ["64.0 ns", "1.620 us", "99.900 us", "0.1000 ms", "0.7021 ms", "1.500 s"]


def test_a_percent_in_the_live_line_keeps_four_characters():
    from tensortune.cli_live import percent_text

    shown = [percent_text(p) for p in (0.04, 7.25, 99.94, 99.96, 100.2, 999.4, 1234.0)]
    assert shown == [" 0.0", " 7.2", "99.9", " 100", " 100", " 999", ">999"]


def test_user_file_workload_and_errors(tmp_path, capsys):
    ops = tmp_path / "my_ops.py"
    ops.write_text(
        "from tensortune import te\n"
        "def matmul_relu(n=16):\n"
        "    A = te.placeholder((n, n), name='A'); B = te.placeholder((n, n), name='B')\n"
        "    k = te.reduce_axis(n, name='k')\n"
        "    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name='C')\n"
        "    R = te.compute((n, n), lambda i, j: te.relu(C[i, j]), name='R')\n"
        "    return te.create_func([A, B, R], name='matmul_relu')\n")
    assert main(["tune", f"{ops}:matmul_relu", "--trials", "3"]) == 0
    db = str(tmp_path / "t.db")
    assert main(["tune", f"{ops}:matmul_relu", "--trials", "3", "--db", db]) == 0
    capsys.readouterr()
    # shown by the name it was stored under: its best trace and text, no file needed
    assert main(["show", "matmul_relu", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert f"# {ops}:matmul_relu (workload " in shown
    assert "best of 3 records on this machine" in shown
    assert "sch.get_block(" in shown and "def matmul_relu(A: float32[16, 16]" in shown
    assert f"tensortune show {ops}:matmul_relu --db {db}" in shown
    import tensortune as tt

    tt.tune(tt.workloads.get("gmm", M=8, N=8, K=8), trials=2, database=db, name="mine")
    assert main(["show", "mine", "--db", db]) == 0           # a name given in Python
    shown = capsys.readouterr().out
    assert "# mine (workload " in shown and "path/to/file.py:mine" in shown
    assert main(["show", "matmul_reLU", "--db", db]) == 2
    assert f"t.db holds records of: {ops}:matmul_relu, mine" in capsys.readouterr().err
    # a wrong weight is said before the machine is read and the live line drawn
    assert main(["tune", f"{ops}:matmul_relu", "--weights", "Q", "--trials", "1"]) == 2
    said = capsys.readouterr()
    assert "weight 'Q' is not a parameter" in said.err and "tuning" not in said.out
    assert main(["tune", f"{ops}:nope", "--trials", "1"]) == 2
    assert "has no 'nope'; it defines: matmul_relu" in capsys.readouterr().err
    assert main(["tune", f"{ops}:matmul_relu", "--shape", "m=4", "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert "bad shape arguments {'m': 4}" in err and "it takes (n=16)" in err
    broken = tmp_path / "broken.py"
    broken.write_text("import math\n\nx = 1\ny = math.sqrt(-x)\n")
    assert main(["tune", f"{broken}:f", "--trials", "1"]) == 2
    assert "broken.py, line 4 failed to run: ValueError: math domain error" in \
        capsys.readouterr().err
    bad_syntax = tmp_path / "bad_syntax.py"
    bad_syntax.write_text("def f(:\n    pass\n")
    assert main(["tune", f"{bad_syntax}:f", "--trials", "1"]) == 2
    assert "bad_syntax.py, line 1 failed to run: SyntaxError" in capsys.readouterr().err
    assert main(["tune", "nope", "--trials", "1"]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "gmm", "--trials", "-3"])
    assert "expected a whole number of 0 or more, got '-3'" in capsys.readouterr().err
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 500)
    assert main(["show", "gmm", "--db", str(bad)]) == 2
    assert "not a usable tensortune database" in capsys.readouterr().err
    # No trials asked for: nothing failed, so the exit is 0 (it said no candidate passed)
    assert main(["tune", "gmm", "--shape", "M=8,N=8,K=8", "--trials", "0"]) == 0
    assert "no candidate passed" not in capsys.readouterr().out
    gone = str(tmp_path / "gone.jsonl")
    assert main(["db", "import", gone, "--db", str(tmp_path / "ok.db")]) == 2
    assert f"error: cannot read {gone}: No such file" in capsys.readouterr().err


def test_tune_a_function_that_only_moves_data(tmp_path, capsys):
    # A transpose has no FLOPs: the live display and the summary give GB/s and the share
    # of the read bandwidth (GFLOP/s would be 0, and its share of a 0 bound undefined).
    ops = tmp_path / "moves.py"
    ops.write_text(
        "from tensortune import te\n"
        "def transpose():\n"
        "    A = te.placeholder((48, 40), name='A')\n"
        "    B = te.compute((40, 48), lambda i, j: A[j, i], name='B')\n"
        "    return te.create_func([A, B])\n")     # named "main", as create_func names it
    assert main(["tune", f"{ops}:transpose", "--trials", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("moves.py:transpose on ") and "moves.py:transpose: tuning" in out
    assert "no floating-point work: bound by the read bandwidth" in out
    assert "GB/s (" in out and "% of bound)" in out and "GFLOP/s (" not in out
    assert "- (no floating-point work)" in out
    db = str(tmp_path / "moves.db")
    assert main(["tune", f"{ops}:transpose", "--trials", "1", "--db", db]) == 0
    capsys.readouterr()
    assert main(["db", "list", "--db", db]) == 0
    from tensortune.database import Database

    (h, *_), = Database(db).workloads()
    row = next(r for r in capsys.readouterr().out.splitlines() if h in r)
    assert [c.strip() for c in row.split("│")[1:-1]][5:] == ["-", "0.0000"]   # GFLOP/s, GFLOP
    row = next(r for r in out.split("│ % roofline")[1:])
    assert float(row.split("│")[1]) > 0


def test_tune_model_from_a_user_file(tmp_path, capsys):
    pytest.importorskip("torch")
    net = tmp_path / "net.py"
    net.write_text(
        "from torch import nn\n"
        "def build():\n"
        "    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),\n"
        "                         nn.Flatten(), nn.Linear(4 * 36, 5))\n")
    db = str(tmp_path / "m.db")
    assert main(["tune-model", f"{net}:build", "--input", "1,3,6,6", "--trials", "12",
                 "--db", db]) == 0
    out = capsys.readouterr().out
    assert "conv2d_add_relu#0" in out and "relative error against PyTorch" in out
    # the summary starts on a line of its own after the live table (a pipe or a CI log)
    assert "┘task" not in out and any(ln.startswith("task ") for ln in out.splitlines())
    assert main(["tune-model", f"{net}:nope", "--input", "1,3,6,6"]) == 2
    assert "has no 'nope'" in capsys.readouterr().err
    assert main(["tune-model", str(tmp_path / "none.py:build"), "--input", "1"]) == 2
    assert "no such file" in capsys.readouterr().err
    # Outputs that are a tuple, an index and a mask compare with PyTorch's as numbers.
    net.write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.argmax(-1), x > 0\n"
        "def build():\n"
        "    return Net()\n")
    assert main(["tune-model", f"{net}:build", "--input", "3,5", "--trials", "0"]) == 0
    assert "relative error against PyTorch 0.0e+00" in capsys.readouterr().out
    # An operator it cannot import is said before any table is drawn.
    net.write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.cumprod(x, -1)\n"
        "def build():\n"
        "    return Net()\n")
    assert main(["tune-model", f"{net}:build", "--input", "2,5"]) == 2
    captured = capsys.readouterr()
    assert "unsupported operator 'cumprod'" in captured.err and "task" not in captured.out


def test_tune_checks_on_the_inputs_of_an_npz_file(tmp_path, capsys):
    import numpy as np

    ops = tmp_path / "logs.py"
    ops.write_text(
        "from tensortune import te\n"
        "def shifted_log():\n"
        "    x = te.placeholder((8, 16), name='X')\n"
        "    y = te.compute((8, 16), lambda i, j: te.log(x[i, j] - 2.0), name='Y')\n"
        "    return te.create_func([x, y], name='shifted_log')\n")
    target = f"{ops}:shifted_log"
    # Random inputs give a NaN reference: a clear error, exit 2.
    assert main(["tune", target, "--trials", "2"]) == 2
    assert "inputs=[...]" in capsys.readouterr().err
    good = tmp_path / "x.npz"
    np.savez(good, X=np.random.default_rng(0).uniform(2.5, 3.5, (8, 16)).astype(np.float32))
    assert main(["tune", target, "--trials", "2", "--inputs", str(good)]) == 0
    assert "tuning summary" in capsys.readouterr().out
    wrong = tmp_path / "w.npz"
    np.savez(wrong, Z=np.ones((8, 16), np.float32))
    assert main(["tune", target, "--trials", "2", "--inputs", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert "takes inputs X; the file has no X (it has Z)" in err
    assert main(["tune", target, "--trials", "2", "--inputs", str(ops)]) == 2
    assert "not a NumPy .npz file" in capsys.readouterr().err


def test_tune_says_when_the_space_ran_out_before_the_trials(tmp_path, capsys):
    """An element-wise function has a few distinct programs: asked for 64 trials, the
    run measures those and says why it stopped."""
    ops = tmp_path / "ew.py"
    ops.write_text(
        "from tensortune import te\n"
        "def scale():\n"
        "    x = te.placeholder((64, 64), name='X')\n"
        "    y = te.compute((64, 64), lambda i, j: x[i, j] * 2.0 + 1.0, name='Y')\n"
        "    return te.create_func([x, y], name='scale')\n")
    assert main(["tune", f"{ops}:scale", "--trials", "64"]) == 0
    out = capsys.readouterr().out
    assert "of 64 trials: the search proposed no program it had not measured" in out


def test_show_a_function_tuned_as_written(tmp_path, capsys):
    """A database of a function tuned with ``rewrite=False`` (SMX has a rewrite): ``show``
    shows that form, with its record count."""
    import tensortune as tt
    from tensortune.database import Database

    db = tmp_path / "w.db"
    tt.tune(tt.workloads.get("smx", small=True), trials=3, database=db, rewrite=False,
            seed=0)
    capsys.readouterr()
    assert main(["show", "smx", "--small", "--db", str(db)]) == 0
    assert capsys.readouterr().out.startswith(f"# best of {Database(db).count()} records: ")


def test_tune_and_show_with_fixed_weights(tmp_path, capsys):
    """``--weights`` marks inputs as fixed: the tuned workload is the marked function,
    ``show`` finds it with the same names, and a name that is no input is said."""
    db = str(tmp_path / "w.db")
    args = ["gmm", "--shape", "M=12,N=128,K=16", "--db", db]
    assert main(["tune", *args, "--trials", "4", "--weights", "B"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "weights (packed at bind, untimed) │ B │" in out
    assert main(["db", "list", "--db", db]) == 0
    assert "gmm (weights B)" in capsys.readouterr().out
    assert main(["show", *args, "--weights", "B"]) == 0
    assert "weights, packed once: B" in capsys.readouterr().out
    assert main(["show", *args]) == 2           # unmarked: not what was tuned
    capsys.readouterr()
    assert main(["tune", *args, "--trials", "1", "--weights", "C"]) == 2
    err = capsys.readouterr().err
    assert "weight 'C' is an output" in err and "its inputs are A, B" in err


def test_tune_takes_the_algorithms_it_is_named(tmp_path, capsys):
    """``--algorithms none`` tunes the direct form alone; a name that is no algorithm is
    an error that names the valid ones, before anything is stored."""
    from tensortune.database import Database

    db = tmp_path / "t.db"
    args = ["tune", "convlayer", "--small", "--trials", "2", "--db", str(db)]
    assert main(args + ["--algorithms", "none"]) == 0
    assert [name for _, name, _, _ in Database(db).workloads()] == ["convlayer"]
    capsys.readouterr()
    other = str(tmp_path / "u.db")
    assert main(["tune", "convlayer", "--small", "--trials", "2", "--db", other,
                 "--algorithms", "winograd,wino4"]) == 2
    err = capsys.readouterr().err
    assert "no algorithm named 'wino4'; valid: winograd, winograd4" in err
    assert not (tmp_path / "u.db").exists() or not Database(other).workloads()


@pytest.mark.parametrize("trials,best,errors", [
    (64, "1312.4 GFLOP/s (72.6% peak)", 0),
    (512, "  29.6 GFLOP/s (99.9% of bound)", 12),
    (2048, "1329.6 GFLOP/s (> peak reading)", 99)])
def test_the_live_columns_fit_80_columns_at_long_runs(monkeypatch, trials, best, errors):
    # Four-digit trial counts and a run's minutes left once cut the times to "12:34<23…"
    import io

    from rich.console import Console
    from rich.progress import Progress, Task

    from tensortune.cli_live import live_columns

    monkeypatch.setattr(Task, "time_remaining", property(lambda self: 23 * 60 + 45))
    buf = io.StringIO()
    console = Console(file=buf, width=80)
    with Progress(*live_columns(console.width), console=console) as bar:
        task = bar.add_task("re-timing", total=trials, best=best, errors=errors)
        bar.tasks[0].start_time = bar.get_time() - 754
        bar.update(task, completed=trials // 2)
    line = buf.getvalue().splitlines()[-1].rstrip()
    assert len(line) <= 80 and "…" not in line and line.endswith("12:34<23:45"), line
    assert f"{trials // 2}/{trials} best {best} err {errors} " in line, line
