"""``tt.tune`` and ``tt.compile``: the tuning loop and the way back to a kernel.

The loop: the space generator makes design spaces; the search strategy proposes a batch;
the builder compiles it in parallel; the runner checks each candidate against the float64
reference and times it; each result goes to the database as soon as it exists (a killed
run loses nothing measured) and back to the strategy. Only checked records can be best.

Example:
    >>> result = tt.tune(func, trials=64, database="tuning.db")
    >>> result.best_latency, result.gflops
    >>> kernel = tt.compile(func, database="tuning.db")       # later, no search
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen import Target
from ..database import Database, TuningRecord
from ..errors import TensorTuneError
from ..kernel import Kernel, build
from ..measure import LocalBuilder, LocalRunner
from ..measure.builder import SHARE
from ..measure.roofline import latency_text
from ..rewrite import rewrite as rewritten_form
from ..schedule import Schedule, Trace
from ..tir.constant_stages import mark_weights
from ..tir.stmt import PrimFunc
from .forms import ALGORITHMS, DEFAULT_ALGORITHMS, algorithm_forms, make_forms
from .records import best_record, fresh_best, replay
from .search_strategy import SearchStrategy
from .tuning_task import _open, not_a_func

__all__ = ["TuneResult", "compile", "stored_forms", "tune", "tuned_func"]


@dataclass
class TuneResult:
    func: PrimFunc
    record: TuningRecord | None
    flops: float
    trials: int = 0                  # measured in this run
    errors: int = 0
    seconds: float = 0.0
    database: Path | None = None
    history: list[tuple[int, float]] = field(default_factory=list)  # (trial, best latency)
    target: Target | None = None
    waited: float = 0.0              # seconds the load guard waited for a quiet machine
    twins: int = 0                   # candidates whose C was timed before: not re-timed
    exhausted: bool = False          # stopped short: the search proposed nothing new

    @property
    def best_latency(self) -> float:
        return self.record.latency if self.record else float("inf")

    @property
    def gflops(self) -> float:
        return self.flops / self.best_latency / 1e9 if self.record else 0.0

    @property
    def trace(self) -> Trace:
        if self.record is None:
            raise TensorTuneError("no valid candidate was found; see the errors in the database")
        return Trace.from_json(self.record.trace)

    def schedule(self) -> Schedule:
        return Schedule.from_trace(self.func, self.trace)

    def __repr__(self) -> str:
        # The dataclass's own repr printed the whole function and record: pages of it.
        best = "no valid candidate" if self.record is None else \
            f"best {latency_text(self.best_latency)}, {self.gflops:.1f} GFLOP/s"
        return (f"TuneResult({self.func.name}: {best}, {self.trials} trials in "
                f"{self.seconds:.1f} s, {self.errors} errors, database "
                f"{self.database or 'in memory'})")

    @property
    def kernel(self) -> Kernel:
        return build(self.schedule(), self.target)


# A search candidate's three timings each loop for at least this long. 5 ms: over twelve
# alternating rounds of the best records of ten workloads, the spread of a candidate's
# median was about that of 10 ms loops (coefficient of variation 0.7-13.2% against
# 0.3-10.5%, the host's noise), and 128-trial C1D runs made 13-17% more trials per
# second, their best found moving both ways by up to 7%, as between seeds (RESULTS.md).
# Short loops read some kernels faster (GMM's by 7-10%), alike for a workload's
# candidates. The re-timing of the best at the end
# keeps 20 ms (``records.RETIME_REPEAT_MS``), and that picks the record a run returns.
SEARCH_REPEAT_MS = 5.0
# Trials after which ``tune``'s batches double. A 256-trial DIL run spent 20 of its 78 s
# in the evolution (16 batches of 16, each drawing about 210 programs); TVM's
# MetaSchedule measures 64 a batch. Over three seeds of DIL, CONVLAYER, C2D and TBG,
# alternating (RESULTS.md), the mean best at 256 trials moved by -0.9% to +1.5% and
# the rate by 1.03-1.20x. The first batches stay small: what the search has learnt by
# 64 trials is as before.
DOUBLE_AFTER = 64


def tune(func: PrimFunc, *, trials: int = 64, database: str | Path | Database | None = None,
         target: Target | None = None, strategy: str | SearchStrategy = "evolutionary",
         cost_model: Any = "lgbm", space: Any = None, batch_size: int = 16,
         seed: int | None = None, timeout: float = 10.0, name: str | None = None,
         progress: Callable[[dict], None] | None = None, rewrite: bool = True,
         early_stop: float = 1.5, retime_top: int = 5, prior: bool = True,
         load_guard: bool = True, sched_variants: int = 3,
         draw_workers: int | None = None,
         double_after: int | None = DOUBLE_AFTER,
         inputs: Sequence[np.ndarray] | None = None,
         algorithms: bool | Sequence[str] = True,
         weights: Sequence[str | int] = ()) -> TuneResult:
    """Search for the fastest correct schedule of ``func``; see the module docstring.
    With ``rewrite``, an equivalent cheaper form of ``func`` (``tensortune.rewrite``) is
    tuned instead, after a check on random inputs; ``result.func`` is the form tuned. A
    template ``space`` schedules ``func`` as written.
    A candidate whose first timing is over ``early_stop`` times the best latency so far is
    timed once, not the runner's ``repeat`` times (to be the best its first timing would
    have to read 1.5x slow, and the load guard keeps busy spells out of timings). Each
    timing is a loop of at least ``SEARCH_REPEAT_MS`` (5 ms). At the end the
    ``retime_top`` fastest records are timed again in 20 ms loops, in alternating rounds,
    and each keeps its quietest timing (``TuningTask.retime``; 0 leaves them as measured).
    Before this run has measured anything, its cost model ranks candidates with a model
    of other workloads' records (``search.transfer``; ``prior=False`` leaves the bundled
    prior out when the database has too few of them). With ``load_guard`` each candidate
    is timed only once a reference kernel (the best so far) runs at its quiet speed,
    waiting up to 2 s per batch for a busy spell of a shared machine to pass
    (``measure.LoadGuard``; ``result.waited`` says how long it waited). The last
    ``sched_variants`` trials (when ``trials`` is at least 16 times that) build the fastest
    programs again with gcc's pre-RA scheduling (``compile_variants``); 0 leaves them to
    the search.
    ``draw_workers`` processes replay and score the search's proposals (``DrawPool``);
    None takes one per core when there are two or more and ``trials`` is at least 32
    (starting two and their first draw took 0.25 s here), 0 proposes in this process.
    Once ``double_after`` trials are measured, batches are ``2 * batch_size``: the
    evolution, its draws and the model's retraining run half as often (None keeps
    ``batch_size`` throughout).
    Every candidate is checked against the float64 reference on random inputs
    (``reference.reference_case``), or on ``inputs`` when given: example arrays, one per
    input of ``func``, for a function whose reference is finite only on some inputs
    (``log(x - 2)``, indices into a short table). ``tt.compile`` re-checks a stored best
    that went stale on random inputs.
    With ``algorithms``, each other algorithm for the computation (``search.forms``:
    Winograd's F(2x2, 3x3) for a 3x3 convolution) is tuned beside it as a form of its
    own, sharing the budget equally, and the result is the fastest record of any form
    (``result.func`` the form it ran); GFLOP/s count the work of the form given.
    ``algorithms`` may instead name them (``search.forms.ALGORITHMS``): ``["winograd4"]``
    tunes F(4x4, 3x3) beside the direct form, at 2-4x F(2x2, 3x3)'s gcc time a trial.
    ``progress`` gets a dict after each trial (``stage`` "trial", the record in ``last``)
    and around the re-timing ("retiming", then "retimed" with the best after it).
    ``weights`` names inputs that stay fixed while the kernel is used (a layer's weight
    and bias; ``tir.constant_stages.mark_weights``): the search times each program
    without the stages that read only them (a weight packed into panels, a Winograd
    weight transform), and ``result.kernel.bind(...)`` runs those once, at bind. The
    marked function is a workload of its own (``tt.compile`` takes the same ``weights``).
    When it ends, the kernel cache is pruned to its limit (``codegen.kernel_cache``)."""
    whole_number("trials", trials)
    whole_number("batch_size", batch_size, least=1)
    whole_number("retime_top", retime_top)
    whole_number("sched_variants", sched_variants)
    if double_after is not None:
        whole_number("double_after", double_after)
    if not timeout > 0:
        raise TensorTuneError(f"tune: timeout must be a positive number of seconds, "
                              f"got {timeout!r}")
    if weights and isinstance(func, PrimFunc):    # else TuningTask says what func is
        func = mark_weights(func, weights)
    tgt = target or Target.host()
    db = _open(database)
    if draw_workers is None:
        draw_workers = tgt.cores if tgt.cores > 1 and trials >= 32 else 0
    tuner = make_forms(func, db, tgt, strategy=strategy, name=name, rewrite=rewrite,
                       space=space, inputs=inputs, algorithms=algorithms,
                       cost_model=cost_model, seed=seed, early_stop=early_stop, prior=prior,
                       load_guard=load_guard, draw_workers=draw_workers)
    tasks = tuner.tasks
    task = tasks[0]
    builder = LocalBuilder(tgt, share=SHARE)
    result = TuneResult(task.func, None, task.flops, database=db.path, target=tgt)
    t0 = time.perf_counter()

    def report(rec: TuningRecord | None, stage: str = "trial") -> None:
        if progress is None:
            return
        best = tuner.best_latency
        progress({"stage": stage, "trials": tuner.trials, "total": trials, "best": best,
                  "gflops": task.flops / best / 1e9 if best < float("inf") else 0.0,
                  "errors": tuner.errors, "elapsed": time.perf_counter() - t0, "last": rec})

    variants = sched_variants if trials >= 16 * sched_variants else 0
    with LocalRunner(timeout=timeout, min_repeat_ms=SEARCH_REPEAT_MS) as runner:
        try:
            while tuner.trials < trials - variants and not tuner.exhausted:
                t = tuner.pick()
                wide = double_after is not None and t.trials >= double_after
                n = 2 * batch_size if wide else batch_size
                tuner.step(t, builder, runner, min(n, trials - variants - tuner.trials), report)
        finally:
            tuner.close()
        if variants and tuner.trials:
            tuner.sched_pressure(builder, runner, variants, report)
        if retime_top > 1 and tuner.trials:
            report(None, "retiming")
            tuner.retime(builder, runner, retime_top)
            report(None, "retimed")
    builder.prune_cache()
    result.trials, result.errors, result.history = tuner.trials, tuner.errors, tuner.history
    result.seconds = time.perf_counter() - t0
    result.waited = sum(t.guard.waited for t in tasks if t.guard is not None)
    result.twins = tuner.twins
    result.exhausted = tuner.exhausted
    best_task, result.record = tuner.best()
    result.func = best_task.func
    return result


def whole_number(name: str, value: Any, least: int = 0, where: str = "tune") -> None:
    """Raise TensorTuneError unless ``value`` is an int of at least ``least``: a budget of -3
    trials ran none and said nothing, one of 2.5 failed deep in the search, and a batch
    size of 0 measured nothing. ``where`` names the caller in the message.

    Example:
        >>> whole_number("trials", 64)
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise TensorTuneError(f"{where}: {name} must be a whole number of at least {least}, "
                              f"got {value!r}")


def tuned_func(func: PrimFunc, db: Database, target: Target) -> PrimFunc:
    """The form of ``func`` that ``tune`` searched whose best record in ``db`` is the
    fastest: its rewrite or another algorithm for it (``search.forms``) when the database
    holds records of those, else ``func`` itself."""
    best, out = float("inf"), func
    for _, form, top in stored_forms(func, db, target):
        if top is not None and top.latency < best:
            best, out = top.latency, form
    return out


def stored_forms(func: PrimFunc, db: Database, target: Target
                 ) -> list[tuple[str, PrimFunc, TuningRecord | None]]:
    """(label, function, best record or None) of each form ``tune`` searches for
    ``func``: "direct" (its rewrite when the database holds records of that, else the
    function as given, which ``tune(rewrite=False)`` stores) and each other algorithm
    (``search.forms``) by its name: each default one, and another only where the
    database holds records of it.

    Example:
        >>> [(label, rec.latency) for label, _, rec in stored_forms(f, db, t) if rec]
    """
    fp = target.fingerprint()
    new = rewritten_form(func, target.lanes("float32"))
    top = db.top_k(new.structural_hash(), fp, 1) if new is not None else []
    direct = new if new is not None and top else func
    if not top:
        top = db.top_k(func.structural_hash(), fp, 1)
    out = [("direct", direct, top[0] if top else None)]
    # A form outside the defaults is built only where a workload's name says it was
    # tuned: F(4x4, 3x3) takes 67-137 ms to build, paid for each task of a model.
    labels = [a for a in ALGORITHMS
              if a in DEFAULT_ALGORITHMS or db.has_name_ending(f"_{a}")]
    for label, form in algorithm_forms(func, labels):
        top = db.top_k(form.structural_hash(), fp, 1)
        if top or label in DEFAULT_ALGORITHMS:
            out.append((label, form, top[0] if top else None))
    return out


def compile(func: PrimFunc, *, database: str | Path | Database,  # noqa: A001
            target: Target | None = None, retime: bool = True,
            inputs: Sequence[np.ndarray] | None = None,
            weights: Sequence[str | int] = ()) -> Kernel:
    """The kernel of the best checked record for ``func`` on this machine; no search.
    With ``retime``, a best record whose program now lowers to other C than the one it
    timed (the database is older than this tensortune's code generator) is timed and
    checked again with the next best before the kernel is built (``records.fresh_best``);
    without it the stored timings decide. Such records are checked on ``inputs`` when
    given (those ``tune`` took, for a function whose reference is finite only on some
    inputs), else on random inputs. A path with no database file is an error, not a new
    empty database. ``weights`` are those ``tune`` took: the marked function is the
    workload looked up, and ``kernel.bind`` runs its weight-only stages once."""
    if not isinstance(func, PrimFunc):
        raise not_a_func(func, "compile")
    tgt = target or Target.host()
    db = database if isinstance(database, Database) else Database.existing(database)
    if weights:
        func = mark_weights(func, weights)
    func = tuned_func(func, db, tgt)
    if not retime:
        return build(replay(func, best_record(func, db, tgt)), tgt)
    _, sch, source = fresh_best(func, db, tgt, inputs=inputs)
    # With marked weights the timed C packs them once per address (packed_once.py); the
    # kernel returned computes everything at every call, as any kernel does, and runs
    # the stages once when bound (Kernel.bind; a model's through graph.prepack).
    return build(sch, tgt, None if sch.func.weights else source)
