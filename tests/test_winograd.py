"""The Winograd F(2x2, 3x3) and F(4x4, 3x3) rewrites (rewrite/winograd.py): equal
results on random inputs for random convolution shapes, compiled schedules of them
compute the reference, and other convolutions are left alone."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.rewrite.winograd import MIN_CHANNELS, winograd
from tensortune.space.space_generator import PostOrderApply, sample
from tensortune.workloads.conv import conv2d, conv_layer

TARGET = tt.Target.host()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(1, 2), C=st.integers(MIN_CHANNELS, 20), K=st.integers(1, 12),
       H=st.integers(1, 4), W=st.integers(1, 4), layer=st.booleans(), m=st.sampled_from([2, 4]))
def test_winograd_preserves_meaning(N, C, K, H, W, layer, m):
    """F(m x m, 3x3) on outputs of 1-4 tiles of m along each axis, with and without the
    folded batch norm's epilogue: the float64 evaluation of the rewrite equals the direct
    convolution's."""
    H, W = m * H, m * W
    f = conv_layer(N, C, K, H, W) if layer else conv2d(N, C, K, H, W, 3, pad=1)
    g = winograd(f, m)
    assert g is not None
    assert 'block("wino_M"' in str(g)
    ins = random_inputs(f, seed=C * 31 + K)
    check_close(evaluate(g, ins)[0], evaluate(f, ins)[0])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(C=st.integers(MIN_CHANNELS, 24), K=st.integers(4, 20), H=st.integers(1, 4),
       seed=st.integers(0, 1000))
def test_scheduled_winograd_computes_the_reference(C, K, H, seed):
    """A random program of the default space over the rewritten function, compiled:
    its float32 result equals the direct convolution's float64 reference."""
    _draw_and_check(conv_layer(1, C, K, 2 * H, 6), seed)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(C=st.integers(MIN_CHANNELS, 24), K=st.integers(4, 20), seed=st.integers(0, 1000),
       d=st.sampled_from([1, 2]))
def test_scheduled_f4_winograd_computes_the_reference(C, K, seed, d):
    """The same for F(4x4, 3x3), undilated and dilated: its transforms' coefficients
    (1/6, 1/24, 8) round more than F(2x2, 3x3)'s, within the check's tolerance."""
    _draw_and_check(conv2d(1, C, K, 8, 8 * d, 3, dilation=d, pad=d, relu=True), seed, m=4)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(1, 2), C=st.integers(MIN_CHANNELS, 12), K=st.integers(1, 9),
       d=st.integers(2, 3), H=st.integers(1, 2), W=st.integers(1, 2), relu=st.booleans(),
       padded=st.booleans())
def test_a_dilated_convolution_keeps_its_meaning(N, C, K, d, H, W, relu, padded):
    """Dilation 2 and 3, outputs of 1-2 tiles per phase along each axis, padded to the
    input's size or not padded: the float64 evaluation of the rewrite equals the direct
    dilated convolution's, for F(2x2, 3x3) and (one tile per phase) F(4x4, 3x3)."""
    m = 4 if H == W == 1 else 2
    grow = 0 if padded else 2 * d       # unpadded, the output is 2d smaller than the input
    f = conv2d(N, C, K, m * d * H + grow, m * d * W + grow, 3, dilation=d, relu=relu,
               pad=d if padded else 0)
    g = winograd(f, m)
    assert g is not None
    ins = random_inputs(f, seed=C * 31 + K + d)
    check_close(evaluate(g, ins)[0], evaluate(f, ins)[0])


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(C=st.integers(MIN_CHANNELS, 20), K=st.integers(4, 20), seed=st.integers(0, 1000))
def test_a_scheduled_dilated_winograd_computes_the_reference(C, K, seed):
    """A random program of the default space over a dilated convolution's rewrite,
    compiled: its float32 result equals the direct convolution's float64 reference."""
    _draw_and_check(conv2d(1, C, K, 8, 12, 3, dilation=2, relu=False), seed)


def _draw_and_check(f, seed: int, m: int = 2) -> None:
    """Rewrite ``f`` with F(m x m, 3x3), draw a legal program from one of the rewrite's
    design spaces (the seed picks which), build it and compare it with ``f``'s
    reference."""
    g = winograd(f, m)
    assert g is not None
    gen = PostOrderApply.default(TARGET)
    spaces = gen.generate(g)
    sch = None
    for k in range(8):
        sch = sample(g, spaces[(seed + k) % len(spaces)], seed + k, gen.postprocs)
        if sch is not None:
            break
    assert sch is not None, "no legal program drawn in 8 tries"
    ins = random_inputs(f, seed=seed)
    got = tt.build(sch)(*[np.copy(a) for a in ins])
    check_close(got, evaluate(f, ins)[0])


def test_other_convolutions_are_left_alone():
    """Stride 2, a dilated output not a multiple of twice the dilation, groups, 5x5, an
    odd output and few channels: no rewrite; the suite's C2D, CONVLAYER and DIL get
    one, its other convolutions none."""
    assert winograd(conv2d(1, 16, 16, 8, 8, 3, stride=2, pad=1)) is None
    assert winograd(conv2d(1, 16, 16, 6, 8, 3, dilation=2)) is None
    assert winograd(conv2d(1, 16, 16, 8, 6, 3, dilation=2)) is None
    assert winograd(conv2d(1, 16, 16, 8, 8, 3, groups=2)) is None
    assert winograd(conv2d(1, 16, 16, 8, 8, 5)) is None
    assert winograd(conv2d(1, 16, 16, 7, 8, 3, pad=1)) is None
    assert winograd(conv2d(1, MIN_CHANNELS - 1, 16, 8, 8, 3, pad=1)) is None
    for name in ("c2d", "convlayer", "dil"):
        assert winograd(tt.workloads.get(name)) is not None
    for name in ("grp", "dep", "c1d", "c3d", "t2d", "gmm", "dense"):
        assert winograd(tt.workloads.get(name)) is None, name
    g = winograd(tt.workloads.get("convlayer"))
    assert g is not None and winograd(g) is None      # not twice
    # F(4x4, 3x3) asks for outputs in whole tiles of 4 (times the dilation).
    assert winograd(conv2d(1, 16, 16, 6, 8, 3, pad=1), 4) is None
    assert winograd(conv2d(1, 16, 16, 8, 12, 3, dilation=2, pad=2), 4) is None
    for name in ("c2d", "convlayer", "dil"):
        assert winograd(tt.workloads.get(name), 4) is not None
    assert winograd(winograd(tt.workloads.get("c2d"), 4)) is None


def test_a_transpose_read_at_several_places_stays_a_stage():
    """AutoInline inlines a transpose read once per element, and keeps one that a
    consumer reads at two places (each inlined load would stride across rows): the
    rewrite's two transposes stay stages."""
    from tensortune import te
    from tensortune.space.auto_inline import AutoInline

    def func(twice: bool):
        a = te.placeholder((32, 48), name="a")
        t = te.compute((48, 32), lambda j, i: a[i, j], name="t")
        out = te.compute((48, 31), lambda j, i: t[j, i] + t[j, i + 1] if twice else t[j, i],
                         name="out")
        return te.create_func([a, out], name="tr")

    for twice in (False, True):
        sch = tt.Schedule(func(twice))
        AutoInline().apply(sch, sch.get_block("t"))
        assert ('block("t"' in str(sch.func)) == twice
    g = winograd(tt.workloads.get("convlayer"))
    assert g is not None
    sch = tt.Schedule(g)
    for name in ("wino_xt", "wino_wt"):
        AutoInline().apply(sch, sch.get_block(name))
        assert f'block("{name}"' in str(sch.func)
