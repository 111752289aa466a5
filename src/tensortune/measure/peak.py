"""The machine's limits, measured: float32 FMA throughput, memory bandwidth, and the
read bandwidth of data that stays in the caches.

FMA: 12 independent vector accumulator chains per thread (enough to cover FMA latency on
two pipes), in native-width GCC vector types, on 1 thread and on all cores.
Bandwidth: a triad a[i] = b[i] + s * c[i] over arrays far larger than the caches, counting
3 x 4 bytes per element (plus write-allocate not counted, as STREAM does).
Read bandwidth: a sum of squares over one array read again and again (8 vector chains per
thread), so an array that fits a cache level is read from that level, as a kernel timed
in a loop reads its inputs: the limit of a memory-bound kernel (NRM, SMX, LNM) of that
footprint, where the FMA peak says nothing.
Register kernel: the inner loop of a register-tiled matmul (``rows`` broadcasts and
``vecs`` vector loads feeding rows x vecs accumulators per step, all data in L1), written
the way the code generator writes it and compiled with the target's flags. It is the
ceiling of a kernel built from loads and FMAs on this machine with this compiler, which
can sit below the FMA peak where loads compete with the FMAs.

Run: python -m tensortune.measure.peak
"""

from __future__ import annotations

import ctypes
import time

from ..codegen import Target, compile_source

SRC = r"""
#include <stdlib.h>
#include <omp.h>
typedef float vf __attribute__((vector_size(%(VB)d)));
#define LANES %(LANES)d
double fma_flops(long iters, int threads) {
  double total = 0;
  #pragma omp parallel num_threads(threads) reduction(+:total)
  {
    vf x, y;
    for (int l = 0; l < LANES; ++l) { x[l] = 1.0f + 1e-7f * l; y[l] = 0.999999f; }
    /* Distinct starting values: chains that start equal are one chain to gcc, which then
       computes it once (with all twelve at 0 it kept 7 of the 12 FMAs and the peak read
       12/7 too high). The asm keeps every chain in a register of its own. */
    vf a0 = x * 0.1f, a1 = x * 0.2f, a2 = x * 0.3f, a3 = x * 0.4f, a4 = x * 0.5f,
       a5 = x * 0.6f, a6 = x * 0.7f, a7 = x * 0.8f, a8 = x * 0.9f, a9 = x * 1.1f,
       a10 = x * 1.2f, a11 = x * 1.3f;
    for (long i = 0; i < iters; ++i) {
      a0 = a0 * y + x; a1 = a1 * y + x; a2 = a2 * y + x; a3 = a3 * y + x;
      a4 = a4 * y + x; a5 = a5 * y + x; a6 = a6 * y + x; a7 = a7 * y + x;
      a8 = a8 * y + x; a9 = a9 * y + x; a10 = a10 * y + x; a11 = a11 * y + x;
      __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5),
                       "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    vf s = a0+a1+a2+a3+a4+a5+a6+a7+a8+a9+a10+a11;
    float t = 0; for (int l = 0; l < LANES; ++l) t += s[l];
    total += t > 1e30f ? 1 : 0;
  }
  return total;
}
void triad(float* restrict a, const float* restrict b, const float* restrict c, long n,
           int threads) {
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
}
double sumsq(const float* a, long n, int threads, int reps) {
  double total = 0;
  #pragma omp parallel num_threads(threads) reduction(+:total)
  {
    /* Each thread reads its own contiguous part, as the static schedule of a kernel's
       parallel loop does, ``reps`` times in one parallel region, so that starting the
       threads is not counted as reading (it was most of the time of a 12-KiB pass).
       8 chains cover the FMA latency, so loads set the pace. */
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    long per = n / nt / (8 * LANES) * (8 * LANES);
    const float* p = a + t * per;
    vf s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};
    for (int r = 0; r < reps; ++r)
    for (long i = 0; i < per; i += 8 * LANES) {
      vf v0, v1, v2, v3, v4, v5, v6, v7;
      __builtin_memcpy(&v0, p + i, sizeof v0);
      __builtin_memcpy(&v1, p + i + LANES, sizeof v0);
      __builtin_memcpy(&v2, p + i + 2 * LANES, sizeof v0);
      __builtin_memcpy(&v3, p + i + 3 * LANES, sizeof v0);
      __builtin_memcpy(&v4, p + i + 4 * LANES, sizeof v0);
      __builtin_memcpy(&v5, p + i + 5 * LANES, sizeof v0);
      __builtin_memcpy(&v6, p + i + 6 * LANES, sizeof v0);
      __builtin_memcpy(&v7, p + i + 7 * LANES, sizeof v0);
      s0 += v0 * v0; s1 += v1 * v1; s2 += v2 * v2; s3 += v3 * v3;
      s4 += v4 * v4; s5 += v5 * v5; s6 += v6 * v6; s7 += v7 * v7;
    }
    vf s = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    double u = 0; for (int l = 0; l < LANES; ++l) u += s[l];
    total += u;
  }
  return total;
}
void fill(float* a, long n, int threads) {
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < n; ++i) a[i] = (float)(i & 1023);
}
"""


def _lib(target: Target) -> ctypes.CDLL:
    lanes = target.lanes("float32")
    lib = ctypes.CDLL(str(compile_source(SRC % {"VB": lanes * 4, "LANES": lanes}, target)))
    lib.fma_flops.argtypes = [ctypes.c_long, ctypes.c_int]
    lib.fma_flops.restype = ctypes.c_double
    lib.triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_int]
    lib.fill.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    lib.sumsq.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int]
    lib.sumsq.restype = ctypes.c_double
    return lib


def fma_peak(threads: int, target: Target | None = None, seconds: float = 0.5,
             rounds: int = 5) -> float:
    """Float32 GFLOP/s with ``threads`` threads: the best of at least ``rounds`` timings
    of a few milliseconds each, as many as fit in about ``seconds``.

    Short timings because on a shared host the scheduler takes the core away for a few
    milliseconds at a time: beside two busy processes on the 2-core AVX-512 host, timings
    of 16 ms and more read 218-241 GFLOP/s on one thread and 241-242 on two, the best of
    2-ms ones 242-249 and 468 (quiet: 242 and 484), and the kernels a search times are
    milliseconds long too.

    Example:
        >>> fma_peak(1)      # 242 on one core of that host
    """
    t = target or Target.host()
    lib = _lib(t)
    flops_per_iter = 12 * 2 * t.lanes("float32") * threads

    def timed(iters: int) -> float:
        t0 = time.perf_counter()
        lib.fma_flops(iters, threads)
        return time.perf_counter() - t0

    iters = 20_000
    while (dt := timed(iters)) < 2e-3:   # size one timing to at least 2 ms
        iters *= 2
    best = min([dt] + [timed(iters) for _ in range(max(rounds, int(seconds / dt)))])
    return flops_per_iter * iters / best / 1e9


def bandwidth(threads: int, target: Target | None = None, mib: int = 512) -> float:
    """Best-of-5 triad GB/s with ``threads`` threads on three ``mib``-MiB arrays."""
    import numpy as np

    lib = _lib(target or Target.host())
    n = mib * (1 << 20) // 4
    arrs = [np.empty(n, dtype=np.float32) for _ in range(3)]
    for a in arrs:
        lib.fill(a.ctypes.data, n, threads)  # first touch by the same threads
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        lib.triad(arrs[0].ctypes.data, arrs[1].ctypes.data, arrs[2].ctypes.data, n, threads)
        best = max(best, 12 * n / (time.perf_counter() - t0) / 1e9)
    return best


def read_bandwidth(threads: int, nbytes: int, target: Target | None = None,
                   seconds: float = 0.3, rounds: int = 9) -> float:
    """GB/s of reading an array of ``nbytes`` bytes again and again with ``threads``
    threads (the best of at least ``rounds`` timings, as many as fit in ``seconds``,
    each of enough passes to read 64 MiB): from L2 when it fits there, from L3 when it
    fits that, else from memory. The array is first touched by the threads that read
    it, as a kernel's inputs are by its callers.

    Example:
        >>> read_bandwidth(2, 8 << 20)      # NRM's 8 MiB input, read from L3
    """
    import numpy as np

    t = target or Target.host()
    lib = _lib(t)
    n = max(nbytes // 4, 1 << 12)
    a = np.empty(n, dtype=np.float32)
    lib.fill(a.ctypes.data, n, threads)
    block = 8 * t.lanes("float32")
    per = n // threads // block * block   # what each thread of sumsq reads per pass
    reps = max(1, (64 << 20) // (4 * n))
    lib.sumsq(a.ctypes.data, n, threads, 1)      # warm the caches
    times: list[float] = []
    t_end = time.perf_counter() + seconds
    while len(times) < rounds or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        lib.sumsq(a.ctypes.data, n, threads, reps)
        times.append(time.perf_counter() - t0)
    return 4 * per * threads * reps / min(times) / 1e9


_KERNEL = r"""
#include <string.h>
#include <omp.h>
typedef float vf __attribute__((vector_size(%(VB)d)));
static inline vf ld(const float* p) { vf v; memcpy(&v, p, sizeof v); return v; }
__attribute__((noinline)) static void tile(const float* restrict a, const float* restrict b,
                                           float* restrict c, int k_len) {
%(DECL)s
  for (int k = 0; k < k_len; ++k) {
%(BODY)s
  }
%(STORE)s
}
double kernel_flops(long calls, int threads) {
  double sink = 0;
  #pragma omp parallel num_threads(threads) reduction(+:sink)
  {
    static __thread float a[%(ROWS)d * %(K)d] __attribute__((aligned(64)));
    static __thread float b[%(K)d * %(W)d] __attribute__((aligned(64)));
    float c[%(ROWS)d * %(W)d];
    for (int i = 0; i < %(ROWS)d * %(K)d; ++i) a[i] = 1e-3f * (i %% 7);
    for (int i = 0; i < %(K)d * %(W)d; ++i) b[i] = 1e-3f * (i %% 5);
    for (long n = 0; n < calls; ++n) tile(a, b, c, %(K)d);
    sink += c[0];
  }
  return sink;
}
"""


def l1_k(rows: int, width: int, target: Target) -> int:
    """The k steps (a power of two, 16 to 256) of a rows x ``width`` register tile whose A
    rows and B panel fill at most three quarters of L1d. At k = 256 a 5 x 64 tile's B
    panel is 64 KiB, over the 48 KiB L1d of the Intel Xeon host of 2026-11-29: read from
    L2 it ran at 169.5 GFLOP/s on one thread, against 181.9-189.9 at k = 128 (RESULTS.md).

    Example:
        >>> l1_k(5, 64, target)    # 128 with a 48 KiB L1d
    """
    k = 256
    while k > 16 and (rows + width) * k * 4 > target.l1d_bytes * 3 // 4:
        k //= 2
    return k


def register_kernel_peak(rows: int, vecs: int, threads: int, target: Target | None = None,
                         rounds: int = 5) -> float:
    """Best-of-``rounds`` GFLOP/s of a rows x (vecs vectors) register tile over k steps
    (A row-major [rows, k], B packed [k, vecs * lanes]), k sized so that both stay in L1
    (``l1_k``).

    Example:
        >>> register_kernel_peak(6, 2, threads=1)   # the AVX2 6x16 matmul tile
    """
    t = target or Target.host()
    lanes = t.lanes("float32")
    k_len = l1_k(rows, vecs * lanes, t)
    acc = [f"c{r}_{v}" for r in range(rows) for v in range(vecs)]
    decl = "\n".join(f"  vf {x} = {{0}};" for x in acc)
    body = "\n".join(f"    vf b{v} = ld(b + k * {vecs * lanes} + {v * lanes});"
                      for v in range(vecs))
    body += "\n" + "\n".join(
        f"    c{r}_{v} += a[{r} * {k_len} + k] * b{v};" for r in range(rows) for v in range(vecs))
    store = "\n".join(f"  memcpy(c + {i * lanes}, &{x}, sizeof {x});" for i, x in enumerate(acc))
    src = _KERNEL % {"VB": lanes * 4, "ROWS": rows, "W": vecs * lanes, "K": k_len,
                     "DECL": decl, "BODY": body, "STORE": store}
    lib = ctypes.CDLL(str(compile_source(src, t)))
    lib.kernel_flops.argtypes = [ctypes.c_long, ctypes.c_int]
    lib.kernel_flops.restype = ctypes.c_double
    calls, best = 2000, 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        lib.kernel_flops(calls, threads)
        dt = time.perf_counter() - t0
        best = max(best, 2 * rows * vecs * lanes * k_len * calls * threads / dt / 1e9)
        if dt < 0.1:
            calls *= 2
    return best


if __name__ == "__main__":
    tgt = Target.host()
    print(tgt)
    for th in sorted({1, tgt.cores}):
        print(f"{th} thread(s): FMA peak {fma_peak(th, tgt):7.1f} GFLOP/s, "
              f"triad {bandwidth(th, tgt):5.1f} GB/s, read " + ", ".join(
                  f"{read_bandwidth(th, mib << 20, tgt):.0f} GB/s at {mib} MiB"
                  for mib in (1, 8, 24, 256)))
    # Tiles that fit the register file: 16 vector registers on AVX2, 32 on AVX-512.
    shapes = ((5, 4), (6, 4), (8, 3), (14, 2)) if tgt.vector_bytes >= 64 else \
        ((6, 2), (4, 3), (3, 4), (8, 1))
    for rows, vecs in shapes:
        print(f"{rows}x{vecs * tgt.lanes('float32')} register kernel: " + ", ".join(
            f"{register_kernel_peak(rows, vecs, th, tgt):.1f} GFLOP/s on {th} thread(s)"
            for th in sorted({1, tgt.cores})))
