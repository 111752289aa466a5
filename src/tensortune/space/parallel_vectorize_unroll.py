"""ParallelVectorizeUnroll: the last step of every sketch. For each loop nest at the root,
fuse its leading spatial loops (up to a sampled multiple of the core count) and run them
in parallel; vectorize every block's innermost spatial loop that is still serial; ask the
compiler to unroll innermost reduction loops by a sampled depth.

A function of little work (``SMALL`` iterations over all its blocks) may also stay on one
core: starting and joining the OpenMP threads costs more than its loops. Scaling a
64 x 64 array ran in 0.20-0.28 us on one core and 0.68-0.95 us on two; at 256 x 256 two
cores won, 3.2-4.3 us against 4.7-5.9 (RESULTS.md). Its job choices are then none, one
and four per core, so the search measures both and keeps the faster.

Example:
    >>> ParallelVectorizeUnroll(cores=2).apply_all(sch)
"""

from __future__ import annotations

import math

from ..codegen.c import unroll_pragma_applies
from ..errors import ScheduleError
from ..schedule import LoopRV, Schedule
from ..schedule.tree import children, find_block, iter_blocks, readers, writes
from ..tir.functor import walk
from ..tir.stmt import PRAGMA_UNROLL, For, ForKind
from .schedule_rule import loop_kinds

# Iterations (summed over a function's blocks) up to which running on one core is a choice.
SMALL = 1 << 17


class ParallelVectorizeUnroll:
    def __init__(self, cores: int, jobs_per_core: tuple[int, ...] = (1, 4, 16),
                 unroll_depths: tuple[int, ...] = (0, 4, 16), max_vector: int = 256,
                 small_jobs_per_core: tuple[int, ...] = (0, 1, 4), lanes: int = 16) -> None:
        self.cores = cores
        self.lanes = lanes
        self.jobs_per_core = jobs_per_core
        self.small_jobs_per_core = small_jobs_per_core
        self.unroll_depths = unroll_depths
        self.max_vector = max_vector

    def apply_all(self, sch: Schedule, decisions: list | None = None) -> Schedule:
        """Apply to every nest; ``decisions`` fixes the two sampled choices (jobs, unroll)."""
        dec = list(decisions or [None, None])
        per_core = self.small_jobs_per_core if _work(sch) <= SMALL else self.jobs_per_core
        n = len(per_core)
        jobs = sch.sample_categorical([self.cores * j for j in per_core],
                                      [1.0 / n] * n, decision=dec[0])
        m = len(self.unroll_depths)
        unroll = sch.sample_categorical(list(self.unroll_depths), [1.0 / m] * m,
                                        decision=dec[1])
        max_jobs = sch.get(jobs)
        for top in children(sch.func.body) if max_jobs else ():
            # The first block decides, unless its outer loops are not its own spatial
            # loops (a packed copy placed inside a tile walk does not move with the row
            # loop around it): then the next block that can run its nest in parallel.
            # A block left outside that parallel loop (DENSE's strip copy beside the
            # tile nest, under outer tile loops of one iteration) gets its own.
            done = False
            for name in [b.name for b, _ in iter_blocks(top)]:
                if done and any(lp.kind == ForKind.PARALLEL
                                for lp in find_block(sch.func, name)[1]):
                    continue
                done = self._parallel(sch, name, max_jobs) or done
        for name in [b.name for b, _ in iter_blocks(sch.func.body)]:
            self._vectorize_unroll(sch, name, unroll)
        return sch

    def _parallel(self, sch: Schedule, name: str, max_jobs: int) -> bool:
        block = sch.get_block(name)
        kinds = loop_kinds(sch, block)
        chain, extent = self._chain(sch, kinds, max_jobs)
        if extent < 2:
            # Leading loops of one iteration that end the chain (a pack made inside the
            # outer tile loop, attention's heads, when its tile factor is 1) are passed
            # over: the nest below them can still run in parallel.
            skip = 0
            # (A loop of one iteration binds nothing: "X" for a block whose bindings
            # lost it, as a strip copy's under outer tile loops of extent 1.)
            while skip < len(kinds) and kinds[skip][1] in ("S", "X") and \
                    sch.get(kinds[skip][0]).extent == 1 and \
                    sch.get(kinds[skip][0]).kind == ForKind.SERIAL:
                skip += 1
            if skip:
                chain, extent = self._chain(sch, kinds[skip:], max_jobs)
        # The chain's loops are nested, so the outermost one's subtree holds every loop
        # the others could nest a parallel loop around.
        if not chain or extent < 2 or any(
                isinstance(x, For) and x.kind == ForKind.PARALLEL
                for x in walk(sch.get(chain[0]).body)):
            return False   # nothing to share out, or it would nest parallel loops
        try:
            fused = sch.fuse(*chain) if len(chain) > 1 else chain[0]
            sch.parallel(fused)
        except ScheduleError:
            return False
        return True

    @staticmethod
    def _chain(sch: Schedule, kinds: list[tuple[LoopRV, str]], max_jobs: int
               ) -> tuple[list[LoopRV], int]:
        """The leading serial spatial loops to fuse and run in parallel (perfectly nested,
        up to ``max_jobs`` iterations), and their iteration count."""
        chain = []
        extent = 1
        for i, (lp, kind) in enumerate(kinds):
            node: For = sch.get(lp)
            if kind != "S" or node.kind != ForKind.SERIAL or extent >= max_jobs:
                break
            if i + 1 < len(kinds) and node.body is not sch.get(kinds[i + 1][0]):
                chain.append(lp)  # not perfectly nested below: this is the last one
                extent *= node.extent
                break
            chain.append(lp)
            extent *= node.extent
        return chain, extent

    def _vectorize_unroll(self, sch: Schedule, name: str, unroll) -> None:
        block = sch.get_block(name)
        kinds = loop_kinds(sch, block)
        if not kinds:
            return
        if self._is_partial(sch, name):
            kinds = self._partial_axis_last(sch, block, kinds)
        lp, kind = kinds[-1]
        node: For = sch.get(lp)
        whole = False
        if kind == "S" and node.kind == ForKind.SERIAL and node.extent > self.max_vector:
            # A long untiled row (softmax's output): vectorize a chunk of whole vectors;
            # with none dividing it (1001, or 1000 with 16 lanes), the whole row, which
            # the code generator emits as a loop over whole vectors and a short tail (a
            # GELU over rows of 1001 stayed scalar and ran 8x slower than PyTorch; a
            # softmax over rows of 1000 in 8-lane chunks ran at half the vector width,
            # RESULTS.md).
            chunk = next((c for c in (64, 32, 16, 8)
                          if node.extent % c == 0 and c % self.lanes == 0), None)
            if chunk is not None:
                lp = sch.split(lp, [None, chunk])[1]
                node = sch.get(lp)
            else:
                whole = True
        if kind == "S" and node.kind == ForKind.SERIAL and (node.extent <= self.max_vector
                                                             or whole):
            try:
                sch.vectorize(lp)
            except ScheduleError:
                pass
        reds = [lp for lp, k in kinds if k == "R" and sch.get(lp).kind == ForKind.SERIAL]
        if reds and unroll_pragma_applies(sch.get(reds[-1]), int(sch.get(unroll))):
            sch.annotate(reds[-1], PRAGMA_UNROLL, unroll)

    @staticmethod
    def _is_partial(sch: Schedule, name: str) -> bool:
        """An rfactor partial: a reduction whose outputs only one reduction reads."""
        blk = sch.get(sch.get_block(name))
        if not blk.is_reduction:
            return False
        for b in writes(blk):
            cons = readers(sch.func, b)
            if b not in sch.func.alloc_buffers or len(cons) != 1 or not cons[0].is_reduction:
                return False
        return True

    @staticmethod
    def _partial_axis_last(sch: Schedule, block, kinds: list) -> list:
        """compute_at rebuilds a block's loops spatial-first; a partial-result axis must
        be innermost, under the reduction loops, to be vectorized."""
        wide = [i for i, (lp, k) in enumerate(kinds) if k == "S" and sch.get(lp).extent > 1]
        if not wide or all(k != "R" for _, k in kinds[wide[-1]:]) or \
                sch.get(kinds[wide[-1]][0]).kind != ForKind.SERIAL:
            return kinds
        seg = [lp for lp, _ in kinds[wide[-1]:]]
        try:
            sch.reorder(*seg[1:], seg[0])
        except ScheduleError:
            return kinds
        return loop_kinds(sch, block)


def _work(sch: Schedule) -> int:
    """Iterations of the function's blocks, summed: of the function as written, so that
    every draw of it has the same job choices."""
    return sum(math.prod(lp.extent for lp in loops)
               for _, loops in iter_blocks(sch.original.body))
