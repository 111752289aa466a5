"""TVM MetaSchedule on suite workloads at given trial budgets: an optional comparison.

Run with an interpreter that has TVM (it is not a tensortune dependency):
    pip install apache-tvm "apache-tvm-ffi==0.1.14.post1" xgboost psutil cloudpickle
    TVM_NUM_THREADS=2 python benchmarks/tvm_compare.py --workloads gmm,c2d --trials 64,256

Each workload is tuned once by ``tune_tir``, to the largest budget, in a subprocess
(tuning wall time and trials per second are measured around it). For each budget N the
best of its first N records is compiled in another fresh process (``TvmTimer``), as
tensortune's "best at N trials" is read from one run's history, and timed there one round
at a time: each round times every budget's kernel with TVM's own ``time_evaluator`` (three
loops of at least 20 ms, their median), as tensortune's runner times its kernels. The
suite (benchmarks/tune_suite.py) alternates these rounds with its own kernels' and the
baselines', so both sides of a ratio meet the host in the same state; run alone, the best
of seven rounds is kept. GFLOP/s use workloads.md's FLOPs. ``tune`` and
``checkpoint_timer`` (``checkpoint_dirs`` and a ``TvmTimer`` of them, the run's dirs
deleted after) are what the suite calls; ``run`` does both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

FLOPS = {"gmm": 2.15e9, "dense": 6.04e8, "c2d": 2.31e8, "bmm": 2.52e7, "c1d": 1.26e7,
         "c3d": 1.73e8, "grp": 5.78e7, "dil": 2.31e8, "dep": 7.23e6, "t2d": 5.14e7,
         "nrm": 4.19e6, "smx": 2.6e6, "lnm": 3.1e6, "convlayer": 2.31e8, "tbg": 2.52e7}


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
    if name in ("grp", "dil", "dep"):
        # Same definitions as tensortune's workloads (conv.py): pad, then correlate.
        c, groups, dil = {"grp": (64, 4, 1), "dil": (64, 1, 2), "dep": (128, 128, 1)}[name]
        x = te.placeholder((1, c, 56, 56), name="x")
        w = te.placeholder((c, c // groups, 3, 3), name="w")
        xp = pad2(x, dil)
        cg = c // groups
        rc = te.reduce_axis((0, cg), "rc")
        ry, rx = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
        return [x, w, te.compute((1, c, 56, 56), lambda n, k, y, z: te.sum(
            xp[n, k // cg * cg + rc, y + ry * dil, z + rx * dil] * w[k, rc, ry, rx],
            axis=[rc, ry, rx]), name="conv")]
    if name == "c1d":
        x, w = te.placeholder((1, 64, 256), name="x"), te.placeholder((128, 64, 3), name="w")
        xp = te.compute((1, 64, 258), lambda n, c, i: te.if_then_else(
            te.all(i >= 1, i < 257), x[n, c, i - 1], 0.0), name="pad")
        rc, rx = te.reduce_axis((0, 64), "rc"), te.reduce_axis((0, 3), "rx")
        return [x, w, te.compute((1, 128, 256), lambda n, k, i: te.sum(
            xp[n, rc, i + rx] * w[k, rc, rx], axis=[rc, rx]), name="conv")]
    if name == "c3d":
        x = te.placeholder((1, 16, 8, 28, 28), name="x")
        w = te.placeholder((32, 16, 3, 3, 3), name="w")
        xp = te.compute((1, 16, 10, 30, 30), lambda n, c, d, y, z: te.if_then_else(
            te.all(d >= 1, d < 9, y >= 1, y < 29, z >= 1, z < 29),
            x[n, c, d - 1, y - 1, z - 1], 0.0), name="pad")
        rc = te.reduce_axis((0, 16), "rc")
        rd, ry, rx = (te.reduce_axis((0, 3), n) for n in ("rd", "ry", "rx"))
        return [x, w, te.compute((1, 32, 8, 28, 28), lambda n, k, d, y, z: te.sum(
            xp[n, rc, d + rd, y + ry, z + rx] * w[k, rc, rd, ry, rx],
            axis=[rc, rd, ry, rx]), name="conv")]
    if name == "t2d":
        # Zero-insert by the stride, pad by R-1-p, correlate with the flipped kernel.
        x, w = te.placeholder((1, 64, 28, 28), name="x"), te.placeholder((64, 32, 4, 4), name="w")
        xd = te.compute((1, 64, 59, 59), lambda n, c, y, z: te.if_then_else(
            te.all(y >= 2, y < 57, z >= 2, z < 57, (y - 2) % 2 == 0, (z - 2) % 2 == 0),
            x[n, c, (y - 2) // 2, (z - 2) // 2], 0.0), name="dilate_pad")
        rc = te.reduce_axis((0, 64), "rc")
        ry, rx = te.reduce_axis((0, 4), "ry"), te.reduce_axis((0, 4), "rx")
        return [x, w, te.compute((1, 32, 56, 56), lambda n, k, y, z: te.sum(
            xd[n, rc, y + ry, z + rx] * w[rc, k, 3 - ry, 3 - rx], axis=[rc, ry, rx]),
            name="conv")]
    if name == "smx":
        X = te.placeholder((512, 1024), name="X")
        j, j2 = te.reduce_axis((0, 1024), "j"), te.reduce_axis((0, 1024), "j2")
        mx = te.compute((512,), lambda i: te.max(X[i, j], axis=j), name="rowmax")
        sm = te.compute((512,), lambda i: te.sum(te.exp(X[i, j2] - mx[i]), axis=j2),
                        name="rowsum")
        return [X, te.compute((512, 1024), lambda i, n: te.exp(X[i, n] - mx[i]) / sm[i])]
    if name == "lnm":
        X = te.placeholder((512, 768), name="X")
        g, b = te.placeholder((768,), name="gamma"), te.placeholder((768,), name="beta")
        j, j2 = te.reduce_axis((0, 768), "j"), te.reduce_axis((0, 768), "j2")
        tot = te.compute((512,), lambda i: te.sum(X[i, j], axis=j), name="rowsum")
        sq = te.compute((512,), lambda i: te.sum(
            (X[i, j2] - tot[i] / 768.0) * (X[i, j2] - tot[i] / 768.0), axis=j2), name="sqsum")
        return [X, g, b, te.compute((512, 768), lambda i, n: (X[i, n] - tot[i] / 768.0)
                                    / te.sqrt(sq[i] / 768.0 + 1e-5) * g[n] + b[n])]
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


def serve(name: str, dirs: list[str]) -> None:
    """Compile the best program of each tuning database in ``dirs``, print a ready line,
    then for each line read from stdin time every kernel once (``time_evaluator``: three
    loops of at least 20 ms, the median) and print their latencies as a JSON list."""
    import numpy as np
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    mod = tvm.IRModule({"main": te.create_prim_func(workload(name))})
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.random.uniform(-1, 1, [int(d) for d in t.shape])
                               .astype("float32"), dev) for t in workload(name)]
    timers = []
    for d in dirs:
        db = ms.database.JSONDatabase(work_dir=d)
        sch = ms.tir_integration.compile_tir(db, mod, _target())
        lib = tvm.compile(sch.mod, target=_target()).jit()
        lib["main"](*args)   # the warm-up run
        timers.append(lib.time_evaluator("main", dev, repeat=3, min_repeat_ms=20))
    print(json.dumps({"ready": len(timers)}), flush=True)
    for _ in sys.stdin:
        print(json.dumps([t(*args).median for t in timers]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
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
            serve(name, rest.split(","))
        return
    budgets = [int(t) for t in args.trials.split(",")]
    print("| workload | " + " | ".join(f"TVM GFLOP/s @{b}" for b in budgets)
          + " | tune s | trials/s |\n|" + "---|" * (len(budgets) + 3))
    for name in args.workloads.split(","):
        res = run(sys.executable, name, budgets)
        if isinstance(res, str):
            print(f"| {name} | failed: {res} |", flush=True)
        else:
            print(f"| {name.upper()} | " + " | ".join(f"{res.gflops[b]:.1f}" for b in budgets)
                  + f" | {res.seconds:.0f} | {res.trials_per_s:.2f} |", flush=True)


@dataclass
class TvmResult:
    gflops: dict[int, float]   # by budget: the best of the first N trials, re-timed
    seconds: float             # tuning wall time of the whole run, start-up included
    trials_per_s: float


@dataclass
class TvmTuned:
    work: str                  # MetaSchedule's work dir: its workload and records
    records: list[str]         # one line per measured trial, in the order measured
    seconds: float             # tuning wall time of the whole run, start-up included
    trials_per_s: float


def _env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    if threads is not None:  # TVM otherwise uses half the cores
        env["TVM_NUM_THREADS"] = str(threads)
    return env


def tune(python: str, name: str, trials: int, threads: int | None = None) -> TvmTuned | str:
    """Tune ``name`` with TVM MetaSchedule for ``trials`` trials under the interpreter
    ``python`` (one that has TVM), in a subprocess. A failure comes back as the tail of
    its error text, so a suite run goes on."""
    work = tempfile.mkdtemp(prefix=f"tvm-{name}-{trials}-")
    out = subprocess.run([python, __file__, "--child", "tune", name, f"{trials}:{work}"],
                         capture_output=True, text=True, env=_env(threads))
    if out.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        return out.stderr.strip()[-200:] or f"exit {out.returncode}"
    secs = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    with open(os.path.join(work, "database_tuning_record.json")) as f:
        records = f.readlines()
    return TvmTuned(work, records, secs, trials / secs)


def checkpoint_dirs(tuned: TvmTuned, budgets: list[int]) -> list[str]:
    """For each budget N, a tuning database holding the run's first N records, in the
    run's work dir (so that ``checkpoint_timer`` removes them with it)."""
    dirs = []
    for n in budgets:
        part = tempfile.mkdtemp(prefix=f"first{n}-", dir=tuned.work)
        shutil.copy(os.path.join(tuned.work, "database_workload.json"), part)
        with open(os.path.join(part, "database_tuning_record.json"), "w") as f:
            f.writelines(tuned.records[:n])
        dirs.append(part)
    return dirs


class TvmError(RuntimeError):
    pass


class TvmTimer:
    """The best kernels of TVM tuning databases, compiled in a process of their own
    (under an interpreter with TVM) and timed one round at a time, so that a caller can
    alternate them with other kernels.

    >>> with TvmTimer("/opt/tvm/bin/python", "gmm", dirs, threads=2) as t:  # doctest: +SKIP
    ...     t.round()          # seconds per call of each dir's best kernel
    [0.0101, 0.0097]
    """

    def __init__(self, python: str, name: str, dirs: list[str],
                 threads: int | None = None) -> None:
        # MetaSchedule's JSONDatabase creates its files in whatever dir it is given, the
        # current one for "": a dir that is not there is a caller's mistake.
        missing = [d for d in dirs if not d or not os.path.isdir(d)]
        if missing:
            raise TvmError(f"TvmTimer: no tuning database dir {missing[0]!r}; give the "
                           "dirs of checkpoint_dirs")
        # stderr to a file: TVM's warnings could fill a pipe nobody reads mid-round.
        self._err = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [python, __file__, "--child", "serve", name, ",".join(dirs)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True,
            env=_env(threads))
        self._read()   # the ready line, once every kernel is compiled

    def _read(self) -> object:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            self._err.seek(0)
            tail = self._err.read().strip()[-200:]
            raise TvmError(tail or f"exit {self._proc.returncode}")
        return json.loads(line)

    def round(self) -> list[float]:
        """Each kernel timed once: seconds per call, in the order of the dirs."""
        assert self._proc.stdin is not None
        self._proc.stdin.write("round\n")
        self._proc.stdin.flush()
        out = self._read()
        assert isinstance(out, list)
        return [float(v) for v in out]

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        self._proc.wait()
        self._err.close()

    def __enter__(self) -> TvmTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def checkpoint_timer(python: str, name: str, tuned: TvmTuned, budgets: list[int],
                     threads: int | None = None) -> Iterator[TvmTimer]:
    """A ``TvmTimer`` of the best kernel of ``tuned``'s first N records for each N in
    ``budgets``. The run's work dir (the checkpoint dirs in it) is deleted on the way
    out, whether the timer started or not: a suite run would otherwise leave 0.2-0.7 MB
    per workload in the temp dir."""
    try:
        with TvmTimer(python, name, checkpoint_dirs(tuned, budgets), threads) as timer:
            yield timer
    finally:
        shutil.rmtree(tuned.work, ignore_errors=True)


def run(python: str, name: str, budgets: list[int],
        threads: int | None = None, rounds: int = 7) -> TvmResult | str:
    """Tune ``name`` with TVM MetaSchedule for the largest of ``budgets`` trials under the
    interpreter ``python`` (one that has TVM); for each budget N, the best of the run's
    first N records is compiled and timed in a fresh process (the best of ``rounds``
    rounds, a pause between them), as the search's best after N trials. A failure comes
    back as the tail of its error text, so a suite run goes on.

    >>> run("/opt/tvm/bin/python", "gmm", [64, 256])      # doctest: +SKIP
    TvmResult(gflops={64: 85.5, 256: 115.6}, seconds=459.0, trials_per_s=0.56)
    """
    tuned = tune(python, name, max(budgets), threads)
    if isinstance(tuned, str):
        return tuned
    best = [float("inf")] * len(budgets)
    try:
        with checkpoint_timer(python, name, tuned, budgets, threads) as timer:
            for _ in range(rounds):
                best = [min(b, t) for b, t in zip(best, timer.round())]
                time.sleep(0.35)
    except TvmError as e:
        return str(e)
    gflops = {n: FLOPS[name] / t / 1e9 for n, t in zip(budgets, best)}
    return TvmResult(gflops, tuned.seconds, tuned.trials_per_s)


if __name__ == "__main__":
    main()
