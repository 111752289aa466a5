"""Compile C source to a shared library with the system compiler, cached by content.

The cache key is the source plus the compiler command line and version, so a changed flag
or compiler never reuses a stale library.

Example:
    >>> path = compile_source(src, Target.host())      # .../kernels/<sha>.so
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from ..errors import BuildError
from .target import Target


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tensortune" / "kernels"


def source_key(source: str, target: Target) -> str:
    h = hashlib.sha256()
    for part in (source, target.cc, target.cc_version, " ".join(target.flags)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def compile_source(source: str, target: Target, cache_dir: Path | None = None,
                   timeout: float = 60.0) -> Path:
    """Return the path of a shared library built from ``source`` (cached)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    key = source_key(source, target)
    lib = cache / f"{key}.so"
    if lib.exists():
        return lib
    src = cache / f"{key}.c"
    src.write_text(source)
    # Build under a temporary name and rename: concurrent builders never see half a file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
    os.close(fd)
    cmd = [target.cc, *target.flags, "-std=gnu99", "-shared", "-fPIC", "-o", tmp, str(src),
           "-lm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        os.unlink(tmp)
        raise BuildError(f"the C compiler did not finish within {timeout:.0f} s "
                         f"(source kept at {src})") from e
    if proc.returncode != 0:
        os.unlink(tmp)
        err = "\n".join(proc.stderr.splitlines()[:30])
        raise BuildError(f"the C compiler failed on {src}:\n{err}")
    os.replace(tmp, lib)
    return lib
