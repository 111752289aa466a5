"""Register tiles: a small local buffer held in variables instead of an array.

gcc keeps a local array accessed through vector types on the stack (an FMA then loads
and stores its accumulator), but keeps separate native-width vector variables in
registers. A local buffer whose every access is a constant index or a vector chunk at a
constant offset is therefore declared as one variable per chunk (``RegisterTile``;
chunks of one tile may differ in width: a 56-wide row on AVX-512 is three 16-lane
vectors and one of 8), and the emitter reads and writes those variables.

Example (a 2 x 32 accumulator tile on AVX-512)::

    tt_f32x16 acc_r0, acc_r1, acc_r2, acc_r3;
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.arith import affine, simplify_flat
from ..tir.expr import BufferLoad, Expr, is_float
from ..tir.functor import iter_exprs
from ..tir.stmt import Allocate, Buffer, BufferStore, For, ForKind, IfThenElse, Seq, Stmt
from .c import RegisterTile
from .c_header import CTYPE, vector_type

if TYPE_CHECKING:
    from .simd import SimdEmitter

MAX_PROMOTED = 2048  # elements: larger tiles would spill anyway
# A promoted tile may take a quarter more vector variables than the register file (40 on
# AVX-512, measured fastest there; 20 on AVX2): beyond that gcc spills and compiles slowly.


def promote(em: SimdEmitter, s: Allocate, ind: int) -> bool:
    """Declare ``s``'s buffer as a register tile and record it in ``em.promoted``, if
    every access of its body is a constant index or a vector chunk at a constant offset
    and the tile fits the register file with a quarter to spare; else False."""
    b = s.buffer
    if not is_float(b.dtype) or b.size > MAX_PROMOTED:
        return False
    lanes = em.target.lanes(b.dtype)
    chunks: dict[int, int] = {}   # start -> width of each vector the body accesses
    for flat, vec_loop in tile_accesses(s.body, b):
        aff = affine(flat)
        if aff is None:
            return False
        if not aff[0]:
            # Guarded tails may index past the tile; those accesses need the array.
            if not 0 <= aff[1] < b.size:
                return False
            continue
        if vec_loop is None or set(aff[0]) != {vec_loop.var} or aff[0][vec_loop.var] != 1:
            return False
        plan = em.plan(vec_loop, lanes)
        if plan is None or not 0 <= aff[1] <= b.size - vec_loop.extent:
            return False
        for off, w in plan:
            if chunks.setdefault(aff[1] + off, w) != w:
                return False
    vars_ = cover(chunks, b.size)
    if vars_ is None or len(vars_) > em.target.vector_registers * 5 // 4:
        return False
    name = em.bufname[b]
    tile = RegisterTile(name, tuple(st for st, _ in vars_), tuple(w for _, w in vars_))
    by_type: dict[str, list[str]] = {}
    for i, (_, w) in enumerate(vars_):
        by_type.setdefault(vector_type(b.dtype, w) if w > 1 else CTYPE[b.dtype], []).append(
            f"{name}_r{i}")
        if w > 1:
            em.vtypes.add((b.dtype, w))
    for vt, names in by_type.items():
        for i in range(0, len(names), 8):
            em.emit(f"{vt} {', '.join(names[i:i + 8])};", ind)
    em.promoted[b] = tile
    return True


def cover(chunks: dict[int, int], size: int) -> list[tuple[int, int]] | None:
    """(start, width) variables holding a tile of ``size`` elements: the vectors its body
    accesses, the gaps between them in vectors of the widest width accessed where they
    fit and scalars where not; None if two accessed vectors overlap."""
    widest = max(chunks.values(), default=1)
    out: list[tuple[int, int]] = []
    at = 0
    for start in [*sorted(chunks), size]:
        if start < at:
            return None
        while at < start:  # a gap nobody accesses as a vector
            w = widest if start - at >= widest and at % widest == 0 else 1
            out.append((at, w))
            at += w
        if start < size:
            out.append((start, chunks[start]))
            at = start + chunks[start]
    return out if at <= size else None


def tile_accesses(s: Stmt, b: Buffer, vec: For | None = None):
    """(flat index, innermost enclosing vectorized loop) for each access to ``b``."""
    if isinstance(s, For):
        yield from tile_accesses(s.body, b, s if s.kind == ForKind.VECTORIZED else vec)
        return
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from tile_accesses(x, b, vec)
        return
    if isinstance(s, IfThenElse):
        for branch in (s.then, s.else_):
            if branch is not None:
                yield from tile_accesses(branch, b, vec)
    if isinstance(s, Allocate):
        yield from tile_accesses(s.body, b, vec)
        return
    exprs: list[Expr] = []
    if isinstance(s, BufferStore):
        if s.buffer is b:
            yield simplify_flat(b.shape, s.indices), vec
        exprs = [*s.indices, s.value]
    elif isinstance(s, IfThenElse):
        exprs = [s.cond]
    for e in exprs:
        for sub in iter_exprs(e):
            if isinstance(sub, BufferLoad) and sub.buffer is b:
                yield simplify_flat(b.shape, sub.indices), vec
