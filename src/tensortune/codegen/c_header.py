"""The fixed text of every kernel source and the C spelling of names and literals: the C
library declarations and helpers each source starts with (``HEADER``), the timing loop it
ends with (``TIMER``), buffer names as C identifiers, float literals, libm names, and
the names of the vector types.

Example:
    >>> c_ident("for"), c_float(float("inf"), "float32"), libm_name("exp", "float32")
    ('b_for', 'INFINITY', 'expf')
"""

from __future__ import annotations

import keyword
import math
import re

from ..tir.expr import MATH_FUNCS

CTYPE = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t",
         "bool": "int32_t"}
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
        "void* malloc(size_t); void* calloc(size_t, size_t); void free(void*);",
        "void abort(void) __attribute__((__noreturn__));",
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
/* The workspace: a kernel's local buffers over the stack limit. Each thread keeps one
   block per kernel between calls, so only its first call pays for malloc and the page
   faults. With malloc and free in every call, glibc's mmap threshold, which grows with
   each free, made a Winograd kernel's first 8 calls in a process fault 128-1346 pages
   each and run up to 2.3x its steady time, and a search times a candidate from its
   second call (RESULTS.md). The emitter lays the buffers out in the block as a stack
   frame, at offsets fixed when it writes the C: buffers in sibling scopes share memory,
   as malloc's reuse of a freed block did (one buffer per site instead made Winograd
   kernels 10-25% slower), and those inside a parallel loop lie after those outside it,
   which the calling thread keeps while it runs the loop as one of the team. A thread's
   block is on a list of the kernel's, which tt_release frees (between calls only, and
   not while a thread that called the kernel ends). */
typedef struct tt_ws { struct tt_ws* next; void* p; } tt_ws;
typedef unsigned int tt_key;   /* glibc's pthread_key_t */
int pthread_key_create(tt_key*, void (*)(void*));
int pthread_setspecific(tt_key, const void*);
/* A thread that ends gives its block back (its node stays on the list, empty): without
   it a program calling a kernel from many short-lived threads would hold a block per
   thread it ever had. */
static void tt_ws_exit(void* w) { free(((tt_ws*)w)->p); ((tt_ws*)w)->p = NULL; }
static char* tt_ws_take(tt_ws** mine, tt_ws** all, int* keyed, tt_key* key, size_t n) {
  tt_ws* w = *mine;
  if (!w) {       /* the thread's first call of this kernel */
    w = (tt_ws*)calloc(1, sizeof(tt_ws));
    if (!w) abort();
    w->next = __atomic_load_n(all, __ATOMIC_ACQUIRE);
    while (!__atomic_compare_exchange_n(all, &w->next, w, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {}
    /* The kernel's key, made by the first thread: 0 not yet, 1 being made, 2 made, 3
       failed (a process has 1024 keys; a block is then kept until tt_release). */
    int k = 0;
    if (__atomic_compare_exchange_n(keyed, &k, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      __atomic_store_n(keyed, pthread_key_create(key, tt_ws_exit) == 0 ? 2 : 3,
                       __ATOMIC_RELEASE);
    while ((k = __atomic_load_n(keyed, __ATOMIC_ACQUIRE)) == 1) {}
    if (k == 2) pthread_setspecific(*key, w);
    *mine = w;
  }
  if (!w->p && posix_memalign(&w->p, 64, n ? n : 64) != 0) abort();
  return (char*)w->p;
}
static void tt_ws_free(tt_ws* w) {
  for (; w; w = w->next) { free(w->p); w->p = NULL; }
}
#define TT_WS(offset) (tt_ws_take(&tt_ws_mine, &tt_ws_all, &tt_ws_keyed, &tt_ws_key, \
                                  tt_ws_bytes) + (offset))
/* TT_IN_REG(v): v is in a register here (an empty asm). Before a tile vector is copied
   to memory it keeps gcc from giving the vector a stack slot for its whole life, hot
   loop included (codegen/lane_loop.py). */
#if defined(__x86_64__) || defined(__i386__)
#define TT_IN_REG(v) __asm__("" : "+v"(v))
#else
#define TT_IN_REG(v) ((void)0)
#endif
/* TT_SCALAR_LOOP: the loop whose body starts with it is not vectorized (an empty volatile
   asm, which no vectorizer can widen). Vectorized by gcc, a lane loop is a store per lane
   and vector again, and costly to compile (codegen/lane_loop.py). */
#define TT_SCALAR_LOOP __asm__ volatile("")
"""

# Each kernel's own workspace state, before its ``tt_kernel`` (joint.py renames these):
# its blocks, and their size and where the part for buffers inside parallel loops starts.
KERNEL_STATICS = """static __thread tt_ws* tt_ws_mine;
static tt_ws* tt_ws_all;
static int tt_ws_keyed;
static tt_key tt_ws_key;
static const size_t tt_ws_outer = {outer}, tt_ws_bytes = {total};"""

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


def vector_type(dtype: str, w: int) -> str:
    """The C name of a ``w``-lane vector of ``dtype`` (``tt_f32x16``)."""
    return f"tt_{'f32' if dtype == 'float32' else 'f64'}x{w}"


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
