"""Winograd's minimal filtering F(2x2, 3x3): a 3x3, stride-1 convolution as a batch of
16 matrix products over 4x4 input tiles, 2.25 times fewer multiply-adds. A dilated one
too: with dilation d it is d x d undilated convolutions, one per phase (``_stages``).
``winograd(func, 4)`` is F(4x4, 3x3) the same way: 36 products over 6x6 input tiles, 4
times fewer multiply-adds, and transforms with 6.1 times the terms (1004 against 164;
its coefficients, up to 8 and down to 1/24, round more: computed in float32 NumPy,
CONVLAYER's error was 5e-6 of its largest output against 2e-7, within the check's
1e-4).

Each 2x2 output tile ``Y`` of one output channel is ``A^T [sum_c (G g_c G^T) * (B^T
d_c B)] A``, with ``g_c`` the 3x3 filter of input channel c and ``d_c`` the 4x4 input
tile that the output tile reads (Lavin and Gray, "Fast Algorithms for Convolutional
Neural Networks", 2016). The element-wise product summed over channels is, for each of
the 16 positions (e, v) of the 4x4 transformed tile (36 of 6x6 for F(4x4, 3x3)), a
matrix product of the transformed input (tiles x channels) and the transformed filter
(channels x output channels), the part the schedule space tiles like a GEMM. The stages
of F(2x2, 3x3) (F(4x4, 3x3)'s read 6x6 input tiles at a stride of 4)::

    xt[n, h, w, c]           = X[n, c, h, w]                 (channels innermost)
    wt[c, r, s, k]           = W[k, c, r, s]                 (output channels innermost)
    U[e, v, c, k]            = (G  wt[:, :, c, k]  G^T)[e, v]  (filter transform)
    V[e, v, n, th, tw, c]    = (B^T d B)[e, v],  d = xt[n, 2th:2th+4, 2tw:2tw+4, c]
    M[e, v, n, th, tw, k]    = sum_c V[e, v, n, th, tw, c] * U[e, v, c, k]
    Y[n, th, i, tw, j, k]    = (A^T M[:, :, n, th, tw, k] A)[i, j]
    conv[n, k, h, w]         = Y[n, h // 2, h % 2, w // 2, w % 2, k]

Each transform is written out as its formula for each (e, v), picked by a select on
(e, v); the loops over the other axes are unswitched on it (``codegen.unswitch``), so a
loop computes only its own formula. The two transposes stay stages (``AutoInline``
keeps a transpose that a consumer reads at several places), so the transforms read
whole vectors along the channels. The result differs from the direct sum by rounding
only (F(2x2, 3x3)'s coefficients are 0, +-1/2, +-1/4, +-1): ``tune`` checks every
candidate against the float64 reference as always.

A rewritten function is another algorithm, not always the faster one (few channels,
small images): ``tune`` tunes it beside the direct form and keeps the faster
(``search.forms``).

Example:
    >>> new = winograd(tt.workloads.get("convlayer"))   # None if no 3x3 convolution fits
"""

from __future__ import annotations

from collections.abc import Callable

from .. import te
from ..schedule.tree import children, iter_blocks
from ..te.tensor import Tensor
from ..tir.arith import affine, simplify
from ..tir.expr import BinOp, BufferLoad, Expr, Var
from ..tir.functor import retarget
from ..tir.stmt import Block, Buffer, BufferStore, PrimFunc, seq

# F(2x2, 3x3): input transform B^T (4x4), filter transform G (4x3), output A^T (2x4).
BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))
# F(4x4, 3x3) (Lavin and Gray's points 0, +-1, +-2): B^T (6x6), G (6x3), A^T (4x6).
BT4 = ((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0),
       (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1))
G4 = ((1 / 4, 0, 0), (-1 / 6, -1 / 6, -1 / 6), (-1 / 6, 1 / 6, -1 / 6),
      (1 / 24, 1 / 12, 1 / 6), (1 / 24, -1 / 12, 1 / 6), (0, 0, 1))
AT4 = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))
# The matrices of F(m x m, 3x3), by the output tile's side m.
MATRICES = {2: (BT, G, AT), 4: (BT4, G4, AT4)}
# Fewer input channels leave the products little to save against the transforms; 8 is
# a guard against tiny convolutions, not a measured break-even.
MIN_CHANNELS = 8


def winograd(func: PrimFunc, m: int = 2) -> PrimFunc | None:
    """``func`` with its first 3x3, stride-1, ungrouped 2-D convolution whose output
    size is a multiple of ``m`` times its dilation computed by F(m x m, 3x3) (``m`` 2 or
    4), or None when it has none (module docstring)."""
    for blk, _ in iter_blocks(func.body):
        parsed = _parse(blk, m)
        if parsed is not None:
            return _rewrite(func, blk, *parsed, m)
    return None


def winograd4(func: PrimFunc) -> PrimFunc | None:
    """``winograd(func, 4)``: F(4x4, 3x3), 4 times fewer multiply-adds than the direct
    sum (2.25 for F(2x2, 3x3)), with 36 transformed positions a tile against 16.

    Example:
        >>> new = winograd4(tt.workloads.get("convlayer"))   # 28 x 28: 7 x 7 tiles
    """
    return winograd(func, 4)


def _parse(blk: Block, m: int) -> tuple[Buffer, Buffer, Buffer, int] | None:
    """(input, filter, output, dilation d) of ``out[n, k, y, z] += X[n, c, y + d * r, z +
    d * s] * W[k, c, r, s]`` with r, s in [0, 3) and y, z of extent a multiple of m * d;
    None for any other block."""
    st = blk.body
    if blk.init is None or blk.predicate is not None or not isinstance(st, BufferStore):
        return None
    ivs = {iv.var: iv for iv in blk.iter_vars}
    out = [i for i in st.indices if isinstance(i, Var) and i in ivs and ivs[i].kind == "S"]
    if any(not isinstance(b, Var) for b in blk.bindings) or len(out) != 4 or \
            len(st.indices) != 4:
        return None
    n, k, y, z = out
    v = st.value
    if not (isinstance(v, BinOp) and v.op == "+" and isinstance(v.a, BufferLoad)
            and v.a.buffer is st.buffer and isinstance(v.b, BinOp) and v.b.op == "*"):
        return None
    a, b = v.b.a, v.b.b
    if not isinstance(a, BufferLoad) or not isinstance(b, BufferLoad):
        return None
    red = [iv.var for iv in blk.iter_vars if iv.kind == "R"]
    # Ranges fold the group arithmetic of an ungrouped convolution (k // K * C + c).
    rng = {iv.var: (0, iv.extent - 1) for iv in blk.iter_vars}
    for x, w in ((a, b), (b, a)):
        if len(x.indices) != 4 or len(w.indices) != 4 or len(red) != 3:
            continue
        xi = [affine(simplify(i, rng)) for i in x.indices]
        wv = [_var(simplify(i, rng)) for i in w.indices]
        c, r, s = wv[1], wv[2], wv[3]
        if wv[0] is not k or xi[0] != ({n: 1}, 0) or c is None or r is None or \
                s is None or xi[1] != ({c: 1}, 0) or {c, r, s} != set(red):
            continue
        h_form = xi[2]      # None when not affine
        d = h_form[0].get(r, 0) if h_form is not None else 0
        if ivs[r].extent != 3 or ivs[s].extent != 3 or d < 1 or ivs[y].extent % (m * d) \
                or ivs[z].extent % (m * d) or ivs[c].extent < MIN_CHANNELS:
            continue
        if xi[2] != ({y: 1, r: d}, 0) or xi[3] != ({z: 1, s: d}, 0):
            continue
        if tuple(w.buffer.shape[1:]) != (ivs[c].extent, 3, 3):
            continue
        return x.buffer, w.buffer, st.buffer, d
    return None


def _var(e: Expr) -> Var | None:
    """``e`` if it is a variable (after simplification), else None."""
    return e if isinstance(e, Var) else None


def _lin(terms: list[tuple[float, Expr]]) -> Expr:
    """sum of coef * x over the non-zero coefficients, with no multiply by +-1."""
    out: Expr | None = None
    for c, x in terms:
        if c == 0:
            continue
        mag = abs(c)
        t = x if mag == 1 else x * float(mag)
        if out is None:
            out = t if c > 0 else t * -1.0
        else:
            out = out + t if c > 0 else out - t
    assert out is not None, "every transform row has a non-zero coefficient"
    return out


def _table(i: Expr, j: Expr, ni: int, nj: int, leaf: Callable[[int, int], Expr]) -> Expr:
    """``leaf(a, b)`` for ``i == a and j == b``, as nested selects."""
    def over_j(a: int) -> Expr:
        e = leaf(a, nj - 1)
        for b in range(nj - 2, -1, -1):
            e = te.if_then_else(j == b, leaf(a, b), e)
        return e

    e = over_j(ni - 1)
    for a in range(ni - 2, -1, -1):
        e = te.if_then_else(i == a, over_j(a), e)
    return e


def _stages(xin: Tensor, win: Tensor, shape: tuple[int, ...], name: str,
            d: int = 1, m: int = 2) -> Tensor:
    """The F(m x m, 3x3) pipeline from ``xin`` [N, C, H + 2d, W + 2d] and ``win`` [K, C,
    3, 3] to a tensor of ``shape`` [N, K, H, W] named ``name``, for dilation ``d``.

    With d > 1 the image splits into d x d phases (rows ``h % d``), each an undilated
    convolution: a tile index ``t`` (H / m of them, as without dilation) is the tile
    ``t // d`` of phase ``t % d``, whose input rows lie ``d`` apart. The products are the
    same as without dilation; ``Y`` is laid out [n, h, w, k] with h split as (tile, row
    in tile, phase), so the final copy is the same transpose.
    """
    N, K, H, W = shape
    C = win.shape[1]
    bt, g, at = MATRICES[m]
    a = m + 2       # the transformed tile's side
    TH, TW = H // m, W // m
    xt = te.compute((N, H + 2 * d, W + 2 * d, C), lambda n, h, w, c: xin[n, c, h, w],
                    name="wino_xt")
    # Channel-major, so a copy that walks it in order reads each filter's 3x3 row of W
    # once (laid out [3, 3, C, K], each of the nine planes re-read all of W: 39 of a
    # 343 us CONVLAYER kernel, RESULTS.md).
    wt = te.compute((C, 3, 3, K), lambda c, r, s, k: win[k, c, r, s], name="wino_wt")
    U = te.compute((a, a, C, K), lambda e, v, c, k: _table(e, v, a, a, lambda i, j: _lin(
        [(g[i][r] * g[j][s], wt[c, r, s, k]) for r in range(3) for s in range(3)])),
        name="wino_U")

    # Without dilation the expressions and Y's [n, th, i, tw, j, k] layout stay as they
    # were before dilation was taken: the general ones (t // 1, unit phase axes) would
    # print other design spaces and C for C2D and CONVLAYER.
    def row(t: Expr, p: int) -> Expr:
        """The input row (or column) of element ``p`` of tile ``t``."""
        return m * t + p if d == 1 else t // d * (m * d) + t % d + d * p

    V = te.compute((a, a, N, TH, TW, C), lambda e, v, n, th, tw, c: _table(
        e, v, a, a, lambda i, j: _lin(
            [(bt[i][p] * bt[j][q], xt[n, row(th, p), row(tw, q), c])
             for p in range(a) for q in range(a)])), name="wino_V")
    rc = te.reduce_axis(C, name="wino_c")
    M = te.compute((a, a, N, TH, TW, K), lambda e, v, n, th, tw, k: te.sum(
        V[e, v, n, th, tw, rc] * U[e, v, rc, k], axis=rc), name="wino_M")

    def out_tile(mt: Callable[[int, int], Expr], i: Expr, j: Expr) -> Expr:
        return _table(i, j, m, m, lambda x, y: _lin(
            [(at[x][e] * at[y][v], mt(e, v)) for e in range(a) for v in range(a)]))

    if d == 1:
        Y = te.compute((N, TH, m, TW, m, K), lambda n, th, i, tw, j, k: out_tile(
            lambda e, v: M[e, v, n, th, tw, k], i, j), name="wino_Y")
        return te.compute(shape, lambda n, k, h, w: Y[n, h // m, h % m, w // m, w % m, k],
                          name=name)
    Y = te.compute((N, H // (m * d), m, d, W // (m * d), m, d, K),
                   lambda n, th, i, ph, tw, j, pw, k: out_tile(
                       lambda e, v: M[e, v, n, th * d + ph, tw * d + pw, k], i, j),
                   name="wino_Y")
    return te.compute(shape, lambda n, k, h, w: Y[
        n, h // (m * d), h // d % m, h % d, w // (m * d), w // d % m, w % d, k], name=name)


def _rewrite(func: PrimFunc, blk: Block, xbuf: Buffer, wbuf: Buffer, obuf: Buffer,
             dilation: int, m: int) -> PrimFunc | None:
    names = {b.name for b, _ in iter_blocks(func.body)}
    if names & {"wino_xt", "wino_U", "wino_V", "wino_M", "wino_Y"}:
        return None     # rewritten already
    xin = te.placeholder(xbuf.shape, xbuf.dtype, name=f"{xbuf.name}_in")
    win = te.placeholder(wbuf.shape, wbuf.dtype, name=f"{wbuf.name}_in")
    out = _stages(xin, win, obuf.shape, blk.name, dilation, m)
    part = te.create_func([xin, win, out], name=func.name)
    body = part.body
    for old, new in zip(part.params, (xbuf, wbuf, obuf)):
        body = retarget(body, old, new)
    tops = []
    for top in children(func.body):
        found = {b.name for b, _ in iter_blocks(top)}
        tops.append(body if blk.name in found else top)
        if blk.name in found and found != {blk.name}:
            return None   # the convolution shares its loops with another block
    return func.with_body(seq(tops), func.alloc_buffers + part.alloc_buffers)
