"""MultiLevelTiling: Ansor's and MetaSchedule's tiling sketch for blocks with data reuse.

Each spatial loop is split into 4 sampled perfect tiles and each reduction loop into 2,
reordered as the structure says (CPU default "SSRSRS"):

    S0 S1 R0 S2 R1 S3       # S0: parallel, S1: tile walk, S2 x S3: the register tile

The block writes a local tile (cache_write) whose write-back runs after the tile's
reduction (reverse_compute_at at the last S1 loop), with an element-wise consumer fused
into it (reverse_compute_inline); when the lanes run along output rows that share an L1
set, the tile goes through a strip-laid-out copy and the consumer is fused into the copy
instead (``_stage_output``). The S2/S3 loops are unrolled and the innermost S3 loop
vectorized, so the tile's indices are constants and the code generator keeps it in
registers. The init is moved out of the reduction loops (decompose_reduction).

Example:
    >>> MultiLevelTiling().apply(sch, sch.get_block("C"))
"""

from __future__ import annotations

from ..codegen.simd import chunk_width
from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.tree import axes_moved_by, loads_of, readers, reads, writes
from ..tir.arith import affine
from ..tir.expr import Var
from ..tir.functor import free_vars
from ..tir.stmt import Block, Buffer
from .layout import LayoutChoice, layout_choices, long_rows, pack_map, set_aliased, strip_map
from .low_reuse_dot import LowReuseDot
from .schedule_rule import ScheduleRule, has_reuse, is_elementwise, loop_kinds


class MultiLevelTiling(ScheduleRule):
    """``lanes``: float32 lanes of the target's vectors. The register tile (the spatial
    levels after the first reduction level, all unrolled) is sampled within a budget so
    that it can live in registers: at most ``4 * lanes`` along the vector axis and
    ``max_tile_factor`` along each other spatial axis. Unbounded, a random tile of a
    1024-long axis spans about 32 elements per axis, a tile that never fits the 16
    registers of AVX2."""

    def __init__(self, structure: str = "SSRSRS", max_innermost_factor: int = 64,
                 fuse_epilogue: bool = True, lanes: int = 16, max_tile_factor: int = 8
                 ) -> None:
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.fuse_epilogue = fuse_epilogue
        self.lanes = lanes
        self.max_tile_factor = max_tile_factor
        self.low_reuse = LowReuseDot(lanes=lanes)

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        kinds = loop_kinds(sch, block)
        if not has_reuse(blk) or any(k == "X" for _, k in kinds):
            return [sch]
        # A block whose largest input is reused a few times also gets dot products along
        # that input (space/low_reuse_dot.py), forked from the untiled schedule.
        dots = self.low_reuse.apply(sch, block)[1:]
        loop_of = {}
        for lp, _ in kinds:
            var = sch.get(lp).var
            for iv, b in zip(blk.iter_vars, blk.bindings):
                if var in free_vars(b):
                    loop_of[iv.var] = lp
        # One design space per axis that can fill the vector lanes (space/layout.py); the
        # first keeps the output's last axis innermost, as before any layout choice.
        choices: list[LayoutChoice | None] = list(layout_choices(blk, self.lanes)) or [None]
        out: list[Schedule] = []
        for choice in choices:
            forked = sch.copy()
            try:
                self._tile(forked, block, kinds, choice,
                           loop_of[choice.var] if choice is not None else None)
            except ScheduleError:
                continue
            out.append(forked)
        return (out or [sch]) + dots

    def _order_pack(self, sch: Schedule, pack: BlockRV, dim: int) -> None:
        """Walk a packed copy in the order of its destination: the loop over ``dim`` (the
        axis the pack moves last) goes innermost, a vector's worth of it, its outer part
        keeping its place. Left in source order, every store of CONVLAYER's weight repack
        went 128 floats apart and the repack took 10% of the kernel; walked this way it
        writes whole vectors and reads a few rows that stay in L1 (2.03 -> 1.78 ms).
        The copy's own loops are counted from the innermost: wherever it was computed
        (a sampled location), it has one per iterator."""
        loops = sch.get_loops(pack, innermost=len(sch.get(pack).iter_vars))
        if not 0 <= dim < len(loops) - 1:
            return  # already innermost
        extent = sch.get(loops[dim]).extent
        w = chunk_width(extent, self.lanes) if extent > self.lanes else None
        if w is None:
            sch.reorder(*[lp for i, lp in enumerate(loops) if i != dim], loops[dim])
            return
        outer, inner = sch.split(loops[dim], [None, w])
        sch.reorder(*[outer if i == dim else lp for i, lp in enumerate(loops)], inner)

    def _lay_out_pack(self, sch: Schedule, pack: BlockRV, buf: Buffer, dim: int,
                      choice: LayoutChoice) -> None:
        """Set a layout choice's packed copy of ``buf`` to its layout (``pack_map``; no
        strips for a sliding window or a group) and walk it in destination order."""
        strips = not choice.window and choice.group is None
        sch.transform_layout(pack, sch.get(pack).body.buffer.name,
                             pack_map(buf, dim, self.lanes, strips))
        self._order_pack(sch, pack, dim)

    def _tile(self, sch: Schedule, block: BlockRV, kinds: list[tuple[LoopRV, str]],
              choice: LayoutChoice | None, vec_loop: LoopRV | None) -> None:
        # Packs of a buffer that the outermost tile loop indexes (attention's K per head)
        # are made inside that loop, once it exists: each parallel job packs its own part.
        # The others are placed once the tile loops exist (``_place_pack``).
        per_outer: list[tuple[BlockRV, Buffer, int]] = []
        placed: list[tuple[BlockRV, Buffer, int]] = []
        if choice is not None:
            for idx, buf, dim in choice.packs:
                pack = sch.cache_read(block, idx, "global")
                if self._indexed_by_first(sch, block, pack, kinds, vec_loop, choice):
                    per_outer.append((pack, buf, dim))
                else:
                    placed.append((pack, buf, dim))
        if choice is not None and choice.group is not None and vec_loop is not None:
            # Groups: the part of the axis within a group goes in the lanes.
            whole = vec_loop
            outer, vec_loop = sch.split(whole, [None, choice.group])
            # The group loop stays outside the register tile (S0/S1 only): inside it,
            # the tile would be strided and its write-back could not be placed.
            kinds = [(outer, "G") if lp is whole else (lp, k) for lp, k in kinds]
        if vec_loop is not None:  # the vector axis goes last in every tile level
            kinds = [kl for kl in kinds if kl[0] is not vec_loop] + [(vec_loop, "S")]
        n_s, n_r = self.structure.count("S"), self.structure.count("R")
        tiles: dict[str, list[list[LoopRV]]] = {"S": [[] for _ in range(n_s)],
                                                "R": [[] for _ in range(n_r)]}
        s_loops = [lp for lp, k in kinds if k == "S"]
        vec_axis = vec_loop if vec_loop is not None else (s_loops[-1] if s_loops else None)
        blk = sch.get(block)
        lane_vars = set() if vec_axis is None else axes_moved_by(blk, sch.get(vec_axis).var)
        for lp, kind in kinds:
            n = {"S": n_s, "R": n_r, "G": self._first_r_level()}[kind]
            if kind == "S" and lp is vec_axis:
                # Whole vectors (or a half vector at the end, as 56 = 16 + 16 + 16 + 8 on
                # AVX-512): a loop of 28 lanes ends in a 4-wide chunk at a quarter of the
                # FMA rate, and scattering 56's prime factors makes 8 a rare draw.
                cap = min(self.max_innermost_factor, 4 * self.lanes)
                factors = sch.sample_perfect_tile(
                    lp, n=n, max_innermost_factor=cap, inner=n_s - self._first_r_level(),
                    multiple=chunk_width(sch.get(lp).extent, self.lanes) or 1)
            elif kind == "S":
                # Rows of the register tile need not divide the axis: 6 rows of 16 lanes
                # is the AVX2 tile, and 1024 has no factor 3. The tail is guarded.
                cap = self.max_tile_factor if _reused_across(blk, sch.get(lp).var) else 1
                factors = sch.sample_tile(lp, n=n, max_innermost_factor=cap,
                                          inner=n_s - self._first_r_level())
            else:
                factors = sch.sample_perfect_tile(lp, n=n, max_innermost_factor=1 << 30)
            for level, new in enumerate(sch.split(lp, factors)):
                tiles["S" if kind == "G" else kind][level].append(new)
        order: list[LoopRV] = []
        seen = {"S": 0, "R": 0}
        for ch in self.structure:
            order += tiles[ch][seen[ch]]
            seen[ch] += 1
        sch.reorder(*order)
        for pack, buf, dim in per_outer:
            assert choice is not None
            sch.compute_at(pack, order[0])  # on plain indices, before the layout is set
            self._lay_out_pack(sch, pack, buf, dim, choice)
        for pack, buf, dim in placed:
            assert choice is not None
            self._place_pack(sch, block, pack, tiles["S"][0], order)
            self._lay_out_pack(sch, pack, buf, dim, choice)
        self._pack_panels(sch, block, choice, lane_vars,
                          tiles["R"][0][0] if tiles["R"][0] else None, self.lanes)
        # The register tile: S loops after the first reduction level.
        inner_s = [lp for level in tiles["S"][self._first_r_level():] for lp in level]
        for lp in inner_s[:-1]:
            sch.unroll(lp)
        sch.vectorize(inner_s[-1])
        tile_loop = tiles["S"][self._first_r_level() - 1][-1]
        wb = sch.cache_write(block, 0, "local")
        staged = None
        if choice is not None and choice.tile_map is not None:
            sch.transform_layout(block, sch.get(wb).body.value.buffer.name, choice.tile_map)
            staged = self._stage_output(sch, wb, choice.out_dim, self.lanes)
        if self.fuse_epilogue:
            self._fuse_consumer(sch, staged if staged is not None else wb)
        sch.reverse_compute_at(wb, tile_loop)
        if staged is not None:
            self._copy_per_outer_tile(sch, wb, staged, tiles["S"][0][-1])
        # The write-back's own loops (one per buffer dimension) follow the tile loop; the
        # one over the vector axis goes last (the tile is contiguous in it).
        all_wb = sch.get_loops(wb)
        tile_var = sch.get(tile_loop).var
        pos = next(i for i, lp in enumerate(all_wb) if sch.get(lp).var is tile_var)
        wb_loops = all_wb[pos + 1:]
        if choice is not None and choice.tile_map is not None:
            wb_loops = [lp for i, lp in enumerate(wb_loops) if i != choice.out_dim] + \
                [wb_loops[choice.out_dim]]
            sch.reorder(*wb_loops)
        for lp in wb_loops[:-1]:
            sch.unroll(lp)
        sch.vectorize(wb_loops[-1])
        sch.decompose_reduction(block, tiles["R"][0][0])

    @staticmethod
    def _indexed_by_first(sch: Schedule, block: BlockRV, pack: BlockRV,
                          kinds: list[tuple[LoopRV, str]], vec_loop: LoopRV | None,
                          choice: LayoutChoice) -> bool:
        """Whether the loop that tiling will put outermost (the first spatial loop; the
        vector axis goes last unless a group keeps its outer part in place) moves the
        index of ``pack``'s buffer in ``block``: then packing inside it copies each
        element once. TBG's K per head, packed at the root in its own parallel loop with
        gathers along the 768-float rows, took 14 of 87 us; packed per head inside the
        head loop the kernel ran 76 us against 80 (hand-written C, two runs)."""
        first = next((lp for lp, k in kinds if k == "S" and
                      (lp is not vec_loop or choice.group is not None)), None)
        return first is not None and _moves_pack(sch, block, pack, first)

    @staticmethod
    def _place_pack(sch: Schedule, block: BlockRV, pack: BlockRV, outer: list[LoopRV],
                    order: list[LoopRV]) -> None:
        """Sample where a pack is made: at the root, shared by the parallel jobs, or
        inside the outermost tile loops ``outer`` at one that moves the index of
        ``pack``'s buffer in ``block`` (a conv's output-channel loop for its weights),
        where each parallel job packs the part it reads into memory of its own core.
        CONVLAYER's best kernel with its weights packed in the jobs ran 1.13x as fast as
        with the shared pack while the host was in its slow state, and level in the fast
        state (RESULTS.md). Outer loops that do not move the index repeat the pack (the
        search draws their extents, 1 among them). One sampled decision, not a design
        space per placement: the mutator moves a good program's pack, and the random
        draws are not split three ways between the spaces of a convolution."""
        if not any(_moves_pack(sch, block, pack, lp) for lp in outer):
            return   # at the root, as every job reads all of it
        # The candidates are the root and the outer tile loops that move the pack's index
        # (compute_location_candidates drops the others): those enclosing the next loop.
        after = order[order.index(outer[-1]) + 1]
        sch.compute_at(pack, sch.sample_compute_location(pack, outside=after))

    @staticmethod
    def _pack_panels(sch: Schedule, block: BlockRV, choice: LayoutChoice | None,
                     lane_vars: set[Var], first_r: LoopRV | None, lanes: int) -> None:
        """Stage each input that feeds the vector lanes and is reused across another
        spatial axis (a matmul's B) through a copy placed at a sampled loop outside the
        reduction loops (``first_r``): at the tile walk over the vector axis the copy is
        a contiguous [K, tile] panel, as a BLAS packs it; at the root it is a plain copy.
        Inside the reduction the copy would be redone for every tile at every step: on a
        ResNet 3x3 conv such a placement ran 1.4x slower than the root's (2.56 against
        1.85 ms). Inputs already packed by the layout choice are left alone.

        When the lanes read the last dimension as it is (no sliding window) and its rows
        are long (``layout.STRIP_MIN_ROW_BYTES``), the copy is laid out in vector-wide
        column strips, ``[N/lanes, K, lanes]``, as a BLAS packs its micro-panels: the
        register tile then reads each strip contiguously along k. The layout is set
        after the copy is placed, so the sampled location still sees plain indices."""
        blk = sch.get(block)
        spatial = {iv.var for iv in blk.iter_vars if iv.kind == "S"}
        packed = {buf.name for _, buf, _ in choice.packs} if choice is not None else set()
        params = set(sch.func.params)
        stores = writes(blk)
        for i, buf in enumerate(b for b in reads(blk) if b not in stores):
            if buf not in params or buf.name in packed:
                continue
            loads = loads_of(blk, buf)
            used = {u for ld in loads for ix in ld.indices for u in free_vars(ix)}
            last = {u for ld in loads for u in free_vars(ld.indices[-1])}
            if not (lane_vars & last) or not (spatial - used):
                continue  # not what the lanes read, or no reuse to pay for the copy
            pack = sch.cache_read(block, i, "global")
            sch.compute_at(pack, sch.sample_compute_location(pack, first_r))
            dim = len(buf.shape) - 1
            if long_rows(buf, dim, lanes) and all(ld.indices[-1] in lane_vars
                                                  for ld in loads):
                sch.transform_layout(pack, sch.get(pack).body.buffer.name,
                                     strip_map(len(buf.shape), dim, lanes))

    @staticmethod
    def _stage_output(sch: Schedule, wb: BlockRV, dim: int, lanes: int) -> BlockRV | None:
        """Write the tile through a strip-laid-out copy of its output when the lanes run
        along output dimension ``dim`` and its rows alias in L1 (``layout.set_aliased``);
        returns the copy block (the caller fuses the epilogue into it), or None.

        The write-back stores the lanes' elements one by one, ``dim``'s pitch apart. In
        DENSE that pitch is 12 KiB, so all 32 rows of a tile fall in one L1 set and evict
        the operands the next tile reads: a 12 x 32 tile ran at 155 GFLOP/s on one core,
        221 without its write-back; with its stores in row order, 158-160 into the real
        output and 189 into rows padded to 12352 bytes. The copy,
        [N/lanes, ..., lanes], keeps a tile's rows 64 bytes apart; a nest under the outer
        tile loop (``_copy_per_outer_tile``) then adds the bias and applies the ReLU in
        vectors on the way to the output. DENSE's
        found 5 x 32 program, replayed: 332-341 GFLOP/s as found, 355 through the copy
        with the epilogue left in the tile's write-back, 370 with it in the copy."""
        out = writes(sch.get(wb))[0]
        if not set_aliased(out, dim, lanes):
            return None
        return sch.cache_write(wb, 0, "global")

    def _copy_per_outer_tile(self, sch: Schedule, wb: BlockRV, copy: BlockRV,
                             outer: LoopRV) -> None:
        """Place the strip copy (``_stage_output``) under the last outer tile loop, then
        lay the staged buffer out in strips. Each iteration copies the strips its tiles
        just wrote, while they are in this core's cache; at the root the copy had read
        half of them from the other core's. DENSE's best program of re-run 16, its C
        edited by hand: 1467-1476 -> 1437-1443 us. The staged buffer then shrinks to one
        outer tile's strips (``tir.analysis.region`` of a strip index), on the stack."""
        sch.reverse_compute_at(copy, outer)
        buf = sch.get(wb).body.buffer
        ndim = len(buf.shape)
        sch.transform_layout(wb, buf.name, strip_map(ndim, ndim - 1, self.lanes))
        # Both sides are contiguous along the copy's last loop: whole vectors.
        sch.vectorize(sch.get_loops(copy)[-1])

    def _first_r_level(self) -> int:
        return self.structure[: self.structure.index("R")].count("S")

    @staticmethod
    def _fuse_consumer(sch: Schedule, wb: BlockRV) -> None:
        """Fold the chain of single element-wise consumers of the write-back into it (a
        conv's bias add, residual add and ReLU), so the output is written once."""
        while True:
            outs = writes(sch.get(wb))
            cons = [c for b in outs for c in readers(sch.func, b)]
            if len(cons) != 1 or not is_elementwise(cons[0]):
                return
            try:
                sch.reverse_compute_inline(sch.get_block(cons[0].name))
            except ScheduleError:
                return  # not injective: it stays a separate stage


def _reused_across(blk: Block, loop_var: Var) -> bool:
    """Whether some input of ``blk`` can be read again as the loop over ``loop_var``
    moves: some load's indices do not step with it. Every input of a batched matmul
    steps with the batch axis (A[b, i, k], B[b, k, j]), as every input of a depthwise
    conv does with the channel: such an axis in the register tile adds accumulators but
    no reuse of a loaded value. The best programs of BMM, TBG and DEP in the suite runs
    all kept it out of the tile, and BMM runs that spent a third of their trials on a
    tile of 2 batches x 1 row x 32 columns ended 1.3x slower than one that found 5 rows
    x 16 columns (RESULTS.md). An index that is not affine in the axis (a group's
    ``k // 16``) counts as reuse."""
    axes = axes_moved_by(blk, loop_var)
    stores = writes(blk)
    for buf in reads(blk):
        if buf in stores:
            continue
        for ld in loads_of(blk, buf):
            forms = [affine(ix) for ix in ld.indices]
            if not any(f is not None and any(f[0].get(v) for v in axes) for f in forms):
                return True
    return False


def _moves_pack(sch: Schedule, block: BlockRV, pack: BlockRV, loop: LoopRV) -> bool:
    """Whether ``loop`` moves the index at which ``block`` reads ``pack``'s buffer: then
    a pack made inside it holds only what one of its iterations reads."""
    blk = sch.get(block)
    moved = axes_moved_by(blk, sch.get(loop).var)
    buf = sch.get(pack).body.buffer
    return any(moved & free_vars(ix) for ld in loads_of(blk, buf) for ix in ld.indices)
