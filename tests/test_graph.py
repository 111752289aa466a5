"""Whole models: the PyTorch frontend, fusion, task extraction and the executor, checked
against PyTorch on random inputs."""

import re

import numpy as np
import pytest
from bench_modules import load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.graph import Graph, GraphError, extract_tasks, fuse
from tensortune.graph.from_torch import from_torch

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

zoo = load("model_zoo")


def check(model, *xs, trials=0, database=None, **kw):
    compiled = tt.compile_model(model, xs if len(xs) > 1 else xs[0], trials=trials,
                                database=database, **kw)
    with torch.no_grad():
        want = model(*xs)
    got = compiled(*xs)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape
    scale = float(want.abs().max())
    assert scale > 0
    err = float((got - want).abs().max())
    assert err <= 1e-4 * max(1.0, scale), f"max error {err} (output scale {scale})"
    return compiled


class Lambda(nn.Module):
    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.ps = nn.ParameterList([nn.Parameter(p) for p in params])

    def forward(self, x):
        return self.fn(x, *self.ps)


OPS = {
    "conv_group_stride_dil": (nn.Conv2d(8, 12, 3, stride=2, padding=2, dilation=2, groups=4),
                              (1, 8, 11, 9)),
    "conv_1x1_nobias": (nn.Conv2d(6, 5, 1, bias=False), (2, 6, 5, 5)),
    "bn_alone": (nn.Sequential(nn.ReLU(), zoo.randomize_norms(nn.BatchNorm2d(4))),
                 (1, 4, 5, 5)),
    "bn1d_after_linear": (nn.Sequential(nn.Linear(6, 5), zoo.randomize_norms(nn.BatchNorm1d(5))),
                          (3, 6)),
    "batch_norm_functional": (Lambda(lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, False),
                                     torch.randn(3), torch.rand(3) + 0.5, torch.rand(3),
                                     torch.randn(3)), (2, 3, 4, 4)),
    "conv_square_epilogue": (Lambda(lambda x, w: F.conv2d(x, w) * F.conv2d(x, w) + 1.0,
                                    torch.randn(4, 3, 3, 3)), (1, 3, 6, 6)),
    "linear_3d_gelu": (nn.Sequential(nn.Linear(12, 7), nn.GELU()), (2, 3, 12)),
    "gelu_tanh_sigmoid": (nn.Sequential(nn.GELU(approximate="tanh"), nn.Sigmoid(), nn.Tanh()),
                          (3, 10)),
    "maxpool_ceil": (nn.MaxPool2d(3, 2, 1, ceil_mode=True), (1, 3, 10, 9)),
    "avgpool_nopad_count": (nn.AvgPool2d(3, 2, 1, count_include_pad=False), (1, 3, 9, 8)),
    "avgpool_ceil": (nn.AvgPool2d(2, 2, ceil_mode=True), (1, 2, 7, 7)),
    "adaptive_2x2": (nn.AdaptiveAvgPool2d(2), (1, 3, 8, 6)),
    "layernorm_2d": (nn.LayerNorm((4, 6)), (3, 4, 6)),
    "softmax_dim1": (nn.Softmax(dim=1), (2, 5, 3)),
    "relu6_hardtanh": (nn.Sequential(nn.ReLU6(), nn.Hardtanh(-0.5, 0.25)), (4, 9)),
    "broadcast_math": (Lambda(lambda x, a, b: (x * a - b) / (a + 2.0) + 1.0 - x.mean(-1, True),
                              torch.rand(1, 5) + 0.5, torch.randn(3, 1)), (2, 3, 5)),
    "matmul_bcast": (Lambda(lambda x, w: torch.matmul(x, w), torch.randn(4, 3)), (2, 5, 4)),
    "bmm_transpose": (Lambda(lambda x: torch.bmm(x, x.transpose(1, 2))), (3, 4, 5)),
    "permute_reshape_cat": (Lambda(lambda x: torch.cat(
        [x.permute(0, 2, 1).reshape(2, -1), x.flatten(1) * 2, x.view(2, 12)], dim=1)),
        (2, 3, 4)),
    "squeeze_unsqueeze_rdiv": (Lambda(lambda x: (1.0 / (x.unsqueeze(1) + 3.0)).squeeze(1)
                                      - 2.0 - x), (4, 5)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_operator_matches_torch(name):
    model, shape = OPS[name]
    torch.manual_seed(0)
    check(model.eval(), torch.randn(*shape))


def test_embedding_with_int_ids():
    emb = nn.Embedding(11, 6).eval()
    ids = torch.tensor([[1, 10, 3], [0, 7, 7]])
    compiled = tt.compile_model(nn.Sequential(emb, nn.LayerNorm(6)).eval(), ids)
    with torch.no_grad():
        want = nn.Sequential(emb, nn.LayerNorm(6).eval())(ids)
    assert compiled.graph.nodes[compiled.graph.inputs[0]].dtype == "int32"
    np.testing.assert_allclose(compiled(ids).numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 6), stride=st.integers(1, 2), h=st.integers(3, 9),
       expand=st.integers(1, 3), seed=st.integers(0, 1000))
def test_fused_blocks_match_torch_on_random_shapes(c, stride, h, expand, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(zoo.BasicBlock(c, 2 * c if stride == 2 else c, stride),
                          zoo.InvertedResidual(2 * c if stride == 2 else c, c, 1, expand))
    check(zoo.randomize_norms(model, seed).eval(), torch.randn(1, c, h, h + 1))


def test_tuned_resnet_blocks_match_and_dedupe(tmp_path):
    model = zoo.resnet18(width=4, classes=5, blocks=2)
    x = torch.randn(1, 3, 32, 32)
    compiled = check(model, x, trials=40, database=tmp_path / "r.db", batch_size=4, seed=0)
    # two blocks per stage: the second block's two convs share one task of weight 2
    weights = {t.name: t.weight for t in compiled.tasks}
    assert sum(t.weight for t in compiled.tasks) == sum(
        f is not None for f in extract_tasks(compiled.graph, compiled.groups)[1])
    assert max(weights.values()) == 2 and len(compiled.tasks) < len(compiled.groups)
    # batch norms are folded: no multiply remains in the graph
    assert not any(n.op == "mul" for n in compiled.graph.nodes.values())
    tuned = [st for st, ok in zip(compiled.states, compiled.tuned) if ok]
    assert tuned and all(st.best_latency < float("inf") for st in tuned)
    assert "share" in compiled.summary()
    # resume: no new trials, the same database gives tuned kernels at once
    again = check(model, x, trials=0, database=tmp_path / "r.db")
    assert again.tuned == compiled.tuned
    assert [s.trials for s in again.states] == [s.trials for s in compiled.states]


def test_the_summary_says_which_tasks_its_kernel_time_counts():
    # One batch of 8 goes to the first task; the other runs its guessed schedule, untimed.
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(128, 4))
    compiled = check(model.eval(), torch.randn(1, 3, 6, 6), trials=8, batch_size=8, seed=0)
    lines = compiled.summary().splitlines()
    assert [ln.split()[2] for ln in lines[1:3]] == ["8", "0"] and "untuned" in lines[2]
    # A small kernel's time is not "0.0": its microseconds in three decimals
    assert float(lines[1].split()[3]) > 0 and "(1 of 2 tasks timed)" in lines[3]
    assert repr(compiled) == ("CompiledModel(inputs [1, 3, 6, 6]; 2 tasks, 2 kernels, "
                              "1 tuned; .summary() for each)")


def test_blocks_of_further_model_families_match():
    """The blocks the whole-model benchmark adds (``benchmarks/model_blocks.py``), small:
    squeeze-and-excitation, ConvNeXt's permutes, Inception's and DenseNet's
    concatenations, MLP-Mixer's transposed token MLP, strided 1-d convolutions."""
    blocks = load("model_blocks")
    cases = [(blocks.mbconv_se(c=8), (1, 8, 9, 9)), (blocks.convnext_block(c=8), (1, 8, 9, 9)),
             (blocks.inception_block(c=8), (1, 8, 7, 7)),
             (blocks.mixer_block(tokens=6, c=8), (2, 6, 8)),
             (blocks.dense_block(c=4, growth=3), (1, 4, 6, 6)),
             (blocks.conv_features(c=4), (1, 1, 60)), (blocks.lstm(n_in=5, hidden=6), (4, 2, 5))]
    for model, shape in cases:
        torch.manual_seed(0)
        check(model, torch.randn(*shape))


def test_mobilenet_v2_block_and_bert_layer_match():
    mb = zoo.mobilenet_v2(width=0.25, classes=7, config=[(1, 16, 1, 1), (6, 24, 2, 2)],
                          last=32)
    compiled = check(mb, torch.randn(1, 3, 24, 24))
    ops = {tuple(compiled.graph.nodes[n].op for n in g.nodes) for g in compiled.groups}
    assert ("conv2d", "add", "clip") in ops          # depthwise + folded bn + relu6 fused
    prof = compiled.profile(torch.randn(1, 3, 24, 24), repeat=2)
    assert "kernels in total" in prof and len(prof.splitlines()) == len(compiled.tasks) + 2
    bert = zoo.bert_layer(hidden=32, heads=4, ffn=64)
    compiled = check(bert, torch.randn(2, 8, 32), trials=24, batch_size=4, seed=1)
    dense = [t for t in compiled.tasks if t.func.name == "dense_add"]
    assert dense and dense[0].weight == 3                 # q, k and v projections


def test_fusion_rules_on_a_handmade_graph():
    g = Graph()
    x = g.input("x", (8, 8))
    w = g.const("w", np.random.default_rng(0).standard_normal((8, 8)))
    t = g.op("permute", [x], dims=(1, 0))            # injective producer of the anchor
    d = g.op("dense", [t, w])
    r = g.op("relu", [d])                            # epilogue
    s = g.op("softmax", [r])                         # a reduction starts a group
    e = g.op("exp", [x])                             # element-wise, read by an anchor
    d2 = g.op("dense", [e, w])
    sq = g.op("mul", [d2, d2])                       # reads the anchor twice: still fused
    g.outputs = [g.op("add", [s, sq])]
    groups = [[g.nodes[n].op for n in grp.nodes] for grp in fuse(g)]
    assert ["permute", "dense", "relu"] in groups
    assert ["dense", "mul", "add"] in groups           # and the add after it
    assert ["exp"] in groups                          # not recomputed inside the dense
    assert any(grp[0] == "softmax" for grp in groups)


def test_rms_norm_with_pow_and_rsqrt_matches_pytorch():
    """RMSNorm as language models write it (``x.pow(2)``, ``torch.rsqrt``), and the other
    spellings of a power with a number exponent."""
    w = torch.randn(48)
    rms = Lambda(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, w)
    check(rms.eval(), torch.randn(5, 48))
    powers = Lambda(lambda x: x ** 3 + torch.pow(x, 2) - torch.pow(x.abs() + 1.0, 1.5)
                    + torch.log(x.abs() + 0.5))
    check(powers.eval(), torch.randn(4, 6))


def test_activations_reductions_and_norms_of_current_models_match_pytorch():
    """SiLU (LLaMA's MLP), leaky ReLU, hard swish and sigmoid (MobileNetV3), softplus,
    ELU, erf, square, reciprocal, clamp with one bound, maximum, sums and extremes over
    axes, log-softmax and ``nn.RMSNorm``, and dropout in eval mode, each against PyTorch
    on random inputs."""
    def acts(x):
        return (F.silu(x) + F.leaky_relu(x, 0.2) + F.hardswish(x) * F.hardsigmoid(x)
                + F.softplus(x, beta=2.0) + F.elu(x, 0.5) + torch.erf(x) - torch.square(x)
                + torch.reciprocal(x.abs() + 1.0) + torch.clamp(x, max=0.3)
                + torch.maximum(x, x * 0.5) - torch.minimum(x, -x))
    check(Lambda(acts).eval(), torch.randn(3, 40))
    check(Lambda(lambda x: x.sum(-1) + x.amax(dim=1) - x.amin(1)).eval(), torch.randn(4, 24))
    check(Lambda(lambda x: x.sum((0, 2), keepdim=True) * x).eval(), torch.randn(2, 3, 8))
    check(Lambda(lambda x: F.log_softmax(x, dim=-1)).eval(), torch.randn(5, 33))
    check(Lambda(lambda x: x * (x.var(-1, keepdim=True) + torch.std(x, dim=0)
                                + x.var(dim=-1, unbiased=False, keepdim=True)
                                + torch.var(x, 1, correction=0, keepdim=True))).eval(),
          torch.randn(4, 7))
    # 0-d tensors: held as shape (1,) inside, the model's own shape outside.
    check(Lambda(lambda x: x * x.sum() - x.mean() + x[1, 2]).eval(), torch.randn(2, 3))
    compiled = check(Lambda(lambda x: torch.max(x) * x.var()).eval(), torch.randn(3, 4))
    assert compiled(torch.randn(3, 4)).shape == ()
    check(nn.Sequential(nn.Dropout(0.3), nn.RMSNorm(32), nn.SiLU()).eval(),
          torch.randn(6, 32))
    # Comparisons, where and masked_fill with a causal mask buffer (these compile
    # without trials, through the checked build of untuned tasks: gcc 12.2 at -O3
    # miscompiled the where as written).
    class Causal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(6, 6, dtype=torch.bool)))

        def forward(self, x):
            s = (x @ x.transpose(0, 1)).masked_fill(self.mask == 0, float("-inf"))
            return (torch.softmax(s, -1) + torch.where(x > 0, x, x * 0.1).sum(-1, keepdim=True)
                    + (0.5 < x).float().mean(-1, keepdim=True))
    check(Causal().eval(), torch.randn(6, 5))
    mods = nn.Sequential(nn.Linear(16, 16), nn.LeakyReLU(0.1), nn.Hardswish(), nn.ELU(0.7),
                         nn.Softplus(beta=1.5), nn.Hardsigmoid(), nn.LogSoftmax(dim=-1))
    check(mods.eval(), torch.randn(3, 16))
    with pytest.raises(GraphError, match="dropout with training=True"):
        tt.compile_model(Lambda(lambda x: F.dropout(x, 0.5, training=True)).eval(),
                         torch.randn(2, 3))
    with pytest.raises(GraphError, match="clamp takes number bounds"):
        tt.compile_model(Lambda(lambda x: torch.clamp(x, min=x * 0.5)).eval(),
                         torch.randn(2, 3))


def test_slicing_split_and_chunk_match_pytorch():
    """Indexing with ints, stepped slices, None and ..., a fixed slice of a mask buffer, and
    the parts of split and chunk picked by index (a fused qkv projection, a rotary
    half-swap)."""
    class Parts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(16, 48)
            self.register_buffer("mask", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

        def forward(self, x):
            p = self.qkv(x).split(16, dim=-1)
            half = x.chunk(2, dim=-1)
            s = (p[0] @ p[1].transpose(0, 1)).masked_fill(self.mask[:6, :6] == 0, -1e9)
            return (torch.softmax(s, -1) @ p[2] + torch.cat([-half[1], half[0]], -1)
                    + torch.cat([x[..., ::2], x[:, 1::2]], 1) + x[1:2, :] + x[:, 3:4]
                    + torch.split(x, [4, 12], dim=1)[1].sum(1, keepdim=True) + x[2])
    check(Parts().eval(), torch.randn(6, 16))
    check(Lambda(lambda x: x[None, :, None, 1:] * x[:, None, :2]).eval(), torch.randn(2, 3))
    with pytest.raises(GraphError, match=r"indexing with a tensor \(x\[ids\], x\[mask\]\)"):
        tt.compile_model(Lambda(lambda x: x[x[:, 0] > 0]).eval(), torch.randn(2, 3))
    with pytest.raises(GraphError, match="steps backwards"):
        tt.compile_model(Lambda(lambda x: x[:, 2:1]).eval(), torch.randn(2, 3))


def test_a_model_with_nothing_to_compute_compiles_to_no_kernel():
    compiled = tt.compile_model(nn.Sequential(nn.Dropout(0.2), nn.Identity()).eval(),
                                torch.randn(3, 4), trials=8)
    x = torch.randn(3, 4)
    assert compiled.tasks == [] and torch.equal(compiled(x), x)


def test_unsupported_operator_names_op_and_node():
    model = Lambda(lambda x: torch.cumprod(x, dim=1) + 1.0)
    with pytest.raises(GraphError, match=r"unsupported operator 'cumprod' at node cumprod"):
        tt.compile_model(model.eval(), torch.randn(2, 3))
    with pytest.raises(GraphError, match="training mode"):
        tt.compile_model(nn.Linear(2, 2), torch.randn(1, 2))
    with pytest.raises(GraphError, match=r"unsupported module Unfold"):
        tt.compile_model(nn.Sequential(nn.Unfold(2)).eval(), torch.randn(1, 2, 3, 3))
    with pytest.raises(GraphError, match=r"returns a nested tuple"):
        tt.compile_model(nn.Sequential(nn.LSTM(3, 3)).eval(), torch.randn(2, 1, 3))
    with pytest.raises(tt.TensorTuneError, match="compile_model: trials must be a whole"):
        tt.compile_model(nn.Sequential(nn.ReLU()).eval(), torch.randn(2, 3), trials=-1)
    with pytest.raises(GraphError, match=r"compile_model takes a torch nn.Module \(or a "
                       r"graph.Graph\), got str"):
        tt.compile_model("resnet18", torch.randn(2, 3))


def test_executor_rejects_a_wrong_input_shape():
    compiled = tt.compile_model(nn.Sequential(nn.ReLU()).eval(), torch.randn(2, 3))
    with pytest.raises(GraphError, match=r"compiled for shape \[2, 3\]"):
        compiled(torch.randn(3, 3))


def test_executor_runs_its_kernels_in_order_and_names_a_failing_one():
    """The kernels run from one C loop: each reads what the one before wrote, and a
    kernel's error code is raised with its group's nodes."""
    import ctypes

    from tensortune.codegen import Target, compile_source

    model = nn.Sequential(nn.Linear(5, 6), nn.Softmax(dim=1), nn.Linear(6, 4)).eval()
    compiled = tt.compile_model(model, torch.randn(3, 5))
    ex = compiled.executor
    assert len(ex.steps) >= 2
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled(x), model(x).detach(), rtol=1e-5, atol=1e-6)
    lib = ctypes.CDLL(str(compile_source(
        "#include <stdint.h>\nint32_t fail(void** a) { (void)a; return 7; }\n",
        Target.host())))
    ex._fns[1] = ctypes.cast(lib.fail, ctypes.c_void_p).value
    nodes = ex.groups[ex.step_groups[1]].nodes
    with pytest.raises(GraphError, match=rf"kernel of group {re.escape(str(nodes))} "
                                         r"returned error code 7"):
        compiled(x)


def test_depthwise_and_dense_convs_are_not_similar_tasks():
    """The gradient scheduler's forward estimate holds a task to the best flop rate of
    similar tasks; a depthwise conv, bound by memory, must not be held to a dense conv's
    rate, or the scheduler spends the whole budget on it."""
    from tensortune.search.task_scheduler import TaskScheduler, op_kind

    mb = zoo.mobilenet_v2(width=0.25, classes=7, config=[(1, 16, 1, 1), (6, 24, 2, 2)],
                          last=32)
    graph = from_torch(mb.eval(), torch.randn(1, 3, 24, 24))
    tasks, _ = extract_tasks(graph, fuse(graph))
    convs = [t for t in tasks if t.func.name.startswith("conv2d")]

    def reduced(kind):   # the conv block's number of reduction axes
        return max(r for _, r in kind[1:])

    kinds = {op_kind(t.func) for t in convs}
    depthwise = [t for t in convs if reduced(op_kind(t.func)) == 2]   # r, s
    dense = [t for t in convs if reduced(op_kind(t.func)) == 3]       # c, r, s
    assert depthwise and dense and len(kinds) >= 3                    # and 1x1: c only
    sched = TaskScheduler(depthwise + dense, eps=0.0)
    for s in sched.states:   # dense convs fast in flop rate, depthwise slow: both tuned a while
        rate = 50e9 if reduced(s.kind) == 3 else 2e9
        s.trials, s.best_latency = 64, s.flops / rate
        s.curve = [(t, s.best_latency) for t in (16, 32, 48, 64)]
    dw = sched.states[0]
    # the depthwise task is at the best rate of its own kind: only the hopeful halving
    # guess remains, not "it could run at a dense conv's 50 GFLOP/s"
    assert sched.gradient(dw) == pytest.approx(dw.weight * 0.8 * -dw.best_latency / 64)


def test_residual_epilogue_folds_into_the_conv_tile():
    """conv + bias + residual add + ReLU: every design space writes the output once, from
    the conv's register tile, with no separate element-wise pass left over the output.
    (A residual read at batch index 0 instead of its loop variable once blocked this.)"""
    from tensortune.measure import measure
    from tensortune.space.space_generator import PostOrderApply, sample
    from tensortune.tir.functor import blocks_in

    model = zoo.resnet18(width=8, classes=5, blocks=2).eval()
    graph = from_torch(model, torch.randn(1, 3, 32, 32))
    tasks, _ = extract_tasks(graph, fuse(graph))
    task = next(t for t in tasks
                if [b.name for b in blocks_in(t.func.body)][-3:] == ["add", "add1", "relu"])
    gen = PostOrderApply.default(tt.Target.host())
    spaces = gen.generate(task.func)
    assert spaces
    for space in spaces:
        sch = sample(task.func, space, 0, gen.postprocs)
        assert sch is not None
        names = [b.name for b in blocks_in(sch.func.body)]
        assert not {"add", "add1", "relu"} & set(names), names
        assert measure(sch, repeat=1, min_repeat_ms=0).ok   # and it computes the same
