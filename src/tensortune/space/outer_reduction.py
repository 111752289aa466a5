"""OuterReduction: a reduction over the outer axis of its input (a column sum) keeps a
run of its output in vector registers while the reduction walks the rows.

``S[j] = sum_i A[i, j]`` as written reads a column at a time: 512 columns of 4096 rows
of float32, each element 2 KiB from the last. AddRFactor's fork vectorizes along the
column and still strides by the row. The tuned kernel took 3.5 ms, PyTorch 0.13 ms
(RESULTS.md). This rule forks the space into one where the output's last axis is split,
its inner part (a sampled multiple of the vector width) goes below the reduction loops
(contiguous loads, vectorized by ParallelVectorizeUnroll), its accumulators are a local
tile written back after the reduction (held in registers), and the outer part is
shared out across the cores::

    for j_0 in parallel(J / c):
        acc[0:c] = 0
        for i in range(I):
            acc[0:c] += A[i, j_0 * c : j_0 * c + c]     # vectors
        S[j_0 * c : j_0 * c + c] = acc[0:c]

Where the input's rows are a page or longer (a vector-matrix product over 4096 columns),
each row of a run is on a page of its own; the rule then also forks a space that reads
the rows in order: the reduction split into parts, one partial output row per part
(rfactor, the part loop outermost and shared out), each row's whole length below the
reduction loop::

    for p in parallel(P):
        part[p, :] = 0
        for i in range(I / P):
            part[p, :] += A[p * I / P + i, :]          # vectors, chunk by chunk
    S[:] = sum_p part[p, :]

It applies to a reduction without reuse (MultiLevelTiling's blocks are left to it)
whose innermost loop is a reduction loop and whose output's last axis indexes every
input that reads it in the last dimension only, at unit stride, apart from any reduction
axis: the row reductions of softmax or layer norm, whose output axis is the rows, do
not qualify.

Example:
    >>> OuterReduction(lanes=16).apply(sch, sch.get_block("S"))   # [plain, forked]
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.tree import reads
from ..tir.arith import affine
from ..tir.expr import BufferLoad, Var, dtype_bytes
from ..tir.functor import free_vars, iter_exprs
from ..tir.stmt import Block, BufferStore
from .schedule_rule import ScheduleRule, loop_binding, loop_kinds, sample_parts, untiled_reduction

# The widest run of the output held in registers: 128 floats are 8 AVX-512 vectors.
MAX_RUN = 128
# Rows this long (bytes) or longer put each row of a run on a page of its own.
PAGE = 4096


class OuterReduction(ScheduleRule):
    def __init__(self, lanes: int = 16, max_run: int = MAX_RUN, cores: int = 1) -> None:
        self.lanes = lanes
        self.max_run = max_run
        self.cores = cores

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        found = untiled_reduction(sch, block)
        if found is None:
            return [sch]
        blk, kinds = found
        axis = _contiguous_axis(blk)
        if axis is None:
            return [sch]
        loop = loop_binding(sch, kinds, blk, axis)
        if loop is None or sch.get(loop).extent < self.lanes:
            return [sch]
        loops = [lp for lp, _ in kinds]
        at = loops.index(loop)
        forked = sch.copy()   # it keeps this schedule's block and loop handles
        try:
            f = forked.sample_perfect_tile(loop, n=2, max_innermost_factor=self.max_run,
                                           multiple=self.lanes)
            outer, inner = forked.split(loop, f)
            forked.reorder(*loops[:at], outer, *loops[at + 1:], inner)
            acc = forked.cache_write(block, 0, "local")
            forked.reverse_compute_at(acc, outer)
            first_r = next(lp for lp, k in loop_kinds(forked, block) if k == "R")
            forked.decompose_reduction(block, first_r)
        except ScheduleError:
            return [sch]
        out = [sch, forked]
        if self.cores > 1 and _row_bytes(blk) >= PAGE:
            rows = self._rows_in_order(sch, block, kinds)
            if rows is not None:
                out.append(rows)
        return out

    def _rows_in_order(self, sch: Schedule, block: BlockRV,
                       kinds: list[tuple[LoopRV, str]]) -> Schedule | None:
        """The fork of one partial output row per part of the reduction (module
        docstring). A vector-matrix product of 4096 x 4096 by hand, so scheduled: 1.8-2.8
        ms against 3.7 ms for runs of 128 columns and PyTorch's 2.6-2.8 (RESULTS.md)."""
        first = next(i for i, (_, k) in enumerate(kinds) if k == "R")
        loop = kinds[first][0]
        forked = sch.copy()
        p = sample_parts(forked, sch.get(loop).extent, self.cores, (1, 4))
        if p is None:
            return None
        try:
            forked.split(loop, [p, None])
            part = forked.rfactor(forked.get_loops(block)[first], 0)
            rf_kinds = loop_kinds(forked, part)
            outer, inner = rf_kinds[first][0], rf_kinds[first + 1][0]
            rest = [lp for i, (lp, _) in enumerate(rf_kinds) if i not in (first, first + 1)]
            kind = dict(rf_kinds)
            order = [outer, inner] + [lp for lp in rest if kind[lp] == "R"] + \
                    [lp for lp in rest if kind[lp] != "R"]
            forked.reorder(*order)
            forked.decompose_reduction(part, inner)
        except ScheduleError:
            return None
        return forked


def _row_bytes(blk: Block) -> int:
    """Bytes in a row (the last dimension) of the widest buffer the block reads."""
    return max((int(b.shape[-1]) * dtype_bytes(b.dtype) for b in reads(blk) if b.shape),
               default=0)


def _contiguous_axis(blk: Block) -> Var | None:
    """The spatial iteration variable indexing the output's last dimension, if every
    input that it indexes holds it in its last dimension alone, at unit stride and with
    no reduction variable there; else None."""
    store = blk.body
    if not isinstance(store, BufferStore) or not store.indices:
        return None
    last = store.indices[-1]
    spatial = {iv.var for iv in blk.iter_vars if iv.kind == "S"}
    reduce = {iv.var for iv in blk.iter_vars if iv.kind == "R"}
    if not isinstance(last, Var) or last not in spatial:
        return None
    used = False
    for ld in (x for x in iter_exprs(store.value) if isinstance(x, BufferLoad)):
        if ld.buffer is store.buffer:
            continue
        dims = [d for d, ix in enumerate(ld.indices) if last in free_vars(ix)]
        if not dims:
            continue
        ix = ld.indices[dims[0]]
        aff = affine(ix)
        if dims != [len(ld.indices) - 1] or aff is None or aff[0].get(last) != 1 or \
                free_vars(ix) & reduce:
            return None
        used = True
    return last if used else None
