"""Run a whole model with one compiled kernel per fused group.

Every buffer is allocated once, when the executor is made: the weights (contiguous
float32), the model inputs, and each group's output (aligned). A reshape-only group is a
view of its input's buffer. The argument array of each kernel call is built once too, so
a call of the model is: copy the inputs in, run the kernels, copy the outputs out.

The kernels run from one C loop (``run_steps``), not one ctypes call each: 0.6-2.6 us a
kernel here, 4-9% of an unrolled RNN's call of 65-96 small kernels (RESULTS.md). A
kernel's stages that read only the model's weights run once, when the executor is made
(``prepack.py``).

Example:
    >>> ex = Executor(graph, groups, kernels)
    >>> y = ex(x)                  # numpy in, numpy out
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..codegen import Target, compile_source
from ..kernel import Kernel, aligned_empty
from .fuse import Group, view_index
from .ir import Graph, GraphError
from .prepack import Prepacker

_RUN_STEPS = """#include <stdint.h>
typedef int32_t (*tt_step)(void**);
/* Each kernel in order; 0, or the first failing kernel's code (its index in *failed). */
int32_t tt_run_steps(void** fns, void** argvs, int32_t n, int32_t* failed) {
  for (int32_t i = 0; i < n; ++i) {
    int32_t rc = ((tt_step)fns[i])((void**)argvs[i]);
    if (rc != 0) { *failed = i; return rc; }
  }
  return 0;
}
"""


@functools.cache
def _steps_lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(compile_source(_RUN_STEPS, Target.host())))
    lib.tt_run_steps.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                                 ctypes.POINTER(ctypes.c_int32)]
    lib.tt_run_steps.restype = ctypes.c_int32
    return lib      # held by the cache: the library stays loaded


def run_steps() -> Any:
    """The C function that calls a list of kernels (``tt_packed`` pointers) on their
    argument arrays in order, built once and kept in the kernel cache."""
    return _steps_lib().tt_run_steps


class Executor:
    def __init__(self, graph: Graph, groups: list[Group],
                 kernels: Sequence[Kernel | None], prepack: bool | str = True) -> None:
        self.graph = graph
        self.groups = groups
        self.kernels = list(kernels)
        bufs: dict[str, np.ndarray] = {}
        for name, value in graph.consts.items():
            bufs[name] = np.ascontiguousarray(value)
        for name in graph.inputs:
            node = graph.nodes[name]
            bufs[name] = aligned_empty(node.shape, node.dtype)
        self.steps: list[tuple[Any, Any]] = []
        self.step_groups: list[int] = []        # the group each step runs
        self.step_kernels: list[Kernel] = []    # the kernel each step runs
        # Kernels whose stages read only weights may run them once, here (prepack.py).
        if prepack not in (True, False, "always"):
            raise GraphError(f"prepack is True, False or 'always', not {prepack!r}")
        self.prepacker = Prepacker(always=prepack == "always") if prepack else None
        for gi, (grp, kern) in enumerate(zip(groups, self.kernels)):
            out = graph.nodes[grp.output]
            ins = grp.inputs(graph)
            if kern is None:
                if not grp.is_view(graph):
                    raise GraphError(f"group {grp.nodes} has no kernel")
                src = bufs[ins[0]]
                node = graph.nodes[grp.nodes[0]]
                view = src
                if node.op == "slice":       # a contiguous block of its input, in place
                    view = src[view_index(node.attrs["index"], src.shape)]
                bufs[grp.output] = view.reshape(out.shape)
                if not np.shares_memory(bufs[grp.output], src):
                    raise GraphError(f"group {grp.nodes} is not a view of {ins[0]}")
                continue
            bufs[grp.output] = aligned_empty(out.shape, out.dtype)
            arrays = [bufs[i] for i in ins] + [bufs[grp.output]]
            for a, p in zip(arrays, kern.func.params):
                if a.shape != p.shape or str(a.dtype) != p.dtype:
                    raise GraphError(f"kernel {kern.func.name}: parameter {p.name} is "
                                     f"{p.dtype}{list(p.shape)}, buffer is "
                                     f"{a.dtype}{list(a.shape)}")
            if self.prepacker is not None:
                kern, arrays = self.prepacker.step(
                    kern, arrays, {j for j, i in enumerate(ins) if i in graph.consts})
            argv = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
            self.steps.append((kern._fn, argv))
            self.step_groups.append(gi)
            self.step_kernels.append(kern)
        self.buffers = bufs
        n = len(self.steps)
        self._fns = (ctypes.c_void_p * n)(*[ctypes.cast(fn, ctypes.c_void_p).value
                                            for fn, _ in self.steps])
        self._argvs = (ctypes.c_void_p * n)(*[ctypes.addressof(a) for _, a in self.steps])
        self._failed = ctypes.c_int32(-1)

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run on numpy inputs; returns fresh output arrays."""
        g = self.graph
        if len(inputs) != len(g.inputs):
            raise GraphError(f"the model takes {len(g.inputs)} inputs, got {len(inputs)}")
        for name, x in zip(g.inputs, inputs):
            buf = self.buffers[name]
            x = np.asarray(x)
            if x.shape != buf.shape:
                raise GraphError(f"input {name}: compiled for shape {list(buf.shape)}, got "
                                 f"{list(x.shape)}; compile the model again for this shape")
            np.copyto(buf, x, casting="same_kind")
        rc = run_steps()(self._fns, self._argvs, len(self.steps), ctypes.byref(self._failed))
        if rc != 0:
            grp = self.groups[self.step_groups[self._failed.value]]
            raise GraphError(f"the kernel of group {grp.nodes} returned error code {rc}")
        outs = []
        for k, o in enumerate(g.outputs):
            buf = self.buffers[o].reshape(g.output_shapes.get(k, self.buffers[o].shape))
            outs.append(buf.astype(g.output_dtypes.get(k, buf.dtype)))   # a copy, always
        return outs

    def profile(self, *inputs: Any, repeat: int = 10) -> list[tuple[int, float]]:
        """(group index, median seconds) of each kernel, run in model order on these
        inputs (so each kernel sees its real input, and caches as warm as in a call)."""
        import statistics

        self(*inputs)
        times: list[list[float]] = [[] for _ in self.steps]
        for _ in range(repeat):
            for k, (fn, argv) in enumerate(self.steps):
                t0 = time.perf_counter()
                fn(argv)
                times[k].append(time.perf_counter() - t0)
        return [(g, statistics.median(t)) for g, t in zip(self.step_groups, times)]

    def __call__(self, *inputs: Any) -> Any:
        """Call like the model: torch tensors in give torch tensors out."""
        torch_in = any(type(x).__module__.startswith("torch") for x in inputs)
        arrays = [x.detach().cpu().numpy() if hasattr(x, "detach") else x for x in inputs]
        outs: list[Any] = list(self.run(*arrays))
        if torch_in:
            import torch

            outs = [torch.from_numpy(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)
