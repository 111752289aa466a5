"""The kernels' workspace (``codegen/c_header.py``): buffers over the stack limit lie in a
block each thread keeps between calls, laid out as a stack frame, so calls after the first
make no page faults; concurrent calls, ``tt_release`` and kernels joined in one library
stay correct."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensortune as tt
from tensortune.codegen.joint import prefix
from tensortune.measure import BuildInput, LocalBuilder, LocalRunner, RunInput
from tensortune.measure.builder import write_c
from tensortune.reference import evaluate, random_inputs
from tensortune.rewrite.winograd import winograd
from tensortune.space.space_generator import PostOrderApply, sample


def _sites_in_parallel_loops(src: str) -> int:
    """Workspace buffers taken inside an ``omp parallel for`` loop of ``src``."""
    lines = src.splitlines()
    n = 0
    for i, line in enumerate(lines):
        if "TT_WS(" not in line or line.startswith(("#", "static")):
            continue
        ind = _indent(line)
        for j in range(i - 1, 0, -1):       # up through the lines that open its scopes
            if lines[j].strip() and _indent(lines[j]) < ind:
                if lines[j].lstrip().startswith("for") and "omp parallel" in lines[j - 1]:
                    n += 1
                    break
                ind = _indent(lines[j])
    return n


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@pytest.fixture(scope="module")
def drawn():
    """Full-size CONVLAYER, and programs of its Winograd form drawn from the default space
    with their C, the first of which takes a workspace buffer per thread (inside a
    parallel loop): the pattern whose memory glibc gave back and faulted in again at each
    of a fresh process's first calls."""
    target = tt.Target.host()
    gen = PostOrderApply.default(target)
    f = tt.workloads.get("convlayer")
    g = winograd(f)
    space = gen.generate(g)[0]
    draws = []
    for seed in range(40):
        s = sample(g, space, seed, gen.postprocs)
        if s is not None:
            draws.append((s.func, write_c(lambda s=s: s.func, target)[0]))
    draws.sort(key=lambda d: _sites_in_parallel_loops(d[1]) == 0)
    assert draws and _sites_in_parallel_loops(draws[0][1]), "no draw of 40 has one"
    return f, draws


@pytest.fixture(scope="module")
def case(drawn):
    f, _ = drawn
    ins = random_inputs(f)
    return ins, evaluate(f, ins)[0]


FAULTS = r"""
import ctypes, resource, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2:]]
rng = np.random.default_rng(0)
arrs = [rng.random(s, dtype=np.float32) for s in shapes]
args = (ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs])
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert lib.tt_packed(args) == 0
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(" ".join(map(str, faults)))
"""


def test_calls_after_the_first_fault_no_page_in_a_fresh_process(drawn):
    _, [(func, _), *_] = drawn
    k = tt.build(func)
    shapes = ["x".join(map(str, b.shape)) for b in func.params]
    out = subprocess.run([sys.executable, "-c", FAULTS, str(k.lib_path), *shapes],
                         capture_output=True, text=True, timeout=120, check=True)
    faults = [int(x) for x in out.stdout.split()]
    # The first call faults its workspace in (hundreds of pages); none after it does.
    # With malloc and free per call, this program faulted 392 pages in each of calls 3-8.
    assert faults[0] > 50 and faults[1:] == [0] * 5, faults


def test_repeated_and_concurrent_calls_compute_the_reference(drawn, case):
    f, [(func, _), *_] = drawn
    ins, exp = case
    k = tt.build(func)
    # A buffer kept from the last call holds its values: none may leak into the next.
    other = [np.ascontiguousarray(a[..., ::-1]) for a in ins]
    exp_other = evaluate(f, other)[0]
    for _ in range(2):
        np.testing.assert_allclose(k(*ins), exp, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(k(*other), exp_other, rtol=1e-4, atol=1e-4)
    # Two Python threads at once (ctypes lets go of the GIL): each has its own buffers.
    wrong: list[str] = []

    def calls(args: list[np.ndarray], want: np.ndarray) -> None:
        for _ in range(6):
            if not np.allclose(k(*args), want, rtol=1e-4, atol=1e-4):
                wrong.append(threading.current_thread().name)

    threads = [threading.Thread(target=calls, args=a) for a in ((ins, exp), (other, exp_other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    # release (tt_release) frees every thread's blocks; the next call takes new ones.
    k.release()
    np.testing.assert_allclose(k(*other), exp_other, rtol=1e-4, atol=1e-4)


def test_joined_kernels_keep_their_own_workspaces(drawn, case, tmp_path):
    """Two kernels in one library (``codegen.joint``), each with its workspace renamed,
    run in turn by one worker: each computes the reference."""
    _, [first, *rest] = drawn
    ins, exp = case
    # Another draw that joins the first (same text before the kernel: vector types).
    pair = [first, next(d for d in rest if prefix(d[1]) == prefix(first[1]))]
    assert all(src.count("*)TT_WS(") >= 2 for _, src in pair)
    built = LocalBuilder(tt.Target.host(), cache_dir=tmp_path, share=2, max_workers=1).build(
        [BuildInput(f, src) for f, src in pair])
    assert built[0].lib_path == built[1].lib_path and built[0].suffix != built[1].suffix
    with LocalRunner(repeat=2, min_repeat_ms=1) as runner:
        res = runner.run([RunInput(b.lib_path, f, "wino", ins, [exp], suffix=b.suffix)
                          for (f, _), b in [*zip(pair, built)] * 2])
    assert all(r.ok for r in res), [r.error_msg for r in res if not r.ok]


def _rss() -> int:
    """This process's resident memory, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
def test_threads_that_end_give_their_blocks_back(drawn, case):
    """Forty short-lived threads each call the kernel once: each thread's block (and its
    OpenMP team's) is freed when it ends, so resident memory does not grow by a block
    per thread (about 2 MB each here)."""
    _, [(func, src), *_] = drawn
    ins, _ = case
    k = tt.build(func)
    k(*ins)
    block = int(src.split("tt_ws_bytes = ")[1].split(";")[0])
    assert block > 1 << 20
    before = _rss()
    for _ in range(40):
        t = threading.Thread(target=k, args=ins)
        t.start()
        t.join()
    assert _rss() - before < 10 * block, (_rss() - before) / block


def test_the_worker_frees_a_candidates_blocks_and_keeps_the_guards(drawn, case, monkeypatch):
    """After a checked run the worker calls the kernel's ``tt_release``; after a probe of
    the load guard's reference (``keep``, as ``LocalRunner.probe`` sends) it does not, so the
    reference's next reading faults no block in. The worker's own function, here."""
    from tensortune.measure import worker

    _, [(func, _), *_] = drawn
    ins, exp = case
    lib = str(tt.build(func).lib_path)
    released: list[str] = []
    cdll = worker.ctypes.CDLL

    class Spy:      # the worker's library, its tt_release calls recorded
        def __init__(self, path: str) -> None:
            self.lib = cdll(path)

        def __getattr__(self, name: str):
            fn = getattr(self.lib, name)
            if not name.startswith("tt_release"):
                return fn
            return lambda: released.append(name) or fn()

    monkeypatch.setattr(worker.ctypes, "CDLL", Spy)
    msg = {"key": "w", "lib_path": lib, "out_specs": [(exp.shape, "float32")],
           "inputs": ins, "expected": [exp], "repeat": 1, "min_repeat_s": 1e-3,
           "flush_bytes": 0, "cutoff": None}
    cache: dict = {}
    assert worker.run_one(msg, cache).get("latencies") and released == ["tt_release"]
    probe = {**msg, "check": False, "number": 1, "keep": True}   # as LocalRunner.probe
    assert worker.run_one(probe, cache).get("latencies") and released == ["tt_release"]
    # The runner's probe is such a message.
    from tensortune.measure.runner import LocalRunner, RunResult

    sent: list[dict] = []
    runner = LocalRunner()
    monkeypatch.setattr(runner, "_one", lambda inp, override=None: sent.append(override)
                        or RunResult())
    runner.probe(None, 5.0, 3)   # type: ignore[arg-type]
    assert sent[0]["keep"] is True and sent[0]["check"] is False
    # A failing run releases too.
    wrong = {**msg, "expected": [exp + 1.0]}
    assert worker.run_one(wrong, cache)["error_kind"] == "wrong_result"
    assert released == ["tt_release"] * 2


def test_release_of_a_kernel_whose_c_has_no_workspace_is_a_no_op():
    """C given by hand (``tt.build(..., source=)``) may define no ``tt_release``."""
    from tensortune.codegen import emit_c, lower

    f = tt.workloads.get("gmm", M=8, N=16, K=4)
    src = emit_c(lower(f), tt.Target.host()).replace("void tt_release(void)",
                                                     "void tt_other(void)")
    k = tt.build(f, source=src)
    ins = random_inputs(f)
    k.release()
    np.testing.assert_allclose(k(*ins), evaluate(f, ins)[0], rtol=1e-5)
