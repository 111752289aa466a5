"""The runner: time built candidates in a persistent worker process, checked against the
reference. A candidate that crashes, hangs past its deadline, returns wrong or non-finite
values becomes a ``RunResult`` with an error kind; the worker is replaced when it dies or
hangs, so the caller never crashes.

Example:
    >>> runner = LocalRunner(timeout=10)
    >>> res = runner.run([RunInput(lib_path, func, key, inputs, expected)])
    >>> res[0].median, res[0].error_kind
"""

from __future__ import annotations

import statistics
import subprocess
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..tir.stmt import PrimFunc
from .process import spawn


@dataclass(frozen=True)
class RunInput:
    """``key`` names the (inputs, expected) pair so the worker receives arrays only once.
    A candidate whose first timing exceeds ``cutoff`` seconds is timed only once."""

    lib_path: str
    func: PrimFunc
    key: str
    inputs: list[np.ndarray]
    expected: list[np.ndarray] | None = None
    cutoff: float | None = None
    suffix: str = ""    # of the kernel's symbols in a library of several (BuildResult's)


@dataclass(frozen=True)
class RunResult:
    latencies: list[float] = field(default_factory=list)
    error_kind: str | None = None  # runtime_crash | timeout | wrong_result | non_finite | ...
    error_msg: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def median(self) -> float:
        return statistics.median(self.latencies) if self.latencies else float("inf")


# A timing loop's shortest length unless a runner or a run asks for another.
MIN_REPEAT_MS = 20.0


class LocalRunner:
    """One worker process, reused across runs and recycled every ``recycle`` runs (libraries
    loaded into a process cannot be unloaded reliably). Each candidate is timed ``repeat``
    times, each timing a loop of at least ``min_repeat_ms``. Three, not five: the five
    timings of a candidate were within 3-4% of each other (median max/min) on C2D, C3D and
    GMM, and 64-trial runs tuned 1.12-1.32x more trials per second with three and a
    tighter early stop, their best found no further apart than two seeds' (RESULTS.md);
    the best few are timed again in rounds at the end of a run anyway."""

    def __init__(self, timeout: float = 10.0, repeat: int = 3,
                 min_repeat_ms: float = MIN_REPEAT_MS,
                 flush_cache: bool = False, check: bool = True, recycle: int = 256) -> None:
        self.timeout = timeout
        self.repeat = repeat
        self.min_repeat_s = min_repeat_ms / 1000.0
        self.flush_bytes = 64 << 20 if flush_cache else 0
        self.check = check
        self.recycle = recycle
        self._proc: Any = None
        self._conn: Any = None
        self._keys: set[str] = set()
        self._runs = 0

    def _start(self) -> None:
        self._proc, self._conn = spawn("tensortune.measure.worker")
        self._keys = set()
        self._runs = 0

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        if self._alive():
            try:
                self._conn.send(None)
                self._proc.wait(2)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def probe(self, inp: RunInput, min_repeat_ms: float = 5.0, number: int = 0
              ) -> float | None:
        """One short timing of a kernel already checked (seconds per call; None if it
        failed): ``LoadGuard``'s reading of how busy the machine is. With ``number`` (calls
        per timing, from a known latency) the kernel is called only that many times;
        without, once more to pick it."""
        # ``keep``: the kernel keeps its workspace, so the next reading faults none in.
        r = self._one(inp, {"repeat": 1, "min_repeat_s": min_repeat_ms / 1000.0,
                            "cutoff": None, "check": False, "number": number, "keep": True})
        return r.latencies[0] if r.ok and r.latencies else None

    def _one(self, inp: RunInput, override: dict[str, Any] | None = None) -> RunResult:
        if not self._alive() or self._runs >= self.recycle:
            self._kill()
            self._start()
        send_arrays = inp.key not in self._keys
        msg = {"key": inp.key, "lib_path": inp.lib_path, "suffix": inp.suffix,
               "out_specs": [(b.shape, b.dtype) for b in inp.func.outputs],
               "inputs": inp.inputs if send_arrays else None,
               "expected": (inp.expected if self.check else None) if send_arrays else None,
               "repeat": self.repeat, "min_repeat_s": self.min_repeat_s,
               "flush_bytes": self.flush_bytes, "cutoff": inp.cutoff, **(override or {})}
        self._runs += 1
        try:
            self._conn.send(msg)
            self._keys.add(inp.key)
            if not self._conn.poll(self.timeout):
                self._kill()
                return RunResult(error_kind="timeout",
                                 error_msg=f"no result within {self.timeout:.1f} s; the worker "
                                           "was killed and replaced")
            reply = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._proc.wait(5) if self._proc is not None else None
            self._kill()
            sig = f" (signal {-code})" if code is not None and code < 0 else ""
            return RunResult(error_kind="runtime_crash",
                             error_msg=f"the worker process died{sig} while running the kernel")
        if "error_kind" in reply:
            return RunResult(error_kind=reply["error_kind"], error_msg=reply["error_msg"])
        return RunResult(latencies=reply["latencies"])

    def run(self, inputs: list[RunInput], min_repeat_ms: float | None = None
            ) -> list[RunResult]:
        """Check and time each of ``inputs``; ``min_repeat_ms`` overrides this runner's
        shortest timing loop for these runs."""
        over = None if min_repeat_ms is None else {"min_repeat_s": min_repeat_ms / 1000.0}
        return [self._one(x, over) for x in inputs]
