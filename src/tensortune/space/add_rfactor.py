"""AddRFactor: for reductions with little reuse (norms, row max/sum), fork the space into
the plain reduction and one whose innermost reduction loop is split (sampled) and turned
into a spatial axis of partial results by rfactor, which can then be vectorized.

A reduction with too few outputs to share among the cores (a whole-array sum) also forks
a space of partial results per core: the reduction loop split into a parallel part, a
serial part and a vector run, rfactored twice (per part, then per lane), the per-lane
partials accumulated in a local tile.

Example:
    >>> AddRFactor().apply(sch, sch.get_block("sumsq"))     # [plain, rfactored]
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.tree import reads, writers, writes
from ..tir.stmt import Block, Buffer
from .schedule_rule import ScheduleRule, sample_parts, untiled_reduction

# The fewest whole vectors an axis needs for the whole-vectors-and-a-tail fork.
TAIL_MIN_VECTORS = 8


class AddRFactor(ScheduleRule):
    """``lanes``: the float32 vector width. A long axis (``TAIL_MIN_VECTORS`` vectors or
    more) with no divisor of whole vectors up to ``max_innermost_factor`` (a softmax row
    of 1001 = 7 x 11 x 13) forks a third space, split into whole vectors and a guarded
    tail: with a divisor alone its partial results held 7 or 11 lanes. The code
    generator runs all but the last step of the tail's loop as whole vectors
    (``codegen.partition``). Softmax 64 x 1001, three seeds of 64 trials: 1.13-1.18x
    faster with the fork; 924 x 77 (a tail a sixth of the row) was level on two seeds and
    0.72x on one, the larger space costing the search its best (RESULTS.md), hence the
    length."""

    def __init__(self, max_innermost_factor: int = 64, min_extent: int = 32,
                 lanes: int = 16, cores: int = 1) -> None:
        self.max_innermost_factor = max_innermost_factor
        self.min_extent = min_extent
        self.lanes = lanes
        self.cores = cores

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        found = untiled_reduction(sch, block)
        if found is None:
            return [sch]
        blk, kinds = found
        if _sums_partials(sch, blk):
            return [sch]
        inner = kinds[-1][0]
        extent = sch.get(inner).extent
        if extent < self.min_extent:
            return [sch]
        ndim = len(next(iter(writes(blk))).shape)

        def rfactored(factors) -> Schedule | None:
            forked = sch.copy()   # it keeps this schedule's loop handles
            try:
                _, ri = forked.split(inner, factors(forked))
                # The partial axis goes last: the vectorized loop then stores contiguously.
                forked.rfactor(ri, ndim)
            except ScheduleError:
                return None
            return forked

        forks = [rfactored(lambda f: f.sample_perfect_tile(
            inner, n=2, max_innermost_factor=self.max_innermost_factor))]
        if extent >= TAIL_MIN_VECTORS * self.lanes and not any(
                extent % d == 0
                for d in range(self.lanes, self.max_innermost_factor + 1, self.lanes)):
            forks.append(rfactored(lambda f: [None, self.lanes]))
        spatial = 1
        for lp, kind in kinds:
            if kind == "S":
                spatial *= sch.get(lp).extent
        if spatial < 2 * self.cores:
            forks.append(self._per_core(sch, block, inner, extent, ndim))
        return [sch] + [f for f in forks if f is not None]

    def _per_core(self, sch: Schedule, block: BlockRV, inner: LoopRV, extent: int,
                  ndim: int) -> Schedule | None:
        """The fork of partial results per core: ``inner`` split into [parts, serial,
        run]; rfactor over the parts, then over the run of the parts' partials, whose
        loops are then (spatial, parts, serial, run): PVU runs the parts in parallel and
        vectorizes the run. A whole-array sum of 2^20 floats ran on one core, 0.77x
        PyTorch; by hand, this shape 29 us against PyTorch's 33 (RESULTS.md)."""
        forked = sch.copy()
        p = sample_parts(forked, extent, self.cores, (1, 4, 16), unit=self.lanes)
        if p is None:
            return None
        try:
            outer, rest = forked.split(inner, [p, None])
            serial, run = forked.split(rest, forked.sample_perfect_tile(
                rest, n=2, max_innermost_factor=self.max_innermost_factor,
                multiple=self.lanes))
            per_part = forked.rfactor(outer, 0)
            per_lane = forked.rfactor(forked.get_loops(per_part)[-1], ndim + 1)
            part_loop, serial_loop = forked.get_loops(per_lane)[-3:-1]
            acc = forked.cache_write(per_lane, 0, "local")
            forked.reverse_compute_at(acc, part_loop)
            forked.decompose_reduction(per_lane, serial_loop)
        except ScheduleError:
            return None
        return forked


def _sums_partials(sch: Schedule, blk: Block) -> bool:
    """Whether ``blk`` reads only the partial results of other reductions, directly or
    through a cache's write-back (the lane sum LowReuseDot's fork leaves): a run of at
    most a few vectors, which more partials would only make longer to sum."""
    def inputs(b: Block) -> set[Buffer]:
        return set(reads(b)) - set(writes(b))

    def partial(buf: Buffer, depth: int = 0) -> bool:
        if buf not in sch.func.alloc_buffers:
            return False
        ws = writers(sch.func, buf)
        # A reduction, its decomposed init (reads nothing), or a write-back of one.
        return bool(ws) and all(
            w.is_reduction or not (ins := inputs(w)) or
            (depth == 0 and len(ins) == 1 and partial(next(iter(ins)), 1)) for w in ws)

    ins = inputs(blk)
    return bool(ins) and all(partial(b) for b in ins)
