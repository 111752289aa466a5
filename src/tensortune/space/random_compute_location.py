"""RandomComputeLocation: place a stage that was neither inlined nor tiled at a sampled
loop of its consumer, or leave it at the root.

Such stages are padding and copy stages, and reductions without reuse (the row max and
row sum of a softmax, the statistics of a norm): computed inside the consumer's row loop,
a row is read from L1 by every stage instead of from memory by each, and the stages run
in one parallel loop. The partial-result stage rfactor made for such a reduction follows
it (its own location is sampled among its consumer's loops; ParallelVectorizeUnroll
puts its partial axis back innermost, where compute_at's rebuilt loops do not keep it).

A padded copy whose rows a consumer reads in vector lanes is given aligned rows
(``storage_align``): rows a multiple of the vector apart, the first element copied from
the input at the start of a vector, so the copy's vector stores are aligned. DEP's best
program (58-float rows, data from element 1), replayed: 50.2 -> 45.4-45.9 us.

Example:
    >>> RandomComputeLocation().apply(sch, sch.get_block("pad"))
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.tree import axes_moved_by, find_block, loads_of, readers, writes
from ..tir.arith import affine
from ..tir.expr import BufferLoad, Select
from ..tir.functor import free_vars, iter_exprs
from ..tir.stmt import Block, Buffer, BufferStore, ForKind, PrimFunc
from .schedule_rule import ScheduleRule, has_reuse, register_tiled
from .tiled_transpose import crossed_load


class RandomComputeLocation(ScheduleRule):
    def __init__(self, lanes: int = 16) -> None:
        self.lanes = lanes

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        # Tiled reductions stay where MultiLevelTiling put them, their init decomposed
        # or not. (Their only location was the root: in every suite space the sampled
        # location had one candidate, and the replay spent a compute_at on it.)
        if has_reuse(blk) or register_tiled(blk):
            return [sch]
        # Outputs stay at the root, but an output reduction's partial results are still
        # placed among its loops: left at the root they are a heap array that the
        # reduction loop loads and stores every step (a per-channel sum over N, H, W:
        # 65.5 us, 0.73x PyTorch, RESULTS.md).
        if all(b in sch.func.alloc_buffers for b in writes(blk)):
            sch.compute_at(block, sch.sample_compute_location(block,
                                                              self._outside(sch, block)))
            offset = padded_row_start(blk)
            if offset is not None and isinstance(blk.body, BufferStore) and \
                    read_in_lanes(sch.func, buf := blk.body.buffer):
                lead = -offset % self.lanes
                if lead or buf.shape[-1] % self.lanes:
                    sch.storage_align(block, buf.name, self.lanes, lead)
        if blk.is_reduction:
            for prod in self._partials(sch, block):
                try:
                    sch.compute_at(prod, sch.sample_compute_location(prod))
                except ScheduleError:
                    pass
        return [sch]

    def _outside(self, sch: Schedule, block: BlockRV) -> LoopRV | None:
        """The loop of a TiledTranspose block's consumer that ``block``'s location must
        enclose: the one just outside the vector-by-vector block, whose two loops would
        compute ``block`` a row of a block at a time. Winograd's output transform placed
        there made a blocked epilogue's draws run 15.7 and 18.9 ms, where the best draws
        ran 1.7-1.8 (RESULTS.md). None when the consumer is not such a block."""
        # Looked up in the function, not through the schedule's recorded primitives: a
        # design space replayed with other decisions must record the same instructions.
        bufs = writes(sch.get(block))
        cons = {c.name: c for b in bufs for c in readers(sch.func, b)}
        if len(cons) != 1:
            return None
        [c] = cons.values()
        _, path = find_block(sch.func, c.name)
        if crossed_load(c) is None or len(path) < 3 or \
                any(lp.extent != self.lanes for lp in path[-2:]):
            return None
        return sch.get_loops(sch.get_block(c.name))[-3]

    @staticmethod
    def _partials(sch: Schedule, block: BlockRV) -> list[BlockRV]:
        """Reduction producers read by ``block`` alone (rfactor's partial results), except
        partials per part of the reduction (its first axis, which ``block`` reduces over):
        those run the parts in parallel at the root (AddRFactor's and OuterReduction's
        forks of parts), and in ``block``'s loops they would run part by part."""
        cons = sch.get(block)
        red = {iv.var for iv in cons.iter_vars if iv.kind == "R"}
        out = []
        for p in sch.get_producers(block):
            pb = sch.get(p)
            bufs = writes(pb)
            if pb.is_reduction and all(b in sch.func.alloc_buffers for b in bufs) and \
                    all(len(readers(sch.func, b)) == 1 for b in bufs) and \
                    not any(ld.indices and free_vars(ld.indices[0]) & red
                            for b in bufs for ld in loads_of(cons, b)):
                out.append(p)
        return out


def padded_row_start(blk: Block) -> int | None:
    """``p`` when ``blk`` is a padded copy along its last axis, ``out[..., v] =
    select(..., src[..., v - p], ...)`` with ``v`` the last iteration variable; else None."""
    st = blk.body
    if blk.is_reduction or not isinstance(st, BufferStore) or \
            not isinstance(st.value, Select) or not blk.iter_vars or \
            st.indices[-1] is not blk.iter_vars[-1].var:
        return None
    v = blk.iter_vars[-1].var
    for ld in iter_exprs(st.value.t):
        form = affine(ld.indices[-1]) if isinstance(ld, BufferLoad) and ld.indices else None
        if form is not None and len(form[0]) == 1 and form[0].get(v) == 1:
            return -form[1]
    return None


def read_in_lanes(func: PrimFunc, buf: Buffer) -> bool:
    """Whether some reader of ``buf`` has a vectorized loop that moves the last index of
    its loads of ``buf`` (the lanes run along ``buf``'s rows)."""
    for rd in readers(func, buf):
        _, path = find_block(func, rd.name)
        moved = set().union(*(axes_moved_by(rd, lp.var) for lp in path
                              if lp.kind == ForKind.VECTORIZED))
        if any(moved & free_vars(ld.indices[-1]) for ld in loads_of(rd, buf)):
            return True
    return False
