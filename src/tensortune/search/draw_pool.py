"""Candidates drawn in worker processes, so a search's proposals use every core.

A batch's proposal replays some two hundred traces (fresh draws and mutants) and extracts
their features, all in Python on one core; on the 2-core host that was 19-26% of a
64-trial run on C2D, GMM and DEP while the other core waited (RESULTS.md). A ``DrawPool``
sends the requests (design space, decisions, post-processor decisions, seed: all drawn by the
caller's random generator, so the programs do not depend on how the work is split) to
``workers`` processes, each with its own replay cache. They send back the plain data of
each candidate (its decisions, structural hash and features); the caller keeps the
request to replay it by. A candidate's trace is written as JSON only with its C
(``emit``): written for every draw, it took 17% of a worker's drawing in a 256-trial DIL
run, where about one draw in twelve was measured.

The workers are plain interpreters running ``draw_worker``, as the runner's are
(``measure.process``: no re-import of the caller's ``__main__``). A design space whose
post-processors cannot be pickled (a user's template with a closure) is drawn in the
caller instead.

The workers also write the C of the candidates chosen for measurement (``emit``), each
from its request (replayed with the worker's cache) or from a trace as JSON, and send
back the trace of the program they wrote: the tuner then never replays them, and only
gcc runs beside it while a batch builds (the Python lowering of a batch, 3-6 s of a
64-trial C2D run, held the interpreter lock in the builder's threads, one core at a
time).

Example:
    >>> with DrawPool(func, spaces, gen.postprocs, workers=2) as pool:
    ...     requests = [(0, {}, [], 7), (0, {3: [4, 8]}, [], 8)]
    ...     drawn = pool.draw(requests)
    ...     [(source, error, seconds, trace)] = pool.emit([(requests[0], drawn[0].program)],
    ...                                                   Target.host())
"""

from __future__ import annotations

import pickle
import subprocess
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import numpy as np

from ..codegen import Target
from ..measure.builder import candidate_c
from ..measure.process import spawn
from ..schedule import Schedule, Trace
from ..space import Postproc, sample
from ..tir.stmt import PrimFunc

# (design space, decisions by instruction index, post-processor decisions, seed)
Request = tuple[int, dict[int, Any], list[Any], int]
# A candidate's C, or None and why not, and the seconds its code generation took.
Emitted = tuple[str | None, str | None, float]
# What ``emit`` writes the C of: a trace as JSON, or a request with the structural hash
# of the program it drew (a replay that draws another program is an error, not C).
EmitItem = str | tuple[Request, str]
# ``Emitted`` and the trace of the program written, as JSON ("" when none was replayed).
Written = tuple[str | None, str | None, float, str]


@dataclass(frozen=True)
class Drawn:
    """One candidate as a worker sends it back; ``decisions`` and ``post`` as
    ``SearchContext.draw`` would keep them."""

    decisions: dict[int, Any]
    post: list[Any]
    program: str
    features: np.ndarray


class PoolError(RuntimeError):
    """A worker died or could not be started; the caller draws serially instead."""


class Shares:
    """How a request's items are dealt to ``workers``. Each owns a contiguous share (a
    parent's mutants are drawn together, where a worker's replay cache most often
    resumes from a shared prefix) and takes it a chunk at a time from the front, each
    chunk ``1 / (2 * workers)`` of what is left of the share; one whose share is done
    takes chunks from the back of the largest share left. Dealt in two halves, the first
    worker's reply of a 256-trial C3D run's draws came 11 s (of 44) before the last's,
    the emits' 4.6 s (of 12): some replays resume from a cached prefix, others start
    from the beginning.

    Example:
        >>> s = Shares(10, 2)
        >>> s.next(0), s.next(1), s.next(0)     # (range(0, 2), range(5, 7), range(2, 3))
    """

    def __init__(self, n: int, workers: int) -> None:
        size = -(-n // workers)
        self.left = [[min(i * size, n), min(i * size + size, n)] for i in range(workers)]

    def next(self, worker: int) -> range | None:
        """The next chunk for ``worker``, or None when every item is dealt."""
        share = self.left[worker]
        if share[1] == share[0]:
            share = max(self.left, key=lambda s: s[1] - s[0])
            if share[1] == share[0]:
                return None
        k = -(-(share[1] - share[0]) // (2 * len(self.left)))
        if share is self.left[worker]:
            share[0] += k
            return range(share[0] - k, share[0])
        share[1] -= k
        return range(share[1], share[1] + k)


class DrawPool:
    def __init__(self, func: PrimFunc, spaces: list[Trace], postprocs: list[Postproc],
                 workers: int) -> None:
        try:
            self._setup = pickle.dumps((func, spaces, list(postprocs)))
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise PoolError(f"the design spaces cannot be sent to a worker: {e}") from e
        self.workers = workers
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Connection] = []

    def start(self) -> None:
        """Start the workers now (their imports then overlap the caller's work); the
        first ``draw`` starts them otherwise."""
        if self._procs:
            return
        for _ in range(self.workers):
            proc, conn = spawn("tensortune.search.draw_worker")
            conn.send_bytes(self._setup)
            self._procs.append(proc)
            self._conns.append(conn)

    def draw(self, requests: list[Request]) -> list[Drawn | None]:
        """The candidates of ``requests``, in order; None where a drawn decision made a
        primitive illegal. Raises ``PoolError`` if a worker is gone (the pool is closed)."""
        return self._ask(requests, lambda share: share, "drawing a candidate")

    def emit(self, items: list[EmitItem], target: Target) -> list[Written]:
        """The C of each item (a trace as JSON, of this pool's function, or a request and
        its program's hash) for ``target``, written in the workers, with the trace of the
        program written; a program that fails to replay, verify or lower comes back as
        None with the error. Raises ``PoolError`` if a worker is gone."""
        return self._ask(items, lambda share: {"emit": share, "target": target},
                         "writing a candidate's C")

    def _ask(self, items: list[Any], message: Any, what: str) -> list[Any]:
        if not items:
            return []
        self.start()
        shares = Shares(len(items), len(self._conns))
        out: list[Any] = [None] * len(items)
        busy: dict[Connection, range] = {}
        failed: str | None = None

        def give(conn: Connection) -> None:
            got = shares.next(self._conns.index(conn))
            if got is not None:
                conn.send(message(items[got.start:got.stop]))
                busy[conn] = got

        try:
            for conn in self._conns:
                give(conn)
            while busy:
                for ready in wait(list(busy)):
                    conn = cast(Connection, ready)
                    reply = conn.recv()
                    done = busy.pop(conn)
                    if isinstance(reply, str):   # an exception other than an illegal
                        failed = failed or reply  # decision: the others finish first
                        continue
                    out[done.start:done.stop] = reply
                    if failed is None:
                        give(conn)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as e:
            self.close()
            raise PoolError(f"a draw worker stopped: {e}") from e
        if failed is not None:
            raise RuntimeError(f"{what} in a worker failed: {failed}")
        return out

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(None)
            except OSError:
                pass
            conn.close()
        for proc in self._procs:
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._procs, self._conns = [], []

    def __enter__(self) -> DrawPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def replay_draw(func: PrimFunc, space: Trace, seed: int, postprocs: list[Postproc],
                decisions: dict[int, Any] | None, post: list[Any] | None, cache: Any
                ) -> tuple[Schedule, dict[int, Any], list[Any]] | None:
    """Design space ``space`` replayed with ``decisions`` (the rest drawn from ``seed``),
    with its own decisions and the post-processor's, as a candidate keeps them; None if a
    drawn decision makes a primitive illegal. ``SearchContext`` draws through it in this
    process, the workers through ``draw_one``."""
    sch = sample(func, space, seed, postprocs, decisions, [post] if post else [], cache)
    if sch is None:
        return None
    n = len(space.insts)
    own = {i: d for i, d in sch.trace.decisions.items() if i < n}
    rest = [d for i, d in sorted(sch.trace.decisions.items()) if i >= n]
    return sch, own, rest[:2]


def redraw(func: PrimFunc, spaces: list[Trace], postprocs: list[Postproc], request: Request,
           cache: Any) -> Schedule | None:
    """The schedule ``request`` draws (its seed makes it the same each time), or None if
    a decision is illegal: how a worker writes a chosen candidate's C and how the caller
    gets a pooled candidate's schedule (``Candidate.sch``)."""
    space, decisions, post, seed = request
    got = replay_draw(func, spaces[space], seed, postprocs, decisions, post, cache)
    return None if got is None else got[0]


def draw_one(func: PrimFunc, spaces: list[Trace], postprocs: list[Postproc], req: Request,
             cache: Any) -> Drawn | None:
    """Replay one request and keep the plain data of its candidate (the worker's side)."""
    from ..cost_model import extract

    space, decisions, post, seed = req
    got = replay_draw(func, spaces[space], seed, postprocs, decisions, post, cache)
    if got is None:
        return None
    sch, own, rest = got
    return Drawn(own, rest, sch.func.structural_hash(), extract(sch.func))


def emit_one(func: PrimFunc, spaces: list[Trace], postprocs: list[Postproc], item: EmitItem,
             target: Target, cache: Any) -> Written:
    """The C of ``func`` scheduled by ``item`` (the worker's side of ``emit``) and the
    trace of that schedule; a failure is a value, as the builder's own code generation
    makes it."""
    t0 = time.perf_counter()
    if isinstance(item, str):
        source, error = candidate_c(
            lambda: Schedule.from_trace(func, item, verify=False).func, target)
        return source, error, time.perf_counter() - t0, item
    replayed: list[Schedule] = []

    def program() -> PrimFunc:
        request, want = item
        sch = redraw(func, spaces, postprocs, request, cache)
        if sch is None or sch.func.structural_hash() != want:
            raise RuntimeError(f"the request {request!r} no longer draws program {want}")
        replayed.append(sch)
        return sch.func

    source, error = candidate_c(program, target)
    trace = replayed[0].trace.as_json() if replayed else ""
    return source, error, time.perf_counter() - t0, trace
