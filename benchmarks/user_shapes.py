"""Shapes beyond the suite that users bring (reductions over other axes, matrix-vector
products, a dense layer over a few rows, transposes, rows that are not whole vectors,
pooling), each tuned and timed
against PyTorch CPU in the same alternating rounds, its result checked against
PyTorch's.

Run: python benchmarks/user_shapes.py [--cases total,gemv] [--trials 64] [--seed 1]
         [--rounds 7]

Our kernels are timed by the runner's C loop, PyTorch's by Python loops (a call costs it
about a microsecond more); each one's best median over the rounds is kept. "called" is
our kernel called from Python as a user calls it (``kernel(*inputs)``, which checks
the arguments and allocates the outputs), timed by the same Python loop as PyTorch's;
"bound" is the kernel bound to its arrays once (``kernel.bind``), as a loop that refills
its inputs in place calls it.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import tensortune as tt
from tensortune import te
from tensortune.measure.builder import BuildInput, LocalBuilder
from tensortune.measure.runner import LocalRunner, RunInput
from tensortune.reference import random_inputs
from tensortune.tir.stmt import PrimFunc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.baselines import median_time, setup_torch  # noqa: E402


def row_sums(rows: int, n: int) -> PrimFunc:
    A = te.placeholder((rows, n), name="A")
    i = te.reduce_axis(n, name="i")
    S = te.compute((rows,), lambda r: te.sum(A[r, i], axis=i), name="S")
    return te.create_func([A, S], name="row_sums")


def channel_sums(N: int, C: int, H: int, W: int) -> PrimFunc:
    X = te.placeholder((N, C, H, W), name="X")
    n, y, x = (te.reduce_axis(N, name="n"), te.reduce_axis(H, name="y"),
               te.reduce_axis(W, name="x"))
    S = te.compute((C,), lambda c: te.sum(X[n, c, y, x], axis=[n, y, x]), name="S")
    return te.create_func([X, S], name="channel_sums")


def column_sums(M: int, N: int) -> PrimFunc:
    A = te.placeholder((M, N), name="A")
    i = te.reduce_axis(M, name="i")
    S = te.compute((N,), lambda j: te.sum(A[i, j], axis=i), name="S")
    return te.create_func([A, S], name="column_sums")


def middle_mean(B: int, M: int, N: int) -> PrimFunc:
    A = te.placeholder((B, M, N), name="A")
    i = te.reduce_axis(M, name="i")
    S = te.compute((B, N), lambda b, j: te.sum(A[b, i, j], axis=i), name="S")
    O = te.compute((B, N), lambda b, j: S[b, j] * (1.0 / M), name="O")
    return te.create_func([A, O], name="middle_mean")


def gemv(M: int, K: int) -> PrimFunc:
    A = te.placeholder((M, K), name="A")
    x = te.placeholder((K,), name="x")
    k = te.reduce_axis(K, name="k")
    y = te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), name="y")
    return te.create_func([A, x, y], name="gemv")


def vecmat(K: int, N: int) -> PrimFunc:
    x = te.placeholder((K,), name="x")
    A = te.placeholder((K, N), name="A")
    k = te.reduce_axis(K, name="k")
    y = te.compute((N,), lambda j: te.sum(x[k] * A[k, j], axis=k), name="y")
    return te.create_func([x, A, y], name="vecmat")


def decode_scores(H: int, L: int, D: int) -> PrimFunc:
    q = te.placeholder((H, D), name="q")
    K = te.placeholder((H, L, D), name="K")
    d = te.reduce_axis(D, name="d")
    S = te.compute((H, L), lambda h, j: te.sum(q[h, d] * K[h, j, d], axis=d), name="S")
    return te.create_func([q, K, S], name="decode_scores")


def transpose(M: int, N: int) -> PrimFunc:
    A = te.placeholder((M, N), name="A")
    T = te.compute((N, M), lambda j, i: A[i, j], name="T")
    return te.create_func([A, T], name="transpose")


def max_pool(C: int, H: int, W: int) -> PrimFunc:
    X = te.placeholder((1, C, H, W), name="X")
    Ho, Wo = (H - 3) // 2 + 1, (W - 3) // 2 + 1
    ry, rx = te.reduce_axis(3, name="ry"), te.reduce_axis(3, name="rx")
    O = te.compute((1, C, Ho, Wo), lambda n, c, i, j: te.max(
        X[n, c, i * 2 + ry, j * 2 + rx], axis=[ry, rx]), name="O")
    return te.create_func([X, O], name="max_pool")


def axpy_int(M: int, N: int) -> PrimFunc:
    A = te.placeholder((M, N), name="A", dtype="int32")
    B = te.placeholder((M, N), name="B", dtype="int32")
    C = te.compute((M, N), lambda i, j: A[i, j] * 3 + B[i, j], name="C")
    return te.create_func([A, B, C], name="axpy_int")


def gelu(M: int, N: int) -> PrimFunc:
    X = te.placeholder((M, N), name="X")
    Y = te.compute((M, N), lambda i, j: 0.5 * X[i, j] * (1.0 + te.tanh(0.7978845608 * (
        X[i, j] + 0.044715 * X[i, j] * X[i, j] * X[i, j]))), name="Y")
    return te.create_func([X, Y], name="gelu")


# name: (what it is, the function, PyTorch on the same inputs as tensors)
Case = tuple[str, Callable[[], PrimFunc], Callable[[list], object]]


def _cases() -> dict[str, Case]:
    import torch
    F = torch.nn.functional
    return {
        "total": ("sum of 2^20 floats", lambda: row_sums(1, 1 << 20),
                  lambda t: t[0].sum().reshape(1)),
        "rows3": ("row sums of 3 x 2^18", lambda: row_sums(3, 1 << 18),
                  lambda t: t[0].sum(1)),
        "chansum": ("per-channel sum of 8 x 64 x 56 x 56 over N, H, W",
                    lambda: channel_sums(8, 64, 56, 56), lambda t: t[0].sum((0, 2, 3))),
        "colsum": ("column sums of 4096 x 512", lambda: column_sums(4096, 512),
                   lambda t: t[0].sum(0)),
        "colmean": ("mean over axis 1 of 8 x 197 x 768", lambda: middle_mean(8, 197, 768),
                    lambda t: t[0].mean(1)),
        "gemv": ("`A x`, 4096 x 4096", lambda: gemv(4096, 4096), lambda t: t[0] @ t[1]),
        "gemv1k": ("`A x`, 1024 x 1024", lambda: gemv(1024, 1024), lambda t: t[0] @ t[1]),
        "vecmat": ("`x^T A`, 4096 x 4096", lambda: vecmat(4096, 4096),
                   lambda t: t[0] @ t[1]),
        "dense1": ("dense + bias + ReLU, 1 x 768 -> 3072",
                   lambda: tt.workloads.get("dense", M=1),
                   lambda t: torch.relu(t[0] @ t[1].T + t[2])),
        "dense4": ("dense + bias + ReLU, 4 x 768 -> 3072",
                   lambda: tt.workloads.get("dense", M=4),
                   lambda t: torch.relu(t[0] @ t[1].T + t[2])),
        "decode": ("attention scores of one query, 12 heads x 1024 x 64",
                   lambda: decode_scores(12, 1024, 64),
                   lambda t: (t[1] @ t[0].unsqueeze(2)).squeeze(2)),
        "transpose": ("transpose 1024 x 1024", lambda: transpose(1024, 1024),
                      lambda t: t[0].t().contiguous()),
        "maxpool": ("max pool 3x3 stride 2, 64 x 113 x 113", lambda: max_pool(64, 113, 113),
                    lambda t: F.max_pool2d(t[0], 3, 2)),
        "gelu": ("GELU (tanh) over 64 x 1001", lambda: gelu(64, 1001),
                 lambda t: F.gelu(t[0], approximate="tanh")),
        "smx": ("softmax over 64 x 1001", lambda: tt.workloads.get("smx", M=64, N=1001),
                lambda t: torch.softmax(t[0], 1)),
        "lnm": ("layer norm over 64 x 1001", lambda: tt.workloads.get("lnm", M=64, N=1001),
                lambda t: F.layer_norm(t[0], (t[0].shape[1],), t[1], t[2], 1e-5)),
        "smx1000": ("softmax over 512 x 1000 (a 1000-class head)",
                    lambda: tt.workloads.get("smx", M=512, N=1000),
                    lambda t: torch.softmax(t[0], 1)),
        "lnm1000": ("layer norm over 512 x 1000",
                    lambda: tt.workloads.get("lnm", M=512, N=1000),
                    lambda t: F.layer_norm(t[0], (t[0].shape[1],), t[1], t[2], 1e-5)),
        "head1000": ("dense + bias + ReLU, 64 x 512 -> 1000",
                     lambda: tt.workloads.get("dense", M=64, K=512, N=1000),
                     lambda t: torch.relu(t[0] @ t[1].T + t[2])),
        "int32": ("`3 A + B` on int32, 1024 x 1000", lambda: axpy_int(1024, 1000),
                  lambda t: t[0] * 3 + t[1]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--cases", default=None, help="comma-separated; default: all")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("user_shapes.py compares with PyTorch: pip install torch==2.13.0")
    target = tt.Target.host()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {target}")
    print(setup_torch(target.cores))
    cases = _cases()
    names = args.cases.split(",") if args.cases else list(cases)
    unknown = [n for n in names if n not in cases]
    if unknown:
        sys.exit(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(cases)}")
    print("| case | workload | ours (us) | called (us) | bound (us) | PyTorch (us) | "
          "PyTorch / ours | PyTorch / called | PyTorch / bound | largest difference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        row(name, cases[name], args, target)


def row(name: str, case: Case, args: argparse.Namespace, target: tt.Target) -> None:
    import torch

    what, make, ref = case
    func = make()
    x = random_inputs(func, seed=args.seed)
    res = tt.tune(func, trials=args.trials, seed=args.seed)
    sch = res.schedule()
    lib = LocalBuilder(target).build([BuildInput(sch.func)])[0]
    if lib.lib_path is None:
        print(f"| {name} | {what} | build failed: {lib.error_msg} | | | | | | | |", flush=True)
        return
    t = [torch.from_numpy(a) for a in x]
    kernel = res.kernel
    bound = kernel.bind(*x)
    ours = called = bound_t = theirs = float("inf")
    with LocalRunner() as runner:
        for _ in range(args.rounds):
            r = runner.run([RunInput(lib.lib_path, sch.func, "best", x)])[0]
            if r.ok:
                ours = min(ours, statistics.median(r.latencies))
            theirs = min(theirs, median_time(lambda: ref(t)))
            called = min(called, median_time(lambda: kernel(*x)))
            bound_t = min(bound_t, median_time(bound))
    diff = float(np.abs(kernel(*x) - np.asarray(ref(t))).max())
    print(f"| {name} | {what} | {ours * 1e6:.1f} | {called * 1e6:.1f} | {bound_t * 1e6:.1f} | "
          f"{theirs * 1e6:.1f} | {theirs / ours:.2f}x | {theirs / called:.2f}x | "
          f"{theirs / bound_t:.2f}x | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
