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
whole vectors (two or more). An axis shorter than that is fused first with the axes
just outside it, where the buffer holds them consecutively: Winograd's filter copy
``wt[c, r, s, k] = W[k, c, r, s]`` walks W along c, r and s as one loop of C * 9 (s
alone is 3), and ``arith.simplify`` merges the fused loop's quotients and remainders
back into a linear index (RESULTS.md: the copy's share of a 343 us CONVLAYER kernel).

A block is read as it will be once AutoInline has inlined its producers into it
(``inlined_view``): the rules visit consumers first, so the Winograd forms' epilogue
still reads their NCHW copy along its rows when this rule visits it, and the copy, the
transpose, is inlined into it afterwards. Blocked, the epilogue took the best three
CONVLAYER and C2D Winograd programs of two searches from 314-355 to 295-335 us, and
through the register transpose (``codegen.gather``, which takes the epilogue's scale,
shift and ReLU along) to 273-322 us (RESULTS.md). RandomComputeLocation places a producer
of such a block outside its two block loops.

Example:
    >>> TiledTranspose(lanes=16).apply(sch, sch.get_block("T"))   # [plain, blocked]
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.inline import compute_inline
from ..schedule.tree import blocks_under, find_block, reads, writers
from ..tir.expr import BufferLoad, Expr, Var
from ..tir.functor import free_vars, iter_exprs
from ..tir.stmt import Block, BufferStore, PrimFunc
from .schedule_rule import ScheduleRule, loop_binding, loop_kinds


class TiledTranspose(ScheduleRule):
    def __init__(self, lanes: int = 16) -> None:
        self.lanes = lanes

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        load = crossed_load(blk)
        if load is None:
            # The rules visit consumers first: a copy that AutoInline will inline into
            # this block is still a stage of its own here, and would never be tiled.
            blk = inlined_view(sch.func, blk)
            load = crossed_load(blk)
        if load is None:
            return [sch]
        store = blk.body
        assert isinstance(store, BufferStore)
        kinds = loop_kinds(sch, block)
        order = [lp for lp, _ in kinds]
        out_run = self._run(sch, kinds, order, blk, store.indices, store.buffer.shape)
        in_run = self._run(sch, kinds, order, blk, load.indices, load.buffer.shape)
        if out_run is None or in_run is None or set(out_run) & set(in_run):
            return [sch]
        out_first = order.index(out_run[0]) < order.index(in_run[0])
        forked = sch.copy()   # it keeps this schedule's loop handles
        try:
            out_lp, in_lp = (run[0] if len(run) == 1 else forked.fuse(*run)
                             for run in (out_run, in_run))
            lo, hi = (out_lp, in_lp) if out_first else (in_lp, out_lp)
            # Split the inner one first: splitting the outer one leaves it in place.
            hi_o, hi_i = forked.split(hi, [None, self.lanes])
            lo_o, lo_i = forked.split(lo, [None, self.lanes])
            out_i, in_i = (lo_i, hi_i) if out_first else (hi_i, lo_i)
            # The outer loop of the two first, then the block's loops, the output's row
            # (the lanes) innermost.
            forked.reorder(lo_o, hi_o, in_i, out_i)
        except ScheduleError:
            return [sch]
        return [sch, forked]

    def _run(self, sch: Schedule, kinds: list[tuple[LoopRV, str]], order: list[LoopRV],
             blk: Block, indices: tuple[Expr, ...], shape: tuple[int, ...]
             ) -> list[LoopRV] | None:
        """The loops to fuse into one that walks a buffer's last dimension (``indices``
        its access, each a variable): the loop of the last index, and while that is not
        a whole number of vectors (two or more), the loop just outside it when that one
        binds the index before and the inner dimensions are walked whole, so the fused
        loop walks consecutive elements (Winograd's filter copy reads W[k, c, r, s] along
        c, r and s together, 1152 floats, where s alone is 3). None if no run reaches
        whole vectors. ``order`` is ``kinds``' loops."""
        ivars = {iv.var for iv in blk.iter_vars}
        dim = len(indices) - 1
        lp = loop_binding(sch, kinds, blk, indices[dim])  # type: ignore[arg-type]
        if lp is None:
            return None
        run, extent = [lp], sch.get(lp).extent
        while extent % self.lanes or extent < 2 * self.lanes:
            if dim == 0 or shape[dim] != sch.get(run[0]).extent:
                return None
            dim -= 1
            prev = indices[dim]
            outer = loop_binding(sch, kinds, blk, prev) \
                if isinstance(prev, Var) and prev in ivars else None
            at = order.index(run[0])
            if outer is None or at == 0 or order[at - 1] is not outer:
                return None
            run.insert(0, outer)
            extent *= sch.get(outer).extent
        return run


def crossed_axes(blk: Block) -> tuple[Var, Var] | None:
    """(the output's last index, an input's last index) when both are iteration
    variables of ``blk`` and differ; None otherwise or for a reduction."""
    ld = crossed_load(blk)
    if ld is None:
        return None
    store = blk.body
    assert isinstance(store, BufferStore)
    return store.indices[-1], ld.indices[-1]  # type: ignore[return-value]


def crossed_load(blk: Block) -> BufferLoad | None:
    """The first load of ``blk`` that reads across its output's row (``crossed_axes``)."""
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
            return ld
    return None


def inlined_view(func: PrimFunc, blk: Block) -> Block:
    """``blk`` as it reads once AutoInline has inlined its producers into it (``blk``
    itself when it has none such): Winograd's NCHW copy ``conv[n, k, h, w] = Y[n, h // 2,
    h % 2, w // 2, w % 2, k]`` reads across its row, but the element-wise epilogue after
    it (CONVLAYER's scale, shift and ReLU) reads ``conv`` along it until the copy is
    inlined, after the rules have visited the epilogue."""
    from .auto_inline import inlines  # it asks crossed_axes of this module

    # What crossed_load would reject whatever it read (a reduction, several stores).
    if blk.init is not None or blk.is_reduction or not isinstance(blk.body, BufferStore):
        return blk
    view = func
    for buf in reads(blk):
        for p in writers(func, buf):
            if p is blk or not inlines(func, p):
                continue
            # Only a stage in loops of its own: one that a rule placed among another's
            # loops (T2D's cache-write write-back, under its tile) is not visited by
            # AutoInline, so it will not be inlined.
            _, path = find_block(func, p.name)
            if path and len(blocks_under(path[0])) > 1:
                continue
            try:
                view = compute_inline(view, p.name)
            except ScheduleError:
                pass
    return blk if view is func else find_block(view, blk.name)[0]
