"""Recognizing a zero-inserting stage: ``D[i] = select(cond, X[(i - q) // s], 0)`` per
axis, the input of a transposed convolution written as a correlation (the stride-phase
rewrite, ``rewrite/stride_phase.py``, takes it apart).

Example:
    >>> f = tt.workloads.get("t2d")
    >>> blk, _ = find_block(f, "dilate_pad")
    >>> src, dims = parse_zero_insertion(blk)
    >>> src.name, [(d.q, d.s, d.n) for d in dims]
    ('x', [(0, 1, 1), (0, 1, 64), (2, 2, 28), (2, 2, 28)])
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tir.analysis import conjuncts
from ..tir.arith import affine
from ..tir.expr import BinOp, BufferLoad, Expr, FloatImm, IntImm, Select, Var
from ..tir.functor import free_vars
from ..tir.stmt import Block, Buffer, BufferStore


@dataclass
class Dim:
    """D[i] on one axis = X[(i - q) // s] where q <= i < q + s * (n - 1) + 1 and
    (i - q) % s == 0; else 0 (s = 1 is plain padding)."""

    q: int
    s: int
    n: int


def _is_shift(e: Expr, v: Var, c: int) -> bool:
    """Whether ``e`` is ``v + c``."""
    aff = affine(e)
    return aff is not None and aff[1] == c and len(aff[0]) == 1 and aff[0].get(v) == 1


def parse_zero_insertion(blk: Block) -> tuple[Buffer, list[Dim]] | None:
    """The zero-inserting stage's source buffer and per-axis maps (``Dim``), None if
    ``blk`` is not one."""
    st = blk.body
    if blk.is_reduction or not isinstance(st, BufferStore) or \
            not isinstance(st.value, Select) or not isinstance(st.value.t, BufferLoad) or \
            not (isinstance(st.value.f, FloatImm) and st.value.f.value == 0.0):
        return None
    src: BufferLoad = st.value.t
    ivs = [iv.var for iv in blk.iter_vars]
    if len(st.indices) != len(ivs) or any(a is not b for a, b in zip(st.indices, ivs)) or \
            len(src.indices) != len(ivs):
        return None
    conds = conjuncts(st.value.cond)
    dims, used = [], 0
    for d, (v, n) in enumerate(zip(ivs, src.buffer.shape)):
        ix = src.indices[d]
        s, num = 1, ix
        if isinstance(ix, BinOp) and ix.op == "//" and isinstance(ix.b, IntImm):
            s, num = ix.b.value, ix.a
        aff = affine(num)
        if aff is None or set(aff[0]) - {v} or aff[0].get(v) != 1:
            return None
        q = -aff[1]
        want = []
        if q != 0 or s != 1 or blk.iter_vars[d].extent != n:
            want = [(">=", q), ("<", q + s * (n - 1) + 1)]
        found = 0
        for c in conds:
            if not (isinstance(c, BinOp) and v in free_vars(c)):
                continue
            if (c.op, getattr(c.b, "value", None)) in want and c.a is v:
                found += 1
            elif s > 1 and c.op == "==" and isinstance(c.b, IntImm) and c.b.value == 0 and \
                    isinstance(c.a, BinOp) and c.a.op == "%" and \
                    isinstance(c.a.b, IntImm) and c.a.b.value == s and \
                    _is_shift(c.a.a, v, -q):
                found += 1
            else:
                return None  # a condition this rewrite does not understand
        if found != len(want) + (s > 1):
            return None
        used += found
        dims.append(Dim(q, s, n))
    if used != len(conds) or all(dm.s == 1 for dm in dims):
        return None
    return src.buffer, dims
