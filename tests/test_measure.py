"""Builder and runner, including fault injection: a candidate that segfaults, loops
forever, writes NaN, writes wrong values or fails to compile is reported with the right
kind, and the runner keeps working afterwards."""

import tempfile
from pathlib import Path

import numpy as np
import pytest

import tensortune as tt
from tensortune.codegen.c_header import HEADER, KERNEL_STATICS, TIMER
from tensortune.measure import (
    BuildInput,
    LocalBuilder,
    LocalRunner,
    RunInput,
    measure,
)
from tensortune.reference import evaluate, random_inputs

FUNC = tt.workloads.get("gmm", M=16, N=16, K=8)


def _kernel(body: str) -> str:
    """A hand-written candidate with the generated ABI; ``body`` fills C from A and B."""
    return (HEADER + KERNEL_STATICS.format(outer=0, total=0) + "\n"
            "int32_t tt_kernel(float* restrict A, float* restrict B, "
            "float* restrict C) {\n" + body + "\n return 0; }\n"
            "int32_t tt_packed(void** a) { return tt_kernel((float*)a[0], (float*)a[1], "
            "(float*)a[2]); }\n" + TIMER)


GOOD = """for (int i = 0; i < 16; ++i) for (int j = 0; j < 16; ++j) { float s = 0;
  for (int k = 0; k < 8; ++k) s += A[i*8+k] * B[k*16+j]; C[i*16+j] = s; }"""
FAULTS = {
    "segfault": ("*(volatile int*)0 = 1;", "runtime_crash"),
    "hang": ("volatile int x = 1; while (x) {}", "timeout"),
    "nan": ("for (int i = 0; i < 256; ++i) C[i] = NAN;", "non_finite"),
    "wrong": (GOOD + " C[37] += 1.0f;", "wrong_result"),
    "unwritten": ("for (int i = 0; i < 255; ++i) C[i] = 0;", "non_finite"),
}


@pytest.fixture(scope="module")
def data():
    ins = random_inputs(FUNC)
    return ins, evaluate(FUNC, ins)


@pytest.mark.parametrize("share", [1, 4])
def test_fault_injection_reports_and_recovers(data, share, tmp_path):
    """With ``share`` 4 the kernels are built in shared libraries (``codegen.joint``):
    each reports its own fault, and C that follows the layout but does not compile
    fails its unit, whose other sources are then built one by one."""
    ins, exp = data
    builder = LocalBuilder(share=share, cache_dir=tmp_path)
    names = list(FAULTS) + ["good"]
    srcs = [_kernel(FAULTS[n][0]) for n in FAULTS] + [_kernel(GOOD)]
    srcs += ["this is not C", _kernel("int x = ;")]
    built = builder.build([BuildInput(FUNC, s) for s in srcs])
    for bad in built[-2:]:
        assert bad.error_kind == "compile" and "error" in bad.error_msg
    if share > 1:   # the good ones still share libraries
        assert len({b.lib_path for b in built[:-2]}) < len(names)
        assert {b.suffix for b in built[:-2]} != {""}
    with LocalRunner(timeout=3.0, repeat=3, min_repeat_ms=1) as runner:
        for name, b in zip(names, built):
            assert b.ok, b.error_msg
            # After every fault, a good kernel still runs on the same runner.
            g = built[len(FAULTS)]
            res, good = runner.run([RunInput(b.lib_path, FUNC, "gmm", ins, exp,
                                             suffix=b.suffix),
                                    RunInput(g.lib_path, FUNC, "gmm", ins, exp,
                                             suffix=g.suffix)])
            want = FAULTS[name][1] if name in FAULTS else None
            assert res.error_kind == want, (name, res.error_msg)
            if want:
                assert res.error_msg
            assert good.ok and len(good.latencies) == 3 and good.median > 0


def test_codegen_failure_is_a_value():
    bad = FUNC.with_body(FUNC.body, alloc_buffers=(FUNC.params[0],))
    res = LocalBuilder().build([BuildInput(bad)])[0]
    assert res.error_kind == "codegen" and "IRError" in res.error_msg


def test_a_missing_compiler_stops_the_run_and_says_so(tmp_path):
    # Not a failing candidate, recorded and searched past: no candidate could be built.
    import dataclasses

    cc = str(tmp_path / "no-such-gcc")
    target = dataclasses.replace(tt.Target.host(), cc=cc)
    with pytest.raises(tt.TensorTuneError, match=f"cannot run the C compiler '{cc}' .*set CC"):
        LocalBuilder(target, cache_dir=tmp_path).build([BuildInput(FUNC)])
    with pytest.raises(tt.TensorTuneError, match="cannot run the C compiler"):
        tt.tune(FUNC, trials=2, target=target, database=tmp_path / "t.db")


def test_build_cache_and_parallel_builds():
    sch = tt.Schedule(FUNC)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    builder = LocalBuilder(max_workers=2)
    a, b = builder.build([BuildInput(FUNC), BuildInput(sch.func)])
    assert a.ok and b.ok and a.lib_path != b.lib_path
    again = builder.build([BuildInput(sch.func)])[0]
    assert again.lib_path == b.lib_path


def test_given_sources_build_longest_first_and_come_back_in_order(monkeypatch):
    srcs = [_kernel(GOOD), _kernel(GOOD + "\n" + "/* padding */\n" * 50), "not C",
            _kernel(GOOD + " /* x */")]
    builder = LocalBuilder(max_workers=1)
    started = []
    one = builder._one
    monkeypatch.setattr(builder, "_one", lambda inp: started.append(inp.source) or one(inp))
    built = builder.build([BuildInput(FUNC, s) for s in srcs])
    assert started == sorted(srcs, key=len, reverse=True)
    assert [b.source for b in built] == srcs
    assert [b.ok for b in built] == [True, True, False, True]


def test_units_are_dealt_longest_first_and_alike():
    # Sources with the emitter's layout and one prefix, of many lengths.
    srcs = [_kernel(GOOD + "/* pad */" * n) for n in (9, 1, 5, 7, 3, 8, 2, 6, 4, 0)]
    builder = LocalBuilder(max_workers=2, share=4)
    units = builder._units([BuildInput(FUNC, s) for s in srcs])
    assert sorted(i for u in units for i in u) == list(range(len(srcs)))
    assert [len(u) for u in units] == [4, 3, 3]         # ceil(10 / 4) units
    sizes = [sum(len(srcs[i]) for i in u) for u in units]
    assert sizes == sorted(sizes, reverse=True)
    for u in units:   # dealt in a snake from the longest: each unit's longest first
        assert [len(srcs[i]) for i in u] == sorted((len(srcs[i]) for i in u), reverse=True)
    # At least one unit per worker, and a source that cannot join builds alone.
    two = builder._units([BuildInput(FUNC, s) for s in srcs[:2]])
    assert sorted(map(len, two)) == [1, 1]
    odd = ["#pragma GCC optimize (\"O1\")\n" + srcs[0], "not C"] + srcs[1:4]
    assert [len(u) for u in builder._units([BuildInput(FUNC, s) for s in odd])] \
        == [2, 1, 1, 1]
    # Without every source given, or with share 1: a unit per source.
    assert all(len(u) == 1 for u in builder._units(
        [BuildInput(FUNC, s) for s in srcs] + [BuildInput(FUNC)]))
    assert all(len(u) == 1 for u in LocalBuilder(share=1)._units(
        [BuildInput(FUNC, s) for s in srcs]))


@pytest.mark.parametrize("name", ["c2d", "dense"])
def test_drawn_programs_built_together_each_check(name, tmp_path):
    """Kernels the emitter wrote, built in shared libraries, each run as its own source's
    kernel: checked against the reference."""
    import random

    from tensortune.measure.builder import write_c
    from tensortune.search.search_strategy import SearchContext
    from tensortune.space import PostOrderApply

    func = tt.workloads.get(name, **({"N": 1, "C": 8, "K": 16, "H": 10, "W": 10}
                                     if name == "c2d" else {"M": 8, "N": 64, "K": 24}))
    target = tt.Target.host()
    gen = PostOrderApply.default(target)
    ctx = SearchContext(func, gen.generate(func), gen, set(), random.Random(3))
    cands = [c for c in (ctx.draw(0) for _ in range(12)) if c is not None][:8]
    srcs = [write_c(lambda c=c: c.sch.func, target)[0] for c in cands]
    built = LocalBuilder(target, cache_dir=tmp_path, share=4).build(
        [BuildInput(c.sch.func, s) for c, s in zip(cands, srcs)])
    assert len({b.lib_path for b in built}) < len(built)   # some share a library
    ins = random_inputs(func)
    exp = evaluate(func, ins)
    with LocalRunner(repeat=1, min_repeat_ms=1) as runner:
        res = runner.run([RunInput(b.lib_path, c.sch.func, name, ins, exp, suffix=b.suffix)
                          for c, b in zip(cands, built)])
    assert all(r.ok for r in res), [r.error_msg for r in res if not r.ok]


def test_measure_checks_a_schedule():
    sch = tt.Schedule(FUNC)
    _, j, _ = sch.get_loops(sch.get_block("C"))
    sch.vectorize(j)
    res = measure(sch, repeat=3, min_repeat_ms=1)
    assert res.ok and np.isfinite(res.median) and res.median > 0


def test_a_worker_leaves_ctrl_c_to_its_caller():
    """A terminal's Ctrl-C reaches the caller and its workers alike; the worker ignores
    it (the caller decides to stop it) rather than dying with a traceback of its own."""
    import signal
    import time

    func = tt.workloads.get("gmm", small=True)
    sch = tt.Schedule(func)
    lib = LocalBuilder(tt.Target.host()).build([BuildInput(sch.func)])[0]
    x = random_inputs(func)
    with LocalRunner() as runner:
        first = runner.run([RunInput(lib.lib_path, sch.func, "k", x, evaluate(func, x))])[0]
        runner._proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert runner._proc.poll() is None
        again = runner.run([RunInput(lib.lib_path, sch.func, "k", x, evaluate(func, x))])[0]
    assert first.ok and again.ok, (first.error_msg, again.error_msg)


def test_compile_timeout_is_reported():
    huge = _kernel(GOOD) + "\n".join(
        f"float f{i}(float x) {{ return x * {i}.0f + f{i - 1}(x); }}" if i else
        "float f0(float x) { return x; }" for i in range(4000))
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("cc*.s"))
    res = LocalBuilder(timeout=0.05).build([BuildInput(FUNC, huge)])[0]
    assert res.error_kind == "timeout" and "did not finish" in res.error_msg
    # The whole compiler is stopped, cc1 included, and leaves no assembly file behind.
    src = res.error_msg.split("source kept at ")[1].rstrip(")")
    assert _processes_reading(src) == []
    assert set(tmp.glob("cc*.s")) - before == set()


def _processes_reading(path: str) -> list[int]:
    """Pids whose command line names ``path`` (cc1 gets the source as an argument)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:         # not a process, or one that ended meanwhile
            continue
        if path.encode() in args:
            pids.append(int(proc.name))
    return pids


def test_cache_flush_timing(data):
    ins, exp = data
    b = LocalBuilder().build([BuildInput(FUNC, _kernel(GOOD))])[0]
    with LocalRunner(repeat=2, min_repeat_ms=1, flush_cache=True) as runner:
        res = runner.run([RunInput(b.lib_path, FUNC, "gmm", ins, exp)])[0]
    assert res.ok and len(res.latencies) == 2


def test_early_stop_times_a_slow_candidate_once(data):
    ins, exp = data
    lib = LocalBuilder().build([BuildInput(FUNC, _kernel(GOOD))])[0].lib_path
    with LocalRunner(repeat=5, min_repeat_ms=1) as r:
        full = r.run([RunInput(lib, FUNC, "k", ins, exp, cutoff=10.0)])[0]
        stopped = r.run([RunInput(lib, FUNC, "k", ins, exp, cutoff=1e-12)])[0]
    assert full.ok and len(full.latencies) == 5
    assert stopped.ok and len(stopped.latencies) == 1 and stopped.latencies[0] > 1e-12


COUNTED = """static long tt_calls_made;
long tt_calls(void) { return tt_calls_made; }
""" + _kernel(GOOD.replace("for (int i = 0; i < 16", """++tt_calls_made;
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t1);   /* 2 ms a call: one call per 1 ms timing */
  while ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6 < 2.0);
  for (int i = 0; i < 16""", 1))


@pytest.mark.parametrize("cutoff,cold_stop,calls,timings",
                         [(10.0, 2.0, 4, 3), (1.9e-3, 100.0, 2, 1), (1e-12, 2.0, 1, 1),
                          (None, 2.0, 4, 3)])
def test_timing_makes_no_call_it_does_not_need(data, monkeypatch, cutoff, cold_stop, calls,
                                               timings):
    """The worker runs a candidate once to check it. That call (2 ms, over 1 ms) picks
    the calls per timing, one here, and the timing loop makes no warm-up of its own; the
    timings after an early-stop probe keep the probe's calls per timing; a checking call
    over ``COLD_STOP`` times the cutoff is the only timing (raised in the second case, so
    a busy machine stretching the 2 ms checking call cannot end it early). Counted in
    this process by running the worker's own function on the library."""
    import ctypes

    from tensortune.measure import worker
    from tensortune.measure.worker import run_one

    monkeypatch.setattr(worker, "COLD_STOP", cold_stop)

    ins, exp = data
    lib = LocalBuilder().build([BuildInput(FUNC, COUNTED)])[0].lib_path
    counter = ctypes.CDLL(lib).tt_calls
    counter.restype = ctypes.c_long
    msg = {"key": "k", "lib_path": lib, "out_specs": [((16, 16), "float32")],
           "inputs": ins, "expected": exp, "repeat": 3, "min_repeat_s": 1e-3,
           "flush_bytes": 0, "cutoff": cutoff}
    before = counter()
    reply = run_one(msg, {})
    assert len(reply["latencies"]) == timings and min(reply["latencies"]) >= 1.9e-3
    assert counter() - before == calls


@pytest.mark.parametrize("packs_once", [True, False])
def test_a_kernel_that_packs_once_is_compared_on_its_second_call(data, packs_once):
    """A kernel whose first call runs its weights' stages (20 ms here; the timing leaves
    them out, codegen/packed_once.py) and says so is compared with the cutoff on its
    second call, so it is timed in full; one that does not say so is stopped on its
    first call, the slow one."""
    from tensortune.measure.worker import run_one

    ins, exp = data
    first_slow = GOOD.replace("for (int i = 0; i < 16", """static int packed;
  if (!packed) { packed = 1; struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t1);
    while ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6 < 20.0); }
  for (int i = 0; i < 16""", 1)
    src = _kernel(first_slow) + ("const int32_t tt_packs_once = 1;\n" if packs_once else "")
    lib = LocalBuilder().build([BuildInput(FUNC, src)])[0].lib_path
    msg = {"key": "k", "lib_path": lib, "out_specs": [((16, 16), "float32")],
           "inputs": ins, "expected": exp, "repeat": 3, "min_repeat_s": 1e-3,
           "flush_bytes": 0, "cutoff": 2e-3}
    reply = run_one(msg, {})
    if packs_once:
        assert len(reply["latencies"]) == 3 and max(reply["latencies"]) < 2e-3
    else:
        assert reply["latencies"] == [pytest.approx(0.02, rel=0.5)]


def test_calls_per_timing_are_calibrated_below_a_millisecond_and_known_for_a_probe(data):
    import ctypes

    from tensortune.measure.worker import run_one

    ins, exp = data
    fast_src = COUNTED.replace("while ((t1.tv_sec", "while (0 && (t1.tv_sec")
    counted, fast = (b.lib_path for b in LocalBuilder().build(
        [BuildInput(FUNC, COUNTED), BuildInput(FUNC, fast_src)]))
    counter, fast_counter = ctypes.CDLL(counted).tt_calls, ctypes.CDLL(fast).tt_calls
    counter.restype = fast_counter.restype = ctypes.c_long
    base = {"key": "k", "out_specs": [((16, 16), "float32")], "inputs": ins, "expected": exp,
            "repeat": 1, "min_repeat_s": 5e-3, "flush_bytes": 0, "cutoff": None}
    before = counter()
    reply = run_one({**base, "lib_path": counted, "check": False, "number": 2}, {})
    assert counter() - before == 2 and min(reply["latencies"]) >= 1.9e-3   # no other call
    # A 16 x 16 matmul's checking call lasts microseconds: calibrated in C, so a 5 ms
    # timing makes many calls (a timing of one call would read the call's overhead).
    reply = run_one({**base, "lib_path": fast}, {})
    assert len(reply["latencies"]) == 1 and 0 < reply["latencies"][0] < 1e-3
    assert fast_counter() > 10


def test_probe_skips_the_check_for_itself_only(data):
    # The load guard's probe times a kernel without checking it; the arrays it sends to a
    # fresh worker must still carry the expected output for the candidates after it.
    ins, exp = data
    wrong, good = (b.lib_path for b in LocalBuilder().build(
        [BuildInput(FUNC, _kernel(FAULTS["wrong"][0])), BuildInput(FUNC, _kernel(GOOD))]))
    with LocalRunner(repeat=2, min_repeat_ms=1) as r:
        t = r.probe(RunInput(good, FUNC, "gmm", ins, exp), min_repeat_ms=1)
        assert t is not None and t > 0
        assert r.probe(RunInput(wrong, FUNC, "gmm", ins, exp), min_repeat_ms=1) is not None
        res = r.run([RunInput(wrong, FUNC, "gmm", ins, exp)])[0]
    assert res.error_kind == "wrong_result"


def test_a_run_may_ask_for_its_own_timing_loop_length(data):
    # Each of the three timings loops for about its min_repeat_ms: a run that asks for
    # 60 ms loops lasts about 180 ms, whatever the runner's own setting (1 ms, about
    # 3 ms for the three) is. About: the calls per loop come from the time of one call,
    # and on a busy machine that call can be several times slower than the ones it
    # stands for (a bound of 150 ms failed once on this 2-core machine in a full test
    # run, 2026-11-27), so the bound is a third: still 20x what the runner's setting
    # would give.
    import time
    ins, exp = data
    # Some microseconds a call (the same product 200 times), so that 60 ms take fewer
    # calls than a timing's cap of 100000.
    slow = _kernel("for (volatile int rep = 0; rep < 200; ++rep) {" + GOOD + "}")
    lib = LocalBuilder().build([BuildInput(FUNC, slow)])[0].lib_path
    with LocalRunner(repeat=3, min_repeat_ms=1) as r:
        inp = RunInput(lib, FUNC, "gmm", ins, exp)
        r.run([inp])   # the worker's start and the first loading are not timed below
        t0 = time.perf_counter()
        long = r.run([inp], min_repeat_ms=60)[0]
        took = time.perf_counter() - t0
        short = r.run([inp])[0]
    assert long.ok and short.ok and len(long.latencies) == 3
    assert took >= 0.06
    # The override is for that run only: it leaves the runner's own setting as it was.
    assert r.min_repeat_s == 0.001


def test_integer_outputs_are_filled_so_that_an_unwritten_element_fails():
    from tensortune.measure.worker import unwritten
    from tensortune.reference import CheckError, check_close

    assert np.isnan(unwritten(np.dtype("float32")))
    assert unwritten(np.dtype("int32")) == -(2 ** 31)
    ref = np.arange(6, dtype=np.float64).reshape(2, 3)
    out = ref.astype(np.int32)
    out[1, 2] = unwritten(out.dtype)
    with pytest.raises(CheckError, match=r"mismatch at index \(1, 2\)"):
        check_close(out, ref)


def test_an_integer_function_tunes_and_its_kernel_is_exact():
    # Its outputs used to be filled with NaN before each run, which NumPy cannot store in
    # an int32 array: every candidate failed.
    A = tt.te.placeholder((30, 20), name="A", dtype="int32")
    B = tt.te.placeholder((30, 20), name="B", dtype="int32")
    C = tt.te.compute((30, 20), lambda i, j: A[i, j] * 3 + B[i, j], name="C")
    func = tt.te.create_func([A, B, C], name="axpy_i32")
    res = tt.tune(func, trials=2)
    assert res.errors == 0 and res.record is not None
    rng = np.random.default_rng(5)
    a, b = (rng.integers(-1000, 1000, size=(30, 20)).astype(np.int32) for _ in range(2))
    np.testing.assert_array_equal(res.kernel(a, b), a * 3 + b)
