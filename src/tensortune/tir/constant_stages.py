"""Stages of a scheduled function computed from constant inputs alone, cut out.

A tuned kernel often copies a weight into the layout its inner loops read (a
``cache_read`` with ``transform_layout``: a matmul's B in column panels, a conv's weight in
blocks of output channels), and a Winograd kernel transforms its weight. In a model the
weight is a constant, so these stages compute the same values at every call (TVM calls
such weights layout-free). ``split_constant_stages`` cuts a scheduled function in two: a
``pack`` function holding the stages that read only constants, and a ``main`` function
that takes what they wrote as extra inputs. The stages' buffers become whole arrays.

Example:
    >>> split = split_constant_stages(sch.func, constant={1})   # param 1 is a weight
    >>> packed = build(split.pack)(w)                            # once
    >>> y = build(split.main)(x, w, packed)                      # each call

``mark_weights`` marks a function's weights by name (``PrimFunc.weights``), so that its
search times its kernels without these stages (``tt.tune(..., weights=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import TensorTuneError
from .functor import blocks_in, loads_in, rewrite_stmt, stores_in
from .stmt import Block, Buffer, For, PrimFunc, Seq, Stmt

_EMPTY = Seq(())


@dataclass(frozen=True)
class ConstantSplit:
    """``pack`` reads the constant parameters ``pack_params`` (positions in the original
    function's parameters) and writes ``packed``; ``main`` takes the original
    parameters with ``packed`` inserted after the inputs."""

    pack: PrimFunc
    main: PrimFunc
    pack_params: tuple[int, ...]
    packed: tuple[Buffer, ...]


def _only(body: Stmt, keep: set[int]) -> Stmt:
    """``body`` with every block whose id is not in ``keep`` removed, and the loops and
    sequences left empty by that."""

    def fn(s: Stmt) -> Stmt | None:
        if isinstance(s, Block):
            return None if id(s) in keep else _EMPTY
        if isinstance(s, For) and s.body is _EMPTY:
            return _EMPTY
        if isinstance(s, Seq):
            parts = tuple(x for x in s.stmts if x is not _EMPTY)
            if len(parts) != len(s.stmts):
                return _EMPTY if not parts else parts[0] if len(parts) == 1 else Seq(parts)
        return None

    return rewrite_stmt(body, stmt_fn=fn)


def _constant_buffers(func: PrimFunc, blocks: list[Block], constant: set[Buffer]
                      ) -> tuple[set[Buffer], list[Block]]:
    """The intermediates whose every value is computed from ``constant`` alone, and the
    ``blocks`` (all of ``func``'s) that write them: the largest such set, found by
    dropping every buffer a block writes from something else until none is dropped."""
    writes = {id(b): {st.buffer for st in stores_in(b)} for b in blocks}
    reads = {id(b): {ld.buffer for ld in loads_in(b)} - writes[id(b)] for b in blocks}
    # Register tiles (``local``) stay in the kernel: made arrays, they would be read
    # from memory where the kernel keeps them in registers.
    cand = {b for b in func.alloc_buffers if b.scope == "global"
            and any(b in writes[id(x)] for x in blocks)}
    changed = True
    while changed:
        changed = False
        for b in blocks:
            w = writes[id(b)]
            if w & cand and not (w <= cand and reads[id(b)] <= constant | cand):
                cand -= w
                changed = True
    return cand, [b for b in blocks if writes[id(b)] and writes[id(b)] <= cand]


def split_constant_stages(func: PrimFunc, constant: set[int]) -> ConstantSplit | None:
    """Cut ``func`` (a scheduled function) into the stages computed from the inputs at
    positions ``constant`` alone and the rest (see the module doc); None when no stage
    the rest reads is computed from constants alone. Only ``global`` stages are cut."""
    bad = [i for i in constant if not 0 <= i < len(func.inputs)]
    if bad:
        raise ValueError(f"{func.name}: constant parameter positions {bad} are not inputs "
                         f"(it has {len(func.inputs)})")
    # Every store in a block (a scheduled function's are): stages are cut at blocks.
    blocks = list(blocks_in(func.body))
    if sum(1 for b in blocks for _ in stores_in(b)) != sum(1 for _ in stores_in(func.body)):
        return None
    const_bufs = {func.params[i] for i in constant}
    cand, const_blocks = _constant_buffers(func, blocks, const_bufs)
    if not const_blocks:
        return None
    ids = {id(b) for b in const_blocks}
    rest = [b for b in blocks if id(b) not in ids]
    read_by_rest = {ld.buffer for b in rest for ld in loads_in(b)}
    packed = tuple(b for b in func.alloc_buffers if b in cand and b in read_by_rest)
    if not packed:
        return None
    pack_reads = {ld.buffer for b in const_blocks for ld in loads_in(b)}
    pack_params = tuple(i for i in sorted(constant) if func.params[i] in pack_reads)
    pack = PrimFunc(f"{func.name}_pack", tuple(func.params[i] for i in pack_params) + packed,
                    _only(func.body, ids),
                    tuple(b for b in func.alloc_buffers if b in cand and b not in packed),
                    num_outputs=len(packed))
    main = PrimFunc(func.name, func.inputs + packed + func.outputs,
                    _only(func.body, {id(b) for b in rest}),
                    tuple(b for b in func.alloc_buffers if b not in cand), func.num_outputs)
    return ConstantSplit(pack, main, pack_params, packed)


def mark_weights(func: PrimFunc, weights: Sequence[str | int]) -> PrimFunc:
    """``func`` with the inputs named in ``weights`` (buffer names or input positions)
    marked as constants (``PrimFunc.weights``): values fixed for the life of a kernel,
    such as a layer's weight. A marked function is its own workload; its search times
    each program without the stages that read only the weights, as a kernel bound to
    them runs it (``Kernel.bind``). Raises naming the function, the bad entry and its
    inputs where an entry names no input.

    Example:
        >>> dense = mark_weights(tt.workloads.get("dense"), ["W", "bias"])
        >>> dense.weights                  # (1, 2)
    """
    names = [b.name for b in func.inputs]
    valid = f"its inputs are {', '.join(names)} (or positions 0-{len(names) - 1})"
    pos = set()
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (str, int)):
            raise TensorTuneError(f"{func.name}: weights take input names or positions, "
                                  f"got {w!r}; {valid}")
        if isinstance(w, int):
            if not 0 <= w < len(names):
                raise TensorTuneError(f"{func.name}: weight position {w} is not an input; "
                                      f"{valid}")
            pos.add(w)
        elif w in names:
            pos.add(names.index(w))
        else:
            outs = [b.name for b in func.outputs]
            what = "an output" if w in outs else "not a parameter"
            raise TensorTuneError(f"{func.name}: weight {w!r} is {what}; {valid}")
    return replace(func, weights=tuple(sorted(pos)))
