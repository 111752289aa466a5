"""Build a function or schedule into a callable native kernel.

Example:
    >>> kernel = tt.build(sch)                 # or tt.build(func)
    >>> c = kernel(a, b)                       # allocates the output
    >>> kernel(a, b, out=c)                    # writes into it
    >>> run = kernel.bind(a, b, out=c); run()  # checked once, then one C call a run
    >>> run.repack()                           # a marked weight changed in place
    >>> print(kernel.source)                   # the generated C
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from .codegen import Target, compile_source, emit_c, fast_call, lower
from .errors import KernelArgumentError, TensorTuneError
from .tir.constant_stages import ConstantSplit, split_constant_stages
from .tir.stmt import PrimFunc
from .tir.verify import verify


def aligned_empty(shape: tuple[int, ...], dtype: str | np.dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``align``-byte boundary."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize   # not np.prod: 2.7 us of a 6 us call here
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes].view(dt).reshape(shape)


class Kernel:
    """A compiled function. Call with the inputs; outputs are returned (or written to
    ``out=``). Arguments are checked: count, dtype, shape, C-contiguity, aliasing. Its
    buffers over 64 KiB live in a block that each calling thread keeps between calls
    (until the thread ends, or ``release``)."""

    def __repr__(self) -> str:
        args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in self.func.params)
        return f"Kernel({self.func.name}({args}), {self.func.num_outputs} output(s))"

    def __init__(self, func: PrimFunc, source: str, lib_path: Path, target: Target) -> None:
        self.func = func
        self.source = source
        self.lib_path = lib_path
        self.target = target
        self._lib = ctypes.CDLL(str(lib_path))
        self._fn = self._lib.tt_packed
        self._fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self._fn.restype = ctypes.c_int32
        # What a call checks, worked out once: the checks cost 10 us a call before, a
        # fifth of a 48 us depthwise kernel's time (RESULTS.md).
        self._inputs, self._outputs = func.inputs, func.outputs
        self._specs = [(np.dtype(b.dtype), tuple(b.shape)) for b in func.params]
        self._argv = ctypes.c_void_p * len(func.params)
        # The call's checks and allocation in C (``codegen.fast_call``), where it builds:
        # through ctypes a call cost 7-20 us over the kernel's C-loop time (RESULTS.md).
        self._spec: Any = None
        fc = fast_call.load()
        if fc is not None:
            self._fast = fc.call
            self._spec = fc.spec(ctypes.cast(self._fn, ctypes.c_void_p).value or 0, func.name,
                                 len(func.inputs), tuple((dt.num, shape)
                                                         for dt, shape in self._specs))
        self._cuts: dict[frozenset[int], tuple[Kernel, Kernel, ConstantSplit] | None] = {}

    def _check(self, i: int, arr: Any, buf, role: str) -> np.ndarray:
        where = f"{role} {i} ({buf.name})"
        if not isinstance(arr, np.ndarray):
            raise KernelArgumentError(f"{where}: expected a numpy array, got {type(arr).__name__}")
        if arr.dtype != np.dtype(buf.dtype):
            raise KernelArgumentError(f"{where}: expected dtype {buf.dtype}, got {arr.dtype}; "
                                      f"convert with .astype('{buf.dtype}')")
        if arr.shape != buf.shape:
            raise KernelArgumentError(f"{where}: expected shape {buf.shape}, got {arr.shape}")
        if not arr.flags.c_contiguous:
            raise KernelArgumentError(f"{where}: array must be C-contiguous; "
                                      "pass np.ascontiguousarray(x)")
        return arr

    def release(self) -> None:
        """Free the blocks the kernel keeps for its buffers, every thread's; the next call
        takes one again. Not while another thread is calling the kernel.

        Example:
            >>> y = k(a, b); k.release()     # done with k for now
        """
        fn = getattr(self._lib, "tt_release", None)   # C given by hand may lack it
        if fn is not None:
            fn()

    def _args(self, arrays: Any, first: int, role: str) -> list[np.ndarray]:
        """``arrays`` checked against the parameters from ``first`` on: an exact ndarray
        of the right dtype, shape and layout passes on one line, anything else goes
        through ``_check`` (which raises, or passes a subclass such as a memmap)."""
        bufs = self.func.params
        for i, a in enumerate(arrays):
            dt, shape = self._specs[first + i]
            if not (type(a) is np.ndarray and a.dtype == dt and a.shape == shape
                    and a.flags.c_contiguous):
                self._check(i, a, bufs[first + i], role)
        return list(arrays)

    def _prepare(self, inputs: tuple, out: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The checked inputs and outputs of a call (the outputs allocated when ``out`` is
        None)."""
        ins_b, outs_b = self._inputs, self._outputs
        if len(inputs) != len(ins_b):
            names = ", ".join(b.name for b in ins_b)
            raise KernelArgumentError(f"{self.func.name} takes {len(ins_b)} inputs ({names}), "
                                      f"got {len(inputs)}")
        ins = self._args(inputs, 0, "input")
        if out is None:
            return ins, [aligned_empty(shape, dt) for dt, shape in self._specs[len(ins):]]
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != len(outs_b):
            raise KernelArgumentError(f"{self.func.name} has {len(outs_b)} outputs, "
                                      f"out= gave {len(outs)}")
        outs = self._args(outs, len(ins), "output")
        for i, o in enumerate(outs):
            if not o.flags.writeable:
                raise KernelArgumentError(f"output {i} ({outs_b[i].name}) is read-only")
            for j, a in enumerate(ins + outs[:i]):
                # Both are C-contiguous (checked above), so overlapping bounds are
                # shared memory: the bounds test is exact here, and cheap.
                if np.may_share_memory(o, a):
                    raise KernelArgumentError(
                        f"output {i} ({outs_b[i].name}) overlaps argument {j}; "
                        "outputs must not alias inputs or other outputs")
        return ins, outs

    def __call__(self, *inputs: np.ndarray, out: Any = None) -> Any:
        if self._spec is not None:
            got = self._fast(self._spec, inputs, out)
            if got is not NotImplemented:
                return got
        # Anything the C path does not take (a subclass, another dtype or layout, an
        # overlap) is checked here, and an error says what is wrong.
        ins, outs = self._prepare(inputs, out)
        rc = self._fn(self._argv(*[a.ctypes.data for a in ins + outs]))
        if rc != 0:
            raise TensorTuneError(f"kernel {self.func.name} returned error code {rc}")
        if out is not None:
            return out
        return outs[0] if len(outs) == 1 else tuple(outs)

    def bind(self, *inputs: np.ndarray, out: Any = None) -> BoundKernel:
        """This kernel on these arrays, checked now: calling the result runs it on
        whatever they hold then, with no checks and no allocation (the outputs are
        allocated here when ``out`` is None), and returns the outputs. For a loop that
        refills its inputs in place: a call from Python after a kernel finds the
        interpreter's own data out of cache, and each check and allocation then costs
        several times what it costs alone (RESULTS.md).

        Example:
            >>> run = kernel.bind(x, out=y)
            >>> for batch in batches:
            ...     x[...] = batch; run()          # y holds the result

        For a function with marked weights (``PrimFunc.weights``, ``tt.tune(...,
        weights=...)``), the stages that read only those (a weight copied into panels,
        a Winograd weight transform) run here, once, into arrays the result holds, and
        each call runs the rest: the program its search timed. After changing a bound
        weight in place, call the result's ``repack``.
        """
        ins, outs = self._prepare(inputs, out)
        given = out if out is not None else outs[0] if len(outs) == 1 else tuple(outs)
        cut = self.cut(set(self.func.weights)) if self.func.weights else None
        return BoundKernel(self, ins + outs, given, cut)

    def cut(self, constant: set[int]) -> tuple[Kernel, Kernel, ConstantSplit] | None:
        """The pack and main kernels of this kernel's function cut at its stages that
        read only the inputs at positions ``constant`` (``split_constant_stages``), and
        the split; None where there is no such stage. Built once per set of positions:
        ``bind`` cuts at the marked weights, ``graph.prepack`` at a model's constants.

        Example:
            >>> pack_k, main_k, split = kernel.cut({1})
        """
        key = frozenset(constant)
        if key not in self._cuts:
            split = split_constant_stages(self.func, set(key))
            self._cuts[key] = None if split is None else \
                (build(split.pack, self.target), build(split.main, self.target), split)
        return self._cuts[key]


class BoundKernel:
    """A kernel bound to its arrays (``Kernel.bind``); each call runs it and returns the
    outputs. The arrays are held, so they live as long as this does. With ``cut`` (a
    marked function's pack and main kernels) the pack runs now and each call runs the
    main kernel on the packed arrays (``packed``)."""

    def __init__(self, kernel: Kernel, arrays: list[np.ndarray], result: Any,
                 cut: tuple[Kernel, Kernel, ConstantSplit] | None = None) -> None:
        self.kernel, self.arrays, self.result = kernel, arrays, result
        self.packed: list[np.ndarray] = []
        self._pack: BoundKernel | None = None
        run, args = kernel, arrays
        if cut is not None:
            pack_k, run, split = cut
            self.packed = [aligned_empty(b.shape, b.dtype) for b in split.packed]
            self._pack = pack_k.bind(*[arrays[i] for i in split.pack_params],
                                     out=self.packed)
            self._pack()
            n_in = len(kernel.func.inputs)
            args = arrays[:n_in] + self.packed + arrays[n_in:]
        self._main = run        # held: its library must outlive the pointer below
        self._fn = run._fn
        self._argv = run._argv(*[a.ctypes.data for a in args])

    def repack(self) -> None:
        """Run the weight-only stages again, after a marked weight changed in place (a
        no-op for a kernel without them).

        Example:
            >>> run = kernel.bind(x, w); w *= 0.5; run.repack(); y = run()
        """
        if self._pack is not None:
            self._pack()

    def __call__(self) -> Any:
        rc = self._fn(self._argv)
        if rc != 0:
            raise TensorTuneError(f"kernel {self.kernel.func.name} returned error code {rc}")
        return self.result


def build(obj: Any, target: Target | None = None, source: str | None = None,
          check: bool = False) -> Kernel:
    """Compile a ``PrimFunc`` or a ``Schedule`` (its current program) into a ``Kernel``;
    ``source``, when given, is the C already generated for it (lowering is skipped). With
    ``check``, the kernel is checked once against the float64 reference of the function
    as written (a schedule's original) on random inputs, and built again with
    ``SAFE_FLAGS`` if the compiler got it wrong (``build_checked``).

    Example:
        >>> kernel = tt.build(sch, check=True)      # a hand schedule, checked
    """
    func = getattr(obj, "func", obj)
    if not isinstance(func, PrimFunc):
        raise TensorTuneError(f"tt.build takes a PrimFunc or a Schedule, got {type(obj).__name__}")
    if check:
        return build_checked(func, target, reference=getattr(obj, "original", func))
    tgt = target or Target.host()
    verify(func)
    if source is None:
        source = emit_c(lower(func), tgt)
    return Kernel(func, source, compile_source(source, tgt), tgt)


# Added to the target's flags when a kernel built with them fails its check: gcc 12.2's
# loop vectorizer at -O3 with AVX miscompiled an unscheduled three-stage function (two
# 6 x 5 intermediates, a select between them; RESULTS.md), which the same C at -O2 or
# without the loop vectorizer computes right.
SAFE_FLAGS = ("-fno-tree-loop-vectorize",)


def check_case(func: PrimFunc) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """Random inputs for ``func`` and its float64 reference outputs on them
    (``reference.reference_case``), or None where the reference is finite on none: what
    ``build_checked`` checks a kernel on. Computed once, it checks several kernels of one
    function (``search.guess``'s draws)."""
    from .reference import CheckError, reference_case

    try:
        return reference_case(func)
    except CheckError:
        return None


def build_checked(func: PrimFunc, target: Target | None = None,
                  reference: PrimFunc | None = None,
                  case: tuple[list[np.ndarray], list[np.ndarray]] | None = None) -> Kernel:
    """``build(func)``, checked once against the float64 reference of ``reference`` (by
    default ``func`` itself: an unscheduled function) on random inputs, or on ``case``
    when given (``check_case`` of it); if it fails, built again with ``SAFE_FLAGS`` and
    checked again. For kernels no search has checked (a model's untuned tasks,
    ``tt.build(..., check=True)``). Raises ``TensorTuneError`` naming the function if
    neither build computes it right.

    Example:
        >>> kernel = build_checked(func)
    """
    from .reference import CheckError, check_close

    tgt = target or Target.host()
    case = case or check_case(reference or func)
    if case is None:
        return build(func, tgt)     # no finite reference to check on: as built
    ins, want = case
    err = ""
    for t in (tgt, dataclasses.replace(tgt, flags=tgt.flags + SAFE_FLAGS)):
        k = build(func, t)
        got = k(*[a.copy() for a in ins])
        try:
            for i, (o, w) in enumerate(zip(got if isinstance(got, tuple) else (got,), want)):
                check_close(o, w, f"{func.name} output {i}")
            return k
        except CheckError as e:
            err = str(e)
    raise TensorTuneError(f"{func.name}: its kernel computes wrong results with the "
                          f"target's flags and with {' '.join(SAFE_FLAGS)} too ({err})")
