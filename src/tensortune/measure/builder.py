"""The builder: generate C for candidates and compile them in parallel, cached by content.

Measurement never raises into the search: a candidate whose code generation or
compilation fails becomes a ``BuildResult`` with ``error_kind`` and ``error_msg``.

Example:
    >>> results = LocalBuilder().build([BuildInput(sch.func), BuildInput(other.func)])
    >>> results[0].lib_path, results[1].error_kind
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..codegen import Target, compile_source
from ..codegen.compile import default_cache_dir
from ..codegen.joint import join, prefix, suffix
from ..codegen.kernel_cache import CacheUsage, max_bytes, prune
from ..codegen.packed_once import program_c
from ..errors import BuildError
from ..tir.stmt import PrimFunc
from ..tir.verify import verify
from .runner import RunInput


@dataclass(frozen=True)
class BuildInput:
    """A scheduled function to build; ``source`` replaces code generation (C written
    elsewhere: by the search's draw workers, by hand for tests, or any kernel that
    follows the same ABI)."""

    func: PrimFunc
    source: str | None = None


@dataclass(frozen=True)
class BuildResult:
    lib_path: str | None
    source: str | None
    build_seconds: float
    error_kind: str | None = None  # "codegen" | "compile" | "timeout"
    error_msg: str | None = None
    # The suffix of this kernel's symbols (``tt_time_1``) in a library built from several
    # sources (``codegen.joint``); ``run_input`` passes it on.
    suffix: str = ""

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def run_input(self, func: PrimFunc, key: str, inputs: list, expected: list | None = None,
                  cutoff: float | None = None) -> RunInput:
        """What the runner needs to check and time this kernel (its library and symbols);
        the library must have built."""
        assert self.lib_path is not None, "a failed build has no kernel to run"
        return RunInput(self.lib_path, func, key, inputs, expected, cutoff, self.suffix)

    @cached_property
    def source_hash(self) -> str | None:
        # Asked several times per candidate by the tuner (its dedupe and its record).
        return None if self.source is None else source_hash(self.source)


def source_hash(source: str) -> str:
    """The key a record keeps of the C it timed (``TuningRecord.source``)."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


# The most bytes of C a search compiles for one candidate. Random Winograd draws of
# CONVLAYER and C2D wrote 42-295 KB, the suite's other draws up to 108 KB. Seven programs
# in four CONVLAYER and C2D searches wrote 0.57-4.1 MB (unswitched copies inside unrolled
# loops): their builds took 6.9-62 s (gcc alone, one 3.6 MB source took 51 CPU-seconds;
# the usual Winograd program 0.3-0.5) and they ran 10-35x slower than their run's best;
# two of the runs took 134 and 215 s where their pairs took 77 and 69 s (RESULTS.md). A
# bigger source is a recorded error instead.
SEARCH_SOURCE_LIMIT = 1 << 19


def write_c(program: Callable[[], PrimFunc], target: Target, limit: int | None = None
            ) -> tuple[str | None, str | None]:
    """The C of the function ``program`` makes (a replay, or one at hand), verified,
    lowered and emitted for ``target``; or None and why not. A failing candidate is a
    value, for the builder and for the search's draw workers (``DrawPool.emit``) alike.
    With ``limit``, C longer than that many bytes is such a failure (the search passes
    ``SEARCH_SOURCE_LIMIT``).

    Example:
        >>> source, error = write_c(lambda: sch.func, Target.host())
    """
    try:
        func = program()
        verify(func)
        # A model's task times its program without the stages that read only weights,
        # which the compiled model runs once (codegen/packed_once.py).
        source = program_c(func, target)
    except Exception as e:  # noqa: BLE001 - a failing candidate is a value
        return None, f"{type(e).__name__}: {e}"
    if limit is not None and len(source) > limit:
        return None, (f"the C source is {len(source) / 2**20:.1f} MiB, over the "
                      f"{limit / 2**20:.1f} MiB a searched candidate may have: gcc would "
                      f"take many seconds on it (SEARCH_SOURCE_LIMIT in "
                      f"tensortune.measure.builder)")
    return source, None


def candidate_c(program: Callable[[], PrimFunc], target: Target
                ) -> tuple[str | None, str | None]:
    """``write_c`` for a searched candidate: C over ``SEARCH_SOURCE_LIMIT`` is a failure
    (what every path of the search that writes C uses: the tuning task and the draw
    workers).

    Example:
        >>> source, error = candidate_c(lambda: cand.sch.func, Target.host())
    """
    return write_c(program, target, SEARCH_SOURCE_LIMIT)


# The most given sources a tuning run's builder compiles as one unit (``share``). Four:
# units of four from a tuning run's batches took 0.87-0.91 (C3D) and 0.78-1.05 (T2D) of
# the gcc CPU of separate builds over four alternating rounds (RESULTS.md). Larger units
# were not measured that way (one first pair of rounds read 0.79-0.81 for eight), and a
# step's 16-20 sources in fewer units would leave less to share two cores.
SHARE = 4


class LocalBuilder:
    """Compiles with the system C compiler on a thread pool (gcc runs as a subprocess, so
    threads build in parallel). With ``share`` > 1, a call whose sources are all given
    builds them in units of up to ``share`` (``codegen.joint``): a result's ``suffix``
    names its kernel in the library; a unit gcc fails on is built again source by source,
    so each failure is its own source's."""

    def __init__(self, target: Target | None = None, max_workers: int | None = None,
                 timeout: float = 60.0, cache_dir: Path | None = None,
                 share: int = 1) -> None:
        self.target = target or Target.host()
        self.max_workers = max_workers or self.target.cores
        self.timeout = timeout
        self.cache_dir = cache_dir
        self.share = share
        self.cache_limit = max_bytes()      # read now: a bad setting fails before a run

    def _one(self, inp: BuildInput) -> BuildResult:
        t0 = time.perf_counter()
        source = inp.source
        if source is None:
            source, error = write_c(lambda: inp.func, self.target)
            if source is None:
                return BuildResult(None, None, time.perf_counter() - t0, "codegen", error)
        try:
            lib = compile_source(source, self.target, self.cache_dir, self.timeout)
        except BuildError as e:
            kind = "timeout" if "did not finish" in str(e) else "compile"
            return BuildResult(None, source, time.perf_counter() - t0, kind, str(e))
        return BuildResult(str(lib), source, time.perf_counter() - t0)

    def _unit(self, inputs: list[BuildInput]) -> list[BuildResult]:
        if len(inputs) == 1:
            return [self._one(inputs[0])]
        t0 = time.perf_counter()
        sources = [x.source or "" for x in inputs]
        try:
            # The timeout of one source: a unit takes a few seconds at most, so one that
            # runs out of it holds a source that would have, and is built source by source.
            lib = compile_source(join(sources), self.target, self.cache_dir, self.timeout)
        except BuildError:
            return [self._one(x) for x in inputs]
        each = (time.perf_counter() - t0) / len(inputs)   # a record's share of the build
        return [BuildResult(str(lib), src, each, suffix=suffix(k))
                for k, src in enumerate(sources)]

    def _units(self, inputs: list[BuildInput]) -> list[list[int]]:
        """The indices of ``inputs`` grouped into units, longest first. Sources join when
        they share their prefix, in as many units as it takes to hold ``share`` each and
        at least one per worker, dealt longest first in a snake so the units are alike."""
        if self.share <= 1 or any(x.source is None for x in inputs):
            return [[i] for i in sorted(range(len(inputs)),
                                        key=lambda i: -len(inputs[i].source or ""))]
        by_prefix: dict[object, list[int]] = {}
        for i, x in enumerate(inputs):
            head = prefix(x.source or "")
            by_prefix.setdefault(i if head is None else head, []).append(i)
        units: list[list[int]] = []
        for group in by_prefix.values():
            group.sort(key=lambda i: -len(inputs[i].source or ""))
            n = max(math.ceil(len(group) / self.share), min(self.max_workers, len(group)))
            dealt: list[list[int]] = [[] for _ in range(n)]
            for j, i in enumerate(group):
                row, col = divmod(j, n)
                dealt[col if row % 2 == 0 else n - 1 - col].append(i)
            units += dealt
        return sorted(units, key=lambda u: -sum(len(inputs[i].source or "") for i in u))

    def build(self, inputs: list[BuildInput]) -> list[BuildResult]:
        """The results of ``inputs``, in order. When every source is given, the longest go
        to the compiler first: a long build left for last keeps one core busy while the
        others wait (gcc took 0.13-1.5 s over one C2D run's 58 sources, rank correlation
        0.66 with their length)."""
        if len(inputs) <= 1:
            return [self._one(x) for x in inputs]
        units = self._units(inputs)
        with ThreadPoolExecutor(self.max_workers) as pool:
            built = list(pool.map(lambda u: self._unit([inputs[i] for i in u]), units))
        done = {i: b for u, got in zip(units, built) for i, b in zip(u, got)}
        return [done[i] for i in range(len(inputs))]

    def prune_cache(self) -> CacheUsage:
        """Prune the kernel cache to its limit (``codegen.kernel_cache``), least recently
        used first; returns what was deleted."""
        return prune(self.cache_dir or default_cache_dir(), self.cache_limit)
