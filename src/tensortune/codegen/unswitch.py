"""Loop unswitching: a loop whose body selects on a condition that no iteration of it
changes runs as one copy per outcome, under a single test.

A stage indexed by a small transform axis picks its formula with a select on that
axis, and the loop inside runs over something else::

    for c, k:  U[e, c, k] = select(e == 0, w[k, c, 0], select(e == 1, ..., ...))

gcc if-converts such a loop to vectorize it: every branch is computed for every lane
and the results blended, the work of all the formulas for the price of one. Unswitched,
each copy of the loop holds one formula and no select::

    if (e == 0) for c, k: U[e, c, k] = w[k, c, 0]
    else if (e == 1) for c, k: ...

Only conditions on loop variables (no memory reads) that no loop inside the unswitched
loop binds are used; parallel loops are not unswitched (their iterations are the
threads' work, and the test is cheap inside them); a loop is left whole when its body
is large or when its copies would be more than ``MAX_COPIES``.

Example:
    >>> low = unswitch_loops(lowered.body)
"""

from __future__ import annotations

from dataclasses import replace

from ..tir.expr import BufferLoad, Expr, Select, Var, structural_equal
from ..tir.functor import free_vars, iter_exprs, map_children, rewrite_stmt, stmt_exprs, walk
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Seq, Stmt, seq

MAX_BODY = 64    # statements in a loop body worth copying
MAX_COPIES = 16  # copies of one loop at most (a 4 x 4 transform's formulas)
# The annotation on each copy (its loop): the emitter writes the vector loops in a copy
# as loops over their whole vectors (``simd.SimdEmitter.vector_loop``).
COPY = "unswitched_copy"


def unswitch_loops(s: Stmt) -> Stmt:
    """``s`` with every non-parallel loop unswitched on the invariant conditions of its
    selects (module docstring); inner loops first. It runs on every candidate's C, so a
    tree without selects is returned as it is after one walk, and a loop is looked into
    only when its body holds a select."""
    return _rec(s)[0]


def _rec(s: Stmt) -> tuple[Stmt, bool]:
    """``s`` unswitched, and whether it holds a select."""
    if isinstance(s, For):
        body, sel = _rec(s.body)
        loop = s if body is s.body else replace(s, body=body)
        if not sel or loop.kind == ForKind.PARALLEL or _size(loop.body) > MAX_BODY:
            return loop, sel
        out, copies = _unswitch(loop)
        if copies == 1 or copies > MAX_COPIES:
            return loop, sel
        return _mark(out), sel
    if isinstance(s, Seq):
        parts = [_rec(x) for x in s.stmts]
        if all(p is x for (p, _), x in zip(parts, s.stmts)):
            return s, any(sel for _, sel in parts)
        return seq([p for p, _ in parts]), any(sel for _, sel in parts)
    if isinstance(s, IfThenElse):
        then, a = _rec(s.then)
        else_, b = (None, False) if s.else_ is None else _rec(s.else_)
        sel = a or b or _has_select(s.cond)
        if then is s.then and else_ is s.else_:
            return s, sel
        return IfThenElse(s.cond, then, else_), sel
    if isinstance(s, Allocate):
        body, sel = _rec(s.body)
        return (s if body is s.body else Allocate(s.buffer, body)), sel
    return s, any(_has_select(e) for e in stmt_exprs(s))


def _mark(s: Stmt) -> Stmt:
    """The copies (loops) under the tests of an unswitched loop, annotated ``COPY``."""
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _mark(s.then), None if s.else_ is None else _mark(s.else_))
    assert isinstance(s, For)
    return replace(s, annotations=(*s.annotations, (COPY, 1)))


def _has_select(e: Expr) -> bool:
    return any(isinstance(x, Select) for x in iter_exprs(e))


def _unswitch(loop: For) -> tuple[Stmt, int]:
    """The loop split on its first invariant condition, recursively; and how many
    copies of the loop that made (stops counting past ``MAX_COPIES``: a body with many
    independent conditions would double its copies with each)."""
    cond = _invariant_condition(loop)
    if cond is None:
        return loop, 1
    then, n_then = _unswitch(_decide(loop, cond, True))
    if n_then >= MAX_COPIES:
        return loop, MAX_COPIES + 1
    else_, n_else = _unswitch(_decide(loop, cond, False))
    return IfThenElse(cond, then, else_), n_then + n_else


def _invariant_condition(loop: For) -> Expr | None:
    bound = {loop.var} | {x.var for x in walk(loop.body) if isinstance(x, For)}
    for x in walk(loop.body):
        for e in stmt_exprs(x):
            for sub in iter_exprs(e):
                if isinstance(sub, Select) and _invariant(sub.cond, bound):
                    return sub.cond
    return None


def _invariant(cond: Expr, bound: set[Var]) -> bool:
    if any(isinstance(x, BufferLoad) for x in iter_exprs(cond)):
        return False
    return not (free_vars(cond) & bound)


def _decide(loop: For, cond: Expr, value: bool) -> For:
    """``loop`` with every select on ``cond`` replaced by its branch for ``value``."""
    out = rewrite_stmt(loop, expr_fn=lambda e: _pick(e, cond, value))
    assert isinstance(out, For)
    return out


def _pick(e: Expr, cond: Expr, value: bool) -> Expr:
    # Top-down: the branch not taken is never walked (a Winograd transform's value is
    # selects four deep, one branch of each kept).
    if isinstance(e, Select) and structural_equal(e.cond, cond):
        return _pick(e.t if value else e.f, cond, value)
    return map_children(e, _pick, cond, value)


def _size(s: Stmt) -> int:
    return sum(1 for x in walk(s) if not isinstance(x, (Seq, Allocate)))
