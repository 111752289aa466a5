"""Search: strategies, mutators, the tuning loop."""

from .evolutionary import EvolutionarySearch
from .search_strategy import Candidate, ReplayTrace, SearchContext, SearchStrategy
from .tune import TuneResult, compile, tune

__all__ = ["Candidate", "EvolutionarySearch", "ReplayTrace", "SearchContext",
           "SearchStrategy", "TuneResult", "compile", "tune"]
