"""Shared helpers of the sampling instructions and the mutators that change them."""

from ..schedule.sampling import _prime_factors as prime_factors

__all__ = ["prime_factors"]
