"""The machine code is generated for: ISA features, vector width, cores, caches, compiler.

Example:
    >>> t = Target.host()
    >>> t.vector_bytes      # 64 on an AVX-512 machine
    64
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _cache_bytes(level: int, kind: str) -> int:
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return 0
    for e in entries:
        if _read(f"{base}/{e}/level").strip() == str(level) and \
                _read(f"{base}/{e}/type").strip() in (kind, "Unified"):
            size = _read(f"{base}/{e}/size").strip()
            mult = {"K": 1024, "M": 1024 * 1024}.get(size[-1:], 1)
            return int(size.rstrip("KM") or 0) * mult
    return 0


@dataclass(frozen=True)
class Target:
    """A CPU target. ``vector_bytes`` is the widest SIMD register generated code uses."""

    cpu: str = "generic"
    features: tuple[str, ...] = ()
    vector_bytes: int = 16
    cores: int = 1
    l1d_bytes: int = 32768
    l2_bytes: int = 1 << 20
    l3_bytes: int = 1 << 23
    cc: str = "gcc"
    cc_version: str = ""
    flags: tuple[str, ...] = field(default=("-O3", "-march=native", "-fopenmp"))

    @staticmethod
    @functools.cache
    def host() -> Target:
        """Detect this machine (Linux /proc and /sys; conservative elsewhere)."""
        cpuinfo = _read("/proc/cpuinfo")
        model, feats = platform.processor() or "generic", set()
        for line in cpuinfo.splitlines():
            if line.startswith("model name") and model in ("generic", "", platform.machine()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                feats = set(line.split(":", 1)[1].split())
        keep = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "neon")
        features = tuple(f for f in keep if f in feats)
        vec = 64 if "avx512f" in feats else 32 if "avx2" in feats or "avx" in feats else 16
        cc = os.environ.get("CC", "gcc")
        try:
            ver = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            ver = "unknown"
        # Without RTL GCSE and its after-reload pass: on the large straight-line bodies
        # of unrolled register tiles they took 46% of cc1's time (a 47 KB C3D draw:
        # 3.8 s, 1.2 s without), and the kernels they built ran no faster (RESULTS.md,
        # the GCSE section).
        flags = ["-O3", "-fno-gcse", "-fno-gcse-after-reload", "-march=native", "-fopenmp",
                 "-fno-math-errno"]
        if vec == 64:
            flags.append("-mprefer-vector-width=512")  # gcc defaults to 256 on many CPUs
        return Target(model, features, vec, os.cpu_count() or 1, _cache_bytes(1, "Data") or
                      32768, _cache_bytes(2, "Unified") or 1 << 20,
                      _cache_bytes(3, "Unified") or 1 << 23, cc, ver, tuple(flags))

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 zmm with AVX-512, 16 ymm/xmm otherwise."""
        return 32 if "avx512f" in self.features else 16

    def lanes(self, dtype: str) -> int:
        return self.vector_bytes // (8 if dtype in ("float64", "int64") else 4)

    def fingerprint(self) -> str:
        """A short id of everything that makes measurements comparable."""
        return hashlib.sha256(repr(sorted(asdict(self).items())).encode()).hexdigest()[:12]

    def __str__(self) -> str:
        return (f"{self.cpu} | {self.cores} cores | SIMD {self.vector_bytes * 8} bit "
                f"({', '.join(self.features)}) | L1d {self.l1d_bytes // 1024} KiB, "
                f"L2 {self.l2_bytes // 1024} KiB, L3 {self.l3_bytes // 1024} KiB | "
                f"{self.cc_version}")
