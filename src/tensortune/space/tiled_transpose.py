"""TiledTranspose: an element-wise block that reads its input across the rows its output
stores along (a transpose, ``T[j, i] = A[i, j]``) forks a space that walks both in
blocks of one vector by one vector.

As written, and as ParallelVectorizeUnroll leaves it, every store or every load of such
a copy strides by a whole row: a 1024 x 1024 transpose tuned at 64 trials took 1688 us,
PyTorch 622 us. In blocks of 16 x 16 with the lanes on the output's row, the code
generator loads 16 input rows and transposes them in registers (``codegen.gather``):
180 us by hand (RESULTS.md). ::

    for j_0 in parallel(J / 16):
        for i_0 in range(I / 16):
            for j_1 in range(16):
                for i_1 in vectorized(16):
                    T[j_0 * 16 + j_1, i_0 * 16 + i_1] = A[i_0 * 16 + i_1, j_0 * 16 + j_1]

It applies to a single-store block without reduction whose output's last index is one
of its iteration variables, one of whose inputs is indexed in its last dimension by
another iteration variable alone and by the first in another dimension, both extents
whole vectors (two or more).

Example:
    >>> TiledTranspose(lanes=16).apply(sch, sch.get_block("T"))   # [plain, blocked]
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, Schedule
from ..tir.expr import BufferLoad, Var
from ..tir.functor import free_vars, iter_exprs
from ..tir.stmt import Block, BufferStore
from .schedule_rule import ScheduleRule, loop_binding, loop_kinds


class TiledTranspose(ScheduleRule):
    def __init__(self, lanes: int = 16) -> None:
        self.lanes = lanes

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        pair = crossed_axes(blk)
        if pair is None:
            return [sch]
        kinds = loop_kinds(sch, block)
        out_lp, in_lp = (loop_binding(sch, kinds, blk, v) for v in pair)
        if out_lp is None or in_lp is None or any(
                sch.get(lp).extent % self.lanes or sch.get(lp).extent < 2 * self.lanes
                for lp in (out_lp, in_lp)):
            return [sch]
        order = [lp for lp, _ in kinds]
        lo, hi = sorted((out_lp, in_lp), key=order.index)
        forked = sch.copy()   # it keeps this schedule's loop handles
        try:
            # Split the inner one first: splitting the outer one leaves it in place.
            hi_o, hi_i = forked.split(hi, [None, self.lanes])
            lo_o, lo_i = forked.split(lo, [None, self.lanes])
            out_i, in_i = (lo_i, hi_i) if out_lp is lo else (hi_i, lo_i)
            # The outer loop of the two first, then the block's loops, the output's row
            # (the lanes) innermost.
            forked.reorder(lo_o, hi_o, in_i, out_i)
        except ScheduleError:
            return [sch]
        return [sch, forked]


def crossed_axes(blk: Block) -> tuple[Var, Var] | None:
    """(the output's last index, an input's last index) when both are iteration
    variables of ``blk`` and differ; None otherwise or for a reduction."""
    store = blk.body
    if blk.init is not None or blk.is_reduction or not isinstance(store, BufferStore) or \
            not store.indices:
        return None
    ivars = {iv.var for iv in blk.iter_vars}
    out = store.indices[-1]
    if not isinstance(out, Var) or out not in ivars:
        return None
    for ld in (x for x in iter_exprs(store.value) if isinstance(x, BufferLoad)):
        last = ld.indices[-1] if ld.indices else None
        # The load reads across the output's row: its last index is another variable,
        # and the output's last variable indexes one of its other dimensions (a row
        # broadcast, softmax's rowmax[i] under Y[i, n], is no transpose).
        if isinstance(last, Var) and last in ivars and last is not out and \
                any(out in free_vars(ix) for ix in ld.indices[:-1]):
            return out, last
    return None
