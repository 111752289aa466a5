"""Hand-written schedules for GMM, C2D and DENSE, written only with schedule primitives.

Each takes a fresh ``Schedule`` of the suite workload and returns it scheduled; they are
the built-in example (``tensortune example``), the benchmark (benchmarks/hand_schedules.py)
and are tested at small, awkward shapes.

Example:
    >>> from tensortune.examples import SCHEDULES
    >>> sch = SCHEDULES["gmm"](Schedule(tt.workloads.get("gmm")))
"""

from __future__ import annotations

from collections.abc import Callable

from .codegen import Target
from .schedule import BlockRV, Schedule


def _lanes(target: Target | None) -> int:
    return (target or Target.host()).lanes("float32")


def _register_tiled(sch: Schedule, name: str, pack: Callable[[BlockRV], None],
                    mr: int, nr: int, epilogue: str | None = None) -> Schedule:
    """The matmul recipe shared by GMM and DENSE: split i by mr and j by nr, stage B per
    nr-column panel (``pack`` re-lays it out; compute_at keeps one panel per iteration),
    an mr x nr accumulator tile in registers, an optional element-wise epilogue fused into
    the tile's write-back, parallel over panels."""
    c = sch.get_block(name)
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    sch.reorder(jo, io, k, ii, ji)
    bp = sch.cache_read(c, 1, "global")
    sch.compute_at(bp, jo)
    pack(bp)
    wb = sch.cache_write(c, 0, "local")
    if epilogue is not None:
        sch.reverse_compute_inline(sch.get_block(epilogue))
    sch.reverse_compute_at(wb, io)
    init = sch.decompose_reduction(c, k)
    sch.unroll(ii)
    sch.vectorize(ji)
    for blk in (init, wb):
        loops = sch.get_loops(blk)
        sch.unroll(loops[-2])
        sch.vectorize(loops[-1])
    sch.parallel(jo)
    return sch


def matmul_tile(target: Target | None = None) -> tuple[int, int]:
    """The accumulator tile (rows, columns) for the target's vector width: two vectors
    wide, as many rows as leave registers for the operands (8x32 = 16 zmm on AVX-512,
    6x16 = 12 ymm on AVX2, both measured fastest of their sweeps on those machines)."""
    lanes = _lanes(target)
    return (8, 2 * lanes) if lanes >= 16 else (6, 2 * lanes)


def gmm(sch: Schedule, mr: int | None = None, nr: int | None = None) -> Schedule:
    """B's [K, nr] panel is the region one panel iteration reads, so compute_at alone
    packs it; the mr x nr tile lives in vector registers."""
    dm, dn = matmul_tile()
    return _register_tiled(sch, "C", lambda bp: sch.vectorize(sch.get_loops(bp)[-1]),
                           mr or dm, nr or dn)


def dense(sch: Schedule, mr: int | None = None, nr: int | None = None) -> Schedule:
    """The GMM recipe on X W^T: each nr-row slab of W is transposed into a [K, nr] panel
    (transform_layout), and bias + relu are fused into the write-back of the tile."""
    dm, dn = matmul_tile()
    return _register_tiled(
        sch, "matmul",
        lambda wp: sch.transform_layout(wp, "W_global", lambda n, kk: (kk, n)),
        mr or dm, nr or dn, epilogue="Y")


def conv_tile(target: Target | None = None) -> tuple[int, int]:
    """(channels, columns) of the conv accumulator tile: 64 x 7 (28 zmm) on AVX-512,
    32 x 2 (8 ymm) on AVX2; each the fastest of a sweep on such a machine (AVX2, Zen 3:
    32x2 115-119, 16x6 103-104, 32x3 69, 16x7 53, 64x7 46 GFLOP/s)."""
    lanes = _lanes(target)
    return 4 * lanes, 7 if lanes >= 16 else 2


def c2d(sch: Schedule, kb: int | None = None, xb: int | None = None) -> Schedule:
    """Output channels in vector lanes (weights packed to [K/kb, C, 3, 3, kb]), a tile of
    xb output columns x kb channels in registers (stored channel-innermost through
    transform_layout), relu fused into the write-back, the padded input built once."""
    dk, dx = conv_tile()
    kb, xb = kb or dk, xb or dx
    conv = sch.get_block("conv")
    n, k, y, x, rc, ry, rx = sch.get_loops(conv)
    ko, ki = sch.split(k, [None, kb])
    xo, xi = sch.split(x, [None, xb])
    sch.reorder(n, ko, y, xo, rc, ry, rx, xi, ki)
    wp = sch.cache_read(conv, 1, "global")
    sch.transform_layout(wp, "w_global",
                         lambda a, c, r, s: (a // kb, c, r, s, a % kb))
    loc = sch.cache_write(conv, 0, "local")
    sch.transform_layout(conv, "conv_local", lambda a, b, c, d: (a, c, d, b))
    sch.reverse_compute_inline(sch.get_block("relu"))
    sch.reverse_compute_at(loc, xo)
    init = sch.decompose_reduction(conv, rc)
    sch.unroll(xi)
    sch.vectorize(ki)
    il = sch.get_loops(init)
    sch.unroll(il[-2])
    sch.vectorize(il[-1])
    for lp in sch.get_loops(loc)[-4:]:
        sch.unroll(lp)
    fused = sch.fuse(ko, y)
    sch.parallel(fused)
    pad_loops = sch.get_loops(sch.get_block("pad"))
    sch.parallel(pad_loops[1])
    return sch


SCHEDULES = {"gmm": gmm, "dense": dense, "c2d": c2d}
