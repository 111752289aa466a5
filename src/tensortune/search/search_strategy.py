"""Search strategies: propose candidates to measure, learn from the results.

``ReplayTrace`` draws every candidate afresh from the design spaces (random search).
Every strategy deduplicates structurally identical programs, against the database too, so
a resumed run never re-measures what it already knows.

Example:
    >>> strategy = ReplayTrace()
    >>> strategy.init(ctx)
    >>> batch = strategy.generate(16)       # list of Candidate
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..codegen import Target
from ..database import TuningRecord
from ..errors import TensorTuneError
from ..schedule import Schedule, Trace
from ..space import ReplayCache
from ..space.space_generator import SpaceGenerator
from ..tir.stmt import PrimFunc
from .draw_pool import DrawPool, EmitItem, Emitted, PoolError, Request, redraw, replay_draw


@dataclass
class Candidate:
    """A program proposed for measurement. One drawn in a worker (``DrawPool``) arrives as
    its plain data and the ``request`` that drew it, and is replayed when its schedule is
    asked for (``redraw``): most candidates of a batch's evolution are only scored, never
    built. Its ``trace_json`` comes with its C when a worker writes that."""

    _sch: Schedule | None
    space: int                      # index of the design space it was drawn from
    decisions: dict[int, Any]       # its decisions for that space's sampling instructions
    post: list[Any] = field(default_factory=list)   # the post-processor's decisions
    program: str = ""               # structural hash of the scheduled program
    niche: tuple[Any, ...] = ()     # its design space and register tile (see ``niche``)

    _features: Any = None
    trace_json: str = ""
    request: Request | None = None  # what drew it in a worker
    redraw: Callable[[Request], Schedule] | None = None   # replays ``request`` here

    def __post_init__(self) -> None:
        if not self.program:
            self.program = self.sch.func.structural_hash()

    @property
    def sch(self) -> Schedule:
        if self._sch is None:
            assert self.request is not None and self.redraw is not None, \
                "a candidate with no program"
            self._sch = self.redraw(self.request)
        return self._sch

    def features(self) -> Any:
        """Cost-model features, computed once (scored every generation, then stored)."""
        if self._features is None:
            from ..cost_model import extract

            self._features = extract(self.sch.func)
        return self._features


@dataclass
class SearchContext:
    func: PrimFunc
    spaces: list[Trace]
    generator: SpaceGenerator
    known: set[str] = field(default_factory=set)      # programs measured (database + run)
    rng: random.Random = field(default_factory=random.Random)
    cache: ReplayCache | None = field(default_factory=ReplayCache)  # None: full replays

    pool: DrawPool | None = None    # worker processes for ``draw_many``; None: this one

    def draw(self, space: int, decisions: dict[int, Any] | None = None,
             post: list[Any] | None = None) -> Candidate | None:
        """Replay design space ``space`` with ``decisions`` (the rest re-drawn)."""
        return self._drawn(space, decisions, post, self.rng.randrange(1 << 30))

    def _drawn(self, space: int, decisions: dict[int, Any] | None, post: list[Any] | None,
               seed: int) -> Candidate | None:
        got = replay_draw(self.func, self.spaces[space], seed, self.generator.postprocs,
                          decisions, post, self.cache)
        if got is None:
            return None
        sch, own, rest = got
        return Candidate(sch, space, own, rest, niche=niche(self.spaces[space], space, own))

    def draw_fresh(self, k: int) -> list[Candidate | None]:
        """``k`` fresh draws (``draw_many``), each from a design space picked at random."""
        return self.draw_many([(self.rng.randrange(len(self.spaces)), None, None)
                               for _ in range(k)])

    def draw_many(self, requests: Sequence[tuple[int, dict[int, Any] | None, list[Any] | None]]
                  ) -> list[Candidate | None]:
        """``draw`` for each (space, decisions, post) of ``requests``, in the worker
        processes of ``pool`` when there is one. The seeds are drawn here, in order, so a
        seeded search proposes the same programs with or without the pool."""
        seeded = [(s, d or {}, p or [], self.rng.randrange(1 << 30)) for s, d, p in requests]
        if self.pool is not None:
            try:
                got = self.pool.draw(seeded)
            except PoolError as e:
                warnings.warn(f"{e}; drawing candidates in this process from now on",
                              stacklevel=2)
                self.pool = None
            else:
                return [None if g is None else
                        Candidate(None, r[0], g.decisions, g.post, g.program,
                                  niche(self.spaces[r[0]], r[0], g.decisions), g.features,
                                  request=r, redraw=self._redraw)
                        for r, g in zip(seeded, got)]
        return [self._drawn(s, d, p, seed) for s, d, p, seed in seeded]

    def _redraw(self, request: Request) -> Schedule:
        """The schedule a worker drew for ``request``, replayed here."""
        sch = redraw(self.func, self.spaces, self.generator.postprocs, request, self.cache)
        if sch is None:
            raise TensorTuneError(f"the request {request!r} no longer draws a program")
        return sch

    def emit(self, cands: Sequence[Candidate], target: Target) -> list[Emitted] | None:
        """The C of ``cands``, written in the pool's workers from their requests (or
        traces), each candidate's ``trace_json`` set from what the worker replayed; None
        when there is no pool or a candidate was drawn here (its program is at hand)."""
        if self.pool is None or not cands:
            return None
        items: list[EmitItem] = []
        for c in cands:
            if c._sch is not None or c.request is None:
                return None
            # A candidate emitted before sends the trace it came back with.
            items.append(c.trace_json or (c.request, c.program))
        try:
            written = self.pool.emit(items, target)
        except PoolError as e:
            warnings.warn(f"{e}; drawing candidates in this process from now on", stacklevel=2)
            self.pool = None
            return None
        for c, (_, _, _, trace) in zip(cands, written):
            c.trace_json = c.trace_json or trace
        return [(source, error, seconds) for source, error, seconds, _ in written]


def niche(space: Trace, index: int, decisions: dict[int, Any]) -> tuple[Any, ...]:
    """The structure a candidate's tile sizes give it: its design space and the innermost
    (register-tile) factors of each tile decision that has them (the ``inner`` levels of
    multi-level tiling). Candidates of one niche differ only in how the outer loops tile
    the data; those of two niches have other accumulators, loads and unrolled bodies.

    Example:
        >>> niche(space, 0, {8: [1, 43, 1, 3], 14: [4, 1, 1, 32]})   # (0, (1, 3), (1, 32))
    """
    key: list[Any] = [index]
    for i, d in sorted(decisions.items()):
        inst = space.insts[i]
        inner = int(inst.attr("inner", 0)) if inst.kind in _TILES else 0
        if inner and isinstance(d, list):
            key.append(tuple(d[-inner:]))
    return tuple(key)


_TILES = ("sample_tile", "sample_perfect_tile")


class SearchStrategy:
    def init(self, ctx: SearchContext) -> None:
        self.ctx = ctx

    def generate(self, n: int) -> list[Candidate]:
        raise NotImplementedError

    def notify(self, batch: list[Candidate], records: list[TuningRecord]) -> None:
        """Results of the last batch (same order)."""

    def more(self, n: int) -> list[Candidate]:
        """Up to ``n`` candidates in place of ones of the last batch that needed no
        measurement (their C was timed before): by default a batch of their own."""
        return self.generate(n)


class ReplayTrace(SearchStrategy):
    """Random search: each candidate is a fresh draw from a random design space."""

    def __init__(self, max_fail: int = 50) -> None:
        self.max_fail = max_fail

    def generate(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        fails = 0
        while len(out) < n and fails < self.max_fail * max(1, n):
            k = n - len(out)   # drawn together: a pool splits them
            for c in self.ctx.draw_fresh(k):
                if c is None or c.program in self.ctx.known:
                    fails += 1
                    continue
                self.ctx.known.add(c.program)
                out.append(c)
        return out
