"""The graph IR: a model as a DAG of tensor operators, before fusion into kernels.

A ``Graph`` holds nodes in topological order. A node is a model input, a constant (a
weight, its value in ``Graph.consts``) or an operator from ``graph.ops`` with attributes.
Every node carries its static shape and dtype; layout is explicit: tensors are plain
row-major arrays of the shape shown (NCHW activations, OIHW conv weights, [K, N] dense
weights), and changing a layout is an operator (``permute``, ``reshape``) or a constant
rewritten at import.

Example:
    >>> g = Graph()
    >>> x = g.input("x", (1, 8), "float32")
    >>> w = g.const("w", np.ones((8, 4), "float32"))
    >>> y = g.op("dense", [x, w])
    >>> g.outputs = [g.op("relu", [y])]
    >>> print(g)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TensorTuneError


class GraphError(TensorTuneError):
    """A model or graph that tensortune cannot represent or compile."""


@dataclass
class Node:
    """One value of the graph. ``op`` is "input", "const" or an operator name."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict[str, Any]
    shape: tuple[int, ...]
    dtype: str
    source: str = ""      # where it came from in the user's model, for error messages

    @property
    def is_compute(self) -> bool:
        return self.op not in ("input", "const")


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    # The model's own shape of each output (by position), which the executor gives its
    # results: a 0-d tensor (``x.sum()``) is held as shape (1,), which broadcasts alike.
    output_shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # And its own dtype where the graph holds it in another: an index (int32 here, int64
    # in PyTorch), a comparison (a float mask of 1.0 and 0.0 here, bool in PyTorch).
    output_dtypes: dict[int, str] = field(default_factory=dict)
    # Each constant's content (dtype, shape, digest) -> its node: see ``const``.
    _by_content: dict[tuple, str] = field(default_factory=dict, repr=False, compare=False)

    def _fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self.nodes:
            name, n = f"{base}_{n}", n + 1
        return name

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> str:
        """Add a model input; returns its node name."""
        name = self._fresh(name)
        self.nodes[name] = Node(name, "input", (), {}, tuple(shape), dtype)
        self.inputs.append(name)
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        """Add a constant (float tensors are stored as float32, indices as int32); a
        constant equal to one already added is that one's node. So a weight read by many
        ops is one buffer: an unrolled LSTM's 32 steps had 32 copies of their 1 MiB
        state weight, each step's product reading its own from memory (RESULTS.md)."""
        arr = np.asarray(value)
        arr = arr.astype("int32" if arr.dtype.kind in "iub" else "float32")
        arr = np.ascontiguousarray(arr.reshape(arr.shape or (1,)))
        key = (arr.dtype.str, arr.shape, hashlib.blake2b(arr.data, digest_size=16).digest())
        same = self._by_content.get(key)
        if same is not None and np.array_equal(self.consts[same], arr):
            return same
        name = self._fresh(name)
        self.nodes[name] = Node(name, "const", (), {}, arr.shape, str(arr.dtype))
        self.consts[name] = arr
        self._by_content[key] = name
        return name

    def op(self, op: str, inputs: list[str], source: str = "", name: str | None = None,
           **attrs: Any) -> str:
        """Add an operator node; its shape and dtype are inferred from ``graph.ops``."""
        from .ops import infer

        for i in inputs:
            if i not in self.nodes:
                raise GraphError(f"{op} ({source or name}): input {i!r} is not in the graph")
        node = Node(self._fresh(name or op), op, tuple(inputs), dict(attrs), (), "float32",
                    source)
        node.shape, node.dtype = infer(node, [self.nodes[i] for i in inputs])
        self.nodes[node.name] = node
        return node.name

    def users(self) -> dict[str, list[str]]:
        """Node name -> names of the nodes that read it (graph outputs not included)."""
        out: dict[str, list[str]] = {n: [] for n in self.nodes}
        for node in self.nodes.values():
            for i in dict.fromkeys(node.inputs):   # x * x reads x once
                out[i].append(node.name)
        return out

    def prune(self) -> Graph:
        """Drop nodes no output depends on (folded batch norms, unused weights)."""
        live: set[str] = set()
        stack = list(self.outputs)
        while stack:
            n = stack.pop()
            if n not in live:
                live.add(n)
                stack += self.nodes[n].inputs
        self.nodes = {k: v for k, v in self.nodes.items() if k in live or k in self.inputs}
        self.consts = {k: v for k, v in self.consts.items() if k in live}
        return self

    def __str__(self) -> str:
        lines = [f"graph({', '.join(f'{i}: {list(self.nodes[i].shape)}' for i in self.inputs)}):"]
        for n in self.nodes.values():
            if n.op == "input":
                continue
            if n.op == "const":
                lines.append(f"  {n.name} = const({n.dtype}{list(n.shape)})")
                continue
            attrs = "".join(f", {k}={v}" for k, v in n.attrs.items())
            lines.append(f"  {n.name} = {n.op}({', '.join(n.inputs)}{attrs})"
                         f"  # {n.dtype}{list(n.shape)}")
        lines.append(f"  return {', '.join(self.outputs)}")
        return "\n".join(lines)
