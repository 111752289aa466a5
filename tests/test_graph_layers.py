"""Model import of the layers beyond the core set (``graph.torch_layers``,
``graph.layout_ops``): each against PyTorch on random inputs and weights, the
transposed convolution and resampling on random shapes, and clear errors for what is
not supported."""

import pytest
from graph_common import Fn, check, randomized
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.graph import Graph, GraphError

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

LAYERS = {
    "conv_transpose_s2_outpad": (nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1,
                                                    output_padding=1), (2, 6, 5, 7)),
    "conv_transpose_rect_dilated": (nn.ConvTranspose2d(3, 5, (3, 2), stride=(3, 2),
                                                       padding=(2, 0), dilation=2), (1, 3, 4, 5)),
    "conv_transpose_grouped": (nn.ConvTranspose2d(6, 9, 3, stride=2, padding=1,
                                                  output_padding=1, groups=3), (1, 6, 5, 4)),
    "conv_transpose_depthwise": (nn.ConvTranspose2d(4, 4, 4, stride=2, padding=1, groups=4),
                                 (1, 4, 5, 5)),
    "conv_transpose1d_grouped_dilated": (nn.ConvTranspose1d(6, 9, 3, stride=2, padding=2,
                                                            dilation=2, output_padding=1,
                                                            groups=3), (2, 6, 9)),
    "conv_transpose1d_functional": (Fn(lambda x: F.conv_transpose1d(
        x, torch.linspace(-1, 1, 8 * 2 * 3).reshape(8, 2, 3), stride=3, groups=2)), (1, 8, 7)),
    "conv1d_strided_grouped": (nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2),
                               (2, 4, 17)),
    "group_norm": (nn.GroupNorm(3, 6), (2, 6, 5, 4)),
    "group_norm_1d": (nn.GroupNorm(2, 4), (2, 4, 9)),
    "instance_norm_affine": (nn.InstanceNorm2d(3, affine=True), (2, 3, 5, 5)),
    "prelu_per_channel": (nn.Sequential(nn.Conv2d(3, 4, 1), nn.PReLU(4)), (1, 3, 5, 5)),
    "upsample_bilinear": (nn.Upsample(scale_factor=2, mode="bilinear"), (1, 4, 6, 6)),
    "mish_gelu_modules": (nn.Sequential(nn.Mish(), nn.GELU()), (3, 20)),
    "batch_norm_1d_alone": (nn.BatchNorm1d(5), (3, 5, 4)),
    "nearest_x3_size": (Fn(lambda x: F.interpolate(x, size=(15, 6))), (1, 3, 5, 3)),
    "nearest_down": (Fn(lambda x: F.interpolate(x, size=(2, 4))), (1, 3, 6, 8)),
    "bilinear_aligned_x3": (Fn(lambda x: F.interpolate(x, scale_factor=3, mode="bilinear",
                                                       align_corners=True)), (1, 2, 4, 5)),
    "bilinear_uneven_sizes": (Fn(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear")),
                              (1, 2, 4, 5)),
    "nearest_exact_up_and_down": (Fn(lambda x: F.interpolate(x, size=(9, 4),
                                                             mode="nearest-exact")
                                      + F.interpolate(x, scale_factor=3, mode="nearest-exact")[
                                          :, :, :, ::6]), (1, 2, 3, 8)),
    "linear_1d": (Fn(lambda x: F.interpolate(x, size=13, mode="linear")), (2, 3, 6)),
    "pad_crop_value": (Fn(lambda x: F.pad(x, (1, -1, 2, 0), value=0.5)), (1, 2, 4, 5)),
    "shapes": (Fn(lambda x: torch.stack([x.t() @ x, x.T @ x * 2], 1).sum(1)
                  + x.mT[:, None, :1].expand(6, 6, 6).mean(1) + x[:2].repeat(3, 1).T),
               (6, 6)),
    "max_min_over_dims": (Fn(lambda x: torch.max(x, -1, True).values + x.min(dim=0, keepdim=True)[0]
                             + x.max(1, keepdim=True).values + torch.max(x, x * 0.5)), (4, 7)),
    "elementwise_math": (Fn(lambda x: torch.sin(x) * torch.cos(x) + torch.floor(x * 3.0)
                            + torch.ceil(x) + torch.sign(x) + F.normalize(x, dim=-1)), (4, 9)),
    "einsum_forms": (Fn(lambda x: torch.einsum("bij,bkj->bik", x, x)[0]
                        + torch.einsum("ij,jk", x[0], x[1].T) + torch.einsum("ii->i", x[1])
                        + torch.einsum("i,j->ij", [x[0, 0], x[1, 1]])), (2, 5, 5)),
    "pixel_shuffle_and_back": (nn.Sequential(nn.PixelShuffle(2), nn.Conv2d(2, 8, 1),
                                             nn.PixelUnshuffle(2)), (1, 8, 3, 4)),
    "pools_1d": (Fn(lambda x: F.max_pool1d(x, 3, 2, 1) + F.avg_pool1d(
        x, 3, 2, 1, count_include_pad=False) + F.avg_pool1d(x, 3, 2, 1)), (2, 3, 11)),
    "pool_1d_modules": (nn.Sequential(nn.MaxPool1d(2), nn.AvgPool1d(3, 1, 1)), (2, 3, 11)),
    "adaptive_avg_axis_kept": (nn.AdaptiveAvgPool2d((None, 2)), (1, 3, 4, 6)),
    "adaptive_max": (Fn(lambda x: F.adaptive_max_pool2d(x, (2, 3))
                        + F.adaptive_max_pool2d(x, 1)), (2, 3, 4, 6)),
    "pad_modules": (nn.Sequential(nn.ReflectionPad2d((1, 2, 3, 0)), nn.ReplicationPad2d(2),
                                  nn.ZeroPad2d((1, 0, 0, 2)), nn.ConstantPad2d(1, -0.5)),
                    (1, 2, 5, 4)),
    "conv_padding_modes": (nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
        nn.Conv2d(4, 4, 3, padding=(1, 2), padding_mode="circular"),
        nn.Conv2d(4, 2, 3, padding=1, padding_mode="replicate")), (1, 3, 6, 7)),
    "conv1d_replicate": (nn.Conv1d(3, 4, 5, padding=2, padding_mode="replicate"), (1, 3, 9)),
    "pow_by_tensor": (Fn(lambda x: torch.pow(x.abs() + 0.5, x) + 2 ** x + x.abs() ** x),
                      (3, 8)),
    "roll_flip_triangles_cumsum": (Fn(lambda x: torch.roll(x, (2, -1), (1, 2)) + torch.flip(
        x, [-1, 0]) + torch.tril(x) - torch.triu(x, 1) * 2 + x.cumsum(1) + x.cumsum(-1)),
                                   (2, 5, 6)),
    "sdpa_causal": (Fn(lambda x: F.scaled_dot_product_attention(x, x * 2.0, x + 1.0,
                                                                is_causal=True)), (2, 3, 6, 8)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_torch(name):
    model, shape = LAYERS[name]
    torch.manual_seed(1)
    check(randomized(model), torch.randn(*shape))


def test_a_weight_read_by_many_ops_is_one_constant():
    """An unrolled LSTM reads its state weight at every step, and a model may call one
    layer twice: each weight is one constant buffer (32 copies of an LSTM's 1 MiB state
    weight once made each step's product read its own from memory)."""
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)

        def forward(self, x):
            return self.lin(torch.relu(self.lin(x)))

    class Out(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 16)

        def forward(self, x):
            return self.rnn(x)[0]

    # Twice: its weight and bias; the LSTM: the input and state weights, their biases
    # (random, so two) and the zero initial state.
    for model, x, shape, count in ((Twice(), torch.randn(3, 6), (6, 6), 2),
                                   (Out(), torch.randn(5, 2, 8), (16, 64), 5)):
        compiled = check(randomized(model), x)
        consts = compiled.executor.graph.consts
        assert sum(a.shape == shape for a in consts.values()) == 1
        assert len(consts) == count


def test_indices_of_extremes_and_comparisons_come_back_as_pytorch_types():
    """argmax/argmin (the first index of a tie, as PyTorch's), max's indices, and a
    comparison returned as the model's output: int64 and bool, PyTorch's own types."""
    x = torch.randn(4, 6)
    x[1, 2] = x[1, 4] = 5.0                    # a tie: the first index wins
    x[3, 0] = x[3, 5] = -5.0
    for fn in (lambda t: t.argmax(-1), lambda t: torch.argmin(t, 0, keepdim=True),
               lambda t: t.argmax(), lambda t: torch.max(t, 1)[1] + t.min(dim=1).indices,
               lambda t: t > 0.5):
        model = Fn(fn).eval()
        got, want = tt.compile_model(model, x)(x), model(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)
    values, indices = tt.compile_model(Fn(lambda t: torch.max(t, -1)).eval(), x)(x)
    assert indices.dtype == torch.int64 and torch.equal(indices, torch.max(x, -1).indices)
    ties = torch.tensor([[1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0]])   # top-k: least index first
    values, indices = tt.compile_model(Fn(lambda t: t.topk(4)).eval(), ties)(ties)
    assert values.tolist() == [[2.0, 2.0, 1.0, 1.0]] and indices.tolist() == [[5, 6, 0, 1]]


def test_contiguous_slices_are_views_read_in_place():
    """``x[t]`` and ``x[2, 1:2]`` of a row-major tensor, read by products, are blocks of
    it: no kernel, their readers read them in place, call after call. (A slice read by
    element-wise ops only is computed in their kernel instead.)"""
    model = Fn(lambda x: torch.matmul(x[0], x[1].T) + torch.matmul(x[2, 1:2], x[3].T)).eval()
    compiled = check(model, torch.randn(4, 3, 5))
    views = [g for g in compiled.groups if g.is_view(compiled.graph)
             and compiled.graph.nodes[g.output].op == "slice"]
    assert len(views) == 4
    x = torch.randn(4, 3, 5)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_values_made_from_constants_are_folded_at_import():
    """A mask made in forward from ``arange``, a weight transposed in forward, one
    normalized in forward (``normalize`` is not the random ``normal``) and ``zeros_like``
    are constants of the graph, not ops on it; a value drawn at random is not."""
    class Made(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(5, 6))
            self.v = nn.Parameter(torch.randn(3, 6))

        def forward(self, x):
            t = x.shape[0]
            keep = torch.arange(t)[None, :] <= torch.arange(t)[:, None]
            y = F.linear(x, self.w.t() * 0.5)                 # [t, 6]
            y = y.masked_fill(~keep[:, :1], 0.0) + torch.zeros_like(y) + torch.ones(6)
            return F.linear(y, F.normalize(self.v, dim=1))    # [t, 3]
    compiled = check(Made().eval(), torch.randn(4, 5))
    ops = {n.op for n in compiled.graph.nodes.values()}
    assert "dense" in ops and not ops & {"permute", "scalar", "le", "sqrt", "clip", "div"}

    class Drawn(nn.Module):
        def __init__(self, draw):
            super().__init__()
            self.w, self.draw = nn.Parameter(torch.randn(5)), draw

        def forward(self, x):
            return x + self.draw(self.w)                      # drawn from a constant
    for draw in (torch.randn_like, lambda w: w.clone().normal_(),
                 lambda w: w.clone().random_(0, 4)):
        with pytest.raises(GraphError, match="unsupported operator '(randn_like|normal_|random_)'"):
            tt.compile_model(Drawn(draw).eval(), torch.randn(5))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), k=st.integers(1, 6),
       dim=st.integers(-3, 2), largest=st.booleans(), seed=st.integers(0, 1000))
def test_topk_matches_torch(shape, k, dim, largest, seed):
    """torch.topk and Tensor.topk, largest or smallest, along any axis: the values, and
    the indices as int64 where the values are distinct (PyTorch orders equal values in
    no fixed way; here the least index comes first)."""
    dim = dim % len(shape)
    shape[dim] = max(shape[dim], k)
    torch.manual_seed(seed)
    x = torch.randn(*shape)
    for fn in (lambda t: torch.topk(t, k, dim=dim, largest=largest).values * 2.0,
               lambda t: t.topk(k, dim, largest)[1]):
        model = Fn(fn).eval()
        got, want = tt.compile_model(model, x)(x), model(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), dim=st.integers(-3, 2),
       descending=st.booleans(), ties=st.booleans(), seed=st.integers(0, 1000))
def test_sort_and_argsort_match_torchs_stable_sort(shape, dim, descending, ties, seed):
    """torch.sort, Tensor.sort and torch.argsort along any axis, either direction, with
    equal values or without: values and indices as PyTorch's ``stable=True`` sort gives
    them (equal values in their order)."""
    dim = dim % len(shape)
    torch.manual_seed(seed)
    x = torch.randn(*shape)
    if ties:
        x = (x * 1.5).floor()
    for fn, want in ((lambda t: torch.sort(t, dim, descending).values - 1.0,
                      torch.sort(x, dim=dim, descending=descending, stable=True).values - 1.0),
                     (lambda t: t.sort(dim=dim, descending=descending)[1],
                      torch.sort(x, dim=dim, descending=descending, stable=True)[1]),
                     (lambda t: torch.argsort(t, dim, descending),
                      torch.argsort(x, dim=dim, descending=descending, stable=True))):
        got = tt.compile_model(Fn(fn).eval(), x)(x)
        assert got.dtype == want.dtype and torch.equal(got, want)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 4), k=st.integers(1, 4), h=st.integers(1, 6), w=st.integers(1, 6),
       kernel=st.integers(1, 4), stride=st.integers(1, 3), pad=st.integers(0, 2),
       dilation=st.integers(1, 2), seed=st.integers(0, 1000))
def test_conv_transpose_matches_torch_on_random_shapes(c, k, h, w, kernel, stride, pad,
                                                       dilation, seed):
    out_pad = seed % stride                  # PyTorch's bound: below the stride
    pad = min(pad, dilation * (kernel - 1) // 2)      # at least one output row
    model = randomized(nn.ConvTranspose2d(c, k, kernel, stride=stride, padding=pad,
                                          output_padding=out_pad, dilation=dilation), seed)
    torch.manual_seed(seed)
    check(model, torch.randn(1, c, h, w))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 7), w=st.integers(2, 7), oh=st.integers(1, 15), ow=st.integers(1, 15),
       mode=st.sampled_from(["bilinear", "bicubic", "nearest"]), corners=st.booleans(),
       seed=st.integers(0, 1000))
@example(h=4, w=5, oh=9, ow=3, mode="bicubic", corners=False, seed=0)
@example(h=7, w=2, oh=3, ow=11, mode="bicubic", corners=True, seed=1)
def test_resampling_matches_torch_on_random_sizes(h, w, oh, ow, mode, corners, seed):
    if mode == "nearest":     # sizes where one divides the other: a multiple, or a divisor
        oh = h * (1 + oh % 3) if oh % 2 else max(d for d in range(1, h + 1) if h % d == 0
                                                 and d <= max(1, oh % h))
        ow = w * (1 + ow % 3)
    kw = {"align_corners": corners} if mode != "nearest" else {}
    torch.manual_seed(seed)
    check(Fn(lambda x: F.interpolate(x, size=(oh, ow), mode=mode, **kw)).eval(),
          torch.randn(1, 2, h, w))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(2, 6), min_size=1, max_size=3),
       pads=st.lists(st.integers(-1, 5), min_size=6, max_size=6),
       mode=st.sampled_from(["constant", "reflect", "replicate", "circular"]),
       seed=st.integers(0, 1000))
def test_pad_modes_match_torch_on_random_shapes(shape, pads, mode, seed):
    nd = len(shape)
    limit = [s - 1 if mode == "reflect" else s for s in shape[::-1]]
    # PyTorch pads the trailing axes, at most three for these modes, with pads under the
    # size; constant pads may crop one (-1) where three or more are left.
    sizes = [x for s in shape[::-1] for x in (s, s)]
    pads = [max(min(p, lim), -1 if mode == "constant" and size >= 4 else 0)
            for p, lim, size in zip(pads[:2 * min(nd, 3)], [x for s in limit for x in (s, s)],
                                    sizes)]
    x = torch.randn(1, 1, *shape) if mode != "constant" else torch.randn(*shape)
    torch.manual_seed(seed)
    check(Fn(lambda t: F.pad(t, pads, mode=mode) * 2.0).eval(), x)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(length=st.integers(60, 400), other=st.lists(st.integers(1, 4), min_size=0, max_size=2),
       axis=st.integers(0, 2), seed=st.integers(0, 1000))
def test_cumsum_matches_torch_on_long_and_short_axes(length, other, axis, seed):
    """Running sums over an axis of any length: the blocked scan past ``CUMSUM_DIRECT``
    (blocks of about its square root, a partial last block), the masked sum up to it."""
    shape = list(other)
    shape.insert(axis % (len(shape) + 1), length)
    torch.manual_seed(seed)
    dim = axis % (len(shape) + 1) - len(shape)        # negative dims too
    check(Fn(lambda t: t.cumsum(dim) - t).eval(), torch.randn(*shape))


def test_a_tuned_decoder_block_with_transposed_conv_and_upsampling():
    """The search tunes the new anchors and the resampling fused into a conv's input."""
    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
            self.conv = nn.Conv2d(8, 4, 3, padding=1)
            self.norm = nn.GroupNorm(2, 4)

        def forward(self, x, skip):
            y = torch.cat([self.up(x), F.interpolate(skip, scale_factor=2)], 1)
            return F.silu(self.norm(self.conv(y)))
    model = randomized(Decoder())
    x, skip = torch.randn(1, 8, 6, 6), torch.randn(1, 4, 6, 6)
    compiled = tt.compile_model(model, (x, skip), trials=12, batch_size=4, seed=0)
    with torch.no_grad():
        want = model(x, skip)
    assert float((compiled(x, skip) - want).abs().max()) <= 1e-4 * float(want.abs().max())
    names = {t.func.name for t in compiled.tasks}
    assert any("conv_transpose2d" in n for n in names) and any("group_norm" in n for n in names)
    assert all(s.best_latency < float("inf") for s in compiled.states)


def test_unsupported_forms_say_what_and_where():
    cases = [
        (Fn(lambda x: F.interpolate(x, scale_factor=1.5)), (1, 2, 5, 5),
         "does not give whole sizes; pass size="),
        (Fn(lambda x: F.interpolate(x, size=(3, 3))), (1, 2, 5, 5),
         "only sizes where one divides the other"),
        (Fn(lambda x: F.normalize(x, p=1.0)), (2, 3), "normalize with p=1.0"),
        (Fn(lambda x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.1)), (1, 2, 4),
         "dropout_p > 0"),
        (Fn(lambda x: F.interpolate(x, size=(4, 4), mode="bilinear", antialias=True)),
         (1, 2, 8, 8), "antialias is not supported"),
        (Fn(lambda x: x.real), (2, 3), "attribute 'real'"),
        (Fn(lambda x: torch.roll(x, 1)), (2, 3), "roll without dims"),
    ]
    for model, shape, message in cases:
        with pytest.raises(GraphError, match=message):
            tt.compile_model(model.eval(), torch.randn(*shape))
    # PyTorch rejects these pads itself; a graph built by hand gets the op's own error.
    g = Graph()
    with pytest.raises(GraphError, match=r"reflect pads \[\(4, 1\)\] must be under the size"):
        g.op("pad", [g.input("x", (4,))], pads=((4, 1),), mode="reflect")
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()

    class Weights(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = mha

        def forward(self, x):
            out, w = self.mha(x, x, x)
            return out.sum(-1, keepdim=True) * w
    with pytest.raises(GraphError, match="attention weights are not supported"):
        tt.compile_model(Weights().eval(), torch.randn(2, 3, 8))
