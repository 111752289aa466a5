"""VerifyRegisterTile: a post-processor that rejects a drawn program whose register tile
cannot live in registers.

MultiLevelTiling bounds each axis of its register tile on its own (``4 * lanes`` along the
vector axis, ``max_tile_factor`` along the others), so a convolution's four spatial axes
still admit tiles of 5 x 8 x 56 = 2,240 accumulators. The code generator keeps a tile in
vector variables only up to 1.25x the register file (``codegen.simd``); a larger one is
summed through a stack array on every step of the reduction, and its fully unrolled body
is what gcc spends the longest on. The limit here is twice the register file: in a
96-trial C2D run and a 64-trial CONVLAYER run every candidate above it measured 0.43x of
its run's best or slower and took 2.1 s of build on average against 0.9 s for the rest,
while tiles between 1.25x and 2x still reached 0.90x (RESULTS.md). Such a draw is
rejected and re-drawn, as MetaSchedule's GPU post-processor rejects a kernel that
exceeds the device's resources.

The tile of a block that accumulates into a ``local`` buffer (a ``cache_write`` stage) is
its spatial loops inside its outermost reduction loop, ``S2 x S3`` of ``SSRSRS``:

    for S0, S1:                       # tile walk
      for R0:                         # outermost reduction loop
        for S2 (unrolled), R1, S3 (vectorized):  acc[S2, S3] += ...

counted in the vectors the vectorized loop is emitted as (`codegen.simd.chunk_plan`: a row
of 56 floats is four on AVX-512, 16 + 16 + 16 + 8 lanes).

It is the last post-processor of ``PostOrderApply.default``. ``sample`` also runs it
during the replay (``check_partial``, ``space.replay_check``), on the tiles that the rest
of the trace no longer changes: a draw whose tile is too large then stops there instead
of after the rest of the trace and the other post-processors. A space whose vector axis
is not whole vectors (C2D 8 -> 8 channels at 10 x 10, 10-wide rows) counts its tiles in
scalars, as the code generator runs them, and some of its draws are rejected too.

Example:
    >>> gen = PostOrderApply.default(target)        # the check is its last post-processor
    >>> VerifyRegisterTile(max_vectors=64).apply_all(sch)   # raises ScheduleError if not
"""

from __future__ import annotations

from ..codegen.simd import chunk_plan
from ..codegen.target import Target
from ..errors import ScheduleError
from ..schedule import Schedule
from ..schedule.tree import iter_blocks
from ..tir.functor import free_vars
from ..tir.stmt import Block, For, ForKind
from .schedule_rule import register_tiled


class VerifyRegisterTile:
    """``max_vectors``: the most vector (or scalar) accumulators a tile may hold;
    ``lanes``: float32 lanes of the target's vectors."""

    def __init__(self, max_vectors: int = 64, lanes: int = 16) -> None:
        self.max_vectors = max_vectors
        self.lanes = lanes

    @staticmethod
    def for_target(target: Target) -> VerifyRegisterTile:
        return VerifyRegisterTile(2 * target.vector_registers, target.lanes("float32"))

    def apply_all(self, sch: Schedule, decisions: list | None = None) -> Schedule:
        """Raise ``ScheduleError`` naming the block if a register tile is too large; it
        samples nothing, so ``decisions`` is ignored."""
        for blk, loops in iter_blocks(sch.func.body):
            self._check(blk, self.tile_vectors(blk, loops))
        return sch

    def check_partial(self, sch: Schedule, changing: frozenset[str] = frozenset()) -> None:
        """The check part way through a replay, on the blocks not in ``changing`` (those
        the rest of the trace may move or re-tile); it rejects only what ``apply_all``
        would reject at the end. A tile whose innermost loop is vectorized is counted as
        at the end (a loop stays vectorized, and the last vectorized loop is what counts);
        any other tile counts the fewest vectors its elements fit in, since the
        post-processors may still vectorize one of its loops (LowReuseDot's tile is
        scalar until ParallelVectorizeUnroll runs)."""
        if not any(b.scope == "local" for b in sch.func.alloc_buffers):
            return      # no tile written back yet: the prefix before the first tiling
        for blk, loops in iter_blocks(sch.func.body):
            if blk.name in changing:
                continue
            elements, vector, chunks, innermost = self._tile(blk, loops)
            if innermost:
                self._check(blk, -(-elements // vector) * chunks)
            else:
                self._check(blk, -(-elements // self.lanes))

    def _check(self, blk: Block, vectors: int) -> None:
        if vectors > self.max_vectors:
            raise ScheduleError(
                f"block {blk.name!r}: its register tile needs {vectors} vector "
                f"accumulators, more than the {self.max_vectors} that fit in registers")

    def tile_vectors(self, blk: Block, loops: tuple[For, ...]) -> int:
        """Vector accumulators of ``blk``'s register tile (0 if it has none)."""
        elements, vector, chunks, _ = self._tile(blk, loops)
        return -(-elements // vector) * chunks

    def _tile(self, blk: Block, loops: tuple[For, ...]) -> tuple[int, int, int, bool]:
        """The elements of ``blk``'s register tile (0 if it has none), the lanes of its
        vectorized loop and the vectors that loop is emitted as (1 and 1 if none), and
        whether that loop is the block's innermost."""
        if not register_tiled(blk):
            return 0, 1, 1, False
        red: set = set()
        spatial: set = set()
        for iv, b in zip(blk.iter_vars, blk.bindings):
            (red if iv.kind == "R" else spatial).update(free_vars(b))
        first_r = next((i for i, f in enumerate(loops) if f.var in red), None)
        if first_r is None:
            return 0, 1, 1, False
        elements, vector, chunks, innermost = 1, 1, 1, False
        for f in loops[first_r + 1:]:
            if f.var in red or f.var not in spatial:
                continue
            elements *= f.extent
            plan = chunk_plan(f.extent, self.lanes) if f.kind == ForKind.VECTORIZED else None
            if plan is not None:  # a row of 56 floats is 4 vectors on AVX-512 (16+16+16+8)
                vector, chunks, innermost = f.extent, len(plan), f is loops[-1]
        return elements, vector, chunks, innermost
