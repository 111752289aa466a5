"""Speculative tail rows: a guarded register tile computes its tail rows anyway.

A guarded split (``sample_tile`` drawing 6 rows of a 28-row axis) leaves a test around
each statement of the tile's tail rows, the FMAs inside the reduction loop included,
where gcc keeps them as branches between the FMAs::

    for rc in 0..128:                              for rc in 0..128:
      acc_r0 = acc_r0 + pad[rc, 0, z] * w[...]  ->   acc_r0 = acc_r0 + pad[rc, 0, z] * w[...]
      if (y * 6 + 5 < 28)                            acc_r5 = acc_r5 + pad[rc, 5, z] * w[...]
        acc_r5 = acc_r5 + pad[rc, 5, z] * w[...]
    if (y * 6 + 5 < 28) out[y * 6 + 5, z] = acc_r5    if (y * 6 + 5 < 28) out[...] = acc_r5

The accumulators live in a local buffer, so there the test only decides whether a
register holds garbage; the write-back, which stores to memory, keeps it. A test is
dropped from statements that store only to local buffers when every read of what they
store is under the same test (an rfactor's partial sums, summed without it, keep theirs)
and every load in them stays inside memory the kernel owns: a buffer the kernel
allocates grows by the rows a tail row reads past its end (nothing writes them, so
they are zeroed when it is allocated: memory never written often holds denormals as
floats, whose arithmetic takes microcode assists); an input is clamped
(``min(row, n - 1)``) only where the clamped index uses no variable but the test's, so
the clamp leaves the reduction loop (a clamp of a conv's ``row + ry`` inside it made C2D
programs 1.07-1.35x slower). Otherwise the test stays.

Not every program gains: some C2D programs tuned before this pass ran 1.25-1.33x slower
speculated, their sources otherwise identical. Without the tests gcc folded the weight
loads into the FMAs (18 vector loads per 18 FMAs instead of 6; RESULTS). Tuning
measures what it gets, so a fresh search picks around them; a database tuned before
keeps their old timings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..tir.analysis import conjunction, conjuncts
from ..tir.arith import Ranges, bound
from ..tir.expr import BinOp, BufferLoad, Expr, FloatImm, IntImm, Var, is_float
from ..tir.functor import (
    free_vars,
    iter_exprs,
    retarget,
    rewrite_expr,
    rewrite_stmt,
    stmt_exprs,
    walk,
)
from ..tir.linear import structural_key
from ..tir.stmt import (
    Allocate,
    Buffer,
    BufferStore,
    For,
    IfThenElse,
    PrimFunc,
    Seq,
    Stmt,
    seq,
)

_INEQ = ("<", "<=", ">", ">=")
Reads = dict[Buffer, list[tuple[tuple[Expr, ...], frozenset[object]]]]


def speculate_tails(func: PrimFunc) -> PrimFunc:
    """``func`` with the tail tests of local-buffer statements dropped where that is
    safe (see the module docstring)."""
    reads: Reads = {}
    _collect(func.body, frozenset(), reads)
    own = set(func.alloc_buffers) | {x.buffer for x in walk(func.body)
                                     if isinstance(x, Allocate)}
    ctx = _Ctx(reads, own, {})
    body = _rewrite(func.body, {}, ctx)
    allocs = list(func.alloc_buffers)
    for buf, (need, d) in ctx.grow.items():
        # Dimension d grows: the first one past leading 1s that every access indexes at
        # 0 only, so the strides the indices use stay. (A split of a unit loop indexes a
        # leading 1 past 0; growing a dimension after it would change its stride.)
        row = math.prod(buf.shape[d + 1:])
        shape = buf.shape[:d] + (-(-need // row),) + buf.shape[d + 1:]
        new = Buffer(buf.name, shape, buf.dtype, buf.scope)
        fill = _zero_fill(buf, new, d)
        if buf in allocs:   # the function's own buffer: zeroed before the body
            allocs = [new if b is buf else b for b in allocs]
            body = seq([fill, retarget(body, buf, new)])
        else:               # a local allocation: zeroed wherever it is allocated
            body = _retarget_alloc(body, buf, new, fill)
    return replace(func, body=body, alloc_buffers=tuple(allocs))


def _zero_fill(old: Buffer, new: Buffer, d: int) -> Stmt:
    """Zeros stored to what ``new`` holds past ``old`` along dimension ``d`` (the
    dimensions before it are 1s, so that is the allocation's last elements): tail rows
    read them and nothing writes them (why that matters: the module docstring; of 200
    random programs of ten suite workloads, four ran 1.5-3.0x slower without it)."""
    loops: list[tuple[Var, int]] = []
    idx: list[Expr] = []
    for e, n in enumerate(new.shape):
        if e < d:
            idx.append(IntImm(0))
            continue
        v = Var(f"{new.name}_z{e}")
        if e == d:
            loops.append((v, n - old.shape[d]))
            idx.append(BinOp("+", v, IntImm(old.shape[d]), "int32"))
        else:
            loops.append((v, n))
            idx.append(v)
    st: Stmt = BufferStore(new, tuple(idx), FloatImm(0.0, new.dtype))
    for v, n in reversed(loops):
        st = For(v, n, st)
    return st


@dataclass
class _Ctx:
    reads: Reads
    own: set  # buffers this function allocates: they may grow instead of clamping
    grow: dict  # buffer -> (elements its allocation must hold, dimension to grow)


def _retarget_alloc(s: Stmt, old: Buffer, new: Buffer, fill: Stmt) -> Stmt:
    s = retarget(s, old, new)
    return rewrite_stmt(s, stmt_fn=lambda x: Allocate(new, seq([fill, x.body]))
                        if isinstance(x, Allocate) and x.buffer is old else None)


def _may_alias(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
    """Whether two accesses may touch one element: not when some dimension holds two
    different constants (a register tile's rows after unrolling)."""
    return not any(isinstance(x, IntImm) and isinstance(y, IntImm) and x.value != y.value
                   for x, y in zip(a, b, strict=True))


def _collect(s: Stmt, terms: frozenset[object], reads: Reads) -> None:
    """Every read of a local buffer, with the tests it is under. A statement's read of
    the element it updates counts too: it is under the statement's own tests."""
    if isinstance(s, IfThenElse):
        _loads(s.cond, terms, reads)
        inner = terms | {structural_key(t) for t in conjuncts(s.cond)} if s.else_ is None else terms
        _collect(s.then, inner, reads)
        if s.else_ is not None:
            _collect(s.else_, terms, reads)
        return
    if isinstance(s, (For, Allocate)):
        _collect(s.body, terms, reads)
        return
    if isinstance(s, Seq):
        for part in s.stmts:
            _collect(part, terms, reads)
        return
    for e in stmt_exprs(s):
        _loads(e, terms, reads)


def _loads(e: Expr, terms: frozenset[object], reads: Reads) -> None:
    for x in iter_exprs(e):
        if isinstance(x, BufferLoad) and x.buffer.scope == "local":
            reads.setdefault(x.buffer, []).append((x.indices, terms))


def _rewrite(s: Stmt, r: Ranges, ctx: _Ctx) -> Stmt:
    if isinstance(s, For):
        rr = dict(r)
        rr[s.var] = (0, s.extent - 1)
        return replace(s, body=_rewrite(s.body, rr, ctx))
    if isinstance(s, Seq):
        return seq([_rewrite(x, r, ctx) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _rewrite(s.body, r, ctx))
    if isinstance(s, IfThenElse):
        if s.else_ is None:
            out = _speculate(s, r, ctx)
            if out is not None:
                return out
        return IfThenElse(s.cond, _rewrite(s.then, r, ctx),
                          None if s.else_ is None else _rewrite(s.else_, r, ctx))
    return s


def _speculate(s: IfThenElse, r: Ranges, ctx: _Ctx) -> Stmt | None:
    body = s.then.stmts if isinstance(s.then, Seq) else (s.then,)
    if not body or not all(isinstance(x, BufferStore) and x.buffer.scope == "local"
                           and is_float(x.buffer.dtype) for x in body):
        return None
    terms = conjuncts(s.cond)
    tail = [t for t in terms if isinstance(t, BinOp) and t.op in _INEQ]
    if not tail:
        return None
    need = {structural_key(t) for t in tail}
    for st in body:
        assert isinstance(st, BufferStore)
        for idx, under in ctx.reads.get(st.buffer, []):
            if _may_alias(idx, st.indices) and not need <= under:
                return None  # someone may read this element without the test
    allowed = set().union(*[free_vars(t) for t in tail])
    grow = dict(ctx.grow)
    clamped: list[Stmt] = []
    for st in body:
        assert isinstance(st, BufferStore)
        if any(isinstance(x, BinOp) and x.op in ("//", "%", "/") and not is_float(x.dtype)
               and not isinstance(x.b, IntImm) for x in iter_exprs(st.value)):
            return None  # an integer division by a loaded value could trap on garbage
        value = _clamp(st.value, r, allowed, ctx.own, grow)
        if value is None:
            return None
        # The element a tail row stores to must exist as well: compaction may have cut the
        # buffer to the rows the test lets through (a guarded split of a unit loop).
        target = BufferLoad(st.buffer, st.indices)
        kept = _clamp(target, r, set(), ctx.own, grow)
        if kept is None or structural_key(kept) != structural_key(target):
            return None
        clamped.append(BufferStore(st.buffer, st.indices, value))
    ctx.grow.update(grow)
    rest = conjunction([t for t in terms if structural_key(t) not in need])
    new = seq(clamped)
    return new if rest is None else IfThenElse(rest, new)


def _clamp(e: Expr, r: Ranges, allowed: set, own: set, grow: dict) -> Expr | None:
    """``e`` with every load kept inside its buffer; None if that is not cheap.

    A buffer this function allocates grows (``grow``: its allocation gets the rows the
    tail reads past its end, never written, never stored, and the dimension that may
    grow without changing a stride an access uses): nothing changes in the loop.
    An input is clamped (``min(row, n - 1)``), but only where the index uses no variable
    but the test's, so the clamp is hoisted out of the reduction: a clamp of a conv's
    ``row + ry`` ran inside it and made C2D programs 1.07-1.35x slower."""
    failed = False

    def fn(x: Expr) -> Expr | None:
        nonlocal failed
        if not isinstance(x, BufferLoad):
            return None
        maybe = [bound(i, r) for i in x.indices]
        bounds = [b for b in maybe if b is not None]
        if len(bounds) != len(maybe):
            failed = True
            return x
        shape = x.buffer.shape
        if all(b[0] >= 0 and b[1] <= n - 1 for b, n in zip(bounds, shape, strict=True)):
            return x
        if x.buffer in own and all(b[0] >= 0 for b in bounds):
            stride, hi = 1, 0
            for b, n in zip(reversed(bounds), reversed(shape), strict=True):
                hi += b[1] * stride
                stride *= n
            d = next((i for i, (b, n) in enumerate(zip(bounds, shape)) if n > 1 or b[1] > 0),
                     0)
            need, dim = grow.get(x.buffer, (0, d))
            grow[x.buffer] = (max(need, hi + 1, math.prod(shape)), min(dim, d))
            return x
        idx: list[Expr] = []
        for i, b, n in zip(x.indices, bounds, shape, strict=True):
            if b[0] >= 0 and b[1] <= n - 1:
                idx.append(i)
                continue
            if not free_vars(i) <= allowed:
                failed = True
                return x
            c = i
            if b[1] > n - 1:
                c = BinOp("min", c, IntImm(n - 1), "int32")
            if b[0] < 0:
                c = BinOp("max", c, IntImm(0), "int32")
            idx.append(c)
        return BufferLoad(x.buffer, tuple(idx))

    out = rewrite_expr(e, fn)
    return None if failed else out
