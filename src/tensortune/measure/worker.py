"""The runner's worker process: load a kernel library, check its output against the
reference, time it in C. Runs in a separate process so a crash or hang cannot take the
tuner down; it only ever receives plain data over a pipe.
"""

from __future__ import annotations

import ctypes
import math
import time
from typing import Any

import numpy as np

# A candidate whose checking call alone took over COLD_STOP times the early-stop cutoff
# is not timed at all: that call is its one timing. A first call is slower than the
# warm ones by its page faults and cold caches (over one C2D run's 58 programs, a median
# first call of 1.43 ms against 1.23 ms for the second), so a kernel this slow is not
# near the best; a C2D search's slowest candidates ran for over a second a call, and
# each such made three calls.
COLD_STOP = 2.0
# The checking call's time picks the calls per timing when it lasts at least this long
# (seconds); a shorter one is dominated by the call's own overhead and cold caches, and
# ``tt_time`` calibrates with a call of its own (a cheap one, at that length).
CALIBRATED_BY_CHECK = 1e-3


def _time(lib: Any, args: Any, repeat: int, min_repeat_s: float, flush: int,
          number: int = 0, suffix: str = "") -> tuple[list[float], int]:
    """``repeat`` timings of a kernel already run once, and the calls per timing
    (``number``; 0: picked so a timing lasts ``min_repeat_s``)."""
    fn = getattr(lib, "tt_time" + suffix)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_long,
                   ctypes.c_void_p]
    fn.restype = ctypes.c_int
    out = (ctypes.c_double * repeat)()
    rc = fn(args, number, repeat, min_repeat_s, flush, out)
    if rc < 0:
        raise RuntimeError("kernel returned an error while being timed")
    return list(out), rc


def unwritten(dtype: np.dtype) -> float | int | bool:
    """What an output is filled with before the kernel runs, so that an element it never
    writes fails the check: NaN for floats (non-finite), the least value of an integer
    type (no reference of small inputs reaches it; integer outputs had NaN, which NumPy
    cannot store in them, and every candidate failed with "cannot convert float NaN").
    A boolean output has no value a result cannot take: False."""
    if np.issubdtype(dtype, np.floating):
        return float("nan")
    if np.issubdtype(dtype, np.integer):
        return int(np.iinfo(dtype).min)
    return False


def run_one(msg: dict, cache: dict) -> dict:
    """Check and time the kernel ``msg`` names, then free the buffers it keeps between
    calls (a worker loads hundreds of libraries and never unloads one). A message with
    ``keep`` (``LocalRunner.probe``: the load guard's reference) keeps them: its readings
    are taken without a call of their own, and one that faulted its buffers in again
    would read slow."""
    if msg.get("inputs") is not None:   # kept first: a later message of the key has none
        cache[msg["key"]] = (msg["inputs"], msg["expected"])
    suffix = msg.get("suffix", "")
    try:
        lib = ctypes.CDLL(msg["lib_path"])
        fn = getattr(lib, "tt_packed" + suffix)
    except (OSError, AttributeError) as e:
        return {"error_kind": "load", "error_msg": str(e)}
    try:
        return _run_one(msg, cache, lib, fn, suffix)
    finally:
        release = None if msg.get("keep") else getattr(lib, "tt_release" + suffix, None)
        if release is not None:
            release()


def _run_one(msg: dict, cache: dict, lib: Any, fn: Any, suffix: str) -> dict:
    from ..kernel import aligned_empty
    from ..reference import CheckError, check_close

    inputs, expected = cache[msg["key"]]
    outs = []
    for shape, dtype in msg["out_specs"]:
        o = aligned_empty(tuple(shape), dtype)
        o.fill(unwritten(o.dtype))
        outs.append(o)
    arrays = list(inputs) + outs
    args = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_int32
    number = int(msg.get("number") or 0)
    check = expected is not None and msg.get("check", True)
    if number and not check:
        # A probe of a kernel checked before, with its calls per timing known (the load
        # guard's reference): no call beyond the timing's own.
        lat, _ = _time(lib, args, msg["repeat"], msg["min_repeat_s"], msg["flush_bytes"],
                       number, suffix)
        return {"latencies": lat}
    t0 = time.perf_counter()
    if fn(args) != 0:
        return {"error_kind": "runtime_error", "error_msg": "kernel returned non-zero"}
    first = time.perf_counter() - t0
    if hasattr(lib, "tt_packs_once" + suffix):
        # Its first call ran the weights' stages, which its timing leaves out
        # (codegen/packed_once.py), and took 1.7-2.9x the second on a 128 x 3072 x 768
        # dense layer, 10x on a 768 x 768 one: against COLD_STOP, the search lost its
        # best programs (that larger layer: 2.24-2.39 ms found, 1.94-2.03 since;
        # RESULTS.md).
        t0 = time.perf_counter()
        fn(args)
        first = time.perf_counter() - t0
    if check:
        for i, (o, ref) in enumerate(zip(outs, expected)):
            try:
                check_close(o, ref, f"output {i}")
            except CheckError as e:
                kind = "non_finite" if "non-finite" in str(e) else "wrong_result"
                return {"error_kind": kind, "error_msg": str(e)}
    cutoff = msg.get("cutoff")
    if cutoff is not None and first > COLD_STOP * cutoff:
        return {"latencies": [first]}
    if not number and first >= CALIBRATED_BY_CHECK:
        number = min(100000, max(1, math.ceil(msg["min_repeat_s"] / first)))
    if cutoff is not None:
        # One repeat first: a candidate far slower than the best so far needs no precise
        # figure, and most candidates of a search are such (tinygrad's early stop).
        probe, number = _time(lib, args, 1, msg["min_repeat_s"], msg["flush_bytes"], number,
                              suffix)
        if probe[0] > cutoff or msg["repeat"] == 1:
            return {"latencies": probe}
        # The probe counts as the first repeat; the rest keep its calls per timing (no
        # second calibration: a GMM kernel's timing made 14 calls where 11 do).
        rest, _ = _time(lib, args, msg["repeat"] - 1, msg["min_repeat_s"], msg["flush_bytes"],
                        number, suffix)
        return {"latencies": probe + rest}
    lat, _ = _time(lib, args, msg["repeat"], msg["min_repeat_s"], msg["flush_bytes"], number,
                   suffix)
    return {"latencies": lat}


def worker_main(conn: Any) -> None:
    from .process import serve

    cache: dict = {}
    serve(conn, lambda msg: run_one(msg, cache),
          lambda e: {"error_kind": "runtime_error", "error_msg": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    import sys
    from multiprocessing.connection import Connection

    worker_main(Connection(int(sys.argv[1])))
