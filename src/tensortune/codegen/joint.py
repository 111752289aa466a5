"""Several kernels' C as one translation unit, so that one gcc run builds a batch.

Every source the emitter writes starts with the same text for a given target and set of
vector widths (the C library's declarations, the helpers, the vector types), then
defines the kernel's workspace, ``tt_kernel``, ``tt_packed``, ``tt_release``, ``tt_now``
and ``tt_time``. Each gcc run pays for starting ``cc1`` and parsing that text (27 ms of
CPU), then the assembler and the link (40 ms), whatever the kernel; a C3D or T2D source
took 0.22-0.51 s in all. A unit of several kernels pays once, each kernel's symbols
renamed by a suffix (``tt_time_2``) with ``#define``, so its text is compiled as written
(24 kernels of C3D and T2D units: the same instructions as built alone). Units of four
sources of a tuning run's batches took a median 0.90 (C3D) and 0.91 (T2D) of the gcc CPU
of separate builds (RESULTS.md).

A source that asks gcc for other options (``#pragma GCC optimize``, which would reach
every kernel after it), or that is not in the emitter's layout, is not joined.

Example:
    >>> unit = join([src_a, src_b])          # defines tt_time_0 and tt_time_1
    >>> lib = compile_source(unit, target); suffix(1)   # '_1'
"""

from __future__ import annotations

from .c_header import KERNEL_STATICS

# Where the emitter's kernel begins (``CEmitter.function``): what comes before is shared.
KERNEL_START = KERNEL_STATICS.split("\n")[0]
# The file-scope names each source defines after that point.
KERNEL_SYMBOLS = ("tt_ws_mine", "tt_ws_all", "tt_ws_keyed", "tt_ws_key", "tt_ws_outer",
                  "tt_ws_bytes", "tt_kernel", "tt_packed", "tt_release", "tt_now", "tt_time")
# A source of ``packed_once`` defines, besides those, its two kernels' (renamed with
# ``_m`` and ``_p``) and its own state.
SYMBOLS = KERNEL_SYMBOLS + tuple(f"{s}_{t}" for t in "mp" for s in KERNEL_SYMBOLS) + (
    "tt_pk_buf", "tt_pk_src", "tt_packs_once")


def prefix(source: str) -> str | None:
    """The text before ``source``'s kernel, which every source joined with it must share;
    None for a source that cannot be joined."""
    if "#pragma GCC optimize" in source:
        return None
    return head(source)


def head(source: str) -> str | None:
    """The text before ``source``'s kernel (``prefix`` without the check for gcc
    options); None for a source not in the emitter's layout."""
    at = source.find("\n" + KERNEL_START)
    return None if at < 0 else source[:at + 1]


def suffix(index: int) -> str:
    """The suffix of the symbols of the ``index``-th source of a unit."""
    return f"_{index}"


def join(sources: list[str]) -> str:
    """One unit holding each of ``sources``, the ``k``-th one's symbols suffixed with
    ``suffix(k)``. Raises ValueError if a source cannot be joined or the prefixes differ.
    """
    head = [prefix(s) for s in sources]
    if any(h is None for h in head) or len(set(head)) != 1:
        raise ValueError("only sources with the same text before their kernels join")
    first = head[0]
    assert first is not None
    out = [first]
    for k, src in enumerate(sources):
        out += [f"#define {s} {s}{suffix(k)}" for s in SYMBOLS]
        out.append(src[len(first):])
        out += [f"#undef {s}" for s in SYMBOLS]
    return "\n".join(out) + "\n"
