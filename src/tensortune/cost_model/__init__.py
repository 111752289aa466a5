"""Cost models and program features."""

from .cost_model import (
    CostModel,
    LGBMModel,
    RandomModel,
    make,
    normalized_throughput,
    rank_correlation,
)
from .features import FEATURES, extract

__all__ = ["FEATURES", "CostModel", "LGBMModel", "RandomModel", "extract", "make",
           "normalized_throughput", "rank_correlation"]
