"""The command line: the built-in example and target."""

from tensortune.cli import main


def test_example_runs_and_checks(capsys):
    assert main(["example", "--size", "64", "--show"]) == 0
    out = capsys.readouterr().out
    assert "checked against float64" in out and "sch.split(" in out


def test_target(capsys):
    assert main(["target"]) == 0
    assert "fingerprint" in capsys.readouterr().out
