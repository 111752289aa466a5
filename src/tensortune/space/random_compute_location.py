"""RandomComputeLocation: place a stage that was neither inlined nor tiled (a padding or
copy stage) at a sampled loop of its consumer, or leave it at the root.

Example:
    >>> RandomComputeLocation().apply(sch, sch.get_block("pad"))
"""

from __future__ import annotations

from ..schedule import BlockRV, Schedule
from ..schedule.tree import writes
from .schedule_rule import ScheduleRule


class RandomComputeLocation(ScheduleRule):
    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        # Reductions (tiled or not) stay where their own rules put them.
        if blk.is_reduction or not all(b in sch.func.alloc_buffers for b in writes(blk)):
            return [sch]
        loc = sch.sample_compute_location(block)
        sch.compute_at(block, loc)
        return [sch]
