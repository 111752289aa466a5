"""Turn a lowered ``PrimFunc`` into C99 + OpenMP for the host.

Parallel loops become ``omp parallel for``; vectorized loops become GCC vector-type code
(see ``simd.py``) or, where that does not apply, ``omp simd`` loops; loops marked unrolled
were expanded by ``lower.py``; small local tiles become register variables. The source
also holds ``tt_packed`` (arguments as an array) and ``tt_time`` (a C timing loop), so the
runner never times through Python.

Example:
    >>> src = emit_c(lower(sch.func), Target.host())
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from ..tir.arith import Ranges, bound, simplify_flat
from ..tir.expr import (
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    Var,
    dtype_bytes,
    is_float,
)
from ..tir.printer import Namer
from ..tir.stmt import (
    PRAGMA_UNROLL,
    SCHED_PRESSURE,
    Allocate,
    Block,
    Buffer,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Seq,
    Stmt,
)
from .c_header import (
    CTYPE,
    HEADER,
    KERNEL_STATICS,
    SCHED_PRAGMA,
    TIMER,
    c_float,
    c_ident,
    libm_name,
)
from .target import Target
from .unswitch import COPY

STACK_LIMIT = 64 * 1024  # larger local buffers go to the heap


class NotVectorizable(Exception):
    """Raised by the SIMD emitter (``simd.SimdEmitter``) and its helpers when a loop body
    is not expressible with vector operations; the caller emits it again without them."""


@dataclass(frozen=True)
class RegisterTile:
    """A local buffer held in variables ``{name}_r{i}``: chunk ``i`` holds ``widths[i]``
    elements from ``starts[i]`` (1: a scalar, more: a vector). Chunks may differ in width:
    a row of 56 floats on AVX-512 is three 16-lane vectors and an 8-lane one."""

    name: str
    starts: tuple[int, ...]
    widths: tuple[int, ...]

    def at(self, v: int) -> tuple[int, int] | None:
        """(chunk, lane) of element ``v``; None outside the tile."""
        i = bisect.bisect_right(self.starts, v) - 1
        if i < 0 or v - self.starts[i] >= self.widths[i]:
            return None
        return i, v - self.starts[i]

    def element(self, v: int) -> str:
        where = self.at(v)
        assert where is not None, f"element {v} is outside register tile {self.name}"
        i, lane = where
        return f"{self.name}_r{i}" if self.widths[i] == 1 else f"{self.name}_r{i}[{lane}]"


class CEmitter:
    """Emits one lowered function; ``simd.py`` extends it with vector code."""

    def __init__(self, func: PrimFunc, target: Target) -> None:
        self.func = func
        self.target = target
        self.namer = Namer()
        self.bufname: dict[Buffer, str] = {}
        self.promoted: dict[Buffer, RegisterTile] = {}
        self.ranges: Ranges = {}
        self.lines: list[str] = []
        self.vtypes: set[tuple[str, int]] = set()
        # The workspace's frames (the header's TT_WS): where the next buffer goes in the
        # current one, whether that is the frame inside a parallel loop, and each frame's
        # size so far (outside, inside).
        self.ws_top = 0
        self.ws_inner = False
        self.in_copy = 0        # unswitched copies (``unswitch.COPY``) around this point
        self.ws_size = [0, 0]
        used: set[str] = set()
        for b in (*func.params, *func.alloc_buffers):
            self.name_buffer(b, used)
        self.used = used

    def name_buffer(self, b: Buffer, used: set[str]) -> str:
        """Give ``b`` a C identifier not in ``used`` (its name, suffixed ``_1``, ``_2``...
        on a clash), record it in ``bufname`` and ``used``, and return it.

        Example:
            >>> em.name_buffer(buf, em.used)    # "pad", or "pad_1" if taken
        """
        n, base, k = c_ident(b.name), c_ident(b.name), 1
        while n in used:
            n, k = f"{base}_{k}", k + 1
        used.add(n)
        self.bufname[b] = n
        return n

    # ---------------------------------------------------------------- expressions
    def var(self, v: Var) -> str:
        return c_ident(self.namer(v))

    def flat(self, buf: Buffer, indices: tuple[Expr, ...]) -> Expr:
        return simplify_flat(buf.shape, indices, self.ranges)

    def expr(self, e: Expr) -> str:
        if isinstance(e, Var):
            return self.var(e)
        if isinstance(e, IntImm):
            return str(e.value)
        if isinstance(e, FloatImm):
            return c_float(e.value, e.dtype)
        if isinstance(e, BufferLoad):
            return self.load(e.buffer, self.flat(e.buffer, e.indices))
        if isinstance(e, BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                sfx = {"float32": "f", "float64": "d"}.get(e.dtype, "i")
                return f"tt_{e.op}{sfx}({a}, {b})"
            if e.op in ("//", "%") and not is_float(e.dtype):
                ra, rb = bound(e.a, self.ranges), bound(e.b, self.ranges)
                if ra is not None and rb is not None and ra[0] >= 0 and rb[0] > 0:
                    return f"({a} {'/' if e.op == '//' else '%'} {b})"
                return f"tt_floor{'div' if e.op == '//' else 'mod'}({a}, {b})"
            if e.op == "//":
                return f"floor({a} / {b})"
            if e.op == "%":
                return f"fmod({a}, {b})"
            return f"({a} {e.op} {b})"
        if isinstance(e, Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, Cast):
            return f"(({CTYPE[e.dtype]})({self.expr(e.value)}))"
        if isinstance(e, Call):
            fn = libm_name(e.name, e.dtype)
            return f"{fn}({', '.join(self.expr(a) for a in e.args)})"
        raise TypeError(f"codegen: cannot emit {type(e).__name__}")

    def load(self, buf: Buffer, flat: Expr) -> str:
        if buf in self.promoted:
            assert isinstance(flat, IntImm), "promoted tile accessed with a non-constant index"
            return self.promoted[buf].element(flat.value)
        return f"{self.bufname[buf]}[{self.expr(flat)}]"

    # ---------------------------------------------------------------- statements
    def emit(self, line: str, ind: int) -> None:
        self.lines.append("  " * ind + line)

    def stmt(self, s: Stmt, ind: int) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, ind)
        elif isinstance(s, BufferStore):
            flat = self.flat(s.buffer, s.indices)
            self.emit(f"{self.load(s.buffer, flat)} = {self.expr(s.value)};", ind)
        elif isinstance(s, IfThenElse):
            self.emit(f"if ({self.expr(s.cond)}) {{", ind)
            self.stmt(s.then, ind + 1)
            if s.else_ is not None:
                self.emit("} else {", ind)
                self.stmt(s.else_, ind + 1)
            self.emit("}", ind)
        elif isinstance(s, For):
            self.loop(s, ind)
        elif isinstance(s, Allocate):
            self.allocate(s, ind)
        else:
            raise TypeError(f"codegen: cannot emit {type(s).__name__}")

    def loop(self, s: For, ind: int) -> None:
        if s.annotation(COPY):
            self.in_copy += 1
            try:
                self._loop(s, ind)
            finally:
                self.in_copy -= 1
        else:
            self._loop(s, ind)

    def _loop(self, s: For, ind: int) -> None:
        self.ranges[s.var] = (0, s.extent - 1)
        if s.kind == ForKind.VECTORIZED and self.vector_loop(s, ind):
            return
        v = self.var(s.var)
        # One pragma per loop: C allows nothing between `omp parallel for` and its loop.
        unroll = s.annotation(PRAGMA_UNROLL)
        if s.kind == ForKind.PARALLEL:
            self.emit("#pragma omp parallel for schedule(static)", ind)
        elif s.kind == ForKind.VECTORIZED and not _has_loop(s.body):
            self.emit("#pragma omp simd", ind)
        elif unroll and _small(s.body, int(unroll)):
            # Only small bodies: unrolling a big one costs seconds of compile time.
            self.emit(f"#pragma GCC unroll {int(unroll)}", ind)
        # Each thread's buffers in a parallel loop: a workspace frame of their own.
        frame = s.kind == ForKind.PARALLEL and not self.ws_inner
        top = self.ws_top
        if frame:
            self.ws_top, self.ws_inner = 0, True
        try:
            self.emit(f"for (int32_t {v} = 0; {v} < {s.extent}; ++{v}) {{", ind)
            self.stmt(s.body, ind + 1)
            self.emit("}", ind)
        finally:
            if frame:
                self.ws_top, self.ws_inner = top, False

    def vector_loop(self, s: For, ind: int) -> bool:
        return False  # overridden by simd.SimdEmitter

    def allocate(self, s: Allocate, ind: int,
                 body: Callable[[Stmt, int], None] | None = None) -> None:
        """Declare ``s``'s buffer and emit its body with ``body`` (``stmt`` unless given:
        a vector loop's body emits its statements as vectors)."""
        b = s.buffer
        name = self.name_buffer(b, self.used)
        ct = CTYPE[b.dtype]
        nbytes = b.size * dtype_bytes(b.dtype)
        emit_body = body or self.stmt
        if self.try_promote(s, ind):
            # The registers live as long as this allocation: loop partitioning can give a
            # buffer several allocations, and a later one may not be promotable. A body
            # that gives up on vectors (NotVectorizable) is emitted again without them.
            try:
                emit_body(s.body, ind)
            finally:
                del self.promoted[b]
        elif nbytes <= STACK_LIMIT:
            self.emit(f"{ct} {name}[{b.size}] __attribute__((aligned(64)));", ind)
            emit_body(s.body, ind)
        else:
            top = self.ws_top
            self.emit("{", ind)
            self.emit(f"{ct}* restrict {name} = ({ct}*){self.workspace(nbytes)};", ind + 1)
            try:
                emit_body(s.body, ind + 1)
            finally:    # the frame's memory after ``top`` is free again
                self.ws_top = top
            self.emit("}", ind)

    def workspace(self, nbytes: int) -> str:
        """A buffer of ``nbytes`` at the top of the current workspace frame, which the
        caller frees again by lowering ``ws_top`` (the header's TT_WS: a block that each
        thread keeps between calls, so it needs no free)."""
        at = self.ws_top
        self.ws_top += -(-nbytes // 64) * 64       # each buffer 64-byte aligned
        self.ws_size[self.ws_inner] = max(self.ws_size[self.ws_inner], self.ws_top)
        return f"TT_WS(tt_ws_outer + {at})" if self.ws_inner else f"TT_WS({at})"

    def try_promote(self, s: Allocate, ind: int) -> bool:
        return False  # overridden by simd.SimdEmitter

    # ---------------------------------------------------------------- function
    def function(self) -> str:
        f = self.func
        params = [f"{CTYPE[b.dtype]}* restrict {self.bufname[b]}" for b in f.params]
        body_lines: list[str] = []
        self.lines = body_lines
        for b in f.alloc_buffers:
            ct = CTYPE[b.dtype]
            nbytes = b.size * dtype_bytes(b.dtype)
            self.emit(f"{ct}* restrict {self.bufname[b]} = ({ct}*){self.workspace(nbytes)};",
                      1)
        self.stmt(f.body, 1)
        self.emit("return 0;", 1)
        unpack = ", ".join(f"({CTYPE[b.dtype]}*)args[{i}]" for i, b in enumerate(f.params))
        out = [*([SCHED_PRAGMA] if wants_sched_pressure(f.body) else []), HEADER,
               self.vector_typedefs(), KERNEL_STATICS.format(
                   outer=self.ws_size[0], total=self.ws_size[0] + self.ws_size[1]),
               f"int32_t tt_kernel({', '.join(params)}) {{", *body_lines, "}",
               f"int32_t tt_packed(void** args) {{ return tt_kernel({unpack}); }}",
               "void tt_release(void) { tt_ws_free(tt_ws_all); }", TIMER]
        return "\n".join(out)

    def vector_typedefs(self) -> str:
        return ""


# The most statements times unroll depth a loop body may have for gcc's unroll pragma.
UNROLL_BUDGET = 64


def _small(s: Stmt, times: int, budget: int = UNROLL_BUDGET) -> bool:
    from ..tir.functor import walk

    return sum(1 for _ in walk(s)) * times <= budget


def unroll_pragma_applies(loop: For, depth: int) -> bool:
    """Whether ``pragma_unroll=depth`` on ``loop``, as scheduled (before lowering), may
    reach the C: a depth of 0 asks nothing, lowering drops a unit loop with its
    annotations, and the emitter gives no pragma to a loop whose lowered body has more
    statements than its budget allows (``_small``). The lowered body is counted from
    below (``_least_lowered``), so a False here is always the emitter's answer too.
    ParallelVectorizeUnroll annotates only loops where this holds: unroll depths the C
    would not show are one program, not several candidates that build the same kernel.
    Before the unit loops and the expanded tiles were counted, all 18 candidates of a
    128-trial GRP search whose C had been written before differed only in this depth,
    and of 40 fresh GRP draws 14 carried a depth the emitter dropped: 10 on a unit
    loop, 4 around a register tile that lowering expands (RESULTS.md)."""
    if depth <= 0 or (loop.extent == 1 and not loop.annotation(SCHED_PRESSURE)):
        return False
    return _least_lowered(loop.body) * depth <= UNROLL_BUDGET


def _least_lowered(s: Stmt) -> int:
    """A lower bound on the statements ``walk`` finds in ``s`` after ``lower``: blocks
    become stores, loops marked unrolled whose expansion ``lower`` allows become copies
    of their body, unit loops vanish. An init's guard and any other condition may fold
    to false in a copy, so what they guard counts nothing. A block's predicate counts as
    true: where it is false for a whole loop (a tail that ``partition_loops`` splits off)
    the block is dead code there, and the emitter's pragma goes on the loop's other
    piece, where it holds."""
    from .lower import MAX_UNROLL, _size

    def least(x: Stmt) -> int:
        if isinstance(x, For):
            inner = least(x.body)
            if x.kind == ForKind.UNROLLED and not x.annotations \
                    and x.extent * _size(x.body) <= MAX_UNROLL:
                return x.extent * inner
            if x.extent == 1 and x.kind != ForKind.PARALLEL and not x.annotation(SCHED_PRESSURE):
                return inner
            return inner + 1 if inner else 0   # a loop whose body folds away goes too
        if isinstance(x, Seq):
            return sum(least(y) for y in x.stmts)
        if isinstance(x, Allocate):
            inner = least(x.body)
            return inner + 1 if inner else 0
        if isinstance(x, Block):
            return least(x.body)
        if isinstance(x, IfThenElse):
            return 0
        return 1

    return least(s)


def wants_sched_pressure(s: Stmt) -> bool:
    """Whether a loop of ``s`` carries ``SCHED_PRESSURE`` (the kernel then gets
    ``SCHED_PRAGMA``)."""
    from ..tir.functor import walk

    return any(isinstance(x, For) and x.annotation(SCHED_PRESSURE) for x in walk(s))


def _has_loop(s: Stmt) -> bool:
    from ..tir.functor import walk

    return any(isinstance(x, For) for x in walk(s))


def emit_c(func: PrimFunc, target: Target) -> str:
    """C source for a lowered function (``codegen.lower.lower``)."""
    from .simd import SimdEmitter

    return SimdEmitter(func, target).function()
