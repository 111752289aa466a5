"""One function's tuning state (``TuningTask``): what ``tt.tune`` advances batch by
batch, and the task scheduler for many functions at once, sharing one builder and runner.

A step proposes a batch from the search strategy, writes each candidate's C, builds the
new C in one builder call, checks and times each kernel against the float64 reference
and stores each record as soon as it exists; C timed before is not timed again. The
example is ``TuningTask``'s.
"""

from __future__ import annotations

import dataclasses
import random
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen import Target
from ..cost_model import LGBMModel
from ..database import Database, TuningRecord
from ..errors import TensorTuneError
from ..measure import BuildInput, BuildResult, LoadGuard, LocalBuilder, LocalRunner
from ..measure.builder import candidate_c, source_hash
from ..reference import CheckError, check_close, evaluate, given_case, reference_case
from ..rewrite import rewrite as rewritten_form
from ..space import PostOrderApply, ScheduleFn, SpaceGenerator
from ..tir.analysis import flop_count
from ..tir.printer import func_str
from ..tir.stmt import PrimFunc
from .compile_variants import with_sched_pressure
from .draw_pool import DrawPool, Emitted, PoolError
from .records import replay, retime_records
from .search_strategy import Candidate, ReplayTrace, SearchContext, SearchStrategy
from .transfer import transfer_model

# Batches in a row whose every candidate lowered to C already timed, after which a task
# counts as exhausted: its strategy could propose such programs without end.
BARREN_BATCHES = 8
# Rounds of stand-ins a step asks for when candidates of its batch were such.
REFILLS = 2


def not_a_func(obj: object, what: str) -> TensorTuneError:
    """The error for ``what`` (``tune``, ``compile``) given ``obj``, not a PrimFunc."""
    hint = f"; a suite workload: tt.workloads.get({obj!r})" if isinstance(obj, str) else \
        " (te.create_func makes one)"
    return TensorTuneError(f"{what} takes a PrimFunc, got {type(obj).__name__}{hint}")


class TuningTask:
    """The tuning state of one function, advanced a batch at a time: what ``tune`` runs
    once and the task scheduler runs for many functions, sharing one builder and runner.

    Example:
        >>> task = TuningTask(func, Database(":memory:"), Target.host())
        >>> with LocalRunner() as runner:
        ...     task.step(LocalBuilder(task.target), runner, 16)
        >>> task.best_latency
    """

    def __init__(self, func: PrimFunc, db: Database, target: Target, *,
                 strategy: str | SearchStrategy = "evolutionary", cost_model: Any = "lgbm",
                 space: Any = None, seed: int | None = None, name: str | None = None,
                 rewrite: bool = True, early_stop: float = 1.5, prior: bool = True,
                 load_guard: bool = True, draw_workers: int = 0,
                 inputs: Sequence[np.ndarray] | None = None,
                 case: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
                 flops: float | None = None, kin: Sequence[str] = ()) -> None:
        if not isinstance(func, PrimFunc):
            raise not_a_func(func, "tune")
        self.target, self.db, self.early_stop = target, db, early_stop
        # ``case``: the inputs and reference outputs of another form of the same
        # computation (``search.forms``), so every form is checked against one reference.
        self.ins, self.expected = case if case is not None else (
            reference_case(func) if inputs is None else given_case(func, inputs))
        # The work counted is the smaller form's: a rewrite that skips a dilated input's
        # zeros (T2D) counts only what is left, one that pads a row to whole vectors
        # does not count the padding. Another algorithm's form (``flops``) counts the
        # work of the form it replaces, so that GFLOP/s compare across forms.
        self.flops = flop_count(func) if flops is None else flops
        gen = _space(space, target)
        # A template names the blocks and loops of the function it was written for, so
        # that function is what it schedules.
        if rewrite and not isinstance(gen, ScheduleFn):
            new = _rewritten(func, self.ins, self.expected, target)
            if new is not func:
                func = new
                self.flops = min(self.flops, flop_count(new)) if flops is None else flops
        self.func = func
        self.workload = wl = func.structural_hash()
        db.add_workload(wl, name or func.name, func_str(func), self.flops)
        self.fingerprint = fp = target.fingerprint()
        stored = db.records(wl, fp)
        ctx = SearchContext(func, gen.generate(func), gen, {r.program for r in stored},
                            random.Random(seed))
        if draw_workers > 0:
            try:
                ctx.pool = DrawPool(func, ctx.spaces, gen.postprocs, draw_workers)
            except PoolError:   # a template's closure cannot be pickled: draw here
                ctx.pool = None
            else:
                ctx.pool.start()   # their imports overlap the prior's training below
        self.strategy = _strategy(strategy, cost_model)
        self.strategy.init(ctx)
        model = getattr(self.strategy, "model", None)
        if isinstance(model, LGBMModel):
            # ``kin``: the names of the computation's other forms (``search.forms``),
            # whose bundled rows are left out like the task's own.
            model.base = transfer_model(db, wl, fp, name or func.name, prior,
                                        target.vector_bytes, kin=kin)
        best = db.top_k(wl, fp, 1)
        self.best_latency = best[0].latency if best else float("inf")
        self.trials = 0                  # measured by this object
        self.errors = 0
        self.exhausted = False
        # The record of each C source timed for this workload here: a candidate whose
        # program differs but whose C does not (compute locations that lower alike, an
        # unroll depth the emitter drops on a large loop body) is the same kernel.
        self.timed = {r.source: r for r in stored if r.source}
        self.twins = 0                   # such candidates met by this object, not trials
        self._barren = 0                 # batches in a row that measured nothing new
        self.history: list[tuple[int, float]] = []
        self.guard = LoadGuard() if load_guard else None

    def step(self, builder: LocalBuilder, runner: LocalRunner, n: int,
             progress: Callable[[TuningRecord], None] | None = None) -> list[TuningRecord]:
        """Propose, build, check and time up to ``n`` candidates; every record goes to the
        database as soon as it exists (a killed run loses nothing measured). A candidate
        whose C was timed before gets a copy of that record instead (not stored, not a
        trial), and stand-ins are asked for in its place (``SearchStrategy.more``).
        Returns the records of every candidate, copies included."""
        batch = self.strategy.generate(n)
        if not batch:
            self.exhausted = True
            return []
        emitted = self._emit(batch, builder.target)
        # Candidates whose C was timed before, or met earlier in the step, cost no trial:
        # stand-ins from the strategy's reserve (no new evolution) are written at once,
        # so the step builds in one call. Built in calls of their own, the stand-ins of
        # a 256-trial GRP search (before e15bc4c) made 27 of its 47 builder calls, 4.3
        # sources each on average, each call leaving a core idle while its last source
        # compiled (RESULTS.md).
        seen = set(self.timed)
        short = _repeats(emitted, seen)
        for _ in range(REFILLS):
            extra = self.strategy.more(short) if short > 0 else []
            if not extra:
                break
            got = self._emit(extra, builder.target)
            batch, emitted = batch + extra, emitted + got
            short = _repeats(got, seen)
        before = self.trials
        recs = self._measure(builder, runner, batch, emitted, progress)
        self.strategy.notify(batch, recs)
        # A space whose new programs all lower to C already timed is spent too, though
        # the strategy could go on proposing them.
        self._barren = 0 if self.trials > before else self._barren + 1
        if self._barren >= BARREN_BATCHES:
            self.exhausted = True
        return recs

    def _emit(self, batch: list[Candidate], target: Target) -> list[Emitted]:
        """The C of each candidate: written by the draw workers from their traces when the
        search has them (the batch's programs are then never replayed here), else here."""
        emitted = self.strategy.ctx.emit(batch, target)
        if emitted is not None:
            return emitted
        out: list[Emitted] = []
        for c in batch:
            t0 = time.perf_counter()
            source, error = candidate_c(lambda c=c: c.sch.func,  # type: ignore[misc]
                                        target)
            out.append((source, error, time.perf_counter() - t0))
        return out

    def _measure(self, builder: LocalBuilder, runner: LocalRunner, batch: list[Candidate],
                 emitted: list[Emitted],
                 progress: Callable[[TuningRecord], None] | None) -> list[TuningRecord]:
        """Build, check and time ``batch`` (its C in ``emitted``); each record is stored as
        soon as it exists."""
        built = self._build(builder, emitted)
        recs = []
        if self.guard is not None:
            self.guard.new_batch()
        for cand, b in zip(batch, built):
            twin = self.timed.get(b.source_hash) if b.ok and b.source_hash else None
            if twin is not None:
                # Not timed again and not a trial: the search learns the kernel's
                # timing for this program too, and the database keeps the one record.
                recs.append(dataclasses.replace(
                    twin, trace=cand.trace_json or cand.sch.trace.as_json(),
                    program=cand.program, build_seconds=b.build_seconds,
                    features=[float(v) for v in cand.features()]))
                self.twins += 1
                continue
            if b.ok:
                if self.guard is not None:
                    self.guard.wait(runner)
                cutoff = (self.early_stop * self.best_latency
                          if self.best_latency < float("inf") else None)
                r = runner.run([b.run_input(self.func, self.workload, self.ins,
                                            self.expected, cutoff)])[0]
                lat, ek, em = r.latencies, r.error_kind, r.error_msg
            else:
                lat, ek, em = [], b.error_kind, b.error_msg
            rec = TuningRecord(self.workload, self.fingerprint,
                               cand.trace_json or cand.sch.trace.as_json(),
                               cand.program, lat, ek, em, b.build_seconds, str(self.target),
                               features=[float(v) for v in cand.features()],
                               source=b.source_hash)
            self.db.add(rec)
            recs.append(rec)
            if rec.source:
                self.timed[rec.source] = rec
            if rec.ok and rec.latency < self.best_latency and self.guard is not None:
                self.guard.reference(b.run_input(self.func, self.workload, self.ins,
                                                 self.expected), min(rec.latencies))
            self.trials += 1
            self.errors += 0 if rec.ok else 1
            self.best_latency = min(self.best_latency, rec.latency)
            self.history.append((self.trials, self.best_latency))
            if progress is not None:
                progress(rec)
        return recs

    def _build(self, builder: LocalBuilder, emitted: list[Emitted]) -> list[BuildResult]:
        """Build the C of ``emitted``, in one builder call. C timed before is not built
        (``_measure`` takes its record), C met twice is built once."""
        # The runner and the records need only the function's outputs (the same buffers
        # in every schedule of it) and the trace the candidate carries.
        todo = list(dict.fromkeys(src for src, _, _ in emitted if src is not None
                                  and source_hash(src) not in self.timed))
        got = dict(zip(todo, builder.build([BuildInput(self.func, src) for src in todo])))
        out = []
        for src, err, seconds in emitted:
            if src is None:
                out.append(BuildResult(None, None, seconds, "codegen", err))
            elif src not in got:
                out.append(BuildResult(None, src, seconds))
            else:
                b = got[src]
                out.append(dataclasses.replace(b, build_seconds=b.build_seconds + seconds))
        return out

    def try_sched_pressure(self, builder: LocalBuilder, runner: LocalRunner, k: int = 3,
                           progress: Callable[[TuningRecord], None] | None = None
                           ) -> list[TuningRecord]:
        """The ``k`` fastest programs built again with gcc's pre-RA scheduling
        (``compile_variants``), each measured as a candidate of its own (a trial each)."""
        batch = []
        for rec in self.db.top_k(self.workload, self.fingerprint, k):
            try:
                sch = with_sched_pressure(replay(self.func, rec))
            except TensorTuneError:   # a stored trace this code no longer replays
                continue
            if sch is not None:
                cand = Candidate(sch, -1, {})
                if cand.program not in self.strategy.ctx.known:
                    self.strategy.ctx.known.add(cand.program)
                    batch.append(cand)
        return self._measure(builder, runner, batch, self._emit(batch, builder.target),
                             progress)

    def retime(self, builder: LocalBuilder, runner: LocalRunner, k: int = 5,
               rounds: int = 5) -> list[TuningRecord]:
        """Time the ``k`` fastest records again in ``rounds`` alternating rounds
        (``records.retime_records``: each keeps its quietest timing, a failed check is
        stored as failed). Returns the records, fastest first."""
        top = self.db.top_k(self.workload, self.fingerprint, k)
        if len(top) < 2 or rounds < 1:
            return top
        out = retime_records(self.db, self.func, top, builder, runner, self.ins,
                             self.expected, rounds)
        self.take_retimed(out)
        return out

    def take_retimed(self, records: list[TuningRecord]) -> None:
        """Keep the new timings of re-timed records (those of this workload among
        ``records``): a later candidate with the same C copies them, and the best is
        read again from the database (when every re-timed record failed, it is one past
        them)."""
        for r in records:
            if r.workload == self.workload and r.source:
                self.timed[r.source] = r
        best = self.best_record()
        self.best_latency = best.latency if best is not None else float("inf")

    def best_record(self) -> TuningRecord | None:
        top = self.db.top_k(self.workload, self.fingerprint, 1)
        return top[0] if top else None

    def close(self) -> None:
        """Stop the draw workers, if any (a closed task can still step, drawing here)."""
        pool, self.strategy.ctx.pool = self.strategy.ctx.pool, None
        if pool is not None:
            pool.close()


def _repeats(emitted: list[Emitted], seen: set[str]) -> int:
    """How many of ``emitted`` wrote C in ``seen`` (timed before) or met earlier in the
    list: candidates that will be no trial. Adds the new C to ``seen``."""
    n = 0
    for src, _, _ in emitted:
        if src is None:
            continue   # a code generation error is a trial: its record says why
        h = source_hash(src)
        n += h in seen
        seen.add(h)
    return n


def _open(database: str | Path | Database | None) -> Database:
    if isinstance(database, Database):
        return database
    return Database(":memory:" if database is None else database)


def _space(space: Any, target: Target) -> SpaceGenerator:
    if space is None:
        return PostOrderApply.default(target)
    if isinstance(space, SpaceGenerator):
        return space
    if callable(space):
        return ScheduleFn(space)
    raise TensorTuneError(f"space must be a SpaceGenerator or a template function, got {space!r}")


def _strategy(strategy: str | SearchStrategy, cost_model: Any) -> SearchStrategy:
    if isinstance(strategy, SearchStrategy):
        return strategy
    if strategy == "replay":
        return ReplayTrace()
    if strategy == "evolutionary":
        from .evolutionary import EvolutionarySearch

        return EvolutionarySearch(cost_model=cost_model)
    raise TensorTuneError(f"unknown strategy {strategy!r}; use 'evolutionary' or 'replay'")


def _rewritten(func: PrimFunc, ins: list[np.ndarray], expected: list[np.ndarray],
               target: Target) -> PrimFunc:
    new = rewritten_form(func, target.lanes("float32"))
    if new is None:
        return func
    try:
        for got, want in zip(evaluate(new, ins), expected):
            check_close(got, want)
    except CheckError as e:  # a bug in the rewrite must not cost the user a result
        warnings.warn(f"the rewrite of {func.name} changed its result ({e}); "
                      "tuning it as written", stacklevel=3)
        return func
    return new
