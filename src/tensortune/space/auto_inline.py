"""AutoInline: inline element-wise intermediate stages into their consumers.

Stages with a select (padding) are left to RandomComputeLocation: inlined into a
vectorized loop, their guarded loads would force scalar code.

Example:
    >>> AutoInline().apply(sch, sch.get_block("bias_add"))
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, Schedule
from ..schedule.tree import writes
from .schedule_rule import ScheduleRule, is_elementwise


class AutoInline(ScheduleRule):
    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        if not is_elementwise(blk) or not all(b in sch.func.alloc_buffers for b in writes(blk)):
            return [sch]
        try:
            sch.compute_inline(block)
        except ScheduleError:
            pass
        return [sch]
