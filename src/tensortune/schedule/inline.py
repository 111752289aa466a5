"""compute_inline and reverse_compute_inline: fuse an element-wise stage into its
consumer or producer so its intermediate buffer disappears.

compute_inline(pad)::

    pad[i] = select(1 <= i < 9, x[i - 1], 0.0)       conv[...] = ... select(1 <= y + ry < 9,
    conv[...] = ... pad[y + ry] ...             -->                      x[y + ry - 1], 0.0) ...

reverse_compute_inline(relu) with producer ``T[i] = A[i] + 1`` gives ``R[i] = max(A[i] + 1, 0)``.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ScheduleError, check
from ..tir.analysis import conjunction, conjuncts
from ..tir.expr import BinOp, BufferLoad, Expr, IntImm, Var, structural_equal
from ..tir.functor import rewrite_expr, rewrite_stmt, substitute
from ..tir.stmt import Block, BufferStore, PrimFunc
from .tree import find_block, loads_of, order, readers, reads, remove_block, replace_block, writers


def _single_store(blk: Block, what: str) -> BufferStore:
    check(blk.init is None and not blk.is_reduction,
          f"{what}: block {blk.name} is a reduction; only element-wise blocks can be inlined")
    check(isinstance(blk.body, BufferStore),
          f"{what}: block {blk.name} must consist of a single store")
    assert isinstance(blk.body, BufferStore)
    return blk.body


def _index_vars(blk: Block, idx: tuple[Expr, ...], what: str, role: str) -> list[Var]:
    ivars = {iv.var for iv in blk.iter_vars}
    ok = all(isinstance(i, Var) and i in ivars for i in idx) and \
        len({id(i) for i in idx}) == len(idx)
    check(ok, f"{what}: block {blk.name} {role} at [{', '.join(map(str, idx))}]; each index "
              "must be a distinct iteration variable of the block")
    return list(idx)  # type: ignore[arg-type]


def compute_inline(func: PrimFunc, name: str) -> PrimFunc:
    """Substitute element-wise block ``name`` into every consumer and delete it and its
    buffer (see the module docstring)."""
    what = f"compute_inline({name})"
    blk, _ = find_block(func, name)
    st = _single_store(blk, what)
    buf = st.buffer
    check(buf in func.alloc_buffers, f"{what}: block {name} writes the function output "
                                     f"{buf.name}, which must stay materialised")
    check(writers(func, buf) == [blk], f"{what}: {buf.name} has other writers than {name}")
    check(bool(readers(func, buf)), f"{what}: block {name} has no consumers")
    params = _index_vars(blk, st.indices, what, f"stores {buf.name}")
    check(len(params) == len(blk.iter_vars),
          f"{what}: every iteration variable of {name} must index the stored buffer")

    def inline(e: Expr) -> Expr | None:
        if isinstance(e, BufferLoad) and e.buffer is buf:
            return substitute(st.value, dict(zip(params, e.indices)))
        return None

    f2 = remove_block(func, name)
    body = rewrite_stmt(f2.body, expr_fn=lambda e: rewrite_expr(e, inline))
    return f2.with_body(body, tuple(b for b in func.alloc_buffers if b is not buf))


def reverse_compute_inline(func: PrimFunc, name: str) -> PrimFunc:
    """Fold element-wise consumer ``name`` into its single producer, whose store then
    writes the consumer's output (see the module docstring)."""
    what = f"reverse_compute_inline({name})"
    cons, _ = find_block(func, name)
    st_c = _single_store(cons, what)
    inter = [b for b in reads(cons) if b in func.alloc_buffers]
    check(len(inter) == 1, f"{what}: block {name} reads {len(inter)} intermediate buffers "
                           f"{[b.name for b in inter]}; it must read exactly one producer")
    pbuf = inter[0]
    prods = writers(func, pbuf)
    check(len(prods) == 1, f"{what}: {pbuf.name} has {len(prods)} writers; need exactly one")
    prod = prods[0]
    st_p = _single_store(prod, what)
    check(readers(func, pbuf) == [cons], f"{what}: {pbuf.name} has consumers other than {name}")
    loads = loads_of(cons, pbuf)
    check(all(structural_equal(ld.indices, loads[0].indices) for ld in loads),
          f"{what}: block {name} reads {pbuf.name} at several different indices")
    cvars = _index_vars(cons, loads[0].indices, what, f"reads {pbuf.name}")
    check(len(cvars) == len(cons.iter_vars),
          f"{what}: block {name} must read {pbuf.name} with all its iteration variables "
          "(an injective, element-wise consumer)")
    pvars = _index_vars(prod, st_p.indices, what, f"stores {pbuf.name}")
    check(cons.predicate is None,
          f"{what}: block {name} has a guard ({cons.predicate}); inline it before its "
          "loops are split")
    # A consumer may read only part of what the producer writes (the first 131 columns
    # of a product computed 144 wide, in whole vectors): the producer then stores the
    # consumer's output only where the consumer's domain reaches, or it would write past
    # the end of that output.
    cext = {iv.var: iv.extent for iv in cons.iter_vars}
    pext = {iv.var: iv.extent for iv in prod.iter_vars}
    pbind = dict(zip((iv.var for iv in prod.iter_vars), prod.bindings))
    guards: list[Expr] = []
    for cv, pv in zip(cvars, pvars):
        check(cext[cv] <= pext[pv],
              f"{what}: block {name} runs {cv.name} over {cext[cv]} points but {prod.name} "
              f"writes {pbuf.name} over {pext[pv]} on that axis; folded in, it would leave "
              "the rest of its output unwritten")
        if cext[cv] < pext[pv]:
            guards.append(BinOp("<", pbind[pv], IntImm(cext[cv]), "bool"))
    pred = conjunction(conjuncts(prod.predicate) + guards) if guards else prod.predicate
    pos = order(func)
    for x in reads(cons):
        late = [w.name for w in writers(func, x) if x is not pbuf and pos[w.name] > pos[prod.name]]
        if late:
            raise ScheduleError(f"{what}: {name} also reads {x.name}, produced by {late[0]} after "
                        f"{prod.name}")
    check(writers(func, st_c.buffer) == [cons],
          f"{what}: {st_c.buffer.name} has other writers than {name}")
    vmap: dict[Var, Expr] = dict(zip(cvars, pvars))

    def fuse(e: Expr) -> Expr | None:
        return st_p.value if isinstance(e, BufferLoad) and e.buffer is pbuf else None

    value = rewrite_expr(substitute(st_c.value, vmap), fuse)
    idx = tuple(substitute(i, vmap) for i in st_c.indices)
    f2 = remove_block(func, name)
    f3 = replace_block(f2, prod.name,
                       lambda b: replace(b, body=BufferStore(st_c.buffer, idx, value),
                                         predicate=pred))
    return f3.with_body(f3.body, tuple(b for b in func.alloc_buffers if b is not pbuf))
