"""Compile-option variants of the best programs found.

gcc's instruction scheduling before register allocation (``-fschedule-insns
-fsched-pressure``) is off at ``-O3`` on x86. On re-run 12's best programs it ran
CONVLAYER 4.0% and SMX 3.9% faster and DIL 2.1%, GMM, DENSE and GRP about 1% slower
(RESULTS.md): which way it goes depends on the program, not the workload class, so it is
tried per program. A search-space decision would double the space and the cost model
would have to learn it; it only matters among programs that are already fast, so
``tune`` spends its last few trials building its fastest programs again with it (the
``SCHED_PRESSURE`` loop annotation, which the code generator turns into a ``#pragma GCC
optimize``) and measuring each as a candidate of its own. The trace keeps the
annotation, so ``tt.compile`` rebuilds the variant when it wins; the final re-timing
sets each variant against its original in alternating rounds.

Example:
    >>> sch = with_sched_pressure(replay(func, record))   # None if it has it already
"""

from __future__ import annotations

from ..codegen.c import wants_sched_pressure
from ..schedule import Schedule
from ..schedule.tree import iter_blocks
from ..tir.stmt import SCHED_PRESSURE, ForKind


def with_sched_pressure(sch: Schedule) -> Schedule | None:
    """``sch`` with ``SCHED_PRESSURE`` on the outermost loop of its first nest, recorded
    in its trace; None when it has the annotation already or that loop is unrolled or
    vectorized (lowering expands an unrolled loop only while it carries no annotation)."""
    if wants_sched_pressure(sch.func.body):
        return None
    first = next(iter_blocks(sch.func.body), None)
    if first is None or not first[1]:
        return None
    loop = sch.get_loops(sch.get_block(first[0].name))[0]
    if sch.get(loop).kind in (ForKind.UNROLLED, ForKind.VECTORIZED):
        return None
    sch.annotate(loop, SCHED_PRESSURE, 1)
    return sch
