"""Loop unswitching: a loop whose body tests a condition that does not change inside it
runs as two copies, one where the condition holds (its tests removed) and one as before.

A guarded split (``sample_tile`` drawing 6 rows of a 28-row axis) puts ``if`` around
each statement of the register tile's tail rows. When the split's outer factor is part
of the fused parallel loop, the test reads that loop's variable through ``//`` and
``partition_loops`` cannot find a constant bound, so the tests stayed inside the
reduction loop, where gcc keeps them as branches between the FMAs::

    for k_1 in 0..4:                              if (f // 2 * 6 + 5 < 28)
      ... for rc in 0..128:                         for k_1 in 0..4: ... acc += ...   # no test
            if (f // 2 * 6 + 5 < 28) acc += ...  ->  else
                                                    for k_1 in 0..4: ... if (...) acc += ...

The unit is a term of a test's conjunction: a ``<``/``<=``/``>``/``>=`` comparison (the
tail of a guarded split; a reduction's ``k == 0`` init test stays where it is). Each term
is unswitched once, at the outermost loop where it is invariant; the fast copy drops it
from every test.
Parallel loops are left alone: their iterations are the threads' work.
"""

from __future__ import annotations

from dataclasses import replace

from ..tir.analysis import conjunction, conjuncts
from ..tir.arith import Ranges
from ..tir.expr import BinOp, Expr
from ..tir.functor import free_vars, rewrite_stmt, walk
from ..tir.printer import expr_str
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Seq, Stmt, seq
from .partition import MAX_TAIL_BODY, SimplifyFn

_INEQ = ("<", "<=", ">", ">=")


def unswitch_loops(s: Stmt, simplify_part: SimplifyFn, ranges: Ranges | None = None,
                   done: frozenset[str] = frozenset()) -> Stmt:
    """``s`` with every serial or vectorized loop unswitched on the tail guards that are
    invariant in it (see the module docstring). ``simplify_part(stmt, ranges)`` folds the
    copy where the guards hold."""
    r: Ranges = dict(ranges or {})
    if isinstance(s, For):
        if s.kind in (ForKind.SERIAL, ForKind.VECTORIZED):
            conds = _invariant_guards(s, done)
            if conds:
                keys = {k for k, _ in conds}
                fast = simplify_part(_assume(s, keys), r)
                slow = unswitch_loops(s, simplify_part, r, done | keys)
                test = conjunction([c for _, c in conds])
                assert test is not None
                if fast is None:
                    return slow
                return IfThenElse(test, unswitch_loops(fast, simplify_part, r, done | keys),
                                  slow)
        r[s.var] = (0, s.extent - 1)
        return replace(s, body=unswitch_loops(s.body, simplify_part, r, done))
    if isinstance(s, Seq):
        return seq([unswitch_loops(x, simplify_part, r, done) for x in s.stmts])
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, unswitch_loops(s.then, simplify_part, r, done),
                          None if s.else_ is None else
                          unswitch_loops(s.else_, simplify_part, r, done))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, unswitch_loops(s.body, simplify_part, r, done))
    return s


def _key(e: Expr) -> str:
    # Printed form plus the identities of its variables: two loops of one name stay apart.
    return expr_str(e) + repr(sorted(id(v) for v in free_vars(e)))


def _invariant_guards(loop: For, done: frozenset[str]) -> list[tuple[str, Expr]]:
    """The tail-guard terms (comparisons in the conjunction an ``if`` tests) in ``loop``'s
    body that use no variable bound at or inside it."""
    stmts = list(walk(loop.body))
    if sum(1 for x in stmts if not isinstance(x, (Seq, Allocate))) > MAX_TAIL_BODY:
        return []
    inner = {x.var for x in stmts if isinstance(x, For)} | {loop.var}
    out: dict[str, Expr] = {}
    for x in stmts:
        if not isinstance(x, IfThenElse) or x.else_ is not None:
            continue
        for t in conjuncts(x.cond):
            fv = free_vars(t)
            if isinstance(t, BinOp) and t.op in _INEQ and fv and not fv & inner:
                k = _key(t)
                if k not in done:
                    out.setdefault(k, t)
    return list(out.items())


def _assume(s: Stmt, keys: set[str]) -> Stmt:
    """``s`` with the terms ``keys`` taken out of every ``if``'s test (an ``if`` left with
    no term becomes its body)."""
    def fn(x: Stmt) -> Stmt | None:
        if not isinstance(x, IfThenElse) or x.else_ is not None:
            return None
        terms = conjuncts(x.cond)
        rest = [t for t in terms if _key(t) not in keys]
        if len(rest) == len(terms):
            return None
        cond = conjunction(rest)
        return x.then if cond is None else IfThenElse(cond, x.then)

    return rewrite_stmt(s, stmt_fn=fn)
