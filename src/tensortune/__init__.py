"""tensortune: describe a tensor computation, schedule it, get a fast checked native kernel."""

from . import search, te, tir, workloads
from .codegen import Target
from .errors import (
    BuildError,
    IRError,
    KernelArgumentError,
    ScheduleError,
    TEError,
    TensorTuneError,
    TraceError,
)
from .kernel import Kernel, build
from .schedule import ROOT, Schedule, Trace
from .search import TuneResult, compile, tune

__all__ = [
    "ROOT", "BuildError", "IRError", "Kernel", "KernelArgumentError", "Schedule",
    "ScheduleError", "TEError", "Target", "TensorTuneError", "Trace", "TraceError", "build",
    "TuneResult", "compile", "search", "te", "tir", "tune", "workloads",
]
__version__ = "0.1.0"
