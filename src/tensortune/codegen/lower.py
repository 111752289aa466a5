"""Lower a scheduled ``PrimFunc`` into the form the C emitter prints.

Passes, in order:
1. ``flatten_blocks``: blocks become their bodies with iteration variables replaced by
   their bindings; a block predicate becomes an ``if``; a reduction's ``init`` runs under
   ``if`` all reduction bindings are 0 and the predicate's terms on spatial loops hold.
2. ``compact_buffers``: each intermediate buffer is allocated at the innermost loop that
   encloses all its uses, shrunk to the region used there (a cache_write tile under a loop
   becomes a small local array; indices are shifted by the region's start). A buffer
   given ``storage_align`` then has its rows laid out aligned (``_align_rows``).
3. ``unroll``: loops marked unrolled are expanded with constant loop values, so a local
   tile's indices become constants the emitter can keep in registers.
4. ``simplify_stmt``: index arithmetic simplified with loop ranges; dead ``if``s removed.
5. ``speculate_tails`` (``speculate.py``): a guarded register tile's tail rows are
   computed anyway in its local accumulators (loads clamped into their buffers), so the
   reduction loop carries no test; the write-back keeps it.
6. ``partition_loops`` (``partition.py``): a loop is split where a guard on its own
   variable changes value (a padded copy's borders, a tail test left inside a loop), so
   the middle part has no guard.
7. ``unswitch_loops`` (``unswitch.py``): a loop whose body selects on a condition none
   of its iterations changes becomes one copy per outcome under one test, so no copy
   computes the branches it does not take.

Example:
    >>> low = lower(sch.func)     # a PrimFunc without blocks, ready for codegen.c
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..tir.analysis import conjunction, conjuncts, region, union
from ..tir.arith import Ranges, simplify
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Var
from ..tir.functor import (
    Retarget,
    free_vars,
    iter_exprs,
    retarget_many,
    rewrite_expr,
    rewrite_stmt,
    stmt_exprs,
    substitute,
    substitute_stmt,
    walk_with_loops,
)
from ..tir.linear import structural_key
from ..tir.stmt import (
    SCHED_PRESSURE,
    Allocate,
    Block,
    Buffer,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Seq,
    Stmt,
    seq,
)
from .partition import partition_loops
from .speculate import speculate_tails
from .unswitch import unswitch_loops

MAX_UNROLL = 512  # weighted statements an expansion may produce; bigger ones stay loops
LOOP_WEIGHT = 8  # a loop left inside an expansion costs gcc far more than a statement


def flatten_blocks(s: Stmt) -> Stmt:
    def fn(x: Stmt) -> Stmt | None:
        if not isinstance(x, Block):
            return None
        vmap = {iv.var: b for iv, b in zip(x.iter_vars, x.bindings, strict=True)}
        body = substitute_stmt(x.body, vmap)
        if x.predicate is not None:
            body = IfThenElse(x.predicate, body)
        if x.init is not None:
            pairs = list(zip(x.iter_vars, x.bindings, strict=True))
            conds: list[Expr] = [BinOp("==", b, IntImm(0), "bool")
                                 for iv, b in pairs if iv.kind == "R"]
            # The init runs once per spatial instance even when the predicate leaves its
            # reduction empty: a guarded split of the reduction, rfactored, gives slots
            # (k_0 = 3 of 9 = 4 x 3) that no update touches but the final sum reads. So
            # the init keeps only the predicate's terms on spatial loops, as
            # decompose_reduction does.
            red = set().union(*[free_vars(b) for iv, b in pairs if iv.kind == "R"])
            spat = set().union(*[free_vars(b) for iv, b in pairs if iv.kind == "S"])
            conds += [c for c in conjuncts(x.predicate) if not free_vars(c) & (red - spat)]
            init = substitute_stmt(x.init, vmap)
            cond = conjunction(conds)
            if cond is not None:  # without reduction axes (after rfactor) all initialise
                init = IfThenElse(cond, init)
            body = seq([init, body])
        return body

    return rewrite_stmt(s, stmt_fn=fn)


# ---------------------------------------------------------------- buffer compaction
IndexFn = Callable[[tuple[Expr, ...]], tuple[Expr, ...]]


def _accesses(body: Stmt) -> dict[Buffer, list[tuple[tuple[Expr, ...], tuple[For, ...]]]]:
    """(indices, enclosing loops) of every load and store, per buffer."""
    out: dict[Buffer, list[tuple[tuple[Expr, ...], tuple[For, ...]]]] = {}
    for st, path in walk_with_loops(body):
        if isinstance(st, BufferStore):
            out.setdefault(st.buffer, []).append((st.indices, path))
        for e in stmt_exprs(st):
            for x in iter_exprs(e):
                if isinstance(x, BufferLoad):
                    out.setdefault(x.buffer, []).append((x.indices, path))
    return out


def compact_buffers(func: PrimFunc) -> PrimFunc:
    """Allocate intermediates where they are used, shrunk to the region used there."""
    acc = _accesses(func.body)
    body = func.body
    root_allocs: list[Buffer] = []
    targets: Retarget = {}
    places: list[tuple[Buffer, Var | None]] = []
    for buf in func.alloc_buffers:
        sites = acc.get(buf)
        if not sites:
            continue
        paths = [p for _, p in sites]
        lca: list[For] = []
        for loops in zip(*paths, strict=False):
            if all(x is loops[0] for x in loops):
                lca.append(loops[0])
            else:
                break
        all_ranges: Ranges = {}
        for _, p in sites:
            for f in p:
                all_ranges[f.var] = (0, f.extent - 1)
        outer_vars = {f.var for f in lca}
        starts: list[Expr] = []
        shape: list[int] = []
        for d, n in enumerate(buf.shape):
            regions = []
            seen: set[tuple[object, ...]] = set()
            for idx, p in sites:
                # A repeated index under the same loops adds nothing to the union.
                key = (structural_key(idx[d]), *map(id, p))
                if key in seen:
                    continue
                seen.add(key)
                inner = {f.var: (0, f.extent - 1) for f in p if f.var not in outer_vars}
                try:
                    regions.append(region(idx[d], inner, all_ranges))
                except ValueError:
                    regions.append((IntImm(0), n, False))
            lo, ext, _ = union(regions, n)
            starts.append(lo)
            shape.append(ext)
        if not lca and tuple(shape) == buf.shape and buf.align is None:
            root_allocs.append(buf)
            continue
        index = _shift(starts)
        if buf.align is not None:
            shape, index = _align_rows(shape, index, *buf.align)
        new = Buffer(buf.name, tuple(shape), buf.dtype, "local" if lca else buf.scope)
        targets[buf] = (new, index)
        places.append((new, lca[-1].var if lca else None))
    # Every buffer redirected in one walk, then allocated in the order found.
    body = retarget_many(body, targets)
    for new, at in places:
        body = Allocate(new, body) if at is None else \
            rewrite_stmt(body, stmt_fn=_allocate_at(at, new))
    return replace(func, body=body, alloc_buffers=tuple(root_allocs))


def _align_rows(shape: list[int], index: IndexFn, factor: int, offset: int
                ) -> tuple[list[int], IndexFn]:
    """``storage_align``'s layout of a compacted buffer: its last two dimensions become
    one, rows ``P = roundup(W, factor)`` apart with element 0 of each at ``offset``, so
    ``[..., R, W]`` is stored in ``roundup((R - 1) P + offset + W, factor)`` elements.
    Rows may share a line: row r spans [r P + offset, r P + offset + W), and P >= W."""
    *outer, rows, width = [1, *shape] if len(shape) == 1 else shape
    pitch = -(-width // factor) * factor
    merged = -(-((rows - 1) * pitch + offset + width) // factor) * factor

    def aligned(idx: tuple[Expr, ...]) -> tuple[Expr, ...]:
        *head, r, c = index(idx) if len(idx) > 1 else (IntImm(0), *index(idx))
        row = BinOp("+", BinOp("*", r, IntImm(pitch), "int32"), c, "int32")
        return (*head, BinOp("+", row, IntImm(offset), "int32") if offset else row)

    return [*outer, merged], aligned


def _allocate_at(key: Var, buf: Buffer):
    def fn(x: Stmt) -> Stmt | None:
        if isinstance(x, For) and x.var is key:
            return replace(x, body=Allocate(buf, x.body))
        return None

    return fn


def _shift(starts: list[Expr]) -> IndexFn:
    def shift(idx: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(i if isinstance(s, IntImm) and s.value == 0 else
                     BinOp("-", i, s, "int32") for i, s in zip(idx, starts, strict=True))

    return shift


# ---------------------------------------------------------------- unroll and simplify
def simplify_stmt(s: Stmt, ranges: Ranges | None = None,
                  consts: dict[Var, Expr] | None = None) -> Stmt | None:
    """Simplify with loop ranges, expand small unrolled loops, drop dead code.
    ``consts`` gives the values of the loop variables already expanded above ``s``."""
    r: Ranges = dict(ranges or {})
    vm = consts or {}
    if isinstance(s, For):
        # An expanded loop's value is passed down, not substituted into its body at once:
        # nested expanded loops (a register tile's) rebuilt the whole body at every level.
        if s.kind == ForKind.UNROLLED and s.extent * _size(s.body) <= MAX_UNROLL \
                and not s.annotations:
            parts = []
            for i in range(s.extent):
                b = simplify_stmt(s.body, r, {**vm, s.var: IntImm(i)})
                if b is not None:
                    parts.append(b)
            return seq(parts) if parts else None
        # A unit loop goes, unless it carries the kernel-wide request for gcc's pre-RA
        # scheduling: the C emitter looks for it on a loop of the lowered body.
        if s.extent == 1 and s.kind != ForKind.PARALLEL and not s.annotation(SCHED_PRESSURE):
            return simplify_stmt(s.body, r, {**vm, s.var: IntImm(0)})
        r[s.var] = (0, s.extent - 1)
        body = simplify_stmt(s.body, r, vm)
        return None if body is None else replace(s, body=body)
    if isinstance(s, Seq):
        parts = [p for p in (simplify_stmt(x, r, vm) for x in s.stmts) if p is not None]
        return seq(parts) if parts else None
    if isinstance(s, IfThenElse):
        c = simplify(substitute(s.cond, vm), r)
        if isinstance(c, IntImm):
            return simplify_stmt(s.then, r, vm) if c.value else (
                None if s.else_ is None else simplify_stmt(s.else_, r, vm))
        then = simplify_stmt(s.then, r, vm)
        els = None if s.else_ is None else simplify_stmt(s.else_, r, vm)
        if then is None and els is None:
            return None
        return IfThenElse(c, then if then is not None else Seq(()), els)
    if isinstance(s, Allocate):
        body = simplify_stmt(s.body, r, vm)
        return None if body is None else Allocate(s.buffer, body)
    if isinstance(s, BufferStore):
        return BufferStore(s.buffer, tuple(simplify(substitute(i, vm), r) for i in s.indices),
                           rewrite_expr(simplify(substitute(s.value, vm), r),
                                        lambda x: BufferLoad(x.buffer, tuple(
                                            simplify(i, r) for i in x.indices))
                                        if isinstance(x, BufferLoad) else None))
    return substitute_stmt(s, vm) if vm else s


def _size(s: Stmt) -> int:
    """Statements after expanding every unrolled loop, loops weighted (what explicit
    unrolling costs in compile time: 512 copies of a small loop once took gcc 27 s).
    A block counts as ``flatten_blocks`` makes it (its body, and its init), so a
    scheduled tree is sized as it will be lowered (``c.unroll_pragma_applies``)."""
    n = s.__dict__.get("_size")
    if n is None:
        n = _count(s)
        object.__setattr__(s, "_size", n)   # asked again at every level of a nest
    return n


def _count(s: Stmt) -> int:
    if isinstance(s, For):
        inner = _size(s.body)
        return inner * s.extent if s.kind == ForKind.UNROLLED else inner + LOOP_WEIGHT
    if isinstance(s, Seq):
        return sum(_size(x) for x in s.stmts)
    if isinstance(s, IfThenElse):
        return _size(s.then) + (0 if s.else_ is None else _size(s.else_))
    if isinstance(s, Allocate):
        return _size(s.body)
    if isinstance(s, Block):
        return _size(s.body) + (0 if s.init is None else _size(s.init))
    return 1


def lower(func: PrimFunc) -> PrimFunc:
    """The whole lowering pipeline (see the module docstring)."""
    f = replace(func, body=flatten_blocks(func.body))
    f = compact_buffers(f)
    body = simplify_stmt(f.body)
    if body is None:
        return replace(f, body=Seq(()))
    f = speculate_tails(replace(f, body=body))
    return replace(f, body=unswitch_loops(partition_loops(f.body, None, simplify_stmt)))
