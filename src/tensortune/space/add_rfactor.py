"""AddRFactor: for reductions with little reuse (norms, row max/sum), fork the space into
the plain reduction and one whose innermost reduction loop is split (sampled) and turned
into a spatial axis of partial results by rfactor, which can then be vectorized.

Example:
    >>> AddRFactor().apply(sch, sch.get_block("sumsq"))     # [plain, rfactored]
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, Schedule
from ..schedule.tree import writes
from .schedule_rule import ScheduleRule, has_reuse, is_reduction, loop_kinds


class AddRFactor(ScheduleRule):
    def __init__(self, max_innermost_factor: int = 64, min_extent: int = 32) -> None:
        self.max_innermost_factor = max_innermost_factor
        self.min_extent = min_extent

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        kinds = loop_kinds(sch, block)
        if not is_reduction(blk) or has_reuse(blk) or not kinds or kinds[-1][1] != "R":
            return [sch]
        inner = kinds[-1][0]
        if sch.get(inner).extent < self.min_extent:
            return [sch]
        forked = sch.copy()
        try:
            f = forked.sample_perfect_tile(inner, n=2,
                                           max_innermost_factor=self.max_innermost_factor)
            _, ri = forked.split(inner, f)
            # The partial axis goes last: the vectorized loop then stores contiguously.
            ndim = len(next(iter(writes(blk))).shape)
            forked.rfactor(ri, ndim)
        except ScheduleError:
            return [sch]
        return [sch, forked]
