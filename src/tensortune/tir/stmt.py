"""Statements of the loop IR: loops around blocks, in the TensorIR style.

A ``PrimFunc`` holds buffers and a body of ``For`` loops (always starting at 0, with a
constant extent) around ``Block``s. A block names its iteration variables (spatial "S" or
reduction "R"), binds each to an expression of the surrounding loop variables, may carry a
predicate (for tails of non-dividing splits) and an ``init`` statement that runs on the
first iteration of its reduction. ``IfThenElse`` and ``Allocate`` only appear after
lowering for code generation.

Example:
    for i in range(4):
        block C(vi = i):
            C[vi] = A[vi] + 1.0
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from .expr import Expr, Var

_buf_ids = itertools.count()


@dataclass(frozen=True, eq=False, repr=False)
class Buffer:
    """A dense row-major array. Compared by identity."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scope: str = "global"  # "global" | "local": where a cache stage lives
    # (factor, offset) from ``storage_align``: at allocation, the rows of the last
    # dimension are a multiple of ``factor`` elements apart and each row's element 0
    # lies ``offset`` past such a multiple (``codegen.lower.compact_buffers``).
    align: tuple[int, int] | None = None
    uid: int = field(default_factory=lambda: next(_buf_ids))

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype})"

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def flat_index(self, indices: tuple[Expr, ...]) -> Expr:
        """The row-major offset of ``indices`` (unsimplified)."""
        return flat_index(self.shape, indices)

    def __getitem__(self, idx: Any) -> Expr:
        from .expr import BufferLoad, const

        if not isinstance(idx, tuple):
            idx = (idx,)
        return BufferLoad(self, tuple(const(i) for i in idx))


def flat_index(shape: tuple[int, ...], indices: tuple[Expr, ...]) -> Expr:
    """The row-major offset of ``indices`` into an array of ``shape`` (unsimplified)."""
    from .expr import BinOp, IntImm

    e: Expr = IntImm(0)
    for i, n in zip(indices, shape, strict=True):
        e = BinOp("+", BinOp("*", e, IntImm(n), "int32"), i, "int32")
    return e


class Stmt:
    """Base class of statements."""

    def __str__(self) -> str:
        from .printer import stmt_str

        return stmt_str(self)


class ForKind(StrEnum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


# Loop annotations the code generator reads (``Schedule.annotate`` accepts these keys).
PRAGMA_UNROLL = "pragma_unroll"          # an unroll depth gcc is asked for on this loop
# 1: the whole kernel is built with gcc's instruction scheduling before register
# allocation (off at -O3 on x86). It removed 6 of CONVLAYER's 14 register moves per 48
# FMAs; some programs ran 4% faster, others 2% slower (RESULTS.md), so it is a choice
# made per program, and the search puts it on the outermost loop.
SCHED_PRESSURE = "gcc_sched_pressure"
LOOP_ANNOTATIONS = {PRAGMA_UNROLL: "an unroll depth",
                    SCHED_PRESSURE: "1 to build the kernel with gcc's pre-RA scheduling"}


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    var: Var
    extent: int
    body: Stmt
    kind: ForKind = ForKind.SERIAL
    annotations: tuple[tuple[str, Any], ...] = ()

    def annotation(self, key: str, default: Any = None) -> Any:
        return dict(self.annotations).get(key, default)


@dataclass(frozen=True, eq=False, repr=False)
class IterVar:
    var: Var
    extent: int
    kind: str  # "S" spatial or "R" reduction


@dataclass(frozen=True, eq=False, repr=False)
class BufferStore(Stmt):
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, repr=False)
class Block(Stmt):
    """One computation instance per point of its iteration domain (see module doc)."""

    name: str
    iter_vars: tuple[IterVar, ...]
    bindings: tuple[Expr, ...]
    body: Stmt
    init: Stmt | None = None
    predicate: Expr | None = None

    @property
    def is_reduction(self) -> bool:
        return any(iv.kind == "R" for iv in self.iter_vars)

    def with_(self, **kw: Any) -> Block:
        return replace(self, **kw)


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """A buffer that lives for the duration of ``body`` (lowered form only)."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A function over buffers: ``params`` (inputs first, then ``num_outputs`` outputs),
    intermediate ``alloc_buffers`` and a loop-nest ``body``."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    alloc_buffers: tuple[Buffer, ...] = ()
    num_outputs: int = 1
    # Positions of inputs that are a model's weights (TVM's layout-free buffers): a
    # searched program's stages that read only these run once, at its first call with
    # them, not in its timing (``measure.builder.write_c``; ``graph.prepack``).
    weights: tuple[int, ...] = ()

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self.params[: len(self.params) - self.num_outputs]

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self.params[len(self.params) - self.num_outputs :]

    def with_body(self, body: Stmt, alloc_buffers: tuple[Buffer, ...] | None = None) -> PrimFunc:
        return replace(
            self, body=body,
            alloc_buffers=self.alloc_buffers if alloc_buffers is None else alloc_buffers,
        )

    def __str__(self) -> str:
        from .printer import func_str

        return func_str(self)

    def structural_hash(self) -> str:
        """A hash of the printed program: equal for structurally identical functions,
        stable across processes (variables are named by position, not identity)."""
        import hashlib

        from .printer import func_str

        return hashlib.sha256(func_str(self, canonical=True).encode()).hexdigest()[:16]


def seq(stmts: list[Stmt]) -> Stmt:
    """A sequence, flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, Seq) else [s])
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
