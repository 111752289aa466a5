"""Program features for the cost model, in the style of Ansor's per-statement features.

Each store of the block-flattened program (blocks replaced by their bodies, loops kept)
gets a vector: loop structure and annotations on its path, arithmetic per iteration,
how each access moves with the innermost loop (broadcast, contiguous, strided), the
footprint of its accesses in the innermost 1, 2 and 3 loops (reuse), allocations, and
(``MEMORY_NAMES``) the bytes it moves into each cache level, its register tile and the
share of the cores its parallel loops keep busy. A program's vector is the sum and the
max of its stores' vectors (fixed length).

The memory features raised the cost model's ranking of programs it had not seen, on
re-run 4's records (RESULTS.md, "Cost-model features for caches and registers").

Example:
    >>> x = extract(sch.func)          # np.ndarray of shape (FEATURES,)
    >>> rows = store_rows(sch.func)    # one row of PER_STORE per store
"""

from __future__ import annotations

import math

import numpy as np

from ..codegen.lower import flatten_blocks
from ..codegen.target import Target
from ..tir.arith import affine, flat_affine
from ..tir.expr import BinOp, BufferLoad, Call
from ..tir.functor import iter_exprs, walk_with_loops
from ..tir.linear import structural_key
from ..tir.stmt import PRAGMA_UNROLL, Allocate, Buffer, BufferStore, For, ForKind, PrimFunc

_KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED)
BASE = 26
MEMORY_NAMES = ("l1_bytes", "l1_outer", "l2_bytes", "l2_outer", "l3_bytes", "l3_outer",
                "footprint", "accumulators", "loaded", "flops_per_load", "reduction",
                "busy")
MEMORY = len(MEMORY_NAMES)
PER_STORE = BASE + MEMORY
FEATURES = 2 * PER_STORE + 2
_UNROLLED = (ForKind.VECTORIZED, ForKind.UNROLLED)


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


# Each access of a store (the store first, then its value's loads, in order): buffer,
# indices, and a key equal for equal accesses. A value reads the same element many times
# over (a Winograd transform's 64 loads repeat its 16 inputs), so what an access gives is
# computed once per key, and added once per access.
Access = tuple[Buffer, tuple, tuple[int, object]]


def _accesses(st: BufferStore, loads: list[BufferLoad]) -> list[Access]:
    return [(buf, idx, (id(buf), tuple([structural_key(i) for i in idx])))
            for buf, idx in [(st.buffer, st.indices)] + [(x.buffer, x.indices) for x in loads]]


def _store_vector(st: BufferStore, path: tuple[For, ...], accesses: list[Access],
                  ops: int, calls: int) -> list[float]:
    loads = len(accesses) - 1   # the value's loads
    iters = math.prod(lp.extent for lp in path) if path else 1
    by_kind = [math.prod(lp.extent for lp in path if lp.kind == k) for k in _KINDS]
    inner = path[-1] if path else None
    strides = [0.0, 0.0, 0.0, 0.0]  # broadcast, contiguous, strided, non-affine
    footprint = [0.0, 0.0, 0.0]
    seen: dict[tuple[int, object], tuple[int, list[float]]] = {}
    for buf, idx, key in accesses:
        got = seen.get(key)
        if got is None:
            got = seen[key] = _access_vector(buf, idx, path)
        strides[got[0]] += 1
        for k, f in enumerate(got[1]):   # added in access order: the same sums
            footprint[k] += f
    pragma = inner.annotation(PRAGMA_UNROLL, 0) if inner is not None else 0
    kind = [1.0 if inner is not None and inner.kind == k else 0.0 for k in _KINDS]
    return [_log(iters), *[_log(x) for x in by_kind], _log(inner.extent if inner else 1),
            *kind, float(ops), float(calls), _log(iters * (ops + calls)), float(loads),
            *strides, *footprint, 1.0 if st.buffer.scope == "local" else 0.0,
            float(len(path)), _log(float(pragma or 0)), _log(st.buffer.size * 4),
            _log(iters * (loads + 1) * 4)]


def _access_vector(buf: Buffer, idx: tuple, path: tuple[For, ...]
                   ) -> tuple[int, list[float]]:
    """An access's stride class (0 broadcast, 1 contiguous, 2 strided, 3 non-affine or
    outside every loop) along the innermost loop, and its footprint terms over the
    innermost 1, 2 and 3 loops (none for class 3)."""
    aff = flat_affine(buf.shape, idx)
    if aff is None or not path:
        return 3, []
    s = abs(aff[0].get(path[-1].var, 0))
    foot = []
    for k in range(3):
        span = 1
        for lp in path[-(k + 1):]:
            span += abs(aff[0].get(lp.var, 0)) * (lp.extent - 1)
        foot.append(_log(span * 4))
    return (0 if s == 0 else 1 if s == 1 else 2), foot


def _spans(buf_shape: tuple[int, ...], idx: tuple, path: tuple[For, ...]) -> list[list[int]]:
    """Per index dimension, the elements it spans over the loops ``path[j:]`` for each
    level j (0: the whole path; len(path): none). A non-affine index (floordiv, floormod)
    spans the product of its loops' extents, capped by the dimension."""
    n = len(path)
    out = []
    for d, e in enumerate(idx):
        dim = int(buf_shape[d])
        aff = affine(e)
        col = [1] * (n + 1)
        if aff is not None:
            acc = 1
            for j in range(n - 1, -1, -1):
                acc += abs(aff[0].get(path[j].var, 0)) * (path[j].extent - 1)
                col[j] = min(dim, acc)
        else:
            used = {x for x in iter_exprs(e)}
            acc = 1
            for j in range(n - 1, -1, -1):
                if path[j].var in used:
                    acc *= path[j].extent
                col[j] = min(dim, acc)
        out.append(col)
    return out


def _memory_vector(st: BufferStore, accesses: list[Access], path: tuple[For, ...],
                   caches: tuple[int, ...], cores: int, ops: int) -> list[float]:
    """How the store's accesses use the memory hierarchy and the registers.

    - Per cache size C: the bytes moved into a cache of that size, taken as the
      footprint of the largest loop subtree whose accesses fit in C times the
      iterations of the loops outside it (log2), and those iterations (log2); then the
      footprint of the whole loop nest (log2). A crude model (it ignores reuse across
      the iterations outside the subtree), but it orders tilings the way caches do.
    - The register tile: the accumulators (the store's elements over the innermost run
      of unrolled and vectorized loops, log2), the elements its loads touch over that
      run (log2; an accumulation's read of its own slot included), the flops per such
      element, and 1 when the loop around the run is a reduction (the tile stays live
      across it).
    - The share of the cores the parallel loops keep busy (3 iterations on 2 cores:
      0.75; no parallel loop: 1 / cores).
    """
    n = len(path)
    per = []
    seen: dict[tuple[int, object], list[int]] = {}
    for buf, idx, key in accesses:
        row = seen.get(key)
        if row is None:
            sp = _spans(tuple(buf.shape), tuple(idx), path)
            row = seen[key] = [math.prod(col[j] for col in sp) * 4 for j in range(n + 1)]
        per.append(row)
    total = [sum(a[j] for a in per) for j in range(n + 1)]
    outer = [1] * (n + 1)  # iterations of the loops outside level j
    for j in range(1, n + 1):
        outer[j] = outer[j - 1] * path[j - 1].extent
    feats: list[float] = []
    for c in caches:
        j = next((j for j in range(n + 1) if total[j] <= c), n)
        feats += [_log(total[j] * outer[j]), _log(outer[j])]
    r = n
    while r > 0 and path[r - 1].kind in _UNROLLED:
        r -= 1
    acc = per[0][r] / 4
    loaded = sum(a[r] for a in per[1:]) / 4
    flops = (outer[n] // outer[r]) * max(1, ops)
    around = path[r - 1] if r > 0 else None
    reduction = 0.0
    if around is not None:
        coef = flat_affine(st.buffer.shape, st.indices)
        reduction = 1.0 if coef is not None and coef[0].get(around.var, 0) == 0 else 0.0
    par = math.prod(lp.extent for lp in path if lp.kind == ForKind.PARALLEL)
    busy = par / (cores * -(-par // cores)) if par > 1 else 1.0 / cores
    return [*feats, _log(total[0]), _log(acc), _log(loaded), flops / max(1.0, loaded),
            reduction, busy]


def store_rows(func: PrimFunc) -> np.ndarray:
    """One row of ``PER_STORE`` features per store of ``func``, in program order. Cache
    sizes and cores are the host's (the tuning target)."""
    return _rows(func)[0]


def _rows(func: PrimFunc) -> tuple[np.ndarray, list[int]]:
    target = Target.host()
    caches = (target.l1d_bytes, target.l2_bytes, target.l3_bytes)
    cores = target.cores
    stores: list[list[float]] = []
    allocs: list[int] = [b.size for b in func.alloc_buffers]
    for st, path in walk_with_loops(flatten_blocks(func.body)):
        if isinstance(st, Allocate):
            allocs.append(st.buffer.size)
        elif isinstance(st, BufferStore):
            loads: list[BufferLoad] = []
            ops = calls = 0
            for x in iter_exprs(st.value):     # one walk of a value for all three counts
                if isinstance(x, BufferLoad):
                    loads.append(x)
                elif isinstance(x, BinOp):
                    ops += x.dtype.startswith("float")
                elif isinstance(x, Call):
                    calls += 1
            acc = _accesses(st, loads)
            stores.append(_store_vector(st, path, acc, ops, calls)
                          + _memory_vector(st, acc, path, caches, cores, ops))
    return np.asarray(stores, dtype=np.float64).reshape(-1, PER_STORE), allocs


def extract(func: PrimFunc) -> np.ndarray:
    """The feature vector of a scheduled function."""
    mat, allocs = _rows(func)
    summed = mat.sum(axis=0) if len(mat) else np.zeros(PER_STORE)
    top = mat.max(axis=0) if len(mat) else np.zeros(PER_STORE)
    extra = [float(len(mat)), _log(sum(allocs) * 4)]
    return np.concatenate([summed, top, extra])
