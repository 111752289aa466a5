"""C for a searched program whose weight-only stages run once, not in its timing.

A model's task marks the inputs that are weights (``PrimFunc.weights``). The stages of a
program that read only them (``tir.constant_stages``: a weight's copy into the layout
the kernel reads, the Winograd weight transform) compute the same values at every call,
and the compiled model runs them once (``graph.prepack``). The search should then time
the rest alone, as TVM does with layout-free buffers, or it ranks programs by work the
model never does. This C does that in one library, with the usual symbols: the pack's
stages run at the first call, into buffers the library keeps, and again only when a
weight comes at another address or after ``tt_release``; every other call runs the
rest. The first call (the runner's check) thus computes everything; the timing that
follows does not pack. A weight changed in place at the same address is not packed
again, and two threads' first calls race: the C is the search's alone (``tt.compile``
builds a kernel that computes everything at every call).

Example:
    >>> source = packed_once_c(sch.func, target)   # None: nothing to pack
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..tir.constant_stages import split_constant_stages
from ..tir.expr import dtype_bytes
from ..tir.functor import rewrite_stmt
from ..tir.stmt import For, ForKind, PrimFunc, Stmt
from .c import emit_c
from .c_header import HEADER, KERNEL_STATICS, TIMER
from .joint import KERNEL_SYMBOLS
from .joint import head as joint_head
from .lower import lower
from .target import Target


def _serial(body: Stmt) -> Stmt:
    """Every loop serial: the pack's C then needs no vector types of its own, so it
    compiles under the main kernel's header (it runs once; gcc still vectorizes it)."""

    def fn(s: Stmt) -> Stmt | None:
        if isinstance(s, For) and s.kind is not ForKind.SERIAL:
            return For(s.var, s.extent, s.body, ForKind.SERIAL, ())
        return None

    return rewrite_stmt(body, stmt_fn=fn)


def packed_once_c(func: PrimFunc, target: Target) -> str | None:
    """The C of ``func`` (scheduled, its ``weights`` marked) with its weight-only stages
    run once (see the module doc); None when it has no such stage, or when the two parts'
    C cannot share one header."""
    split = split_constant_stages(func, set(func.weights)) if func.weights else None
    if split is None:
        return None
    main_c = emit_c(lower(split.main), target)
    pack_c = emit_c(lower(replace(split.pack, body=_serial(split.pack.body))), target)
    head, pack_head = joint_head(main_c), joint_head(pack_c)
    if head is None or pack_head is None or pack_head.strip() not in head:
        return None
    # Each part's symbols renamed in its text (``_m``, ``_p``), not by ``#define``, so
    # that the whole joins a unit with other sources (``joint.join``) as one kernel.
    # The header's workspace macro names the statics too: each part gets its own copy.
    names = re.compile(r"\b(" + "|".join(KERNEL_SYMBOLS) + r")\b")
    ws = re.search(r"#define TT_WS\(offset\).*?\+ \(offset\)\)", HEADER, re.DOTALL)
    assert ws is not None, "the header's TT_WS macro"
    # Where joint.prefix finds the kernel's start (these statics go unused).
    out = [head, KERNEL_STATICS.format(outer=0, total=0)]
    for tag, text in (("m", main_c[len(head):]), ("p", pack_c[len(pack_head):])):
        for part in (ws.group(0), text):
            part = names.sub(lambda m: f"{m.group(1)}_{tag}", part)  # noqa: B023
            out.append(part.replace("TT_WS(", f"TT_WS_{tag}("))
    n_in, n_pk = len(func.inputs), len(split.packed)
    src = [f"args[{i}]" for i in split.pack_params]
    sizes = [b.size * dtype_bytes(b.dtype) for b in split.packed]
    fresh = " || ".join([f"tt_pk_buf[{k}] == NULL" for k in range(n_pk)]
                        + [f"tt_pk_src[{j}] != {a}" for j, a in enumerate(src)])
    pack_args = ", ".join(src + [f"tt_pk_buf[{k}]" for k in range(n_pk)])
    main_args = ", ".join([f"args[{i}]" for i in range(n_in)]
                          + [f"tt_pk_buf[{k}]" for k in range(n_pk)]
                          + [f"args[{n_in + i}]" for i in range(func.num_outputs)])
    alloc = "\n".join(f"    if (!tt_pk_buf[{k}] && posix_memalign(&tt_pk_buf[{k}], 64, "
                      f"{n}) != 0) return -2;" for k, n in enumerate(sizes))
    out.append(f"""/* Read by the runner: the first call packs, so the call it compares
   with the best so far is the second (measure/worker.py). */
const int32_t tt_packs_once = 1;
static void* tt_pk_buf[{n_pk}];
static void* tt_pk_src[{len(src)}];
int32_t tt_packed(void** args) {{
  if ({fresh}) {{
{alloc}
    void* pa[] = {{{pack_args}}};
    int32_t rc = tt_packed_p(pa);
    if (rc != 0) return rc;
{"".join(f"    tt_pk_src[{j}] = {a};" + chr(10) for j, a in enumerate(src))}  }}
  void* ma[] = {{{main_args}}};
  return tt_packed_m(ma);
}}
void tt_release(void) {{
  tt_release_m(); tt_release_p();
  for (int k = 0; k < {n_pk}; ++k) {{ free(tt_pk_buf[k]); tt_pk_buf[k] = NULL; }}
  for (int j = 0; j < {len(src)}; ++j) tt_pk_src[j] = NULL;
}}""")
    out.append(TIMER)
    return "\n".join(out)


def program_c(func: PrimFunc, target: Target) -> str:
    """The C the search times for ``func``, a scheduled function: with its weight-only
    stages run once when it marks weights and has such stages, else as emitted.

    Example:
        >>> source = program_c(sch.func, Target.host())
    """
    return (packed_once_c(func, target) if func.weights else None) or \
        emit_c(lower(func), target)
