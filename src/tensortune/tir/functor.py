"""Generic traversal and rewriting of expressions and statements.

Passes are written as small functions handed to ``rewrite_expr``/``rewrite_stmt`` rather
than as visitor class hierarchies: the rewrite functions rebuild only what changed.

Example:
    >>> i = Var("i"); j = Var("j")
    >>> str(substitute(i + 1, {i: j * 2}))
    '((j * 2) + 1)'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .expr import BinOp, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not, Reduce, Select, Var
from .stmt import Allocate, Block, BufferStore, For, IfThenElse, Seq, Stmt

ExprFn = Callable[[Expr], Expr | None]


def rewrite_expr(e: Expr, fn: ExprFn) -> Expr:
    """Post-order rewrite: children first, then ``fn`` on the rebuilt node (None keeps it)."""
    e = map_children(e, rewrite_expr, fn)
    out = fn(e)
    return e if out is None else out


def map_children(e: Expr, f: Callable[..., Expr], *args: Any) -> Expr:
    """``e`` with each child ``c`` replaced by ``f(c, *args)``: ``e`` itself when none
    changed, else a new node of the same kind."""
    if type(e) in _LEAVES:   # most nodes: no isinstance chain for them
        return e
    if isinstance(e, BinOp):
        a, b = f(e.a, *args), f(e.b, *args)
        if a is not e.a or b is not e.b:
            return BinOp(e.op, a, b, e.dtype)
    elif isinstance(e, Not):
        a = f(e.a, *args)
        if a is not e.a:
            return Not(a)
    elif isinstance(e, Select):
        c, t, fl = f(e.cond, *args), f(e.t, *args), f(e.f, *args)
        if c is not e.cond or t is not e.t or fl is not e.f:
            return Select(c, t, fl, e.dtype)
    elif isinstance(e, Cast):
        v = f(e.value, *args)
        if v is not e.value:
            return Cast(e.dtype, v)
    elif isinstance(e, Call):
        cargs = tuple([f(a, *args) for a in e.args])
        if _changed(cargs, e.args):
            return Call(e.name, cargs, e.dtype)
    elif isinstance(e, BufferLoad):
        idx = tuple([f(a, *args) for a in e.indices])
        if _changed(idx, e.indices):
            return BufferLoad(e.buffer, idx)
    elif isinstance(e, Reduce):
        src = f(e.source, *args)
        if src is not e.source:
            return Reduce(e.combiner, src, e.axes, e.dtype)
    return e


def substitute(e: Expr, vmap: dict[Var, Expr]) -> Expr:
    """Replace variables by expressions. A sub-expression without any of them is kept as
    it is and not walked (its variables are kept on it: ``free_vars``)."""
    if not vmap:
        return e
    return _substitute(e, vmap)


def _substitute(x: Expr, vmap: dict[Var, Expr]) -> Expr:
    # A module function, not a closure: a nested function that calls itself is a
    # reference cycle, left for the cyclic collector at every call.
    if isinstance(x, Var):
        return vmap.get(x, x)
    if vmap.keys().isdisjoint(free_vars(x)):
        return x
    return map_children(x, _substitute, vmap)


def iter_exprs(e: Expr) -> Iterator[Expr]:
    """Every sub-expression, pre-order."""
    # A stack, not recursive generators: each level of those re-yields every value below
    # it, and index trees are deep (under cProfile it had the largest own time of any
    # function in a C2D run's draws and C emission).
    stack = [e]
    pop, push = stack.pop, stack.extend
    while stack:
        x = pop()
        yield x
        kids = _children(x)
        if kids:
            push(reversed(kids))


def free_vars(e: Expr) -> frozenset[Var]:
    """The variables in ``e``. Nodes are immutable and compared by identity, so the set
    is kept on each node: replaying a trace asks it of the same bindings thousands of
    times (a third of a convolution's search time went here before)."""
    fv = e.__dict__.get("_free_vars")
    if fv is None:
        if isinstance(e, Var):
            fv = frozenset((e,))
        elif isinstance(e, BinOp):
            a, b = free_vars(e.a), free_vars(e.b)
            fv = b if not a else a if not b or a is b else a | b   # shared, not copied
        else:
            fv = frozenset().union(*[free_vars(c) for c in _children(e)])
        object.__setattr__(e, "_free_vars", fv)
    return fv


# Expression kinds without children (``Var`` subclasses go the slower way, to the same end).
_LEAVES = frozenset((Var, IntImm, FloatImm))


def _children(e: Expr) -> tuple[Expr, ...]:
    if type(e) in _LEAVES:
        return ()
    if isinstance(e, BinOp):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, BufferLoad):
        return e.indices
    if isinstance(e, Reduce):
        return (e.source,)
    return ()


def rewrite_stmt(
    s: Stmt,
    expr_fn: Callable[[Expr], Expr] | None = None,
    stmt_fn: Callable[[Stmt], Stmt | None] | None = None,
) -> Stmt:
    """Rebuild ``s`` bottom-up: ``expr_fn`` maps every top-level expression (indices,
    values, bindings, predicates, conditions); ``stmt_fn`` may replace each rebuilt
    statement (returning None keeps it). A statement none of whose parts changed is kept
    as it is, not rebuilt (what is kept on it, such as its blocks and loops, stays)."""
    ef = expr_fn or _same
    if isinstance(s, For):
        body = rewrite_stmt(s.body, expr_fn, stmt_fn)
        if body is not s.body:
            s = For(s.var, s.extent, body, s.kind, s.annotations)
    elif isinstance(s, Seq):
        parts = tuple([rewrite_stmt(x, expr_fn, stmt_fn) for x in s.stmts])
        if _changed(parts, s.stmts):
            s = Seq(parts)
    elif isinstance(s, BufferStore):
        if expr_fn is not None:
            idx, value = tuple([ef(i) for i in s.indices]), ef(s.value)
            if value is not s.value or _changed(idx, s.indices):
                s = BufferStore(s.buffer, idx, value)
    elif isinstance(s, Block):
        binds = s.bindings if expr_fn is None else tuple([ef(b) for b in s.bindings])
        pred = None if s.predicate is None else ef(s.predicate)
        body = rewrite_stmt(s.body, expr_fn, stmt_fn)
        init = None if s.init is None else rewrite_stmt(s.init, expr_fn, stmt_fn)
        if (pred is not s.predicate or body is not s.body or init is not s.init
                or _changed(binds, s.bindings)):
            s = Block(s.name, s.iter_vars, binds, body, init, pred)
    elif isinstance(s, IfThenElse):
        cond = ef(s.cond)
        then = rewrite_stmt(s.then, expr_fn, stmt_fn)
        else_ = None if s.else_ is None else rewrite_stmt(s.else_, expr_fn, stmt_fn)
        if cond is not s.cond or then is not s.then or else_ is not s.else_:
            s = IfThenElse(cond, then, else_)
    elif isinstance(s, Allocate):
        body = rewrite_stmt(s.body, expr_fn, stmt_fn)
        if body is not s.body:
            s = Allocate(s.buffer, body)
    if stmt_fn is not None:
        out = stmt_fn(s)
        if out is not None:
            return out
    return s


def _same(e: Expr) -> Expr:
    return e


def _changed(new: tuple[Any, ...], old: tuple[Any, ...]) -> bool:
    return any(x is not y for x, y in zip(new, old))


def substitute_stmt(s: Stmt, vmap: dict[Var, Expr]) -> Stmt:
    """``s`` with variables replaced by expressions in every expression it holds."""
    return rewrite_stmt(s, expr_fn=lambda e: substitute(e, vmap))


def walk(s: Stmt) -> Iterator[Stmt]:
    """Every statement, pre-order."""
    yield s
    if isinstance(s, (For, Allocate)):
        yield from walk(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from walk(x)
    elif isinstance(s, Block):
        if s.init is not None:
            yield from walk(s.init)
        yield from walk(s.body)
    elif isinstance(s, IfThenElse):
        yield from walk(s.then)
        if s.else_ is not None:
            yield from walk(s.else_)


def walk_with_loops(s: Stmt, path: tuple[For, ...] = ()
                    ) -> Iterator[tuple[Stmt, tuple[For, ...]]]:
    """Every statement that is not a loop or a sequence, pre-order, with the loops
    enclosing it (outermost first)."""
    if isinstance(s, For):
        yield from walk_with_loops(s.body, path + (s,))
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from walk_with_loops(x, path)
    else:
        yield s, path
        if isinstance(s, IfThenElse):
            yield from walk_with_loops(s.then, path)
            if s.else_ is not None:
                yield from walk_with_loops(s.else_, path)
        elif isinstance(s, Allocate):
            yield from walk_with_loops(s.body, path)
        elif isinstance(s, Block):
            for part in (s.init, s.body):
                if part is not None:
                    yield from walk_with_loops(part, path)


def stmt_exprs(s: Stmt) -> Iterator[Expr]:
    """The top-level expressions held directly by one statement."""
    if isinstance(s, BufferStore):
        yield from s.indices
        yield s.value
    elif isinstance(s, Block):
        yield from s.bindings
        if s.predicate is not None:
            yield s.predicate
    elif isinstance(s, IfThenElse):
        yield s.cond


def loads_in(s: Stmt) -> Iterator[BufferLoad]:
    for st in walk(s):
        for e in stmt_exprs(st):
            for x in iter_exprs(e):
                if isinstance(x, BufferLoad):
                    yield x


def stores_in(s: Stmt) -> Iterator[BufferStore]:
    for st in walk(s):
        if isinstance(st, BufferStore):
            yield st


def blocks_in(s: Stmt) -> Iterator[Block]:
    for st in walk(s):
        if isinstance(st, Block):
            yield st


def retarget(s: Stmt, old: object, new: object,
             idx_fn: Callable[[tuple[Expr, ...]], tuple[Expr, ...]] = lambda i: i) -> Stmt:
    """Redirect every load and store of buffer ``old`` to ``new``, mapping indices."""
    return retarget_many(s, {old: (new, idx_fn)})


Retarget = dict[Any, tuple[Any, Callable[[tuple[Expr, ...]], tuple[Expr, ...]]]]


def retarget_many(s: Stmt, targets: Retarget) -> Stmt:
    """``retarget`` of every buffer of ``targets`` (old: (new, index function)) in one walk
    of ``s``: lowering redirects each compacted buffer, and a walk per buffer went over
    a Winograd program's 64-load values once per buffer (eight times). Post-order, as
    buffer by buffer: an index that loads a retargeted buffer is redirected before the
    load it indexes."""

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, BufferLoad):
            got = targets.get(x.buffer)
            if got is not None:
                return BufferLoad(got[0], got[1](x.indices))
        return None

    def sf(x: Stmt) -> Stmt | None:
        if isinstance(x, BufferStore):
            got = targets.get(x.buffer)
            if got is not None:
                return BufferStore(got[0], got[1](x.indices), x.value)
        return None

    return rewrite_stmt(s, expr_fn=lambda e: rewrite_expr(e, fn), stmt_fn=sf)
