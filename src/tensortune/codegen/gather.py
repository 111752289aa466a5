"""Gathered copies through an in-register transpose.

A packed copy that moves an axis into the vector lanes reads its source across rows: a
conv's weight pack ``w_global[co // 16, ci, kh, kw, co % 16] = w[co, ci, kh, kw]`` loads
each lane 1152 floats from its neighbour, DENSE's X pack and TBG's K pack 768. gcc emits
such a vectorized loop as 16 scalar loads per vector. The loops around it walk the source
contiguously, though, so ``U`` of their iterations (4, 8 or 16) read a ``U x lanes``
block whose rows, one per lane, are contiguous::

    for ci, kh, kw:                                         # t = ci * 9 + kh * 3 + kw
        for l in vectorized(16): dst[D + 16 * t + l] = w[B + 1152 * l + t]

becomes a loop over blocks of ``U`` values of ``t``: one (short) vector load per lane,
``log2 U`` rounds of two-vector shuffles (``transpose.zip_helpers``, the rounds that
transpose a block of stores, which undo themselves), and ``U`` whole-vector stores. Re-run
16's best TBG kernel (K packed per head) ran 70.1 -> 62.0 us; CONVLAYER's weight pack on
its own 17.5 -> 6.7 us, but its kernel was level: inside it the pack waits on memory
and on the other core's lines (RESULTS.md).

The loops ``F_j .. F_k`` above the vectorized one must be serial, perfectly nested and
flatten to one index in both addresses: the source's coefficient of ``F_k`` is 1, the
destination's anything, and each outer coefficient is the next loop's extent times the
next loop's coefficient, in both. The value is the load, from another buffer, or an
expression of it whose other loads are the same in every lane: each transposed row is
then the expression with that row's registers for the load and the row's values of
``F_j .. F_k`` for the loops (Winograd's blocked epilogue, ``max(Y[..] * scale[k] +
shift[k], 0)`` with k a row: the best CONVLAYER programs 293-297 -> 273-282 us against
the blocked loop left to gcc, RESULTS.md).

Example (the C of one 16 x 16 block, ``t`` the block index)::

    for (int32_t blk = 0; blk < 72; ++blk) {
      tt_f32x16 t0, ..., t15;
      memcpy((char*)&t0 + 0, &w[B + blk * 16], 64); ...          # one row per lane
      tt_zip1_f32x16(&t0, &t1); ...                              # four rounds
      tt_st_f32x16(&dst[D + blk * 256], t0); ... }
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, NamedTuple

from ..tir.arith import delinearize, simplify
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Select, Var, dtype_bytes, is_float
from ..tir.functor import free_vars, iter_exprs, rewrite_expr, substitute
from ..tir.linear import linear_parts
from ..tir.stmt import Buffer, BufferStore, For, ForKind
from .c import NotVectorizable
from .c_header import vector_type
from .transpose import register_zips, zip_rounds

if TYPE_CHECKING:
    from .simd import SimdEmitter

ROWS = (16, 8, 4)     # block heights tried, largest first (at most the lanes)


def _chain(s: For) -> tuple[list[For], For, BufferStore] | None:
    """The serial loops from ``s`` down to a vectorized loop around one store."""
    loops: list[For] = []
    while isinstance(s, For) and s.kind == ForKind.SERIAL and not s.annotations:
        loops.append(s)
        s = s.body  # type: ignore[assignment]
    if not loops or not isinstance(s, For) or s.kind != ForKind.VECTORIZED \
            or not isinstance(s.body, BufferStore):
        return None
    return loops, s, s.body


def _split(flat: Expr, loops: list[For], lane: Var) -> tuple[list[int], int, Expr] | None:
    """(coefficient of each chain loop, of the lane, the rest) of an address, None when a
    chain loop or the lane appears inside a non-affine term."""
    parts = linear_parts(flat, {f.var for f in loops} | {lane})
    if parts is None:
        return None
    coefs, rest = parts
    return [coefs.get(f.var, 0) for f in loops], coefs.get(lane, 0), rest


def _flattens(coefs: list[int], loops: list[For]) -> bool:
    return all(coefs[i] == loops[i + 1].extent * coefs[i + 1] for i in range(len(loops) - 1))


def gathered_copy(em: SimdEmitter, s: For, ind: int) -> bool:
    """Emit the nest ``s`` as transposed blocks if it is a gathered copy (see the module
    docstring); False, with nothing emitted, when it is not."""
    found = _chain(s)
    if found is None:
        return False
    loops, vec, st = found
    src = _gathered_load(st, vec.var)
    dtype = st.buffer.dtype
    if src is None or src.dtype != dtype or not is_float(dtype) or st.buffer in em.promoted \
            or src.buffer in em.promoted:
        return False
    lanes = em.target.lanes(dtype)
    if vec.extent != lanes:
        return False
    for f in (*loops, vec):
        em.ranges[f.var] = (0, f.extent - 1)
    d = _split(em.flat(st.buffer, st.indices), loops, vec.var)
    r = _split(em.flat(src.buffer, src.indices), loops, vec.var)
    if d is None or r is None:
        return False
    (dco, dlane, dbase), (sco, stride, sbase) = d, r
    if dlane != 1 or sco[-1] != 1 or abs(stride) < 2 or dco[-1] == 0 \
            or not _flattens(dco, loops) or not _flattens(sco, loops):
        return False
    total = 1
    for f in loops:
        total *= f.extent
    rows = next((u for u in ROWS if u <= lanes and total % u == 0), None)
    if rows is None:
        return False
    value = None if st.value is src else _Computed(st.value, src, loops, vec.var)
    try:
        with em.tentative():
            _emit(em, st.buffer.dtype, (em.bufname[st.buffer], dbase, dco[-1]),
                  (em.bufname[src.buffer], sbase, stride), total // rows, rows, lanes, ind,
                  value)
    except NotVectorizable:     # a term of the value that is no vector code
        return False
    return True


def _gathered_load(st: BufferStore, lane: Var) -> BufferLoad | None:
    """The load a gathered copy reads across rows: the store's value itself, or the one
    load in it that the lanes index, when every other load is the same in all lanes (a
    scale and shift per output row: Winograd's blocked epilogue), the store's buffer is
    not read and no select guards the load."""
    if isinstance(st.value, BufferLoad):
        return None if st.value.buffer is st.buffer else st.value
    nodes = list(iter_exprs(st.value))
    loads = [x for x in nodes if isinstance(x, BufferLoad)]
    along = [x for x in loads if lane in free_vars(x)]
    # Under a select (padding) the load may be outside its buffer where the select
    # does not take it: the transpose loads every row whole.
    if len(along) != 1 or any(x.buffer is st.buffer for x in loads) or \
            sum(x.buffer is along[0].buffer for x in loads) != 1 or \
            any(isinstance(x, Select) for x in nodes):
        return None
    return along[0]


class _Computed(NamedTuple):
    """A gathered copy's value that computes on its load: the stored expression, the
    gathered load in it, the chain loops and the lane variable."""

    expr: Expr
    load: BufferLoad
    loops: list[For]
    lane: Var


def _row_value(value: _Computed, first: Expr, k: int, regs: Buffer, ranges: dict) -> Expr:
    """The stored value of row ``k`` of a block starting at flat index ``first``: the
    gathered load replaced by row ``k`` of the transposed registers (``regs``), the chain
    loops by their values at that row."""
    expr, load, loops, _ = value
    at = simplify(BinOp("+", first, IntImm(k), "int32"), ranges)
    vals = {f.var: e for f, e in zip(loops, delinearize(at, [f.extent for f in loops], ranges))}
    swapped = rewrite_expr(expr, lambda e: BufferLoad(regs, (IntImm(k),))
                           if e is load else None)
    return simplify(substitute(swapped, vals), ranges)


def _emit(em: SimdEmitter, dtype: str, dst: tuple[str, Expr, int], src: tuple[str, Expr, int],
          blocks: int, rows: int, lanes: int, ind: int,
          value: _Computed | None = None) -> None:
    vt, size = vector_type(dtype, lanes), dtype_bytes(dtype)
    t = Var("blk")
    name = em.var(t)
    em.ranges[t] = (0, blocks - 1)
    dname, dbase, dstep = dst
    sname, sbase, stride = src
    em.emit(f"for (int32_t {name} = 0; {name} < {blocks}; ++{name}) {{", ind)
    em.emit(f"  {vt} " + ", ".join(f"t{r}" for r in range(rows)) + ";", ind)
    first = BinOp("*", t, IntImm(rows), "int32")
    # Row r, chunk q holds lane q * rows + r's values for the block's ``rows`` indices.
    for r, q in itertools.product(range(rows), range(lanes // rows)):
        at = simplify(BinOp("+", sbase, BinOp("+", IntImm(stride * (q * rows + r)), first,
                                              "int32"), "int32"), em.ranges)
        em.emit(f"  memcpy((char*)&t{r} + {q * rows * size}, &{sname}[{em.expr(at)}], "
                f"{rows * size});", ind)
    for line in zip_rounds(vt, rows):
        em.emit(line, ind)
    # The registers as a buffer of the rows, so a row's value reads them as vectors.
    regs = Buffer("tt_rows", (rows,), dtype)
    em.private[regs] = {k: f"t{k}" for k in range(rows)}
    try:
        for k in range(rows):
            at = simplify(BinOp("+", dbase, BinOp("*", BinOp("+", first, IntImm(k), "int32"),
                                                  IntImm(dstep), "int32"), "int32"), em.ranges)
            # Each row's value as vector code (the scale and shift of its output row are
            # scalars, broadcast), the row's registers standing for the gathered load.
            out = f"t{k}" if value is None else em.as_vector(
                _row_value(value, first, k, regs, em.ranges), value.lane, dtype, lanes)
            em.emit(f"  tt_st_{vt[3:]}(&{dname}[{em.expr(at)}], {out});", ind)
    finally:
        em.private.pop(regs, None)
        em.ranges.pop(t, None)
    em.emit("}", ind)
    register_zips(em, dtype, lanes, rows)
