"""A kernel's call through the C extension (``codegen.fast_call``): the same results and
the same errors as the Python path, for any arguments."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import compile_source, fast_call
from tensortune.kernel import Kernel
from tensortune.reference import evaluate, random_inputs


def _two_outputs():
    x = te.placeholder((6, 20), name="x")
    w = te.placeholder((20,), name="w")
    y = te.compute((6, 20), lambda i, j: x[i, j] * w[j], name="y")
    z = te.compute((6, 20), lambda i, j: x[i, j] + w[j] * 2.0, name="z")
    return te.create_func([x, w, y, z], name="two")


FUNCS = {"gmm": tt.workloads.get("gmm", M=8, N=16, K=4), "two": _two_outputs()}
KERNELS = {name: tt.build(f) for name, f in FUNCS.items()}


def test_the_extension_builds_here():
    """Where Python's headers are (a Python without them calls kernels through ctypes,
    tested below), the extension builds and every kernel calls through it."""
    import sysconfig
    from pathlib import Path

    if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        pytest.skip("this Python has no headers: kernels are called through ctypes")
    assert fast_call.load() is not None, fast_call.REASON
    assert all(k._spec is not None for k in KERNELS.values())


# Ways to pass each argument: as drawn, or changed into something the C path leaves to
# the Python path (which accepts some and refuses others with its own message); "twice"
# gives one array for both outputs.
VARIANTS = ["plain", "float64", "fortran", "strided", "subclass", "swapped", "list", "short",
            "readonly", "alias", "twice"]


def _variant(a: np.ndarray, how: str, others: list[np.ndarray]) -> object:
    if how == "float64":
        return a.astype("float64")
    if how == "fortran":
        return np.asfortranarray(a) if a.ndim > 1 else a
    if how == "strided":
        return np.repeat(a, 2, axis=-1)[..., ::2]
    if how == "subclass":
        return a.view(np.matrix) if a.ndim == 2 else a.view(np.recarray)
    if how == "swapped":
        return a.astype(a.dtype.newbyteorder())
    if how == "list":
        return a.tolist()
    if how == "short":
        return a[:-1]
    if how == "readonly":
        b = a.copy()
        b.flags.writeable = False
        return b
    if how == "alias" and others and isinstance(others[0], np.ndarray):
        return others[0] if others[0].shape == a.shape else a
    return a


def _outcome(k: Kernel, ins: list, out: object) -> tuple:
    """The result (copied) or the error (type and message) of one call."""
    try:
        got = k(*ins, out=out)
    except tt.TensorTuneError as e:
        return ("error", type(e).__name__, str(e))
    got = got if isinstance(got, (tuple, list)) else (got,)
    return ("ok", [np.array(g) for g in got])


def _compare(name: str, seed: int, which: int, how: str, out_form: str,
             n_in: int | None) -> None:
    """One call with the C path and one without: the same result or the same error."""
    f, k = FUNCS[name], KERNELS[name]
    ins = [np.asarray(a, dtype="float32") for a in random_inputs(f, seed=seed)]
    args: list = list(ins)
    if which < 2:
        args[which] = _variant(ins[which], how, [])
    if n_in is not None:
        args = (args + args)[:n_in]

    def make_out() -> object:
        """The ``out`` argument, made anew for each path (the C path's writes must not
        reach the Python path's)."""
        fresh: list = [np.full(b.shape, np.nan, "float32") for b in f.outputs]
        if which == 2:                  # "alias": the first input itself, where it fits
            fresh[0] = _variant(fresh[0], how, args)
            if how == "twice" and len(fresh) > 1:     # one array for two outputs
                fresh[1] = fresh[0]
            if out_form == "none":
                return fresh[0]
        if out_form == "none":
            return None
        if out_form == "given":
            return fresh[0] if len(fresh) == 1 else fresh
        return fresh if out_form == "list" else tuple(fresh)

    fast = _outcome(k, args, make_out())
    spec, k._spec = k._spec, None
    try:
        slow = _outcome(k, args, make_out())
    finally:
        k._spec = spec
    assert fast[0] == slow[0], (which, how, out_form, n_in, fast, slow)
    if fast[0] == "error":
        assert fast[1:] == slow[1:]
        return
    for a, b in zip(fast[1], slow[1]):
        np.testing.assert_array_equal(a, b)
    if how in ("plain", "readonly") and which < 2 and n_in is None:
        for got, want in zip(fast[1], evaluate(f, ins)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(FUNCS)), seed=st.integers(0, 1000),
       n_in=st.sampled_from([None, 1, 3]))
def test_the_c_path_gives_what_the_python_path_gives(name, seed, n_in):
    """Each argument in turn changed (an input, or the output: a wrong dtype, layout,
    byte order, type or shape, read-only, aliasing an input), the outputs given in each
    form or not, on random inputs, with the inputs too few or too many: every call gives
    the result or the error that it gives with the C path switched off."""
    for which in range(3):
        for how in VARIANTS:
            for out_form in ("none", "given", "list", "tuple"):
                _compare(name, seed, which, how, out_form, n_in)


def test_outputs_are_aligned_and_own_their_memory_through_a_base():
    f, k = FUNCS["two"], KERNELS["two"]
    ins = random_inputs(f, seed=1)
    y, z = k(*ins)
    for o in (y, z):
        assert o.ctypes.data % 64 == 0 and o.flags.c_contiguous and o.flags.writeable
        assert o.base is not None and o.dtype == np.float32 and o.shape == (6, 20)
    del ins
    y += 1.0        # still valid memory after the inputs are gone


def test_an_error_code_from_the_kernel_is_raised_with_its_name():
    f = FUNCS["gmm"]
    source = "#include <stdint.h>\nint32_t tt_packed(void **args) { return 3; }\n"
    k = Kernel(f, source, compile_source(source, tt.Target.host()), tt.Target.host())
    assert (k._spec is not None) == (fast_call.load() is not None)
    a, b = random_inputs(f)
    with pytest.raises(tt.TensorTuneError, match="kernel gmm returned error code 3"):
        k(a, b)
    with pytest.raises(tt.TensorTuneError, match="kernel gmm returned error code 3"):
        k(a, b, out=np.empty((8, 16), "float32"))


def test_without_the_extension_kernels_are_called_through_ctypes(monkeypatch):
    monkeypatch.setattr(fast_call, "_tried", True)
    monkeypatch.setattr(fast_call, "_loaded", None)
    f = FUNCS["gmm"]
    k = tt.build(f)
    assert k._spec is None
    a, b = random_inputs(f, seed=2)
    np.testing.assert_allclose(k(a, b), evaluate(f, [a, b])[0], rtol=1e-5)
