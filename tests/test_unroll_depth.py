"""Unroll depths (ParallelVectorizeUnroll's ``pragma_unroll``): annotated only where the
emitter gives them a pragma, so no two programs of one space differ by a depth the C
would not show."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.space import PostOrderApply

TARGET = tt.Target.host()

DRAWN = {n: tt.workloads.get(n, small=True) for n in ("gmm", "c1d", "bmm", "dep", "nrm", "smx")}
# Full size where the small versions lack the cases: unit reduction loops (GRP's rx_1 = 1)
# and register tiles that lowering expands under the annotated loop (C1D, TBG).
DRAWN |= {n.upper(): tt.workloads.get(n) for n in ("grp", "c1d", "tbg")}
DRAWN_GEN = PostOrderApply.default(TARGET)
DRAWN_SPACES = {n: DRAWN_GEN.generate(f) for n, f in DRAWN.items()}


def _draw_c(name: str, seed: int) -> tuple[str, str] | None:
    """The C and the program hash of one seeded draw of ``name``'s default space."""
    import random

    from tensortune.codegen import emit_c, lower
    from tensortune.search import SearchContext

    spaces = DRAWN_SPACES[name]
    ctx = SearchContext(DRAWN[name], spaces, DRAWN_GEN, rng=random.Random(seed))
    cand = ctx.draw(ctx.rng.randrange(len(spaces)))
    return None if cand is None else (emit_c(lower(cand.sch.func), TARGET), cand.program)


def _draw_both(name: str, seed: int) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """The draw as ParallelVectorizeUnroll makes it, and as it made it when it annotated
    every innermost reduction loop with the sampled unroll depth."""
    from tensortune.space import parallel_vectorize_unroll as pvu

    now = _draw_c(name, seed)
    saved = pvu.unroll_pragma_applies
    pvu.unroll_pragma_applies = lambda loop, depth: True   # type: ignore[assignment]
    try:
        return now, _draw_c(name, seed)
    finally:
        pvu.unroll_pragma_applies = saved


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(DRAWN)), seed=st.integers(0, 10_000))
def test_unroll_depths_the_c_would_not_show_are_left_off(name, seed):
    """ParallelVectorizeUnroll annotates an unroll depth only where the emitter may give
    it a pragma: the C of every draw is the one the annotation everywhere gives."""
    now, before = _draw_both(name, seed)
    assert (now is None) == (before is None)
    if now is not None and before is not None:
        assert now[0] == before[0]


def test_unroll_pragmas_still_reach_small_loop_bodies():
    """The rule keeps the pragma where it matters: some draws of the reductions carry it,
    and at least one draw drops an annotation (a program fewer for the same C)."""
    carried = dropped = 0
    for name in ("nrm", "smx", "c1d", "bmm"):
        for seed in range(12):
            now, before = _draw_both(name, seed)
            if now is None or before is None:
                continue
            carried += "#pragma GCC unroll" in now[0]
            dropped += now[1] != before[1]
    assert carried > 0 and dropped > 0


def _gmm_tiled(k_inner: int, i_tile: int) -> tuple[tt.Schedule, object]:
    """A small GMM with k split (k_1 of ``k_inner``) and a register tile of ``i_tile``
    rows, unrolled, under k_1: the loop an unroll depth goes on."""
    f = tt.workloads.get("gmm", M=32, N=32, K=16)
    sch = tt.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, i_tile])
    k0, k1 = sch.split(k, [None, k_inner])
    sch.reorder(i0, j, k0, k1, i1)
    sch.unroll(i1)
    return sch, k1


def test_an_unroll_depth_on_a_unit_loop_is_no_program_of_its_own():
    """Lowering drops a unit loop with its annotations, so a depth on one never reaches
    the C (GRP's rx_1 = 1 carried one in most draws, each depth a candidate that built
    the same kernel)."""
    from tensortune.codegen.c import unroll_pragma_applies

    sch, k1 = _gmm_tiled(k_inner=1, i_tile=2)
    assert not unroll_pragma_applies(sch.get(k1), 4)
    sch, k1 = _gmm_tiled(k_inner=4, i_tile=2)
    assert unroll_pragma_applies(sch.get(k1), 4)


def test_an_unroll_depth_counts_the_register_tile_lowering_expands():
    """Lowering expands an unrolled register tile into a copy of its body per row: a tile
    of 8 rows makes at least 8 statements under k_1 (a store per row; the init's guarded
    store may fold away), where the scheduled tree holds one loop and one block. The
    budget is 64 statements times depth: a depth of 16 never reaches the C, and the rule
    that counted the scheduled tree (2 x 16 <= 64) let it through; a depth of 2 does."""
    from tensortune.codegen import emit_c, lower
    from tensortune.codegen.c import _least_lowered, unroll_pragma_applies

    sch, k1 = _gmm_tiled(k_inner=4, i_tile=8)
    assert _least_lowered(sch.get(k1).body) == 8
    assert unroll_pragma_applies(sch.get(k1), 8)
    assert not unroll_pragma_applies(sch.get(k1), 16)
    for depth, shown in ((2, True), (16, False)):
        sch, k1 = _gmm_tiled(k_inner=4, i_tile=8)
        sch.annotate(k1, "pragma_unroll", depth)
        assert ("#pragma GCC unroll" in emit_c(lower(sch.func), TARGET)) == shown
