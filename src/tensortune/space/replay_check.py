"""Checks during a design space's replay: a draw that a post-processor will reject is
stopped as soon as the part it rejects can no longer change.

A drawn program is replayed from its design space's trace and then post-processed; a
check such as VerifyRegisterTile's (a register tile too large for the registers) used to
reject it only at the end. In a 128-trial C3D search 795 of 1,041 fresh draws were
rejected, nearly all by that check, and in a 64-trial one their full replays took as long
as all the kept draws' (RESULTS.md). A block's tile is complete once its accumulators
have their ``local`` buffer (``cache_write``), which MultiLevelTiling does halfway
through the trace.

So ``sample`` runs a post-processor's ``check_partial(sch, changing)`` during the replay,
once an instruction has added a buffer, passing the blocks that instructions still to
come may move or restructure (``changing``): the check passes over those. It waits while
an instruction to come may reshape any loop (a ``split``, ``fuse``, ``reorder`` or
``rfactor``, or a block op on a block the trace does not name yet), and runs once those
are past. Blocks keep their names through every primitive (new blocks get new ones), so
a later ``get_block('conv')`` names the block that is called so now.

Example:
    >>> after = replay_checks(space, sch, [check.check_partial])
    >>> Trace(space.insts).apply(sch, decisions, after=after)   # may raise ScheduleError
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from ..schedule import Schedule, Trace

# Instructions that change no loop's extent or nesting and move no block. A loop's kind
# and annotations change only how it is emitted; a check counts a tile whatever its
# loops' kinds (VerifyRegisterTile counts the fewest vectors its elements could take).
_KEEP = frozenset({"get_block", "get_loops", "get_producers", "get_consumers",
                   "sample_perfect_tile", "sample_tile", "sample_categorical",
                   "sample_compute_location", "unroll", "vectorize", "parallel",
                   "annotate", "storage_align", "decompose_reduction"})
# Instructions that move or restructure the block they are given (their first input),
# and leave other blocks' loops as they are.
_BLOCK = frozenset({"compute_at", "reverse_compute_at", "compute_inline",
                    "reverse_compute_inline", "cache_read", "cache_write",
                    "transform_layout"})

# (index, kind, name of its block's random variable, that block's name when a
# ``get_block`` of the trace binds it) of each instruction not in ``_KEEP``.
Hazard = tuple[int, str, str, str | None]
PartialCheck = Callable[[Schedule, frozenset[str]], None]

_plans: dict[int, tuple[Trace, list[int], list[Hazard]]] = {}


def _hazards(space: Trace) -> tuple[list[int], list[Hazard]]:
    """The instructions of ``space`` not in ``_KEEP``, kept per trace object (a search
    replays the same few design spaces thousands of times)."""
    got = _plans.get(id(space))
    if got is not None and got[0] is space:
        return got[1], got[2]
    named: dict[str, str] = {}
    out: list[Hazard] = []
    for i, inst in enumerate(space.insts):
        if inst.kind == "get_block" and inst.inputs and inst.outputs:
            named[inst.outputs[0].name] = str(inst.inputs[0])
        if inst.kind in _KEEP:
            continue
        rv = inst.inputs[0] if inst.inputs else None
        rv_name = getattr(rv, "name", "") if inst.kind in _BLOCK else ""
        out.append((i, inst.kind, rv_name, named.get(rv_name)))
    if len(_plans) > 64:
        _plans.clear()
    _plans[id(space)] = (space, [h[0] for h in out], out)
    return [h[0] for h in out], out


def changing_blocks(space: Trace, start: int, sch: Schedule, env: dict[str, Any]
                    ) -> frozenset[str] | None:
    """The names of the blocks that instructions ``start`` onwards of ``space`` may move
    or restructure, or None if one of them may reshape any loop."""
    index, hazards = _hazards(space)
    names = set()
    for _, kind, rv, static in hazards[bisect_left(index, start):]:
        if kind not in _BLOCK or not rv:
            return None
        if rv in env:
            names.add(sch.block_name(env[rv]))
        elif static is not None:
            names.add(static)
        else:
            return None
    return frozenset(names)


def replay_checks(space: Trace, sch: Schedule, checks: list[PartialCheck]
                  ) -> Callable[[int, dict[str, Any]], None]:
    """An ``after`` callback for ``Trace.apply`` replaying ``space`` on ``sch``: once an
    instruction has added a buffer, it runs ``checks`` as soon as no instruction to come
    may reshape a loop, and again while blocks they passed over are still to change."""
    index, _ = _hazards(space)
    seen = len(sch.func.alloc_buffers)
    pending: frozenset[str] | None = None     # None: nothing new to check
    until = -1      # the answer cannot change before instruction ``until`` has run

    def after(idx: int, env: dict[str, Any]) -> None:
        nonlocal seen, pending, until
        n = len(sch.func.alloc_buffers)
        if n != seen:
            seen, pending, until = n, frozenset({"*"}), -1   # a new tile may be complete
        if pending is None or idx < until:
            return
        nxt = bisect_left(index, idx + 1)
        until = index[nxt] if nxt < len(index) else len(space.insts)
        changing = changing_blocks(space, idx + 1, sch, env)
        if changing is None or changing == pending:
            return   # a loop may still be reshaped, or no block newly settled
        for check in checks:
            check(sch, changing)
        pending = changing or None
    return after
