"""AutoInline: inline element-wise intermediate stages into their consumers.

Stages with a select (padding) are left to RandomComputeLocation: inlined into a
vectorized loop, their guarded loads would force scalar code. So are stages that call a
transcendental (exp, erf, ...) and have more than one consumer: inlining would evaluate
it once per consumer (the shared-operand rewrite made such stages to compute it once).

Example:
    >>> AutoInline().apply(sch, sch.get_block("bias_add"))
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..rewrite.shared_operand import is_costly
from ..schedule import BlockRV, Schedule
from ..schedule.tree import readers, writes
from ..tir.stmt import BufferStore
from .schedule_rule import ScheduleRule, is_elementwise


class AutoInline(ScheduleRule):
    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        if not is_elementwise(blk) or not all(b in sch.func.alloc_buffers for b in writes(blk)):
            return [sch]
        assert isinstance(blk.body, BufferStore)
        if is_costly(blk.body.value) and len(readers(sch.func, blk.body.buffer)) > 1:
            return [sch]
        try:
            sch.compute_inline(block)
        except ScheduleError:
            pass
        return [sch]
