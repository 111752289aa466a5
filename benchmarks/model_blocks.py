"""Blocks of further model families for the whole-model benchmark, written out in
PyTorch: EfficientNet's squeeze-and-excitation block, a ConvNeXt block, an Inception
block, an MLP-Mixer block, a DenseNet block, a wav2vec-style 1-d convolutional feature
encoder and an LSTM. Each is what a user of that family hands ``tt.compile_model``.

Example:
    >>> model = convnext_block().eval()
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.model_zoo import randomize_norms


class SqueezeExcite(nn.Module):
    """Channel weights from the global average: 1x1 down, ReLU, 1x1 up, sigmoid."""

    def __init__(self, c: int, r: int = 4) -> None:
        super().__init__()
        self.down, self.up = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.up(F.relu(self.down(w))))


class MBConvSE(nn.Module):
    """EfficientNet / MobileNet-V3's block: 1x1 expand (hard swish), 3x3 depthwise
    (SiLU), squeeze-and-excitation, 1x1 project, the residual added."""

    def __init__(self, c: int = 32, expand: int = 4) -> None:
        super().__init__()
        e = c * expand
        self.exp, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.dw = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False)
        self.bn2, self.se = nn.BatchNorm2d(e), SqueezeExcite(e)
        self.proj, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.bn1(self.exp(x)))
        y = self.se(F.silu(self.bn2(self.dw(y))))
        return x + self.bn3(self.proj(y))


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise, channels-last layer norm, a 4x MLP with GELU, layer scale and the
    residual (the permutes as ConvNeXt writes them)."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.dw, self.norm = nn.Conv2d(c, c, 7, padding=3, groups=c), nn.LayerNorm(c)
        self.pw1, self.pw2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.pw2(F.gelu(self.pw1(y))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class InceptionBlock(nn.Module):
    """Four branches (1x1; 1x1 then 3x3; 1x1 then 5x5; 3x3 average pool then 1x1)
    concatenated along the channels."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.b1, self.b4 = nn.Conv2d(c, 32, 1), nn.Conv2d(c, 32, 1)
        self.b2a, self.b2b = nn.Conv2d(c, 48, 1), nn.Conv2d(48, 64, 3, padding=1)
        self.b3a, self.b3b = nn.Conv2d(c, 16, 1), nn.Conv2d(16, 32, 5, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([F.relu(self.b1(x)), F.relu(self.b2b(F.relu(self.b2a(x)))),
                          F.relu(self.b3b(F.relu(self.b3a(x)))),
                          F.relu(self.b4(F.avg_pool2d(x, 3, 1, 1)))], 1)


class MixerBlock(nn.Module):
    """MLP-Mixer: a token-mixing MLP over the transposed sequence, then a channel MLP,
    each after a layer norm and with a residual."""

    def __init__(self, tokens: int = 64, c: int = 128) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.t1, self.t2 = nn.Linear(tokens, 4 * tokens), nn.Linear(4 * tokens, tokens)
        self.c1, self.c2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.n1(x).transpose(1, 2)
        x = x + self.t2(F.gelu(self.t1(y))).transpose(1, 2)
        return x + self.c2(F.gelu(self.c1(self.n2(x))))


class DenseBlock(nn.Module):
    """DenseNet: each layer (batch norm, ReLU, 3x3 conv) reads the concatenation of all
    the features before it."""

    def __init__(self, c: int = 32, growth: int = 16, layers: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(c + i * growth), nn.ReLU(),
                          nn.Conv2d(c + i * growth, growth, 3, padding=1, bias=False))
            for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for layer in self.layers:
            feats.append(layer(torch.cat(feats, 1)))
        return torch.cat(feats, 1)


class ConvFeatures(nn.Module):
    """wav2vec 2.0's feature encoder, first two layers: strided 1-d convolutions over the
    raw waveform, a group norm of one channel per group, GELU."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.c1, self.norm = nn.Conv1d(1, c, 10, stride=5), nn.GroupNorm(c, c)
        self.c2 = nn.Conv1d(c, c, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.c2(F.gelu(self.norm(self.c1(x)))))


class LSTMOut(nn.Module):
    """An LSTM's output sequence (``out, _ = lstm(x)``)."""

    def __init__(self, n_in: int = 128, hidden: int = 256) -> None:
        super().__init__()
        self.rnn = nn.LSTM(n_in, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


def mbconv_se(**kw: int) -> nn.Module:
    return randomize_norms(MBConvSE(**kw)).eval()


def convnext_block(**kw: int) -> nn.Module:
    return ConvNeXtBlock(**kw).eval()


def inception_block(**kw: int) -> nn.Module:
    return InceptionBlock(**kw).eval()


def mixer_block(**kw: int) -> nn.Module:
    return MixerBlock(**kw).eval()


def dense_block(**kw: int) -> nn.Module:
    return randomize_norms(DenseBlock(**kw)).eval()


def conv_features(**kw: int) -> nn.Module:
    return ConvFeatures(**kw).eval()


def lstm(**kw: int) -> nn.Module:
    return LSTMOut(**kw).eval()
