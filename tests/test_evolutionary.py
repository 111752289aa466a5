"""EvolutionarySearch's batches: survivors carried over, the random share, niches and
their cap."""

import random

import numpy as np
from search_common import FUNCS, GEN, SPACES, TrainedRandom

import tensortune as tt
from tensortune.search import EvolutionarySearch, SearchContext


def test_unmeasured_survivors_carry_over_and_replace_fresh_draws():
    """With ``fresh`` < 1 the next batch's population starts from the last population's
    unmeasured programs instead of drawing (and replaying) all of it afresh."""
    f = FUNCS["c2d"]

    def fresh_draws(fresh: float) -> tuple[int, EvolutionarySearch]:
        ctx = SearchContext(f, SPACES["c2d"], GEN, rng=random.Random(5))
        es = EvolutionarySearch(cost_model=TrainedRandom(1), population=16, generations=1,
                                fresh=fresh)
        es.init(ctx)
        first = es.generate(4)
        assert len(first) == 4 and es.survivors
        assert not {c.program for c in es.survivors} & ctx.known
        calls = 0
        draws = ctx.draw_fresh

        def counted(k):
            # Count the draws that made a candidate: a rejected draw (a register tile
            # over the limit) replaces nothing.
            nonlocal calls
            got = draws(k)
            calls += sum(c is not None for c in got)
            return got

        ctx.draw_fresh = counted  # type: ignore[method-assign]
        second = es.generate(4)
        assert len(second) == 4 and not {c.program for c in second} & {
            c.program for c in first}
        return calls, es

    carried, _ = fresh_draws(0.25)
    full, _ = fresh_draws(1.0)
    assert carried <= 8 and full >= 16


def test_the_random_share_of_a_batch_reaches_every_design_space():
    """Epsilon-greedy takes its random share from fresh draws: a model that scores one
    design space far above the other still lets the other one be measured (an evolved
    population alone would hold only the favourite)."""
    class Biased(EvolutionarySearch):
        def _score(self, cands):  # space 0 is all the model believes in
            return np.array([1.0 if c.space == 0 else 0.0 for c in cands])

    f = tt.workloads.get("gmm", M=32, N=48, K=12)  # rows in the lanes: whole vectors
    spaces = GEN.generate(f)
    assert len(spaces) == 2
    ctx = SearchContext(f, spaces, GEN, rng=random.Random(2))
    es = Biased(cost_model=TrainedRandom(1), population=24, generations=2, eps_greedy=0.25)
    es.init(ctx)
    batches = [es.generate(8) for _ in range(3)]
    spaces = [c.space for b in batches for c in b]
    assert len(spaces) == 24
    # 6 of each 8 are the model's picks (space 0); about half of the other 2 are space 1
    assert 1 <= spaces.count(1) <= 6


def test_a_niche_is_the_register_tile_not_the_outer_tiling():
    """Two programs that tile the outer loops differently share a niche; another
    innermost factor (other accumulators and unrolled body) is another niche."""
    f = FUNCS["gmm"]
    ctx = SearchContext(f, SPACES["gmm"], GEN, rng=random.Random(4))
    space = SPACES["gmm"][0]
    # A draw whose two outer levels differ, so that swapping them gives another program:
    # with 16 lanes GMM's 40 columns are often tiled (1, 1, 1, 40), and swapping two unit
    # levels changes nothing; nor does swapping (5, 1) when the two are fused into one
    # parallel loop.
    for _ in range(200):
        cand = ctx.draw(0)
        if cand is None:
            continue
        tiles = [i for i, d in cand.decisions.items()
                 if space.insts[i].kind == "sample_perfect_tile"
                 and space.insts[i].attr("inner")]
        assert tiles, "multi-level tiling marks its register-tile levels"
        i = tiles[0]
        d = cand.decisions[i]
        if d[0] == d[1]:
            continue
        outer = [d[1], d[0], *d[2:]]                       # the outer two levels swapped
        moved = ctx.draw(0, {**cand.decisions, i: outer}, cand.post)
        if moved is not None and moved.program != cand.program:
            break
    else:
        raise AssertionError("no draw in 200 had two outer levels that swap to another "
                             "program")
    assert cand.niche[0] == 0 and tuple(d[-2:]) in cand.niche[1:]
    assert moved.niche == cand.niche
    inner = [d[0] * d[-1], *d[1:-1], 1]                 # the innermost factor moved out
    other = ctx.draw(0, {**cand.decisions, i: inner}, cand.post)
    if other is not None:                               # (a vector axis may reject it)
        assert other.niche != cand.niche


def test_a_batch_takes_at_most_its_niche_cap_from_a_full_register_tile():
    """A model that believes in one register tile above all others gets its way until
    that niche has been measured ``niche_full`` times; then at most a quarter of the
    greedy picks come from it and the rest go to other register tiles."""
    from collections import Counter

    class Biased(EvolutionarySearch):
        def _score(self, cands):  # the model ranks whole niches, one far above the rest
            return np.array([1.0 + (hash(c.niche) % 1000) / 10.0 for c in cands])

    def batch(full=None):
        ctx = SearchContext(FUNCS["c2d"], SPACES["c2d"], GEN, rng=random.Random(7))
        es = Biased(cost_model=TrainedRandom(1), population=32, generations=2, eps_greedy=0.0,
                    niche_cap=0.25, niche_full=20)
        es.init(ctx)
        if full is not None:
            es.per_niche[full] = 20
        out = es.generate(8)
        assert len(out) == 8 and len({c.program for c in out}) == 8
        return Counter(c.niche for c in out)

    favourite, n = batch().most_common(1)[0]
    assert n > 2                                # an empty history: no cap
    capped = batch(full=favourite)
    assert capped[favourite] <= 2 and len(capped) > 1
