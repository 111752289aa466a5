"""storage_align: a padded copy's rows laid out aligned keep the program's meaning, the
lowering lays the rows out as asked, and the space aligns the copies that vector lanes
read along their rows."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.codegen import lower
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.space import PostOrderApply
from tensortune.space.random_compute_location import padded_row_start, read_in_lanes
from tensortune.tir.functor import walk
from tensortune.tir.stmt import Allocate

DEP = tt.workloads.get("dep", small=True)          # pad: [1, 8, 12, 12], rows of 12
INS = random_inputs(DEP, seed=3)
REF = evaluate(DEP, INS)[0]


def _allocation(func, name):
    return next(s.buffer for s in walk(lower(func).body)
                if isinstance(s, Allocate) and s.buffer.name == name)


def test_rows_laid_out_with_pitch_and_offset():
    sch = tt.Schedule(DEP)
    conv = sch.get_block("conv")
    n, c, y, x, ry, rx = sch.get_loops(conv)
    sch.compute_at(sch.get_block("pad"), c)       # one channel: 12 rows of 12
    sch.storage_align(sch.get_block("pad"), "pad", 8, 7)
    buf = _allocation(sch.func, "pad")
    # rows 16 apart, row r's element 0 at 16 r + 7: 11 * 16 + 7 + 12 = 195 -> 200
    assert buf.shape == (1, 1, 200)
    assert "align=(8, 7)" in str(sch.func)
    check_close(tt.build(sch)(*INS), REF, "dep with aligned pad rows")


def test_alignment_changes_the_program_hash():
    a, b = tt.Schedule(DEP), tt.Schedule(DEP)
    b.storage_align(b.get_block("pad"), "pad", 16, 15)
    assert a.func.structural_hash() != b.func.structural_hash()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(factor=st.integers(1, 16), data=st.data())
def test_aligned_pad_preserves_meaning(factor, data):
    """Any factor and offset, the copy at any loop of the conv or at the root, the
    conv's columns in vectors or not: same output as the reference."""
    sch = tt.Schedule(DEP)
    conv = sch.get_block("conv")
    loops = sch.get_loops(conv)
    if data.draw(st.booleans(), label="vectorize columns"):
        xo, xi = sch.split(loops[3], [None, data.draw(st.sampled_from([2, 4, 5]))])
        sch.reorder(xo, loops[4], loops[5], xi)
        sch.vectorize(xi)
    pad = sch.get_block("pad")
    at = data.draw(st.integers(-1, 3), label="compute at loop (-1: root)")
    if at >= 0:
        sch.compute_at(pad, sch.get_loops(conv)[at])
    sch.storage_align(pad, "pad", factor, data.draw(st.integers(0, factor - 1)))
    check_close(tt.build(sch)(*INS), REF, f"dep, pad aligned to {factor} at loop {at}")


def test_space_aligns_copies_read_along_rows_in_lanes():
    target = tt.Target.host()
    lanes = target.lanes("float32")
    (space,) = PostOrderApply.default(target).generate(DEP)
    aligns = [i.inputs[1:] for i in space.insts if i.kind == "storage_align"]
    # pad[..., v] = x[..., v - 1]: element 1 lands on a vector boundary
    assert aligns == [("pad", lanes, lanes - 1)]
    for name in ("gmm", "nrm"):
        for sp in PostOrderApply.default(target).generate(tt.workloads.get(name, small=True)):
            assert not any(i.kind == "storage_align" for i in sp.insts)


def test_padded_row_start_and_lanes_analysis():
    from tensortune.schedule.tree import find_block

    blk, _ = find_block(DEP, "pad")
    assert padded_row_start(blk) == 1
    assert padded_row_start(find_block(DEP, "conv")[0]) is None
    sch = tt.Schedule(DEP)
    loops = sch.get_loops(sch.get_block("conv"))
    assert not read_in_lanes(sch.func, blk.body.buffer)
    sch.vectorize(loops[1])                 # lanes along channels: not the pad's rows
    assert not read_in_lanes(sch.func, blk.body.buffer)
    sch2 = tt.Schedule(DEP)
    xo, xi = sch2.split(sch2.get_loops(sch2.get_block("conv"))[3], [None, 2])
    sch2.reorder(xo, *sch2.get_loops(sch2.get_block("conv"))[5:7], xi)
    sch2.vectorize(xi)
    assert read_in_lanes(sch2.func, blk.body.buffer)
