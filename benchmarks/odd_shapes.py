"""Matmuls whose axes are not whole vectors (primes, 100, a 1000-class head), tuned with
and without the padded-lanes rewrite (``tensortune.rewrite.pad_lanes``), against NumPy and
PyTorch CPU, all timed in the same alternating rounds.

Run: python benchmarks/odd_shapes.py [--trials 64] [--shapes 97x131x67,100x100x100]
         [--seed 1] [--rounds 7]

Each shape is C = relu(A @ B + bias), A [M, K], B [K, N]. GFLOP/s count 2 M N K (the
padding is not work). Our kernels are timed by the runner's C loop, NumPy's and
PyTorch's by Python loops (a call costs them about a microsecond more), each one's best
median over the rounds kept.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import numpy as np

import tensortune as tt
from tensortune import te
from tensortune.measure.builder import BuildInput, LocalBuilder
from tensortune.measure.runner import LocalRunner, RunInput
from tensortune.reference import random_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.baselines import median_time, setup_torch  # noqa: E402

SHAPES = "97x131x67,100x100x100,1x1000x512,197x197x64"


def matmul_bias_relu(M: int, N: int, K: int) -> tt.PrimFunc:
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: te.maximum(C[i, j] + bias[j], 0.0), name="D")
    return te.create_func([A, B, bias, D], name=f"mm_{M}x{N}x{K}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    target = tt.Target.host()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {target}")
    print(setup_torch(target.cores))
    print("| M x N x K | padded | as written | NumPy | PyTorch | padded / as written | "
          "padded / NumPy | padded / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        M, N, K = (int(s) for s in shape.split("x"))
        row(M, N, K, args, target)


def row(M: int, N: int, K: int, args: argparse.Namespace, target: tt.Target) -> None:
    func = matmul_bias_relu(M, N, K)
    flops = 2.0 * M * N * K
    x = random_inputs(func, seed=args.seed)
    schs, tuned = [], []
    for rewrite in (True, False):
        res = tt.tune(func, trials=args.trials, seed=args.seed, rewrite=rewrite)
        tuned.append(res)
        schs.append(res.schedule())
    libs = LocalBuilder(target).build([BuildInput(s.func) for s in schs])
    fns = [lambda: np.maximum(x[0] @ x[1] + x[2], 0.0)]
    try:
        import torch

        t = [torch.from_numpy(a) for a in x]
        fns.append(lambda: torch.relu(t[0] @ t[1] + t[2]))
    except ImportError:
        pass
    best = [float("inf")] * (len(schs) + len(fns))
    with LocalRunner() as runner:
        for _ in range(args.rounds):
            for i, (sch, lib) in enumerate(zip(schs, libs)):
                if lib.lib_path is not None:
                    r = runner.run([RunInput(lib.lib_path, sch.func, "best", x)])[0]
                    if r.ok:
                        best[i] = min(best[i], statistics.median(r.latencies))
            for i, fn in enumerate(fns):
                best[len(schs) + i] = min(best[len(schs) + i], median_time(fn))
    g = [flops / s / 1e9 for s in best] + [float("nan")] * (4 - len(best))
    padded = "C_pad" in str(tuned[0].func)
    print(f"| {M} x {N} x {K} | {g[0]:.1f}{'' if padded else ' (no pad)'} | {g[1]:.1f} | "
          f"{g[2]:.1f} | {g[3]:.1f} | {g[0] / g[1]:.2f}x | {g[0] / g[2]:.2f}x | "
          f"{g[0] / g[3]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
