"""RandomComputeLocation: place a stage that was neither inlined nor tiled at a sampled
loop of its consumer, or leave it at the root.

Such stages are padding and copy stages, and reductions without reuse (the row max and
row sum of a softmax, the statistics of a norm): computed inside the consumer's row loop,
a row is read from L1 by every stage instead of from memory by each, and the stages run
in one parallel loop. The partial-result stage rfactor made for such a reduction follows
it (its own location is sampled among its consumer's loops; ParallelVectorizeUnroll
puts its partial axis back innermost, where compute_at's rebuilt loops do not keep it).

Example:
    >>> RandomComputeLocation().apply(sch, sch.get_block("pad"))
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, Schedule
from ..schedule.tree import readers, writes
from .schedule_rule import ScheduleRule, has_reuse


class RandomComputeLocation(ScheduleRule):
    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        # Outputs stay at the root; tiled reductions where MultiLevelTiling put them.
        if (blk.is_reduction and has_reuse(blk)) or \
                not all(b in sch.func.alloc_buffers for b in writes(blk)):
            return [sch]
        loc = sch.sample_compute_location(block)
        sch.compute_at(block, loc)
        if blk.is_reduction:
            for prod in self._partials(sch, block):
                try:
                    sch.compute_at(prod, sch.sample_compute_location(prod))
                except ScheduleError:
                    pass
        return [sch]

    @staticmethod
    def _partials(sch: Schedule, block: BlockRV) -> list[BlockRV]:
        """Reduction producers read by ``block`` alone (rfactor's partial results)."""
        out = []
        for p in sch.get_producers(block):
            pb = sch.get(p)
            bufs = writes(pb)
            if pb.is_reduction and all(b in sch.func.alloc_buffers for b in bufs) and \
                    all(len(readers(sch.func, b)) == 1 for b in bufs):
                out.append(p)
        return out
