"""Compile C source to a shared library with the system compiler, cached by content.

The cache key is the source plus the compiler command line and version, so a changed flag
or compiler never reuses a stale library.

Example:
    >>> path = compile_source(src, Target.host())      # .../kernels/<sha>.so
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from ..errors import BuildError, TensorTuneError
from .kernel_cache import touch
from .target import Target

# Names the kernel cache's directory itself, in place of the default under the user's
# cache: a bigger disk, or a cache of one's own (the benchmark suite gives each run a
# fresh one, so that no build is skipped on a library an earlier run left behind).
CACHE_DIR_ENV = "TENSORTUNE_KERNEL_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$TENSORTUNE_KERNEL_CACHE_DIR`` when set, else ``tensortune/kernels`` under
    ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    own = os.environ.get(CACHE_DIR_ENV)
    if own:
        return Path(own)
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
        touch(lib)      # used now: the cache's pruning keeps it longest
        return lib
    src = cache / f"{key}.c"
    src.write_text(source)
    # Build under a temporary name and rename: concurrent builders never see half a file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
    os.close(fd)
    # -pipe: cc1 hands its assembly to as through a pipe, not a temporary file, so a
    # build killed on its timeout leaves no file behind. The source declares the C
    # library functions it calls (codegen/c.py); one it missed would be taken to return
    # int, hence the error. Neither flag changes what a program that builds compiles to.
    cmd = [target.cc, *target.flags, "-std=gnu99", "-pipe",
           "-Werror=implicit-function-declaration", "-shared", "-fPIC", "-o", tmp, str(src),
           "-lm"]
    try:
        returncode, stderr = _run_group(cmd, timeout)
    except subprocess.TimeoutExpired as e:
        os.unlink(tmp)
        raise BuildError(f"the C compiler did not finish within {timeout:.0f} s "
                         f"(source kept at {src})") from e
    if returncode != 0:
        os.unlink(tmp)
        err = "\n".join(stderr.splitlines()[:30])
        raise BuildError(f"the C compiler failed on {src}:\n{err}")
    os.replace(tmp, lib)
    return lib


def _run_group(cmd: list[str], timeout: float) -> tuple[int, str]:
    """Run ``cmd`` in a process group of its own; on timeout kill the whole group.

    The driver ``gcc`` runs ``cc1``, ``as`` and ``ld`` as its children. Killing only the
    driver (what ``subprocess.run`` does) leaves ``cc1`` running on a core for as long as
    it takes, beside the candidates that come after it.
    """
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except OSError as e:
        # Not a failing candidate (a BuildError is recorded and the search goes on): no
        # candidate can be built, so the run stops here and says why.
        raise TensorTuneError(f"cannot run the C compiler {cmd[0]!r} ({e.strerror or e}); "
                              "install gcc (Debian/Ubuntu: apt install gcc) or set CC to "
                              "a gcc on this machine") from e
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:      # the group ended between the timeout and the kill
            pass
        proc.communicate()
        raise
    return proc.returncode, stderr
