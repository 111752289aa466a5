"""Weights packed once (graph/prepack.py): the stages of a tuned kernel that read only
constants, cut out and run once, leave a kernel that computes what the whole did; the
executor runs that kernel only where it checked equal and ran faster."""

import ctypes

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import tensortune as tt
from tensortune.graph.executor import Executor
from tensortune.graph.prepack import split_constant_stages
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.rewrite.winograd import winograd
from tensortune.space.space_generator import PostOrderApply, sample
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
    """An unrolled LSTM's step products run packed kernels that share one packed state
    weight (step 0, whose state is a constant zero, too), and the model computes
    PyTorch's result with them; measured, a packed form runs only where it was faster."""
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
    compiled = tt.compile_model(model, x, prepack="always")
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
    timed = Executor(compiled.graph, compiled.groups, compiled.kernels)
    check_close(timed(x.numpy()), want)
    for ch in timed.prepacker.choices:
        assert ch.kept == (ch.packed_us < 0.98 * ch.tuned_us)
    with pytest.raises(tt.TensorTuneError, match="prepack is True, False or 'always'"):
        Executor(compiled.graph, compiled.groups, compiled.kernels, prepack="yes")
