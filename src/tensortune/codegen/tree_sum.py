"""A serial sum over a contiguous run of a buffer, emitted as vector adds and one
horizontal sum.

AddRFactor splits a row reduction in two: partial sums in ``rf`` lanes (vectorized),
then a serial loop adding the ``rf`` values into the result::

    for j in range(64):
        if j == 0: acc = 0.0
        acc = acc + rf[j]

Emitted as written, every add waits on the one before: 64 dependent adds, and with
them a factor of 64 (four 16-lane accumulator chains) made LNM slower than a factor of
16 (60.9 against 46.9 us on the Zen 4 host), so the search kept one chain. Here the loop
becomes the run's vectors added in a balanced tree, then the lanes of the result added
in a balanced tree::

    { tt_f32x16 j_v = (tt_ld_f32x16(&rf[0]) + tt_ld_f32x16(&rf[16]))
                    + (tt_ld_f32x16(&rf[32]) + tt_ld_f32x16(&rf[48]));
      acc = 0.0f + (((j_v[0] + j_v[1]) + (j_v[2] + j_v[3])) + ...); }

That LNM program with its factor of 64, written this way by hand, ran 39.3 us; the
program the search had found (factors 16 and 32) went from 45.9 to 38.4 us once emitted by
this module (RESULTS.md).
The sum is reassociated, as AddRFactor's split already reassociates it; results are
checked against the float64 reference like every other candidate's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.arith import simplify
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Var, is_float
from ..tir.functor import free_vars
from ..tir.linear import linear_parts
from ..tir.stmt import BufferStore, For, ForKind, IfThenElse, Seq
from .c_header import vector_type

if TYPE_CHECKING:
    from .simd import SimdEmitter

MAX_VECTORS = 16    # longer runs stay a loop: a 16-term tree is already 4 adds deep


def _tree(terms: list[str]) -> str:
    """``terms`` added pairwise: the depth is log2 of their number, not their number."""
    while len(terms) > 1:
        terms = [f"({a} + {b})" for a, b in zip(terms[::2], terms[1::2])] + \
            (terms[-1:] if len(terms) % 2 else [])
    return terms[0]


def _is_first(cond: Expr, var: Var) -> bool:
    return isinstance(cond, BinOp) and cond.op == "==" and cond.a is var and \
        isinstance(cond.b, IntImm) and cond.b.value == 0


def tree_sum(em: SimdEmitter, s: For, ind: int) -> bool:
    """Emit ``s`` as a vector tree sum if it is a serial sum (with or without its init at
    the first iteration) over a contiguous run of a buffer; False (nothing emitted) if it
    is not one."""
    from .simd import chunk_width

    if s.kind != ForKind.SERIAL:
        return False
    stmts = list(s.body.stmts) if isinstance(s.body, Seq) else [s.body]
    init = None
    if len(stmts) == 2 and isinstance(stmts[0], IfThenElse):
        first = stmts.pop(0)
        assert isinstance(first, IfThenElse)
        if first.else_ is not None or not _is_first(first.cond, s.var) or \
                not isinstance(first.then, BufferStore):
            return False
        init = first.then
    if len(stmts) != 1 or not isinstance(stmts[0], BufferStore):
        return False
    upd = stmts[0]
    acc, dtype, val = upd.buffer, upd.buffer.dtype, upd.value
    if not is_float(dtype) or not isinstance(val, BinOp) or val.op != "+":
        return False
    em.ranges[s.var] = (0, s.extent - 1)
    acc_flat = em.flat(acc, upd.indices)
    if s.var in free_vars(acc_flat):
        return False
    # acc + src[...] or src[...] + acc
    for own, src in ((val.a, val.b), (val.b, val.a)):
        if isinstance(own, BufferLoad) and own.buffer is acc and isinstance(src, BufferLoad) \
                and em.expr(em.flat(acc, own.indices)) == em.expr(acc_flat):
            break
    else:
        return False
    assert isinstance(src, BufferLoad)
    if init is not None and (init.buffer is not acc or s.var in free_vars(init.value) or
                             em.expr(em.flat(acc, init.indices)) != em.expr(acc_flat)):
        return False
    if src.dtype != dtype or src.buffer is acc or src.buffer in em.promoted:
        return False
    w = chunk_width(s.extent, em.target.lanes(dtype))
    if w is None or s.extent < 8 or s.extent // w > MAX_VECTORS:
        return False
    parts = linear_parts(em.flat(src.buffer, src.indices), {s.var})
    if parts is None or parts[0].get(s.var) != 1:
        return False
    base = parts[1]
    vt = vector_type(dtype, w)
    name = em.bufname[src.buffer]
    at = [em.expr(simplify(BinOp("+", base, IntImm(o), "int32"), em.ranges))
          for o in range(0, s.extent, w)]
    loads = [f"tt_ld_{vt[3:]}(&{name}[{a}])" for a in at]
    t = f"{em.var(s.var)}_v"
    lanes = _tree([f"{t}[{lane}]" for lane in range(w)])
    start = f"({em.expr(init.value)})" if init is not None else em.load(acc, acc_flat)
    em.emit("{", ind)
    em.emit(f"{vt} {t} = {_tree(loads)};", ind + 1)
    em.emit(f"{em.load(acc, acc_flat)} = {start} + {lanes};", ind + 1)
    em.emit("}", ind)
    em.vtypes.add((dtype, w))
    return True
