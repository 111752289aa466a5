"""Every suite workload, unscheduled, compiles and matches the reference; the definitions
themselves are checked against independent NumPy formulas."""

import numpy as np
import pytest

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs


@pytest.mark.parametrize("name", tt.workloads.names())
def test_unscheduled_matches_reference(name):
    f = tt.workloads.get(name, small=True)
    ins = random_inputs(f, seed=3)
    assert all(np.abs(x).max() > 0 for x in ins)
    out = tt.build(f)(*ins)
    check_close(out, evaluate(f, ins)[0], name)


def _conv2d_np(x, w, stride=1, pad=1, dil=1, groups=1):
    N, C, H, W = x.shape
    K, cg, R, _ = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dil * (R - 1) - 1) // stride + 1
    out = np.zeros((N, K, OH, OW))
    kg = K // groups
    for k in range(K):
        g = k // kg
        for ry in range(R):
            for rx in range(R):
                patch = xp[:, g * cg:(g + 1) * cg, ry * dil: ry * dil + stride * OH: stride,
                           rx * dil: rx * dil + stride * OW: stride]
                out[:, k] += np.einsum("nchw,c->nhw", patch, w[k, :, ry, rx])
    return out


def test_definitions_match_numpy_formulas():
    f = tt.workloads.get("gmm", small=True)
    a, b = random_inputs(f)
    np.testing.assert_allclose(evaluate(f, [a, b])[0], a.astype(float) @ b, rtol=1e-12)

    f = tt.workloads.get("dense", small=True)
    x, w, bias = random_inputs(f)
    want = np.maximum(x.astype(float) @ w.T.astype(float) + bias, 0)
    np.testing.assert_allclose(evaluate(f, [x, w, bias])[0], want, rtol=1e-12, atol=1e-12)

    f = tt.workloads.get("smx", small=True)
    (x,) = random_inputs(f)
    x = x.astype(float)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(evaluate(f, [x])[0], e / e.sum(1, keepdims=True), rtol=1e-12)

    f = tt.workloads.get("lnm", small=True)
    x, g, be = random_inputs(f)
    x64 = x.astype(float)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + be
    np.testing.assert_allclose(evaluate(f, [x, g, be])[0], want, rtol=1e-6, atol=1e-6)

    f = tt.workloads.get("nrm", small=True)
    (a,) = random_inputs(f)
    np.testing.assert_allclose(evaluate(f, [a])[0], np.sqrt((a.astype(float) ** 2).sum((1, 2))))

    for name, kw in [("c2d", {}), ("grp", dict(groups=4)), ("dil", dict(dil=2, pad=2))]:
        f = tt.workloads.get(name, small=True)
        x, w = random_inputs(f)
        want = _conv2d_np(x, w, **kw)
        if name == "c2d":
            want = np.maximum(want, 0)
        np.testing.assert_allclose(evaluate(f, [x, w])[0], want, rtol=1e-10, atol=1e-10)

    f = tt.workloads.get("t2d", small=True)
    x, w = random_inputs(f)  # x [1, C, H, W], w [C, K, 4, 4]; stride 2, pad 1
    N, C, H, W = x.shape
    K = w.shape[1]
    full = np.zeros((N, K, (H - 1) * 2 + 4, (W - 1) * 2 + 4))
    for i in range(H):
        for j in range(W):
            full[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4] += np.einsum(
                "nc,ckyx->nkyx", x[:, :, i, j].astype(float), w.astype(float))
    np.testing.assert_allclose(evaluate(f, [x, w])[0], full[:, :, 1:-1, 1:-1], rtol=1e-10,
                               atol=1e-10)


def test_suite_shapes_and_flops():
    f = tt.workloads.get("c2d")
    assert f.outputs[0].shape == (1, 64, 56, 56)
    assert tt.workloads.get("t2d").outputs[0].shape == (1, 32, 56, 56)
    assert tt.workloads.flops("gmm") == pytest.approx(2 * 1024**3, rel=0.01)
    with pytest.raises(tt.TensorTuneError, match="unknown workload 'nope'"):
        tt.workloads.get("nope")


def test_structural_hash_is_stable_and_shape_sensitive():
    h1 = tt.workloads.get("gmm", M=64, N=64, K=64).structural_hash()
    h2 = tt.workloads.get("gmm", M=64, N=64, K=64).structural_hash()
    h3 = tt.workloads.get("gmm", M=64, N=64, K=32).structural_hash()
    assert h1 == h2 and h1 != h3
