"""Real SIMD for vectorized loops, and register tiles for small local buffers.

A vectorized loop of extent L is emitted as chunks of GCC vector operations: whole
vectors of the target's lanes for the dtype, then what is left in half and quarter
vectors (``chunk_plan``: 56 floats on AVX-512 are 16 + 16 + 16 + 8 lanes). Contiguous
accesses become vector loads/stores, loop-invariant ones broadcasts. A local buffer whose
every access is a constant index or a vector chunk at a constant offset becomes a set of
vector variables, which gcc keeps in registers (a local array would stay on the stack:
the accumulator tile of a matmul then costs a load and a store per FMA).

Example (the inner loops of a register-tiled matmul)::

    for k in range(K):
        acc_r0 = acc_r0 + A[i0 * K + k] * tt_ld_f32x16(&Bp[k * 32]);
        acc_r1 = acc_r1 + A[i0 * K + k] * tt_ld_f32x16(&Bp[k * 32 + 16]);
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..tir.arith import substitute_simplified
from ..tir.expr import BinOp, BufferLoad, Call, Expr, IntImm, Select, Var, is_float
from ..tir.functor import free_vars, iter_exprs, loads_in, stores_in, walk
from ..tir.linear import linear_parts
from ..tir.stmt import Allocate, Buffer, BufferStore, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt
from .c import CEmitter, NotVectorizable
from .c_header import CTYPE, c_float, vector_type
from .gather import gathered_copy
from .guarded_load import guarded_load
from .lane_loop import lane_group, lane_loop
from .register_tile import promote, tile_accesses
from .target import Target
from .transpose import SHUFFLE, transposed_group, zip_helpers
from .tree_sum import tree_sum
from .vmath import has_vector_form, vector_math

MAX_INLINE_CHUNKS = 16  # a vectorized loop of more chunks than this loops over them
MIN_ROLLED_CHUNKS = 4   # whole vectors from which a loop in an unswitched copy loops


def _widths(lanes: int) -> list[int]:
    return [w for w in (lanes, lanes // 2, lanes // 4) if w >= 2]


def chunk_width(extent: int, lanes: int) -> int | None:
    """The widest vector of at most ``lanes`` lanes (a half or a quarter) dividing
    ``extent``; None when the loop cannot be vectorized."""
    return next((w for w in _widths(lanes) if extent % w == 0), None)


def chunk_plan(extent: int, lanes: int) -> tuple[tuple[int, int], ...] | None:
    """(offset, width) of the vectors a vectorized loop of ``extent`` is emitted as:
    whole vectors first, then a half and a quarter vector for what is left. The same
    loops as ``chunk_width`` vectorize, in fewer operations: a row of 56 floats on
    AVX-512 was seven 8-lane vectors and is three 16-lane vectors and one of 8 (the
    depthwise convolution's row; 7% faster by hand, RESULTS.md).

    >>> chunk_plan(56, 16)
    ((0, 16), (16, 16), (32, 16), (48, 8))
    """
    plan: list[tuple[int, int]] = []
    at = 0
    for w in _widths(lanes):
        while extent - at >= w:
            plan.append((at, w))
            at += w
    return tuple(plan) if plan and at == extent else None


class SimdEmitter(CEmitter):
    def __init__(self, func: PrimFunc, target: Target) -> None:
        super().__init__(func, target)
        self.read_width = _read_widths(func.body, target)
        self.zips: set[tuple[str, int, int]] = set()   # (dtype, lanes, bit): transpose rounds
        self.vind = 0                # the indent of the vector statement being emitted
        self.private: dict[Buffer, dict[int, str]] = {}   # per-lane buffers: _privatize

    def stmt(self, s: Stmt, ind: int) -> None:
        if not isinstance(s, Seq):
            super().stmt(s, ind)
            return
        i = 0
        # Runs of column stores become transposed blocks, runs of far-strided ones one
        # loop over the lanes.
        while i < len(s.stmts):
            n = transposed_group(self, s.stmts, i, ind) or lane_group(self, s.stmts, i, ind)
            if not n:
                self.stmt(s.stmts[i], ind)
            i += max(n, 1)

    def loop(self, s: For, ind: int) -> None:
        # A copy gathering across rows goes through transposed blocks (gather.py).
        if s.kind == ForKind.SERIAL and gathered_copy(self, s, ind):
            return
        # A serial sum over a run of a buffer (AddRFactor's second step) as a vector tree.
        if tree_sum(self, s, ind):
            return
        super().loop(s, ind)

    # ---------------------------------------------------------------- vector loops
    @contextmanager
    def tentative(self) -> Iterator[None]:
        """Emit into a scratch list that joins the lines when the block completes and is
        dropped, with the names given in it, when the block raises (``NotVectorizable``: the
        caller then emits another form, which gives those names again)."""
        saved, used = self.lines, set(self.used)
        self.lines = []
        try:
            yield
        except BaseException:
            self.lines, self.used = saved, used
            raise
        saved.extend(self.lines)   # a caller may hold ``saved``: extended in place
        self.lines = saved

    def vector_loop(self, s: For, ind: int) -> bool:
        dtypes = {st.buffer.dtype for st in stores_in(s.body)}
        if len(dtypes) != 1 or not is_float(next(iter(dtypes))):
            return self._scalar_unroll_if_promoted(s, ind)
        dtype = dtypes.pop()
        lanes = self.target.lanes(dtype)
        plan = self.plan(s, lanes)
        tail = 0
        widths = _widths(lanes)
        if plan is None and widths:
            # A row of 77 is 64 + 8 + 4 lanes and one scalar element: the loop vectorizes
            # but for the last few elements (it was all scalar: a GELU over rows of 77
            # called tanhf per element and ran 10x slower than PyTorch, RESULTS.md).
            tail = s.extent % widths[-1]
            plan = self.plan(s, lanes, s.extent - tail) if s.extent > tail else None
        if plan is None:
            return self._scalar_unroll_if_promoted(s, ind)
        lane = Var("lane")
        rest = plan
        w = plan[0][1]
        chunks = sum(1 for _, cw in plan if cw == w)
        # A long row (a whole output row copied from its strips) loops over its whole
        # vectors: 192 of them inline took gcc 2 s to compile. So does a row in one of
        # an unswitched loop's copies (a Winograd transform's 16 formulas), and there gcc
        # is told not to unroll the loop again: CONVLAYER's best Winograd programs then
        # built in 0.31-0.43 s instead of 0.69-0.97 (RESULTS.md).
        in_copy = bool(self.in_copy) and chunks >= MIN_ROLLED_CHUNKS
        try:
            with self.tentative():
                if (len(plan) > MAX_INLINE_CHUNKS or in_copy) and \
                        not _touched(s.body) & set(self.promoted):
                    c = Var(f"{s.var.name}_c")
                    self.ranges[c] = (0, chunks - 1)
                    self.ranges[lane] = (0, w - 1)
                    cv = self.var(c)
                    if len(plan) <= MAX_INLINE_CHUNKS:
                        self.emit("#pragma GCC unroll 1", ind)
                    self.emit(f"for (int32_t {cv} = 0; {cv} < {chunks}; ++{cv}) {{", ind)
                    at = BinOp("+", BinOp("*", c, IntImm(w), "int32"), lane, "int32")
                    body = substitute_simplified(s.body, {s.var: at})
                    self.vector_stmt(body, lane, dtype, w, ind + 1)
                    self.emit("}", ind)
                    rest = plan[chunks:]
                for off, w in rest:
                    self.ranges[lane] = (0, w - 1)
                    at = BinOp("+", IntImm(off), lane, "int32")
                    body = substitute_simplified(s.body, {s.var: at})
                    self.vector_stmt(body, lane, dtype, w, ind)
                for k in range(s.extent - tail, s.extent):
                    self.stmt(substitute_simplified(s.body, {s.var: IntImm(k)}, self.ranges), ind)
        except NotVectorizable:
            return self._scalar_unroll_if_promoted(s, ind)
        self.vtypes.update((dtype, w) for _, w in plan)
        return True

    def plan(self, s: For, lanes: int, extent: int | None = None
              ) -> tuple[tuple[int, int], ...] | None:
        """(offset, width) of the vectors loop ``s`` (its first ``extent`` iterations)
        is emitted as (``chunk_plan``), no wider than the kernel reads back what ``s``
        stores; None when it has no vector form.

        Example:
            >>> em.plan(loop, 16)    # ((0, 16), (16, 16), (32, 16), (48, 8)) for 56
        """
        # A buffer the kernel reads back in vectors is written in vectors no wider than
        # the widest read: stored 16 lanes at a time and read back 8 (DEP's padded copy
        # under an 8-lane tile) it ran 1.25x slower than stored 8 at a time (RESULTS.md).
        cap = max((self.read_width.get(st.buffer, lanes) for st in stores_in(s.body)),
                  default=lanes)
        return chunk_plan(s.extent if extent is None else extent, min(cap, lanes))

    def _scalar_unroll_if_promoted(self, s: For, ind: int) -> bool:
        """Promoted tiles need constant indices: expand the loop instead of looping."""
        if not _touched(s.body) & set(self.promoted):
            return False
        if lane_loop(self, s, ind):   # a write-back through strided stores
            return True
        for i in range(s.extent):
            self.stmt(substitute_simplified(s.body, {s.var: IntImm(i)}, self.ranges), ind)
        return True

    def vector_stmt(self, s: Stmt, lane: Var, dtype: str, w: int, ind: int) -> None:
        """Emit ``s`` as ``w``-lane vector code over ``lane``: stores, sequences and ifs
        whose condition does not vary with the lane. Raises NotVectorizable for anything
        else; callers emit inside ``tentative()`` and fall back to scalar code.

        Example:
            >>> with em.tentative():
            ...     em.vector_stmt(store, lane, "float32", 16, ind=2)
        """
        if isinstance(s, Seq):
            for x in s.stmts:
                self.vector_stmt(x, lane, dtype, w, ind)
        elif isinstance(s, IfThenElse):
            if self._varies(s.cond, lane) or s.else_ is not None:
                raise NotVectorizable
            self.emit(f"if ({self.expr(s.cond)}) {{", ind)
            self.vector_stmt(s.then, lane, dtype, w, ind + 1)
            self.emit("}", ind)
        elif isinstance(s, Allocate):   # a buffer local to each lane, such as a pad's
            if not self._privatize(s, lane, dtype, w, ind):
                self.allocate(s, ind, lambda x, i: self.vector_stmt(x, lane, dtype, w, i))
        elif isinstance(s, BufferStore):
            flat = self.flat(s.buffer, s.indices)
            if s.buffer in self.private:   # each lane's own copy: a vector variable
                if not isinstance(flat, IntImm):
                    raise NotVectorizable
                self.vind = ind
                self.emit(f"{self.private[s.buffer][flat.value]} = "
                          f"{self.as_vector(s.value, lane, dtype, w)};", ind)
                return
            target = self.vector_access(s.buffer, flat, lane, w)
            if target is None:
                raise NotVectorizable
            self.vind = ind   # where a guarded load fills its vector (guarded_load.py)
            val, is_vec = self._vexpr(s.value, lane, dtype, w)
            if not is_vec:
                val = f"(({vector_type(dtype, w)}){{}} + ({val}))"
            if s.buffer in self.promoted:
                self.emit(f"{target} = {val};", ind)
            else:
                self.emit(f"tt_st_{vector_type(dtype, w)[3:]}(&{target}, {val});", ind)
        else:
            raise NotVectorizable

    def _varies(self, e: Expr, lane: Var) -> bool:
        """Whether ``e`` may differ between lanes: it holds the lane or reads a lane's own
        copy of a buffer."""
        return lane in free_vars(e) or bool(self.private) and any(
            isinstance(x, BufferLoad) and x.buffer in self.private for x in iter_exprs(e))

    def _privatize(self, s: Allocate, lane: Var, dtype: str, w: int, ind: int) -> bool:
        """A buffer allocated inside the vector loop is each lane's own: where the body
        accesses it at constant places only (a pad computed at the loop over a register
        tile's lanes), each place becomes a vector variable holding every lane's copy, so
        a value that differs between lanes (the pad's read along the lanes) stays vector
        code. False if some access is not at a constant place."""
        b = s.buffer
        if b.dtype != dtype:
            return False
        places = set()
        for flat, _ in tile_accesses(s.body, b):
            if not isinstance(flat, IntImm):
                return False
            places.add(flat.value)
        name = self.name_buffer(b, self.used)
        vt = vector_type(dtype, w)
        self.private[b] = {c: f"{name}_p{c}" for c in sorted(places)}
        for var in self.private[b].values():
            self.emit(f"{vt} {var};", ind)
        try:
            self.vector_stmt(s.body, lane, dtype, w, ind)
        finally:
            del self.private[b]
        return True

    def vector_access(self, buf: Buffer, flat: Expr, lane: Var, w: int) -> str | None:
        """The vector lvalue/rvalue for a contiguous access, None if not contiguous.
        Terms without the lane are opaque: ``f // 16 * 6272 + lane`` is contiguous (a
        fused parallel loop's div/mod once sent whole write-backs to scalar stores)."""
        parts = linear_parts(flat, {lane})
        if parts is None or parts[0].get(lane) != 1:
            return None
        base = parts[1]
        if buf in self.promoted:
            tile = self.promoted[buf]
            where = tile.at(base.value) if isinstance(base, IntImm) else None
            if where is None or where[1] or tile.widths[where[0]] != w:
                raise NotVectorizable
            return f"{tile.name}_r{where[0]}"
        return f"{self.bufname[buf]}[{self.expr(base)}]"

    def _vexpr(self, e: Expr, lane: Var, dtype: str, w: int) -> tuple[str, bool]:
        if isinstance(e, BufferLoad) and e.buffer in self.private:
            flat = self.flat(e.buffer, e.indices)
            if not isinstance(flat, IntImm):
                raise NotVectorizable
            return self.private[e.buffer][flat.value], True
        if not self._varies(e, lane):
            return self.expr(e), False
        vt = vector_type(dtype, w)
        if isinstance(e, BufferLoad):
            if e.dtype != dtype:
                raise NotVectorizable
            flat = self.flat(e.buffer, e.indices)
            acc = self.vector_access(e.buffer, flat, lane, w)
            if acc is None:
                raise NotVectorizable
            return (acc, True) if e.buffer in self.promoted else (
                f"tt_ld_{vt[3:]}(&{acc})", True)
        if isinstance(e, BinOp) and e.dtype == dtype and e.op in ("+", "-", "*", "/"):
            (a, _), (b, bvec) = self._vexpr(e.a, lane, dtype, w), self._vexpr(e.b, lane, dtype, w)
            if e.op == "/" and not bvec:
                # A divisor the same in every lane (a softmax's row sum, a norm's scale):
                # multiply by its reciprocal, which gcc hoists out of the loop. A vector
                # division costs ~10 cycles a vector on x86; the product is at most one
                # rounding away from the quotient.
                return f"({a} * ({c_float(1.0, dtype)} / {b}))", True
            return f"({a} {e.op} {b})", True
        if isinstance(e, BinOp) and e.dtype == dtype and e.op in ("min", "max"):
            a, b = self.as_vector(e.a, lane, dtype, w), self.as_vector(e.b, lane, dtype, w)
            return f"tt_v{e.op}_{vt[3:]}({a}, {b})", True
        if isinstance(e, Call) and has_vector_form(e.name, dtype):
            return f"tt_v{e.name}_{vt[3:]}({self.as_vector(e.args[0], lane, dtype, w)})", True
        if isinstance(e, Select) and e.dtype == dtype:
            c = e.cond
            varies = self._varies(c, lane)
            if varies:   # a padded read along the lanes
                name = guarded_load(self, e, lane, w, self.vind)
                if name is not None:
                    return name, True
            t, f = self.as_vector(e.t, lane, dtype, w), self.as_vector(e.f, lane, dtype, w)
            if not varies:
                return f"({self.expr(c)} ? {t} : {f})", True
            # A lane-dependent select evaluates both branches in every lane; a guarded load
            # (padding) would then read outside its buffer, so only load-free branches.
            if any(isinstance(x, BufferLoad) for br in (e.t, e.f) for x in iter_exprs(br)):
                raise NotVectorizable
            if isinstance(c, BinOp) and c.op in ("<", "<=", ">", ">=", "==", "!=") \
                    and c.a.dtype == dtype:
                a, b = self.as_vector(c.a, lane, dtype, w), self.as_vector(c.b, lane, dtype, w)
                return f"tt_vsel_{vt[3:]}(({a} {c.op} {b}), {t}, {f})", True
        raise NotVectorizable

    def as_vector(self, e: Expr, lane: Var, dtype: str, w: int) -> str:
        """The C of ``e`` as a ``w``-lane vector over ``lane``; a value that does not vary
        with the lane is broadcast. Raises NotVectorizable when ``e`` has no vector form.

        Example:
            >>> em.as_vector(x_load, lane, "float32", 16)   # 'tt_ld_f32x16(&x[i * 64])'
        """
        code, is_vec = self._vexpr(e, lane, dtype, w)
        return code if is_vec else f"(({vector_type(dtype, w)}){{}} + ({code}))"

    # ---------------------------------------------------------------- register tiles
    def try_promote(self, s: Allocate, ind: int) -> bool:
        return promote(self, s, ind)

    def vector_typedefs(self) -> str:
        out = [SHUFFLE] if self.zips else []
        for dtype, w in sorted(self.vtypes):
            vt, ct = vector_type(dtype, w), CTYPE[dtype]
            it = "int32_t" if dtype == "float32" else "int64_t"
            nb = w * (4 if dtype == "float32" else 8)
            s = vt[3:]
            out.append(
                f"typedef {ct} {vt} __attribute__((vector_size({nb})));\n"
                f"typedef {it} tt_m{s} __attribute__((vector_size({nb})));\n"
                f"static inline {vt} tt_ld_{s}(const {ct}* p) {{ {vt} v; memcpy(&v, p, {nb});"
                f" return v; }}\n"
                f"static inline void tt_st_{s}({ct}* p, {vt} v) {{ memcpy(p, &v, {nb}); }}\n"
                f"static inline {vt} tt_vsel_{s}(tt_m{s} m, {vt} a, {vt} b) {{\n"
                f"  return ({vt})((m & (tt_m{s})a) | (~m & (tt_m{s})b)); }}\n"
                + vector_math(dtype, w)
                + "".join(zip_helpers(d, n, b) for d, n, b in sorted(self.zips)
                          if (d, n) == (dtype, w)))
        return "\n".join(out)


def _read_widths(body: Stmt, target: Target) -> dict[Buffer, int]:
    """The widest vector each buffer is read in by a vectorized loop of ``body``."""
    out: dict[Buffer, int] = {}
    for s in walk(body):
        if not isinstance(s, For) or s.kind != ForKind.VECTORIZED:
            continue
        for x in loads_in(s.body):
            plan = chunk_plan(s.extent, target.lanes(x.buffer.dtype))
            if plan is not None and any(s.var in free_vars(i) for i in x.indices):
                out[x.buffer] = max(out.get(x.buffer, 0), max(w for _, w in plan))
    return out


def _touched(s: Stmt) -> set[Buffer]:
    """The buffers ``s`` stores to or loads from."""
    return {st.buffer for st in stores_in(s)} | {x.buffer for x in loads_in(s)}
