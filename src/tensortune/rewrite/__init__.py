"""Rewrites of a computation into an equivalent, cheaper one (before scheduling).

Example:
    >>> new = rewrite(tt.workloads.get("smx"))     # None if no rewrite applies
"""

from __future__ import annotations

from ..tir.stmt import PrimFunc
from .pad_lanes import pad_lanes
from .shared_operand import shared_operand
from .stride_phase import stride_phase
from .winograd import winograd, winograd4

REWRITES = (stride_phase, shared_operand)


def rewrite(func: PrimFunc, lanes: int = 16) -> PrimFunc | None:
    """``func`` after every rewrite that applies, in order, or None if none does;
    ``lanes`` is the target's float32 vector width (``pad_lanes``), last."""
    out = None
    for r in REWRITES:
        new = r(out or func)
        out = new if new is not None else out
    new = pad_lanes(out or func, lanes)
    return new if new is not None else out


__all__ = ["REWRITES", "pad_lanes", "rewrite", "shared_operand", "stride_phase", "winograd",
           "winograd4"]
