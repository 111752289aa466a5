"""The kernel cache's size: what it holds, and pruning it to a limit, least recently used
first.

Every candidate a search builds leaves its C and its shared library in the cache
(``compile.compile_source``): this machine's cache held 820 MB in 37,656 files, about
44 KB a kernel, before it had a limit. An entry is only a shortcut (a
missing one is built again from its source), so ``tune`` prunes the cache to
``max_bytes()`` when it ends: the entries used longest ago go first, and nothing used
in the last ``KEEP_RECENT_S`` seconds, which another tuning process may be about to
load. A build reads an entry through ``touch``, so a kernel still in use stays.

Example:
    >>> usage(default_cache_dir())          # CacheUsage(entries=..., bytes=...)
    >>> prune(default_cache_dir(), 256 << 20)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import TensorTuneError

# The cache's default limit, and the variable that sets another (in MiB).
DEFAULT_MAX_MB = 1024
MAX_MB_ENV = "TENSORTUNE_KERNEL_CACHE_MB"
# Entries used this recently are never pruned: another process may be loading them.
KEEP_RECENT_S = 600.0
# A build's temporary library older than this belongs to a build that was killed.
STALE_TEMP_S = 3600.0


@dataclass(frozen=True)
class CacheUsage:
    entries: int        # kernels (a source, its library, or both)
    bytes: int


def max_bytes() -> int:
    """The cache's limit: ``$TENSORTUNE_KERNEL_CACHE_MB`` MiB, else 1 GiB; a value that
    is not a size is refused (``TensorTuneError``)."""
    raw = os.environ.get(MAX_MB_ENV)
    if raw is None:
        return DEFAULT_MAX_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        raise TensorTuneError(f"{MAX_MB_ENV}={raw!r}: expected a size in MiB, "
                              f"such as {DEFAULT_MAX_MB}") from None
    if not mb >= 0:     # negative, or NaN
        raise TensorTuneError(f"{MAX_MB_ENV}={raw!r}: expected a size of 0 MiB or more")
    return int(mb * (1 << 20))


def touch(path: Path) -> None:
    """Mark an entry as used now (a cache hit)."""
    try:
        os.utime(path)
    except OSError:     # pruned meanwhile by another process: the build will redo it
        pass


def _entries(cache: Path) -> tuple[dict[str, tuple[float, int, list[Path]]], list[Path]]:
    """Each key's (last use, bytes, files), and the temporary files of builds."""
    entries: dict[str, tuple[float, int, list[Path]]] = {}
    temps: list[Path] = []
    if not cache.is_dir():
        return entries, temps
    with os.scandir(cache) as it:
        for e in it:
            if not e.is_file(follow_symlinks=False):
                continue
            path = Path(e.path)
            if path.name.startswith("tmp"):
                temps.append(path)
                continue
            if path.suffix not in (".c", ".so"):
                continue        # not ours: left alone
            st = e.stat(follow_symlinks=False)
            used, size, files = entries.get(path.stem, (0.0, 0, []))
            entries[path.stem] = (max(used, st.st_mtime), size + st.st_size, files + [path])
    return entries, temps


def usage(cache: Path) -> CacheUsage:
    """How many kernels the cache at ``cache`` holds, and their bytes."""
    entries, _ = _entries(cache)
    return CacheUsage(len(entries), sum(size for _, size, _ in entries.values()))


def prune(cache: Path, limit: int, keep_recent_s: float = KEEP_RECENT_S) -> CacheUsage:
    """Delete the least recently used entries until the cache holds at most ``limit``
    bytes (entries used in the last ``keep_recent_s`` seconds stay even so), and the
    temporary files of builds killed long ago. Returns what was deleted."""
    entries, temps = _entries(cache)
    now = time.time()
    removed, freed = 0, 0
    for path in temps:
        try:
            st = path.stat()
            if now - st.st_mtime > STALE_TEMP_S:
                path.unlink()
                freed += st.st_size
        except OSError:
            pass
    total = sum(size for _, size, _ in entries.values())
    for _, (used, size, files) in sorted(entries.items(), key=lambda kv: kv[1][0]):
        if total <= limit or now - used < keep_recent_s:
            break
        if _used_since(files, used):    # a build hit it after the scan: it stays
            continue
        for path in files:
            try:
                path.unlink()
            except OSError:     # another process pruned it first
                pass
        total -= size
        freed += size
        removed += 1
    return CacheUsage(removed, freed)


def _used_since(files: list[Path], used: float) -> bool:
    for path in files:
        try:
            if path.stat().st_mtime > used:
                return True
        except OSError:
            pass
    return False


def clear(cache: Path) -> CacheUsage:
    """Delete every entry of the cache (what ``tensortune cache clear`` does)."""
    return prune(cache, 0, keep_recent_s=0.0)
