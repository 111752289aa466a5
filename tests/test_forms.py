"""Forms of one computation tuned side by side (search/forms.py): how the budget is
shared, and ``tune``/``compile`` returning the fastest form's checked kernel."""

from dataclasses import dataclass

import numpy as np

import tensortune as tt
from tensortune.database import Database
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.search.forms import Forms, algorithm_forms
from tensortune.search.tune import tuned_func


@dataclass
class _Task:
    """What ``Forms.pick`` reads of a task."""
    trials: int = 0
    best_latency: float = float("inf")
    exhausted: bool = False
    errors: int = 0
    twins: int = 0


def test_forms_share_the_budget_equally_the_faster_first():
    """Batches of 16 go to the form with the fewest trials, the faster first on a tie."""
    for lat in ([1.0, 2.0], [2.0, 1.0]):
        tasks = [_Task(), _Task()]
        forms = Forms(tasks)   # type: ignore[arg-type]
        while forms.trials < 256:
            t = forms.pick()
            if tasks[0].trials == tasks[1].trials and forms.trials:
                assert t is tasks[lat.index(min(lat))]
            t.trials += 16
            t.best_latency = lat[tasks.index(t)]
        assert tasks[0].trials == tasks[1].trials == 128


def test_an_exhausted_form_gets_no_batch():
    tasks = [_Task(trials=40, best_latency=1.0), _Task(trials=8, exhausted=True)]
    forms = Forms(tasks)   # type: ignore[arg-type]
    assert all(forms.pick() is tasks[0] for _ in range(3))


def test_tune_keeps_the_fastest_form_and_compile_finds_it(tmp_path, capsys):
    """A small CONVLAYER: both forms are tuned and stored under their own workloads; the
    result is the fastest record of either, its kernel computes the direct reference,
    and ``compile`` builds the same form from the database."""
    f = tt.workloads.get("convlayer", small=True)
    assert [name for name, _ in algorithm_forms(f)] == ["winograd"]
    path = tmp_path / "t.db"
    res = tt.tune(f, trials=32, database=path, seed=0)
    db = Database(path)
    target = tt.Target.host()
    fp = target.fingerprint()
    forms = [f] + [g for _, g in algorithm_forms(f)]
    bests = [db.top_k(g.structural_hash(), fp, 1) for g in forms]
    assert all(bests), "each form measured"
    assert res.best_latency == min(b[0].latency for b in bests)
    assert res.func.structural_hash() == tuned_func(f, db, target).structural_hash()
    ins = random_inputs(f, seed=3)
    want = evaluate(f, ins)[0]
    check_close(res.kernel(*[np.copy(a) for a in ins]), want)
    check_close(tt.compile(f, database=path)(*[np.copy(a) for a in ins]), want)
    # GFLOP/s count the direct form's work, whichever form won.
    from tensortune.tir.analysis import flop_count
    assert res.flops == flop_count(f)
    # ``show`` names the form it shows and the other one, each with its records.
    from tensortune.cli import main
    from tensortune.search.tune import stored_forms

    assert main(["show", "convlayer", "--small", "--db", str(path)]) == 0
    head = capsys.readouterr().out.splitlines()[:2]
    stored = {label: (g, rec) for label, g, rec in stored_forms(f, db, target)}
    assert set(stored) == {"direct", "winograd"}
    order = sorted(stored, key=lambda label: stored[label][1].latency)
    for line, label in zip(head, order):
        g, rec = stored[label]
        assert line.startswith(f"# {label} form: best of "
                               f"{db.count(g.structural_hash(), fp)} records: ")
    assert head[1].endswith("(not shown)") and not head[0].endswith("(not shown)")


def test_no_other_form_without_algorithms_or_rewrite(tmp_path):
    f = tt.workloads.get("convlayer", small=True)
    for kw in ({"algorithms": False}, {"rewrite": False}):
        path = tmp_path / f"{next(iter(kw))}.db"
        res = tt.tune(f, trials=4, database=path, seed=0, **kw)
        assert "wino_M" not in str(res.func)
        assert len(Database(path).workloads()) == 1


def test_algorithms_are_named_and_a_wrong_name_says_which_exist(tmp_path):
    """True is the default set, False none, a list those named; a name that is no
    algorithm is an error before any tuning, naming the valid ones."""
    import pytest

    from tensortune.search.forms import algorithm_names

    assert algorithm_names(True) == ("winograd",)
    assert algorithm_names(False) == ()
    assert algorithm_names(["winograd4", "winograd", "winograd4"]) == ("winograd4", "winograd")
    f = tt.workloads.get("convlayer", small=True)
    with pytest.raises(tt.TensorTuneError, match=r"'wino4'.*valid: winograd, winograd4"):
        tt.tune(f, trials=4, database=tmp_path / "t.db", algorithms=["wino4"])
    assert not (tmp_path / "t.db").exists() or not Database(tmp_path / "t.db").workloads()


def test_f4_winograd_is_tuned_when_named_and_compile_finds_it(tmp_path):
    """``algorithms=["winograd4"]``: the direct form and F(4x4, 3x3) are tuned, not F(2x2,
    3x3); the kernel computes the direct reference; ``stored_forms`` lists the F(4x4, 3x3)
    form only where it has records, and ``compile`` weighs it."""
    from tensortune.search.tune import stored_forms
    from tensortune.workloads.conv import conv_layer

    f = conv_layer(1, 8, 8, 8, 8)
    path = tmp_path / "t.db"
    res = tt.tune(f, trials=8, batch_size=4, database=path, seed=0, algorithms=["winograd4"])
    db = Database(path)
    target = tt.Target.host()
    assert len(db.workloads()) == 2
    stored = {label: rec for label, _, rec in stored_forms(f, db, target)}
    assert set(stored) == {"direct", "winograd", "winograd4"}
    assert stored["winograd"] is None and stored["winograd4"] is not None
    assert res.best_latency == min(r.latency for r in stored.values() if r is not None)
    ins = random_inputs(f, seed=5)
    want = evaluate(f, ins)[0]
    check_close(res.kernel(*[np.copy(a) for a in ins]), want)
    check_close(tt.compile(f, database=path)(*[np.copy(a) for a in ins]), want)
    # Without records of it, the F(4x4, 3x3) form is not listed.
    assert "winograd4" not in {label for label, _, _ in stored_forms(f, Database(
        tmp_path / "other.db"), target)}
