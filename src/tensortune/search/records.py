"""From database records back to programs: replay a record's trace, find the best record
(with an error that says what is missing), and time records again.

A record's timing belongs to the C it timed. A database outlives the code generator that
filled it: after a change to lowering, the best record's program may lower to other C
that runs slower (or no longer passes its check), and its stored timing would still make
it the winner. ``fresh_best`` notices that from the source hash each record keeps and
times the best few again under the current code before one of them is used.

Example:
    >>> rec, sch, source = fresh_best(func, db, Target.host())   # re-timed if its C changed
    >>> same = replay(func, rec)
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

import numpy as np

from ..codegen import Target
from ..codegen.packed_once import program_c
from ..database import Database, DatabaseError, TuningRecord
from ..errors import TensorTuneError
from ..measure import BuildInput, BuildResult, LocalBuilder, LocalRunner, source_hash
from ..measure.runner import MIN_REPEAT_MS
from ..reference import given_case, reference_case
from ..schedule import Schedule
from ..tir.stmt import PrimFunc

# The shortest timing loop of a re-timing: the runner's default, although the search
# times its candidates in 5 ms loops (``tune.SEARCH_REPEAT_MS``). Re-timing decides
# which record a run returns, and costs a fixed 25 runs per run.
RETIME_REPEAT_MS = MIN_REPEAT_MS


def replay(func: PrimFunc, rec: TuningRecord) -> Schedule:
    """The schedule a record's trace makes of ``func``."""
    return Schedule.from_trace(func, rec.trace)


def best_record(func: PrimFunc, db: Database, target: Target) -> TuningRecord:
    """The fastest checked record of ``func`` for ``target``, as stored; a
    ``DatabaseError`` that names what the database holds instead when there is none."""
    wl = func.structural_hash()
    top = db.top_k(wl, target.fingerprint(), 1)
    if top:
        return top[0]
    others = db.targets(wl)
    if others:
        raise DatabaseError(
            f"{db.path} has records for {func.name} only for other machines ("
            + "; ".join(d or t for t, d in others.items()) + f"), not for this one ({target}); "
            "tune it here first")
    same_name = [h for h, name, _, n in db.workloads() if name == func.name and n]

    def signature(h: str) -> str:
        # The stored text's first line, "def gmm(A: float32[32, 32], ...):", says which
        # shapes were tuned (the --shape to give).
        text = db.workload_text(h)
        head = text[1].split("\n", 1)[0].removeprefix("def ").rstrip(":") if text else ""
        return f"{h}: {head}" if head else h
    hint = (f"; it has {func.name} with another shape or definition (workloads "
            f"{'; '.join(signature(h) for h in same_name)})") if same_name else ""
    raise DatabaseError(f"{db.path} has no record for {func.name} (workload {wl}){hint}; "
                        "tune it first (tt.tune or tensortune tune)")


def retime_records(db: Database, func: PrimFunc | Sequence[PrimFunc],
                   records: list[TuningRecord],
                   builder: LocalBuilder, runner: LocalRunner, ins: list[np.ndarray],
                   expected: list[np.ndarray], rounds: int = 5) -> list[TuningRecord]:
    """Time ``records`` of ``func`` again, in ``rounds`` alternating rounds, and keep for
    each the samples of its quietest timing (the lowest median). On a shared machine one
    busy moment makes a fast program look slow; the alternating rounds give the close ones
    the same moments. A stored timing counts among them only if it timed the C that the
    program lowers to now. A record that fails its check now, or whose trace no longer
    replays, or that no longer builds, or has no timing at all, is stored as failed. Each
    record is stored with the current source hash. ``func`` may be one per record: the
    records of several forms of one computation (``search.forms``) timed in the same
    rounds. Returns the records, fastest first."""
    funcs = [func] * len(records) if isinstance(func, PrimFunc) else list(func)
    failed: dict[int, tuple[str | None, str | None]] = {}
    schs: list[Schedule] = []
    for i, (f, r) in enumerate(zip(funcs, records)):
        try:
            schs.append(replay(f, r))
        except TensorTuneError as e:   # a trace this tensortune's primitives reject
            failed[i] = ("replay", str(e))
            schs.append(Schedule(f))   # a stand-in, never built
    done = iter(builder.build([BuildInput(sch.func) for i, sch in enumerate(schs)
                               if i not in failed]))
    built = [BuildResult(None, None, 0.0, *failed[i]) if i in failed else next(done)
             for i in range(len(records))]
    quietest = [list(r.latencies) if r.source is not None and r.source == b.source_hash
                else [] for r, b in zip(records, built)]
    failed.update({i: (b.error_kind, b.error_msg) for i, b in enumerate(built)
                   if not b.ok and i not in failed})
    last_error: dict[int, tuple[str | None, str | None]] = {}
    for _ in range(rounds):
        for i, (sch, b, r) in enumerate(zip(schs, built, records)):
            if i in failed or b.lib_path is None:
                continue
            res = runner.run([b.run_input(sch.func, r.workload, ins, expected)],
                             RETIME_REPEAT_MS)[0]
            if res.error_kind in ("wrong_result", "non_finite"):
                failed[i] = (res.error_kind, res.error_msg)
            elif res.latencies and (not quietest[i] or statistics.median(res.latencies)
                                    < statistics.median(quietest[i])):
                quietest[i] = list(res.latencies)
            elif res.error_kind is not None:
                last_error[i] = (res.error_kind, res.error_msg)
    out = []
    for i, (r, b) in enumerate(zip(records, built)):
        kind, msg = failed.get(i, (None, None))
        if kind is None and not quietest[i]:   # a crash or a timeout in every round
            kind, msg = last_error.get(i, ("runtime", "no timing in any round"))
        new = dataclasses.replace(r, latencies=[] if kind else quietest[i], error_kind=kind,
                                  error_msg=msg, source=b.source_hash or r.source)
        if new != r:
            db.update_timing(new)
        out.append(new)
    return sorted(out, key=lambda r: r.latency)


def _lowered(func: PrimFunc, rec: TuningRecord, target: Target) -> tuple[Schedule, str] | None:
    """The record's schedule and the C it lowers to now; None if it no longer does."""
    try:
        sch = replay(func, rec)
        return sch, program_c(sch.func, target)
    except TensorTuneError:
        return None


def fresh_best(func: PrimFunc, db: Database, target: Target, *, k: int = 5,
               rounds: int = 5, inputs: Sequence[np.ndarray] | None = None
               ) -> tuple[TuningRecord, Schedule, str]:
    """The best record of ``func`` for ``target`` with its timing taken under the current
    code generator, with its schedule and C source. While the best record's program lowers
    to C other than the C it timed (a record from an older tensortune, or one stored
    before schema 3 kept the hash), the ``k`` best are timed again in the same rounds,
    checked against the reference (on ``inputs`` when given, as ``tune`` takes them; else
    on random inputs), and stored; then the best is looked up again. A database whose best
    is current costs one lowering."""
    ins: list[np.ndarray] | None = None
    expected: list[np.ndarray] = []
    for _ in range(3):   # a stale record beyond the k re-timed may come first next time
        rec = best_record(func, db, target)
        low = _lowered(func, rec, target)   # None: the re-timing stores it as failed
        if low is not None and rec.source == source_hash(low[1]):
            return rec, *low
        if ins is None:
            ins, expected = (reference_case(func) if inputs is None
                             else given_case(func, inputs))
        top = db.top_k(func.structural_hash(), target.fingerprint(), k)
        with LocalRunner() as runner:
            retime_records(db, func, top, LocalBuilder(target), runner, ins, expected, rounds)
    rec = best_record(func, db, target)
    sch = replay(func, rec)
    return rec, sch, program_c(sch.func, target)
