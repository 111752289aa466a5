"""compute_at and reverse_compute_at: move a block under a loop of its consumer/producer,
computing only the region used (or produced) in one iteration of that loop.

compute_at(pad, loop y of conv)::

    for y in range(H):                         for y in range(H):
        ...pad computed for all rows...  -->       for ax0 in range(3):     # rows y..y+2
                                                       with block("pad", vi=S(y + ax0)): ...
                                                   ... conv row y ...

reverse_compute_at(writeback, loop i0 of C_local) moves an epilogue into the producer's
tile loop, once the producer's reduction over that tile is complete.
"""

from __future__ import annotations

from ..errors import ScheduleError, check
from ..tir.analysis import conjunction, conjuncts, is_dense, region, union
from ..tir.arith import simplify
from ..tir.expr import BinOp, Expr, IntImm, Var, structural_equal
from ..tir.functor import free_vars, stores_in, substitute
from ..tir.linear import structural_key
from ..tir.stmt import Block, Buffer, For, PrimFunc, Stmt, seq
from .tree import (
    Path,
    access_loop_vars,
    blocks_under,
    children,
    find_block,
    find_loop,
    iter_blocks,
    loads_of,
    order,
    readers,
    reads,
    remove_block,
    replace_loop,
    writers,
    writes,
)


def _ranges(path: Path) -> dict[Var, tuple[int, int]]:
    return {lp.var: (0, lp.extent - 1) for lp in path}


def _store_dims(blk: Block, buf: Buffer, what: str) -> list[Var]:
    """The spatial iteration variable indexing each dimension of ``blk``'s store."""
    st = [s for s in stores_in(blk.body) if s.buffer is buf]
    check(len(st) == 1, f"{what}: block {blk.name} must store {buf.name} exactly once")
    spatial = {iv.var for iv in blk.iter_vars if iv.kind == "S"}
    idx = st[0].indices
    ok = all(isinstance(i, Var) and i in spatial for i in idx) and \
        len({id(i) for i in idx}) == len(idx) == len(spatial)
    check(ok, f"{what}: block {blk.name} stores {buf.name}[{', '.join(map(str, idx))}]; "
              "each index must be a distinct spatial iteration variable of the block")
    return list(idx)  # type: ignore[arg-type]


def _access_regions(blk: Block, path: Path, loop: For, idx_list: list[tuple[Expr, ...]],
                    ndim: int) -> list[list[tuple[Expr, int, bool]]]:
    """Per dimension, the regions of the given index tuples (block iteration variables
    replaced by their loop bindings) as the loops inside ``loop`` vary."""
    pos = next(i for i, lp in enumerate(path) if lp.var is loop.var)
    inner = _ranges(path[pos + 1:])
    ranges = _ranges(path)
    vmap = {iv.var: b for iv, b in zip(blk.iter_vars, blk.bindings)}
    out: list[list[tuple[Expr, int, bool]]] = [[] for _ in range(ndim)]
    # Each index of a dimension once (a repeat adds nothing to the union of them): the
    # loads of a block repeat most of theirs (a Winograd transform's 64 loads hold four
    # distinct rows and columns and one channel).
    seen: set[tuple[int, object]] = set()
    for idx in idx_list:
        for d, i in enumerate(idx):
            key = (d, structural_key(i))
            if key not in seen:
                seen.add(key)
                out[d].append(region(substitute(i, vmap), inner, ranges))
    return out


def _dense(blk: Block, path: Path, loop: For, idx_list: list[tuple[Expr, ...]]) -> bool:
    pos = next(i for i, lp in enumerate(path) if lp.var is loop.var)
    inner, ranges = _ranges(path[pos + 1:]), _ranges(path)
    vmap = {iv.var: b for iv, b in zip(blk.iter_vars, blk.bindings)}
    return all(is_dense(substitute(i, vmap), inner, ranges) for idx in idx_list for i in idx)


def _nest(blk: Block, spans: dict[Var, tuple[Expr, int]], outer: Path) -> Stmt:
    """A fresh loop nest over ``blk``'s iteration variables, each covering its span."""
    loops: list[tuple[Var, int]] = []
    binds: list[Expr] = []
    guards: list[Expr] = []
    ranges = _ranges(outer)
    for iv in blk.iter_vars:
        lo, ext = spans.get(iv.var, (IntImm(0), iv.extent))
        base = iv.var.name[1:] if iv.var.name.startswith("v") else iv.var.name
        lv = Var(base if base.isidentifier() else f"ax{base}")
        loops.append((lv, ext))
        ranges[lv] = (0, ext - 1)
        b = simplify(BinOp("+", lo, lv, "int32"), ranges)
        binds.append(b)
        for cond in (BinOp("<", b, IntImm(iv.extent), "bool"),
                     BinOp(">=", b, IntImm(0), "bool")):
            g = simplify(cond, ranges)
            if not (isinstance(g, IntImm) and g.value):
                guards.append(g)
    # The old guard is over the old loops. Where it constrains only loops bound directly
    # to iteration variables it is a constraint on the domain itself (an rfactor's
    # partial block: ``j_0 * 3 + j_1 < 10`` of 4 x 3 slots), carried over to the new
    # loops; the rest only cut the old loops' overhang, which the spans above replace.
    direct = {bd: nb for bd, nb in zip(blk.bindings, binds) if isinstance(bd, Var)}
    guards += [simplify(substitute(c, direct), ranges) for c in conjuncts(blk.predicate)
               if free_vars(c) <= direct.keys()]
    pred = conjunction(guards)
    body: Stmt = Block(blk.name, blk.iter_vars, tuple(binds), blk.body, blk.init, pred)
    for lv, ext in reversed(loops):
        body = For(lv, ext, body)
    return body


def _insert(func: PrimFunc, var: Var, stmt: Stmt, index_fn) -> PrimFunc:
    def fn(lp: For) -> For:
        parts = children(lp.body)
        i = index_fn(parts)
        return For(lp.var, lp.extent, seq(parts[:i] + [stmt] + parts[i:]), lp.kind,
                   lp.annotations)

    return replace_loop(func, var, fn)


def _check_compute_at(func: PrimFunc, name: str, var: Var
                      ) -> tuple[Block, Buffer, list[Var], For, Path, set[str], int]:
    """Every legality check of compute_at, without building anything: the block, the
    buffer it writes and the iteration variable of each of its dimensions, the loop and
    its path, the blocks under it and where in the loop's body the moved block goes.
    Sampling a compute location runs this for every loop."""
    what = f"compute_at({name}, {var.name})"
    blk, bpath = find_block(func, name)
    loop, lpath = find_loop(func, var)
    check(all(lp.var is not var for lp in bpath),
          f"{what}: block {name} is already inside loop {var.name}")
    outs = writes(blk)
    check(len(outs) == 1, f"{what}: block {name} writes {len(outs)} buffers; need exactly 1")
    buf = outs[0]
    check(buf in func.alloc_buffers, f"{what}: block {name} writes the function output "
                                     f"{buf.name}; only intermediate stages can be computed at "
                                     "a consumer loop (use reverse_compute_at for epilogues)")
    check(writers(func, buf) == [blk], f"{what}: {buf.name} has other writers than {name}")
    under = {b.name for b in blocks_under(loop.body)}
    consumers = [b for b, _ in iter_blocks(func.body) if buf in reads(b) and b.name != name]
    check(bool(consumers), f"{what}: block {name} has no consumers")
    outside = [c.name for c in consumers if c.name not in under]
    check(not outside, f"{what}: consumers {outside} of {buf.name} are not inside loop "
                       f"{var.name}; valid loops enclose every consumer")
    pos = order(func)
    check(pos[name] < min(pos[c.name] for c in consumers),
          f"{what}: block {name} comes after its consumers")
    dims = _store_dims(blk, buf, what)
    # The moved block goes after the producers of its other inputs inside the loop and
    # before the first consumer of its output; the block is not under the loop, so the
    # loop's body is the same once it is removed.
    need = set(reads(blk)) - {buf}
    parts = children(loop.body)
    after = [i + 1 for i, p in enumerate(parts)
             if any(need & set(writes(b)) for b in blocks_under(p))]
    before = [i for i, p in enumerate(parts) if any(buf in reads(b) for b in blocks_under(p))]
    at = max(after, default=0)
    check(not before or at <= min(before),
          f"{what}: inside loop {var.name}, the inputs of {name} are produced after its "
          "first consumer")
    return blk, buf, dims, loop, lpath, under, at


def can_compute_at(func: PrimFunc, name: str, var: Var) -> bool:
    """Whether ``compute_at(func, name, var)`` is legal (cheap: nothing is built)."""
    try:
        _check_compute_at(func, name, var)
    except ScheduleError:
        return False
    return True


def compute_at(func: PrimFunc, name: str, var: Var) -> PrimFunc:
    """Move producer block ``name`` under loop ``var`` of its consumers, computing per
    iteration only the region they read there (see the module docstring for an example).
    The block must write one intermediate buffer whose consumers all lie inside ``var``.
    """
    blk, buf, dims, loop, lpath, under, at = _check_compute_at(func, name, var)
    per_dim: list[list[tuple[Expr, int, bool]]] = [[] for _ in buf.shape]
    for c, cpath in iter_blocks(func.body):
        if c.name in under and buf in reads(c) and c.name != name:
            idxs = [ld.indices for ld in loads_of(c, buf)]
            for d, regs in enumerate(_access_regions(c, cpath, loop, idxs, len(buf.shape))):
                per_dim[d] += regs
    spans = {}
    for d, regs in enumerate(per_dim):
        lo, ext, _ = union(regs, buf.shape[d])
        spans[dims[d]] = (lo, ext)
    nest = _nest(blk, spans, lpath + (loop,))
    return _insert(remove_block(func, name), var, nest, lambda parts: at)


def reverse_compute_at(func: PrimFunc, name: str, var: Var) -> PrimFunc:
    """Move consumer block ``name`` under loop ``var`` of its producers, computing per
    iteration the elements whose inputs that iteration completed.

    Before::

        for i0: for k: for i1: C_local[...] += ...
        for ax0: C[ax0] = C_local[ax0]
    After ``reverse_compute_at(C, i0)``::

        for i0:
            for k: for i1: C_local[...] += ...
            for ax0 in range(8): C[i0 * 8 + ax0] = C_local[i0 * 8 + ax0]
    """
    what = f"reverse_compute_at({name}, {var.name})"
    blk, bpath = find_block(func, name)
    loop, lpath = find_loop(func, var)
    check(all(lp.var is not var for lp in bpath),
          f"{what}: block {name} is already inside loop {var.name}")
    check(blk.init is None and not blk.is_reduction,
          f"{what}: block {name} is a reduction; reverse_compute_at moves spatial blocks")
    under = [(b, p) for b, p in iter_blocks(func.body)
             if any(lp.var is var for lp in p)]
    under_names = {b.name for b, _ in under}
    produced = [x for x in reads(blk) if any(x in writes(b) for b, _ in under)]
    check(bool(produced), f"{what}: block {name} reads nothing produced inside loop {var.name}")
    pos = order(func)
    check(all(pos[b.name] < pos[name] for b, _ in under),
          f"{what}: block {name} comes before blocks inside loop {var.name}")
    outer = {lp.var for lp in lpath} | {var}
    spans: dict[Var, tuple[Expr, int]] = {}
    for buf in produced:
        ws = writers(func, buf)
        check(all(w.name in under_names for w in ws),
              f"{what}: {buf.name} is also written outside loop {var.name}")
        per_dim: list[list[tuple[Expr, int, bool]]] = [[] for _ in buf.shape]
        for w, wpath in under:
            if buf not in writes(w):
                continue
            for iv, b in zip(w.iter_vars, w.bindings):
                bad = free_vars(b) & outer
                if iv.kind == "R" and bad:
                    raise ScheduleError(
                      f"{what}: loop {sorted(v.name for v in bad)[0]} iterates the reduction "
                      f"axis {iv.var.name} of {w.name}, so {buf.name} is incomplete inside "
                      f"loop {var.name}; choose a loop outside all reduction loops")
            idxs = [s.indices for s in stores_in(w.body) if s.buffer is buf]
            for d, regs in enumerate(_access_regions(w, wpath, loop, idxs, len(buf.shape))):
                per_dim[d] += regs
            # Every element of the region must be written inside the loop, or the moved
            # block would copy ones that other iterations own.
            check(_dense(w, wpath, loop, idxs),
                  f"{what}: {w.name} writes {buf.name} with holes per iteration of loop "
                  f"{var.name} (a strided tile); reorder its loops so that the tile is "
                  "contiguous")
        loads = loads_of(blk, buf)
        check(all(structural_equal(ld.indices, loads[0].indices) for ld in loads),
              f"{what}: block {name} reads {buf.name} at several different indices")
        spatial = {iv.var for iv in blk.iter_vars}
        for d, i in enumerate(loads[0].indices):
            check(isinstance(i, Var) and i in spatial,
                  f"{what}: block {name} reads {buf.name} at index {i} on axis {d}; each "
                  "index must be one of its iteration variables")
            lo, ext, exact = union(per_dim[d], buf.shape[d])
            check(exact, f"{what}: the region of {buf.name} produced per iteration of loop "
                         f"{var.name} cannot be computed exactly on axis {d}")
            assert isinstance(i, Var)
            prev = spans.get(i)
            check(prev is None or (structural_equal(prev[0], lo) and prev[1] == ext),
                  f"{what}: inconsistent regions for iteration variable {i.name}")
            spans[i] = (lo, ext)
    # The block moves earlier: everything else it reads must be ready before the loop.
    first = min(pos[b.name] for b, _ in under)
    for x in reads(blk):
        if x in produced:
            continue
        late = [w.name for w in writers(func, x) if pos[w.name] >= first]
        if late:
            raise ScheduleError(f"{what}: block {name} also reads {x.name}, which {late[0]} "
                                f"produces after loop {var.name} begins")
    nest = _nest(blk, spans, lpath + (loop,))
    f2 = remove_block(func, name)
    return _insert(f2, var, nest, lambda parts: len(parts))


def location_candidates(func: PrimFunc, name: str, stop: Var | None = None,
                        upto: int | None = None) -> list[Var | None]:
    """``Schedule.compute_location_candidates`` of block ``name``: None (root), then each
    loop of its consumer, outermost first, where compute_at is legal and the consumer's
    reads of the block's output move with the loop; with ``stop``, only loops enclosing
    that loop of the consumer; with ``upto``, possibly ending once index ``upto`` is in.

    Example:
        >>> location_candidates(tt.workloads.get("c2d", small=True), "pad")
        [None, Var(n), Var(k), Var(y), Var(z), Var(rc), Var(ry), Var(rx)]
    """
    blk, _ = find_block(func, name)
    out: list[Var | None] = [None]
    if upto is not None and upto < 1:
        return out
    cons = [c for b in writes(blk) for c in readers(func, b)]
    if not cons:
        return out
    con, path = find_block(func, cons[0].name)
    if stop is not None:
        at = [i for i, lp in enumerate(path) if lp.var is stop]
        if not at:
            raise ScheduleError(f"sample_compute_location: loop {stop.name} does not "
                                f"enclose block {cons[0].name}, the consumer of {name}")
        path = path[:at[0]]
    moving = access_loop_vars(con, writes(blk))
    for lp in path:
        if lp.var in moving and can_compute_at(func, name, lp.var):
            out.append(lp.var)
            if upto is not None and len(out) > upto:
                break
    return out
