"""The load guard (a quiet reading before each batch) and the machine-peak kernels it and
the reports compare against."""

import numpy as np
import pytest

import tensortune as tt
from tensortune.measure import LoadGuard, RunInput

FUNC = tt.workloads.get("gmm", M=16, N=16, K=8)


class _ScriptedRunner:
    """Probe readings from a list (the last one repeats)."""

    def __init__(self, readings: list[float]) -> None:
        self.readings, self.calls = readings, 0

    def probe(self, inp, min_repeat_ms=5.0, number=0):
        self.calls += 1
        self.number = number
        return self.readings[min(self.calls, len(self.readings)) - 1]


def test_load_guard_waits_for_a_quiet_reading_within_its_budget():
    ref = RunInput("lib.so", FUNC, "gmm", [], None)
    guard = LoadGuard(step=2**-10, budget=10 * 2**-10)   # exact in binary
    assert guard.wait(_ScriptedRunner([1.0])) == 1.0       # no reference yet: no probe
    guard.reference(ref, 1e-3)
    guard.new_batch()
    blip = _ScriptedRunner([1.6e-3, 1.0e-3])               # one slow reading is read again
    assert guard.wait(blip) == 1.0 and blip.calls == 2 and guard.waited == 0
    busy_then_quiet = _ScriptedRunner([3e-3, 2e-3, 1.1e-3])
    assert guard.wait(busy_then_quiet) == pytest.approx(1.1)
    assert busy_then_quiet.calls == 3 and guard.waited == 2**-10 and guard.busy == 0
    always_busy = _ScriptedRunner([2e-3])
    assert guard.wait(always_busy) == pytest.approx(2.0)
    assert always_busy.calls == 2 + 2 * 9 and guard.busy == 1   # 9 steps of budget left
    assert guard.wait(always_busy) == pytest.approx(2.0)        # spent: one reading
    assert always_busy.calls == 22
    guard.new_batch()
    faster = _ScriptedRunner([0.5e-3])                     # a quieter reading re-bases
    assert guard.wait(faster) == 1.0
    assert guard.wait(_ScriptedRunner([0.6e-3])) == pytest.approx(1.2)


def test_register_kernel_ceiling_is_below_the_fma_peak():
    """The load+FMA ceiling counts its FLOPs right: a kernel that also loads cannot beat
    the register-only FMA peak by more than timing noise, and it does real work."""
    from tensortune.measure.peak import fma_peak, register_kernel_peak

    # Alternated, best of each: another process on the core lowers whichever reading it
    # overlaps, never raises one, so the best readings are the two kernels' own speeds.
    peaks, tiles = [], []
    for _ in range(3):
        peaks.append(fma_peak(1, seconds=0.1, rounds=1))
        tiles.append(register_kernel_peak(6, 2, threads=1, rounds=1))
    peak, tile = max(peaks), max(tiles)
    assert 0.1 * peak < tile < 1.3 * peak


def test_fma_peak_loop_keeps_all_twelve_chains():
    """The peak counts 12 FMAs per iteration, so the compiled loop must execute 12: chains
    that start equal were merged by gcc into 7 and the peak read 12/7 too high."""
    import re
    import subprocess

    from tensortune.codegen import Target
    from tensortune.measure.peak import SRC

    t = Target.host()
    if "fma" not in t.features:
        pytest.skip("the count reads x86 FMA instructions")
    lanes = t.lanes("float32")
    asm = subprocess.run([t.cc, *t.flags, "-S", "-x", "c", "-", "-o", "-"],
                         input=SRC % {"VB": lanes * 4, "LANES": lanes},
                         capture_output=True, text=True, check=True).stdout
    # The loop of the OpenMP-outlined fma_flops body: from its label to the back branch.
    fn = asm[asm.index("fma_flops._omp_fn"):]
    fn = fn[:fn.index("\t.size")]
    loops = re.findall(r"\n(\.L\d+):\n(.*?)\n\tj\w+\t\1\n", fn, re.S)
    fmas = max(body.count("vfmadd") for _, body in loops)
    assert fmas % 12 == 0 and fmas >= 12, f"the FMA loop holds {fmas} FMAs, not 12 per step"


@pytest.mark.parametrize("threads", [1, 2])
def test_read_bandwidth_kernel_reads_every_byte_it_counts(threads):
    """``read_bandwidth`` counts 4 bytes for each of ``per`` floats per thread and pass;
    the sum of squares it times must be over exactly those floats, ``reps`` times
    (random data, never zeros), or the GB/s would count bytes the loop skipped."""
    import ctypes

    from tensortune.codegen import Target
    from tensortune.measure.peak import _lib, read_bandwidth

    t = Target.host()
    lib = _lib(t)
    block = 8 * t.lanes("float32")
    n = 37 * block * threads + 5            # a ragged end the kernel must leave out
    a = np.random.default_rng(3).uniform(0.5, 1.5, n).astype(np.float32)
    per = n // threads // block * block
    want = float(np.sum(a[: per * threads].astype(np.float64) ** 2))
    for reps in (1, 3):
        got = lib.sumsq(a.ctypes.data_as(ctypes.c_void_p), n, threads, reps)
        assert got == pytest.approx(reps * want, rel=1e-5)
    gbs = read_bandwidth(threads, 1 << 16, t, seconds=0.01, rounds=2)
    assert np.isfinite(gbs) and gbs > 0


def test_load_guard_probes_with_the_calls_its_reference_time_asks_for():
    ref = RunInput("lib.so", FUNC, "gmm", [], None)
    guard = LoadGuard(probe_ms=5.0)
    for latency, number in [(1e-3, 5), (9.5e-3, 1), (3e-6, 1667), (0.0, 100000)]:
        guard.reference(ref, latency)
        runner = _ScriptedRunner([latency])
        guard.wait(runner)
        assert runner.number == number


def test_register_kernel_steps_keep_the_tile_operands_in_l1():
    """The ceiling is of data in L1: a 5 x 64 tile over 256 steps reads 69 KiB, so on a
    48 KiB L1d its k halves (once) and on 32 KiB twice; a 6 x 16 tile keeps 256 steps
    wherever 22 KiB fit in three quarters of L1d."""
    import dataclasses

    from tensortune.codegen import Target
    from tensortune.measure.peak import l1_k

    host = Target.host()
    for l1, wide, narrow in ((48 << 10, 128, 256), (32 << 10, 64, 256), (16 << 10, 32, 128)):
        t = dataclasses.replace(host, l1d_bytes=l1)
        assert l1_k(5, 64, t) == wide
        assert l1_k(6, 16, t) == narrow
        k = l1_k(5, 64, t)
        assert (5 + 64) * k * 4 <= l1 * 3 // 4 < (5 + 64) * 2 * k * 4
