"""Which spatial axis of a tiled block goes into the vector lanes, and what layouts that
needs.

MultiLevelTiling vectorizes the innermost loop of its register tile. For a matmul the
natural choice is the output's last axis, but for an NCHW convolution that is the image
width (56, 28, 14, 7: few whole vectors), while the output channels (64, 128, ...) would
fill the lanes, as in every fast CPU convolution (NCHWc in TVM, oneDNN's blocked
layouts). Putting axis ``v`` in the lanes needs every access that moves with ``v`` to be
contiguous in it:

- the accumulator tile (a cache_write stage) is re-laid out with ``v``'s dimension last
  (transform_layout on an intermediate buffer costs nothing at run time);
- a read buffer indexed by ``v`` in some other dimension is copied once into a packed
  layout with that dimension last (cache_read + transform_layout), which is only worth it
  when the spatial axes the buffer does not depend on re-read each element many times
  (conv weights, a matmul's left operand, attention's K per head): the copy is then
  small next to the work that reuses it;
- a read buffer not indexed by ``v`` is broadcast.

Example:
    >>> [c.var.name for c in layout_choices(blk)]      # conv2d NCHW
    ['z', 'k']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..schedule.tree import reads
from ..tir.arith import affine, simplify
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Var, dtype_bytes
from ..tir.functor import free_vars, iter_exprs, substitute
from ..tir.stmt import Block, Buffer, BufferStore

MIN_LANES_EXTENT = 8  # an axis shorter than this cannot fill a vector
# A pack copies the whole buffer once; it pays when each copied element is then read at
# least this many times, i.e. the spatial axes the buffer does not depend on have at
# least this many points (a matmul operand: the other operand's free axis; attention's
# K per head: the query positions; a depthwise conv's input: none, so no pack).
MIN_PACK_REUSE = 8
# A packed copy whose rows (along the dimension the lanes read) are this long or longer is
# cut into vector-wide strips, [N/lanes, ..., lanes]. Rows a power of two of 512 bytes or
# more apart fall into an eighth or less of L1's sets, so the hundreds of rows a register
# tile walks along k do not stay in L1. Best programs of the last suite run, re-timed
# with and without strips: TBG 0.210/0.202 -> 0.186/0.187 ms, DENSE 4.93/5.00 -> 4.41/4.46,
# GMM 13.3/13.0/12.7 -> 12.4/12.6/12.4, BMM level; a conv's 64 weight channels (256
# bytes) gained nothing (C2D 2.01/1.99 -> 2.05/2.01 ms), so they keep the plain layout.
STRIP_MIN_ROW_BYTES = 512
# An L1 data cache way (x86: 32 or 48 KiB in 8 or 12 ways of 64 sets): addresses a
# multiple of this apart share a set.
L1_WAY_BYTES = 4096


@dataclass
class LayoutChoice:
    """Vectorize ``var``; ``out_dim`` is its dimension in the output (moved last in the
    tile when it is not last); ``packs`` are (read index for cache_read, buffer,
    dimension to move last); with ``group``, the inner part of ``var`` split by it goes
    in the lanes."""

    var: Var
    out_dim: int
    out_ndim: int
    packs: list[tuple[int, Buffer, int]] = field(default_factory=list)
    group: int | None = None
    window: bool = False  # some pack moves a sliding-window dimension (y + ry) last

    @property
    def tile_map(self) -> str | None:
        return None if self.out_dim == self.out_ndim - 1 else \
            permutation_map(self.out_ndim, self.out_dim)


def permutation_map(ndim: int, dim: int) -> str:
    """The index-map text moving dimension ``dim`` of an ``ndim``-d buffer last."""
    names = [f"a{i}" for i in range(ndim)]
    order = [n for i, n in enumerate(names) if i != dim] + [names[dim]]
    return f"lambda {', '.join(names)}: ({', '.join(order)})"


def strip_map(ndim: int, dim: int, lanes: int) -> str:
    """The index-map text cutting dimension ``dim`` into ``lanes``-wide strips: the strip
    index first, the other dimensions in order, the position in the strip last."""
    names = [f"a{i}" for i in range(ndim)]
    rest = [n for i, n in enumerate(names) if i != dim]
    return (f"lambda {', '.join(names)}: ({names[dim]} // {lanes}, {', '.join(rest)}, "
            f"{names[dim]} % {lanes})")


def long_rows(buf: Buffer, dim: int, lanes: int) -> bool:
    """Whether ``buf`` read along ``dim`` has rows long enough to cut into strips
    (``STRIP_MIN_ROW_BYTES``), and whole strips of ``lanes``."""
    n = buf.shape[dim]
    return n > lanes and n % lanes == 0 and \
        n * dtype_bytes(buf.dtype) >= STRIP_MIN_ROW_BYTES


def set_aliased(buf: Buffer, dim: int, lanes: int) -> bool:
    """Whether elements of ``buf`` one apart along ``dim`` are a multiple of
    ``L1_WAY_BYTES`` apart, so that a register tile's rows along ``dim`` all map to one L1
    set; and the last dimension is whole strips of ``lanes``, so the rows can be re-laid
    out as strips (``strip_map``). DENSE's output (pitch 12 KiB) is; a conv's NCHW output
    along the channels (56 x 56 x 4 = 12544 bytes) is not."""
    if not 0 <= dim < len(buf.shape) - 1:
        return False
    pitch = math.prod(buf.shape[dim + 1:]) * dtype_bytes(buf.dtype)
    n = buf.shape[-1]
    return pitch % L1_WAY_BYTES == 0 and n >= lanes and n % lanes == 0


def pack_map(buf: Buffer, dim: int, lanes: int, strips: bool = True) -> str:
    """The layout of a packed copy of ``buf`` read along ``dim`` by the lanes: strips
    (``strip_map``) when ``strips`` and its rows are long (``long_rows``), else ``dim``
    moved last."""
    if strips and long_rows(buf, dim, lanes):
        return strip_map(len(buf.shape), dim, lanes)
    return permutation_map(len(buf.shape), dim)


def _dim_of(indices: tuple[Expr, ...], v: Var, ranges: dict[Var, tuple[int, int]]
            ) -> int | None:
    """The one dimension whose index moves with ``v`` at unit stride; None if ``v`` is in
    several dimensions or not affine with coefficient 1; -1 if absent."""
    # Within the axes' ranges terms like k // K (one group) are constants.
    indices = tuple(simplify(ix, ranges) for ix in indices)
    dims = [d for d, ix in enumerate(indices) if v in free_vars(ix)]
    if not dims:
        return -1
    if len(dims) > 1:
        return None
    aff = affine(indices[dims[0]])
    if aff is None or aff[0].get(v) != 1:
        return None
    return dims[0]


def layout_choice(blk: Block, v: Var, group: int | None = None) -> LayoutChoice | None:
    """How to put spatial axis ``v`` of ``blk`` in the vector lanes, or None if some access
    cannot be made contiguous in it. With ``group``, ``v`` is first split into
    ``v_o * group + v_i`` and ``v_i`` goes in the lanes: in a grouped conv the input
    channel ``k // (K / G) * C_g + rc`` is then constant across the lanes."""
    store = blk.body
    if not isinstance(store, BufferStore):
        return None
    ext = next(iv.extent for iv in blk.iter_vars if iv.var is v)
    ranges = {iv.var: (0, iv.extent - 1) for iv in blk.iter_vars}
    axis, sub, own = v, {}, {v}
    if group is not None:
        vo, axis = Var(f"{v.name}_o"), Var(f"{v.name}_i")
        ranges.update({vo: (0, ext // group - 1), axis: (0, group - 1)})
        sub, own = {v: vo * group + axis}, {vo, axis}
        ext = group

    def idx(x: BufferLoad | BufferStore) -> tuple[Expr, ...]:
        return tuple(substitute(i, sub) for i in x.indices) if sub else x.indices

    out_dim = _dim_of(idx(store), axis, ranges)
    if out_dim is None or out_dim < 0 or ext < MIN_LANES_EXTENT:
        return None
    choice = LayoutChoice(v, out_dim, len(store.indices), group=group)
    spatial = {iv.var for iv in blk.iter_vars if iv.kind == "S"}
    ins = [b for b in reads(blk) if b is not store.buffer]
    loads = [x for x in iter_exprs(store.value) if isinstance(x, BufferLoad)]
    for i, buf in enumerate(ins):
        dims = {_dim_of(idx(x), axis, ranges) for x in loads if x.buffer is buf}
        if len(dims) != 1 or None in dims:
            return None
        d = dims.pop()
        assert d is not None
        if d in (-1, len(buf.shape) - 1):
            continue  # broadcast, or already contiguous
        used = {u for x in loads if x.buffer is buf for ix in x.indices
                for u in free_vars(ix)}
        reuse = math.prod(iv.extent for iv in blk.iter_vars if iv.var in spatial - used)
        if reuse < MIN_PACK_REUSE:
            return None  # few reads per copied element: packing would not pay
        choice.window |= any(free_vars(idx(x)[d]) - own for x in loads if x.buffer is buf)
        choice.packs.append((i, buf, d))
    return choice


def _groups(blk: Block, v: Var) -> set[int]:
    """Constants g with ``(... v ...) // g`` in some index, g dividing v's extent."""
    ext = next(iv.extent for iv in blk.iter_vars if iv.var is v)
    out = set()
    for x in iter_exprs(blk.body.value if isinstance(blk.body, BufferStore) else IntImm(0)):
        if isinstance(x, BinOp) and x.op == "//" and isinstance(x.b, IntImm) and \
                v in free_vars(x.a) and 1 < x.b.value < ext and ext % x.b.value == 0:
            out.add(x.b.value)
    return out


def layout_choices(blk: Block, lanes: int | None = None) -> list[LayoutChoice]:
    """Every spatial axis that can go in the lanes (whole, or within a group), the
    output's last axis first. With ``lanes``, an axis that needs a copy is offered only
    if it (or its group) is whole vectors: attention's 12 heads in the lanes would copy
    both operands for a vector and a half. One that needs a sliding-window input re-laid
    out (a conv's y, for y + ry) also needs the output's last axis not to be whole
    vectors: otherwise it does what that axis does with an extra copy (CONVLAYER's
    28-row choice took 211 of 256 trials and lost to the others)."""
    spatial = [iv.var for iv in blk.iter_vars if iv.kind == "S"]
    extent = {iv.var: iv.extent for iv in blk.iter_vars}
    out = []
    for v in reversed(spatial):
        for g in [None, *sorted(_groups(blk, v))]:
            c = layout_choice(blk, v, g)
            if c is not None:
                out.append(c)
                break
    if lanes is not None and spatial:
        last_fits = extent[spatial[-1]] % lanes == 0
        fits = [(c.group or extent[c.var]) % lanes == 0 for c in out]
        out = [c for c, f in zip(out, fits)
               if (not c.packs or f) and (not c.window or (f and not last_fits))]
    return sorted(out, key=lambda c: c.tile_map is not None)
