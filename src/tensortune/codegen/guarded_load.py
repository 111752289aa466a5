"""A padded read whose guard depends on the lane, as one vector load where every lane is
inside the guard and lane by lane only where some lane is not.

When the lanes of a register tile run along a padded spatial axis (C1D's output
columns, 16 to a vector), the padded input each lane reads is a select on the lane::

    pad[lane] = (z0 * 128 + rx + lane >= 1) ? x[z0 * 128 + rx + lane - 1] : 0

A vector load of all 16 would read ``x[-1]`` in the first tile, outside the input, so
the vector loop had given up and the emitter wrote the loop out lane by lane: every
update of the tile as 16 scalar statements (one C1D draw: 218 KB of C). Only the first
and last tiles of a row have a lane outside the guard. Each term of the guard compares
an affine function of the lane with zero, so the lanes where the guard holds are an
interval, and it holds in every lane exactly when it holds in the first and the last.
The read becomes::

    tt_f32x16 x_g0;
    if (z0 * 128 + rx >= 1 && z0 * 128 + rx + 15 >= 1) x_g0 = tt_ld_f32x16(&x[...]);
    else for (int32_t lane = 0; lane < 16; ++lane) x_g0[lane] = (... >= 1) ? x[...] : 0.0f;

and the statement that reads it stays vector code. The lane-by-lane path evaluates the
select as C does, so no lane outside the guard reads memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.analysis import conjuncts
from ..tir.arith import simplify
from ..tir.expr import BinOp, BufferLoad, IntImm, Select, Var, is_float
from ..tir.functor import free_vars, iter_exprs, substitute
from ..tir.linear import linear_parts
from .c_header import vector_type

if TYPE_CHECKING:
    from .simd import SimdEmitter

COMPARISONS = ("<", "<=", ">", ">=")


def guarded_load(em: SimdEmitter, e: Select, lane: Var, w: int, ind: int) -> str | None:
    """The name of a ``w``-lane vector variable holding ``e``, filled by statements
    emitted at ``ind`` (before the statement that reads it); None when ``e`` is not a
    contiguous load of ``e.dtype`` guarded by a conjunction of comparisons affine in the
    lane (reading no lane's own buffer), with a false value the same in every lane and
    reading no memory."""
    t, f = e.t, e.f
    if not isinstance(t, BufferLoad) or t.dtype != e.dtype or not is_float(e.dtype) \
            or t.buffer in em.promoted or lane in free_vars(f) \
            or any(isinstance(x, BufferLoad) for x in iter_exprs(f)) \
            or any(isinstance(x, BufferLoad) and x.buffer in em.private
                   for x in iter_exprs(e.cond)):   # a lane's own copy is no C variable
        return None
    for term in conjuncts(e.cond):
        if not isinstance(term, BinOp) or term.op not in COMPARISONS \
                or is_float(term.a.dtype) \
                or linear_parts(BinOp("-", term.a, term.b, "int32"), {lane}) is None:
            return None
    acc = em.vector_access(t.buffer, em.flat(t.buffer, t.indices), lane, w)
    if acc is None:
        return None
    ends = [simplify(substitute(e.cond, {lane: IntImm(k)}), em.ranges) for k in (0, w - 1)]
    name = em.var(Var(f"{em.bufname[t.buffer]}_g"))
    vt = vector_type(e.dtype, w)
    lv = em.var(lane)
    em.emit(f"{vt} {name};", ind)
    em.emit(f"if ({em.expr(ends[0])} && {em.expr(ends[1])}) "
            f"{name} = tt_ld_{vt[3:]}(&{acc});", ind)
    em.emit(f"else for (int32_t {lv} = 0; {lv} < {w}; ++{lv}) {name}[{lv}] = {em.expr(e)};",
            ind)
    return name
