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
from dataclasses import dataclass, field
from typing import Any

from ..database import TuningRecord
from ..schedule import Schedule, Trace
from ..space import ReplayCache, sample
from ..space.space_generator import SpaceGenerator
from ..tir.stmt import PrimFunc


@dataclass
class Candidate:
    sch: Schedule
    space: int                      # index of the design space it was drawn from
    decisions: dict[int, Any]       # its decisions for that space's sampling instructions
    post: list[Any] = field(default_factory=list)   # the post-processor's decisions
    program: str = ""               # structural hash of the scheduled program
    niche: tuple[Any, ...] = ()     # its design space and register tile (see ``niche``)

    _features: Any = None

    def __post_init__(self) -> None:
        if not self.program:
            self.program = self.sch.func.structural_hash()

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

    def draw(self, space: int, decisions: dict[int, Any] | None = None,
             post: list[Any] | None = None) -> Candidate | None:
        """Replay design space ``space`` with ``decisions`` (the rest re-drawn)."""
        sch = sample(self.func, self.spaces[space], self.rng.randrange(1 << 30),
                     self.generator.postprocs, decisions, [post] if post else [], self.cache)
        if sch is None:
            return None
        n = len(self.spaces[space].insts)
        own = {i: d for i, d in sch.trace.decisions.items() if i < n}
        rest = [d for i, d in sorted(sch.trace.decisions.items()) if i >= n]
        return Candidate(sch, space, own, rest[:2], niche=niche(self.spaces[space], space, own))


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


class ReplayTrace(SearchStrategy):
    """Random search: each candidate is a fresh draw from a random design space."""

    def __init__(self, max_fail: int = 50) -> None:
        self.max_fail = max_fail

    def generate(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        fails = 0
        while len(out) < n and fails < self.max_fail * max(1, n):
            c = self.ctx.draw(self.ctx.rng.randrange(len(self.ctx.spaces)))
            if c is None or c.program in self.ctx.known:
                fails += 1
                continue
            self.ctx.known.add(c.program)
            out.append(c)
        return out
