"""The vector-axis choice of MultiLevelTiling: which axes qualify, the layouts each needs,
and that every design space it forks compiles to correct code."""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.codegen import lower
from tensortune.codegen.c import emit_c
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.schedule.tree import find_block, iter_blocks
from tensortune.space import MultiLevelTiling, PostOrderApply, sample
from tensortune.space.layout import layout_choices, permutation_map, set_aliased, strip_map
from tensortune.tir.stmt import Buffer, ForKind

TARGET = tt.Target.host()
GEN = PostOrderApply.default(TARGET)
FUNCS = {"c2d": tt.workloads.get("c2d", small=True),
         "dense": tt.workloads.get("dense", small=True),
         "gmm": tt.workloads.get("gmm", M=24, N=40, K=12),
         "c1d": tt.workloads.get("c1d", small=True),
         "grp": tt.workloads.get("grp", C=32, K=32, H=10, W=10),
         "tbg": tt.workloads.get("tbg", small=True),
         # rows of 128 floats: B's panel (space 0) and X's transposed copy (space 1)
         # are cut into vector strips
         "gmm_strips": tt.workloads.get("gmm", M=12, N=128, K=16),
         "dense_strips": tt.workloads.get("dense", M=128, K=8, N=16),
         # output rows 4 KiB apart: space 1's tile writes through a strip copy
         "dense_staged": tt.workloads.get("dense", M=32, K=8, N=1024),
         "gmm_staged": tt.workloads.get("gmm", M=32, N=1024, K=8)}
SPACES = {n: GEN.generate(f) for n, f in FUNCS.items()}


def _choices(name: str, block: str, **shape):
    f = tt.workloads.get(name, small=not shape, **shape)
    blk = next(b for b, _ in iter_blocks(f.body) if b.name == block)
    return [(c.var.name, c.out_dim, [(b.name, d) for _, b, d in c.packs])
            + ((c.group,) if c.group else ()) for c in layout_choices(blk)]


def test_axes_that_can_fill_the_lanes():
    # conv2d NCHW: the width as it is, or the output channels with OIHW weights packed so
    # that O is innermost; the input x is a broadcast then (one group: k // K is 0).
    assert _choices("c2d", "conv") == [("vz", 3, []), ("vk", 1, [("w", 0)])]
    # X W^T: W must be packed even for the natural axis, X for the other.
    assert _choices("dense", "matmul") == [("vj", 1, [("W", 0)]), ("vi", 0, [("X", 0)])]
    # Batched: the batch axis moves A too, but each of A's elements is still read by
    # every column j, so packing it pays.
    assert _choices("bmm", "C") == [("vj", 2, []), ("vi", 1, [("A", 1)])]
    # Attention scores: K[j, h, d] is read once per query position, so it is packed
    # with j last per head; the gather of 16 rows per vector it replaced ran at 80 GFLOP/s.
    assert _choices("tbg", "C") == [("vj", 2, [("K", 0)]), ("vi", 1, [("Q", 0)])]
    # Depthwise: the channel moves the input too, and no other axis re-reads it.
    assert [c[0] for c in _choices("dep", "conv")] == ["vz"]
    # Grouped: k // 8 * 8 + rc is not affine in k, but within a group of 8 output
    # channels the input channel is fixed: the lanes take k's part inside a group.
    assert _choices("grp", "conv", C=32, K=32, H=10, W=10) == [
        ("vz", 3, []), ("vk", 1, [("w", 0)], 8)]
    assert [c[0] for c in _choices("grp", "conv")] == ["vz"]  # 2 per group: too few


def test_vector_width_drops_choices_that_copy_for_part_of_a_vector():
    def names(name: str, block: str, lanes: int | None) -> list[str]:
        f = tt.workloads.get(name)
        blk = next(b for b, _ in iter_blocks(f.body) if b.name == block)
        return [c.var.name for c in layout_choices(blk, lanes)]

    # CONVLAYER's rows (28) in the lanes would copy the padded input to do what its
    # columns (28) do in place; C3D's depth (8) is one whole vector, its columns are not.
    assert names("convlayer", "conv", None) == ["vz", "vy", "vk"]
    assert names("convlayer", "conv", 8) == ["vz", "vk"]
    assert names("c3d", "conv", 8) == ["vz", "vd", "vk"]
    # Attention's 12 heads would copy both Q and K for a vector and a half.
    assert names("tbg", "C", None) == ["vj", "vi", "vn"]
    assert names("tbg", "C", 8) == ["vj", "vi"]
    # A group of 16 output channels is two whole vectors.
    assert names("grp", "conv", 8) == ["vz", "vk"]


def test_permutation_map_moves_one_dimension_last():
    assert permutation_map(4, 1) == "lambda a0, a1, a2, a3: (a0, a2, a3, a1)"
    assert permutation_map(2, 1) == "lambda a0, a1: (a0, a1)"


def test_strip_map_cuts_one_dimension_into_vector_strips():
    assert strip_map(2, 1, 8) == "lambda a0, a1: (a1 // 8, a0, a1 % 8)"
    assert strip_map(3, 0, 8) == "lambda a0, a1, a2: (a0 // 8, a1, a2, a0 % 8)"


def test_long_packed_rows_are_cut_into_vector_strips():
    """Copies whose rows are 512 bytes or longer are laid out in lane-wide strips (a
    matmul's B panel, DENSE's transposed X); short rows (a conv's 8 weight channels) keep
    the plain layout. The hypothesis test below compiles these spaces and checks them."""
    gen = PostOrderApply([MultiLevelTiling(lanes=8)])

    def maps(name: str) -> list[list[tuple[str, str]]]:
        return [[i.inputs[1:] for i in sp.insts if i.kind == "transform_layout"]
                for sp in gen.generate(FUNCS[name])]

    assert maps("gmm_strips")[0] == [("B_global", "lambda a0, a1: (a1 // 8, a0, a1 % 8)")]
    assert maps("dense_strips")[1][0] == ("X_global", "lambda a0, a1: (a0 // 8, a1, a0 % 8)")
    assert maps("gmm")[0] == []  # 40 columns: 160-byte rows
    assert maps("c2d")[1][0] == ("w_global", "lambda a0, a1, a2, a3: (a1, a2, a3, a0)")
    f = FUNCS["gmm_strips"]
    sch = sample(f, gen.generate(f)[0], seed=3)
    assert sch is not None and "B_global[v1 // 8, v0, v1 % 8]" in str(sch.func)
    # and the strip programs compute what the reference does (not left to the sampled
    # hypothesis test below, which need not draw these two workloads)
    for name, space in (("gmm_strips", 0), ("dense_strips", 1)):
        f = FUNCS[name]
        ins = random_inputs(f)
        for seed in range(3):
            sch = sample(f, SPACES[name][space], seed, GEN.postprocs)
            assert sch is not None and re.search(r"_global\[\w+ // \d+, ", str(sch.func))
            check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_rows_a_multiple_of_an_l1_way_apart_are_set_aliased():
    def buf(*shape: int) -> Buffer:
        return Buffer("Y", shape, "float32", "global")

    assert set_aliased(buf(128, 3072), 0, 16)          # DENSE: rows 12 KiB apart
    assert set_aliased(buf(1024, 1024), 0, 16)         # GMM: 4 KiB
    assert not set_aliased(buf(1, 64, 56, 56), 1, 16)  # C2D's channels: 12544 bytes
    assert not set_aliased(buf(128, 3072), 1, 16)      # the last axis is contiguous
    assert not set_aliased(buf(4, 1032), 0, 8)         # 4128 bytes: rows spread over sets
    assert set_aliased(buf(8, 128, 16), 0, 16)         # 8 KiB, strips of 16
    assert not set_aliased(buf(8, 128, 8), 0, 16)      # 4 KiB, but not strips of 16


def test_tile_rows_sharing_an_l1_set_are_written_through_strips():
    """DENSE with the rows in the lanes writes its tile into a copy laid out in strips;
    a nest under the outer tile loop then adds the bias, applies the ReLU and stores that
    tile's strips to the output in vectors, so the copy is one outer tile's strips, on
    the stack. The columns' space, and a conv's channels (rows 12544 bytes apart), write
    the output from the tile."""
    gen = PostOrderApply([MultiLevelTiling(lanes=8)])
    f = FUNCS["dense_staged"]
    spaces = gen.generate(f)
    maps = [[i.inputs[1:] for i in sp.insts if i.kind == "transform_layout"] for sp in spaces]
    assert ("matmul_global", "lambda a0, a1: (a1 // 8, a0, a1 % 8)") in maps[1]
    assert not any(m[0] == "matmul_global" for m in maps[0])
    assert not any(m[0].startswith("conv_") and "//" in m[1]
                   for sp in gen.generate(tt.workloads.get("c2d")) for m in
                   [i.inputs[1:] for i in sp.insts if i.kind == "transform_layout"])
    sch = next(s for s in (sample(f, spaces[1], seed, GEN.postprocs) for seed in range(20))
               if s is not None)
    text = str(sch.func)
    # the tile stores plain sums; the copy is vectorized along its columns, contiguous
    # on both sides, with the fused epilogue, inside the tile's nest
    assert re.search(r"matmul_global\[\w+ // 8, \w+, \w+ % 8\] = matmul_local\[", text)
    assert re.search(r"for \w+ in vectorized\(\d+\):\n\s+with block\(\"matmul_global\"", text)
    nests = re.split(r"\n(?=    for )", text)   # the root loop nests
    copy_nest = next(n for n in nests if 'with block("matmul_global"' in n)
    assert 'with block("matmul_local"' in copy_nest
    whole = 32 * 1024
    sizes = [re.search(r"float matmul_global\[(\d+)\]", emit_c(lower(s.func), TARGET))
             for s in (sample(f, spaces[1], seed, GEN.postprocs) for seed in range(8))
             if s is not None]
    assert any(m is not None and int(m.group(1)) < whole for m in sizes)
    assert re.search(r"Y\[(\w+), (\w+)\] = max\(matmul_global\[\2 // 8, \1, \2 % 8\] "
                     r"\+ bias\[\2\], 0\.0\)", text)
    # and it computes what the reference does, with an epilogue (DENSE) and without (GMM:
    # the tile's block writes the output itself)
    for name, buf in (("dense_staged", "matmul_global"), ("gmm_staged", "C_global")):
        f = FUNCS[name]
        ins = random_inputs(f)
        kept = 0
        for seed in range(6):
            sch = sample(f, SPACES[name][1], seed, GEN.postprocs)
            if sch is not None:
                kept += 1
                assert f"{buf}[" in str(sch.func)
                check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])
        assert kept, name
    # The copy runs in parallel, also under outer tile loops of one iteration (both
    # tile draws with a first factor of 1: the tile walk runs in parallel below them).
    f = FUNCS["dense_staged"]
    ins = random_inputs(f)
    space = SPACES["dense_staged"][1]
    tiles = [i for i, inst in enumerate(space.insts) if inst.kind.startswith("sample_")
             and "tile" in inst.kind and dict(inst.attrs).get("n") == 4]
    fixed = {tiles[0]: [1, 147, 1, 7], tiles[1]: [1, 1, 1, 32]}
    for seed in range(4):
        sch = sample(f, space, seed, GEN.postprocs, decisions=fixed)
        assert sch is not None
        path = find_block(sch.func, "matmul_global")[1]
        assert path[0].extent == 1
        assert any(lp.kind == ForKind.PARALLEL for lp in path), seed
        check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_a_pack_the_outermost_tile_loop_indexes_is_made_inside_it():
    """Attention's K (and Q) per head: the head loop is outermost, so each job packs its
    own heads inside it; a conv's weights and DENSE's X do not move with the outermost
    loop and are packed in a root nest of their own."""
    def root_loop_of(f, spaces, space: int, buf: str, at: int | None = None
                     ) -> tuple[str, object]:
        fixed = {} if at is None else {_pack_location(spaces[space]): at}
        sch = next(s for s in (sample(f, spaces[space], seed, GEN.postprocs, fixed)
                               for seed in range(20)) if s is not None)
        text = str(sch.func)
        before = text[:text.index(f'with block("{buf}"')]
        return re.findall(r"\n    for (\w+) in ", before)[-1], sch

    tbg = FUNCS["tbg"]
    ins = random_inputs(tbg)
    for space, buf in ((0, "K_global"), (1, "Q_global")):
        loop, sch = root_loop_of(tbg, SPACES["tbg"], space, buf)
        assert loop.startswith("n_0"), loop  # the head loop's first tile
        check_close(tt.build(sch)(*ins), evaluate(tbg, ins)[0])
    # A head tile of 1 leaves the head loop alone at the top, with the pack inside it;
    # the nest below still runs in parallel.
    big = tt.workloads.get("tbg", s=64, h=4, d=16)
    space = GEN.generate(big)[0]
    heads = next(i for i, x in enumerate(space.insts) if x.attr("extent") == 4)
    sch = sample(big, space, 0, GEN.postprocs, {heads: [1, 4, 1, 1]}, [[0, 0]])
    assert sch is not None
    text = str(sch.func)
    assert re.search(r"\n    for n_0 in range\(1\)", text) and " in parallel(" in text
    ins = random_inputs(big)
    check_close(tt.build(sch)(*ins), evaluate(big, ins)[0])
    # Placed at the root (location 0), or inside the tile loop that moves them (1)
    c2d = tt.workloads.get("c2d", C=16, K=32, H=8, W=8)
    for f, spaces, buf, loop in ((FUNCS["dense"], SPACES["dense"], "X_global", "j_0"),
                                 (c2d, GEN.generate(c2d), "w_global", "k_0")):
        assert root_loop_of(f, spaces, 1, buf, at=0)[0].startswith("ax")
        assert loop in root_loop_of(f, spaces, 1, buf, at=1)[0]   # or a fusion with it
        # no third candidate: the outer loops that do not move the pack repeat it
        assert all(sample(f, spaces[1], seed, GEN.postprocs,
                          {_pack_location(spaces[1]): 2}) is None for seed in range(3))


def _pack_location(space) -> int:
    """The index of the sampled location of a space's packed input (not its pad's)."""
    made = {str(i.outputs[0]) for i in space.insts if i.kind == "cache_read"}
    return next(k for k, i in enumerate(space.insts)
                if i.kind == "sample_compute_location" and str(i.inputs[0]) in made)


def test_channel_space_packs_weights_and_lays_the_tile_channel_last():
    f = FUNCS["c2d"]
    spaces = PostOrderApply([MultiLevelTiling(lanes=8)]).generate(f)
    assert len(spaces) == 2
    maps = [i.inputs[1:] for i in spaces[1].insts if i.kind == "transform_layout"]
    assert maps == [("w_global", "lambda a0, a1, a2, a3: (a1, a2, a3, a0)"),
                    ("conv_local", "lambda a0, a1, a2, a3: (a0, a2, a3, a1)")]
    text = str(sample(f, spaces[1], seed=2).func)
    # The innermost loop of the FMA nest is over output channels, vectorized.
    fma = [ln for ln in text.splitlines() if "conv_local[" in ln and "+" in ln][0]
    assert "w_global[" in fma
    loops = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("for ")]
    inner = [ln for ln in loops if "vectorized" in ln]
    assert any(ln.split()[1].startswith("k_") for ln in inner)


@given(seed=st.integers(0, 10_000))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_pack_made_inside_the_outer_tile_loops_is_each_jobs_own(seed):
    """The channel space of a convolution samples where its weights are packed: at the
    root, or inside the outermost tile loops, at the one that moves the output channel:
    each parallel job packs the channels it reads into a buffer of its own, allocated
    inside the parallel loop; random draws compute the reference."""
    f = tt.workloads.get("c2d", C=16, K=32, H=8, W=8)
    spaces = GEN.generate(f)
    assert len(spaces) == 2 and "w_global" in str(spaces[1].insts)
    local = spaces[1]
    fixed = {_pack_location(local): 1}
    sch = sample(f, local, seed, GEN.postprocs, fixed)
    if sch is None:
        return  # a draw the post-processors reject
    text = str(sch.func)
    pack = text.index('with block("w_global"')
    # The loops around the pack: up from it, each less indented than the one before (a
    # sibling's loops, such as the pad's, are not around it).
    loops, depth = [], len(text[:pack]) - len(text[:pack].rstrip(" "))
    for line in reversed(text[:pack].splitlines()):
        ind = len(line) - len(line.lstrip(" "))
        m = re.match(r" *for (\w+) in (\w+)\((\d+)\)", line)
        if m and ind < depth:
            loops.append(m.groups())
            depth = ind
    outer = [(name, kind, int(n)) for name, kind, n in loops if not name.startswith("ax")]
    assert outer, "the pack is at the root"
    if any(n > 1 for _, _, n in outer):   # else the pack is all the jobs' work at once
        assert any(kind == "parallel" for _, kind, _ in outer)
        src = emit_c(lower(sch.func), TARGET)
        body = src[src.index("int32_t tt_kernel"):]
        decl = re.search(r"float(\* restrict)? w_global( = |\[)", body)  # heap or stack
        assert decl and body.index("#pragma omp parallel") < decl.start()
    ins = random_inputs(f, seed=seed)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


@given(seed=st.integers(0, 10_000))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_packed_copies_walk_their_destination_in_order(seed):
    """A pack's innermost loop runs along the destination's last axis at unit stride (in
    source order every store of the repacked weights lands a row apart)."""
    from tensortune.codegen.lower import flatten_blocks
    from tensortune.tir.arith import simplify
    from tensortune.tir.functor import walk_with_loops
    from tensortune.tir.linear import linear
    from tensortune.tir.stmt import BufferStore

    funcs = {"c2d": tt.workloads.get("c2d", C=16, K=32, H=8, W=8),
             "dense": tt.workloads.get("dense"), "tbg": tt.workloads.get("tbg", s=32)}
    for name, space, buf in (("c2d", 1, "w_global"), ("dense", 0, "W_global"),
                             ("dense", 1, "X_global"), ("tbg", 0, "K_global")):
        f = funcs[name]
        sch = None
        for attempt in range(20):  # a draw whose register tile is over the limit is None
            sch = sample(f, GEN.generate(f)[space], seed + attempt, GEN.postprocs)
            if sch is not None:
                break
        assert sch is not None, "no legal draw in 20 tries"
        stores = [(x, path) for x, path in walk_with_loops(flatten_blocks(sch.func.body))
                  if isinstance(x, BufferStore) and x.buffer.name == buf]
        assert stores, (name, buf)
        for store, path in stores:
            # Linear with opaque atoms: a fused parallel loop's div/mod terms are constants
            # along the innermost loop.
            # Simplified with the loops' ranges first: in strips, (8 * n_o + n_i) % 8 is
            # n_i, as the code generator sees it.
            ranges = {lp.var: (0, lp.extent - 1) for lp in path}
            lin = linear(simplify(store.buffer.flat_index(store.indices), ranges))
            inner = path[-1].var
            assert lin is not None and lin[0].get(inner, (inner, 0))[1] == 1, (name, buf)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(list(FUNCS)), pick=st.integers(0, 10_000),
       seed=st.integers(0, 10_000))
def test_every_layout_space_compiles_to_correct_code(name, pick, seed):
    f, spaces = FUNCS[name], SPACES[name]
    sch = None
    for attempt in range(20):
        sch = sample(f, spaces[pick % len(spaces)], seed + attempt, GEN.postprocs)
        if sch is not None:
            break
    assert sch is not None, "no legal draw in 20 tries"
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])
