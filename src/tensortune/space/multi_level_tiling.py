"""MultiLevelTiling: Ansor's and MetaSchedule's tiling sketch for blocks with data reuse.

Each spatial loop is split into 4 sampled perfect tiles and each reduction loop into 2,
reordered as the structure says (CPU default "SSRSRS"):

    S0 S1 R0 S2 R1 S3       # S0: parallel, S1: tile walk, S2 x S3: the register tile

The block writes a local tile (cache_write) whose write-back runs after the tile's
reduction (reverse_compute_at at the last S1 loop), with an element-wise consumer fused
into it (reverse_compute_inline). The S2/S3 loops are unrolled and the innermost S3 loop
vectorized, so the tile's indices are constants and the code generator keeps it in
registers. The init is moved out of the reduction loops (decompose_reduction).

Example:
    >>> MultiLevelTiling().apply(sch, sch.get_block("C"))
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.tree import readers, writes
from .schedule_rule import ScheduleRule, has_reuse, is_elementwise, loop_kinds


class MultiLevelTiling(ScheduleRule):
    def __init__(self, structure: str = "SSRSRS", max_innermost_factor: int = 64,
                 fuse_epilogue: bool = True) -> None:
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.fuse_epilogue = fuse_epilogue

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        kinds = loop_kinds(sch, block)
        if not has_reuse(blk) or any(k == "X" for _, k in kinds):
            return [sch]
        n_s, n_r = self.structure.count("S"), self.structure.count("R")
        tiles: dict[str, list[list[LoopRV]]] = {"S": [[] for _ in range(n_s)],
                                                "R": [[] for _ in range(n_r)]}
        for lp, kind in kinds:
            n = n_s if kind == "S" else n_r
            factors = sch.sample_perfect_tile(lp, n=n, max_innermost_factor=(
                self.max_innermost_factor if kind == "S" else 1 << 30))
            for level, new in enumerate(sch.split(lp, factors)):
                tiles[kind][level].append(new)
        order: list[LoopRV] = []
        seen = {"S": 0, "R": 0}
        for ch in self.structure:
            order += tiles[ch][seen[ch]]
            seen[ch] += 1
        sch.reorder(*order)
        # The register tile: S loops after the first reduction level.
        inner_s = [lp for level in tiles["S"][self._first_r_level():] for lp in level]
        for lp in inner_s[:-1]:
            sch.unroll(lp)
        sch.vectorize(inner_s[-1])
        tile_loop = tiles["S"][self._first_r_level() - 1][-1]
        wb = sch.cache_write(block, 0, "local")
        if self.fuse_epilogue:
            self._fuse_consumer(sch, wb)
        sch.reverse_compute_at(wb, tile_loop)
        # The write-back's own loops (one per buffer dimension) follow the tile loop.
        all_wb = sch.get_loops(wb)
        tile_var = sch.get(tile_loop).var
        pos = next(i for i, lp in enumerate(all_wb) if sch.get(lp).var is tile_var)
        wb_loops = all_wb[pos + 1:]
        for lp in wb_loops[:-1]:
            sch.unroll(lp)
        sch.vectorize(wb_loops[-1])
        sch.decompose_reduction(block, tiles["R"][0][0])
        return [sch]

    def _first_r_level(self) -> int:
        return self.structure[: self.structure.index("R")].count("S")

    @staticmethod
    def _fuse_consumer(sch: Schedule, wb: BlockRV) -> None:
        """Fold a single element-wise consumer of the write-back into it."""
        blk = sch.get(wb)
        outs = writes(blk)
        cons = [c for b in outs for c in readers(sch.func, b)]
        if len(cons) != 1 or not is_elementwise(cons[0]):
            return
        try:
            sch.reverse_compute_inline(sch.get_block(cons[0].name))
        except ScheduleError:
            pass  # not injective: it stays a separate stage
