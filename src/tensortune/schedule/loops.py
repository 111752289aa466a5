"""Loop primitives: split, fuse, reorder, and loop kinds (parallel, vectorize, unroll).

Each is a pure function from a function to a new function; ``Schedule`` records them.

split(i, [None, 4]) on ``for i in range(10): B[i] = A[i]``::

    for i_0 in range(3):
        for i_1 in range(4):
            with block("B", vi=S(i_0 * 4 + i_1)):
                where(i_0 * 4 + i_1 < 10)           # the tail is guarded, never out of bounds
                B[vi] = A[vi]
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..errors import ScheduleError, check
from ..tir.analysis import conjunction
from ..tir.arith import delinearize, simplify
from ..tir.expr import BinOp, Expr, IntImm, Var
from ..tir.functor import rewrite_stmt, substitute
from ..tir.stmt import LOOP_ANNOTATIONS, Block, For, ForKind, PrimFunc, Stmt
from .tree import blocks_under, find_loop, iter_vars_moved_by, replace_loop


def _rebind(body: Stmt, vmap: dict[Var, Expr], ranges: dict[Var, tuple[int, int]],
            guard: Expr | None = None) -> Stmt:
    """Substitute loop variables in block bindings/predicates; add ``guard`` to blocks."""

    def sf(s: Stmt) -> Stmt | None:
        if not isinstance(s, Block):
            return None
        binds = tuple(_subst(b, vmap, ranges) for b in s.bindings)
        pred = None if s.predicate is None else _subst(s.predicate, vmap, ranges)
        if guard is not None:
            pred = conjunction([guard] if pred is None else [pred, guard])
        return replace(s, bindings=binds, predicate=pred)

    return rewrite_stmt(body, stmt_fn=sf)


def _subst(e: Expr, vmap: dict[Var, Expr], ranges: dict[Var, tuple[int, int]]) -> Expr:
    # An expression without the loop's variable is left as it is: simplify rebuilds every
    # node it visits, and most of a block's bindings do not use the loop being edited.
    new = substitute(e, vmap)
    return e if new is e else simplify(new, ranges)


def split(func: PrimFunc, var: Var, factors: list[int | None]) -> tuple[PrimFunc, list[Var]]:
    """Split a loop into nested loops with the given extents (one may be None: inferred).
    Factors need not divide the extent: the blocks inside get a guard ``where(...)``.

    Before: ``for i in range(10): block(vi=S(i))``
    After ``split(i, [None, 4])``::

        for i_0 in range(3):
            for i_1 in range(4):
                block(vi=S(i_0 * 4 + i_1)), where(i_0 * 4 + i_1 < 10)
    """
    loop, _ = find_loop(func, var)
    check(len(factors) >= 2, f"split of loop {var.name}: give at least 2 factors, got {factors}")
    nones = [i for i, f in enumerate(factors) if f is None]
    check(len(nones) <= 1, f"split of loop {var.name}: at most one factor may be None "
                           f"(inferred), got {factors}")
    for f in factors:
        check(f is None or (isinstance(f, int) and f > 0),
              f"split of loop {var.name}: factors must be positive ints or None, got {factors}")
    known = math.prod(f for f in factors if f is not None)
    facs = [f if f is not None else -(-loop.extent // known) for f in factors]
    total = math.prod(facs)
    check(total >= loop.extent, f"split of loop {var.name} (extent {loop.extent}): factors "
                                f"{facs} cover only {total} iterations; use None for one factor")
    new_vars = [Var(f"{var.name}_{i}") for i in range(len(facs))]
    fused: Expr = IntImm(0)
    for v, f in zip(new_vars, facs):
        fused = BinOp("+", BinOp("*", fused, IntImm(f), "int32"), v, "int32")
    ranges = {v: (0, f - 1) for v, f in zip(new_vars, facs)}
    guard = None if total == loop.extent else BinOp("<", fused, IntImm(loop.extent), "bool")
    body = _rebind(loop.body, {var: simplify(fused, ranges)}, ranges,
                   None if guard is None else simplify(guard, ranges))
    for v, f in reversed(list(zip(new_vars, facs))):
        body = For(v, f, body)
    return replace_loop(func, var, lambda _: body), new_vars


def fuse(func: PrimFunc, vars_: list[Var]) -> tuple[PrimFunc, Var]:
    """Fuse perfectly nested, consecutive loops into one.

    Before: ``for i in range(4): for j in range(8): block(vi=S(i), vj=S(j))``
    After ``fuse(i, j)``: ``for i_j_f in range(32): block(vi=S(i_j_f // 8), vj=S(i_j_f % 8))``
    """
    check(len(vars_) >= 2, "fuse needs at least two loops")
    outer, _ = find_loop(func, vars_[0])
    loops = [outer]
    for v in vars_[1:]:
        inner = loops[-1].body
        check(isinstance(inner, For) and inner.var is v,
              f"fuse: loop {v.name} is not the only statement directly inside loop "
              f"{loops[-1].var.name}; only perfectly nested, consecutive loops can be fused")
        assert isinstance(inner, For)
        loops.append(inner)
    extent = math.prod(lp.extent for lp in loops)
    f = Var("_".join(v.name for v in vars_) + "_f")
    ranges = {f: (0, extent - 1)}
    at = delinearize(f, [lp.extent for lp in loops], ranges)
    body = _rebind(loops[-1].body, {lp.var: e for lp, e in zip(loops, at)}, ranges)
    return replace_loop(func, vars_[0], lambda _: For(f, extent, body)), f


def reorder(func: PrimFunc, vars_: list[Var]) -> PrimFunc:
    """Permute loops of one perfect nest; loops not listed keep their places.

    Before: ``for i: for j: for k: block``;  after ``reorder(k, i)``: ``for k: for j: for i``
    """
    if len(set(vars_)) != len(vars_):   # (the names are worked out only for the error)
        twice = sorted({v.name for v in vars_ if sum(u is v for u in vars_) > 1})
        raise ScheduleError(f"reorder: loop {', '.join(twice)} is listed twice; list each "
                            "once")
    found = [find_loop(func, v) for v in vars_]
    outer_i = min(range(len(found)), key=lambda i: len(found[i][1]))
    chain: list[For] = [found[outer_i][0]]
    wanted = set(vars_)
    while len([lp for lp in chain if lp.var in wanted]) < len(vars_):
        body = chain[-1].body
        if not isinstance(body, For):
            missing = [v.name for v in vars_ if v not in {lp.var for lp in chain}]
            raise ScheduleError(
                f"reorder: loops {missing} are not in a single perfect nest under loop "
                f"{chain[0].var.name} (loop {chain[-1].var.name} holds more than one "
                "statement); reorder only loops nested directly in one another")
        chain.append(body)
    inner_body = chain[-1].body
    queue = list(vars_)
    by_var = {lp.var: lp for lp in chain}
    new_chain = [by_var[queue.pop(0)] if lp.var in wanted else lp for lp in chain]
    _check_init_first(chain, new_chain, inner_body)
    body = inner_body
    for lp in reversed(new_chain):
        body = replace(lp, body=body)
    return replace_loop(func, chain[0].var, lambda _: body)


def _check_init_first(old: list[For], new: list[For], body: Stmt) -> None:
    """Refuse a reorder after which some output's reduction would not start at its init.

    A block's init runs at the first reduction point (every reduction axis at 0) of each
    output. Loops over reduction axes only can be permuted freely: whatever their order,
    the point with all of them at 0 comes first. A loop fused across a spatial and a
    reduction axis ties the two together, so swapping it with another loop over the
    reduction (e.g. two halves of a split ``j_k`` loop) can reach ``k = 1`` of some ``j``
    before ``k = 0``, and that output's partial sum is then overwritten by its init.
    """
    pos = {lp.var: i for i, lp in enumerate(new)}
    for b in blocks_under(body):
        if b.init is None:
            continue
        axes: list[tuple[For, set[str], set[str]]] = []     # loop, its spatial/reduction axes
        for lp in old:
            used = iter_vars_moved_by(b, lp.var)
            red = {iv.var.name for iv in used if iv.kind == "R"}
            if red:
                axes.append((lp, {iv.var.name for iv in used if iv.kind != "R"}, red))
        for n, (a, sa, ra) in enumerate(axes):
            for c, sc, rc in axes[n + 1:]:
                if pos[a.var] < pos[c.var] or not (sa or sc):
                    continue
                mixed, spatial = (a, sa) if sa else (c, sc)
                raise ScheduleError(
                    f"reorder: loops {a.var.name} and {c.var.name} both iterate the reduction "
                    f"of block {b.name} ({', '.join(sorted(ra | rc))}), and loop "
                    f"{mixed.var.name} also iterates its spatial axis "
                    f"{', '.join(sorted(spatial))}; swapping them would run part of an "
                    "output's reduction before its init. Keep these two loops in order, or "
                    "reorder before fusing spatial with reduction loops")


def _reduction_bound(loop: For) -> list[str]:
    """Blocks under ``loop`` that bind it to a reduction iteration variable."""
    return [f"{b.name}.{iv.var.name}" for b in blocks_under(loop.body)
            for iv in iter_vars_moved_by(b, loop.var) if iv.kind == "R"]


def set_kind(func: PrimFunc, var: Var, kind: ForKind) -> PrimFunc:
    """Mark a loop parallel (OpenMP), vectorized (SIMD) or unrolled (expanded).

    Before: ``for j in range(64)``;  after ``vectorize(j)``: ``for j in vectorized(64)``.
    Parallel and vectorized loops must iterate spatial axes only; parallel loops do not
    nest.
    """
    loop, path = find_loop(func, var)
    if kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
        bad = _reduction_bound(loop)
        check(not bad, f"cannot make loop {var.name} {kind.value}: it iterates the reduction "
                       f"axis {', '.join(bad)}; only loops over spatial axes can be {kind.value}")
    if kind == ForKind.PARALLEL:
        nested = [lp.var.name for lp in path if lp.kind == ForKind.PARALLEL]
        from ..tir.functor import walk

        nested += [s.var.name for s in walk(loop.body)
                   if isinstance(s, For) and s.kind == ForKind.PARALLEL]
        if nested:
            raise ScheduleError(f"cannot parallelize loop {var.name}: loop {nested[0]} around or "
                          "inside it is already parallel; fuse them instead")
    return replace_loop(func, var, lambda lp: replace(lp, kind=kind))


def annotate(func: PrimFunc, var: Var, key: str, value: object) -> PrimFunc:
    """Attach a code-generation hint: ``pragma_unroll=n`` asks gcc to unroll by n;
    ``gcc_sched_pressure=1`` builds the kernel with gcc's pre-RA scheduling
    (``tir.stmt.LOOP_ANNOTATIONS``).

    Before: ``for k in range(64)``;  after: ``for k in range(64, pragma_unroll=4)``.
    """
    known = "; ".join(f"{k!r} ({v})" for k, v in LOOP_ANNOTATIONS.items())
    check(key in LOOP_ANNOTATIONS, f"annotate: unknown loop annotation {key!r}; known: {known}")
    check(isinstance(value, int) and value >= 0,
          f"annotate {key}: value must be a non-negative int, got {value!r}")

    def fn(lp: For) -> For:
        ann = dict(lp.annotations)
        ann[key] = value
        return replace(lp, annotations=tuple(sorted(ann.items())))

    return replace_loop(func, var, fn)
