"""tensortune: describe a tensor computation, schedule it, get a fast checked native kernel."""

from . import te, tir, workloads
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

__all__ = [
    "BuildError", "IRError", "KernelArgumentError", "ScheduleError", "TEError",
    "Kernel", "Target", "TensorTuneError", "TraceError", "build", "te", "tir", "workloads",
]
__version__ = "0.1.0"
