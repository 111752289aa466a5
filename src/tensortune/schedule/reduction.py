"""decompose_reduction and rfactor.

decompose_reduction(C, k) moves the init out of the reduction loops::

    for i, j:                                  for i, j:
        for k:                                     with block("C_init"): C[vi, vj] = 0.0
            with block("C"):            -->        for k:
                init: C[vi, vj] = 0.0                  with block("C"):
                C[vi, vj] += ...                           C[vi, vj] += ...

rfactor(ki, 0) on a sum whose axis was split into ko, ki makes ki a spatial axis of a
partial-sum buffer ``C_rf[ki, ...]`` (vectorizable/parallel) and adds a final block that
sums the partials into ``C``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import ScheduleError, check
from ..tir.analysis import conjunction, conjuncts
from ..tir.arith import evaluate_grid, simplify
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Var, structural_equal
from ..tir.functor import free_vars, iter_exprs, rewrite_stmt, substitute
from ..tir.stmt import Block, Buffer, BufferStore, For, IterVar, PrimFunc, Stmt, seq
from .tree import (
    blocks_under,
    find_block,
    find_loop,
    insert_root,
    iter_blocks,
    iter_vars_moved_by,
    mutate,
    reads,
    replace_block,
    root_index,
    unique_name,
)


def decompose_reduction(func: PrimFunc, name: str, var: Var) -> tuple[PrimFunc, str]:
    """Move the init of reduction block ``name`` into a new block placed before loop
    ``var`` (module docstring); returns the init block's name."""
    what = f"decompose_reduction({name}, {var.name})"
    blk, path = find_block(func, name)
    check(blk.init is not None, f"{what}: block {name} has no init (not a reduction, or "
                                "already decomposed)")
    assert blk.init is not None
    pos = next((i for i, lp in enumerate(path) if lp.var is var), None)
    check(pos is not None, f"{what}: loop {var.name} does not enclose block {name}")
    assert pos is not None
    red = set().union(*[free_vars(b) for iv, b in zip(blk.iter_vars, blk.bindings)
                        if iv.kind == "R"])
    spat = set().union(*[free_vars(b) for iv, b in zip(blk.iter_vars, blk.bindings)
                         if iv.kind == "S"])
    for lp in path[:pos]:
        check(lp.var not in red, f"{what}: loop {lp.var.name} outside {var.name} iterates a "
                                 f"reduction axis of {name}; decompose at a loop outside all "
                                 "reduction loops")
    for lp in path[pos:]:
        check(not (lp.var in red and lp.var in spat),
              f"{what}: loop {lp.var.name} iterates both spatial and reduction axes")
        # A loop none of the block's axes moves with (compute_at under a consumer loop
        # the block does not depend on) repeats the whole reduction; only an init inside
        # that loop restarts it each time, so the init cannot move outside it.
        check(lp.var in red or lp.var in spat or lp.extent == 1,
              f"{what}: loop {lp.var.name} (extent {lp.extent}) encloses {name} but moves "
              f"none of its axes, so each of its iterations redoes the reduction; decompose "
              f"at a loop inside {lp.var.name}")
    check(not _revisits(blk, path[pos:], path[:pos]),
          f"{what}: the loops from {var.name} inward reach some point of {name}'s axes more "
          f"than once (a loop bound through a division, as after compute_at under a fused "
          f"consumer loop), so each visit would add to the sum again; decompose at a loop "
          f"inside them")
    keep = [lp for lp in path[pos:] if lp.var in spat]
    vmap: dict[Var, Expr] = {lp.var: Var(lp.var.name + "_init") for lp in keep}
    dropped = {lp.var for lp in path[pos:] if lp.var not in spat}
    ivs = tuple(IterVar(Var(iv.var.name), iv.extent, "S") for iv in blk.iter_vars
                if iv.kind == "S")
    ivmap: dict[Var, Expr] = {old.var: new.var for old, new in
                              zip([iv for iv in blk.iter_vars if iv.kind == "S"], ivs)}
    binds = tuple(substitute(b, vmap) for iv, b in zip(blk.iter_vars, blk.bindings)
                  if iv.kind == "S")
    pred = conjunction([substitute(c, vmap) for c in conjuncts(blk.predicate)
                        if not free_vars(c) & dropped])
    init_name = unique_name(func, f"{name}_init")
    init_body = rewrite_stmt(blk.init, expr_fn=lambda e: substitute(e, ivmap))
    nest: Stmt = Block(init_name, ivs, binds, init_body, None, pred)
    for lp in reversed(keep):
        new_var = vmap[lp.var]
        assert isinstance(new_var, Var)
        nest = For(new_var, lp.extent, nest, lp.kind, lp.annotations)
    f2 = replace_block(func, name, lambda b: replace(b, init=None))
    body = mutate(f2.body, lambda s: isinstance(s, For) and s.var is var,
                  lambda s: seq([nest, s]))
    assert body is not None
    return f2.with_body(body), init_name


REVISIT_POINTS = 1 << 16   # grid points _revisits counts; beyond, it answers no


def _revisits(blk: Block, inner: Sequence[For], outer: Sequence[For]) -> bool:
    """Whether the loops ``inner`` (the outer ones held at 0) map two of their
    iterations where ``blk`` runs to the same values of its axes. Bindings without a
    division or modulo of these loops (splits, reorders, compute_at's own loops) are
    taken as one-to-one, as the per-loop checks above leave them; with one (a fused
    loop) the visits are counted on the grid of the loops' values when it has at most
    ``REVISIT_POINTS`` points.
    Otherwise assumed not: every tuned candidate is still checked against the
    reference."""
    loops = [lp for lp in inner if lp.extent > 1]
    exprs = [*blk.bindings, *([blk.predicate] if blk.predicate is not None else [])]
    moved = {lp.var for lp in loops}
    if not any(isinstance(x, BinOp) and x.op in ("//", "%") and free_vars(x) & moved
               for e in exprs for x in iter_exprs(e)) or \
            math.prod(lp.extent for lp in loops) > REVISIT_POINTS:
        return False
    grids = np.meshgrid(*[np.arange(lp.extent) for lp in loops], indexing="ij")
    env: dict[Var, Any] = {lp.var: np.zeros(1, np.int64) for lp in (*outer, *inner)}
    env.update({lp.var: g.ravel() for lp, g in zip(loops, grids)})
    n = grids[0].size
    code = np.zeros(n, np.int64)   # the axes' values as one mixed-radix number
    for iv, b in zip(blk.iter_vars, blk.bindings):
        v = evaluate_grid(b, env)
        if v is None:
            return False
        code = code * iv.extent + np.broadcast_to(v, (n,))
    if blk.predicate is not None:
        keep = evaluate_grid(blk.predicate, env)
        if keep is None:
            return False
        code = code[np.broadcast_to(keep, (n,))]
    return len(np.unique(code)) < len(code)


def _reduction_parts(blk: Block, what: str) -> tuple[BufferStore, str, Expr]:
    st = blk.body
    ok = blk.init is not None and isinstance(st, BufferStore) and isinstance(st.value, BinOp) \
        and st.value.op in ("+", "max", "min") and isinstance(st.value.a, BufferLoad) \
        and st.value.a.buffer is st.buffer and structural_equal(st.value.a.indices, st.indices)
    check(ok, f"{what}: block {blk.name} is not a reduction of the form "
              "X[...] = X[...] + expr (or max/min) with an init")
    assert isinstance(st, BufferStore) and isinstance(st.value, BinOp)
    return st, st.value.op, st.value.b


def _written_slots(blk: Block, var: Var, red_loops: list[For], w_var: Var,
                   what: str) -> Expr | None:
    """The final block's guard: the partial-sum slots of ``var`` that some update writes.

    A guarded split of the reduction (``k_0 * 2 + k_1 < 9``) leaves slots that no update
    writes when ``var`` alone can exceed the extent (``k_0_k_1_f`` = 9 after fusing the
    two back, or ``k_0`` = 5 of 6 when ``k_1`` is split again): the final sum must not read
    them, and later schedules of the partial block need not initialise them. The slots
    are found by evaluating the guard over the reduction loops; they must be a prefix
    ``var < n`` whose first point (every other reduction loop at 0) is written, since
    that is where the partial block's init runs.
    """
    red = {lp.var: lp.extent for lp in red_loops}
    terms = [c for c in conjuncts(blk.predicate) if var in free_vars(c)]
    for c in terms:
        other = sorted(v.name for v in free_vars(c) if v not in red)
        if other:
            raise ScheduleError(
                f"{what}: block {blk.name}'s guard {c} ties loop {var.name} to loop "
                f"{other[0]}, so some partial sums would stay unwritten for some outputs; "
                "rfactor a loop whose guard involves the reduction loops only")
    guard = conjunction(terms)
    if guard is None:
        return None
    used = [var] + sorted(set().union(*map(free_vars, terms)) - {var}, key=lambda v: v.name)
    env = {v: np.arange(red[v]).reshape([-1 if i == n else 1 for i in range(len(used))])
           for n, v in enumerate(used)}
    ok = evaluate_grid(guard, env) if math.prod(red[v] for v in used) <= 1 << 22 else None
    check(ok is not None, f"{what}: cannot tell which partial sums block {blk.name}'s "
                          f"guard {guard} leaves unwritten; rfactor another loop")
    grid = np.broadcast_to(np.asarray(ok, dtype=bool), [red[v] for v in used])
    grid = grid.reshape(red[var], -1)
    written: np.ndarray = np.asarray(grid.any(axis=1))
    n = int(written.sum())
    bad = np.flatnonzero(written & ~grid[:, 0])
    check(not bad.size, f"{what}: block {blk.name}'s guard {guard} writes partial sum "
                        f"{var.name} = {int(bad[:1].sum())} but not at its first reduction "
                        "point, where the init runs; rfactor another loop")
    if not written[:n].all():
        raise ScheduleError(
            f"{what}: block {blk.name}'s guard {guard} leaves partial sum {var.name} = "
            f"{int(np.flatnonzero(~written)[0])} unwritten but writes later ones; rfactor "
            "another loop")
    return None if n == red[var] else BinOp("<", w_var, IntImm(n), "bool")


def rfactor(func: PrimFunc, var: Var, factor_axis: int = 0) -> tuple[PrimFunc, str]:
    """Turn reduction loop ``var`` into a spatial axis of partial results.

    Before: ``for n: for j0: for j1: S[vn] += A[vn, j0 * 16 + j1]``
    After ``rfactor(j1)``::

        for n: for j0: for j1: S_rf[vj1, vn] += A[vn, vj0 * 16 + vj1]   # j1 spatial
        for n: for j1: S[vn] += S_rf[vj1, vn]
    Returns the partial block's name.
    """
    what = f"rfactor({var.name})"
    loop, _ = find_loop(func, var)
    users = [b for b in blocks_under(loop.body)
             if any(iv.kind == "R" for iv in iter_vars_moved_by(b, var))]
    check(len(users) == 1, f"{what}: loop {var.name} must iterate the reduction axis of "
                           f"exactly one block, found {len(users)}")
    blk = users[0]
    _, path = find_block(func, blk.name)
    st, op, src = _reduction_parts(blk, what)
    red_loops = [lp for lp in path
                 if any(iv.kind == "R" for iv in iter_vars_moved_by(blk, lp.var))]
    # No loop over the reduction (``var`` among them) may also iterate a spatial axis: as
    # ``var`` that would put an output axis into the partial sums, and as another loop,
    # one fused across i, j and k, it would become a reduction axis of the partial block
    # whose init then ran once per loop start, not once per output element.
    for lp in red_loops:
        mixed = [iv.var.name for iv in iter_vars_moved_by(blk, lp.var) if iv.kind == "S"]
        if mixed:
            raise ScheduleError(f"{what}: loop {lp.var.name} of block {blk.name} iterates "
                                f"both the reduction and the spatial axis {mixed[0]}; every "
                                "loop over the reduction must iterate reduction axes only")
    buf = st.buffer
    check(0 <= factor_axis <= len(buf.shape),
          f"{what}: factor_axis must be in [0, {len(buf.shape)}], got {factor_axis}")
    s_ivs = [iv for iv in blk.iter_vars if iv.kind == "S"]
    new_s = [IterVar(Var(iv.var.name), iv.extent, "S") for iv in s_ivs]
    vrf = IterVar(Var("v" + var.name), loop.extent, "S")
    new_r = [IterVar(Var("v" + lp.var.name), lp.extent, "R") for lp in red_loops
             if lp.var is not var]
    loop_to_iv: dict[Var, Expr] = {var: vrf.var}
    loop_to_iv.update({lp.var: iv.var for lp, iv in
                       zip([lp for lp in red_loops if lp.var is not var], new_r)})
    ivmap: dict[Var, Expr] = {o.var: n.var for o, n in zip(s_ivs, new_s)}
    for iv, bd in zip(blk.iter_vars, blk.bindings):
        if iv.kind == "R":
            ivmap[iv.var] = simplify(substitute(bd, loop_to_iv))
    rf_name = unique_name(func, f"{buf.name}_rf")
    shape = list(buf.shape)
    shape.insert(factor_axis, loop.extent)
    rf_buf = Buffer(rf_name, tuple(shape), buf.dtype, "global")
    idx = [substitute(i, ivmap) for i in st.indices]
    rf_idx = tuple(idx[:factor_axis] + [vrf.var] + idx[factor_axis:])
    acc = BufferLoad(rf_buf, rf_idx)
    rf_body = BufferStore(rf_buf, rf_idx, BinOp(op, acc, substitute(src, ivmap), buf.dtype))
    assert blk.init is not None and isinstance(blk.init, BufferStore)
    rf_init = BufferStore(rf_buf, rf_idx, blk.init.value)
    rf_block = Block(rf_name, tuple(new_s + [vrf] + new_r),
                     tuple([bd for iv, bd in zip(blk.iter_vars, blk.bindings) if iv.kind == "S"]
                           + [var] + [lp.var for lp in red_loops if lp.var is not var]),
                     rf_body, rf_init, blk.predicate)
    # The final block keeps the original name: it still produces the original buffer.
    w_s = [IterVar(Var(iv.var.name), iv.extent, "S") for iv in s_ivs]
    w_r = IterVar(Var("v" + var.name), loop.extent, "R")
    wmap: dict[Var, Expr] = {o.var: n.var for o, n in zip(s_ivs, w_s)}
    out_idx = tuple(substitute(i, wmap) for i in st.indices)
    part_idx = tuple(list(out_idx[:factor_axis]) + [w_r.var] + list(out_idx[factor_axis:]))
    w_body = BufferStore(buf, out_idx, BinOp(op, BufferLoad(buf, out_idx),
                                             BufferLoad(rf_buf, part_idx), buf.dtype))
    w_init = BufferStore(buf, out_idx, substitute(blk.init.value, wmap))
    loops = [Var(iv.var.name[1:] or "ax") for iv in w_s] + [Var(var.name)]
    w_pred = _written_slots(blk, var, red_loops, loops[-1], what)
    nest: Stmt = Block(blk.name, tuple(w_s + [w_r]), tuple(loops), w_body, w_init, w_pred)
    for lv, n in reversed(list(zip(loops, [iv.extent for iv in w_s] + [loop.extent]))):
        nest = For(lv, n, nest)
    ri = root_index(func, blk.name)
    early = [b.name for b, _ in iter_blocks(func.body) if b.name != blk.name
             and buf in reads(b) and root_index(func, b.name) == ri]
    if early:
        raise ScheduleError(f"{what}: {early[0]} reads {buf.name} inside the loop nest of "
                            f"{blk.name}; the final reduction would come after it")
    f2 = replace_block(func, blk.name, lambda _: rf_block)
    f3 = insert_root(f2, ri + 1, nest)
    return f3.with_body(f3.body, f3.alloc_buffers + (rf_buf,)), rf_name
