"""Calling a built kernel: outputs allocated or written in place, argument checks."""

import numpy as np
import pytest

import tensortune as tt
from tensortune import te
from tensortune.reference import evaluate, random_inputs


@pytest.fixture(scope="module")
def gmm():
    f = tt.workloads.get("gmm", M=8, N=16, K=4)
    return f, tt.build(f)


def test_out_parameter_and_source(gmm):
    f, k = gmm
    a, b = random_inputs(f)
    c = np.full((8, 16), 7.0, dtype="float32")
    assert k(a, b, out=c) is c
    np.testing.assert_allclose(c, evaluate(f, [a, b])[0], rtol=1e-5)
    assert "tt_kernel(float* restrict A" in k.source


@pytest.mark.parametrize("mutate, msg", [
    (lambda a, b: (a.astype("float64"), b), "expected dtype float32, got float64"),
    (lambda a, b: (a[:4], b), r"expected shape \(8, 4\), got \(4, 4\)"),
    (lambda a, b: (np.asfortranarray(a), b), "C-contiguous"),
    (lambda a, b: (a,), "takes 2 inputs"),
    (lambda a, b: ([[1.0]], b), "expected a numpy array"),
])
def test_bad_arguments(gmm, mutate, msg):
    f, k = gmm
    a, b = random_inputs(f)
    with pytest.raises(tt.KernelArgumentError, match=msg):
        k(*mutate(a, b))


def test_out_aliasing_input_is_rejected():
    f = tt.workloads.get("smx", M=4, N=4)
    k = tt.build(f)
    (x,) = random_inputs(f)
    with pytest.raises(tt.KernelArgumentError, match="overlaps argument 0"):
        k(x, out=x)


def test_outputs_in_one_block_are_checked_by_their_bounds():
    """Views of one block: an output overlapping an input by part of a row is rejected,
    one beside it is written; an ndarray subclass passes; a wrong output names itself."""
    f = tt.workloads.get("smx", M=4, N=4)
    k = tt.build(f)
    (x,) = random_inputs(f)
    block = np.zeros(32, dtype="float32")
    block[:16] = x.ravel()
    inp = block[:16].reshape(4, 4)
    with pytest.raises(tt.KernelArgumentError, match="overlaps argument 0"):
        k(inp, out=block[15:31].reshape(4, 4))
    beside = block[16:].reshape(4, 4)
    k(inp, out=beside)
    np.testing.assert_allclose(beside, evaluate(f, [x])[0], rtol=1e-5)

    class Tagged(np.ndarray):
        pass

    np.testing.assert_allclose(k(x.view(Tagged)), beside, rtol=1e-6)
    with pytest.raises(tt.KernelArgumentError, match=r"output 0 \(\w+\): expected dtype"):
        k(x, out=np.zeros((4, 4)))


def test_a_bound_kernel_runs_on_what_its_arrays_hold_at_each_call(gmm):
    f, k = gmm
    a, b = random_inputs(f)
    c = np.full((8, 16), 7.0, dtype="float32")
    run = k.bind(a, b, out=c)
    assert run() is c
    np.testing.assert_allclose(c, evaluate(f, [a, b])[0], rtol=1e-5)
    a[...] = np.random.default_rng(5).standard_normal(a.shape)    # refilled in place
    run()
    np.testing.assert_allclose(c, evaluate(f, [a, b])[0], rtol=1e-5)
    alloc = k.bind(a, b)          # outputs allocated once, at bind
    first = alloc()
    assert alloc() is first and first is not c
    np.testing.assert_allclose(first, c, rtol=1e-6)
    with pytest.raises(tt.KernelArgumentError, match="expected dtype float32, got float64"):
        k.bind(a.astype("float64"), b)
    smx = tt.workloads.get("smx", M=4, N=4)
    (x,) = random_inputs(smx)
    with pytest.raises(tt.KernelArgumentError, match="overlaps argument 0"):
        tt.build(smx).bind(x, out=x)


def test_a_long_vectorized_row_loops_over_its_chunks():
    """A vectorized loop of more than 16 vectors (a whole output row copied from its
    strips) is a C loop over vector chunks, not one statement per chunk, and computes
    what the reference does."""
    from tensortune import te

    lanes = tt.Target.host().lanes("float32")
    a = te.placeholder((3, 64 * lanes), name="a")
    out = te.compute((3, 64 * lanes), lambda i, j: a[i, j] * 2.0 + 1.0, name="out")
    f = te.create_func([a, out], name="row")
    sch = tt.Schedule(f)
    sch.vectorize(sch.get_loops(sch.get_block("out"))[-1])
    kernel = tt.build(sch)
    assert "j_c < 64;" in kernel.source and kernel.source.count("tt_st_") <= 2
    (x,) = random_inputs(f)
    np.testing.assert_allclose(kernel(x), evaluate(f, [x])[0], rtol=1e-6)


def _where_of_two_intermediates():
    """Three stages over 6 x 5 with two intermediates, a select between them: gcc 12.2 at
    -O3 with AVX computed it wrong as written."""
    x = te.placeholder((6, 5), name="X")
    m = te.compute((6, 5), lambda i, j: te.if_then_else(x[i, j] > 0.0, 1.0, 0.0), name="M")
    n = te.compute((6, 5), lambda i, j: x[i, j] * 0.1, name="N")
    y = te.compute((6, 5), lambda i, j: te.if_then_else(te.ne(m[i, j], 0.0), x[i, j],
                                                         n[i, j]), name="Y")
    return te.create_func([x, y], name="where2")


def test_build_checked_rebuilds_a_wrong_kernel_with_safe_flags(monkeypatch):
    from tensortune import kernel as kmod

    f = _where_of_two_intermediates()
    a = np.random.default_rng(2).standard_normal((6, 5)).astype(np.float32)
    want = np.where(a > 0, a, a * np.float32(0.1))
    np.testing.assert_allclose(kmod.build_checked(f)(a), want, rtol=1e-6)
    # Whatever this compiler does with it: a first build that is wrong is built again.
    real, calls = kmod.build, []

    def first_wrong(func, target=None, source=None):
        calls.append(target.flags)
        k = real(func, target)
        return _Scaled(k) if len(calls) == 1 else k
    monkeypatch.setattr(kmod, "build", first_wrong)
    k = kmod.build_checked(f)
    assert len(calls) == 2 and set(kmod.SAFE_FLAGS) <= set(calls[1])
    np.testing.assert_allclose(k(a), want, rtol=1e-6)
    monkeypatch.setattr(kmod, "build", lambda func, target=None, source=None: _Scaled(
        real(func, target)))
    with pytest.raises(tt.TensorTuneError, match="where2: its kernel computes wrong results"):
        kmod.build_checked(f)


class _Scaled:
    """A kernel whose results are off by a factor: a stand-in for a miscompiled one."""

    def __init__(self, k):
        self.k = k

    def __call__(self, *args):
        return self.k(*args) * 2.0


def test_build_with_check_checks_a_hand_schedule_against_the_function_as_written(
        monkeypatch):
    from tensortune import kernel as kmod

    f = _where_of_two_intermediates()
    seen = []
    real_case = kmod.check_case
    monkeypatch.setattr(kmod, "check_case", lambda func: seen.append(func) or real_case(func))
    sch = tt.Schedule(f)
    for name in ("M", "N"):
        sch.compute_inline(sch.get_block(name))
    (i, j) = sch.get_loops(sch.get_block("Y"))
    sch.parallel(i)
    a = np.random.default_rng(3).standard_normal((6, 5)).astype(np.float32)
    np.testing.assert_allclose(tt.build(sch, check=True)(a), np.where(a > 0, a, a * 0.1),
                               rtol=1e-6)
    assert seen == [f]      # the reference is the function as written, not the schedule's
