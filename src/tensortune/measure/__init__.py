"""Measurement: build candidates in parallel, run them checked and timed in a worker.

Example:
    >>> from tensortune.measure import measure
    >>> res = measure(sch)          # builds, checks against the reference, times
    >>> res.median                  # seconds
"""

from __future__ import annotations

from typing import Any

from ..codegen import Target
from ..reference import reference_case
from .builder import BuildInput, BuildResult, LocalBuilder, source_hash
from .load_guard import LoadGuard
from .runner import LocalRunner, RunInput, RunResult


def measure(obj: Any, *, repeat: int = 7, min_repeat_ms: float = 50.0, timeout: float = 60.0,
            runner: LocalRunner | None = None, target: Target | None = None) -> RunResult:
    """Build the current program of a ``Schedule`` (or a PrimFunc), check it against the
    reference of the original function on random inputs, and time it."""
    func = getattr(obj, "func", obj)
    original = getattr(obj, "original", func)
    built = LocalBuilder(target).build([BuildInput(func)])[0]
    if not built.ok:
        return RunResult(error_kind=built.error_kind, error_msg=built.error_msg)
    ins, exp = reference_case(original)
    own = runner is None
    r = runner or LocalRunner(timeout=timeout, repeat=repeat, min_repeat_ms=min_repeat_ms)
    try:
        return r.run([built.run_input(func, original.structural_hash(), ins, exp)])[0]
    finally:
        if own:
            r.close()


__all__ = ["BuildInput", "BuildResult", "LoadGuard", "LocalBuilder", "LocalRunner", "RunInput",
           "RunResult", "measure", "source_hash"]
