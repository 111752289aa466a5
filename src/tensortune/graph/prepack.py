"""Weights packed once, when a model is compiled, not at every call.

A tuned kernel often copies a weight into the layout its inner loops read (a
``cache_read`` with ``transform_layout``: a matmul's B in column panels, a conv's weight in
blocks of output channels), and a Winograd kernel transforms its weight. In a model the
weight is a constant, so these stages compute the same values at every call. TVM calls
such weights layout-free. ``split_constant_stages`` cuts a scheduled function in two: a
``pack`` function holding the stages that read only constants, and a ``main`` function
that takes what they wrote as extra inputs. The executor runs ``pack`` once and calls
``main``, after checking it against the kernel as tuned on the model's own buffers and
timing both (``Prepacker``): the stages' buffers become whole arrays in memory instead of
tiles kept hot in cache, which is not faster for every program.

Example:
    >>> split = split_constant_stages(kernel.func, constant={1})   # param 1 is a weight
    >>> packed = build(split.pack)(w)                               # once
    >>> y = build(split.main)(x, w, packed)                         # each call
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..kernel import Kernel, aligned_empty, build
from ..reference import CheckError, check_close
from ..tir.functor import blocks_in, loads_in, rewrite_stmt, stores_in
from ..tir.stmt import Block, Buffer, For, PrimFunc, Seq, Stmt

_EMPTY = Seq(())


@dataclass(frozen=True)
class ConstantSplit:
    """``pack`` reads the constant parameters ``pack_params`` (positions in the original
    function's parameters) and writes ``packed``; ``main`` takes the original
    parameters with ``packed`` inserted after the inputs."""

    pack: PrimFunc
    main: PrimFunc
    pack_params: tuple[int, ...]
    packed: tuple[Buffer, ...]


def _only(body: Stmt, keep: set[int]) -> Stmt:
    """``body`` with every block whose id is not in ``keep`` removed, and the loops and
    sequences left empty by that."""

    def fn(s: Stmt) -> Stmt | None:
        if isinstance(s, Block):
            return None if id(s) in keep else _EMPTY
        if isinstance(s, For) and s.body is _EMPTY:
            return _EMPTY
        if isinstance(s, Seq):
            parts = tuple(x for x in s.stmts if x is not _EMPTY)
            if len(parts) != len(s.stmts):
                return _EMPTY if not parts else parts[0] if len(parts) == 1 else Seq(parts)
        return None

    return rewrite_stmt(body, stmt_fn=fn)


def _constant_buffers(func: PrimFunc, constant: set[Buffer]) -> tuple[set[Buffer], list[Block]]:
    """The intermediates whose every value is computed from ``constant`` alone, and the
    blocks that write them: the largest such set, found by dropping every buffer a
    block writes from something else until none is dropped."""
    blocks = list(blocks_in(func.body))
    writes = {id(b): {st.buffer for st in stores_in(b)} for b in blocks}
    reads = {id(b): {ld.buffer for ld in loads_in(b)} - writes[id(b)] for b in blocks}
    # Register tiles (``local``) stay in the kernel: made arrays, they would be read
    # from memory where the kernel keeps them in registers.
    cand = {b for b in func.alloc_buffers if b.scope == "global"
            and any(b in writes[id(x)] for x in blocks)}
    changed = True
    while changed:
        changed = False
        for b in blocks:
            w = writes[id(b)]
            if w & cand and not (w <= cand and reads[id(b)] <= constant | cand):
                cand -= w
                changed = True
    return cand, [b for b in blocks if writes[id(b)] <= cand]


def split_constant_stages(func: PrimFunc, constant: set[int]) -> ConstantSplit | None:
    """Cut ``func`` (a scheduled function) into the stages computed from the inputs at
    positions ``constant`` alone and the rest (see the module doc); None when no stage
    the rest reads is computed from constants alone. Only ``global`` stages are cut."""
    bad = [i for i in constant if not 0 <= i < len(func.inputs)]
    if bad:
        raise ValueError(f"{func.name}: constant parameter positions {bad} are not inputs "
                         f"(it has {len(func.inputs)})")
    # Every store in a block (a scheduled function's are): stages are cut at blocks.
    if sum(1 for b in blocks_in(func.body) for _ in stores_in(b)) != \
            sum(1 for _ in stores_in(func.body)):
        return None
    const_bufs = {func.params[i] for i in constant}
    cand, const_blocks = _constant_buffers(func, const_bufs)
    if not const_blocks:
        return None
    ids = {id(b) for b in const_blocks}
    rest = [b for b in blocks_in(func.body) if id(b) not in ids]
    read_by_rest = {ld.buffer for b in rest for ld in loads_in(b)}
    packed = tuple(b for b in func.alloc_buffers if b in cand and b in read_by_rest)
    if not packed:
        return None
    pack_reads = {ld.buffer for b in const_blocks for ld in loads_in(b)}
    pack_params = tuple(i for i in sorted(constant) if func.params[i] in pack_reads)
    pack = PrimFunc(f"{func.name}_pack", tuple(func.params[i] for i in pack_params) + packed,
                    _only(func.body, ids),
                    tuple(b for b in func.alloc_buffers if b in cand and b not in packed),
                    num_outputs=len(packed))
    main = PrimFunc(func.name, func.inputs + packed + func.outputs,
                    _only(func.body, {id(b) for b in rest}),
                    tuple(b for b in func.alloc_buffers if b not in cand), func.num_outputs)
    return ConstantSplit(pack, main, pack_params, packed)


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
    alternated), or, with ``always``, whenever it computes the same. Packed arrays are
    shared by the steps that give a kernel the same constants, so an unrolled RNN reads
    one packed weight, not one per step."""

    def __init__(self, always: bool = False) -> None:
        self.always = always        # keep every split form that checks equal, untimed
        self.choices: list[PackChoice] = []
        self._split: dict[tuple[int, frozenset[int]],
                          tuple[Kernel, Kernel, ConstantSplit] | None] = {}
        self._packs: dict[tuple[object, ...], list[np.ndarray]] = {}
        self._keep: dict[tuple[int, ...], bool] = {}

    def step(self, kern: Kernel, arrays: list[np.ndarray], constant: set[int]
             ) -> tuple[Kernel, list[np.ndarray]]:
        """The kernel to run for one step and its arguments (``arrays``: the original
        kernel's, ``constant``: the positions holding model constants)."""
        if not constant:
            return kern, arrays
        skey = (id(kern), frozenset(constant))
        if skey not in self._split:
            split = split_constant_stages(kern.func, constant)
            self._split[skey] = None if split is None else \
                (build(split.pack, kern.target), build(split.main, kern.target), split)
        got = self._split[skey]
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
        tuned_us = packed_us = float("inf")
        if ok and not self.always:
            runs = [(kern, ins + outs_a), (main_k, ins + packed + outs_b)]
            for _ in range(2):      # alternated: a drift in the machine's speed hits both
                t = [min(_time(k._lib, ctypes.cast(k._argv(*[a.ctypes.data for a in args]),
                                                   ctypes.c_void_p), 5, 0.01, 0)[0])
                     for k, args in runs]
                tuned_us, packed_us = min(tuned_us, t[0] * 1e6), min(packed_us, t[1] * 1e6)
        keep = ok and (self.always or packed_us < 0.98 * tuned_us)
        self.choices.append(PackChoice(name, sum(p.nbytes for p in packed), tuned_us,
                                       packed_us, keep))
        return keep
