"""Lower tensor expressions to a loop-IR ``PrimFunc``: one loop nest and block per compute.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    >>> print(te.create_func([A, B], name="double"))
    def double(A: float32[4], B: float32[4]):
        for i in range(4):
            with block("B", vi=S(i)):
                B[vi] = A[vi] * 2.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import TEError
from ..tir.arith import bound
from ..tir.expr import (
    BinOp,
    BufferLoad,
    Expr,
    FloatImm,
    IntImm,
    Reduce,
    Select,
    Var,
    is_float,
)
from ..tir.functor import substitute
from ..tir.stmt import Block, BufferStore, For, IterVar, PrimFunc, Stmt, seq
from ..tir.verify import verify
from .tensor import ComputeOp, ReduceVar, Tensor


def reduce_identity(combiner: str, dtype: str) -> Expr:
    if combiner == "sum":
        return FloatImm(0.0, dtype) if is_float(dtype) else IntImm(0, dtype)
    big = math.inf if is_float(dtype) else 2**31 - 1
    v = -big if combiner == "max" else big
    return FloatImm(v, dtype) if is_float(dtype) else IntImm(int(v), dtype)


def combine(combiner: str, acc: Expr, x: Expr) -> Expr:
    if combiner == "sum":
        return BinOp("+", acc, x, acc.dtype)
    return BinOp(combiner, acc, x, acc.dtype)


def _topo(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if t.buffer.uid in seen:
            return
        seen.add(t.buffer.uid)
        if t.op is not None:
            for x in t.op.inputs:
                visit(x)
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def _check_bounds(t: Tensor, op: ComputeOp) -> None:
    """Reject reads that provably leave a tensor's shape (outside if_then_else guards)."""
    ranges: dict[Var, tuple[int, int]] = {a: (0, s - 1) for a, s in zip(op.axes, t.shape)}
    body = op.body.source if isinstance(op.body, Reduce) else op.body
    if isinstance(op.body, Reduce):
        for r in op.body.axes:
            ranges[r] = (r.lo, r.lo + r.extent - 1)

    def visit(e: Expr) -> None:
        if isinstance(e, Select):
            visit(e.cond)  # branches may be guarded by the condition: not checked
            return
        if isinstance(e, BufferLoad):
            for d, (i, n) in enumerate(zip(e.indices, e.buffer.shape, strict=True)):
                b = bound(i, ranges)
                if b is not None and (b[0] < 0 or b[1] >= n):
                    raise TEError(
                        f"compute {t.name!r} reads {e.buffer.name} out of bounds on axis {d}: "
                        f"index {i} ranges over [{b[0]}, {b[1]}] but the extent is {n}; "
                        f"guard the read with te.if_then_else"
                    )
        for c in _children(e):
            visit(c)

    visit(body)


def _children(e: Expr) -> list[Expr]:
    from ..tir.expr import Call, Cast, Not

    if isinstance(e, BinOp):
        return [e.a, e.b]
    if isinstance(e, (Not,)):
        return [e.a]
    if isinstance(e, Cast):
        return [e.value]
    if isinstance(e, Call):
        return list(e.args)
    if isinstance(e, BufferLoad):
        return list(e.indices)
    return []


def _lower_compute(t: Tensor) -> Stmt:
    op = t.op
    assert op is not None
    ivs = [IterVar(Var("v" + a.name), n, "S") for a, n in zip(op.axes, t.shape, strict=True)]
    vmap: dict[Var, Expr] = {a: iv.var for a, iv in zip(op.axes, ivs, strict=True)}
    idx = tuple(iv.var for iv in ivs)
    init = None
    if isinstance(op.body, Reduce):
        red: Reduce = op.body
        for r in red.axes:
            assert isinstance(r, ReduceVar)
            iv = IterVar(Var("v" + r.name), r.extent, "R")
            ivs.append(iv)
            vmap[r] = iv.var if r.lo == 0 else BinOp("+", iv.var, IntImm(r.lo), "int32")
        src = substitute(red.source, vmap)
        acc = BufferLoad(t.buffer, idx)
        body: Stmt = BufferStore(t.buffer, idx, combine(red.combiner, acc, src))
        init = BufferStore(t.buffer, idx, reduce_identity(red.combiner, t.dtype))
    else:
        body = BufferStore(t.buffer, idx, substitute(op.body, vmap))
    loops = [Var(iv.var.name[1:]) for iv in ivs]
    stmt: Stmt = Block(t.name, tuple(ivs), tuple(loops), body, init)
    for lv, iv in reversed(list(zip(loops, ivs, strict=True))):
        stmt = For(lv, iv.extent, stmt)
    return stmt


def create_func(args: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """Make a ``PrimFunc`` from input placeholders followed by output tensors.

    Intermediate computed tensors that are not listed become internal buffers.
    """
    args = list(args)
    if not args or not all(isinstance(a, Tensor) for a in args):
        raise TEError("create_func takes a non-empty list of te tensors: inputs, then outputs")
    first_out = next((i for i, a in enumerate(args) if a.op is not None), None)
    if first_out is None:
        raise TEError("create_func: no output tensor; list the computed tensors last")
    for a in args[first_out:]:
        if a.op is None:
            raise TEError(
                f"create_func: placeholder {a.name} comes after output tensors; "
                "list inputs first, outputs last"
            )
    outputs = args[first_out:]
    inputs = {a.buffer.uid for a in args[:first_out]}
    order = _topo(outputs)
    names: dict[str, Tensor] = {}
    for t in order + args:
        if t.name in names and names[t.name] is not t:
            raise TEError(f"create_func: two different tensors are named {t.name!r}; "
                          "give each tensor a unique name")
        names[t.name] = t
        if t.op is None and t.buffer.uid not in inputs:
            raise TEError(f"create_func: placeholder {t.name} is read but not listed as an input")
    for t in order:
        if t.op is not None:
            _check_bounds(t, t.op)
    body = seq([_lower_compute(t) for t in order if t.op is not None])
    out_ids = {t.buffer.uid for t in outputs}
    allocs = tuple(t.buffer for t in order if t.op is not None and t.buffer.uid not in out_ids)
    func = PrimFunc(name, tuple(a.buffer for a in args), body, allocs, len(outputs))
    verify(func)
    return func
