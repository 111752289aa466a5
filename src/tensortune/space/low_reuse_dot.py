"""LowReuseDot: a reduction whose largest input is reused only a few times (a dense layer
over 2-8 rows) forks a space of dot products along that input's contiguous reduction
axis, beside MultiLevelTiling's tiles (MultiLevelTiling calls it on the untiled block).

``C[i, j] = sum_k X[i, k] W[j, k]`` with 4 rows of ``X`` reads each row of ``W`` four
times. MultiLevelTiling puts ``j`` in the lanes, which needs ``W`` packed, for four uses
(a dense layer of 768 -> 3072 over 4 rows ran at 67 GFLOP/s, RESULTS.md). This rule's
space loads each vector of ``W`` once and uses it for every row, the rows' partial dot
products in registers::

    for j in parallel(J):
        acc[0:4, 0:L] = 0                              # registers: rows x vectors
        for k_0 in range(K / L):
            for i in unrolled(4):
                acc[i, :] += X[i, k_0*L : +L] * W[j, k_0*L : +L]
        part[0:4, j, 0:L] = acc
    C[i, j] = sum_l part[i, j, l]                       # a tree of vector adds

Example:
    >>> LowReuseDot(lanes=16).apply(sch, sch.get_block("matmul"))   # [plain, dot]
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, Schedule
from ..schedule.tree import writes
from ..tir.expr import BufferLoad, Var
from ..tir.functor import iter_exprs
from ..tir.stmt import Block, BufferStore
from .schedule_rule import ScheduleRule, has_reuse, loop_kinds

# The most uses of each element of the largest input for which the rule forks: the rows
# of the register tile are these uses.
MAX_REUSE = 8


class LowReuseDot(ScheduleRule):
    def __init__(self, lanes: int = 16, max_reuse: int = MAX_REUSE,
                 max_run: int = 64) -> None:
        self.lanes = lanes
        self.max_reuse = max_reuse
        self.max_run = max_run

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk: Block = sch.get(block)
        if not has_reuse(blk):
            return [sch]
        found = _dot_axes(blk)
        if found is None:
            return [sch]
        red, reused = found
        extent_of = {iv.var: iv.extent for iv in blk.iter_vars}
        reuse = 1
        for v in reused:
            reuse *= extent_of[v]
        extent = extent_of[red]
        # Decided from the block alone, before any loop lookup enters the trace.
        if not 1 < reuse <= self.max_reuse or extent % self.lanes or \
                extent < 2 * self.lanes:
            return [sch]
        kinds = loop_kinds(sch, block)
        if not kinds or any(k == "X" for _, k in kinds):
            return [sch]
        loops = [lp for lp, _ in kinds]
        var_of = {sch.get(lp).var: lp for lp in loops}
        binding = dict(zip((iv.var for iv in blk.iter_vars), blk.bindings))
        bound = {v: var_of.get(b) if isinstance(b, Var) else None
                 for v, b in binding.items()}
        if bound[red] is not loops[-1] or any(bound[v] is None for v in reused):
            return [sch]
        forked = sch.copy()   # it keeps this schedule's loop handles
        try:
            ndim = len(next(iter(writes(blk))).shape)
            _, run = forked.split(loops[-1], forked.sample_perfect_tile(
                loops[-1], n=2, max_innermost_factor=self.max_run, multiple=self.lanes))
            part = forked.rfactor(run, ndim)
            rl = forked.get_loops(part)
            row_vars = {forked.get(bound[v]).var for v in reused}
            rows = [lp for lp in rl[:-2] if forked.get(lp).var in row_vars]
            kept = [lp for lp in rl[:-2] if lp not in rows]
            forked.reorder(*kept, rl[-2], *rows, rl[-1])
            acc = forked.cache_write(part, 0, "local")
            if kept:
                forked.reverse_compute_at(acc, kept[-1])
            init = forked.decompose_reduction(part, rl[-2])
            # The rows unrolled, so the accumulators are registers (codegen promotes a
            # local buffer whose indices are constants and lanes).
            for lp in rows:
                forked.unroll(lp)
            for b in (init, acc):
                for lp in forked.get_loops(b)[len(kept):-1]:
                    forked.unroll(lp)
        except ScheduleError:
            return [sch]
        return [sch, forked]


def _dot_axes(blk: Block) -> tuple[Var, list[Var]] | None:
    """(the reduction variable, the spatial variables it lacks) when the block's largest
    input is indexed by plain iteration variables with a reduction variable last, else
    None."""
    if not isinstance(blk.body, BufferStore):
        return None
    own = blk.body.buffer
    loads = [x for x in iter_exprs(blk.body.value) if isinstance(x, BufferLoad)
             and x.buffer is not own]
    if not loads:
        return None
    big = max(loads, key=lambda ld: ld.buffer.size)
    kinds = {iv.var: iv.kind for iv in blk.iter_vars}
    ix = [i for i in big.indices if isinstance(i, Var) and i in kinds]
    if not ix or len(ix) != len(big.indices) or kinds[ix[-1]] != "R":
        return None
    reused = [iv.var for iv in blk.iter_vars if iv.kind == "S" and iv.var not in set(ix)
              and iv.extent > 1]
    return ix[-1], reused
