"""Baselines measured in the same run as tensortune: NumPy and PyTorch CPU versions of the
suite's workloads, timed as medians of repeated calls after a warm-up.

Example:
    >>> fn = torch_fn("gmm", inputs)
    >>> seconds = median_time(fn)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np


def setup_torch(threads: int) -> str:
    """Pin PyTorch to ``threads`` threads; a line saying which PyTorch runs, or none."""
    try:
        import torch
    except ImportError:
        return "PyTorch not installed"
    torch.set_num_threads(threads)
    return f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads)"


def median_time(fn: Callable[[], object], min_time: float = 0.3, repeat: int = 7) -> float:
    fn()
    t0 = time.perf_counter()
    fn()
    number = max(1, int(min_time / max(time.perf_counter() - t0, 1e-6) / repeat))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def numpy_fn(name: str, x: list[np.ndarray]) -> Callable[[], object] | None:
    table: dict[str, Callable[[], object]] = {
        "gmm": lambda: x[0] @ x[1],
        "dense": lambda: np.maximum(x[0] @ x[1].T + x[2], 0),
        "bmm": lambda: np.matmul(x[0], x[1]),
        "tbg": lambda: np.einsum("ihd,jhd->hij", x[0], x[1], optimize=True),
        "nrm": lambda: np.sqrt((x[0] * x[0]).sum(axis=(1, 2))),
        "smx": lambda: (lambda e: e / e.sum(1, keepdims=True))(
            np.exp(x[0] - x[0].max(1, keepdims=True))),
        "lnm": lambda: (x[0] - x[0].mean(1, keepdims=True)) / np.sqrt(
            x[0].var(1, keepdims=True) + 1e-5) * x[1] + x[2],
    }
    return table.get(name)


def torch_fn(name: str, x: list[np.ndarray]) -> Callable[[], object] | None:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    t = [torch.from_numpy(a) for a in x]
    table: dict[str, Callable[[], object]] = {
        "gmm": lambda: t[0] @ t[1],
        "dense": lambda: F.relu(F.linear(t[0], t[1], t[2])),
        "c2d": lambda: F.relu(F.conv2d(t[0], t[1], padding=1)),
        "bmm": lambda: torch.bmm(t[0], t[1]),
        "c1d": lambda: F.conv1d(t[0], t[1], padding=1),
        "c3d": lambda: F.conv3d(t[0], t[1], padding=1),
        "grp": lambda: F.conv2d(t[0], t[1], padding=1, groups=4),
        "dil": lambda: F.conv2d(t[0], t[1], padding=2, dilation=2),
        "dep": lambda: F.conv2d(t[0], t[1], padding=1, groups=t[0].shape[1]),
        "t2d": lambda: F.conv_transpose2d(t[0], t[1], stride=2, padding=1),
        "nrm": lambda: torch.linalg.vector_norm(t[0], dim=(1, 2)),
        "smx": lambda: torch.softmax(t[0], dim=1),
        "lnm": lambda: F.layer_norm(t[0], (t[0].shape[1],), t[1], t[2], eps=1e-5),
        "convlayer": lambda: F.relu(F.conv2d(t[0], t[1], padding=1)
                                    * t[2].view(1, -1, 1, 1) + t[3].view(1, -1, 1, 1)),
        "tbg": lambda: torch.einsum("ihd,jhd->hij", t[0], t[1]),
    }
    return table.get(name)
