"""Padded lanes: a reduction none of whose output axes is whole vectors is computed over
an output row padded to whole vectors, and the real part is copied out.

The vector lanes of a tiled reduction hold one output axis, in whole vectors of that
axis's tile (``MultiLevelTiling``'s lane tile divides the axis). A matmul of 97 x 131
has no such tile: 97 and 131 are prime, so its lanes held one element and the best of
64 trials ran at 16 GFLOP/s, a fifth of NumPy's speed (RESULTS.md). Padded to 144
columns, with the inputs read along that axis copied into zero-padded buffers, it tiles
in whole vectors; the consumer reads the first 131 columns only (a fused consumer is
guarded there: ``reverse_compute_inline``).

Before::

    C[i, j] += A[i, k] * B[k, j]                      (j < 131)
After::

    B_pad[k, j] = select(j < 131, B[k, j], 0.0)       (j < 144)
    C_pad[i, j] += A[i, k] * B_pad[k, j]              (j < 144)
    C[i, j] = C_pad[i, j]                             (j < 131)

Applied only to a reduction that MultiLevelTiling tiles (some input is read without
every spatial axis: a matmul, a conv; not softmax's row max, whose lanes run along the
row), where none of its spatial axes is whole vectors (a conv whose output channels fill
the lanes keeps its form), where its output's last axis is at least a vector long, and
where padding it adds at most a quarter (``MAX_WASTE``).

Example:
    >>> new = pad_lanes(matmul_97x131, lanes=16)    # None where it does not apply
"""

from __future__ import annotations

from ..schedule.tree import children, iter_blocks, root_index, unique_name
from ..space.schedule_rule import has_reuse
from ..tir.arith import affine
from ..tir.expr import BinOp, BufferLoad, Expr, FloatImm, IntImm, Select, Var
from ..tir.functor import free_vars, iter_exprs, rewrite_expr
from ..tir.stmt import Block, Buffer, BufferStore, For, IterVar, PrimFunc, Stmt, seq
from .shared_operand import stage

# The most the padded row may exceed the real one: 131 -> 144 is 1.10.
MAX_WASTE = 1.25


def pad_lanes(func: PrimFunc, lanes: int = 16) -> PrimFunc | None:
    """``func`` with each reduction that qualifies (see the module doc) computed over
    whole vectors of ``lanes``, or None where none does."""
    changed = False
    for name in [b.name for b, _ in iter_blocks(func.body)]:
        new = _pad_one(func, name, lanes)
        if new is not None:
            func, changed = new, True
    return func if changed else None


def _padded(n: int, lanes: int) -> int | None:
    """The padded extent of an axis of ``n``, or None if it should stay as it is."""
    p = -(-n // lanes) * lanes
    return p if n >= lanes and p != n and p <= MAX_WASTE * n else None


def _pad_one(func: PrimFunc, name: str, lanes: int) -> PrimFunc | None:
    nest = children(func.body)[root_index(func, name)]
    found = [(b, p) for b, p in iter_blocks(nest)]
    if len(found) != 1:
        return None
    red, path = found[0]
    if red.init is None or red.predicate is not None or not isinstance(red.body, BufferStore):
        return None
    if not has_reuse(red):
        return None   # a row reduction (softmax's max): MultiLevelTiling leaves it alone
    store = red.body
    spatial = [iv for iv in red.iter_vars if iv.kind == "S"]
    if any(iv.extent % lanes == 0 for iv in spatial):
        return None
    # One loop per iteration variable, binding it directly, perfectly nested.
    if len(path) != len(red.iter_vars) or any(
            b is not lp.var or lp.extent != iv.extent
            for iv, b, lp in zip(red.iter_vars, red.bindings, path)):
        return None
    if not isinstance(red.init, BufferStore) or red.init.buffer is not store.buffer:
        return None
    out = store.buffer
    idx = store.indices
    if len(idx) != len(spatial) or any(i is not iv.var for i, iv in zip(idx, spatial)):
        return None
    lane = spatial[-1]
    p = _padded(lane.extent, lanes)
    if p is None:
        return None
    extra = p - lane.extent
    v = lane.var
    # Inputs read along the lane axis: a unit-stride index in one dimension, padded by
    # the same amount with zeros; any other use of the axis and the form stays.
    pads: dict[Buffer, int] = {}
    for ld in _loads(store.value):
        if ld.buffer is out:
            continue
        dims = [d for d, ix in enumerate(ld.indices) if v in free_vars(ix)]
        if not dims:
            continue
        aff = affine(ld.indices[dims[0]])
        if len(dims) > 1 or aff is None or aff[0].get(v) != 1 or \
                pads.get(ld.buffer, dims[0]) != dims[0]:
            return None
        pads[ld.buffer] = dims[0]
    padded_out = Buffer(unique_name(func, f"{out.name}_pad"),
                        tuple(out.shape[:-1]) + (p,), out.dtype)
    copies: list[Stmt] = []
    new_bufs: dict[Buffer, Buffer] = {}
    for buf, d in pads.items():
        shape = list(buf.shape)
        shape[d] += extra
        nb = Buffer(unique_name(func, f"{buf.name}_pad"), tuple(shape), buf.dtype)
        new_bufs[buf] = nb
        axes = _axes(nb)
        point = tuple(iv.var for iv in axes)
        inside = BinOp("<", point[d], IntImm(buf.shape[d]), "bool")
        copies.append(stage(nb.name, nb, axes, Select(inside, BufferLoad(buf, point),
                                                      FloatImm(0.0, buf.dtype), buf.dtype)))

    def swap(e: Expr) -> Expr | None:
        if isinstance(e, BufferLoad) and e.buffer in new_bufs:
            return BufferLoad(new_bufs[e.buffer], e.indices)
        if isinstance(e, BufferLoad) and e.buffer is out:
            return BufferLoad(padded_out, e.indices)
        return None

    value = rewrite_expr(store.value, swap)
    init_value = rewrite_expr(red.init.value, swap)
    ivs = tuple(IterVar(iv.var, p, iv.kind) if iv is lane else iv for iv in red.iter_vars)
    body: Stmt = Block(red.name, ivs, red.bindings, BufferStore(padded_out, idx, value),
                       BufferStore(padded_out, idx, init_value), None)
    lane_loop = path[red.iter_vars.index(lane)]   # each loop binds its own variable
    for lp in reversed(path):
        body = For(lp.var, p if lp is lane_loop else lp.extent, body, lp.kind,
                   lp.annotations)
    axes = _axes(out)
    cut = stage(unique_name(func, f"{out.name}_slice"), out, axes,
                BufferLoad(padded_out, tuple(iv.var for iv in axes)))
    parts = children(func.body)
    at = root_index(func, name)
    parts[at:at + 1] = copies + [body, cut]
    return func.with_body(seq(parts), func.alloc_buffers + tuple(new_bufs.values())
                          + (padded_out,))


def _loads(e: Expr) -> list[BufferLoad]:
    return [x for x in iter_exprs(e) if isinstance(x, BufferLoad)]


def _axes(buf: Buffer) -> list[IterVar]:
    """One spatial axis per dimension of ``buf``, for a stage over its whole shape."""
    return [IterVar(Var(f"a{d}"), n, "S") for d, n in enumerate(buf.shape)]
