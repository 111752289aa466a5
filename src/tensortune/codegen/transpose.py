"""Transposed stores: a register tile written out across its lanes.

A tile that holds its rows in the lanes (DENSE's best tile keeps 16 rows of X per vector)
but whose output is contiguous along the tile's other axis cannot be stored a vector at
a time: each vectorized write-back loop stores one column, a lane every ``S`` floats, so
it ran as 16 scalar stores per vector. Unrolled, the write-back is a run of sibling
vectorized loops whose stores sit one element apart::

    for l in vectorized(16): Y[(j + 0) + l * S] = acc_r0[l]
    for l in vectorized(16): Y[(j + 1) + l * S] = acc_r1[l]
    ...                                                     # U siblings

``U`` (4, 8 or 16, at most the lanes) such siblings are one ``U x lanes`` block: its
vectors are transposed in registers (``log2 U`` rounds of two-vector shuffles) and each
lane's ``U`` values are stored as one short vector at ``Y[j + l * S]``. On DENSE's best
program (``S`` = 16 floats, a strip) this took the kernel from 1548 to 1476 us
(RESULTS.md); lanes farther apart than a cache line are left to scalar stores. The
siblings must store one buffer that none of them reads, and their addresses must be
exactly ``k`` apart for every value of the enclosing loops (checked symbolically, else
by evaluating them over the loops' ranges).

Example (the C for one 8 x 16 block)::

    { tt_f32x16 t0 = acc_r0, ..., t7 = acc_r7;
      tt_zip1_f32x16(&t0, &t1); ...                         # three rounds for U = 8
      memcpy(&Y[j + 0 * S], (const char*)&t0 + 0, 32); ... }
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from ..tir.arith import evaluate_grid, simplify
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Var, dtype_bytes, is_float
from ..tir.functor import free_vars, iter_exprs, substitute
from ..tir.linear import linear, linear_parts
from ..tir.stmt import Buffer, BufferStore, For, ForKind, Stmt
from .c import NotVectorizable
from .c_header import vector_type

if TYPE_CHECKING:
    from .simd import SimdEmitter

ROWS = (16, 8, 4)       # block heights tried, largest first
# Lanes at most this far apart: their short vectors then fill whole cache lines between
# them. Farther apart (a conv's NCHW write-back, channels 3-12 KB apart) the transpose
# did not pay: CONVLAYER's best kernel level, four C2D kernels 1-8% slower, and their
# sources 28% slower to compile (RESULTS.md).
MAX_LANE_STRIDE_BYTES = 64
MAX_POINTS = 1 << 16    # loop-value combinations the numeric check may evaluate


class _Skip(Exception):
    """Not a transposable group."""


def _store_loop(s: Stmt) -> tuple[For, BufferStore] | None:
    if isinstance(s, For) and s.kind == ForKind.VECTORIZED and isinstance(s.body, BufferStore):
        return s, s.body
    return None


def transposed_group(em: SimdEmitter, stmts: tuple[Stmt, ...], p: int, ind: int) -> int:
    """Emit ``stmts[p:p + U]`` as one transposed block if they form one; returns ``U``,
    or 0 (nothing emitted) when they do not."""
    first = _store_loop(stmts[p])
    if first is None or first[1].buffer in em.promoted or not is_float(first[1].buffer.dtype):
        return 0
    loop0, st0 = first
    lanes = em.target.lanes(st0.buffer.dtype)
    if loop0.extent % lanes or not _near_lanes(em, loop0, st0):
        return 0
    group = [first]
    while p + len(group) < len(stmts) and len(group) < min(max(ROWS), lanes):
        nxt = _store_loop(stmts[p + len(group)])
        if nxt is None or nxt[1].buffer is not st0.buffer or nxt[0].extent != loop0.extent:
            break
        group.append(nxt)
    if len(group) < min(ROWS):
        return 0
    lv = Var("tl")          # the siblings' lane variables, one name for all of them
    em.ranges[lv] = (0, loop0.extent - 1)
    try:
        # Addresses and values of the whole run, worked out once for every block height.
        stores = [(simplify(substitute(st0.buffer.flat_index(st.indices), {f.var: lv}),
                            em.ranges), substitute(st.value, {f.var: lv})) for f, st in group]
        if any(isinstance(x, BufferLoad) and x.buffer is st0.buffer
               for _, v in stores for x in iter_exprs(v)):
            return 0   # a sibling reads what another writes
        stride, bases = _lane_split(stores, lv)
        for rows in ROWS:
            if rows <= min(len(group), abs(stride)) and _one_apart(bases[:rows], em.ranges):
                return rows if _emit(em, st0.buffer, stores[:rows], lv, loop0.extent, lanes,
                                     ind) else 0
        return 0
    except _Skip:
        return 0
    finally:
        em.ranges.pop(lv, None)


def _near_lanes(em: SimdEmitter, loop: For, st: BufferStore) -> bool:
    """The cheap test first (most runs of vector loops store whole vectors): whether
    the store's lanes are 4 or more elements, and at most a cache line, apart."""
    lin = linear(em.flat(st.buffer, st.indices))
    if lin is None or loop.var not in lin[0]:
        return False
    return min(ROWS) <= abs(lin[0][loop.var][1]) <= \
        MAX_LANE_STRIDE_BYTES // dtype_bytes(st.buffer.dtype)


def _emit(em: SimdEmitter, buf: Buffer, stores: list[tuple[Expr, Expr]], lv: Var,
          extent: int, w: int, ind: int) -> bool:
    """The transposed block's C, one chunk of ``w`` lanes at a time; False (nothing
    emitted) when a value has no vector form."""
    rows, dtype = len(stores), buf.dtype
    vt, size = vector_type(dtype, w), dtype_bytes(dtype)
    lane = Var("lane")
    em.ranges[lane] = (0, w - 1)
    try:
        with em.tentative():
            for c in range(extent // w):
                at = BinOp("+", IntImm(c * w), lane, "int32")
                vals = [em.as_vector(simplify(substitute(v, {lv: at}), em.ranges), lane, dtype, w)
                        for _, v in stores]
                em.emit("{ " + " ".join(f"{vt} t{k} = {v};" for k, v in enumerate(vals)),
                        ind)
                for line in zip_rounds(vt, rows):
                    em.emit(line, ind)
                for r, q in itertools.product(range(rows), range(w // rows)):
                    at_r = IntImm(c * w + q * rows + r)
                    addr = simplify(substitute(stores[0][0], {lv: at_r}), em.ranges)
                    em.emit(f"  memcpy(&{em.bufname[buf]}[{em.expr(addr)}], "
                            f"(const char*)&t{r} + {q * rows * size}, {rows * size});", ind)
                em.emit("}", ind)
    except NotVectorizable:
        return False
    register_zips(em, dtype, w, rows)
    return True


def zip_rounds(vt: str, rows: int) -> list[str]:
    """The ``log2 rows`` rounds of two-vector shuffles over ``t0 .. t{rows - 1}`` (of C
    vector type ``vt``) that transpose them in blocks of ``rows`` lanes; applied twice
    they give the block back, so loads (``gather.py``) use them as stores do."""
    out, b = [], 1
    while b < rows:
        out += [f"  tt_zip{b}_{vt[3:]}(&t{r}, &t{r + b});" for r in range(rows) if not r & b]
        b *= 2
    return out


def register_zips(em: SimdEmitter, dtype: str, w: int, rows: int) -> None:
    """Ask for the vector type and the ``tt_zip`` helpers that ``zip_rounds`` calls."""
    em.vtypes.add((dtype, w))
    em.zips.update((dtype, w, 1 << i) for i in range(rows.bit_length() - 1))


def _lane_split(stores: list[tuple[Expr, Expr]], lv: Var) -> tuple[int, list[Expr]]:
    """The common lane stride of the siblings' addresses and their lane-free parts."""
    stride, bases = None, []
    for flat, _ in stores:
        parts = linear_parts(flat, {lv})
        if parts is None or lv not in parts[0] or stride not in (None, parts[0][lv]):
            raise _Skip
        stride = parts[0][lv]
        bases.append(parts[1])
    assert stride is not None
    return stride, bases


def _one_apart(bases: list[Expr], ranges: dict[Var, tuple[int, int]]) -> bool:
    """``bases[k] == bases[0] + k`` for every value of their variables."""
    diffs = [simplify(BinOp("-", b, bases[0], "int32"), ranges) for b in bases]
    if all(isinstance(d, IntImm) and d.value == k for k, d in enumerate(diffs)):
        return True
    # Not proven: the floor divisions of a strip layout (``(j + k) // 16``) hide it.
    names = sorted({v for b in bases for v in free_vars(b)}, key=lambda v: v.name)
    if any(v not in ranges for v in names):
        return False
    spans = [ranges[v][1] - ranges[v][0] + 1 for v in names]
    if int(np.prod(spans, dtype=np.int64)) > MAX_POINTS:
        return False
    grids = np.meshgrid(*[np.arange(ranges[v][0], ranges[v][1] + 1) for v in names],
                        indexing="ij") if names else []
    env = {v: g.ravel() for v, g in zip(names, grids)}
    values = [evaluate_grid(b, env) for b in bases]
    if any(v is None for v in values):
        return False
    return all(np.array_equal(v - values[0], np.full_like(values[0], k))
               for k, v in enumerate(values))


SHUFFLE = """#ifndef TT_SHUFFLE
#ifdef __clang__
#define TT_SHUFFLE(x, y, mask_type, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define TT_SHUFFLE(x, y, mask_type, ...) __builtin_shuffle(x, y, (mask_type){__VA_ARGS__})
#endif
#endif
"""


def zip_helpers(dtype: str, w: int, b: int) -> str:
    """``tt_zip<b>``: one round of the transpose, swapping bit ``b`` of the row with bit
    ``b`` of the lane between rows ``r`` and ``r + b`` (``SHUFFLE`` must precede it)."""
    vt = vector_type(dtype, w)
    lo = ", ".join(str(w + k - b if k & b else k) for k in range(w))
    hi = ", ".join(str(w + k if k & b else k + b) for k in range(w))
    m = f"tt_m{vt[3:]}"
    return (f"static inline void tt_zip{b}_{vt[3:]}({vt}* a, {vt}* c) {{\n"
            f"  {vt} x = *a, y = *c;\n  *a = TT_SHUFFLE(x, y, {m}, {lo});\n"
            f"  *c = TT_SHUFFLE(x, y, {m}, {hi});\n}}\n")
