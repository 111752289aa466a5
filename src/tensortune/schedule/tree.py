"""Queries and edits of a function's loop tree, shared by the schedule primitives.

Loops are identified by their variable and blocks by their (unique) name, since the IR
is immutable and every edit rebuilds the path from the root.

Example:
    >>> blk, loops = find_block(func, "C")         # the block and its enclosing loops
    >>> func = remove_block(func, "C")             # and any loops left empty
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from ..errors import ScheduleError
from ..tir.expr import BufferLoad, Var
from ..tir.functor import free_vars, iter_exprs, stmt_exprs, walk
from ..tir.stmt import Block, Buffer, BufferStore, For, IterVar, PrimFunc, Seq, Stmt, seq

Path = tuple[For, ...]


def iter_blocks(s: Stmt, path: Path = ()) -> Iterator[tuple[Block, Path]]:
    """Every block with the loops enclosing it (after ``path``), in program order."""
    found = s.__dict__.get("_blocks")
    if found is None:
        # Kept on the (immutable) statement: primitives look blocks up by name in the
        # same tree many times before the next edit makes a new one.
        out: list[tuple[Block, Path]] = []
        _collect_blocks(s, (), out)
        found = tuple(out)
        object.__setattr__(s, "_blocks", found)
    if not path:
        return iter(found)
    return ((b, path + p) for b, p in found)


def _collect_blocks(s: Stmt, path: Path, out: list[tuple[Block, Path]]) -> None:
    if isinstance(s, For):
        _collect_blocks(s.body, path + (s,), out)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _collect_blocks(x, path, out)
    elif isinstance(s, Block):
        out.append((s, path))


def block_names(func: PrimFunc) -> list[str]:
    return [b.name for b, _ in iter_blocks(func.body)]


def find_block(func: PrimFunc, name: str) -> tuple[Block, Path]:
    for b, p in iter_blocks(func.body):
        if b.name == name:
            return b, p
    raise ScheduleError(f"no block named {name!r}; blocks are: {', '.join(block_names(func))}")


def find_loop(func: PrimFunc, var: Var) -> tuple[For, Path]:
    """The loop with variable ``var`` and the loops enclosing it."""
    r = _loops(func.body).get(var)
    if r is None:
        raise ScheduleError(f"loop {var.name} no longer exists (it was split, fused or "
                            "removed by an earlier primitive); get the loops again")
    return r


def _loops(s: Stmt) -> dict[Var, tuple[For, Path]]:
    # Kept on the (immutable) statement, as ``iter_blocks`` keeps its blocks: a trace's
    # replay asks for loops of the same tree many times between edits (a tenth of a
    # convolution's proposal time went to walking the tree for each).
    found = s.__dict__.get("_loops")
    if found is None:
        found = {}
        _collect_loops(s, (), found)
        object.__setattr__(s, "_loops", found)
    return found


def _collect_loops(s: Stmt, path: Path, out: dict[Var, tuple[For, Path]]) -> None:
    if isinstance(s, For):
        out.setdefault(s.var, (s, path))
        _collect_loops(s.body, path + (s,), out)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _collect_loops(x, path, out)


def blocks_under(s: Stmt) -> list[Block]:
    return [b for b, _ in iter_blocks(s)]


# Blocks are immutable and compared by identity, so what a block reads and writes is
# computed once per block object (legality checks ask it for every block, many times).
def writes(b: Block) -> list[Buffer]:
    cached = b.__dict__.get("_writes")
    if cached is None:
        out: list[Buffer] = []
        for st in walk(b.body):
            if isinstance(st, BufferStore) and st.buffer not in out:
                out.append(st.buffer)
        cached = tuple(out)
        object.__setattr__(b, "_writes", cached)
    return list(cached)


def reads(b: Block) -> list[Buffer]:
    """Buffers the block reads, in order of first appearance (its own accumulator last)."""
    cached = b.__dict__.get("_reads")
    if cached is None:
        out: list[Buffer] = []
        own = writes(b)
        for st in walk(b.body):
            for e in stmt_exprs(st):
                for x in iter_exprs(e):
                    if isinstance(x, BufferLoad) and x.buffer not in out:
                        out.append(x.buffer)
        cached = tuple([x for x in out if x not in own] + [x for x in out if x in own])
        object.__setattr__(b, "_reads", cached)
    return list(cached)


def loads_of(b: Block, buf: Buffer) -> list[BufferLoad]:
    out = []
    for st in walk(b.body):
        for e in stmt_exprs(st):
            out += [x for x in iter_exprs(e) if isinstance(x, BufferLoad) and x.buffer is buf]
    return out


def writers(func: PrimFunc, buf: Buffer) -> list[Block]:
    return [b for b, _ in iter_blocks(func.body) if buf in writes(b)]


def iter_vars_moved_by(b: Block, loop_var: Var) -> list[IterVar]:
    """The iteration variables of block ``b`` whose bindings use loop ``loop_var``."""
    return [iv for iv, bnd in zip(b.iter_vars, b.bindings) if loop_var in free_vars(bnd)]


def axes_moved_by(b: Block, loop_var: Var) -> set[Var]:
    """``iter_vars_moved_by`` as a set of their variables."""
    return {iv.var for iv in iter_vars_moved_by(b, loop_var)}


def access_loop_vars(b: Block, bufs: list[Buffer]) -> set[Var]:
    """The loop variables that block ``b``'s reads of ``bufs`` move with (through its
    bindings)."""
    out: set[Var] = set()
    for buf in bufs:
        for ld in loads_of(b, buf):
            for ix in ld.indices:
                for v in free_vars(ix):
                    for iv, bnd in zip(b.iter_vars, b.bindings):
                        if iv.var is v:
                            out |= free_vars(bnd)
    return out


def readers(func: PrimFunc, buf: Buffer) -> list[Block]:
    return [b for b, _ in iter_blocks(func.body) if buf in reads(b) and buf not in writes(b)]


def order(func: PrimFunc) -> dict[str, int]:
    """Program order of blocks."""
    return {b.name: i for i, (b, _) in enumerate(iter_blocks(func.body))}


def mutate(s: Stmt, pred: Callable[[Stmt], bool], fn: Callable[[Stmt], Stmt | None]) -> Stmt | None:
    """Replace the first-matching nodes (pre-order) by ``fn(node)``; None deletes, and loops
    left empty are deleted too."""
    if pred(s):
        return fn(s)
    if isinstance(s, For):
        body = mutate(s.body, pred, fn)
        if body is s.body:
            return s
        return None if body is None else replace(s, body=body)
    if isinstance(s, Seq):
        parts = [mutate(x, pred, fn) for x in s.stmts]
        if all(p is x for p, x in zip(parts, s.stmts)):
            return s
        kept = [p for p in parts if p is not None]
        return seq(kept) if kept else None
    return s


def replace_loop(func: PrimFunc, var: Var, fn: Callable[[For], Stmt | None]) -> PrimFunc:
    """``func`` with loop ``var`` replaced by ``fn(loop)`` (None deletes it, and loops
    left empty); ``func`` itself when there is no such loop."""
    found = _loops(func.body).get(var)
    if found is None:
        return func
    return _replace_at(func, found[0], found[1], fn)  # type: ignore[arg-type]


def replace_block(func: PrimFunc, name: str, fn: Callable[[Block], Stmt | None]) -> PrimFunc:
    """``func`` with block ``name`` replaced by ``fn(block)``, as ``replace_loop``."""
    for b, path in iter_blocks(func.body):
        if b.name == name:
            return _replace_at(func, b, path, fn)  # type: ignore[arg-type]
    return func


def _replace_at(func: PrimFunc, node: Stmt, path: Path, fn: Callable[[Stmt], Stmt | None]
                ) -> PrimFunc:
    # Rebuilds only the loops on the path to ``node``: a replay edits a tree some forty
    # times, and walking all of it for each edit was a sixth of a convolution's proposals.
    old, new = node, fn(node)
    if new is old:
        return func
    for parent in reversed(path):
        body = _swap(parent.body, old, new)
        old, new = parent, None if body is None else For(parent.var, parent.extent, body,
                                                         parent.kind, parent.annotations)
    top = _swap(func.body, old, new)
    return func.with_body(top if top is not None else Seq(()))


def _swap(s: Stmt, old: Stmt, new: Stmt | None) -> Stmt | None:
    """``s`` with its child ``old`` (directly or inside nested sequences) replaced by
    ``new``; an emptied sequence is None."""
    if s is old:
        return new
    if not isinstance(s, Seq):
        raise AssertionError("a statement on the path does not contain the next one")
    parts = [_swap(x, old, new) if x is old or isinstance(x, Seq) else x for x in s.stmts]
    if all(p is x for p, x in zip(parts, s.stmts)):
        return s
    kept = [p for p in parts if p is not None]
    return seq(kept) if kept else None


def remove_block(func: PrimFunc, name: str) -> PrimFunc:
    return replace_block(func, name, lambda b: None)


def children(s: Stmt) -> list[Stmt]:
    return list(s.stmts) if isinstance(s, Seq) else [s]


def root_index(func: PrimFunc, name: str) -> int:
    """Index of the top-level statement that contains block ``name``."""
    for i, st in enumerate(children(func.body)):
        if any(b.name == name for b in blocks_under(st)):
            return i
    raise ScheduleError(f"no block named {name!r}")


def insert_root(func: PrimFunc, index: int, stmt: Stmt) -> PrimFunc:
    parts = children(func.body)
    parts.insert(index, stmt)
    return func.with_body(seq(parts))


def unique_name(func: PrimFunc, base: str) -> str:
    taken = set(block_names(func)) | {b.name for b in (*func.params, *func.alloc_buffers)}
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name
