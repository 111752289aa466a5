"""Search: mutators keep programs legal, an end-to-end tune returns a correct kernel,
user templates, and bad inputs."""

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.database import Database
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.search import EvolutionarySearch, SearchContext
from tensortune.search.mutator import mutate
from tensortune.space import PostOrderApply

FUNCS = {"gmm": tt.workloads.get("gmm", M=24, N=40, K=12),
         "c2d": tt.workloads.get("c2d", small=True)}
GEN = PostOrderApply.default(tt.Target.host())
SPACES = {n: GEN.generate(f) for n, f in FUNCS.items()}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(list(FUNCS)), seed=st.integers(0, 10_000),
       steps=st.integers(1, 6))
def test_mutants_are_legal_and_correct(name, seed, steps):
    f = FUNCS[name]
    ctx = SearchContext(f, SPACES[name], GEN, rng=random.Random(seed))
    cand = None
    while cand is None:
        cand = ctx.draw(ctx.rng.randrange(len(SPACES[name])))
    for _ in range(steps):
        m = mutate(cand, SPACES[name][cand.space], ctx.rng)
        if m is None:
            break
        child = ctx.draw(cand.space, m[0], m[1])
        if child is not None:
            cand = child
    ins = random_inputs(f)
    check_close(tt.build(cand.sch)(*ins), evaluate(f, ins)[0])


def test_end_to_end_tune_small_gmm(tmp_path):
    f = FUNCS["gmm"]
    seen = []
    res = tt.tune(f, trials=10, database=tmp_path / "t.db", seed=0,
                  strategy=EvolutionarySearch(population=16), progress=seen.append)
    trials = [e for e in seen if e["stage"] == "trial"]
    assert res.trials == 10 and len(trials) == 10 and res.record is not None
    # The best five were timed again at the end; the last event carries the result.
    assert [e["stage"] for e in seen[10:]] == ["retiming", "retimed"]
    assert seen[-1]["best"] == res.best_latency <= trials[-1]["best"]
    assert res.best_latency > 0 and res.gflops > 0
    ins = random_inputs(f)
    check_close(res.kernel(*ins), evaluate(f, ins)[0])
    again = tt.compile(f, database=tmp_path / "t.db")
    check_close(again(*ins), evaluate(f, ins)[0])
    assert "sch.sample_perfect_tile(" in res.trace.as_python()


def test_last_trials_rebuild_the_best_with_gcc_sched_pressure(tmp_path):
    """With 32 trials and two variants: 30 from the search, then the two fastest
    programs again with the pre-RA scheduling annotation on their outermost loop. Each
    variant is a record of its own (checked, its C carrying the pragma), and
    ``tt.compile`` of the database returns a correct kernel whichever wins."""
    from tensortune.codegen import emit_c, lower
    from tensortune.codegen.c import SCHED_PRAGMA
    from tensortune.search.compile_variants import with_sched_pressure
    from tensortune.search.records import replay

    f = FUNCS["gmm"]
    db = Database(tmp_path / "t.db")
    res = tt.tune(f, trials=32, database=db, seed=1, sched_variants=2, retime_top=0)
    assert res.trials == 32
    f = res.func   # its rewrite: 40 columns padded to 48 (pad_lanes)
    recs = db.records(f.structural_hash(), tt.Target.host().fingerprint())
    marked = [r for r in recs if "gcc_sched_pressure" in r.trace]
    assert len(recs) == 32 and len(marked) == 2
    assert all(r.ok for r in marked)
    for r in marked:
        sch = replay(f, r)
        assert emit_c(lower(sch.func), tt.Target.host()).startswith(SCHED_PRAGMA)
        assert with_sched_pressure(sch) is None   # already carries it
    plain = [r for r in recs if r not in marked]
    assert not emit_c(lower(replay(f, plain[0]).func), tt.Target.host()).startswith("#pragma")
    ins = random_inputs(f)
    check_close(tt.compile(f, database=db)(*ins), evaluate(f, ins)[0])


def test_sched_pressure_survives_an_outermost_unit_loop():
    """Found when the variant test ran on a loaded machine, where a different program was
    fastest: its outermost loop had one iteration, lowering dropped that loop, and the
    annotation with it, so the kernel built without the pragma."""
    from tensortune.codegen import emit_c, lower
    from tensortune.codegen.c import SCHED_PRAGMA
    from tensortune.search.compile_variants import with_sched_pressure

    f = FUNCS["gmm"]
    sch = tt.Schedule(f)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [1, None])
    assert with_sched_pressure(sch) is sch
    src = emit_c(lower(sch.func), tt.Target.host())
    assert src.startswith(SCHED_PRAGMA)
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])


def test_template_space_and_random_model(tmp_path):
    def template(sch: tt.Schedule) -> None:
        c = sch.get_block("C")
        i, j, k = sch.get_loops(c)
        ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=8)
        _, i1 = sch.split(i, ti)
        sch.vectorize(j)

    f = FUNCS["gmm"]
    res = tt.tune(f, trials=4, space=template, cost_model="random", seed=2)
    assert res.record is not None and res.trials <= 4
    assert "vectorized(40)" in str(res.schedule().func)


def test_bad_inputs():
    with pytest.raises(tt.TensorTuneError, match="unknown strategy 'nope'"):
        tt.tune(FUNCS["gmm"], trials=1, strategy="nope")
    with pytest.raises(tt.TensorTuneError, match="unknown cost model 'nope'"):
        tt.tune(FUNCS["gmm"], trials=1, cost_model="nope")
    with pytest.raises(tt.TensorTuneError, match="tune takes a PrimFunc"):
        tt.tune("gmm", trials=1)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), extent=st.sampled_from([64, 96, 56, 1024, 7 * 36]),
       limit=st.sampled_from([4, 8, 32]))
def test_tile_mutations_keep_the_inner_product_bound(seed, extent, limit):
    import math

    from tensortune.schedule.sampling import sample_perfect_tile
    from tensortune.search.mutator import _mutate_tile

    rng = random.Random(seed)
    d = sample_perfect_tile(rng, extent, 4, limit, inner=2)
    assert math.prod(d) == extent
    for _ in range(10):
        new = _mutate_tile(d, limit, rng, inner=2)
        if new is None:
            break
        assert math.prod(new) == extent and new[2] * new[3] <= limit
        d = new


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), extent=st.sampled_from([56, 64, 96, 1024, 7 * 36, 28]),
       multiple=st.sampled_from([4, 8]), limit=st.sampled_from([8, 32]))
def test_vector_axis_tiles_and_their_mutants_hold_whole_vectors(seed, extent, multiple,
                                                                 limit):
    """With ``multiple``, the innermost factor is a multiple of it (56 -> 8, never 28 or
    14), the tile is perfect and the inner bound holds, for draws and mutants alike; the
    replayed instruction accepts them and rejects an innermost factor that is not."""
    import math

    from tensortune.schedule import Trace
    from tensortune.search.mutator import _mutate_perfect

    rng = random.Random(seed)
    f = tt.workloads.get("gmm", M=4, N=extent, K=4)
    sch = tt.Schedule(f)
    j = sch.get_loops(sch.get_block("C"))[1]
    sch.sample_perfect_tile(j, n=4, max_innermost_factor=limit, inner=2, multiple=multiple)
    inst = Trace.from_json(sch.trace.as_json()).insts[-1]
    assert inst.attr("multiple") == multiple
    d = sch.trace.decisions[len(sch.trace.insts) - 1]
    possible = extent % multiple == 0 and multiple <= limit
    seen = [d]
    for _ in range(12):
        new = _mutate_perfect(list(d), inst, rng)
        if new is not None:
            d = new
            seen.append(d)
    for d in seen:
        assert math.prod(d) == extent and d[2] * d[3] <= limit
        assert d[3] % multiple == 0 or not possible
        fresh = tt.Schedule(f)
        jj = fresh.get_loops(fresh.get_block("C"))[1]
        fresh.sample_perfect_tile(jj, n=4, max_innermost_factor=limit, inner=2,
                                  multiple=multiple, decision=d)
    if possible:
        bad = [extent // multiple * 2, 1, 1, multiple // 2]
        with pytest.raises(tt.ScheduleError, match="multiple of"):
            fresh = tt.Schedule(f)
            jj = fresh.get_loops(fresh.get_block("C"))[1]
            fresh.sample_perfect_tile(jj, n=4, max_innermost_factor=limit, inner=2,
                                      multiple=multiple, decision=bad)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), extent=st.sampled_from([64, 1024, 56, 37, 7 * 36]))
def test_imperfect_tile_mutations_stay_valid(seed, extent):
    """sample_tile decisions: the innermost factor need not divide the extent, the outer
    levels tile the rest exactly; mutants keep both and the inner bound."""
    from tensortune.schedule import Trace
    from tensortune.schedule.sampling import check_tile, sample_tile
    from tensortune.search.mutator import _mutate_imperfect

    rng = random.Random(seed)
    f = tt.workloads.get("gmm", M=extent, N=16, K=4)
    sch = tt.Schedule(f)
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.sample_tile(i, n=4, max_innermost_factor=8, inner=2)
    inst = Trace.from_json(sch.trace.as_json()).insts[-1]
    d = sample_tile(rng, extent, 4, 8, inner=2)
    check_tile(d, extent, 4, 8, "t", inner=2)
    for _ in range(10):
        new = _mutate_imperfect(d, inst, rng)
        if new is None:
            continue
        assert check_tile(new, extent, 4, 8, "t", inner=2) == new
        d = new


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from([*FUNCS, "smx"]), seed=st.integers(0, 10_000))
def test_replays_resumed_from_the_cache_equal_full_replays(name, seed):
    f = FUNCS.get(name) or tt.workloads.get("smx", M=8, N=48)
    spaces = SPACES.get(name) or GEN.generate(f)
    ctx = SearchContext(f, spaces, GEN, rng=random.Random(seed))
    full = SearchContext(f, spaces, GEN, rng=random.Random(seed), cache=None)
    pop: list = []
    for _ in range(60):  # some draws are rejected (a register tile over the limit)
        c = ctx.draw(ctx.rng.randrange(len(spaces)))
        pop += [c] if c is not None else []
        if len(pop) == 6:
            break
    resumed = 0
    for step in range(30):
        parent = pop[step % len(pop)]
        m = mutate(parent, spaces[parent.space], ctx.rng)
        if m is None:
            continue
        hits = ctx.cache.hits
        child = ctx.draw(parent.space, m[0], m[1])
        ref = full.draw(parent.space, m[0], m[1])
        # Every decision is given, so the resumed replay must build the same program
        # with the same decisions as replaying the whole space.
        assert (child is None) == (ref is None)
        if child is not None and ref is not None:
            assert child.program == ref.program
            assert child.decisions == ref.decisions and child.post == ref.post
            pop.append(child)
            resumed += ctx.cache.hits - hits
    assert resumed > 0
    cand = pop[-1]
    ins = random_inputs(f)
    check_close(tt.build(cand.sch)(*ins), evaluate(f, ins)[0])


def test_a_post_processor_mutant_replays_nothing_of_the_space():
    f = FUNCS["gmm"]
    ctx = SearchContext(f, SPACES["gmm"], GEN, rng=random.Random(3))
    cand = None
    while cand is None:
        cand = ctx.draw(0)
    space = SPACES["gmm"][0]
    hit = ctx.cache.resume(space, cand.decisions, seed=1)
    assert hit is not None and hit[0] == len(space.insts)
    other = [(cand.post[0] + 1) % 3, cand.post[1]]
    child = ctx.draw(0, cand.decisions, other)
    assert child is not None and child.post == other and child.decisions == cand.decisions


def test_unmeasured_survivors_carry_over_and_replace_fresh_draws():
    """With ``fresh`` < 1 the next batch's population starts from the last population's
    unmeasured programs instead of drawing (and replaying) all of it afresh."""
    from tensortune.cost_model import RandomModel

    class Trained(RandomModel):
        @property
        def trained(self) -> bool:
            return True

    f = FUNCS["c2d"]

    def fresh_draws(fresh: float) -> tuple[int, EvolutionarySearch]:
        ctx = SearchContext(f, SPACES["c2d"], GEN, rng=random.Random(5))
        es = EvolutionarySearch(cost_model=Trained(1), population=16, generations=1,
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
    from tensortune.cost_model import RandomModel

    class Trained(RandomModel):
        @property
        def trained(self) -> bool:
            return True

    class Biased(EvolutionarySearch):
        def _score(self, cands):  # space 0 is all the model believes in
            return np.array([1.0 if c.space == 0 else 0.0 for c in cands])

    f = tt.workloads.get("gmm", M=32, N=48, K=12)  # rows in the lanes: whole vectors
    spaces = GEN.generate(f)
    assert len(spaces) == 2
    ctx = SearchContext(f, spaces, GEN, rng=random.Random(2))
    es = Biased(cost_model=Trained(1), population=24, generations=2, eps_greedy=0.25)
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

    from tensortune.cost_model import RandomModel

    class Trained(RandomModel):
        @property
        def trained(self) -> bool:
            return True

    class Biased(EvolutionarySearch):
        def _score(self, cands):  # the model ranks whole niches, one far above the rest
            return np.array([1.0 + (hash(c.niche) % 1000) / 10.0 for c in cands])

    def batch(full=None):
        ctx = SearchContext(FUNCS["c2d"], SPACES["c2d"], GEN, rng=random.Random(7))
        es = Biased(cost_model=Trained(1), population=32, generations=2, eps_greedy=0.0,
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


def test_retime_keeps_each_best_records_quietest_timing_and_drops_a_failed_check(tmp_path):
    import dataclasses

    from tensortune.database import Database
    from tensortune.measure import LocalBuilder, LocalRunner
    from tensortune.search.tuning_task import TuningTask

    f = FUNCS["gmm"]
    db = Database(tmp_path / "t.db")
    task = TuningTask(f, db, tt.Target.host(), strategy="replay", seed=3)
    builder = LocalBuilder(task.target)
    with LocalRunner() as runner:
        task.step(builder, runner, 6)
        top = db.top_k(task.workload, task.fingerprint, 6)
        k = len(top)
        assert k >= 3
        # The second-best was timed in a busy moment: 1000x its real latency, and slower
        # than the slowest (a busy host can make one candidate 1000x slower too).
        factor = 1000 * max(1.0, top[-1].latency / top[1].latency)
        slow = dataclasses.replace(top[1], latencies=[x * factor for x in top[1].latencies])
        db.update_timing(slow)
        before = db.top_k(task.workload, task.fingerprint, k)
        assert before[-1].program == slow.program
        out = task.retime(builder, runner, k=k, rounds=2)
        assert [r.program for r in out] == [r.program for r in
                                            db.top_k(task.workload, task.fingerprint, k)]
        again = next(r for r in out if r.program == slow.program)
        assert again.latency < slow.latency / 10          # its quiet timing came back
        # Each keeps the quietest of its timings: never slower than it was stored.
        assert all(r.latency <= old.latency for r in out
                   for old in before if old.program == r.program)
        assert task.best_latency == out[0].latency
    # A reference that the kernels no longer match (a new runner: the worker keeps the
    # arrays it was sent): each re-timed record fails its check and cannot be the best.
    task.expected = [e + 1.0 for e in task.expected]
    with LocalRunner() as runner:
        failed = task.retime(builder, runner, k=2, rounds=1)
    assert all(r.error_kind == "wrong_result" and not r.ok for r in failed), failed
    left = db.top_k(task.workload, task.fingerprint, 10)
    assert not {r.program for r in left} & {r.program for r in failed}
    assert task.best_latency == left[0].latency     # the best of those not re-timed


def _noted_template(sch: tt.Schedule) -> None:
    """Three programs, one C: an unroll depth on a parallel loop, which the C emitter
    does not unroll."""
    c = sch.get_block("C")
    i, j, _ = sch.get_loops(c)
    sch.vectorize(j)
    sch.parallel(i)
    sch.annotate(i, "pragma_unroll", sch.sample_categorical([2, 4, 8], [1 / 3] * 3))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_program_whose_c_was_timed_is_not_a_trial(tmp_path, workers):
    """Programs that differ only where the C does not are one kernel: the first is timed,
    the others take its record without a run or a trial (``TuneResult.twins``), a second
    run on the database times none of them, and the space counts as spent (the runs
    end at one trial of six)."""
    from tensortune.codegen import emit_c, lower
    from tensortune.measure.builder import source_hash
    from tensortune.search.records import replay

    f = FUNCS["gmm"]
    db = Database(tmp_path / "t.db")
    seen = []
    res = tt.tune(f, trials=6, database=db, space=_noted_template, strategy="replay",
                  seed=0, draw_workers=workers, retime_top=0, progress=seen.append)
    assert (res.trials, res.twins) == (1, 2)
    assert len([e for e in seen if e["stage"] == "trial"]) == 1
    recs = db.records(f.structural_hash(), tt.Target.host().fingerprint())
    assert len(recs) == 1 and recs[0].ok
    # The three programs do differ, and lower to the same C as the record's.
    sch = replay(f, recs[0])
    assert "pragma_unroll" in str(sch.func)
    again = tt.tune(f, trials=6, database=db, space=_noted_template, strategy="replay",
                    seed=1, draw_workers=workers, retime_top=0)
    # The stored program is never proposed again; the other two take its record.
    assert again.trials == 0 and again.twins == 2
    ins = random_inputs(f)
    check_close(tt.build(sch)(*ins), evaluate(f, ins)[0])
    assert source_hash(emit_c(lower(sch.func), tt.Target.host())) == recs[0].source


def test_stand_ins_replace_candidates_whose_c_was_timed(tmp_path):
    """A batch of two whose second candidate is the first's kernel (its unroll depth
    on a parallel loop never reaches the C): the step asks its strategy for one stand-in
    and measures it, so the batch still brings two trials. The stand-in is built in the
    same builder call as the batch (one call, two sources: the twin's C is built once)."""
    from tensortune.measure import LocalBuilder, LocalRunner
    from tensortune.search import SearchStrategy
    from tensortune.search.search_strategy import Candidate
    from tensortune.search.tuning_task import TuningTask

    f = FUNCS["gmm"]

    def program(depth: int | None) -> Candidate:
        sch = tt.Schedule(f)
        i, _, _ = sch.get_loops(sch.get_block("C"))
        if depth is not None:
            sch.parallel(i)
            sch.annotate(i, "pragma_unroll", depth)
        return Candidate(sch, -1, {})

    first, twin, other = program(2), program(4), program(None)
    assert len({first.program, twin.program, other.program}) == 3

    class Scripted(SearchStrategy):
        asked: list[int] = []

        def generate(self, n):
            return [first, twin] if not self.asked else []

        def more(self, n):
            self.asked.append(n)
            return [other]

    class Counted(LocalBuilder):
        calls: list[int] = []

        def build(self, inputs):
            self.calls.append(len(inputs))
            return super().build(inputs)

    strategy = Scripted()
    task = TuningTask(f, Database(tmp_path / "t.db"), tt.Target.host(), strategy=strategy,
                      load_guard=False)
    builder = Counted(task.target)
    with LocalRunner() as runner:
        recs = task.step(builder, runner, 2)
    assert (task.trials, task.twins, strategy.asked) == (2, 1, [1])
    assert builder.calls == [2]
    assert [r.program for r in recs] == [first.program, twin.program, other.program]
    assert recs[1].latencies == recs[0].latencies and all(r.ok for r in recs)


def test_a_task_whose_proposals_all_lower_to_timed_c_is_exhausted(tmp_path):
    """A strategy that never runs out of programs, each the same kernel (an unroll depth
    on a parallel loop, which the C never shows): after one trial the task counts as
    exhausted once ``BARREN_BATCHES`` batches in a row brought nothing new."""
    from tensortune.measure import LocalBuilder, LocalRunner
    from tensortune.search import SearchStrategy
    from tensortune.search.search_strategy import Candidate
    from tensortune.search.tuning_task import BARREN_BATCHES, TuningTask

    f = FUNCS["gmm"]

    class Endless(SearchStrategy):
        depth = 1

        def generate(self, n):
            out = []
            for _ in range(n):
                self.depth += 1
                sch = tt.Schedule(f)
                i, _, _ = sch.get_loops(sch.get_block("C"))
                sch.parallel(i)
                sch.annotate(i, "pragma_unroll", self.depth)
                out.append(Candidate(sch, -1, {}))
            return out

        def more(self, n):
            return []

    task = TuningTask(f, Database(tmp_path / "t.db"), tt.Target.host(), strategy=Endless(),
                      load_guard=False)
    steps = 0
    with LocalRunner() as runner:
        while not task.exhausted and steps < 2 * BARREN_BATCHES:
            task.step(LocalBuilder(task.target), runner, 2)
            steps += 1
    assert task.exhausted and steps == BARREN_BATCHES + 1
    assert (task.trials, task.twins) == (1, 2 * BARREN_BATCHES + 1)


def test_search_trials_time_short_loops_and_the_retiming_long_ones(tmp_path, monkeypatch):
    # Candidates are timed in SEARCH_REPEAT_MS loops; the re-timing that picks the record
    # a run returns in RETIME_REPEAT_MS loops.
    from tensortune.measure import LocalRunner
    from tensortune.search.records import RETIME_REPEAT_MS
    from tensortune.search.tune import SEARCH_REPEAT_MS

    seen: list[tuple[str, float]] = []
    one = LocalRunner._one

    def spy(self, inp, override=None):
        stage = "retime" if any(e["stage"] == "retiming" for e in events) else "trial"
        seen.append((stage, (override or {}).get("min_repeat_s", self.min_repeat_s)))
        return one(self, inp, override)

    events: list[dict] = []
    monkeypatch.setattr(LocalRunner, "_one", spy)
    tt.tune(FUNCS["gmm"], trials=6, database=tmp_path / "t.db", seed=0, strategy="replay",
            load_guard=False, progress=events.append)
    trial = {s for stage, s in seen if stage == "trial"}
    retime = {s for stage, s in seen if stage == "retime"}
    assert SEARCH_REPEAT_MS < RETIME_REPEAT_MS
    assert trial == {SEARCH_REPEAT_MS / 1000} and retime == {RETIME_REPEAT_MS / 1000}


@pytest.mark.parametrize("double_after", [8, None])
def test_batches_double_once_double_after_trials_are_measured(tmp_path, monkeypatch,
                                                              double_after):
    from tensortune.search.tuning_task import TuningTask

    asked: list[int] = []
    step = TuningTask.step

    def spy(self, builder, runner, n, progress=None):
        asked.append(n)
        return step(self, builder, runner, n, progress)

    monkeypatch.setattr(TuningTask, "step", spy)
    res = tt.tune(FUNCS["gmm"], trials=22, database=tmp_path / "t.db", seed=0,
                  strategy="replay", batch_size=4, double_after=double_after,
                  sched_variants=0, retime_top=0, load_guard=False, draw_workers=0)
    assert res.trials == 22
    # Each batch measured in full (the small GMM's space is far from spent), so the
    # sizes asked for are those of the schedule: 4s to 8 trials, then 8s, then the rest.
    assert asked == ([4, 4, 8, 6] if double_after else [4, 4, 4, 4, 4, 2])
