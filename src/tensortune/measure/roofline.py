"""The roofline of one function on this machine: how fast it could run at best, and what
sets that bound, the FMA peak or how fast its data can be read.

A kernel that does few FLOPs per byte (a norm, a softmax, a layer norm) is bound by
reading its data, not by FMAs: NRM reads at 0.5 FLOP/byte, and on the Intel AVX-512
host its best kernel sat near 6% of the FMA peak, which says nothing about how close it
is to its limit. The bound here is the lower of the FMA peak and the read bandwidth at
the function's footprint times its FLOPs per byte (Williams et al., "Roofline", 2009).
The bandwidth is measured at that footprint (``measure.peak.read_bandwidth``), because a
kernel timed in a loop finds its inputs where its last call left them: NRM's 8 MiB are
read from L3, at 3.3x the memory's rate on the Zen 4 host (188 against 55-58 GB/s).

Example:
    >>> func = tt.workloads.get("nrm")
    >>> roof = Roofline.measure(func)
    >>> roof.bound, roof.binding      # (94.2, 'read bandwidth (L3)') on the Zen 4 host
    >>> roof.percent_at(44.8e-6)      # a kernel's latency as a % of the bound
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codegen import Target
from ..tir import PrimFunc
from ..tir.analysis import flop_count
from ..tir.expr import dtype_bytes


def footprint(func: PrimFunc) -> int:
    """Bytes of the function's inputs and outputs, each counted once: the least any
    kernel of it moves.

    >>> footprint(tt.workloads.get("nrm"))      # 8 x 512 x 512 floats in, 8 out
    8388640
    """
    return sum(b.size * dtype_bytes(b.dtype) for b in func.params)


def cache_level(nbytes: int, target: Target) -> str:
    """Where an array of ``nbytes`` stays when it is read again and again on all cores:
    "L2" (the cores' L2 caches together), "L3" or "memory"."""
    if nbytes <= target.l2_bytes * target.cores:
        return "L2"
    return "L3" if nbytes <= target.l3_bytes else "memory"


@dataclass(frozen=True)
class Roofline:
    """``peak`` GFLOP/s, ``bandwidth`` GB/s read at ``nbytes``, and the function's
    ``flops``."""

    peak: float
    bandwidth: float
    flops: float
    nbytes: int
    level: str = "memory"

    @property
    def intensity(self) -> float:
        """FLOPs per byte of footprint."""
        return self.flops / self.nbytes

    @property
    def bound(self) -> float:
        """The GFLOP/s no kernel of the function can pass on this machine (0 for one that
        does no floating-point work: a transpose, integer arithmetic; ``seconds`` bounds
        those)."""
        return min(self.peak, self.intensity * self.bandwidth)

    @property
    def seconds(self) -> float:
        """The least time a kernel of the function can take here: its FLOPs at the FMA
        peak or its footprint at the read bandwidth, whichever is longer. Unlike
        ``bound`` it holds for functions without FLOPs, which only move data."""
        return max(self.flops / (self.peak * 1e9), self.nbytes / (self.bandwidth * 1e9))

    @property
    def reading_bound(self) -> bool:
        """True where reading the data binds before the FMA peak (at the ridge, False)."""
        return self.intensity * self.bandwidth < self.peak

    @property
    def binding(self) -> str:
        """What sets the bound: "FMA peak" or "read bandwidth (<level>)"."""
        return f"read bandwidth ({self.level})" if self.reading_bound else "FMA peak"

    def percent_at(self, latency: float) -> float:
        """How close a kernel of ``latency`` seconds comes to the bound, in percent: the
        least time (``seconds``) over its latency. For a function with FLOPs this is its
        GFLOP/s over ``bound``; for one without, its GB/s over the read bandwidth."""
        return 100.0 * self.seconds / latency

    def gbytes_per_s(self, latency: float) -> float:
        """The footprint over ``latency`` seconds: the GB/s a kernel moves at least."""
        return self.nbytes / latency / 1e9

    def describe(self) -> str:
        """One line for a person: the bound and where it comes from."""
        if self.flops <= 0:
            return (f"no floating-point work: bound by the {self.binding}, "
                    f"{self.nbytes / 2**20:.1f} MiB read at {self.bandwidth:.0f} GB/s "
                    f"in {self.seconds * 1e6:.1f} us at least")
        return (f"bound {self.bound:.1f} GFLOP/s by the {self.binding}: "
                f"{self.nbytes / 2**20:.1f} MiB read at {self.bandwidth:.0f} GB/s, "
                f"{self.intensity:.2f} FLOP/byte; FMA peak {self.peak:.0f} GFLOP/s")

    @classmethod
    def measure(cls, func: PrimFunc, target: Target | None = None,
                peak: float | None = None, flops: float | None = None,
                seconds: float = 0.1) -> Roofline:
        """Measure the bandwidth at ``func``'s footprint (and the FMA peak, unless given)
        on all cores of ``target``; ``flops`` defaults to ``func``'s count (the suite
        passes its own, those of workloads.md)."""
        from .peak import fma_peak, read_bandwidth

        t = target or Target.host()
        nbytes = footprint(func)
        if peak is None:
            peak = fma_peak(t.cores, t, seconds=seconds)
        bw = read_bandwidth(t.cores, nbytes, t, seconds=seconds)
        return cls(peak, bw, flop_count(func) if flops is None else flops, nbytes,
                   cache_level(nbytes, t))


def microseconds_text(seconds: float) -> str:
    """A kernel's time in microseconds for a column headed "(us)": one decimal from 10
    us, three below, where a small model's kernels (under 0.1 us) read "0.0".

    >>> [microseconds_text(s) for s in (4.2e-9, 1.62e-6, 1.912e-5)]
    ['0.004', '1.620', '19.1']
    """
    us = seconds * 1e6
    return f"{us:.1f}" if us >= 10 else f"{us:.3f}"


def latency_text(seconds: float) -> str:
    """A kernel's time in the unit that shows it: a 1000-element sum's 64 ns read
    "0.0000 ms" in milliseconds.

    >>> [latency_text(s) for s in (6.4e-8, 1.62e-6, 7.021e-4, 1.5)]
    ['64.0 ns', '1.620 us', '0.7021 ms', '1.500 s']
    """
    if seconds < 1e-6:
        return f"{seconds * 1e9:.1f} ns"
    if seconds < 1e-4:
        return f"{seconds * 1e6:.3f} us"
    return f"{seconds * 1e3:.4f} ms" if seconds < 1 else f"{seconds:.3f} s"
