"""Loop partitioning: split a loop where a guard on its own variable changes value.

A padded copy reads ``select(1 <= z and z < 57, x[z - 1], 0)`` for z in [0, 58). The
guarded load cannot become a vector load (the lanes outside the bounds would read
outside ``x``), so the whole row ran as scalar code. Split at the bounds, the middle
loop's guard is true everywhere and folds away, and the two one-element ends store the
padding value::

    for z in [0, 1):   pad[z] = 0
    for z in [1, 57):  pad[z] = x[z - 1]        # vectorizable
    for z in [57, 58): pad[z] = 0

On DEP's best program this took the padded copy from scalar to vector code, 0.169 ->
0.093 ms for the whole kernel. Only guards whose comparison involves the loop's
variable alone (with constants) are used; others stay as they were. Parallel loops are
not split (their iterations are the threads' work), and only small bodies are (each
part is a copy of the body).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..tir.analysis import conjuncts
from ..tir.arith import Ranges
from ..tir.expr import BinOp, Expr, IntImm, Select, Var
from ..tir.functor import iter_exprs, stmt_exprs, substitute_stmt, walk
from ..tir.linear import linear
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Seq, Stmt, seq

MAX_BODY = 64  # statements in a loop body worth copying into three parts


SimplifyFn = Callable[[Stmt, Ranges], "Stmt | None"]


def partition_loops(s: Stmt, ranges: Ranges | None = None,
                    simplify_part: SimplifyFn | None = None) -> Stmt:
    """``s`` with every serial or vectorized loop split at its guards' bounds (see the
    module docstring). ``simplify_part(stmt, ranges)`` folds each part's guards."""
    r: Ranges = dict(ranges or {})
    if isinstance(s, For):
        parts = _split(s, r, simplify_part) if s.kind in (
            ForKind.SERIAL, ForKind.VECTORIZED) else None
        if parts is not None:
            return seq([partition_loops(p, r, simplify_part) for p in parts])
        r[s.var] = (0, s.extent - 1)
        return replace(s, body=partition_loops(s.body, r, simplify_part))
    if isinstance(s, Seq):
        return seq([partition_loops(x, r, simplify_part) for x in s.stmts])
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, partition_loops(s.then, r, simplify_part),
                          None if s.else_ is None else
                          partition_loops(s.else_, r, simplify_part))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, partition_loops(s.body, r, simplify_part))
    return s


def _split(s: For, r: Ranges, simplify_part: SimplifyFn | None) -> list[Stmt] | None:
    if sum(1 for x in walk(s.body) if not isinstance(x, (Seq, Allocate))) > MAX_BODY:
        return None
    lo, hi = 0, s.extent
    found = False
    lanes = {x.var: (0, x.extent - 1) for x in walk(s.body)
             if isinstance(x, For) and x.kind == ForKind.VECTORIZED}
    for cond, others in [(c, {}) for c in _guards(s.body)] + \
            [(c, lanes) for c in (_conditions(s.body) if lanes else [])]:
        for term in conjuncts(cond):
            iv = _interval(term, s.var, others)
            if iv is not None:
                found = True
                lo, hi = max(lo, iv[0]), min(hi, iv[1])
    if not found or hi <= lo or (lo <= 0 and hi >= s.extent):
        return None  # no guard on this loop, or one the whole range agrees on
    out: list[Stmt] = []
    for start, stop in ((0, lo), (lo, hi), (hi, s.extent)):
        if stop <= start:
            continue
        v = Var(s.var.name, s.var.dtype)
        body = substitute_stmt(s.body, {s.var: BinOp("+", v, IntImm(start), "int32")
                               if start else v})
        part = For(v, stop - start, body, s.kind, s.annotations)
        folded = simplify_part(part, r) if simplify_part is not None else part
        if folded is not None:
            out.append(folded)
    return out


def _guards(s: Stmt) -> list[Expr]:
    return [sub.cond for x in walk(s) for e in stmt_exprs(x) for sub in iter_exprs(e)
            if isinstance(sub, Select)]


def _conditions(s: Stmt) -> list[Expr]:
    """The conditions of the ``if`` statements in ``s`` (a guarded block's predicate)."""
    return [x.cond for x in walk(s) if isinstance(x, IfThenElse)]


def _interval(term: Expr, v: Var, others: Ranges | None = None) -> tuple[int, int] | None:
    """[lo, hi) of ``v`` where ``term`` holds, if it compares ``k * v`` (any integer k)
    with constants only; else None. With ``others`` (the lanes of vector loops inside
    ``v``'s loop), a term that also holds some of them counts where it holds for every
    value of theirs, and only such a term: the guard of a reduction split into whole
    vectors with a tail, ``16 * j_0 + j_1 < 1001``, holds for all 16 lanes while
    ``j_0 < 62``, so those iterations run as vectors and only the last one is guarded."""
    if not isinstance(term, BinOp) or term.op not in ("<", "<=", ">", ">="):
        return None
    lin = linear(BinOp("-", term.a, term.b, "int32"))
    if lin is None or v not in lin[0]:
        return None
    ranges: Ranges = others or {}
    rest: list[tuple[Var, int]] = []
    for key, (x, n) in lin[0].items():
        if key is v:
            continue
        if not isinstance(x, Var) or x not in ranges:
            return None
        rest.append((x, n))
    if bool(rest) != bool(ranges):
        return None
    k, c = lin[0][v][1], lin[1]
    # k * v + c + (the others' terms) OP 0, for every value of the others: their largest
    # sum where the comparison is "less", their smallest where it is "greater".
    pick = max if term.op in ("<", "<=") else min
    c += sum(pick(n * ranges[x][0], n * ranges[x][1]) for x, n in rest)
    # k * v + c OP 0
    op = term.op
    if k < 0:  # -k * v - c OP' 0
        op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
        k, c = -k, -c
    # k > 0: k * v < -c  <=>  v < ceil(-c / k) = -(c // k);  k * v <= -c  <=>  v <= (-c) // k
    if op == "<":
        return -(1 << 30), -(c // k)
    if op == "<=":
        return -(1 << 30), (-c) // k + 1
    if op == ">":
        return (-c) // k + 1, 1 << 30
    return -(c // k), 1 << 30
