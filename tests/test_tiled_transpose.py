"""TiledTranspose: a copy that reads across its output's rows forks a space of vector by
vector blocks; draws are exact on random shapes and permutations, and copies that only
broadcast, reductions and shapes that are not whole vectors are left alone."""

from drawing import exact_draws
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.schedule.tree import iter_blocks
from tensortune.space import PostOrderApply, TiledTranspose
from tensortune.space.space_generator import sample

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")


def _transpose(B: int, M: int, N: int, scale: bool):
    A = te.placeholder((B, M, N), name="A")
    if scale:
        T = te.compute((B, N, M), lambda b, j, i: A[b, i, j] * 2.0 + 1.0, name="T")
    else:
        T = te.compute((B, N, M), lambda b, j, i: A[b, i, j], name="T")
    return te.create_func([A, T], name="transpose")


def test_the_fork_walks_vector_by_vector_blocks_with_the_output_row_innermost():
    f = _transpose(1, 2 * LANES, 3 * LANES, scale=False)
    sch = tt.Schedule(f)
    got = TiledTranspose(lanes=LANES).apply(sch, sch.get_block("T"))
    assert len(got) == 2
    loops = [got[1].get(lp) for lp in got[1].get_loops(got[1].get_block("T"))]
    assert [lp.extent for lp in loops] == [1, 3, 2, LANES, LANES]
    assert loops[-1].var.name.startswith("i")    # the output's last axis in the lanes


def test_broadcasts_reductions_and_partial_vectors_are_left_alone():
    rule = TiledTranspose(lanes=LANES)
    smx = tt.workloads.get("smx")
    sch = tt.Schedule(smx)
    for name in sch.block_names():
        assert len(rule.apply(sch, sch.get_block(name))) == 1, name
    sch = tt.Schedule(tt.workloads.get("gmm", M=64, N=64, K=64))
    assert len(rule.apply(sch, sch.get_block("C"))) == 1
    sch = tt.Schedule(_transpose(1, LANES + 1, 2 * LANES, scale=False))
    assert len(rule.apply(sch, sch.get_block("T"))) == 1
    sch = tt.Schedule(_transpose(1, LANES, 2 * LANES, scale=False))   # one block high
    assert len(rule.apply(sch, sch.get_block("T"))) == 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 3), m=st.integers(2, 4), n=st.integers(2, 4), scale=st.booleans(),
       seed=st.integers(0, 1000))
def test_draws_of_the_blocked_space_are_exact(B, m, n, scale, seed):
    f = _transpose(B, m * LANES, n * LANES, scale)
    spaces = PostOrderApply.default(TARGET).generate(f)
    assert len(spaces) == 2
    assert exact_draws(f, spaces[1], seed)


def _filter_copy(C: int, K: int, scale: bool = False):
    """Winograd's filter copy: T[c, r, s, k] = W[k, c, r, s], its input's last axis 3."""
    W = te.placeholder((K, C, 3, 3), name="W")
    if scale:
        T = te.compute((C, 3, 3, K), lambda c, r, s, k: W[k, c, r, s] * 2.0, name="T")
    else:
        T = te.compute((C, 3, 3, K), lambda c, r, s, k: W[k, c, r, s], name="T")
    return te.create_func([W, T], name="filter_copy")


def test_a_short_last_axis_is_fused_with_the_axes_before_it():
    """W's last axis (3) is no whole vector: c, r and s are fused (C * 9 elements in a
    row of W) and walked in blocks, and the code generator transposes them in
    registers (a plain copy's, ``codegen.gather``); where the fused axes are not
    consecutive in memory nothing is forked."""
    from tensortune.measure.builder import write_c

    f = _filter_copy(2 * LANES, 2 * LANES)
    sch = tt.Schedule(f)
    got = TiledTranspose(lanes=LANES).apply(sch, sch.get_block("T"))
    assert len(got) == 2
    loops = [got[1].get(lp) for lp in got[1].get_loops(got[1].get_block("T"))]
    assert [lp.extent for lp in loops] == [18, 2, LANES, LANES]
    assert loops[-1].var.name.startswith("k")
    gen = PostOrderApply.default(TARGET)
    drawn = sample(f, gen.generate(f)[1], 0, gen.postprocs)
    assert drawn is not None
    source, error = write_c(lambda: drawn.func, TARGET)
    assert error is None and "tt_zip1" in source
    # T[s, r, c, k] = W[k, c, r, s]: s, r, c are not W's order, so no run is contiguous.
    W = te.placeholder((2 * LANES, 2 * LANES, 3, 3), name="W")
    T = te.compute((3, 3, 2 * LANES, 2 * LANES), lambda s, r, c, k: W[k, c, r, s], name="T")
    sch = tt.Schedule(te.create_func([W, T], name="crossed"))
    assert len(TiledTranspose(lanes=LANES).apply(sch, sch.get_block("T"))) == 1


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 3), k=st.integers(2, 3), scale=st.booleans(),
       seed=st.integers(0, 1000))
def test_draws_of_a_fused_blocked_space_are_exact(c, k, scale, seed):
    f = _filter_copy(c * LANES, k * LANES, scale)
    spaces = PostOrderApply.default(TARGET).generate(f)
    assert len(spaces) == 2
    assert exact_draws(f, spaces[1], seed)


def _copy_then_epilogue(B: int, M: int, N: int, reads: int = 1):
    """A transposing copy ``T`` that AutoInline inlines into the element-wise epilogue
    ``E`` after it (Winograd's NCHW copy and CONVLAYER's scale, shift and ReLU); with
    ``reads`` = 2 the epilogue reads ``T`` twice, so the copy stays a stage."""
    A = te.placeholder((B, M, N), name="A")
    s = te.placeholder((N,), name="s")
    T = te.compute((B, N, M), lambda b, j, i: A[b, i, j], name="T")
    if reads == 1:
        E = te.compute((B, N, M), lambda b, j, i: te.max(T[b, j, i] * s[j], 0.0), name="E")
    else:
        E = te.compute((B, N, M), lambda b, j, i: T[b, j, i] * s[j] + T[b, j, i], name="E")
    return te.create_func([A, s, E], name="copy_epilogue")


def test_an_epilogue_that_reads_across_rows_once_a_copy_is_inlined_forks():
    """The rules visit the epilogue before the copy is inlined into it: the rule reads
    the epilogue as it will be (``inlined_view``), so the epilogue's loops are blocked
    and the copy then inlines into the blocked loops."""
    from tensortune.space.tiled_transpose import crossed_load, inlined_view

    f = _copy_then_epilogue(1, 2 * LANES, 3 * LANES)
    sch = tt.Schedule(f)
    blk = sch.get(sch.get_block("E"))
    assert crossed_load(blk) is None                 # it reads T along its rows
    view = inlined_view(sch.func, blk)
    load = crossed_load(view)
    assert load is not None and load.buffer.name == "A"
    got = TiledTranspose(lanes=LANES).apply(sch, sch.get_block("E"))
    assert len(got) == 2
    loops = [got[1].get(lp) for lp in got[1].get_loops(got[1].get_block("E"))]
    assert [lp.extent for lp in loops] == [1, 3, 2, LANES, LANES]
    spaces = PostOrderApply.default(TARGET).generate(f)
    assert len(spaces) == 2
    blocked = tt.Schedule.from_trace(f, spaces[1].as_json())
    assert blocked.block_names() == ["E"]            # the copy was inlined after the fork
    # The blocks go through the register transpose, the scale and ReLU applied to each
    # transposed row (``codegen.gather``).
    from tensortune.measure.builder import write_c

    gen = PostOrderApply.default(TARGET)
    drawn = [d for d in (sample(f, spaces[1], k, gen.postprocs) for k in range(4)) if d]
    assert any("tt_zip1" in (write_c(lambda d=d: d.func, TARGET)[0] or "") for d in drawn)
    # A copy the epilogue reads twice stays a stage (AutoInline): nothing to look through.
    f2 = _copy_then_epilogue(1, 2 * LANES, 3 * LANES, reads=2)
    sch2 = tt.Schedule(f2)
    blk2 = sch2.get(sch2.get_block("E"))
    assert inlined_view(sch2.func, blk2) is blk2
    assert len(TiledTranspose(lanes=LANES).apply(sch2, sch2.get_block("E"))) == 1


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 2), m=st.integers(2, 3), n=st.integers(2, 3),
       seed=st.integers(0, 1000))
def test_draws_of_a_blocked_epilogue_are_exact(B, m, n, seed):
    f = _copy_then_epilogue(B, m * LANES, n * LANES)
    spaces = PostOrderApply.default(TARGET).generate(f)
    assert len(spaces) == 2
    assert exact_draws(f, spaces[1], seed)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000))
def test_the_winograd_epilogue_is_blocked_but_a_write_back_under_a_tile_is_not(seed):
    """CONVLAYER's Winograd form: the epilogue after the NCHW copy is blocked in half
    of the spaces (the filter copy's fork doubles them again), and its draws are exact.
    T2D's cache-write write-back lies under its tile's loops, so AutoInline never
    visits it and the output copy after it is not looked through."""
    from tensortune.rewrite import rewrite
    from tensortune.rewrite.winograd import winograd
    from tensortune.workloads.conv import conv_layer

    g = winograd(conv_layer(1, 16, 2 * LANES, 4, 8))     # 32 output pixels, 2 vectors
    assert g is not None
    spaces = PostOrderApply.default(TARGET).generate(g)
    assert len(spaces) == 4
    blocked = []
    for sp in spaces:
        sch = tt.Schedule.from_trace(g, sp.as_json())
        blocked.append([sch.get(lp).extent for lp in sch.get_loops(sch.get_block("out"))]
                       [-2:] == [LANES, LANES])
    assert blocked.count(True) == 2
    for sp, b in zip(spaces, blocked):
        if b:
            assert exact_draws(g, sp, seed, check=1)
            # The output transform is placed outside the blocks, never a row of a block
            # at a time (RandomComputeLocation's ``outside``).
            assert sum(len(x.inputs) == 2 for x in sp.insts
                       if x.kind == "sample_compute_location") == 1
            for k in range(4):
                drawn = sample(g, sp, seed + k, PostOrderApply.default(TARGET).postprocs)
                if drawn is None:
                    continue
                paths = {b.name: {id(lp) for lp in path}
                         for b, path in iter_blocks(drawn.func.body)}
                assert len(paths["wino_Y"] & paths["out"]) <= 3
    t2d = rewrite(tt.workloads.get("t2d"), LANES)
    assert t2d is not None
    assert len(PostOrderApply.default(TARGET).generate(t2d)) == 2
