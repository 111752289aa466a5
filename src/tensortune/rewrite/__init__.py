"""Rewrites of a computation into an equivalent, cheaper one (before scheduling)."""

from .stride_phase import stride_phase

__all__ = ["stride_phase"]
