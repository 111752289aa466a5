"""Schedule rules: the composable pieces a design space is built from.

A rule looks at one block of a schedule and returns the schedules it derives (several
when it forks the space, the input unchanged when it does not apply). Rules only call
``Schedule`` methods, sampling instructions included, so every design space is a trace
that replays with new decisions.

Example:
    >>> class Vectorize(ScheduleRule):
    ...     def apply(self, sch, block):
    ...         sch.vectorize(sch.get_loops(block)[-1])
    ...         return [sch]
"""

from __future__ import annotations

from ..schedule import BlockRV, ExprRV, LoopRV, Schedule
from ..schedule.tree import writes
from ..tir.expr import BufferLoad, Select, Var
from ..tir.functor import free_vars, iter_exprs, stores_in
from ..tir.stmt import Block, BufferStore


class ScheduleRule:
    """Base class: ``apply(sch, block) -> list of schedules``."""

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__


def loop_kinds(sch: Schedule, block: BlockRV) -> list[tuple[LoopRV, str]]:
    """The block's loops with "S" (binds only spatial axes), "R" (only reduction axes) or
    "X" (both, or none of this block's axes)."""
    blk: Block = sch.get(block)
    out = []
    binds = [(iv.kind, free_vars(b)) for iv, b in zip(blk.iter_vars, blk.bindings)]
    for lp in sch.get_loops(block):
        var = sch.get(lp).var
        kinds = {kind for kind, fv in binds if var in fv}
        out.append((lp, kinds.pop() if len(kinds) == 1 else "X"))
    return out


def is_reduction(blk: Block) -> bool:
    return blk.init is not None and blk.is_reduction


def untiled_reduction(sch: Schedule, block: BlockRV
                      ) -> tuple[Block, list[tuple[LoopRV, str]]] | None:
    """The block and its loops (``loop_kinds``) when it is a reduction that
    MultiLevelTiling leaves alone (no reuse) with a reduction loop innermost: what
    AddRFactor and OuterReduction fork; else None."""
    blk: Block = sch.get(block)
    kinds = loop_kinds(sch, block)
    if not is_reduction(blk) or has_reuse(blk) or not kinds or kinds[-1][1] != "R":
        return None
    return blk, kinds


def loop_binding(sch: Schedule, kinds: list[tuple[LoopRV, str]], blk: Block, v: Var
                 ) -> LoopRV | None:
    """The loop of ``kinds`` (``blk``'s loops) that iteration variable ``v`` is bound to
    directly, or None when its binding is anything else."""
    bound = next(b for iv, b in zip(blk.iter_vars, blk.bindings) if iv.var is v)
    return next((lp for lp, _ in kinds if sch.get(lp).var is bound), None)


def sample_parts(sch: Schedule, extent: int, cores: int, per_core: tuple[int, ...],
                 unit: int = 1) -> ExprRV | None:
    """A sampled number of parallel parts of a loop of ``extent``: ``cores * j`` for ``j``
    in ``per_core``, among those that split it into whole multiples of ``unit``, each as
    likely; None when none does.

    Example:
        >>> p = sample_parts(sch, 4096, cores=2, per_core=(1, 4))   # 2 or 8
    """
    parts = [cores * j for j in per_core if extent % (cores * j * unit) == 0]
    if not parts:
        return None
    return sch.sample_categorical(parts, [1.0 / len(parts)] * len(parts))


def register_tiled(blk: Block) -> bool:
    """A reduction whose accumulators are a ``local`` buffer (its ``cache_write``): a
    register tile, as MultiLevelTiling and LowReuseDot make them. Unlike ``has_reuse``
    it still holds once the init is decomposed."""
    return blk.is_reduction and any(b.scope == "local" for b in writes(blk))


def has_reuse(blk: Block) -> bool:
    """A reduction where some input is read without every spatial axis: each element is
    used many times (matmul, conv), so tiling pays. Not when its largest input is read
    once per element (a matrix-vector product): memory bounds it, and it is scheduled as
    a reduction without reuse, its largest input read in order (RESULTS.md, "Reductions
    bound by one input read once")."""
    if not is_reduction(blk):
        return False
    spatial = {iv.var for iv in blk.iter_vars if iv.kind == "S"}
    own = {s.buffer for s in stores_in(blk.body)}
    loads = [x for x in iter_exprs(_value(blk)) if isinstance(x, BufferLoad)
             and x.buffer not in own]
    if len(loads) < 2:
        return False
    if read_once(blk, max(loads, key=lambda ld: ld.buffer.size)):
        return False
    return any(not spatial <= set().union(*[free_vars(i) for i in ld.indices])
               for ld in loads)


def read_once(blk: Block, ld: BufferLoad) -> bool:
    """Whether ``ld`` reads each element once over ``blk``'s iteration domain: its
    indices are distinct iteration variables, which together are all of the block's
    axes longer than one."""
    axes = {iv.var for iv in blk.iter_vars if iv.extent > 1}
    ix = [i for i in ld.indices if isinstance(i, Var)]
    return len(ix) == len(ld.indices) and len(set(ix)) == len(ix) and axes <= set(ix)


def is_elementwise(blk: Block) -> bool:
    """A spatial block with a single store and no select (no padding guard)."""
    if blk.init is not None or blk.is_reduction or not isinstance(blk.body, BufferStore):
        return False
    return not any(isinstance(x, Select) for x in iter_exprs(blk.body.value))


def _value(blk: Block):
    assert isinstance(blk.body, BufferStore)
    return blk.body.value
