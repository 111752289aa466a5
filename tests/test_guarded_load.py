"""Padded reads whose guard depends on the lane (codegen/guarded_load.py): one vector
load where every lane is inside the guard, lane by lane where not, the statement that
reads them vector code; results equal the reference, also where no lane or only some
lanes of a vector are inside."""

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.codegen import emit_c, lower
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.tir.stmt import PrimFunc

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")
# An element of a promoted tile subscripted by a constant lane: the loop went lane by lane.
BY_LANE = re.compile(r"_r\d+\[\d+\] =")


def _conv1d(c: int, k: int, n: int, r: int) -> PrimFunc:
    """out[o, z] = sum_{i, q} pad[i, z + q] * w[o, i, q]: x padded by r // 2 each side."""
    x = te.placeholder((c, n), name="x")
    w = te.placeholder((k, c, r), name="w")
    p = r // 2
    pad = te.compute((c, n + 2 * p), lambda i, z: te.if_then_else(
        te.all(z >= p, z < n + p), x[i, z - p], 0.0), name="pad")
    i, q = te.reduce_axis(c, name="i"), te.reduce_axis(r, name="q")
    out = te.compute((k, n), lambda o, z: te.sum(pad[i, z + q] * w[o, i, q], axis=[i, q]),
                     name="out")
    return te.create_func([x, w, out], name="conv1d")


def _schedule(f: PrimFunc, width: int, pad_at_lanes: bool, tile: bool) -> tt.Schedule:
    """Output columns ``width`` to a vector; the pad inlined into the update, or computed
    at the vector loop (each lane its own padded element, as C1D's draws place it)."""
    sch = tt.Schedule(f)
    blk = sch.get_block("out")
    o, z, i, q = sch.get_loops(blk)
    zo, zi = sch.split(z, [None, width])
    sch.reorder(o, zo, i, q, zi)
    if tile:
        wb = sch.cache_write(blk, 0, "local")
        sch.reverse_compute_at(wb, zo)
        sch.vectorize(sch.get_loops(wb)[-1])
    sch.vectorize(sch.get_loops(blk)[-1])
    if pad_at_lanes:
        sch.compute_at(sch.get_block("pad"), sch.get_loops(blk)[-1])
    else:
        sch.compute_inline(sch.get_block("pad"))
    return sch


@settings(max_examples=16, deadline=None)
@given(n_vectors=st.integers(1, 4), width=st.sampled_from([LANES, LANES // 2, 2 * LANES]),
       r=st.sampled_from([3, 5, 2 * LANES + 1]), pad_at_lanes=st.booleans(),
       tile=st.booleans(), seed=st.integers(0, 1000))
def test_padded_reads_along_the_lanes_compute_the_reference(
        n_vectors, width, r, pad_at_lanes, tile, seed):
    """A filter wider than two vectors pads more than a vector: whole vectors then lie
    outside the row, and some vectors are partly inside."""
    f = _conv1d(3, 2, n_vectors * width, r)
    sch = _schedule(f, width, pad_at_lanes, tile)
    src = emit_c(lower(sch.func), TARGET)
    assert "x_g" in src and BY_LANE.search(src) is None
    ins = random_inputs(f, seed=seed)
    check_close(tt.build(sch)(*[np.copy(a) for a in ins]), evaluate(f, ins)[0])


def test_a_guard_not_affine_in_the_lane_stays_lane_by_lane():
    """Even columns only (``z % 2``): the lanes inside the guard are no interval, so no
    vector load; the loop is written lane by lane and computes the reference."""
    x = te.placeholder((2 * LANES,), name="x")
    out = te.compute((2 * LANES,), lambda z: te.if_then_else(z % 2 == 0, x[z], 0.0),
                     name="out")
    f = te.create_func([x, out], name="evens")
    sch = tt.Schedule(f)
    (z,) = sch.get_loops(sch.get_block("out"))
    sch.vectorize(z)
    src = emit_c(lower(sch.func), TARGET)
    assert "x_g" not in src
    ins = random_inputs(f, seed=1)
    check_close(tt.build(sch)(*[np.copy(a) for a in ins]), evaluate(f, ins)[0])
