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
import keyword
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..tir.arith import Ranges, bound, simplify_flat
from ..tir.expr import (
    MATH_FUNCS,
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
from .target import Target

CTYPE = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t",
         "bool": "int32_t"}
STACK_LIMIT = 64 * 1024  # larger local buffers go to the heap
_C_WORDS = {"int", "float", "double", "char", "long", "short", "void", "return", "for", "if",
            "else", "while", "do", "static", "const", "restrict", "auto", "register", "main",
            "signed", "unsigned", "struct", "union", "enum", "case", "switch", "break",
            "default", "goto", "sizeof", "typedef", "volatile", "extern", "inline"}

# The flags SCHED_PRESSURE asks for, for every function after it in the file.
SCHED_PRAGMA = '#pragma GCC optimize ("schedule-insns", "sched-pressure")'


def _libc_declarations() -> str:
    """What the kernels use of <stdint.h>, <stdlib.h>, <string.h> and <math.h>, declared
    rather than included: gcc parses those four headers in about 10 ms, 4-5% of a small
    kernel's build (C1D: 23.2-25.3 -> 22.7-22.8 s of gcc CPU over a run's 128 sources),
    and 94 drawn programs of 14 workloads compiled to the same instructions (RESULTS.md). The math
    functions are the builtins gcc knows by these names, so they keep their meaning."""
    calls = []
    for name in (*MATH_FUNCS, "fmod"):        # fmod: a float ``%``
        for ct, suffix in (("float", "f"), ("double", "")):
            args = ", ".join([ct] * (2 if name in ("pow", "fmod") else 1))
            calls.append(f"{ct} {name}{suffix}({args});")
    return "\n".join([
        "typedef __INT32_TYPE__ int32_t;",
        "typedef __INT64_TYPE__ int64_t;",
        "#define INFINITY (__builtin_inff())",
        '#define NAN (__builtin_nanf(""))',
        "void* malloc(size_t); void free(void*); void abort(void) __attribute__((__noreturn__));",
        "int posix_memalign(void**, size_t, size_t);",
        "void* memcpy(void* restrict, const void* restrict, size_t);",
        "void* memset(void*, int, size_t);",
        *(" ".join(calls[i:i + 4]) for i in range(0, len(calls), 4))])


# <time.h> (for the timer's clock) is included, and defines size_t and NULL.
HEADER = "#include <time.h>\n" + _libc_declarations() + r"""
static inline int32_t tt_floordiv(int32_t a, int32_t b) {
  int32_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int32_t tt_floormod(int32_t a, int32_t b) {
  int32_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline float tt_maxf(float a, float b) { return a > b ? a : b; }
static inline float tt_minf(float a, float b) { return a < b ? a : b; }
static inline double tt_maxd(double a, double b) { return a > b ? a : b; }
static inline double tt_mind(double a, double b) { return a < b ? a : b; }
static inline int32_t tt_maxi(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int32_t tt_mini(int32_t a, int32_t b) { return a < b ? a : b; }
static inline void* tt_alloc(size_t n) {
  void* p = NULL; if (posix_memalign(&p, 64, n ? n : 64) != 0) abort(); return p; }
/* TT_IN_REG(v): v is in a register here (an empty asm). Before a tile vector is copied
   to memory it keeps gcc from giving the vector a stack slot for its whole life, hot
   loop included (codegen/lane_loop.py). */
#if defined(__x86_64__) || defined(__i386__)
#define TT_IN_REG(v) __asm__("" : "+v"(v))
#else
#define TT_IN_REG(v) ((void)0)
#endif
"""

TIMER = r"""
static double tt_now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * t.tv_nsec; }
/* Times tt_packed, which the caller has run once already (the warm-up): `repeat` timings
   of `number` calls each; number = 0 picks it from one more call so one repeat lasts at
   least min_repeat_s. flush > 0 writes `flush` bytes before each repeat to evict the
   caches. Returns the number used, -1 if the kernel failed. */
int tt_time(void** args, int number, int repeat, double min_repeat_s, long flush, double* out) {
  double t0;
  if (number <= 0) {
    t0 = tt_now();
    if (tt_packed(args) != 0) return -1;
    double once = tt_now() - t0;
    number = once > 0 ? (int)ceil(min_repeat_s / once) : 1000;
    if (number < 1) number = 1;
    if (number > 100000) number = 100000;
  }
  char* junk = flush > 0 ? (char*)malloc((size_t)flush) : NULL;
  for (int r = 0; r < repeat; ++r) {
    if (junk) memset(junk, r + 1, (size_t)flush);
    t0 = tt_now();
    for (int n = 0; n < number; ++n) tt_packed(args);
    out[r] = (tt_now() - t0) / number;
  }
  free(junk);
  return number;
}
"""


def c_ident(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit() or s in _C_WORDS or keyword.iskeyword(s) or s.startswith("tt_"):
        s = "b_" + s
    return s


def libm_name(name: str, dtype: str) -> str:
    """The C math function of ``name`` for ``dtype`` (``expf`` for float32)."""
    return name + ("f" if dtype == "float32" else "")


def c_float(v: float, dtype: str) -> str:
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    if math.isnan(v):
        return "NAN"
    s = repr(float(v))
    return s + "f" if dtype == "float32" else s


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
        used: set[str] = set()
        for b in (*func.params, *func.alloc_buffers):
            self._name_buffer(b, used)
        self.used = used

    def _name_buffer(self, b: Buffer, used: set[str]) -> str:
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
        self.emit(f"for (int32_t {v} = 0; {v} < {s.extent}; ++{v}) {{", ind)
        self.stmt(s.body, ind + 1)
        self.emit("}", ind)

    def vector_loop(self, s: For, ind: int) -> bool:
        return False  # overridden by simd.SimdEmitter

    def allocate(self, s: Allocate, ind: int,
                 body: Callable[[Stmt, int], None] | None = None) -> None:
        """Declare ``s``'s buffer and emit its body with ``body`` (``stmt`` unless given:
        a vector loop's body emits its statements as vectors)."""
        b = s.buffer
        name = self._name_buffer(b, self.used)
        ct = CTYPE[b.dtype]
        nbytes = b.size * dtype_bytes(b.dtype)
        emit_body = body or self.stmt
        if self.try_promote(s, ind):
            # The registers live as long as this allocation: loop partitioning can give a
            # buffer several allocations, and a later one may not be promotable. A body
            # that gives up on vectors (simd's _NoVec) is emitted again without them.
            try:
                emit_body(s.body, ind)
            finally:
                del self.promoted[b]
        elif nbytes <= STACK_LIMIT:
            self.emit(f"{ct} {name}[{b.size}] __attribute__((aligned(64)));", ind)
            emit_body(s.body, ind)
        else:
            self.emit("{", ind)
            self.emit(f"{ct}* restrict {name} = ({ct}*)tt_alloc({nbytes});", ind + 1)
            emit_body(s.body, ind + 1)
            self.emit(f"free({name});", ind + 1)
            self.emit("}", ind)

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
            self.emit(f"{ct}* restrict {self.bufname[b]} = ({ct}*)tt_alloc({nbytes});", 1)
        self.stmt(f.body, 1)
        for b in f.alloc_buffers:
            self.emit(f"free({self.bufname[b]});", 1)
        self.emit("return 0;", 1)
        unpack = ", ".join(f"({CTYPE[b.dtype]}*)args[{i}]" for i, b in enumerate(f.params))
        out = [*([SCHED_PRAGMA] if wants_sched_pressure(f.body) else []), HEADER,
               self.vector_typedefs(),
               f"int32_t tt_kernel({', '.join(params)}) {{", *body_lines, "}",
               f"int32_t tt_packed(void** args) {{ return tt_kernel({unpack}); }}", TIMER]
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
