"""Weights packed once, when a model is compiled, not at every call.

The stages of a tuned kernel that read only the model's weights (``tir.constant_stages``:
a weight copied into the layout the kernel reads, the Winograd weight transform) compute
the same values at every call. The executor's ``Prepacker`` runs them once and calls the
rest, after checking it against the kernel as tuned on the model's own weights. For a
function tuned with its weights marked (``PrimFunc.weights``: a model's tasks) the
search timed the kernel without these stages, so the cut form is always the one run;
otherwise it runs only where it timed faster: the stages' buffers become whole arrays in
memory instead of tiles kept hot in cache, which is not faster for every program.

Example:
    >>> packer = Prepacker()
    >>> kern, arrays = packer.step(kern, arrays, constant={1})
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..kernel import Kernel, aligned_empty
from ..reference import CheckError, check_close


@dataclass(frozen=True)
class PackChoice:
    """What ``Prepacker`` measured for one kernel: microseconds a call as tuned and with
    its constant stages packed once, and whether the packed form is the one run."""

    kernel: str
    packed_bytes: int
    tuned_us: float
    packed_us: float
    kept: bool


class Prepacker:
    """Chooses, for each kernel of a model with constant inputs, between the kernel as
    tuned and its ``split_constant_stages`` form with the stages run once here. The split
    form is kept only when it computes the same outputs (checked on the model's
    constants and random other inputs) and runs faster (best of several timings each,
    alternated), or, with ``always`` or for a function whose weights are marked
    (``PrimFunc.weights``), whenever it computes the same. Packed arrays are
    shared by the steps that give a kernel the same constants, so an unrolled RNN reads
    one packed weight, not one per step."""

    def __init__(self, always: bool = False) -> None:
        self.always = always        # keep every split form that checks equal, untimed
        self.choices: list[PackChoice] = []
        self._packs: dict[tuple[object, ...], list[np.ndarray]] = {}
        self._keep: dict[tuple[int, ...], bool] = {}

    def step(self, kern: Kernel, arrays: list[np.ndarray], constant: set[int]
             ) -> tuple[Kernel, list[np.ndarray]]:
        """The kernel to run for one step and its arguments (``arrays``: the original
        kernel's, ``constant``: the positions holding model constants; a function with
        marked weights is cut at those, as its search timed it)."""
        if kern.func.weights:     # cut where the search cut when it timed the kernel
            constant = set(kern.func.weights)
        if not constant:
            return kern, arrays
        got = kern.cut(constant)      # built once per kernel and constant set
        if got is None:
            return kern, arrays
        pack_k, main_k, split = got
        ids = tuple(id(arrays[i]) for i in split.pack_params)
        pkey = (pack_k.source, *ids)        # one packed array per pack and weights
        if pkey not in self._packs:
            got_p = pack_k(*[arrays[i] for i in split.pack_params])
            self._packs[pkey] = list(got_p) if isinstance(got_p, tuple) else [got_p]
        packed = self._packs[pkey]
        ckey = (id(main_k), *ids)
        if ckey not in self._keep:
            self._keep[ckey] = self._measure(kern, main_k, arrays, packed, constant)
        if not self._keep[ckey]:
            return kern, arrays
        n_in = len(kern.func.inputs)
        return main_k, arrays[:n_in] + packed + arrays[n_in:]

    def _measure(self, kern: Kernel, main_k: Kernel, arrays: list[np.ndarray],
                 packed: list[np.ndarray], constant: set[int]) -> bool:
        from ..measure.worker import _time  # not at import: the worker runs as __main__

        rng = np.random.default_rng(0)
        n_in = len(kern.func.inputs)
        ins = []
        for i, a in enumerate(arrays[:n_in]):
            if i in constant:
                ins.append(a)
            elif np.issubdtype(a.dtype, np.floating):
                ins.append(rng.standard_normal(a.shape).astype(a.dtype))
            else:       # indices (a gather's): 0 is in range of any table
                ins.append(np.zeros(a.shape, a.dtype))
        outs_a = [aligned_empty(a.shape, a.dtype) for a in arrays[n_in:]]
        outs_b = [aligned_empty(a.shape, a.dtype) for a in arrays[n_in:]]
        kern(*ins, out=outs_a)
        main_k(*ins, *packed, out=outs_b)
        name = kern.func.name
        try:
            for i, (a, b) in enumerate(zip(outs_a, outs_b)):
                check_close(b, a, f"{name} output {i}")
        except CheckError:
            ok = False
        else:
            ok = True
        # A task tuned with its weights marked was timed without these stages: the cut
        # form is what the search chose.
        always = self.always or bool(kern.func.weights)
        tuned_us = packed_us = float("inf")
        if ok and not always:
            runs = [(kern, ins + outs_a), (main_k, ins + packed + outs_b)]
            for _ in range(2):      # alternated: a drift in the machine's speed hits both
                t = [min(_time(k._lib, ctypes.cast(k._argv(*[a.ctypes.data for a in args]),
                                                   ctypes.c_void_p), 5, 0.01, 0)[0])
                     for k, args in runs]
                tuned_us, packed_us = min(tuned_us, t[0] * 1e6), min(packed_us, t[1] * 1e6)
        keep = ok and (always or packed_us < 0.98 * tuned_us)
        self.choices.append(PackChoice(name, sum(p.nbytes for p in packed), tuned_us,
                                       packed_us, keep))
        return keep
