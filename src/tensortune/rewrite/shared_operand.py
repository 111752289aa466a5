"""Shared reduction operand: a costly term that a reduction sums and a later stage
computes again becomes a stage of its own, computed once.

A softmax written the usual way evaluates ``exp(x - max)`` twice per element: once in
the row sum and once in the division. When a reduction's operand holds a costly call
(exp, log, tanh, erf, pow, sqrt) and a later block computes the same term at its own
indices (same buffers, same structure, the reduction's variables mapped one-to-one onto
the later block's variables of equal extents), the term moves into a new element-wise
stage whose buffer both read. AutoInline leaves such a stage alone (inlining it would
bring the second evaluation back); RandomComputeLocation may place it in the
consumer's row loop, where one row of it lives in L1.

Before::

    rowsum[i] += exp(X[i, j] - rowmax[i])
    Y[i, n] = exp(X[i, n] - rowmax[i]) / rowsum[i]
After::

    E[i, j] = exp(X[i, j] - rowmax[i])
    rowsum[i] += E[i, j]
    Y[i, n] = E[i, n] / rowsum[i]

Example:
    >>> new = shared_operand(tt.workloads.get("smx"))    # None if the pattern is absent
"""

from __future__ import annotations

from ..schedule.tree import children, iter_blocks, root_index, unique_name
from ..tir.expr import BinOp, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not, Select, Var
from ..tir.functor import free_vars, iter_exprs, rewrite_expr, rewrite_stmt, substitute
from ..tir.stmt import Block, Buffer, BufferStore, For, IterVar, PrimFunc, Stmt, seq

COSTLY = frozenset({"exp", "log", "tanh", "erf", "pow", "sqrt"})


def is_costly(e: Expr) -> bool:
    """Whether ``e`` calls a transcendental (worth computing once, not inlining twice)."""
    return any(isinstance(x, Call) and x.name in COSTLY for x in iter_exprs(e))


def _match(p: Expr, t: Expr, pvars: set[Var], bind: dict[Var, Var]) -> bool:
    """Whether ``t`` is ``p`` with each variable of ``pvars`` renamed (one-to-one, the
    renaming collected in ``bind``); other variables and buffers must be the same."""
    if isinstance(p, Var) and p in pvars:
        if not isinstance(t, Var) or bind.get(p, t) is not t:
            return False
        if p not in bind and any(t is v for v in bind.values()):
            return False
        bind[p] = t
        return True
    if type(p) is not type(t):
        return False
    if isinstance(p, Var):
        return p is t
    if isinstance(p, (IntImm, FloatImm)):
        return p.value == t.value and p.dtype == t.dtype  # type: ignore[attr-defined]
    if isinstance(p, BinOp):
        assert isinstance(t, BinOp)
        return p.op == t.op and _match(p.a, t.a, pvars, bind) and _match(p.b, t.b, pvars, bind)
    if isinstance(p, Call):
        assert isinstance(t, Call)
        return p.name == t.name and len(p.args) == len(t.args) and \
            all(_match(x, y, pvars, bind) for x, y in zip(p.args, t.args))
    if isinstance(p, BufferLoad):
        assert isinstance(t, BufferLoad)
        return p.buffer is t.buffer and \
            all(_match(x, y, pvars, bind) for x, y in zip(p.indices, t.indices))
    if isinstance(p, Cast):
        assert isinstance(t, Cast)
        return p.dtype == t.dtype and _match(p.value, t.value, pvars, bind)
    if isinstance(p, Not):
        assert isinstance(t, Not)
        return _match(p.a, t.a, pvars, bind)
    if isinstance(p, Select):
        assert isinstance(t, Select)
        return all(_match(x, y, pvars, bind) for x, y in
                   ((p.cond, t.cond), (p.t, t.t), (p.f, t.f)))
    return False


def _operand(blk: Block) -> Expr | None:
    """The term a reduction block folds into its accumulator: ``acc = acc op term``."""
    st = blk.body
    if blk.init is None or not isinstance(st, BufferStore):
        return None
    v = st.value
    args = (v.a, v.b) if isinstance(v, BinOp) else v.args if isinstance(v, Call) else ()
    if len(args) != 2:
        return None

    def is_acc(x: Expr) -> bool:
        return isinstance(x, BufferLoad) and x.buffer is st.buffer
    if is_acc(args[0]) and not is_acc(args[1]):
        return args[1]
    if is_acc(args[1]) and not is_acc(args[0]):
        return args[0]
    return None


def _renaming(term: Expr, x: Expr, axes: list[IterVar],
              extent: dict[Var, int]) -> dict[Var, Var] | None:
    """How ``x`` renames ``term``'s axes onto variables of equal extents, if it does."""
    bind: dict[Var, Var] = {}
    if _match(term, x, {iv.var for iv in axes}, bind) and len(bind) == len(axes) and \
            all(extent.get(bind[iv.var]) == iv.extent for iv in axes):
        return bind
    return None


def _computes(blk: Block, term: Expr, axes: list[IterVar]) -> bool:
    """Whether ``blk`` (a single store) computes ``term`` renamed onto its own axes."""
    if not isinstance(blk.body, BufferStore) or blk.init is not None:
        return False
    extent = {iv.var: iv.extent for iv in blk.iter_vars}
    return any(_renaming(term, x, axes, extent) is not None
               for x in iter_exprs(blk.body.value))


def stage(name: str, buf: Buffer, axes: list[IterVar], term: Expr) -> Stmt:
    """A fresh loop nest computing ``buf[axes] = term`` as one element-wise block."""
    loops = [Var(iv.var.name.lstrip("v") or "i") for iv in axes]
    ivs = tuple(IterVar(Var("v" + iv.var.name.lstrip("v")), iv.extent, "S") for iv in axes)
    value = substitute(term, {a.var: b.var for a, b in zip(axes, ivs)})
    stmt: Stmt = Block(name, ivs, tuple(loops), BufferStore(buf, tuple(b.var for b in ivs), value))
    for lv, iv in zip(reversed(loops), reversed(axes)):
        stmt = For(lv, iv.extent, stmt)
    return stmt


def _replace(blk: Block, term: Expr, axes: list[IterVar], load: Expr) -> Block:
    """``blk`` with every renamed copy of ``term`` read from the new buffer instead."""
    extent = {iv.var: iv.extent for iv in blk.iter_vars}

    def fn(x: Expr) -> Expr | None:
        bind = _renaming(term, x, axes, extent)
        return None if bind is None else substitute(load, dict(bind))
    return rewrite_stmt(blk, lambda e: rewrite_expr(e, fn))  # type: ignore[return-value]


def shared_operand(func: PrimFunc) -> PrimFunc | None:
    """``func`` with each costly reduction operand that a later block recomputes moved
    into a stage of its own (see the module doc), or None where there is none."""
    changed = False
    while True:
        new = _rewrite_one(func)
        if new is None:
            return func if changed else None
        func, changed = new, True


def _rewrite_one(func: PrimFunc) -> PrimFunc | None:
    blocks = [b for b, _ in iter_blocks(func.body)]
    for k, red in enumerate(blocks):
        term = _operand(red)
        if term is None or not is_costly(term) or isinstance(term, BufferLoad):
            continue
        used = free_vars(term)
        axes = [iv for iv in red.iter_vars if iv.var in used]
        if not any(iv.kind == "R" for iv in axes) or not used <= {iv.var for iv in axes}:
            continue
        nest = children(func.body)[root_index(func, red.name)]
        if [b.name for b, _ in iter_blocks(nest)] != [red.name]:
            continue  # the new stage goes before the reduction's nest: it must be alone
        later = {b.name for b in blocks[k + 1:] if _computes(b, term, axes)}
        if not later:
            continue
        name = unique_name(func, f"{_call_name(term)}_{red.name}")
        buf = Buffer(name, tuple(iv.extent for iv in axes), term.dtype)
        own = BufferLoad(buf, tuple(iv.var for iv in axes))

        def fn(s: Stmt) -> Stmt | None:
            if isinstance(s, Block) and (s.name in later or s.name == red.name):
                return _replace(s, term, axes, own)
            return None
        body = rewrite_stmt(func.body, stmt_fn=fn)
        parts = children(body)
        parts.insert(root_index(func, red.name), stage(name, buf, axes, term))
        return func.with_body(seq(parts), func.alloc_buffers + (buf,))
    return None


def _call_name(e: Expr) -> str:
    return next(x.name for x in iter_exprs(e) if isinstance(x, Call) and x.name in COSTLY)
