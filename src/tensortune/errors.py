"""Error types. Every error a user can trigger is a ``TensorTuneError``.

Messages say what was wrong, where (block, loop, buffer, axis) and what would be valid.
"""


class TensorTuneError(Exception):
    """Base class of all errors raised by tensortune."""


class TEError(TensorTuneError):
    """A malformed tensor expression (bad shape, dtype, axis, argument list)."""


class IRError(TensorTuneError):
    """Malformed loop IR, reported by the verifier."""


class ScheduleError(TensorTuneError):
    """A schedule primitive was called with arguments that would break the program."""


class BuildError(TensorTuneError):
    """Code generation or the C compiler failed."""


class KernelArgumentError(TensorTuneError):
    """A compiled kernel was called with arguments of the wrong shape, dtype or layout."""


class TraceError(TensorTuneError):
    """A trace could not be parsed or replayed."""


def check(cond: bool, msg: str, exc: type[TensorTuneError] = ScheduleError) -> None:
    """Raise ``exc(msg)`` unless ``cond`` holds: legality is "try it and catch"."""
    if not cond:
        raise exc(msg)
