"""Each primitive's error paths: a clear ScheduleError naming the block/loop, and the
program left unchanged."""

import pytest

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs


def _sch(name="gmm", **shape):
    return tt.Schedule(tt.workloads.get(name, small=True, **shape))


def _raises(sch, fn, match):
    before = str(sch.func)
    with pytest.raises(tt.ScheduleError, match=match):
        fn()
    assert str(sch.func) == before


def test_get_block_unknown_lists_blocks():
    sch = _sch()
    _raises(sch, lambda: sch.get_block("D"), r"no block named 'D'; blocks are: C")


def test_get_loops_innermost():
    """The innermost loops of a block, recorded so a replay gets as many back."""
    sch = _sch()
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    inner = sch.get_loops(sch.get_block("C"), innermost=2)
    assert [str(sch.get(lp).var) for lp in inner] == [str(sch.get(j).var), str(sch.get(k).var)]
    assert sch.trace.insts[-1].attr("innermost") == 2
    again = _sch()
    sch.trace.apply(again)
    assert str(again.func) == str(sch.func)
    _raises(sch, lambda: sch.get_loops(sch.get_block("C"), innermost=5),
            r"block C has 4 loops, asked for the innermost 5")


def test_split_errors():
    sch = _sch()
    i, j, k = sch.get_loops(sch.get_block("C"))
    _raises(sch, lambda: sch.split(i, [None, None]), "at most one factor may be None")
    _raises(sch, lambda: sch.split(i, [0, None]), "positive ints")
    _raises(sch, lambda: sch.split(i, [2, 3]), r"cover only 6 iterations")
    sch.split(i, [None, 5])
    _raises(sch, lambda: sch.split(i, [None, 2]), "no longer exists")


def test_fuse_and_reorder_errors():
    sch = _sch("c2d")
    pad_loops = sch.get_loops(sch.get_block("pad"))
    conv_loops = sch.get_loops(sch.get_block("conv"))
    _raises(sch, lambda: sch.fuse(pad_loops[0], conv_loops[1]), "only perfectly nested")
    _raises(sch, lambda: sch.reorder(pad_loops[0], conv_loops[0]), "single perfect nest")
    _raises(sch, lambda: sch.reorder(conv_loops[0], conv_loops[0]),
            r"reorder: loop n is listed twice; list each once")


def test_parallel_vectorize_errors():
    sch = _sch()
    i, j, k = sch.get_loops(sch.get_block("C"))
    _raises(sch, lambda: sch.parallel(k), r"reduction axis C\.vk; only loops over spatial")
    _raises(sch, lambda: sch.vectorize(k), "only loops over spatial axes can be vectorized")
    sch.parallel(i)
    _raises(sch, lambda: sch.parallel(j), "already parallel")
    _raises(sch, lambda: sch.annotate(j, "nope", 1), "unknown loop annotation 'nope'")


def test_compute_at_errors():
    sch = _sch("dense")
    mm, y = sch.get_block("matmul"), sch.get_block("Y")
    yl = sch.get_loops(y)
    _raises(sch, lambda: sch.compute_at(y, sch.get_loops(mm)[0]), "writes the function output")
    ml = sch.get_loops(mm)
    _raises(sch, lambda: sch.compute_at(mm, ml[0]), "already inside loop")
    sch.compute_at(mm, yl[1])
    text = str(sch.func)
    assert text.index('block("matmul"') > text.index("for j_1 in range")


def test_reverse_compute_at_errors():
    sch = _sch("dense")
    mm, y = sch.get_block("matmul"), sch.get_block("Y")
    i, j, k = sch.get_loops(mm)
    _raises(sch, lambda: sch.reverse_compute_at(y, k), "iterates the reduction axis vk")
    _raises(sch, lambda: sch.reverse_compute_at(mm, sch.get_loops(y)[0]), "is a reduction")
    sch.reverse_compute_at(y, j)


def test_inline_errors():
    sch = _sch("dense")
    _raises(sch, lambda: sch.compute_inline(sch.get_block("matmul")), "is a reduction")
    _raises(sch, lambda: sch.compute_inline(sch.get_block("Y")), "function output")
    sch2 = _sch("smx")
    _raises(sch2, lambda: sch2.reverse_compute_inline(sch2.get_block("Y")),
            "reads 2 intermediate buffers")


def test_cache_and_layout_errors():
    sch = _sch()
    c = sch.get_block("C")
    _raises(sch, lambda: sch.cache_read(c, 5), r"reads 2 buffers \(A, B\); index must be")
    _raises(sch, lambda: sch.transform_layout(c, "A", lambda i, k: (k, i)),
            "is a function parameter")
    bg = sch.cache_read(c, 1)
    _raises(sch, lambda: sch.transform_layout(bg, "B_global", lambda k, j: (k // 2, j)),
            "sends two elements")
    _raises(sch, lambda: sch.transform_layout(bg, "B_global", lambda k: (k,)),
            "takes 1 indices")
    _raises(sch, lambda: sch.storage_align(c, "A", 16, 0), "A is a function parameter")
    _raises(sch, lambda: sch.storage_align(bg, "B_glob", 16, 0),
            r"does not access a buffer named 'B_glob'; it accesses \['B', 'B_global'\]")
    _raises(sch, lambda: sch.storage_align(bg, "B_global", 0, 0), "factor must be a positive")
    _raises(sch, lambda: sch.storage_align(bg, "B_global", 8, 8),
            r"offset must lie in \[0, factor\) = \[0, 8\), got 8")


def test_reduction_errors():
    sch = _sch("dense")
    y = sch.get_block("Y")
    _raises(sch, lambda: sch.decompose_reduction(y, sch.get_loops(y)[0]), "has no init")
    mm = sch.get_block("matmul")
    i, j, k = sch.get_loops(mm)
    _raises(sch, lambda: sch.decompose_reduction(mm, sch.get_loops(y)[0]), "does not enclose")
    _raises(sch, lambda: sch.rfactor(i), "exactly one block, found 0")


def test_rfactor_refuses_a_loop_fused_across_spatial_and_reduction_axes():
    """Found by the random-schedule property test: after fusing GMM's i, j and k into one
    loop, rfactor of a unit inner k loop made that fused loop a reduction axis of the
    partial block, whose init then ran once instead of once per output element."""
    sch = _sch("gmm")
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ij = sch.fuse(i, j)
    _, k1 = sch.split(k, [None, 1])
    sch.fuse(ij, sch.get_loops(c)[1])
    _raises(sch, lambda: sch.rfactor(k1),
            "iterates both the reduction and the spatial axis vi")
    # The same check covers the loop being factored itself.
    sch = _sch("gmm")
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jk = sch.fuse(j, k)
    _raises(sch, lambda: sch.rfactor(jk),
            "loop j_k_f of block C iterates both the reduction and the spatial axis vj")


def test_reorder_refuses_to_swap_halves_of_a_loop_fused_across_spatial_and_reduction():
    """Found by the random-schedule property test: GMM's j and k fused, split in three and
    its halves swapped reached k = 1 of some column before k = 0, whose init then wiped
    the partial sum."""
    sch = _sch("gmm")
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    outer, mid, _ = sch.split(sch.fuse(j, k), [None, 2, 1])
    _raises(sch, lambda: sch.reorder(i, mid, outer),
            "loops j_k_f_0 and j_k_f_1 both iterate the reduction of block C")
    # Loops over the reduction alone, or swapped with spatial loops, stay free to move.
    sch = _sch("gmm")
    f = sch.func   # the reference is the function before scheduling
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, [None, 2])
    sch.reorder(k1, sch.fuse(i, j), k0)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


@pytest.mark.parametrize("factors", [[None, 2], [None, 2, 2]])
def test_rfactor_skips_partial_sums_a_guarded_split_never_writes(factors):
    """Found by the random-schedule property test: K = 9 split by 2 and fused back gives a
    loop of 10 whose last partial sum no update wrote (nor, once the partial block's loops
    were fused, initialised); the final sum read it. The final block now reads only the
    slots some update writes."""
    f = tt.workloads.get("gmm", M=12, N=20, K=9)
    ins = random_inputs(f)
    sch = tt.Schedule(f)
    c = sch.get_block("C")
    *_, k = sch.get_loops(c)
    parts = sch.split(k, factors)
    sch.rfactor(sch.fuse(*parts[:2]), 0)
    assert "where(k_0_k_1_f_1 < " in str(sch.func)
    rf = sch.get_loops(sch.get_block("C_rf"))
    if len(rf) > 3:     # the slot axis fused with what is left of the reduction
        sch.fuse(*rf[2:])
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_rfactor_refuses_a_slot_written_but_not_at_its_first_reduction_point():
    """K = 9 split by 4, its parts swapped and fused (k = g % 3 * 4 + g // 3), then split
    by 2: partial sum g_0 = 4 is written only at g_1 = 1, not at g_1 = 0 where its init
    would run, so the slot could be read before it was set."""
    f = tt.workloads.get("gmm", M=4, N=4, K=9)
    sch = tt.Schedule(f)
    *_, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(k1, k0)
    g0, _ = sch.split(sch.fuse(k1, k0), [None, 2])
    _raises(sch, lambda: sch.rfactor(g0),
            "writes partial sum k_1_k_0_f_0 = 4 but not at its first reduction point")


def test_compute_at_keeps_the_guard_of_an_rfactored_partial_block():
    """Found by the random-schedule property test: LNM's row sum split by 3 (4 x 3 slots
    for 10 columns) and rfactored; computing the partial block at the final block's row
    loop rebuilt its loops without the guard ``j_0 * 3 + j_1 < 10`` and read past the row."""
    f = tt.workloads.get("lnm", M=4, N=10)
    sch = tt.Schedule(f)
    rs = sch.get_block("rowsum")
    sch.split(sch.get_loops(rs)[1], [None, 3])
    sch.rfactor(sch.get_loops(rs)[1], 0)
    sch.compute_at(sch.get_block("rowsum_rf"), sch.get_loops(sch.get_block("rowsum"))[0])
    assert "where(j_0 * 3 + j_1 < 10)" in str(sch.func)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_decompose_reduction_keeps_a_repeated_reduction_restarting():
    """A reduction computed at a consumer loop it does not depend on (LNM's sqsum under
    the output's column loop n) is redone for every n; its init must stay inside n.
    Found by the random-schedule property test: the init had moved outside n and the
    sums came out 10x too large."""
    f = tt.workloads.get("lnm", M=4, N=10)
    sch = tt.Schedule(f)
    sq = sch.get_block("sqsum")
    sch.compute_at(sq, sch.get_loops(sch.get_block("Y"))[1])
    i, n, _, j2 = sch.get_loops(sq)
    _raises(sch, lambda: sch.decompose_reduction(sq, i),
            r"loop n \(extent 10\) encloses sqsum but moves none of its axes")
    sch.decompose_reduction(sq, j2)  # inside n: restarted for every n
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_decompose_reduction_sees_a_repeat_through_a_fused_loop():
    """The same repeat when the consumer's loops are fused: sqsum's row is
    ``i_n // 10``, so the fused loop does move an axis, but ten of its iterations reach
    each row. Found by the random-schedule property test after the check above."""
    f = tt.workloads.get("lnm", M=4, N=10)
    sch = tt.Schedule(f)
    y = sch.get_block("Y")
    sch.compute_at(sch.get_block("sqsum"), sch.get_loops(y)[1])
    sq = sch.get_block("sqsum")
    sch.fuse(*sch.get_loops(sq)[:2])
    fused, _, j2 = sch.get_loops(sq)
    _raises(sch, lambda: sch.decompose_reduction(sq, fused),
            r"from i_n_f inward reach some point of sqsum's axes more than once")
    sch.decompose_reduction(sq, j2)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_sampling_decision_errors():
    sch = _sch()
    i, _, _ = sch.get_loops(sch.get_block("C"))
    _raises(sch, lambda: sch.sample_perfect_tile(i, 2, decision=[5, 7]),
            "product is the loop extent 32")
    _raises(sch, lambda: sch.sample_perfect_tile(i, 2, 4, decision=[4, 8]),
            "exceeds max_innermost_factor 4")
    _raises(sch, lambda: sch.sample_categorical([1, 2], [0.5, 0.5], decision=3), r"\[0, 2\)")


def test_rv_from_another_schedule():
    a, b = _sch(), _sch()
    blk = a.get_block("C")
    _raises(b, lambda: b.get_loops(blk), "expected a BlockRV of this schedule")


def test_reverse_compute_at_refuses_a_strided_tile():
    # Under ji the tile's columns are jo * 8 + ji: every 8th one. The write-back's box
    # would also copy the columns other iterations own.
    sch = tt.Schedule(tt.workloads.get("gmm", M=16, N=16, K=8))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 8])
    sch.reorder(ji, i, jo, k)
    wb = sch.cache_write(c, 0, "local")
    _raises(sch, lambda: sch.reverse_compute_at(wb, ji), r"writes C_local with holes")
    _raises(sch, lambda: sch.reverse_compute_at(wb, i), r"writes C_local with holes")
    sch.reorder(jo, i, ji)  # now under i the tile is 8 contiguous columns
    sch.reverse_compute_at(wb, i)
    ins = random_inputs(sch.func)
    check_close(tt.build(sch)(*ins), evaluate(sch.func, ins)[0])


@pytest.mark.parametrize("name, shape", [("c2d", dict(C=4, K=8, H=6, W=6)),
                                         ("smx", dict(M=4, N=24)), ("lnm", dict(M=4, N=24))])
def test_can_compute_at_agrees_with_compute_at(name, shape):
    """The cheap legality check used to sample compute locations says yes exactly where
    compute_at succeeds, for every block and loop of sampled programs."""
    from tensortune.schedule.compute_location import can_compute_at, compute_at
    from tensortune.schedule.tree import iter_blocks
    from tensortune.space import PostOrderApply, sample

    f = tt.workloads.get(name, **shape)
    gen = PostOrderApply.default(tt.Target.host())
    checked = 0
    for seed, space in enumerate(gen.generate(f) * 2):
        sch = sample(f, space, seed, gen.postprocs)
        if sch is None:
            continue
        func = sch.func
        blocks = [b.name for b, _ in iter_blocks(func.body)]
        loops = {lp.var for _, path in iter_blocks(func.body) for lp in path}
        for b in blocks:
            for v in loops:
                try:
                    compute_at(func, b, v)
                    ok = True
                except tt.ScheduleError:
                    ok = False
                assert can_compute_at(func, b, v) == ok, (b, v.name)
                checked += ok
    assert checked > 0


def test_compute_location_outside_a_loop():
    """``outside`` keeps only the root and loops that enclose the given loop of the
    consumer; a loop that does not enclose the consumer is refused by name."""
    sch = _sch()
    c = sch.get_block("C")
    pack = sch.cache_read(c, 1, "global")             # B, read by C at [k, j]
    i, j, k = sch.get_loops(c)
    sch.reorder(j, k, i)
    every = sch.compute_location_candidates(pack)
    assert len(every) == 3                              # root, j, k: both move B's reads
    assert sch.compute_location_candidates(pack, k) == every[:2]    # root, j
    assert sch.compute_location_candidates(pack, j) == every[:1]    # root only
    loc = sch.sample_compute_location(pack, k, decision=1)
    sch.compute_at(pack, loc)
    again = _sch()                                      # the trace replays the same
    tt.Trace.from_json(sch.trace.as_json()).apply(again)
    assert str(again.func) == str(sch.func)
    d = _sch()
    d_pack = d.cache_read(d.get_block("C"), 1, "global")
    lone = d.get_loops(d_pack)[0]                       # a loop of the copy, not of C
    _raises(d, lambda: d.sample_compute_location(d_pack, lone), "does not enclose block C")


def _packed_reordered():
    """A schedule whose packed read of C's second input has three compute locations."""
    sch = _sch()
    pack = sch.cache_read(sch.get_block("C"), 1, "global")
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(j, k, i)
    return sch, pack


def test_a_replayed_compute_location_checks_only_up_to_its_index():
    """A decision given, the candidates are checked only up to its index: each index
    picks what the whole list holds there, and an index past the end is refused with the
    whole list's length."""
    from tensortune.schedule import LoopRV

    sch, pack = _packed_reordered()
    every = sch.compute_location_candidates(pack)
    assert len(every) == 3
    for n in range(3):
        assert sch.compute_location_candidates(pack, upto=n) == every[:n + 1]
        s, s_pack = _packed_reordered()
        loc = s._get(s.sample_compute_location(s_pack, decision=n), LoopRV, "t")
        want = every[n]
        assert (None if loc is None else loc.name) == (None if want is None else want.name)
    s, s_pack = _packed_reordered()
    _raises(s, lambda: s.sample_compute_location(s_pack, decision=3), r"\[0, 3\)")


@pytest.mark.parametrize("n,ok", [(4, True), (5, False), (4, True), (3, True), (5, False)])
def test_transform_layout_refuses_a_map_that_is_not_injective(n, ok):
    """``a0 * 4 + a1`` packs rows of at most 4 without overlap. The same map text is asked
    of other shapes in turn (the injectivity check is kept per map text and shape): each
    shape gets its own answer, and a refused map leaves the program unchanged."""
    func = tt.workloads.get("gmm", M=3, N=n, K=2)
    sch = tt.Schedule(func)
    blk = sch.get_block("C")
    sch.cache_write(blk, 0, "local")
    fn = lambda: sch.transform_layout(blk, "C_local", "lambda a0, a1: (a0 * 4 + a1,)")  # noqa: E731
    if not ok:
        _raises(sch, fn, r"transform_layout\(C_local\): the index map sends two elements "
                         r"of C_local to the same place")
        return
    fn()
    x = random_inputs(sch.func)
    check_close(tt.build(sch)(*x), evaluate(func, x)[0])
