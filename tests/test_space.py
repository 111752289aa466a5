"""Design-space rules on small workloads: the sketches they produce."""

from drawing import jobs_choice

import tensortune as tt
from tensortune import te
from tensortune.space import (
    AddRFactor,
    AutoInline,
    MultiLevelTiling,
    ParallelVectorizeUnroll,
    PostOrderApply,
    RandomComputeLocation,
    sample,
)

TARGET = tt.Target.host()


def _kinds(trace):
    return [i.kind for i in trace.insts]


def test_multi_level_tiling_sketch_of_gmm():
    f = tt.workloads.get("gmm", small=True)
    gen = PostOrderApply([MultiLevelTiling()])
    space = gen.generate(f)[0]  # j in the lanes, then i (tests/test_layout.py)
    kinds = _kinds(space)
    # i and j in 4 tiles (i's innermost need not divide it), k in 2
    assert kinds.count("sample_perfect_tile") == 2 and kinds.count("sample_tile") == 1
    assert {"cache_write", "reverse_compute_at", "decompose_reduction"} <= set(kinds)
    sch = sample(f, space, seed=4)
    text = str(sch.func)
    for piece in ("C_local", 'block("C_init"', "vectorized(", "unroll("):
        assert piece in text
    # S S R S R S: the k loops sit between the spatial tile levels.
    loops = [ln.strip().split()[1] for ln in text.splitlines() if ln.strip().startswith("for ")
             and "C_local" not in ln]
    assert loops.index("k_0") > loops.index("j_1") and loops.index("k_1") > loops.index("j_2")


def test_epilogue_is_fused_into_the_tile():
    f = tt.workloads.get("dense", small=True)
    space = PostOrderApply([MultiLevelTiling()]).generate(f)[0]
    assert "reverse_compute_inline" in _kinds(space)
    sch = sample(f, space, seed=1)
    assert "Y[" in str(sch.func) and 'block("Y"' not in str(sch.func)


def test_add_rfactor_forks_the_space():
    f = tt.workloads.get("nrm", b=2, M=8, N=64)
    spaces = PostOrderApply([AddRFactor()]).generate(f)
    assert len(spaces) == 2 and "rfactor" in _kinds(spaces[1])
    text = str(sample(f, spaces[1], seed=0).func)
    assert "sumsq_rf = alloc(float32[2, " in text  # the partial axis is innermost


def test_auto_inline_and_random_compute_location():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    f = te.create_func([A, C])
    (space,) = PostOrderApply([AutoInline()]).generate(f)
    assert 'block("B"' not in str(sample(f, space, 0).func)
    conv = tt.workloads.get("c2d", small=True)
    (space,) = PostOrderApply([RandomComputeLocation()]).generate(conv)
    places = set()
    for seed in range(12):
        text = str(sample(conv, space, seed).func)
        places.add(text.index('block("pad"') > text.index("for k in"))
    assert places == {True, False}  # sometimes at the root, sometimes inside conv's loops


def test_default_space_covers_every_suite_workload():
    gen = PostOrderApply.default(TARGET)
    for name in tt.workloads.names():
        f = tt.workloads.get(name, small=True)
        spaces = gen.generate(f)
        assert spaces, name
        # Some draws are rejected (a register tile over the limit), so several seeds.
        assert any(sample(f, s, seed, gen.postprocs) is not None for s in spaces
                   for seed in range(12)), name


def test_row_reductions_can_join_their_consumers_row_loop():
    # Softmax: rowmax and rowsum (and their rfactor partials) may be computed inside Y's
    # row loop; never inside its column loop, which would recompute each row N times.
    f = tt.workloads.get("softmax", M=8, N=64)
    gen = PostOrderApply.default(TARGET)
    spaces = gen.generate(f)
    fused, seen = False, set()
    for space in spaces:
        for seed in range(16):
            sch = sample(f, space, seed, gen.postprocs)
            assert sch is not None
            text = str(sch.func)
            top = [ln for ln in text.splitlines() if ln.startswith("    for ")]
            seen.add(len(top))
            fused |= len(top) == 1 and "rowmax" in text
            # Y's column loop comes last and holds no row stage.
            if "for n in" in text:  # (else fused with the row loop for parallelism)
                assert 'block("row' not in text[text.index("for n in"):]
    assert fused and len(seen) > 1  # one row loop for all stages, and other placements


def test_register_tile_is_sampled_within_the_budget():
    """The spatial levels inside the first reduction level form the register tile: along
    the vector axis at most 4 vectors, along each other axis at most max_tile_factor."""
    import math

    f = tt.workloads.get("gmm", M=256, N=256, K=64)
    rule = MultiLevelTiling(lanes=8, max_tile_factor=8)
    space = PostOrderApply([rule]).generate(f)[0]
    tiles = [(i, ins) for i, ins in enumerate(space.insts)
             if ins.kind in ("sample_perfect_tile", "sample_tile") and ins.attr("inner") == 2]
    assert sorted(ins.attr("max_innermost_factor") for _, ins in tiles) == [8, 32]
    for seed in range(20):
        sch = sample(f, space, seed=seed)
        for i, ins in tiles:
            d = sch.trace.decisions[i]
            assert d[2] * d[3] <= ins.attr("max_innermost_factor")
            assert math.prod(d[:3]) == -(-256 // d[3])  # the outer levels tile the rest


def test_an_axis_every_input_steps_with_stays_out_of_the_register_tile():
    """BMM's batch axis indexes both inputs: in the register tile it would add
    accumulators and no reuse, so its inner levels are 1. Its rows keep the budget, and
    so does a grouped conv's channel axis, whose input moves only with ``k // group``."""
    import numpy as np

    from tensortune.reference import check_close, evaluate, random_inputs

    def inner_tiles(f):
        space = PostOrderApply([MultiLevelTiling(lanes=8, max_tile_factor=8)]).generate(f)[0]
        return space, [(i, ins) for i, ins in enumerate(space.insts)
                       if ins.kind == "sample_tile" and ins.attr("inner") == 2]

    f = tt.workloads.get("bmm", b=6, M=24, N=16, K=8)
    space, tiles = inner_tiles(f)
    assert [ins.attr("max_innermost_factor") for _, ins in tiles] == [1, 8]   # batch, rows
    batch = tiles[0][0]
    inputs = random_inputs(f, seed=2)
    want = evaluate(f, inputs)[0]
    for seed in range(4):
        sch = sample(f, space, seed=seed)
        assert sch is not None and sch.trace.decisions[batch][2:] == [1, 1]
        check_close(tt.build(sch)(*[np.copy(a) for a in inputs]), want)
    grouped = tt.workloads.get("grp", small=True)
    assert all(ins.attr("max_innermost_factor") == 8 for _, ins in inner_tiles(grouped)[1])


def test_a_depthwise_conv_vectorizes_whole_vectors_and_stays_exact():
    """DEP's lanes run along its 56-wide rows: every draw vectorizes 8 of them (AVX2) or a
    multiple, never 28 (which ran as 4-wide chunks and was the best the search found),
    and the programs compute the conv."""
    import numpy as np

    from tensortune.reference import check_close, evaluate, random_inputs

    f = tt.workloads.get("dep", C=4, H=6, W=56)
    rule = MultiLevelTiling(lanes=8, max_tile_factor=8)
    space = PostOrderApply([AutoInline(), rule]).generate(f)[0]
    vec = [i for i, ins in enumerate(space.insts) if ins.attr("multiple") == 8]
    assert len(vec) == 1
    inputs = random_inputs(f, seed=1)
    want = evaluate(f, inputs)[0]
    for seed in range(6):
        sch = sample(f, space, seed=seed)
        assert sch is not None and sch.trace.decisions[vec[0]][-1] == 8
        check_close(tt.build(sch)(*[np.copy(a) for a in inputs]), want)


def test_matmul_operand_in_the_lanes_is_packed_into_panels():
    """B feeds the lanes and is reused across rows: a copy of it is placed at a sampled
    loop; at the tile walk over columns it is a [K, tile] panel, and results stay exact."""
    import numpy as np

    from tensortune.codegen import lower
    from tensortune.reference import check_close, random_inputs

    f = tt.workloads.get("gmm", M=32, N=64, K=16)
    space = PostOrderApply([MultiLevelTiling(lanes=8)]).generate(f)[0]
    kinds = _kinds(space)
    assert kinds.count("cache_read") == 1 and "sample_compute_location" in kinds
    shapes = set()
    for seed in range(12):
        sch = sample(f, space, seed=seed)
        # Lowering allocates the copy at its loop, shrunk to the region used there.
        alloc = [ln for ln in str(lower(sch.func)).splitlines() if "B_global = alloc" in ln]
        assert alloc  # one copy per iteration of the sampled loop (unrolled loops repeat it)
        shapes |= {ln.split("alloc(")[1].split(")")[0] for ln in alloc}
        # never inside the reduction: the copy would be redone at every step of it
        text = str(sch.func)
        assert text.index('block("B_global"') < text.index("for k_0 in")
        a, b = random_inputs(f)
        check_close(tt.build(sch)(a, b), a.astype(np.float64) @ b)
    assert len(shapes) > 1  # the location (and so the panel) varies with the draw


def test_nest_led_by_a_packed_copy_still_runs_in_parallel():
    """A panel copy placed at the column tile walk does not move with the row loop
    around it; the nest is then parallelised through the matmul's own loops."""
    import numpy as np

    from tensortune.reference import check_close, random_inputs

    f = tt.workloads.get("gmm", M=32, N=64, K=16)
    gen = PostOrderApply.default(TARGET)
    space = gen.generate(f)[0]
    at = {k: [i for i, ins in enumerate(space.insts) if ins.kind == k]
          for k in ("sample_tile", "sample_perfect_tile", "sample_compute_location")}
    dec = {at["sample_tile"][0]: [1, 8, 1, 4], at["sample_perfect_tile"][0]: [1, 16],
           at["sample_perfect_tile"][1]: [4, 1, 1, 16], at["sample_compute_location"][0]: 1}
    # Jobs decision 1: one job per core (this function is small enough that 0 is none).
    sch = sample(f, space, 0, gen.postprocs, dec, [[1, 0]])
    assert sch is not None
    text = str(sch.func)
    assert "parallel(" in text and text.index("parallel(") < text.index("B_global[")
    a, b = random_inputs(f)
    check_close(tt.build(sch)(a, b), a.astype(np.float64) @ b)


def test_a_small_function_may_run_on_one_core():
    """Below ``SMALL`` iterations the jobs decision offers none (one core) besides one
    and four per core; each choice computes the reference. A suite-sized function keeps
    one, four and sixteen per core."""
    from tensortune.reference import check_close, evaluate, random_inputs
    from tensortune.space.parallel_vectorize_unroll import SMALL

    x = te.placeholder((64, 64), name="X")
    y = te.compute((64, 64), lambda i, j: x[i, j] * 2.0 + 1.0, name="Y")
    f = te.create_func([x, y], name="scale")
    assert 64 * 64 <= SMALL
    gen = PostOrderApply.default(TARGET)
    space = gen.generate(f)[0]
    ins = random_inputs(f)
    kinds = set()
    for jobs in range(3):
        sch = sample(f, space, 0, gen.postprocs, {}, [[jobs, 0]])
        assert sch is not None
        choice = sch.trace.insts[jobs_choice(sch.trace)]
        assert choice.attr("candidates") == [0, TARGET.cores, 4 * TARGET.cores]
        kinds.add("parallel(" in str(sch.func))
        check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])
    assert kinds == {True, False}       # one core for jobs 0, parallel loops otherwise
    big = tt.workloads.get("gmm")
    sch = sample(big, gen.generate(big)[0], 0, gen.postprocs)
    assert sch is not None
    choice = sch.trace.insts[jobs_choice(sch.trace)]
    assert choice.attr("candidates") == [TARGET.cores, 4 * TARGET.cores, 16 * TARGET.cores]


def test_add_rfactor_forks_a_tail_where_no_divisor_is_whole_vectors():
    """A row of 1001 (7 x 11 x 13): plain, a sampled divisor, and whole vectors with a
    guarded tail; a row of 1024 only the first two. Draws of the tail's spaces (partials
    a whole vector wide, which no divisor of 1001 is) are exact."""
    from tensortune.reference import check_close, evaluate, random_inputs

    lanes = TARGET.lanes("float32")
    for n, forks in ((1001, 3), (1024, 2)):
        sch = tt.Schedule(tt.workloads.get("smx", M=4, N=n))
        assert len(AddRFactor(lanes=lanes).apply(sch, sch.get_block("rowmax"))) == forks
    f = tt.workloads.get("smx", M=8, N=1001)
    gen = PostOrderApply.default(TARGET)
    x = random_inputs(f)
    want = evaluate(f, x)[0]
    checked = 0
    for space in gen.generate(f):
        for seed in range(2):
            s = sample(f, space, seed, gen.postprocs)
            if s is not None and f"_rf = alloc(float32[8, {lanes}]" in str(s.func):
                check_close(tt.build(s)(*[a.copy() for a in x]), want)
                checked += 1
    assert checked >= 2


def test_a_long_row_is_vectorized_in_whole_vectors_of_the_target():
    """A row of 1000 on 16 lanes: 1000 has the chunk 8 but not 16, and 8-lane chunks ran
    a softmax over such rows at half the vector width (152.9 against 101.7 us on the
    AVX-512 host); the whole row is vectorized (whole vectors and a tail) instead. On 8
    lanes the chunk of 8 is whole vectors and stays."""
    from tensortune.reference import check_close, evaluate, random_inputs
    from tensortune.tir.stmt import ForKind

    x = te.placeholder((6, 1000), name="X")
    y = te.compute((6, 1000), lambda i, j: te.exp(x[i, j]) * 0.5, name="Y")
    f = te.create_func([x, y], name="row_exp")
    ins = random_inputs(f)
    for lanes, width in ((16, 1000), (8, 8)):
        sch = tt.Schedule(f)
        ParallelVectorizeUnroll(cores=2, lanes=lanes).apply_all(sch, [1, 0])   # 2 jobs
        inner = sch.get(sch.get_loops(sch.get_block("Y"))[-1])
        assert inner.kind == ForKind.VECTORIZED and inner.extent == width
        check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_many_small_reductions_fork_the_space_only_up_to_a_cap(monkeypatch):
    """Five whole-array sums, each forked three ways by AddRFactor: their spaces multiply
    (3^5 uncapped; a top-k's stages once made thousands) until ``MAX_SPACES`` is
    reached, and after it each rule keeps its first schedule."""
    from tensortune.space import space_generator

    x = te.placeholder((512,), name="x")

    def total(j: int):
        r = te.reduce_axis(512, f"r{j}")
        return te.compute((1,), lambda i: te.sum(x[r] * float(j + 1), axis=r), name=f"s{j}")
    sums = [total(j) for j in range(5)]
    y = te.compute((1,), lambda i: sum((s[i] for s in sums[1:]), sums[0][i]), name="y")
    f = te.create_func([x, y], name="sums")
    gen = PostOrderApply.default(TARGET)
    assert space_generator.MAX_SPACES == 64
    assert len(gen.generate(f)) == 3 ** 4         # 81 >= 64 after four: the fifth keeps one
    monkeypatch.setattr(space_generator, "MAX_SPACES", 4)
    assert len(gen.generate(f)) == 3 ** 2
    monkeypatch.setattr(space_generator, "MAX_SPACES", 10**9)
    assert len(gen.generate(f)) == 3 ** 5
