"""A verifier that catches malformed loop IR before it reaches code generation.

It checks: loop and block variables are defined once and used only in scope; block
bindings use only enclosing loop variables; every buffer accessed is a parameter or an
allocated buffer; index counts match buffer ranks; buffers fit 32-bit indexing; loop
extents are positive; only one parallel loop on any path.

Example:
    >>> verify(func)   # raises IRError naming the block, loop or buffer at fault
"""

from __future__ import annotations

from ..errors import IRError
from .expr import BufferLoad, Var
from .functor import free_vars, iter_exprs
from .stmt import Allocate, Block, BufferStore, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt


def verify(func: PrimFunc) -> None:
    """Raise ``IRError`` describing the first problem found in ``func``."""
    both = [b.name for b in func.alloc_buffers if b in func.params]
    if both:
        raise IRError(f"function {func.name}: buffer {both[0]} is both a parameter and "
                      "allocated inside the function")
    buffers = set(func.params) | set(func.alloc_buffers)
    names = [b.name for b in buffers]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise IRError(f"function {func.name}: buffer names {sorted(dup)} are used twice")
    for b in buffers:
        if b.size >= 2**31:
            raise IRError(f"buffer {b.name} has {b.size} elements; at most 2**31-1 supported")
    defined: set[Var] = set()
    _check(func.body, set(), buffers, defined, in_parallel=False, where=f"function {func.name}")


def _check_expr_vars(e, scope: set[Var], where: str) -> None:
    bad = [v for v in free_vars(e) if v not in scope]
    if bad:
        raise IRError(f"{where}: uses variable(s) {sorted(v.name for v in bad)} "
                      f"outside the loops/blocks that define them")


def _check_access(buf, indices, buffers, where: str) -> None:
    if buf not in buffers:
        raise IRError(f"{where}: accesses buffer {buf.name} which is neither a parameter "
                      "nor allocated in the function")
    if len(indices) != len(buf.shape):
        raise IRError(f"{where}: buffer {buf.name} has rank {len(buf.shape)} but is "
                      f"indexed with {len(indices)} indices")


def _check(s: Stmt, scope: set[Var], buffers: set, defined: set[Var], in_parallel: bool,
           where: str) -> None:
    if isinstance(s, For):
        if s.var in defined:
            raise IRError(f"{where}: loop variable {s.var.name} is defined twice")
        if s.extent <= 0:
            raise IRError(f"{where}: loop {s.var.name} has extent {s.extent}; must be positive")
        par = s.kind == ForKind.PARALLEL
        if par and in_parallel:
            raise IRError(f"{where}: loop {s.var.name} is parallel inside another parallel loop")
        defined.add(s.var)
        _check(s.body, scope | {s.var}, buffers, defined, in_parallel or par,
               f"loop {s.var.name}")
    elif isinstance(s, Seq):
        for x in s.stmts:
            _check(x, scope, buffers, defined, in_parallel, where)
    elif isinstance(s, Block):
        w = f"block {s.name}"
        if len(s.bindings) != len(s.iter_vars):
            raise IRError(f"{w}: {len(s.iter_vars)} iter vars but {len(s.bindings)} bindings")
        for b in s.bindings:
            _check_expr_vars(b, scope, w)
        # A block is isolated: its body sees only its own iteration variables.
        inner = {iv.var for iv in s.iter_vars}
        for iv in s.iter_vars:
            if iv.var in defined:
                raise IRError(f"{w}: iter var {iv.var.name} is defined twice")
            defined.add(iv.var)
        if s.predicate is not None:
            _check_expr_vars(s.predicate, scope, w)
        for part in (s.init, s.body):
            if part is not None:
                _check(part, inner, buffers, defined, in_parallel, w)
    elif isinstance(s, BufferStore):
        _check_access(s.buffer, s.indices, buffers, where)
        for e in (*s.indices, s.value):
            _check_expr_vars(e, scope, where)
            for sub in iter_exprs(e):
                if isinstance(sub, BufferLoad):
                    _check_access(sub.buffer, sub.indices, buffers, where)
    elif isinstance(s, IfThenElse):
        _check_expr_vars(s.cond, scope, where)
        _check(s.then, scope, buffers, defined, in_parallel, where)
        if s.else_ is not None:
            _check(s.else_, scope, buffers, defined, in_parallel, where)
    elif isinstance(s, Allocate):
        _check(s.body, scope, buffers | {s.buffer}, defined, in_parallel, where)
    else:
        raise IRError(f"{where}: unknown statement {type(s).__name__}")
