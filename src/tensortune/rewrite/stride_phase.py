"""Stride-phase decomposition: a correlation over a zero-inserted input becomes one
small dense correlation per output phase.

A transposed convolution with stride s is written as a correlation over its input with
s - 1 zeros inserted between elements (the `dilate_pad` stage). Three quarters of its
multiply-adds (at s = 2 in 2-D) then multiply by an inserted zero. Split each strided
output axis as ``y = s * yo + p``: for a fixed phase p only the kernel taps
``r = r0(p) + s * a`` meet a non-zero, at input row ``yo + a + const``. Each of the s^d
phases is a plain correlation with a kernel s times smaller per axis, reading the input
directly (padded). No zero is multiplied and no zero-inserted buffer is built.

When the phases have equal extents and their first tap is affine in the phase (stride 2
with an even kernel and output, as in T2D), they become one block with the phase as a
spatial axis beside the output axis it splits; that block writes a buffer laid out like
the output ([.., yo, py, ..]: y = s * yo + py), and a copy stage writes the output.
Otherwise each phase is a block of its own writing a dense buffer, and an interleave
stage gathers them. (Writing the output in place would give each phase a strided tile,
which cache_write's write-back cannot cover.) EinNet derives such rewrites from tensor
algebra; this one is the derivation for the zero-insertion pattern.

Before (T2D, 1-D view)::

    D[i] = select(q <= i < Q and (i - q) % s == 0, X[(i - q) // s], 0)
    C[y] = sum_r D[y + r] * W[R - 1 - r]
After, for each p in range(s)::

    C[s * yo + p] = sum_a Xp[yo + a + c(p)] * W[R - 1 - (r0(p) + s * a)]

Example:
    >>> new = stride_phase(tt.workloads.get("t2d"))     # None if the pattern is absent
"""

from __future__ import annotations

import itertools
import math

from ..schedule.tree import iter_blocks, readers, writers
from ..tir.arith import affine, simplify
from ..tir.expr import BinOp, BufferLoad, Expr, FloatImm, IntImm, Select, Var, structural_equal
from ..tir.functor import iter_exprs, rewrite_expr, substitute
from ..tir.stmt import Block, Buffer, BufferStore, For, IterVar, PrimFunc, Stmt, seq
from .zero_insertion import Dim, parse_zero_insertion


def stride_phase(func: PrimFunc) -> PrimFunc | None:
    """The phase-decomposed function, or None when ``func`` has no reduction over a
    zero-inserted buffer of the supported form (module docstring)."""
    for blk, _ in iter_blocks(func.body):
        if blk.name.endswith("_init"):
            continue
        parsed = parse_zero_insertion(blk)
        if parsed is None:
            continue
        (dbuf,) = {s.buffer for s in [blk.body] if isinstance(s, BufferStore)}
        cons = readers(func, dbuf)
        if dbuf not in func.alloc_buffers or len(cons) != 1 or \
                len(writers(func, dbuf)) != 1:
            continue
        new = _rewrite(func, blk, cons[0], dbuf, *parsed)
        if new is not None:
            return new
    return None


def _rewrite(func: PrimFunc, prod: Block, con: Block, dbuf: Buffer, xbuf: Buffer,
             dims: list[Dim]) -> PrimFunc | None:
    st = con.body
    spatial = [iv.var for iv in con.iter_vars if iv.kind == "S"]
    if not con.is_reduction or con.init is None or not isinstance(st, BufferStore) or \
            len(st.indices) != len(spatial) or \
            any(a is not b for a, b in zip(st.indices, spatial)):
        return None
    loads = [x for x in iter_exprs(st.value) if isinstance(x, BufferLoad) and x.buffer is dbuf]
    if not loads or any(not structural_equal(ld.indices, loads[0].indices) for ld in loads):
        return None
    ext = {iv.var: iv.extent for iv in con.iter_vars}
    kind = {iv.var: iv.kind for iv in con.iter_vars}
    # Per strided axis: the consumer reads D at y + r + c (y spatial, r reduction).
    axes: dict[int, tuple[Var, Var, int]] = {}
    for d, dm in enumerate(dims):
        aff = affine(loads[0].indices[d])
        if aff is None:
            return None
        if dm.s == 1:
            continue
        coefs = aff[0]
        ys = [v for v in coefs if kind.get(v) == "S"]
        rs = [v for v in coefs if kind.get(v) == "R"]
        if len(coefs) != 2 or len(ys) != 1 or len(rs) != 1 or \
                coefs[ys[0]] != 1 or coefs[rs[0]] != 1:
            return None
        axes[d] = (ys[0], rs[0], aff[1])
    # The padded source: X placed at offset `lo` per axis, zeros around it.
    lo = [0] * len(dims)
    hi = list(xbuf.shape)
    phases: list[dict[int, tuple[int, int, int, int]]] = []
    for combo in itertools.product(*[range(dims[d].s) for d in axes]):
        ph = {}
        for d, p in zip(axes, combo):
            dm, (y, r, c) = dims[d], axes[d]
            r0 = (dm.q - p - c) % dm.s
            taps = math.ceil((ext[r] - r0) / dm.s)
            outs = len(range(p, ext[y], dm.s))
            if outs and taps <= 0:
                return None  # outputs no tap reaches (kernel < stride): not supported
            off = (p + r0 + c - dm.q) // dm.s  # exact: the numerator is a multiple of s
            first, last = off, outs - 1 + taps - 1 + off
            lo[d], hi[d] = max(lo[d], -first), max(hi[d], last + 1)
            ph[d] = (r0, taps, off, outs)
        if all(ph[d][3] for d in ph):  # a phase past the output's end has nothing to do
            phases.append(ph)
    pad_shape = tuple(lo[d] + hi[d] for d in range(len(dims)))
    xp = Buffer(f"{xbuf.name}_pad", pad_shape, xbuf.dtype)
    out: list[Stmt] = [_pad_nest(xp, xbuf, lo)]
    merged = _merged(con, dbuf, xp, dims, axes, phases, lo)
    if merged is not None:
        dst, nest = merged
        out += [nest, _gather(st.buffer, dst, {d: dims[d].s for d in axes}, con.name)]
        body = _replace(func.body, prod, con, seq(out))
        allocs = tuple(b for b in func.alloc_buffers if b is not dbuf) + (xp, dst)
        return func.with_body(body, allocs)
    parts = []
    for ph in phases:
        dst, nest = _phase_block(con, dbuf, xp, dims, axes, ph, lo)
        out.append(nest)
        parts.append((dst, {d: _phase_of(d, ph, dims, axes) for d in axes}))
    assert isinstance(st, BufferStore)
    out.append(_interleave(st.buffer, parts, {d: dims[d].s for d in axes}, con.name))
    body = _replace(func.body, prod, con, seq(out))
    allocs = tuple(b for b in func.alloc_buffers if b is not dbuf) + (xp,) + tuple(
        b for b, _ in parts)
    return func.with_body(body, allocs)


def _pad_nest(xp: Buffer, x: Buffer, lo: list[int]) -> Stmt:
    ivs = [IterVar(Var(f"vi{i}"), n, "S") for i, n in enumerate(xp.shape)]
    conds: Expr | None = None
    src = []
    for iv, lo_d, n in zip(ivs, lo, x.shape):
        src.append(simplify(BinOp("-", iv.var, IntImm(lo_d), "int32")))
        if lo_d or n != iv.extent:
            for c in (BinOp(">=", iv.var, IntImm(lo_d), "bool"),
                      BinOp("<", iv.var, IntImm(lo_d + n), "bool")):
                conds = c if conds is None else BinOp("&&", conds, c, "bool")
    val: Expr = BufferLoad(x, tuple(src))
    if conds is not None:
        val = Select(conds, val, FloatImm(0.0, x.dtype), x.dtype)
    return _nest(Block(xp.name, tuple(ivs), (), BufferStore(xp, tuple(iv.var for iv in ivs),
                                                              val)))


def _phase_block(con: Block, dbuf: Buffer, xp: Buffer, dims: list[Dim],
                 axes: dict[int, tuple[Var, Var, int]],
                 ph: dict[int, tuple[int, int, int, int]],
                 lo: list[int]) -> tuple[Buffer, Stmt]:
    sub: dict[Var, Expr] = {}
    ivs = []
    new_var = {}
    for iv in con.iter_vars:
        nv = Var(iv.var.name)
        new_var[iv.var] = nv
        extent = iv.extent
        for d, (y, r, _) in axes.items():
            r0, taps, _, outs = ph[d]
            if iv.var is y:
                extent = outs
                sub[y] = BinOp("+", BinOp("*", nv, IntImm(dims[d].s), "int32"),
                               IntImm(_phase_of(d, ph, dims, axes)), "int32")
            elif iv.var is r:
                extent = taps
                sub[r] = BinOp("+", IntImm(r0), BinOp("*", nv, IntImm(dims[d].s), "int32"),
                               "int32")
        ivs.append(IterVar(nv, extent, iv.kind))
        sub.setdefault(iv.var, nv)
    st = con.body
    assert isinstance(st, BufferStore) and con.init is not None
    # D[..., y + r + c, ...] -> Xp[..., yo + a + off + lo, ...]; other axes as they were.
    dl = next(x for x in iter_exprs(st.value) if isinstance(x, BufferLoad) and x.buffer is dbuf)
    xidx = []
    for d, ix in enumerate(dl.indices):
        if d in axes:
            y, r, _ = axes[d]
            xidx.append(BinOp("+", BinOp("+", new_var[y], new_var[r], "int32"),
                              IntImm(ph[d][2] + lo[d]), "int32"))
        else:
            xidx.append(BinOp("+", substitute(ix, sub), IntImm(lo[d] - dims[d].q), "int32"))
    xload = BufferLoad(xp, tuple(simplify(i) for i in xidx))

    # The phase's outputs go to a dense buffer of its own (a plain tile-able reduction);
    # the interleave stage places them.
    tag = "_".join(str(_phase_of(d, ph, dims, axes)) for d in axes)
    out_ivs = [iv for iv in ivs if iv.kind == "S"]
    dst = Buffer(f"{con.name}_p{tag}", tuple(iv.extent for iv in out_ivs), st.buffer.dtype)
    here = BufferLoad(dst, tuple(iv.var for iv in out_ivs))

    def conv(e: Expr) -> Expr:
        return rewrite_expr(e, lambda x: xload if isinstance(x, BufferLoad) and
                            x.buffer is dbuf else here if isinstance(x, BufferLoad) and
                            x.buffer is st.buffer else None)

    def fix(s: Stmt) -> Stmt:
        assert isinstance(s, BufferStore)
        return BufferStore(dst, here.indices, simplify(substitute(conv(s.value), sub)))

    blk = Block(dst.name, tuple(ivs), (), fix(st), fix(con.init))
    return dst, _nest(blk)


def _merged(con: Block, dbuf: Buffer, xp: Buffer, dims: list[Dim],
            axes: dict[int, tuple[Var, Var, int]],
            phases: list[dict[int, tuple[int, int, int, int]]],
            lo: list[int]) -> tuple[Buffer, Stmt] | None:
    """All phases as one block, when every phase has the same extents and its first tap
    and input offset are affine in the phase (always so at stride 2 with an even kernel
    and output): the phase is then a spatial axis next to the output axis it splits,
    ``y = s * yo + py``, and the block writes a buffer laid out like the output."""
    s_of = {d: dims[d].s for d in axes}
    if len(phases) != math.prod(s_of.values()):
        return None
    table: dict[int, list[tuple[int, int, int, int]]] = {d: [] for d in axes}
    for d in axes:
        for p in range(s_of[d]):
            ph = next(ph for ph in phases if _phase_of(d, ph, dims, axes) == p)
            table[d].append(ph[d])
    slope: dict[int, tuple[int, int]] = {}
    for d, rows in table.items():
        r0s, tapss, offs, outss = zip(*rows)
        if len(set(tapss)) != 1 or len(set(outss)) != 1:
            return None
        a, b = r0s[1] - r0s[0], offs[1] - offs[0]
        if any(r0s[p] != r0s[0] + a * p or offs[p] != offs[0] + b * p
               for p in range(s_of[d])):
            return None
        slope[d] = (a, b)
    sub: dict[Var, Expr] = {}
    ivs: list[IterVar] = []
    new_var: dict[Var, Var] = {}
    phase_var: dict[int, Var] = {}
    for iv in con.iter_vars:
        nv = Var(iv.var.name)
        new_var[iv.var] = nv
        ax = next((d for d, (y, r, _) in axes.items() if iv.var is y or iv.var is r), None)
        if ax is None:
            ivs.append(IterVar(nv, iv.extent, iv.kind))
            sub[iv.var] = nv
            continue
        y, r, _ = axes[ax]
        r0, taps, _, outs = table[ax][0]
        if iv.var is y:
            pv = Var(f"p{ax}")
            phase_var[ax] = pv
            ivs += [IterVar(nv, outs, "S"), IterVar(pv, s_of[ax], "S")]
            sub[y] = nv * s_of[ax] + pv
        else:
            ivs.append(IterVar(nv, taps, "R"))
            # Spatial axes come first, so the phase variable exists already.
            sub[r] = nv * s_of[ax] + phase_var[ax] * slope[ax][0] + r0
    st = con.body
    assert isinstance(st, BufferStore) and con.init is not None
    dl = next(x for x in iter_exprs(st.value) if isinstance(x, BufferLoad) and x.buffer is dbuf)
    xidx = []
    for d, ix in enumerate(dl.indices):
        if d in axes:
            y, r, _ = axes[d]
            xidx.append(new_var[y] + new_var[r] + phase_var[d] * slope[d][1]
                        + (table[d][0][2] + lo[d]))
        else:
            xidx.append(substitute(ix, sub) + (lo[d] - dims[d].q))
    xload = BufferLoad(xp, tuple(simplify(i) for i in xidx))
    out_ivs = [iv for iv in ivs if iv.kind == "S"]
    dst = Buffer(f"{con.name}_phases", tuple(iv.extent for iv in out_ivs), st.buffer.dtype)
    here = BufferLoad(dst, tuple(iv.var for iv in out_ivs))

    def fix(x: Stmt) -> Stmt:
        assert isinstance(x, BufferStore)
        val = rewrite_expr(x.value, lambda e: xload if isinstance(e, BufferLoad) and
                           e.buffer is dbuf else here if isinstance(e, BufferLoad) and
                           e.buffer is st.buffer else None)
        return BufferStore(dst, here.indices, simplify(substitute(val, sub)))

    return dst, _nest(Block(dst.name, tuple(ivs), (), fix(st), fix(con.init)))


def _gather(out: Buffer, src: Buffer, strides: dict[int, int], name: str) -> Stmt:
    """out[..., y, ...] = src[..., y // s, y % s, ...]: the same layout, so a copy."""
    ivs = [IterVar(Var(f"vo{i}"), n, "S") for i, n in enumerate(out.shape)]
    idx: list[Expr] = []
    for d, iv in enumerate(ivs):
        if d in strides:
            idx += [BinOp("//", iv.var, IntImm(strides[d]), "int32"),
                    BinOp("%", iv.var, IntImm(strides[d]), "int32")]
        else:
            idx.append(iv.var)
    return _nest(Block(name, tuple(ivs), (), BufferStore(
        out, tuple(iv.var for iv in ivs), BufferLoad(src, tuple(idx)))))


def _interleave(out: Buffer, parts: list[tuple[Buffer, dict[int, int]]],
                strides: dict[int, int], name: str) -> Stmt:
    """out[..., y, ...] = part_p[..., y // s, ...] for the phase p = y % s of each axis."""
    ivs = [IterVar(Var(f"vo{i}"), n, "S") for i, n in enumerate(out.shape)]
    val: Expr | None = None
    for buf, phase in reversed(parts):
        idx = tuple(BinOp("//", iv.var, IntImm(strides[d]), "int32") if d in strides
                    else iv.var for d, iv in enumerate(ivs))
        load: Expr = BufferLoad(buf, idx)
        if val is None:
            val = load
            continue
        cond: Expr | None = None
        for d, p in phase.items():
            c = BinOp("==", BinOp("%", ivs[d].var, IntImm(strides[d]), "int32"), IntImm(p),
                      "bool")
            cond = c if cond is None else BinOp("&&", cond, c, "bool")
        assert cond is not None
        val = Select(cond, load, val, out.dtype)
    assert val is not None
    return _nest(Block(name, tuple(ivs), (), BufferStore(out, tuple(iv.var for iv in ivs),
                                                         val)))


def _phase_of(d: int, ph: dict, dims: list[Dim], axes: dict) -> int:
    """The output phase p of axis d (recovered from r0 = (q - p - c) % s)."""
    _, _, c = axes[d]
    r0 = ph[d][0]
    return (dims[d].q - c - r0) % dims[d].s


def _nest(blk: Block) -> Stmt:
    loops = [Var(iv.var.name[1:] if iv.var.name.startswith("v") else iv.var.name)
             for iv in blk.iter_vars]
    stmt: Stmt = blk.with_(bindings=tuple(loops))
    for lv, iv in reversed(list(zip(loops, blk.iter_vars))):
        stmt = For(lv, iv.extent, stmt)
    return stmt


def _replace(body: Stmt, prod: Block, con: Block, new: Stmt) -> Stmt:
    """The body with the producer's nest removed and the consumer's replaced by ``new``."""
    from ..schedule.tree import children

    out = []
    for top in children(body):
        names = {b.name for b, _ in iter_blocks(top)}
        if names == {prod.name}:
            continue
        out.append(new if names == {con.name} else top)
    return seq(out)
