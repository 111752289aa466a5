"""The task scheduler: round-robin and gradient allocation, a shared budget, resume."""

import pytest

import tensortune as tt
from tensortune import te
from tensortune.graph import Task
from tensortune.search.task_scheduler import TaskScheduler


def relu_func(n: int) -> tt.tir.PrimFunc:
    x = te.placeholder((n, n), name="x")
    y = te.compute((n, n), lambda i, j: te.max(x[i, j], 0.0), name="relu")
    return te.create_func([x, y], name="relu")


HEAVY = Task("gmm", tt.workloads.get("gmm", M=96, N=96, K=96), 4)
LIGHT = Task("relu", relu_func(32), 1)


def test_gradient_prefers_the_task_that_dominates_latency():
    sched = TaskScheduler([LIGHT, HEAVY], eps=0.0)
    light, heavy = sched.states
    assert sched.pick() is light            # warm-up: a task never tuned comes first
    for st, lat in ((light, 2e-6), (heavy, 1e-4)):
        st.trials, st.best_latency = 16, lat
        st.curve = [(4, lat * 1.5), (8, lat * 1.2), (12, lat * 1.1), (16, lat)]
    assert sched.pick() is heavy
    assert sched.gradient(heavy) < sched.gradient(light) < 0
    # once the heavy task stops improving and is near its similar tasks' rate, the
    # light one's optimistic estimate wins
    heavy.curve = [(t, heavy.best_latency) for t in (4, 8, 12, 16)]
    heavy.trials = 10_000
    assert sched.pick() is light


def test_round_robin_takes_turns_and_bad_names_are_refused():
    sched = TaskScheduler([LIGHT, HEAVY], strategy="round-robin")
    assert [sched.pick().name for _ in range(4)] == ["relu", "gmm", "relu", "gmm"]
    with pytest.raises(tt.TensorTuneError, match="unknown task scheduler 'greedy'"):
        TaskScheduler([LIGHT], strategy="greedy")
    with pytest.raises(tt.TensorTuneError, match="at least one task"):
        TaskScheduler([])


def test_shared_budget_goes_to_the_heavy_task_and_resumes(tmp_path):
    db = tmp_path / "t.db"
    sched = TaskScheduler([LIGHT, HEAVY], database=db, batch_size=4, seed=0, eps=0.0)
    states = sched.tune(40)
    light, heavy = states
    assert light.new_trials + heavy.new_trials == 40
    assert heavy.new_trials > light.new_trials >= 1   # the relu space has few programs
    assert heavy.best_latency < float("inf") and light.best_latency < float("inf")
    # a new scheduler on the same database starts from what is stored: no warm-up
    again = TaskScheduler([LIGHT, HEAVY], database=db, eps=0.0)
    assert [s.trials for s in again.states] == [light.trials, heavy.trials]
    assert [s.best_latency for s in again.states] == [light.best_latency, heavy.best_latency]
    # no task is cold, so the pick follows the gradients of the stored curves (which
    # task that is depends on the latencies measured: relu's 1 trial or gmm's 39)
    assert all(s.trials > 0 for s in again.states)
    assert again.pick() is min(again.states, key=again.gradient)


def test_an_unmet_hope_fades_with_rounds_that_did_not_improve():
    """Two tasks of one kind: the slow one is held to the fast one's flop rate, a hope it
    may never meet; each round without improvement weakens it, so the budget moves on."""
    small = Task("gmm_small", tt.workloads.get("gmm", M=96, N=96, K=96), 1)
    big = Task("gmm_big", tt.workloads.get("gmm", M=128, N=128, K=128), 8)
    sched = TaskScheduler([small, big], eps=0.0)     # weights: about equal model time
    slow, fast = sched.states
    assert slow.kind == fast.kind
    slow.trials, slow.best_latency = 32, slow.flops / 5e9           # 5 GFLOP/s
    fast.trials, fast.best_latency = 32, fast.flops / 100e9         # 100 GFLOP/s
    fast.curve = [(16, fast.best_latency * 2), (32, fast.best_latency)]
    slow.curve = [(16, slow.best_latency * 1.01), (32, slow.best_latency)]
    assert sched.pick() is slow                     # improving, and far from the rate
    fresh = sched.gradient(slow)
    slow.curve += [(32 + 16 * i, slow.best_latency) for i in range(1, 11)]
    slow.trials = slow.curve[-1][0]
    assert fresh < sched.gradient(slow) < 0
    assert sched.pick() is fast                     # ten rounds without a gain


def test_a_task_with_another_algorithm_tunes_every_form(tmp_path):
    """A 3x3 convolution task is tuned in both its forms, as ``tune`` tunes it
    (``search.forms``): both are stored, the task's trials and best count both, and a
    new scheduler on the database resumes from them."""
    from tensortune.database import Database
    from tensortune.search.tune import stored_forms, tuned_func

    conv = Task("convlayer", tt.workloads.get("convlayer", small=True), 1)
    db = tmp_path / "f.db"
    sched = TaskScheduler([conv], database=db, batch_size=4, seed=0, retime_top=0)
    [st] = sched.tune(16)
    assert sorted(name for _, name, _, _ in Database(db).workloads()) == \
        ["convlayer", "convlayer_winograd"]
    assert [t.trials for t in st.tuner.tasks] == [8, 8]       # equal shares
    target = tt.Target.host()
    forms = stored_forms(conv.func, Database(db), target)
    assert [label for label, _, _ in forms] == ["direct", "winograd"]
    assert all(top is not None for _, _, top in forms)
    assert st.best_latency == min(top.latency for _, _, top in forms)
    again = TaskScheduler([conv], database=db)
    assert again.states[0].trials == 16 and again.states[0].best_latency == st.best_latency
    # The model's kernel is the faster form's.
    fastest = min(forms, key=lambda f: f[2].latency)[1]
    assert tuned_func(conv.func, Database(db), target).structural_hash() == \
        fastest.structural_hash()


def test_tasks_that_only_move_data_are_scheduled():
    """A transpose has no floating-point work: no flop rate to hold it to (the gradient
    divided by a best rate of 0 and a U-Net's concatenation crashed the scheduler)."""
    x = te.placeholder((64, 48), name="x")
    y = te.compute((48, 64), lambda i, j: x[j, i], name="t")
    move = Task("transpose", te.create_func([x, y], name="transpose"), 1)
    sched = TaskScheduler([move, LIGHT], eps=0.0)
    moved, light = sched.states
    assert moved.flops == 0
    for st, lat in ((moved, 3e-6), (light, 2e-6)):
        st.trials, st.best_latency = 16, lat
        st.curve = [(8, lat * 1.5), (16, lat)]
    assert sched.gradient(moved) == pytest.approx((1 - sched.alpha) * -3e-6 / 16)
    assert sched.pick() in (moved, light)
