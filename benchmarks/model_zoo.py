"""The models of the whole-model benchmark, written out in PyTorch (no torchvision needed):
ResNet-18, MobileNet-V2 and a BERT-base encoder layer, each with size arguments so the
tests can compile small versions of the same code.

Example:
    >>> model = resnet18().eval()
    >>> block = bert_layer(hidden=64, heads=4, ffn=128)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convs with batch norm, a residual, ReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, width: int = 64, classes: int = 1000, blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i in range(4):
            cout = width * 2 ** i
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if b == 0 and i > 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    """MobileNet-V2's block: 1x1 expand, 3x3 depthwise, 1x1 project (ReLU6 between)."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6()]
        layers += [nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                   nn.BatchNorm2d(mid), nn.ReLU6(),
                   nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    # (expansion, channels, repeats, stride) of the paper's table 2
    CONFIG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, classes: int = 1000, width: float = 1.0,
                 config: list[tuple[int, int, int, int]] | None = None,
                 last: int = 1280) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return max(8, int(c * width + 4) // 8 * 8)
        cin = ch(32)
        layers: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1, bias=False),
                                   nn.BatchNorm2d(cin), nn.ReLU6()]
        for t, c, n, s in config or self.CONFIG:
            for i in range(n):
                layers.append(InvertedResidual(cin, ch(c), s if i == 0 else 1, t))
                cin = ch(c)
        last = ch(last) if width > 1.0 else last
        layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class BertLayer(nn.Module):
    """A post-norm transformer encoder layer as in BERT (no attention mask)."""

    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.heads, self.dh = heads, hidden // heads
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.o = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.dh).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh), dim=-1)
        ctx = torch.matmul(att, v).permute(0, 2, 1, 3).reshape(b, s, h)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class UNetBlock(nn.Module):
    """Two 3x3 convolutions, each after a group norm and SiLU (a diffusion U-Net's
    residual block, without the time embedding), and a 1x1 skip where widths differ."""

    def __init__(self, cin: int, cout: int, groups: int = 8) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(groups, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(groups, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x)))
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class UNetSmall(nn.Module):
    """A two-level U-Net: down by a strided convolution, up by a transposed one, the
    skip connection concatenated; nearest upsampling adds the coarse features back."""

    def __init__(self, width: int = 32, channels: int = 3) -> None:
        super().__init__()
        w = width
        self.stem = nn.Conv2d(channels, w, 3, padding=1)
        self.enc1 = UNetBlock(w, w)
        self.down = nn.Conv2d(w, 2 * w, 3, stride=2, padding=1)
        self.mid = UNetBlock(2 * w, 2 * w)
        self.up = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = UNetBlock(2 * w, w)
        self.out = nn.Sequential(nn.GroupNorm(8, w), nn.SiLU(),
                                 nn.Conv2d(w, channels, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = self.enc1(self.stem(x))
        m = self.mid(self.down(h1))
        d = self.dec1(torch.cat([self.up(m), h1], 1))
        d = d + F.interpolate(m[:, : d.shape[1]], scale_factor=2, mode="nearest")
        return self.out(d)


class ViTBlock(nn.Module):
    """A pre-norm vision-transformer encoder block on ``nn.MultiheadAttention``."""

    def __init__(self, dim: int = 384, heads: int = 6, mlp: int = 1536) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.n1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


def randomize_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give batch norms non-trivial statistics (fresh ones are the identity, which would
    hide a folding bug)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            c = m.num_features
            m.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(c, generator=g) - 0.5)
    return model


def resnet18(**kw: int) -> nn.Module:
    return randomize_norms(ResNet18(**kw)).eval()


def mobilenet_v2(**kw: object) -> nn.Module:
    return randomize_norms(MobileNetV2(**kw)).eval()  # type: ignore[arg-type]


def bert_layer(**kw: int) -> nn.Module:
    return BertLayer(**kw).eval()


def unet_small(**kw: int) -> nn.Module:
    return UNetSmall(**kw).eval()


def vit_block(**kw: int) -> nn.Module:
    return ViTBlock(**kw).eval()
