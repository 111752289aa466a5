"""Program features for the cost model, in the style of Ansor's per-statement features.

Each store of the block-flattened program (blocks replaced by their bodies, loops kept)
gets a vector: loop structure and annotations on its path, arithmetic per iteration,
how each access moves with the innermost loop (broadcast, contiguous, strided), the
footprint of its accesses in the innermost 1, 2 and 3 loops (reuse), and allocations.
A program's vector is the sum and the max of its stores' vectors (fixed length).

Example:
    >>> x = extract(sch.func)          # np.ndarray of shape (FEATURES,)
"""

from __future__ import annotations

import math

import numpy as np

from ..codegen.lower import flatten_blocks
from ..tir.arith import affine
from ..tir.expr import BinOp, BufferLoad, Call
from ..tir.functor import iter_exprs, walk_with_loops
from ..tir.stmt import Allocate, BufferStore, For, ForKind, PrimFunc

_KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED)
PER_STORE = 26
FEATURES = 2 * PER_STORE + 2


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


def _store_vector(st: BufferStore, path: tuple[For, ...]) -> list[float]:
    iters = math.prod(lp.extent for lp in path) if path else 1
    by_kind = [math.prod(lp.extent for lp in path if lp.kind == k) for k in _KINDS]
    inner = path[-1] if path else None
    ops = sum(1 for x in iter_exprs(st.value) if isinstance(x, BinOp)
              and x.dtype.startswith("float"))
    calls = sum(1 for x in iter_exprs(st.value) if isinstance(x, Call))
    loads = [x for x in iter_exprs(st.value) if isinstance(x, BufferLoad)]
    strides = [0.0, 0.0, 0.0, 0.0]  # broadcast, contiguous, strided, non-affine
    footprint = [0.0, 0.0, 0.0]
    for buf, idx in [(st.buffer, st.indices)] + [(x.buffer, x.indices) for x in loads]:
        aff = affine(buf.flat_index(idx))
        if aff is None or inner is None:
            strides[3] += 1
            continue
        s = abs(aff[0].get(inner.var, 0))
        strides[0 if s == 0 else 1 if s == 1 else 2] += 1
        for k in range(3):
            span = 1
            for lp in path[-(k + 1):]:
                span += abs(aff[0].get(lp.var, 0)) * (lp.extent - 1)
            footprint[k] += _log(span * 4)
    pragma = inner.annotation("pragma_unroll", 0) if inner is not None else 0
    kind = [1.0 if inner is not None and inner.kind == k else 0.0 for k in _KINDS]
    return [_log(iters), *[_log(x) for x in by_kind], _log(inner.extent if inner else 1),
            *kind, float(ops), float(calls), _log(iters * (ops + calls)), float(len(loads)),
            *strides, *footprint, 1.0 if st.buffer.scope == "local" else 0.0,
            float(len(path)), _log(float(pragma or 0)), _log(st.buffer.size * 4),
            _log(iters * (len(loads) + 1) * 4)]


def extract(func: PrimFunc) -> np.ndarray:
    """The feature vector of a scheduled function."""
    stores: list[list[float]] = []
    allocs: list[int] = [b.size for b in func.alloc_buffers]
    for st, path in walk_with_loops(flatten_blocks(func.body)):
        if isinstance(st, Allocate):
            allocs.append(st.buffer.size)
        elif isinstance(st, BufferStore):
            stores.append(_store_vector(st, path))
    mat = np.asarray(stores, dtype=np.float64).reshape(-1, PER_STORE)
    summed = mat.sum(axis=0) if len(mat) else np.zeros(PER_STORE)
    top = mat.max(axis=0) if len(mat) else np.zeros(PER_STORE)
    extra = [float(len(stores)), _log(sum(allocs) * 4)]
    return np.concatenate([summed, top, extra])
