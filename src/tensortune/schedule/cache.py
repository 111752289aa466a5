"""cache_read, cache_write, transform_layout and storage_align: stage data through a new
buffer, re-index an intermediate buffer (e.g. pack a matrix into panels), and align its
rows.

cache_read(C, 1) (B read through a copy)::

    with block("B_global", v0=S(ax0), v1=S(ax1)):  B_global[v0, v1] = B[v0, v1]
    ... C[vi, vj] = C[vi, vj] + A[vi, vk] * B_global[vk, vj]

transform_layout(B_global, lambda k, j: (j // 32, k, j % 32)) then stores B_global as
[N/32, K, 32] panels: every access is rewritten through the map.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..errors import ScheduleError, check
from ..tir.arith import bound, simplify
from ..tir.expr import BufferLoad, Expr, Var
from ..tir.functor import free_vars, retarget, substitute
from ..tir.stmt import Block, Buffer, BufferStore, For, IterVar, PrimFunc, Stmt
from .tree import (
    find_block,
    insert_root,
    iter_blocks,
    reads,
    replace_block,
    root_index,
    unique_name,
    writers,
    writes,
)


def _copy_nest(name: str, dst: Buffer, src: Buffer) -> Stmt:
    ivs = tuple(IterVar(Var(f"v{d}"), n, "S") for d, n in enumerate(src.shape))
    loops = [Var(f"ax{d}") for d in range(len(src.shape))]
    idx = tuple(iv.var for iv in ivs)
    body: Stmt = Block(name, ivs, tuple(loops), BufferStore(dst, idx, BufferLoad(src, idx)))
    for lv, n in reversed(list(zip(loops, src.shape))):
        body = For(lv, n, body)
    return body


def _stage(func: PrimFunc, name: str, buf: Buffer, scope: str, at: int,
           read: bool) -> tuple[PrimFunc, str]:
    """Redirect block ``name``'s accesses of ``buf`` to a new buffer and insert, at root
    position ``at``, the block copying buf -> new (read) or new -> buf (write)."""
    new_name = unique_name(func, f"{buf.name}_{scope}")
    cbuf = Buffer(new_name, buf.shape, buf.dtype, scope)
    f2 = replace_block(func, name, lambda b: replace(
        b, body=retarget(b.body, buf, cbuf),
        init=None if b.init is None else retarget(b.init, buf, cbuf)))
    copy = _copy_nest(new_name, cbuf, buf) if read else _copy_nest(new_name, buf, cbuf)
    f3 = insert_root(f2, at, copy)
    return f3.with_body(f3.body, f3.alloc_buffers + (cbuf,)), new_name


def cache_read(func: PrimFunc, name: str, index: int, scope: str) -> tuple[PrimFunc, str]:
    """Read input ``index`` of block ``name`` through a new copy stage (module docstring);
    returns the copy block's name. Place the copy with compute_at, re-index it with
    transform_layout."""
    what = f"cache_read({name}, {index})"
    blk, _ = find_block(func, name)
    own = writes(blk)
    rds = [b for b in reads(blk) if b not in own]
    check(0 <= index < len(rds), f"{what}: block {name} reads {len(rds)} buffers "
                                 f"({', '.join(b.name for b in rds)}); index must be in "
                                 f"[0, {len(rds)})")
    buf = rds[index]
    ri = root_index(func, name)
    for w in writers(func, buf):
        check(root_index(func, w.name) < ri,
              f"{what}: {buf.name} is produced by {w.name} inside the same loop nest as "
              f"{name}; cache it before moving the producer there")
    return _stage(func, name, buf, scope, ri, read=True)


def cache_write(func: PrimFunc, name: str, index: int, scope: str) -> tuple[PrimFunc, str]:
    """Make block ``name`` write a new buffer, copied to the original by a new block
    placed after it; returns the copy block's name.

    Before: ``C[vi, vj] = C[vi, vj] + ...``
    After::

        C_local[vi, vj] = C_local[vi, vj] + ...
        with block("C_local"): C[v0, v1] = C_local[v0, v1]
    """
    what = f"cache_write({name}, {index})"
    blk, _ = find_block(func, name)
    ws = writes(blk)
    check(0 <= index < len(ws), f"{what}: block {name} writes {len(ws)} buffers; index must "
                                f"be in [0, {len(ws)})")
    buf = ws[index]
    check(writers(func, buf) == [blk], f"{what}: {buf.name} has other writers than {name}")
    ri = root_index(func, name)
    early = [b.name for b, _ in iter_blocks(func.body)
             if b.name != name and buf in reads(b) and root_index(func, b.name) <= ri]
    if early:
        raise ScheduleError(f"{what}: {early[0]} reads {buf.name} inside the same loop nest as "
                     f"{name}; cache_write before moving consumers into it")
    return _stage(func, name, buf, scope, ri + 1, read=False)


def _eval_index(e: Expr, env: dict) -> np.ndarray:
    from ..reference import eval_expr

    return np.asarray(eval_expr(e, env, {}))


# Whether an index map is injective over a shape, by the map's printed form: a trace's
# replay asks it of the same map again and again, and on GMM's packed 1024 x 1024 panel
# the check was three quarters of a draw's time.
_INJECTIVE: dict[tuple, bool] = {}


def _injective(shape: tuple[int, ...], params: list[Var], results: list[Expr],
               out_shape: tuple[int, ...]) -> bool:
    names = tuple(p.name for p in params)
    key = None
    if len(set(names)) == len(names) and all(
            free_vars(r) <= set(params) for r in results):
        key = (shape, names, tuple(str(r) for r in results))
        if key in _INJECTIVE:
            return _INJECTIVE[key]
    env = {p: np.arange(n).reshape([-1 if i == d else 1 for i in range(len(params))])
           for d, (p, n) in enumerate(zip(params, shape))}
    flat = np.zeros(shape, dtype=np.int64)
    for r, n in zip(results, out_shape):
        flat = flat * n + np.broadcast_to(_eval_index(r, env), shape)
    # Injective iff no two elements land on one place: a bitmap, linear time.
    seen = np.zeros(math.prod(out_shape), dtype=bool)
    seen[flat.ravel()] = True
    ok = int(seen.sum()) == flat.size
    if key is not None:
        if len(_INJECTIVE) > 4096:
            _INJECTIVE.clear()
        _INJECTIVE[key] = ok
    return ok


def transform_layout(func: PrimFunc, buf: Buffer, params: list[Var],
                     results: list[Expr]) -> PrimFunc:
    """Store intermediate ``buf`` in a new layout given by an injective index map; every
    access is rewritten through the map.

    Before: ``B_global[vk, vj]`` in a [K, N] buffer
    After ``lambda k, j: (j // 32, k, j % 32)``: ``B_global[vj // 32, vk, vj % 32]`` in a
    [N/32, K, 32] buffer (packed panels)

    An alignment set by ``storage_align`` stays with the buffer and applies to the new
    layout's last dimension.
    """
    what = f"transform_layout({buf.name})"
    check(buf in func.alloc_buffers,
          f"{what}: {buf.name} is a function parameter; its layout is part of the kernel's "
          "interface. Apply the map to a cache_read/cache_write stage of it instead")
    check(len(params) == len(buf.shape),
          f"{what}: the index map takes {len(params)} indices but {buf.name} has "
          f"{len(buf.shape)} dimensions")
    ranges = {p: (0, n - 1) for p, n in zip(params, buf.shape)}
    shape = []
    for d, r in enumerate(results):
        b = bound(simplify(r, ranges), ranges)
        check(b is not None and b[0] >= 0,
              f"{what}: output {d} of the index map ({r}) is not provably non-negative")
        assert b is not None
        shape.append(b[1] + 1)
    is_permutation = sorted(map(id, results)) == sorted(map(id, params))
    if not is_permutation and math.prod(buf.shape) <= 1 << 24:
        check(_injective(buf.shape, params, results, tuple(shape)),
              f"{what}: the index map sends two elements of {buf.name} to the same place")
    new = Buffer(buf.name, tuple(shape), buf.dtype, buf.scope, buf.align)

    def idx_fn(idx: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(simplify(substitute(r, dict(zip(params, idx)))) for r in results)

    body = retarget(func.body, buf, new, idx_fn)
    allocs = tuple(new if b is buf else b for b in func.alloc_buffers)
    return func.with_body(body, allocs)


def storage_align(func: PrimFunc, buf: Buffer, factor: int, offset: int) -> PrimFunc:
    """Allocate intermediate ``buf`` with the rows of its last dimension ``factor``
    elements apart (rounded up) and each row's element 0 at ``offset`` past a multiple
    of ``factor``. The indices are unchanged; the lowering lays the rows out
    (``codegen.lower.compact_buffers``), so only where the data sits changes.

    A padded copy ``pad`` of 58-float rows, its interior (from element 1) stored and
    loaded by vector code: after ``storage_align(pad, 16, 15)`` its rows are 64 floats
    apart and element 1 of each starts a 64-byte line, so no vector store of the copy
    splits a line.

    Example:
        >>> sch.storage_align(sch.get_block("pad"), "pad", 16, 15)
    """
    what = f"storage_align({buf.name})"
    check(buf in func.alloc_buffers,
          f"{what}: {buf.name} is a function parameter; its layout is part of the kernel's "
          "interface. Align a cache_read/cache_write stage of it instead")
    check(factor >= 1, f"{what}: factor must be a positive number of elements, got {factor}")
    check(0 <= offset < factor,
          f"{what}: offset must lie in [0, factor) = [0, {factor}), got {offset}")
    new = Buffer(buf.name, buf.shape, buf.dtype, buf.scope, (factor, offset))
    allocs = tuple(new if b is buf else b for b in func.alloc_buffers)
    return func.with_body(retarget(func.body, buf, new), allocs)
