"""A register tile read out through strided stores, as C loops over the lanes.

A tile whose lanes run along an axis the output does not have contiguous (a C3D program
the search found holds 16 output channels per vector; the output is NCHW, channels
25 KB apart) cannot be written back a vector at a time, and ``transpose.py`` leaves
lanes farther apart than a cache line to scalar stores. Unrolled lane by lane, a
16-vector tile's write-back is 256 statements, each with its own address arithmetic::

    conv[base + 0] = acc_r0[0];
    conv[base + 6272] = acc_r0[1];
    ...                                   # 16 per vector

gcc spent a third of its time on them (one C3D program: 0.40 s of CPU as written,
0.27-0.30 s with a loop per vector), and a third to a half of the random programs of
seven of the suite's eight convolutions have such a write-back (RESULTS.md). Here each
vector of the tile is copied to a small stack array, and one loop that gcc is asked not
to unroll (nor, for lanes far apart, to vectorize) stores a lane of every vector per
iteration (``lane_group`` for a run of sibling write-back loops in a sequence,
``lane_loop`` for a loop met on its own)::

    { float acc_l0[16]; TT_IN_REG(acc_r0); tt_st_f32x16(acc_l0, acc_r0);
      float acc_l1[16]; TT_IN_REG(acc_r1); tt_st_f32x16(acc_l1, acc_r1);   # ...
      _Pragma("GCC unroll 1") for (int32_t lane = 0; lane < 16; ++lane) {
        TT_SCALAR_LOOP;
        conv[base + lane * 6272] = acc_l0[lane];
        conv[base + lane * 6272 + 1] = acc_l1[lane]; ... } }

A loop per vector still cost gcc much (IV optimisation of the loops around them): one
CONVLAYER program built in 0.41 s with 16 such loops, 0.29-0.30 s with one, 0.15 s with
the write-back deleted; the kernel ran at the same speed.

Nothing indexes the tile's variables with a variable, and each is marked as held in a
register just before its copy (``TT_IN_REG``, an empty asm): without that mark gcc kept
some accumulators of a GMM program in their stack arrays through the whole reduction
(1.33x slower). Only loops that read tiles qualify: a loop that writes one (a reduction
whose input is strided across the lanes) is the kernel's hot loop and stays unrolled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.arith import simplify, substitute_simplified
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Var, dtype_bytes
from ..tir.functor import loads_in, rewrite_expr, rewrite_stmt, stores_in, substitute
from ..tir.linear import linear_parts
from ..tir.stmt import Buffer, BufferStore, For, ForKind, Stmt
from .c import NotVectorizable
from .c_header import CTYPE, vector_type

if TYPE_CHECKING:
    from .simd import SimdEmitter

MIN_LANES = 4     # narrower vectors keep their few statements unrolled


class _Skip(Exception):
    """Not a loop this module emits."""


Chunk = tuple[Stmt, dict[tuple[Buffer, int], Buffer], int]   # body, stack arrays, width


def lane_loop(em: SimdEmitter, s: For, ind: int) -> bool:
    """Emit the vectorized loop ``s`` (whose body could not be vector code) as one C loop
    over the lanes of each vector of the register tiles it reads; False (nothing
    emitted) when it writes a tile or reads one other than a vector at a time."""
    lane = Var("lane")
    chunks = _chunks(em, s, lane)
    if chunks is None:
        return False
    _emit(em, chunks, lane, ind, scalar=_far_stores(em, s))
    return True


def lane_group(em: SimdEmitter, stmts: tuple[Stmt, ...], p: int, ind: int) -> int:
    """Emit ``stmts[p:p + n]``, sibling write-back loops whose stores are strided past
    ``transpose.py``'s reach, as one loop over the lanes of all their tile vectors;
    returns ``n``, or 0 (nothing emitted) when no such loop starts at ``p``. A run of
    one is emitted here too, as ``lane_loop`` would: its chunks are already cut. The
    loops' stores are reordered, so no loop of the run may read what another stores."""
    lane = Var("lane")
    run: list[Chunk] = []
    stored: set[Buffer] = set()
    read: set[Buffer] = set()
    n = 0
    while p + n < len(stmts) and _far_stores(em, stmts[p + n]):
        loop = stmts[p + n]
        assert isinstance(loop, For)
        chunks = _chunks(em, loop, lane)
        if chunks is None:
            break
        st = {x.buffer for x in stores_in(loop.body)}
        ld = {x.buffer for x in loads_in(loop.body)}
        if st & (read | ld) or stored & ld:
            break
        stored |= st
        read |= ld
        run += chunks
        n += 1
    if n == 0:
        return 0
    _emit(em, run, lane, ind, scalar=True)   # every loop of the run has far stores
    return n


def _far_stores(em: SimdEmitter, s: Stmt) -> bool:
    """Whether ``s`` is a vectorized loop that reads register tiles and whose every
    store steps through memory farther than a cache line per lane."""
    from .transpose import MAX_LANE_STRIDE_BYTES

    if not isinstance(s, For) or s.kind != ForKind.VECTORIZED:
        return False
    if not {x.buffer for x in loads_in(s.body)} & set(em.promoted):
        return False
    em.ranges[s.var] = (0, s.extent - 1)
    stores = list(stores_in(s.body))
    for st in stores:
        if st.buffer in em.promoted:
            return False
        parts = linear_parts(em.flat(st.buffer, st.indices), {s.var})
        step = 0 if parts is None else abs(parts[0].get(s.var, 0))
        if step * dtype_bytes(st.buffer.dtype) <= MAX_LANE_STRIDE_BYTES:
            return False
    return bool(stores)


def _chunks(em: SimdEmitter, s: For, lane: Var) -> list[Chunk] | None:
    """``s`` cut into the chunks of its lanes (``lane`` within each) that read one tile
    vector each; None when it writes a tile or reads one other than a vector at a time."""
    tiles = {x.buffer for x in loads_in(s.body)} & set(em.promoted)
    if not tiles or any(st.buffer in em.promoted for st in stores_in(s.body)):
        return None
    chunks: list[Chunk] = []
    at = 0
    try:
        while at < s.extent:
            chunks.append(_chunk(em, s, at, lane))
            at += chunks[-1][2]
    except _Skip:
        return None
    finally:
        em.ranges.pop(lane, None)
    return chunks


def _emit(em: SimdEmitter, chunks: list[Chunk], lane: Var, ind: int, scalar: bool) -> None:
    """One loop over ``lane`` per width of ``chunks``, each tile vector they read copied
    to its stack array first. The iterations of a vectorized loop are independent, so
    its chunks may share a loop in any order.

    With ``scalar`` (every store steps farther than a cache line per lane) each loop is
    kept from gcc's vectorizer (``TT_SCALAR_LOOP``), which turns it back into a store per
    lane and vector: on the programs of seven convolutions and TBG that have such a
    loop, gcc took 0.60-0.96x the CPU kept scalar and the kernels ran 0.98-1.01x as long
    (geometric means per workload; RESULTS.md, "Lane loops kept scalar"). Lanes a line
    apart (a matmul's transposed cache) stay vectorizable: two of eight GMM programs
    with such a loop ran 1.3-1.9x slower scalar, gcc keeping the reduction's A vectors
    in stack slots in the register tile's hot loop."""

    em.emit("{", ind)
    for _, arrays, w in chunks:
        for (b, k), arr in arrays.items():
            name = em.name_buffer(arr, em.used)
            vec = f"{em.promoted[b].name}_r{k}"
            em.emit(f"{CTYPE[b.dtype]} {name}[{w}] __attribute__((aligned(64)));", ind + 1)
            # Without it gcc kept 3 of a GMM tile's 12 accumulators in their stack
            # arrays through the reduction loop, a load and a store per FMA: 1.33x slower.
            em.emit(f"TT_IN_REG({vec});", ind + 1)
            em.emit(f"tt_st_{vector_type(b.dtype, w)[3:]}({name}, {vec});", ind + 1)
    bodies = []
    for body, arrays, w in chunks:
        em.ranges[lane] = (0, w - 1)
        bodies.append((_vector_value(em, body, arrays, lane, w, ind + 1), w))
    lv = em.var(lane)
    for w in dict.fromkeys(c[2] for c in chunks):   # widths, in order of first use
        em.ranges[lane] = (0, w - 1)
        em.emit('_Pragma("GCC unroll 1")', ind + 1)
        em.emit(f"for (int32_t {lv} = 0; {lv} < {w}; ++{lv}) {{", ind + 1)
        if scalar:
            em.emit("TT_SCALAR_LOOP;", ind + 2)
        for body, cw in bodies:
            if cw == w:
                em.stmt(body, ind + 2)
        em.emit("}", ind + 1)
    em.emit("}", ind)
    em.ranges.pop(lane, None)


def _vector_value(em: SimdEmitter, body: Stmt, arrays: dict[tuple[Buffer, int], Buffer],
                  lane: Var, width: int, ind: int) -> Stmt:
    """The chunk's stored value computed as vector code into its stack array, and the
    lane loop's body left to copy it out; ``body`` itself when the value is a plain copy
    of the tile, reads more than one tile vector, or is not vector code along the lanes
    (a load strided across them).

    A fused epilogue (CONVLAYER's ``max(acc * scale[k] + shift[k], 0)``) was computed a
    lane at a time, a scalar multiply-add, max and two loads per output element: on
    CONVLAYER's best kernel its write-back cost 4.7% of the call, and computing the
    epilogue as vector code before the copy made the call 2.7% faster (RESULTS.md)::

        tt_st_f32x16(acc_l0, tt_vmax_f32x16(tt_ld_f32x16(acc_l0) * tt_ld_f32x16(&scale[k])
                                            + tt_ld_f32x16(&shift[k]), zero));
        for (lane ...) { out[base + lane * 784] = acc_l0[lane]; }
    """
    if not isinstance(body, BufferStore) or len(arrays) != 1:
        return body
    (arr,) = arrays.values()
    value = body.value
    if isinstance(value, BufferLoad) and value.buffer is arr:
        return body
    if value.dtype != arr.dtype or body.buffer.dtype != arr.dtype:
        return body
    try:
        with em.tentative():
            em.vector_stmt(BufferStore(arr, (lane,), value), lane, arr.dtype, width, ind)
    except NotVectorizable:
        return body
    return BufferStore(body.buffer, body.indices, BufferLoad(arr, (lane,)))


def _chunk(em: SimdEmitter, s: For, at: int, lane: Var) -> Chunk:
    """The body for lanes ``at + lane`` with each tile read replaced by a read of a stack
    array, those arrays by (tile, vector), and the chunk's width: every tile read must be
    a whole vector of the tile starting at this chunk's first lane, all of one width."""
    first: dict[Var, Expr] = {s.var: BinOp("+", IntImm(at), lane, "int32")}
    em.ranges[lane] = (0, 1)   # the first lane's address tells which vector is read
    widths = {_vector_at(em, x.buffer, substitute(x.buffer.flat_index(x.indices), first),
                         lane)[1]
              for x in loads_in(s.body) if x.buffer in em.promoted}
    if len(widths) != 1:
        raise _Skip
    width = widths.pop()
    if width < MIN_LANES or at + width > s.extent:
        raise _Skip
    em.ranges[lane] = (0, width - 1)
    body = substitute_simplified(s.body, first, em.ranges)
    arrays: dict[tuple[Buffer, int], Buffer] = {}

    def swap(e: Expr) -> Expr | None:
        if not isinstance(e, BufferLoad) or e.buffer not in em.promoted:
            return None
        k, w = _vector_at(em, e.buffer, e.buffer.flat_index(e.indices), lane)
        if w != width:
            raise _Skip
        arr = arrays.get((e.buffer, k))
        if arr is None:
            arr = Buffer(f"{em.promoted[e.buffer].name}_l{k}", (width,), e.buffer.dtype)
            arrays[(e.buffer, k)] = arr
        return BufferLoad(arr, (lane,))

    return rewrite_stmt(body, expr_fn=lambda e: rewrite_expr(e, swap)), arrays, width


def _vector_at(em: SimdEmitter, b: Buffer, flat: Expr, lane: Var) -> tuple[int, int]:
    """(vector, width) of the vector of tile ``b`` that a read at ``flat`` starts in; the
    read must be that vector's lanes in order from its first."""
    parts = linear_parts(simplify(flat, em.ranges), {lane})
    if parts is None or parts[0].get(lane) != 1 or not isinstance(parts[1], IntImm):
        raise _Skip
    tile = em.promoted[b]
    where = tile.at(parts[1].value)
    if where is None or where[1] != 0:
        raise _Skip
    return where[0], tile.widths[where[0]]
