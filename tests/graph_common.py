"""Helpers of the model-import tests: a function as a module, random weights, and a
compiled model checked against PyTorch."""

import pytest

import tensortune as tt

torch = pytest.importorskip("torch")
nn = torch.nn


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def randomized(model, seed=0):
    """``model`` in eval mode with every parameter drawn at random (a fresh norm's
    weights are ones and zeros, which would hide a wrong scale or shift)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return model.eval()


def check(model, x, trials=0, **kw):
    compiled = tt.compile_model(model, x, trials=trials, **kw)
    with torch.no_grad():
        want = model(x)
    got = compiled(x)
    assert got.shape == want.shape
    scale = float(want.abs().max())
    assert scale > 0
    err = float((got - want).abs().max())
    assert err <= 1e-4 * max(1.0, scale), f"max error {err} (output scale {scale})"
    return compiled
