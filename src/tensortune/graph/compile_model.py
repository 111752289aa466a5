"""``tt.compile_model``: import a model, fuse it, tune its tasks, run it with the kernels.

Example:
    >>> compiled = tt.compile_model(model.eval(), torch.randn(1, 3, 224, 224),
    ...                             trials=2000, database="resnet.db")
    >>> y = compiled(x)                      # same result as model(x)
    >>> print(compiled.summary())
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..codegen import Target
from ..database import Database, DatabaseError
from ..kernel import Kernel
from ..measure.roofline import latency_text, microseconds_text
from ..search.guess import guessed_kernel
from ..search.records import best_record
from ..search.task_scheduler import TaskScheduler, TaskState
from ..search.tune import compile, tuned_func, whole_number
from ..search.tuning_task import _open
from ..tir.stmt import PrimFunc
from .executor import Executor
from .fuse import Group, Task, extract_tasks, fuse
from .ir import Graph, GraphError


class CompiledModel:
    """A model compiled to one kernel per fused group. Call it like the model."""

    def __init__(self, graph: Graph, groups: list[Group], tasks: list[Task],
                 states: list[TaskState], kernels: list[Kernel | None], tuned: list[bool],
                 tune_seconds: float, prepack: bool | str = True) -> None:
        self.graph, self.groups, self.tasks, self.states = graph, groups, tasks, states
        self.kernels, self.tuned, self.tune_seconds = kernels, tuned, tune_seconds
        self.executor = Executor(graph, groups, kernels, prepack=prepack)

    def __call__(self, *inputs: Any) -> Any:
        return self.executor(*inputs)

    def __repr__(self) -> str:
        shapes = ", ".join(str(list(self.graph.nodes[n].shape)) for n in self.graph.inputs)
        return (f"CompiledModel(inputs {shapes}; {len(self.tasks)} tasks, "
                f"{len(self.groups)} kernels, {sum(self.tuned)} tuned; .summary() for each)")

    def profile(self, *inputs: Any, repeat: int = 10) -> str:
        """Measured time of each task's kernels in a real call, largest first."""
        per_task: dict[str, float] = {}
        owner = {g: t.name for t in self.tasks for g in t.groups}
        for g, sec in self.executor.profile(*inputs, repeat=repeat):
            per_task[owner[g]] = per_task.get(owner[g], 0.0) + sec
        total = sum(per_task.values())
        w = max([28, *map(len, per_task)])     # whole names: a cut one reads as another
        rows = [f"{'task':{w}} {'time (us)':>10} {'share':>6}"]
        for name, sec in sorted(per_task.items(), key=lambda kv: -kv[1]):
            rows.append(f"{name:{w}} {sec * 1e6:10.1f} {100 * sec / total:5.1f}%")
        rows.append(f"kernels in total {total * 1e3:.3f} ms")
        return "\n".join(rows)

    def summary(self) -> str:
        """One line per task: weight, trials, best latency, share of the model's time."""
        # A task whose kernel came from its function's unmarked records has no timing
        # of its own (``_task_kernel``).
        own = [t and math.isfinite(s.best_latency) for s, t in zip(self.states, self.tuned)]
        total = sum(s.cost for s, o in zip(self.states, own) if o)
        w = max([28, *(len(st.name) for st in self.states)])
        rows = [f"{'task':{w}} {'weight':>6} {'trials':>7} {'best (us)':>10} {'share':>6}"]
        for st, tuned, o in zip(self.states, self.tuned, own):
            lat = f"{microseconds_text(st.best_latency):>10}" if o else \
                f"{'unmarked' if tuned else 'untuned':>10}"
            share = f"{100 * st.cost / total:5.1f}%" if o and total else f"{'-':>6}"
            rows.append(f"{st.name:{w}} {st.weight:6.0f} {st.trials:7d} {lat} {share}")
        if any(t and not o for t, o in zip(self.tuned, own)):
            rows.append("unmarked: the kernel of the best record of the task's function "
                        "with its weights unmarked (a database tuned before they were)")
        est = latency_text(total) if total else "n/a"
        if total and not all(own):     # the untuned and unmarked have no timing here
            est += f" ({sum(own)} of {len(own)} tasks timed)"
        rows.append(f"{len(self.tasks)} tasks, {len(self.groups)} kernels; kernel time from "
                    f"tuning records {est}; tuning took {self.tune_seconds:.0f} s")
        choices = self.executor.prepacker.choices if self.executor.prepacker else []
        kept = [c for c in choices if c.kept]
        if kept:
            timed = [c for c in kept if c.tuned_us < float("inf")]
            gain = f"; timed, {len(timed)} of them took {sum(c.tuned_us for c in timed):.1f}" \
                f" us a call in all, {sum(c.packed_us for c in timed):.1f} cut" if timed else ""
            rows.append(f"{len(kept)} of {len(choices)} kernels with weight-only "
                        f"stages run them once, at compile "
                        f"({sum(c.packed_bytes for c in kept) / 1024:.0f} KiB){gain}")
        return "\n".join(rows)


def compile_model(model: Any, example: Any, *, trials: int = 0,
                  database: str | Path | Database | None = None,
                  target: Target | None = None, scheduler: str = "gradient",
                  batch_size: int = 16, seed: int | None = None,
                  progress: Callable[[TaskState, dict], None] | None = None,
                  prepack: bool | str = True) -> CompiledModel:
    """Compile ``model`` (an ``nn.Module`` in eval mode, or a ``graph.Graph``) for inputs
    shaped like ``example`` (a tensor or a tuple of them). ``trials`` new measurements are
    shared by the model's tasks through the task scheduler (``"gradient"`` or
    ``"round-robin"``); records already in ``database`` are reused, so a second call
    resumes. A task with no valid record runs a guessed schedule, not measured but
    checked (``search.guess``: the bundled prior's pick of a few random draws).
    With ``prepack``, the stages of a kernel that read only weights run once, here, where
    that computes the same and runs faster (``graph.prepack``; ``"always"``: wherever it
    computes the same)."""
    whole_number("trials", trials, where="compile_model")
    whole_number("batch_size", batch_size, least=1, where="compile_model")
    tgt = target or Target.host()
    if isinstance(model, Graph):
        graph = model
    elif not callable(model):
        raise GraphError(f"compile_model takes a torch nn.Module (or a graph.Graph), got "
                         f"{type(model).__name__}")
    else:
        from .from_torch import from_torch

        examples = example if isinstance(example, tuple) else (example,)
        graph = from_torch(model, *examples)
    groups = fuse(graph)
    tasks, funcs = extract_tasks(graph, groups)
    db = _open(database)
    # A model with nothing to compute (its output a view of its input, dropout in eval
    # mode) has no task: nothing to tune.
    sched = TaskScheduler(tasks, database=db, target=tgt, strategy=scheduler,
                          batch_size=batch_size, seed=seed, progress=progress) if tasks else None
    t0 = time.perf_counter()
    if trials > 0 and sched is not None:
        sched.tune(trials)
    seconds = time.perf_counter() - t0
    kernels: list[Kernel | None] = [None] * len(funcs)
    tuned: list[bool] = []
    for task in tasks:
        kern, was_tuned = _task_kernel(task.func, db, tgt)
        tuned.append(was_tuned)
        for g in task.groups:
            kernels[g] = kern
    return CompiledModel(graph, groups, tasks, sched.states if sched else [], kernels, tuned,
                         seconds, prepack)


def _task_kernel(func: PrimFunc, db: Database, target: Target) -> tuple[Kernel, bool]:
    # A task with marked weights is a workload of its own; a database tuned before
    # weights were marked holds the same function unmarked, whose best is still good
    # (the executor then cuts it where that times faster).
    for f in (func, replace(func, weights=())) if func.weights else (func,):
        try:
            best_record(tuned_func(f, db, target), db, target)
        except DatabaseError:
            continue
        return compile(f, database=db, target=target), True
    # no record for this machine: a guessed schedule, checked
    return guessed_kernel(func, target), False
