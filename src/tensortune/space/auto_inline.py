"""AutoInline: inline element-wise intermediate stages into their consumers.

Stages with a select (padding) are left to RandomComputeLocation: inlined into a
vectorized loop, their guarded loads would force scalar code. So are stages that call a
transcendental (exp, erf, ...) and have more than one consumer: inlining would evaluate
it once per consumer (the shared-operand rewrite made such stages to compute it once).
So are transposes (``T[j, i] = A[i, j]``) that a consumer reads at more than one place:
inlined, each of its loads would stride across the rows of the input. Winograd's
input transform reads 16 points of each channels-last tile; with its transposes
inlined, CONVLAYER's search (seed 1) had found 394 GFLOP/s after 128 trials and 478
after 256, with them kept as stages 647 after 128 (RESULTS.md).

Example:
    >>> AutoInline().apply(sch, sch.get_block("bias_add"))
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..rewrite.shared_operand import is_costly
from ..schedule import BlockRV, Schedule
from ..schedule.tree import readers, writes
from ..tir.expr import BufferLoad
from ..tir.functor import iter_exprs, stmt_exprs, walk
from ..tir.stmt import Block, BufferStore, PrimFunc
from .schedule_rule import ScheduleRule, is_elementwise
from .tiled_transpose import crossed_axes


class AutoInline(ScheduleRule):
    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if inlines(sch.func, sch.get(block)):
            try:
                sch.compute_inline(block)
            except ScheduleError:
                pass
        return [sch]


def inlines(func: PrimFunc, blk: Block) -> bool:
    """Whether AutoInline inlines ``blk`` into its consumers (module docstring), if
    ``compute_inline`` allows it. TiledTranspose asks it of a block's producers."""
    if not is_elementwise(blk) or not all(b in func.alloc_buffers for b in writes(blk)):
        return False
    assert isinstance(blk.body, BufferStore)
    buf = blk.body.buffer
    if is_costly(blk.body.value) and len(readers(func, buf)) > 1:
        return False
    return crossed_axes(blk) is None or not any(
        sum(1 for x in iter_exprs(e) if isinstance(x, BufferLoad) and x.buffer is buf) > 1
        for c in readers(func, buf) for s in walk(c.body) for e in stmt_exprs(s))
