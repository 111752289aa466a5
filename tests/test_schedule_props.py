"""Property-based tests: random sequences of schedule primitives on suite workloads.

A legal sequence must compile and match the float64 reference on random inputs; an illegal
call must raise ScheduleError and leave the program unchanged. Any other exception, or a
wrong result, is a bug.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.schedule.tree import iter_blocks

WORKLOADS = {
    "gmm": dict(M=12, N=20, K=9),
    "c2d": dict(C=3, K=4, H=6, W=5),
    "dense": dict(M=6, K=10, N=12),
    "smx": dict(M=5, N=12),
    "lnm": dict(M=4, N=10),
}
_FUNCS = {n: tt.workloads.get(n, **s) for n, s in WORKLOADS.items()}
_REFS = {}


def _reference(name):
    if name not in _REFS:
        f = _FUNCS[name]
        ins = random_inputs(f, seed=7)
        _REFS[name] = (ins, evaluate(f, ins))
    return _REFS[name]


ACTIONS = ["split", "split", "fuse", "reorder", "parallel", "vectorize", "unroll",
           "compute_inline", "reverse_compute_inline", "compute_at", "compute_at",
           "reverse_compute_at", "cache_read", "cache_write", "decompose_reduction", "rfactor",
           "annotate", "transform_layout", "storage_align", "storage_align"]


def _apply(sch: tt.Schedule, action: str, draw) -> None:
    blocks = [b.name for b, _ in iter_blocks(sch.func.body)]
    blk = sch.get_block(draw(st.sampled_from(blocks)))
    loops = sch.get_loops(blk)
    pick = st.integers(0, max(0, len(loops) - 1))
    if action in ("split", "fuse", "reorder", "parallel", "vectorize", "unroll", "annotate",
                  "rfactor", "decompose_reduction") and not loops:
        return
    if action == "split":
        lp = loops[draw(pick)]
        f = draw(st.integers(1, 7))
        sch.split(lp, draw(st.sampled_from([[None, f], [f, None], [None, 2, f]])))
    elif action == "fuse":
        i = draw(pick)
        sch.fuse(*loops[i:i + 2])
    elif action == "reorder":
        sub = draw(st.permutations(loops))[: draw(st.integers(2, max(2, len(loops))))]
        sch.reorder(*sub)
    elif action in ("parallel", "vectorize", "unroll"):
        getattr(sch, action)(loops[draw(pick)])
    elif action == "annotate":
        if draw(st.booleans()):
            sch.annotate(loops[draw(pick)], "pragma_unroll", draw(st.integers(0, 8)))
        else:   # gcc's pre-RA scheduling for the whole kernel
            sch.annotate(loops[draw(pick)], "gcc_sched_pressure", draw(st.integers(0, 1)))
    elif action in ("compute_inline", "reverse_compute_inline"):
        getattr(sch, action)(blk)
    elif action in ("compute_at", "reverse_compute_at"):
        other = sch.get_block(draw(st.sampled_from(blocks)))
        targets = sch.get_loops(other)
        if targets:
            getattr(sch, action)(blk, targets[draw(st.integers(0, len(targets) - 1))])
    elif action == "cache_read":
        sch.cache_read(blk, draw(st.integers(0, 2)))
    elif action == "cache_write":
        sch.cache_write(blk, 0)
    elif action == "decompose_reduction":
        sch.decompose_reduction(blk, loops[draw(pick)])
    elif action == "rfactor":
        sch.rfactor(loops[draw(pick)], 0)
    elif action in ("transform_layout", "storage_align"):
        from tensortune.schedule.tree import find_block, reads, writes

        b, _ = find_block(sch.func, sch._get(blk, type(blk), "test"))
        inter = [x for x in (*reads(b), *writes(b)) if x in sch.func.alloc_buffers]
        if not inter:
            return
        buf = draw(st.sampled_from(inter))
        if action == "storage_align":
            factor = draw(st.integers(1, 16))
            sch.storage_align(blk, buf.name, factor, draw(st.integers(0, factor - 1)))
            return
        nd = len(buf.shape)
        names = ", ".join(f"a{d}" for d in range(nd))
        if draw(st.booleans()):
            perm = draw(st.permutations(range(nd)))
            body = ", ".join(f"a{d}" for d in perm)
        else:
            d, f = draw(st.integers(0, nd - 1)), draw(st.integers(2, 4))
            parts = [f"a{d} // {f}"] + [f"a{e}" for e in range(nd) if e != d] + [f"a{d} % {f}"]
            body = ", ".join(parts)
        sch.transform_layout(blk, buf.name, f"lambda {names}: ({body},)")


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_random_schedules_preserve_meaning(name, data):
    func = _FUNCS[name]
    sch = tt.Schedule(func, seed=0)
    applied = []
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        before = str(sch.func)
        try:
            _apply(sch, action, data.draw)
            applied.append(action)
        except tt.ScheduleError:
            assert str(sch.func) == before, f"{action} failed but changed the program"
    ins, refs = _reference(name)
    out = tt.build(sch)(*ins)
    check_close(out, refs[0], f"{name} after {applied}")
    # Replaying the recorded trace on a fresh schedule gives the same program.
    again = tt.Schedule(func)
    tt.Trace.from_json(sch.trace.as_json()).apply(again)
    assert str(again.func) == str(sch.func)


def test_properties_use_nonzero_inputs():
    for name in WORKLOADS:
        ins, refs = _reference(name)
        assert all(np.count_nonzero(x) == x.size for x in ins)
        assert np.abs(refs[0]).max() > 0
