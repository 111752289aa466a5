"""tensortune: describe a tensor computation, schedule it, get a fast checked native kernel."""

from . import graph, search, te, tir, workloads
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
from .graph import CompiledModel, compile_model
from .kernel import Kernel, build
from .schedule import ROOT, Schedule, Trace
from .search import TuneResult, compile, tune

__all__ = [
    "ROOT", "BuildError", "CompiledModel", "IRError", "Kernel", "KernelArgumentError", "Schedule",
    "ScheduleError", "TEError", "Target", "TensorTuneError", "Trace", "TraceError", "build",
    "TuneResult", "compile", "compile_model", "graph", "search", "te", "tir", "tune", "workloads",
]
__version__ = "0.1.0"
