"""Fusion: partition a graph into groups, each compiled as one kernel, and extract tasks.

Two passes over the nodes in topological order, following the patterns of ``graph.ops``:
1. an element-wise or broadcast node joins the group that produces one of its inputs when
   that value has no other reader (the anchor's epilogue: conv + bias + ReLU + residual
   add); it prefers the group with the heaviest pattern (an anchor over a reduction);
2. a group of injective (or, when the consumer has no anchor, element-wise) nodes whose
   result is read by one group only is merged into that group (a permute feeding a
   matmul becomes the matmul's index arithmetic).
Every group has exactly one output, so the groups form a DAG.

Identical groups (the same structural hash of their function, e.g. the repeated blocks of
a ResNet stage) are one task with a weight: how many times the model runs it.

Example:
    >>> groups = fuse(graph)
    >>> tasks = extract_tasks(graph, groups)
    >>> [(t.name, t.weight) for t in tasks]
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .. import te
from ..te.tensor import Tensor
from ..tir.stmt import PrimFunc
from .ir import Graph
from .ops import OPS, Pattern


@dataclass
class Group:
    """Nodes fused into one kernel, in topological order; ``nodes[-1]`` is the output."""

    nodes: list[str]

    @property
    def output(self) -> str:
        return self.nodes[-1]

    def pattern(self, graph: Graph) -> Pattern:
        return max(OPS[graph.nodes[n].op].pattern for n in self.nodes)

    def inputs(self, graph: Graph) -> list[str]:
        """Values read from outside the group, in order of first use."""
        inside, out = set(self.nodes), []
        for n in self.nodes:
            for i in graph.nodes[n].inputs:
                if i not in inside and i not in out:
                    out.append(i)
        return out

    def is_view(self, graph: Graph) -> bool:
        """Only reshapes, or one slice of a contiguous block (``view_index``): the output
        is the input's memory, no kernel needed."""
        if len(self.nodes) == 1 and graph.nodes[self.nodes[0]].op == "slice":
            node = graph.nodes[self.nodes[0]]
            return view_index(node.attrs["index"], graph.nodes[node.inputs[0]].shape) \
                is not None
        return all(graph.nodes[n].op == "reshape" for n in self.nodes)


def view_index(spec: tuple[tuple[Any, ...], ...], shape: tuple[int, ...]
               ) -> tuple[Any, ...] | None:
    """The NumPy index of a ``slice`` op's ``spec`` on an input of ``shape`` when the
    slice is one contiguous block of it (ints on the leading axes, then at most one range
    of step 1, then whole axes; new axes anywhere), else None. Such a slice is a view: a
    model's ``x[t]`` of every time step (an unrolled LSTM's) reads a buffer of its own,
    and the steps' kernels are one function, one task.

    Example:
        >>> view_index((("i", 3), ("s", 0, 1, 8)), (5, 8))     # x[3] of a [5, 8] tensor
        (slice(3, 4, None), slice(0, 8, None))
    """
    out: list[Any] = []
    d, after_range = 0, False     # the input's axis; whether a range was taken before it
    for e in spec:
        if e[0] == "n":
            out.append(None)
            continue
        if e[0] == "i" and not after_range:
            out.append(slice(e[1], e[1] + 1))    # a slice, so NumPy gives a view: x[1, 2]
        elif e[0] == "s" and e[2] == 1 and (not after_range or e[1] == 0 and
                                            e[3] == shape[d]):
            out.append(slice(e[1], e[1] + e[3]))
            after_range = True
        else:
            return None
        d += 1
    return tuple(out)


def fuse(graph: Graph) -> list[Group]:
    """Partition the compute nodes of ``graph`` into groups (see the module docstring)."""
    users = graph.users()
    outs = set(graph.outputs)
    groups: list[Group] = []
    group_of: dict[str, Group] = {}
    for node in graph.nodes.values():
        if not node.is_compute:
            continue
        grp = None
        if OPS[node.op].pattern <= Pattern.BROADCAST:
            cands = [group_of[i] for i in node.inputs if i in group_of
                     and group_of[i].output == i and len(users[i]) == 1 and i not in outs]
            if cands:
                grp = max(cands, key=lambda g: g.pattern(graph))
        if grp is None:
            grp = Group([])
            groups.append(grp)
        grp.nodes.append(node.name)
        group_of[node.name] = grp
    # pass 2, consumers first: a cheap producer group moves into its only reader
    for grp in reversed(list(groups)):
        pat = grp.pattern(graph)
        if pat > Pattern.INJECTIVE or grp.output in outs:
            continue
        readers = {id(group_of[u]): group_of[u] for u in users[grp.output]}
        if len(readers) != 1:
            continue
        (dst,) = readers.values()
        if grp.is_view(graph) and graph.nodes[grp.output].op == "slice":
            continue  # a block of its input, read in place: its reader's kernel stays one
        if dst.pattern(graph) == Pattern.ANCHOR and pat != Pattern.INJECTIVE:
            continue  # an element-wise producer inlined into a conv is recomputed per tap
        dst.nodes[:0] = grp.nodes
        for n in grp.nodes:
            group_of[n] = dst
        groups.remove(grp)
    order = {n: k for k, n in enumerate(graph.nodes)}
    for g in groups:
        g.nodes.sort(key=order.__getitem__)
    groups.sort(key=lambda g: order[g.output])
    return groups


def group_func(graph: Graph, group: Group) -> PrimFunc:
    """The group as a function of its external inputs (in ``group.inputs`` order), named
    by position and operator so that identical groups give identical functions."""
    ins = group.inputs(graph)
    tensors: dict[str, Tensor] = {}
    for k, name in enumerate(ins):
        node = graph.nodes[name]
        tensors[name] = te.placeholder(node.shape, node.dtype, name=f"p{k}")
    seen: dict[str, int] = {}
    for n in group.nodes:
        node = graph.nodes[n]
        k = seen[node.op] = seen.get(node.op, -1) + 1
        stage = node.op if k == 0 else f"{node.op}{k}"
        tensors[n] = OPS[node.op].compute([tensors[i] for i in node.inputs], node.attrs, stage)
    ops = [graph.nodes[n].op for n in group.nodes]
    name = "_".join(dict.fromkeys(ops))  # operator kinds in order, each once
    return te.create_func([tensors[i] for i in ins] + [tensors[group.output]], name=name)


@dataclass
class Task:
    """A distinct kernel to tune: ``weight`` groups of the model run it."""

    name: str
    func: PrimFunc
    weight: int
    groups: list[int] = field(default_factory=list)   # indices into the group list

    @property
    def workload(self) -> str:
        return self.func.structural_hash()


def extract_tasks(graph: Graph, groups: list[Group]) -> tuple[list[Task], list[PrimFunc | None]]:
    """Distinct group functions with their weights (how many groups run each), and each
    group's function (None for a reshape-only group, which is a view). A task's function
    marks the inputs that are model constants in all its groups (``PrimFunc.weights``);
    the groups' functions are unmarked."""
    tasks: dict[str, Task] = {}
    funcs: list[PrimFunc | None] = []
    for k, grp in enumerate(groups):
        if grp.is_view(graph):
            funcs.append(None)
            continue
        f = group_func(graph, grp)
        funcs.append(f)
        h = f.structural_hash()
        if h not in tasks:
            tasks[h] = Task(f"{f.name}#{len(tasks)}", f, 0)
        tasks[h].weight += 1
        tasks[h].groups.append(k)
    # The inputs that are model constants in every group of a task are its weights: the
    # search times its programs without the stages that read only them (graph.prepack).
    for t in tasks.values():
        common = set.intersection(*[
            {j for j, name in enumerate(groups[g].inputs(graph)) if name in graph.consts}
            for g in t.groups])
        if common:
            t.func = replace(t.func, weights=tuple(sorted(common)))
    return list(tasks.values()), funcs
