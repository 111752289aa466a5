"""ReplayCache: schedules part-way through a design space's replay, so a candidate that
shares its first decisions with one drawn before resumes from there.

The evolutionary search re-derives every mutant by replaying its design space with one
decision changed; the instructions before that decision do the same work as for the
parent. The cache keeps a copy of the schedule (and the random variables bound so far)
before each sampling instruction and after the last, keyed by the space and the
decisions taken before that point. A replay starts from the longest cached prefix of
its own decisions: a mutant of the unroll depth or the parallel extent (post-processor
decisions) replays nothing of the space. Schedules are immutable trees, so a snapshot
costs a copy of the trace and the variable table, not of the program.

Example:
    >>> cache = ReplayCache()
    >>> sch = sample(func, space, seed=1, decisions=d, cache=cache)   # fills the cache
    >>> sch = sample(func, space, seed=2, decisions=d2, cache=cache)  # resumes if it can
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..schedule import Schedule, Trace
from ..schedule.trace import SAMPLING


def _key(d: Any) -> str:
    return repr(d)


class ReplayCache:
    """Least-recently-used snapshots of partial replays (``capacity`` of them)."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._snaps: OrderedDict[tuple, tuple[Schedule, dict[str, Any]]] = OrderedDict()
        self._points: dict[int, list[int]] = {}
        self.hits = self.misses = 0

    def _sampling(self, space: Trace) -> list[int]:
        pts = self._points.get(id(space))
        if pts is None:
            pts = [i for i, x in enumerate(space.insts) if x.kind in SAMPLING]
            self._points[id(space)] = pts
        return pts

    def resume(self, space: Trace, decisions: dict[int, Any], seed: int
               ) -> tuple[int, Schedule, dict[str, Any]] | None:
        """(instruction to resume at, a schedule in the state before it, bound
        variables) for the longest cached prefix of ``decisions``, or None."""
        points = self._sampling(space)
        stops = [*points, len(space.insts)]
        key: tuple = (id(space),)
        found: tuple[int, tuple, tuple[Schedule, dict[str, Any]]] | None = None
        for k, stop in enumerate(stops):
            if k > 0:  # the state before stop k is keyed by the k decisions before it
                if points[k - 1] not in decisions:
                    break
                key = key + (_key(decisions[points[k - 1]]),)
            snap = self._snaps.get(key)
            if snap is not None:
                found = (stop, key, snap)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        start, where, (sch, env) = found
        self._snaps.move_to_end(where)
        sch = sch.copy()
        sch.rng = random.Random(seed)  # decisions not given are drawn afresh
        return start, sch, dict(env)

    def recorder(self, space: Trace, sch: Schedule) -> Callable[[int, dict[str, Any]], None]:
        """An ``on_sample`` callback for ``Trace.apply`` that snapshots ``sch``."""
        points = self._sampling(space)
        # The key grows by one decision per sampling point; calls come in replay order.
        key: tuple = (id(space),)
        j = 0

        def on_sample(idx: int, env: dict[str, Any]) -> None:
            nonlocal key, j
            while j < len(points) and points[j] < idx:
                key += (_key(sch.trace.decisions[points[j]]),)
                j += 1
            if key in self._snaps:
                self._snaps.move_to_end(key)
                return
            self._snaps[key] = (sch.copy(), dict(env))
            if len(self._snaps) > self.capacity:
                self._snaps.popitem(last=False)
        return on_sample
