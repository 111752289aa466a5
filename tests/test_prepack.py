"""Weights packed once (graph/prepack.py): the stages of a tuned kernel that read only
constants, cut out and run once, leave a kernel that computes what the whole did; the
executor runs that kernel only where it checked equal and ran faster."""

import ctypes
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import tensortune as tt
from tensortune.codegen import compile_source
from tensortune.codegen.joint import join, prefix
from tensortune.errors import TensorTuneError
from tensortune.graph.executor import Executor
from tensortune.graph.prepack import Prepacker
from tensortune.kernel import Kernel
from tensortune.measure.builder import write_c
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.rewrite.winograd import winograd
from tensortune.space.space_generator import PostOrderApply, sample
from tensortune.tir.constant_stages import mark_weights, split_constant_stages
from tensortune.workloads.conv import conv_layer

TARGET = tt.Target.host()
GEN = PostOrderApply.default(TARGET)
# (function, the inputs that are weights, a stage that reads only them)
CASES = {"gmm": (tt.workloads.get("gmm", M=12, N=128, K=16), {1}, "B_global"),
         "dense": (tt.workloads.get("dense", M=16, K=32, N=64), {1, 2}, "W_global"),
         "c2d": (tt.workloads.get("c2d", C=16, K=32, H=8, W=8), {1}, "w_global"),
         "winograd": (winograd(conv_layer(1, 16, 8, 4, 6)), {1, 2, 3}, "wino_U")}


def _draw(func, seed: int):
    spaces = GEN.generate(func)
    for k in range(12):
        sch = sample(func, spaces[(seed + k) % len(spaces)], seed + k, GEN.postprocs)
        if sch is not None:
            return sch
    raise AssertionError("no legal program drawn in 12 tries")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(sorted(CASES)), seed=st.integers(0, 10_000))
def test_cut_kernels_compute_what_the_whole_did(case, seed):
    """A random program of the default spaces, cut at its weight-only stages: the pack
    run once on the weights and the main kernel run on its output compute the float64
    reference on random inputs; the cut is made wherever a stage reads only weights."""
    func, const, stage = CASES[case]
    sch = _draw(func, seed)
    split = split_constant_stages(sch.func, const)
    staged = any(b.name == stage for b in sch.func.alloc_buffers)
    assert (split is not None) == staged, str(sch.func)
    if split is None:
        return
    assert stage in [b.name for b in split.packed]
    assert all(b not in split.main.alloc_buffers for b in split.packed)
    ins = random_inputs(func, seed=seed)
    packed = tt.build(split.pack)(*[ins[i] for i in split.pack_params])
    packed = list(packed) if isinstance(packed, tuple) else [packed]
    got = tt.build(split.main)(*[np.copy(a) for a in ins], *packed)
    check_close(got, evaluate(func, ins)[0])


def test_what_cannot_be_cut_is_said():
    f = tt.workloads.get("gmm", M=12, N=128, K=16)
    sch = _draw(f, 0)
    with pytest.raises(ValueError, match="positions \\[2\\] are not inputs"):
        split_constant_stages(sch.func, {2})
    assert split_constant_stages(sch.func, set()) is None
    assert split_constant_stages(f, {1}) is None        # unscheduled: no stage to cut


def test_an_lstm_reads_one_packed_weight_per_matrix():
    """An unrolled LSTM's tasks mark their weights; its step products run cut kernels
    that share one packed state weight (step 0, whose state is a constant zero, too),
    and the model computes PyTorch's result with them, and without them."""
    torch.manual_seed(0)

    class Last(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(16, 64)

        def forward(self, x):
            return self.rnn(x)[0]

    model = Last().eval()
    x = torch.randn(16, 2, 16)
    with torch.no_grad():
        want = model(x).numpy()
    compiled = tt.compile_model(model, x)
    assert {t.name.split("#")[0]: t.func.weights for t in compiled.tasks}["dense_add"] \
        in ((1, 2), (1,))
    check_close(compiled(x).numpy(), want)
    ex = compiled.executor
    packed_steps = [i for i, k in enumerate(ex.step_kernels) if k not in compiled.kernels]
    assert len(packed_steps) == 17        # the input product and the 16 step products
    # the packed arrays each step reads: one for the input product, one for all steps
    packs = {a.ctypes.data for v in ex.prepacker._packs.values() for a in v}
    argv = [ctypes.cast(ex._argvs[i], ctypes.POINTER(ctypes.c_void_p)) for i in packed_steps]
    read = [{argv[s][j] for j in range(len(ex.step_kernels[i].func.params))} & packs
            for s, i in enumerate(packed_steps)]
    assert all(len(r) == 1 for r in read)
    assert len(set().union(*read[1:])) == 1 and read[0] != read[1]
    assert len(ex.prepacker._packs) == 2 and "weight-only stages" in compiled.summary()
    plain = Executor(compiled.graph, compiled.groups, compiled.kernels, prepack=False)
    assert plain.prepacker is None and plain.step_kernels == [
        k for k in compiled.kernels if k is not None]
    check_close(plain(x.numpy()), want)
    with pytest.raises(tt.TensorTuneError, match="prepack is True, False or 'always'"):
        Executor(compiled.graph, compiled.groups, compiled.kernels, prepack="yes")


def test_an_unmarked_kernel_is_cut_only_where_it_timed_faster():
    """A kernel whose function marks no weights (tuned alone) is cut only when the cut
    form checked equal and timed faster; the figures are kept."""
    f, const, _ = CASES["gmm"]
    kern = tt.build(_draw(f, 1))
    ins = [a.astype("float32") for a in random_inputs(f, seed=1)]
    arrays = ins + [np.empty(b.shape, "float32") for b in f.outputs]
    packer = Prepacker()
    got, args = packer.step(kern, arrays, const)
    (choice,) = packer.choices
    assert 0 < choice.tuned_us < float("inf") and 0 < choice.packed_us < float("inf")
    assert choice.kept == (choice.packed_us < 0.98 * choice.tuned_us)
    assert (got is not kern) == choice.kept and len(args) == len(arrays) + choice.kept
    got(*args[:len(args) - 1], out=args[-1])
    check_close(args[-1], evaluate(f, ins)[0])
    assert packer.step(kern, arrays, set()) == (kern, arrays)   # no constants: as tuned


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(sorted(CASES)), seed=st.integers(0, 10_000))
def test_searched_c_packs_the_weights_at_the_first_call_only(case, seed):
    """A program of a function with marked weights is written as C that runs its
    weight-only stages at the first call and when a weight comes at a new address or
    after a release: each of those calls computes the reference (random inputs, then
    other random weights), joined into one unit with another source too."""
    func, const, stage = CASES[case]
    marked = replace(func, weights=tuple(sorted(const)))
    sch = _draw(marked, seed)
    assert sch.func.weights == marked.weights
    source, err = write_c(lambda: sch.func, TARGET)
    assert err is None and source is not None
    staged = any(b.name == stage for b in sch.func.alloc_buffers)
    assert ("tt_pk_buf" in source) == staged == ("tt_packs_once" in source)
    if not staged:
        return
    kern = Kernel(sch.func, source, compile_source(source, TARGET), TARGET)
    for k in range(3):
        ins = random_inputs(func, seed=seed + k)
        if k == 2:
            kern.release()
            ins = random_inputs(func, seed=seed)
        check_close(kern(*ins), evaluate(func, ins)[0])
    # joined with another source, as the builder does: each runs and packs on its own
    if prefix(source) is None:      # gcc options of its own: never joined
        assert "#pragma GCC optimize" in source
        return
    lib = ctypes.CDLL(str(compile_source(join([source, source]), TARGET)))
    for k in range(2):
        ins = random_inputs(func, seed=seed + 5 + k)
        out = np.empty(func.outputs[0].shape, func.outputs[0].dtype)
        args = (ctypes.c_void_p * (len(ins) + 1))(*[a.ctypes.data for a in [*ins, out]])
        assert getattr(lib, f"tt_packed_{k}")(args) == 0
        check_close(out, evaluate(func, ins)[0])
        assert hasattr(lib, f"tt_packs_once_{k}")


def test_a_task_with_marked_weights_is_tuned_without_their_stages(tmp_path):
    """Tuning a function with marked weights: its records' C packs once, the best
    kernel computes the reference, and the marked function is its own workload."""
    f = CASES["gmm"][0]
    marked = mark_weights(f, ["B"])
    assert marked.weights == (1,) and marked.structural_hash() != f.structural_hash()
    db = tmp_path / "w.db"
    result = tt.tune(f, trials=6, database=db, seed=0, weights=["B"])
    assert result.func.weights == (1,)
    ins = random_inputs(f, seed=5)
    check_close(result.kernel(*ins), evaluate(f, ins)[0])
    check_close(result.kernel.bind(*ins)(), evaluate(f, ins)[0])
    kern = tt.compile(f, database=db, weights=[1])
    check_close(kern(*ins), evaluate(f, ins)[0])
    with pytest.raises(TensorTuneError, match="no record|no tuning record|not tuned"):
        tt.compile(f, database=db)          # unmarked: another workload
    assert "weights, packed once: B" in str(kern.func)
    # the records timed C that packs once; the kernel returned packs at every call
    staged = any(b.name == "B_global" for b in kern.func.alloc_buffers)
    assert ("tt_pk_buf" in write_c(lambda: kern.func, TARGET)[0]) == staged
    assert "tt_pk_buf" not in kern.source and "tt_pk_buf" not in result.kernel.source



@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(sorted(CASES)), seed=st.integers(0, 10_000))
def test_a_kernel_bound_to_marked_weights_packs_them_once(case, seed):
    """``bind`` of a marked function's kernel runs its weight-only stages once: its calls
    compute the reference; a weight changed in place is seen only after ``repack``
    where such a stage exists, and at once where none does (the kernel reads it)."""
    func, const, stage = CASES[case]
    sch = _draw(mark_weights(func, sorted(const)), seed)
    ins = random_inputs(func, seed=seed)
    run = tt.build(sch).bind(*ins)
    staged = any(b.name == stage for b in sch.func.alloc_buffers)
    assert bool(run.packed) == staged
    check_close(run(), evaluate(func, ins)[0])
    before = np.copy(run())
    ins[1] *= -0.5                   # the weight, in place
    want = evaluate(func, ins)[0]
    if staged:
        assert np.array_equal(run(), before)
        run.repack()
    check_close(run(), want)


def test_weights_named_wrong_are_said():
    f = CASES["dense"][0]
    for bad, said in ((["Y"], "'Y' is an output"), (["Q"], "'Q' is not a parameter"),
                      ([3], "position 3 is not an input"), ([1.0], "names or positions")):
        with pytest.raises(TensorTuneError, match=said) as e:
            tt.tune(f, trials=1, weights=bad)
        assert "its inputs are X, W, bias" in str(e.value)


def test_a_database_tuned_before_weights_were_marked_still_serves(tmp_path):
    """A model task's function marks its weights, a workload of its own; records of the
    same function unmarked (a database from before) still give its kernel, tuned, and
    the executor times that kernel's cut form before running it."""
    from tensortune.graph.from_torch import from_torch
    from tensortune.graph.fuse import extract_tasks, fuse

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU()).eval()
    x = torch.randn(8, 32)
    graph = from_torch(model, x)
    (task,), _ = extract_tasks(graph, fuse(graph))
    assert task.func.weights
    db = tmp_path / "before.db"
    tt.tune(replace(task.func, weights=()), trials=4, database=db, seed=0)
    compiled = tt.compile_model(model, x, database=db)
    assert compiled.tuned == [True]
    assert "unmarked" in compiled.summary() and "inf" not in compiled.summary()
    with torch.no_grad():
        check_close(compiled(x).numpy(), model(x).numpy())
    assert all(c.tuned_us < float("inf") for c in compiled.executor.prepacker.choices)
