"""The task scheduler: many tuning tasks (a model's distinct kernels) share one budget.

The objective is the model's latency, ``sum_i w_i * g_i``: task i's best latency ``g_i``
times its weight ``w_i`` (how many times the model runs it). Each round gives one batch of
trials to one task:
- ``round-robin``: the tasks in turn;
- ``gradient`` (Ansor, section 6): after a warm-up round for every task, the task whose
  next trials are expected to cut the objective most, by the estimate
  ``w_i * (alpha * backward_i + (1 - alpha) * forward_i)``, where ``backward_i`` is the
  latency gained per trial over the task's last ``window`` rounds, and ``forward_i`` the
  more hopeful of two guesses: ``-g_i / t_i`` (the latency halves again with as many
  trials as it has had) and ``beta * C_i / V_i - g_i`` (it reaches ``1 / beta`` of the
  best flop rate ``V_i`` of the similar tasks: the same operators, other shapes), this
  second guess halved for each round since the task last improved. Tasks
  are similar when their funcs have the same name and the same blocks with the same
  numbers of spatial and reduction axes longer than one (``op_kind``): a depthwise
  convolution (a channel reduction of extent one) is never held to the flop rate of a
  dense one, which it cannot reach being bound by memory. With probability ``eps`` a
  random task is picked instead.

Trials already in the database count for a task, so a second run resumes: a task that was
tuned before needs no warm-up and its history starts from its stored best.

Example:
    >>> sched = TaskScheduler(tasks, database="model.db", strategy="gradient")
    >>> sched.tune(trials=512)
    >>> [(t.name, t.trials, t.best_latency) for t in sched.states]
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..codegen import Target
from ..database import Database
from ..errors import TensorTuneError
from ..measure import LocalBuilder, LocalRunner
from ..measure.builder import SHARE
from ..tir.analysis import flop_count
from ..tir.functor import blocks_in
from ..tir.stmt import PrimFunc
from .forms import Forms, make_forms
from .tune import SEARCH_REPEAT_MS, stored_forms
from .tuning_task import _open


def op_kind(func: PrimFunc) -> tuple:
    """What similar tasks share: the func's name and, per block, its numbers of spatial
    and reduction axes of extent above one; other shapes are left out.

    Example:
        >>> op_kind(tt.workloads.get("gmm", M=64, N=64, K=64))
        ('gmm', (2, 1))
    """
    blocks = tuple((sum(iv.kind == "S" and iv.extent > 1 for iv in b.iter_vars),
                    sum(iv.kind == "R" and iv.extent > 1 for iv in b.iter_vars))
                   for b in blocks_in(func.body))
    return (func.name, *blocks)


@dataclass
class TaskState:
    """What the scheduler knows of one task."""

    name: str
    func: PrimFunc
    weight: float
    flops: float
    kind: tuple = ()
    trials: int = 0                   # in the database (this run and earlier ones)
    new_trials: int = 0               # measured in this run
    errors: int = 0
    rounds: int = 0                   # rounds given in this run
    best_latency: float = float("inf")
    curve: list[tuple[int, float]] = field(default_factory=list)   # (trials, best)
    tuner: Forms | None = None        # the task's forms (``search.forms``)
    exhausted: bool = False

    @property
    def cost(self) -> float:
        """Weighted latency: this task's share of the model's time."""
        return self.weight * self.best_latency


class TaskScheduler:
    def __init__(self, tasks: Sequence[Any], *, database: str | Path | Database | None = None,
                 target: Target | None = None, strategy: str = "gradient",
                 batch_size: int = 16, seed: int | None = None, alpha: float = 0.2,
                 beta: float = 2.0, window: int = 3, eps: float = 0.05,
                 timeout: float = 10.0, tune_strategy: str = "evolutionary",
                 progress: Callable[[TaskState, dict], None] | None = None,
                 retime_top: int = 5) -> None:
        """``tasks``: objects with ``name``, ``func`` and ``weight`` (``graph.Task``);
        ``retime_top``: at the end, each task tuned in this run has its fastest records
        timed again (``TuningTask.retime``; 0 leaves them as measured)."""
        if strategy not in ("gradient", "round-robin"):
            raise TensorTuneError(f"unknown task scheduler {strategy!r}; use 'gradient' or "
                                  "'round-robin'")
        if not tasks:
            raise TensorTuneError("the task scheduler needs at least one task")
        self.db = _open(database)
        self.target = target or Target.host()
        self.strategy, self.batch_size = strategy, batch_size
        self.alpha, self.beta, self.window, self.eps = alpha, beta, window, eps
        self.rng = random.Random(seed)
        self.seed, self.timeout, self.tune_strategy = seed, timeout, tune_strategy
        self.progress, self.retime_top = progress, retime_top
        fp = self.target.fingerprint()
        self.states = []
        for t in tasks:
            st = TaskState(t.name, t.func, float(t.weight), flop_count(t.func), op_kind(t.func))
            # Every form the task's tuning searches (``search.forms``) counts.
            forms = stored_forms(t.func, self.db, self.target)
            st.trials = sum(self.db.count(f.structural_hash(), fp) for _, f, _ in forms)
            tops = [top.latency for _, _, top in forms if top is not None]
            if tops:
                st.best_latency = min(tops)
                st.curve.append((st.trials, st.best_latency))
            self.states.append(st)
        self._next = 0
        self.spent = 0

    @property
    def objective(self) -> float:
        """The model's estimated latency from tuned tasks (inf while one has none)."""
        return sum(s.cost for s in self.states)

    def pick(self) -> TaskState | None:
        """The task that gets the next round, or None when every task is exhausted."""
        live = [s for s in self.states if not s.exhausted]
        if not live:
            return None
        if self.strategy == "round-robin":
            st = live[self._next % len(live)]
            self._next += 1
            return st
        cold = [s for s in live if s.trials == 0 or
                (s.best_latency == float("inf") and s.rounds < 2)]
        if cold:
            return cold[0]
        live = [s for s in live if s.best_latency < float("inf")]
        if not live:
            return None
        if self.rng.random() < self.eps:
            return self.rng.choice(live)
        return min(live, key=self.gradient)

    def gradient(self, st: TaskState) -> float:
        """Expected change of the objective per trial given to ``st`` (negative = gain)."""
        g, t = st.best_latency, max(st.trials, 1)
        backward = 0.0
        if len(st.curve) > self.window:
            (t0, g0), (t1, g1) = st.curve[-1 - self.window], st.curve[-1]
            backward = (g1 - g0) / max(t1 - t0, 1)
        best_rate = max(s.flops / s.best_latency for s in self.states
                        if s.best_latency < float("inf") and s.kind == st.kind)
        forward = -g / t
        if best_rate > 0:
            # The hope of reaching the similar tasks' rate halves with each round that did
            # not improve the task: tasks of one kind still differ (a depthwise conv at
            # 112x112 spills the caches, at 7x7 it does not), and an unmet hope must not
            # take the whole budget. Tasks that only move data (a concatenation, a
            # transpose) have no rate to compare: their own curve alone.
            hope = (self.beta * st.flops / best_rate - g) * 0.5 ** self._stale_rounds(st)
            forward = min(forward, hope)
        return st.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    @staticmethod
    def _stale_rounds(st: TaskState) -> int:
        """Rounds of this run since the task's best last improved."""
        n = 0
        for (_, prev), (_, cur) in zip(st.curve[-2::-1], st.curve[::-1]):
            if cur < prev:
                break
            n += 1
        return n

    def tune(self, trials: int) -> list[TaskState]:
        """Spend ``trials`` new measurements across the tasks; returns the task states."""
        builder = LocalBuilder(self.target, share=SHARE)
        self.spent, t0 = 0, time.perf_counter()
        with LocalRunner(timeout=self.timeout, min_repeat_ms=SEARCH_REPEAT_MS) as runner:
            while self.spent < trials:
                st = self.pick()
                if st is None:
                    break
                tuner = st.tuner
                if tuner is None:   # the task's forms, as ``tune`` makes them
                    tuner = st.tuner = make_forms(st.func, self.db, self.target, name=st.name,
                                                  strategy=self.tune_strategy, seed=self.seed)

                def report(rec: Any, st: TaskState = st) -> None:
                    self.spent += 1
                    st.trials += 1
                    st.new_trials += 1
                    st.errors += 0 if rec.ok else 1
                    st.best_latency = min(st.best_latency, rec.latency)
                    if self.progress is not None:
                        self.progress(st, {"spent": self.spent, "total": trials,
                                           "objective": self.objective, "states": self.states,
                                           "elapsed": time.perf_counter() - t0})
                tuner.step(tuner.pick(), builder, runner,
                           min(self.batch_size, trials - self.spent), report)
                st.rounds += 1
                st.exhausted = tuner.exhausted
                st.curve.append((st.trials, st.best_latency))
            for st in self.states:
                if st.tuner is not None and st.new_trials and self.retime_top > 1:
                    st.tuner.retime(builder, runner, self.retime_top)
                    st.best_latency = st.tuner.best_latency
        builder.prune_cache()
        return self.states
