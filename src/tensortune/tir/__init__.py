"""The loop-level IR: expressions, statements, printing, analysis and verification."""

from .expr import BinOp, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not, Reduce, Select, Var
from .stmt import (
    Allocate,
    Block,
    Buffer,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    IterVar,
    PrimFunc,
    Seq,
    Stmt,
)
from .verify import verify

__all__ = [
    "Allocate", "BinOp", "Block", "Buffer", "BufferLoad", "BufferStore", "Call", "Cast", "Expr",
    "FloatImm", "For", "ForKind", "IfThenElse", "IntImm", "IterVar", "Not", "PrimFunc",
    "Reduce", "Select", "Seq", "Stmt", "Var", "verify",
]
