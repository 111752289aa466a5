"""TVM MetaSchedule on suite workloads at given trial budgets: an optional comparison.

Run with an interpreter that has TVM (it is not a tensortune dependency):
    pip install apache-tvm "apache-tvm-ffi==0.1.14.post1" xgboost psutil cloudpickle
    TVM_NUM_THREADS=2 python benchmarks/tvm_compare.py --workloads gmm,c2d --trials 64,256

Each (workload, budget) is tuned by ``tune_tir`` in a subprocess (tuning wall time and
trials per second are measured around it); the best schedule is then compiled and timed
in another fresh process (median of repeated runs). GFLOP/s use workloads.md's FLOPs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

FLOPS = {"gmm": 2.15e9, "dense": 6.04e8, "c2d": 2.31e8, "bmm": 2.52e7, "tbg": 2.52e7,
         "c1d": 1.26e7, "dep": 7.23e6, "nrm": 4.19e6, "smx": 2.6e6, "lnm": 3.1e6,
         "convlayer": 2.31e8}


def workload(name: str):
    from tvm import te

    def pad2(x, p):
        n, c, h, w = x.shape
        return te.compute((n, c, h + 2 * p, w + 2 * p), lambda a, b, y, z: te.if_then_else(
            te.all(y >= p, y < h + p, z >= p, z < w + p), x[a, b, y - p, z - p], 0.0),
            name="pad")

    def conv(x, w, oh, ow):
        rc = te.reduce_axis((0, w.shape[1]), "rc")
        ry = te.reduce_axis((0, 3), "ry")
        rx = te.reduce_axis((0, 3), "rx")
        return te.compute((1, w.shape[0], oh, ow), lambda n, k, y, z: te.sum(
            x[n, rc, y + ry, z + rx] * w[k, rc, ry, rx], axis=[rc, ry, rx]), name="conv")

    if name == "gmm":
        A, B = te.placeholder((1024, 1024), name="A"), te.placeholder((1024, 1024), name="B")
        k = te.reduce_axis((0, 1024), "k")
        return [A, B, te.compute((1024, 1024), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k))]
    if name == "dense":
        X, W = te.placeholder((128, 768), name="X"), te.placeholder((3072, 768), name="W")
        b = te.placeholder((3072,), name="b")
        k = te.reduce_axis((0, 768), "k")
        mm = te.compute((128, 3072), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k))
        return [X, W, b, te.compute((128, 3072), lambda i, j: te.max(mm[i, j] + b[j], 0.0))]
    if name in ("c2d", "convlayer"):
        c = 64 if name == "c2d" else 128
        h = 56 if name == "c2d" else 28
        x, w = te.placeholder((1, c, h, h), name="x"), te.placeholder((c, c, 3, 3), name="w")
        cv = conv(pad2(x, 1), w, h, h)
        if name == "c2d":
            return [x, w, te.compute(cv.shape, lambda *i: te.max(cv(*i), 0.0))]
        s, t = te.placeholder((c,), name="s"), te.placeholder((c,), name="t")
        return [x, w, s, t, te.compute(cv.shape, lambda n, k, y, z: te.max(
            cv[n, k, y, z] * s[k] + t[k], 0.0))]
    if name == "bmm":
        A, B = te.placeholder((12, 128, 64), name="A"), te.placeholder((12, 64, 128), name="B")
        k = te.reduce_axis((0, 64), "k")
        return [A, B, te.compute((12, 128, 128), lambda b, i, j: te.sum(
            A[b, i, k] * B[b, k, j], axis=k))]
    if name == "tbg":
        Q, K = te.placeholder((128, 12, 64), name="Q"), te.placeholder((128, 12, 64), name="K")
        d = te.reduce_axis((0, 64), "d")
        return [Q, K, te.compute((12, 128, 128), lambda h, i, j: te.sum(
            Q[i, h, d] * K[j, h, d], axis=d))]
    if name == "nrm":
        A = te.placeholder((8, 512, 512), name="A")
        i, j = te.reduce_axis((0, 512), "i"), te.reduce_axis((0, 512), "j")
        s = te.compute((8,), lambda b: te.sum(A[b, i, j] * A[b, i, j], axis=[i, j]))
        return [A, te.compute((8,), lambda b: te.sqrt(s[b]))]
    raise SystemExit(f"tvm_compare: no TVM definition of {name!r}; have {sorted(FLOPS)}")


def _target():
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
                              "num-cores": int(os.environ.get("TVM_NUM_THREADS", "2"))})


def tune_one(name: str, trials: int, work_dir: str) -> None:
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    mod = tvm.IRModule({"main": te.create_prim_func(workload(name))})
    t0 = time.perf_counter()
    ms.tune_tir(mod, _target(), work_dir, max_trials_global=trials,
                num_trials_per_iter=min(64, trials))
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def time_one(name: str, work_dir: str) -> None:
    import numpy as np
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    mod = tvm.IRModule({"main": te.create_prim_func(workload(name))})
    db = ms.database.JSONDatabase(work_dir=work_dir)
    sch = ms.tir_integration.compile_tir(db, mod, _target())
    lib = tvm.compile(sch.mod, target=_target())
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.random.uniform(-1, 1, [int(d) for d in t.shape])
                               .astype("float32"), dev) for t in workload(name)]
    fn = lib["main"]
    fn(*args)
    times = []
    for _ in range(7):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.05:
            fn(*args)
            n += 1
        times.append((time.perf_counter() - t0) / n)
    print(json.dumps({"median": sorted(times)[3]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="gmm,c2d")
    ap.add_argument("--trials", default="64,256")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, name, rest = args.child
        if kind == "tune":
            trials, work_dir = rest.split(":", 1)
            tune_one(name, int(trials), work_dir)
        else:
            time_one(name, rest)
        return
    print("| workload | trials | TVM GFLOP/s | tune s | trials/s |\n|---|---|---|---|---|")
    for name in args.workloads.split(","):
        for trials in [int(t) for t in args.trials.split(",")]:
            work = tempfile.mkdtemp(prefix=f"tvm-{name}-{trials}-")
            out = subprocess.run([sys.executable, __file__, "--child", "tune", name,
                                  f"{trials}:{work}"], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"| {name} | {trials} | failed: {out.stderr.strip()[-200:]} | | |")
                continue
            secs = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
            res = subprocess.run([sys.executable, __file__, "--child", "time", name, work],
                                 capture_output=True, text=True)
            med = json.loads(res.stdout.strip().splitlines()[-1])["median"]
            print(f"| {name.upper()} | {trials} | {FLOPS[name] / med / 1e9:.1f} | {secs:.0f} | "
                  f"{trials / secs:.2f} |", flush=True)


if __name__ == "__main__":
    main()
