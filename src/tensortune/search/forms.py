"""Forms of one computation tuned side by side: the function as ``tune`` gets it (after
the rewrites that always pay, ``tensortune.rewrite.rewrite``) and each other algorithm
for it (``ALGORITHMS``: Winograd's F(2x2, 3x3) for a 3x3 convolution by default, and
F(4x4, 3x3) when asked for), each its own workload in the database with its own search,
checked against the same reference.

F(4x4, 3x3) is not a default. Its programs cost 2-4x an F(2x2, 3x3) program's gcc time
(1.56-2.26 s a build against 0.52-0.71 on the Xeon of RESULTS.md), and its search needs
more trials: on CONVLAYER its best read 1.005 ms after 125 trials in one run, 0.503 ms
after 192 in another. Given 256 trials of its own it ran C2D 1.09x faster than F(2x2,
3x3) given as many, and CONVLAYER 0.98x; within a 256-trial budget it only took trials
from the other forms.

Another algorithm is not always the faster one, and its search may start slower: on
CONVLAYER the Winograd form's best after 32 trials read 114-161 GFLOP/s against the
direct form's 350, after 128 trials 309-647 and after 256 536-599, where the direct
form's levels off near 490 from about 128 trials (RESULTS.md). So the forms share the
budget equally (``Forms.pick``: the form with the fewest trials, the faster on a tie):
a share of a quarter for the slower form after a warm-up of 32 trials each left
CONVLAYER's Winograd form at 64 trials and the run at 430 GFLOP/s, equal shares at
591. The result is the fastest record of all forms, after re-timing the best of each in
the same rounds.

Example:
    >>> forms = algorithm_forms(tt.workloads.get("convlayer"))   # [("winograd", func)]
    >>> algorithm_forms(tt.workloads.get("convlayer"), ["winograd4"])    # F(4x4, 3x3) only
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..codegen import Target
from ..database import Database, TuningRecord
from ..errors import TensorTuneError
from ..measure import LocalBuilder, LocalRunner
from ..rewrite.winograd import winograd, winograd4
from ..tir.stmt import PrimFunc
from .records import retime_records
from .tuning_task import TuningTask

Algorithm = Callable[[PrimFunc], "PrimFunc | None"]
# Every other algorithm a computation's form can take, by the name its workload carries;
# DEFAULT_ALGORITHMS are those tuned when the caller does not name them (module docstring).
ALGORITHMS: dict[str, Algorithm] = {"winograd": winograd, "winograd4": winograd4}
DEFAULT_ALGORITHMS: tuple[str, ...] = ("winograd",)


def algorithm_names(algorithms: bool | Sequence[str]) -> tuple[str, ...]:
    """The algorithms ``algorithms`` asks for: True the defaults, False none, else the
    names given, each one of ``ALGORITHMS``.

    Example:
        >>> algorithm_names(True), algorithm_names(["winograd4"])
        (('winograd',), ('winograd4',))
    """
    if isinstance(algorithms, bool):
        return DEFAULT_ALGORITHMS if algorithms else ()
    if isinstance(algorithms, str):
        algorithms = [algorithms]
    names = tuple(dict.fromkeys(algorithms))
    bad = [n for n in names if n not in ALGORITHMS]
    if bad:
        raise TensorTuneError(f"algorithms: no algorithm named {', '.join(map(repr, bad))}; "
                              f"valid: {', '.join(ALGORITHMS)} (or True for "
                              f"{', '.join(DEFAULT_ALGORITHMS)}, False for none)")
    return names


def algorithm_forms(func: PrimFunc, algorithms: bool | Sequence[str] = True
                    ) -> list[tuple[str, PrimFunc]]:
    """(name, function) of each algorithm of ``algorithms`` (``algorithm_names``) that
    applies to ``func``."""
    out = []
    for label in algorithm_names(algorithms):
        new = ALGORITHMS[label](func)
        if new is not None:
            out.append((label, new))
    return out


def make_forms(func: PrimFunc, db: Database, target: Target, *, strategy: Any = "evolutionary",
               name: str | None = None, rewrite: bool = True, space: Any = None,
               inputs: Any = None, algorithms: bool | Sequence[str] = True,
               **common: Any) -> Forms:
    """The forms ``tune`` and the task scheduler search for ``func``: a ``TuningTask`` of
    ``func`` (``common`` holds its other arguments), and one of each other algorithm of
    ``algorithms`` for it (``algorithm_forms``), named ``<name>_<algorithm>``, checked
    on the same case and counting ``func``'s FLOPs. None of those for a template
    ``space`` (it schedules the function as written), a strategy object (one search
    state cannot serve two tasks) or ``rewrite=False`` (tune as written).

    Example:
        >>> forms = make_forms(tt.workloads.get("convlayer"), db, target, seed=0)
        >>> len(forms.tasks)        # 2: CONVLAYER as given, and its Winograd form
    """
    # (Not a PrimFunc: the TuningTask says so.)
    chosen = algorithm_names(algorithms)    # checked even where none applies
    alts = algorithm_forms(func, chosen) if rewrite and space is None and \
        isinstance(strategy, str) and isinstance(func, PrimFunc) else []
    base = name or (func.name if isinstance(func, PrimFunc) else "")
    names = [base] + [f"{base}_{label}" for label, _ in alts]
    task = TuningTask(func, db, target, strategy=strategy, name=name, rewrite=rewrite,
                      space=space, inputs=inputs, kin=names[1:], **common)
    tasks = [task]
    for (_, alt), own in zip(alts, names[1:]):
        tasks.append(TuningTask(alt, db, target, strategy=strategy, name=own, rewrite=False,
                                case=(task.ins, task.expected), flops=task.flops,
                                kin=[n for n in names if n != own], **common))
    return Forms(tasks)


class Forms:
    """The tasks of one computation's forms, the first the function as given; advanced a
    batch at a time like one ``TuningTask``.

    Example:
        >>> forms = Forms([direct_task, winograd_task])
        >>> forms.step(forms.pick(), builder, runner, 16)
    """

    def __init__(self, tasks: list[TuningTask]) -> None:
        self.tasks = tasks
        self.history: list[tuple[int, float]] = []

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def errors(self) -> int:
        return sum(t.errors for t in self.tasks)

    @property
    def twins(self) -> int:
        return sum(t.twins for t in self.tasks)

    @property
    def best_latency(self) -> float:
        return min(t.best_latency for t in self.tasks)

    @property
    def exhausted(self) -> bool:
        return all(t.exhausted for t in self.tasks)

    def pick(self) -> TuningTask:
        """The task that gets the next batch: of the forms not exhausted, the one with the
        fewest trials, the faster on a tie."""
        live = [t for t in self.tasks if not t.exhausted] or self.tasks
        return min(live, key=lambda t: (t.trials, t.best_latency))

    def step(self, task: TuningTask, builder: LocalBuilder, runner: LocalRunner, n: int,
             progress: Callable[[TuningRecord], None] | None = None) -> None:
        """One batch of up to ``n`` candidates for ``task`` (``pick``'s choice)."""
        task.step(builder, runner, n, self._each(progress))

    def sched_pressure(self, builder: LocalBuilder, runner: LocalRunner, k: int,
                       progress: Callable[[TuningRecord], None] | None = None) -> None:
        """The fastest form's best programs built again with gcc's pre-RA scheduling
        (``TuningTask.try_sched_pressure``)."""
        self.leader().try_sched_pressure(builder, runner, k, self._each(progress))

    def _each(self, progress: Callable[[TuningRecord], None] | None
              ) -> Callable[[TuningRecord], None]:
        def each(rec: TuningRecord) -> None:
            self.history.append((self.trials, self.best_latency))
            if progress is not None:
                progress(rec)
        return each

    def leader(self) -> TuningTask:
        return min(self.tasks, key=lambda t: t.best_latency)

    def retime(self, builder: LocalBuilder, runner: LocalRunner, k: int = 5) -> None:
        """Time the ``k`` fastest records again, each form's best among them, in the same
        alternating rounds (``records.retime_records``)."""
        tops = [(t, r) for t in self.tasks for r in t.db.top_k(t.workload, t.fingerprint, k)]
        tops.sort(key=lambda tr: tr[1].latency)
        chosen = tops[:k]
        for t in self.tasks:    # every form's best is compared in the same rounds
            mine = [tr for tr in tops if tr[0] is t]
            if mine and not any(tr[0] is t for tr in chosen):
                chosen.append(mine[0])
        if len(chosen) < 2:
            return
        out = retime_records(self.tasks[0].db, [t.func for t, _ in chosen],
                             [r for _, r in chosen], builder, runner, self.tasks[0].ins,
                             self.tasks[0].expected)
        for t in self.tasks:
            t.take_retimed(out)

    def best(self) -> tuple[TuningTask, TuningRecord | None]:
        """The form with the fastest record, and that record."""
        recs = [(t, t.best_record()) for t in self.tasks]
        found = [(t, r) for t, r in recs if r is not None]
        if not found:
            return self.tasks[0], None
        return min(found, key=lambda tr: tr[1].latency)  # type: ignore[union-attr]

    def close(self) -> None:
        for t in self.tasks:
            t.close()
