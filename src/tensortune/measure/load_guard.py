"""LoadGuard: measure candidates only while the machine is as quiet as it was.

A shared machine has busy spells: another tenant takes a core for a few seconds and every
kernel timed meanwhile runs up to twice as slow (an OpenMP loop waits for its slowest
thread). A candidate timed in such a spell is stored too slow, is never measured again
(the search dedupes), teaches the cost model a wrong lesson and is never bred from. The
guard times a reference kernel, the best of this run so far, for a few milliseconds
before each candidate; while it reads more than ``threshold`` times its quiet time
(twice in a row), it waits ``step`` seconds, at most ``budget`` seconds per batch, and
reads again.

Example:
    >>> guard = LoadGuard()
    >>> guard.reference(RunInput(lib, func, key, ins), best_latency)
    >>> guard.new_batch(); guard.wait(runner)      # before timing each candidate
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .runner import LocalRunner, RunInput


@dataclass
class LoadGuard:
    threshold: float = 1.5
    step: float = 0.25
    budget: float = 2.0
    probe_ms: float = 5.0

    def __post_init__(self) -> None:
        self._ref: RunInput | None = None
        self._quiet = float("inf")    # the reference's fastest reading: the quiet time
        self._left = self.budget
        self.waited = 0.0             # seconds spent waiting, over the whole run
        self.busy = 0                 # candidates timed while still busy (budget spent)

    def reference(self, inp: RunInput, latency: float) -> None:
        """Use ``inp`` (a checked kernel whose timing was ``latency``) from now on."""
        # Floored at a nanosecond: a reading of 0 (a timer's granularity) would divide.
        self._ref, self._quiet = inp, max(latency, 1e-9)

    def new_batch(self) -> None:
        self._left = self.budget

    def wait(self, runner: LocalRunner) -> float:
        """Read the reference until it runs at its quiet speed or the batch's budget is
        spent; returns the last reading over the quiet time (1.0: quiet)."""
        if self._ref is None:
            return 1.0
        t = self._read(runner)
        while t is not None and t > self.threshold * self._quiet and self._left > 0:
            time.sleep(self.step)
            self._left -= self.step
            self.waited += self.step
            t = self._read(runner)
        if t is None:        # the reference failed now (it passed before): stop guarding
            self._ref = None
            return 1.0
        self._quiet = max(min(self._quiet, t), 1e-9)
        load = t / self._quiet
        if load > self.threshold:
            self.busy += 1
        return load

    def _read(self, runner: LocalRunner) -> float | None:
        # A slow reading is read again at once: an interrupt or a page fault slows one
        # 5 ms reading, a busy spell slows both.
        assert self._ref is not None
        # The calls per reading follow from the quiet time: no calibrating call (a GMM
        # reference runs 9.5 ms a call).
        number = min(100000, max(1, math.ceil(self.probe_ms / 1000.0 / self._quiet)))
        t = runner.probe(self._ref, self.probe_ms, number)
        if t is not None and t > self.threshold * self._quiet:
            again = runner.probe(self._ref, self.probe_ms, number)
            t = None if again is None else min(t, again)
        return t
