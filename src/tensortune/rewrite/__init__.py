"""Rewrites of a computation into an equivalent, cheaper one (before scheduling).

Example:
    >>> new = rewrite(tt.workloads.get("smx"))     # None if no rewrite applies
"""

from __future__ import annotations

from ..tir.stmt import PrimFunc
from .shared_operand import shared_operand
from .stride_phase import stride_phase

REWRITES = (stride_phase, shared_operand)


def rewrite(func: PrimFunc) -> PrimFunc | None:
    """``func`` after every rewrite that applies, in order, or None if none does."""
    out = None
    for r in REWRITES:
        new = r(out or func)
        out = new if new is not None else out
    return out


__all__ = ["REWRITES", "rewrite", "shared_operand", "stride_phase"]
