"""Search: mutators keep programs legal, an end-to-end tune returns a correct kernel,
user templates, and bad inputs. The evolution's batches are tested in test_evolutionary,
a tuning task's steps in test_tuning_task."""

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from search_common import FUNCS, GEN, SPACES

import tensortune as tt
from tensortune.database import Database
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.search import EvolutionarySearch, SearchContext
from tensortune.search.mutator import mutate


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
    # Printed, a result and its kernel say what they are in a line (not pages of IR)
    from tensortune.measure.roofline import latency_text

    assert repr(res) == (f"TuneResult(gmm: best {latency_text(res.best_latency)}, "
                         f"{res.gflops:.1f} GFLOP/s, 10 trials in {res.seconds:.1f} s, "
                         f"{res.errors} errors, database {tmp_path / 't.db'})")
    shapes = ", ".join(f"{b.name}: float32{list(b.shape)}" for b in f.params)
    assert repr(again) == f"Kernel(gmm({shapes}), 1 output(s))"


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
    with pytest.raises(tt.TensorTuneError, match=r"tune takes a PrimFunc, got str; a suite "
                       r"workload: tt.workloads.get\('gmm'\)"):
        tt.tune("gmm", trials=1)
    with pytest.raises(tt.TensorTuneError, match=r"got list \(te.create_func makes one\)"):
        tt.tune([1], trials=1)
    with pytest.raises(tt.TensorTuneError, match=r"compile takes a PrimFunc, got str; a suite"):
        tt.compile("gmm", database="any.db")
    # A budget that is not a whole number of trials (or batches) says so before any work:
    # -3 trials used to run none silently, 2.5 to fail deep in the search.
    for kwargs, what in [({"trials": -3}, "trials"), ({"trials": 2.5}, "trials"),
                         ({"trials": True}, "trials"), ({"batch_size": 0}, "batch_size"),
                         ({"retime_top": -1}, "retime_top")]:
        with pytest.raises(tt.TensorTuneError, match=f"{what} must be a whole number"):
            tt.tune(FUNCS["gmm"], **{"trials": 1, **kwargs})
    with pytest.raises(tt.TensorTuneError, match="timeout must be a positive number"):
        tt.tune(FUNCS["gmm"], trials=1, timeout=0)


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


def test_a_guessed_kernel_is_a_scheduled_program_and_checks(monkeypatch):
    """With no trials a model's task runs the bundled prior's pick of a few draws (a
    parallel, vectorized program), checked against the function as written; if no draw
    checks, the function as written."""
    from tensortune import kernel as kmod
    from tensortune.search import guess

    f = tt.workloads.get("gmm", M=64, N=96, K=48)
    target = tt.Target.host()
    k = guess.guessed_kernel(f, target)
    a, b = (np.random.default_rng(s).uniform(-1, 1, shp).astype(np.float32)
            for s, shp in ((1, (64, 48)), (2, (48, 96))))
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert k.func is not f and "tt_f32x" in k.source.split("int32_t tt_kernel(")[1]
    real = kmod.build_checked

    def only_as_written(func, tgt=None, reference=None, case=None):
        if reference is not None and func is not reference:
            raise tt.TensorTuneError("stand-in: this draw computes wrong")
        return real(func, tgt, case=case)
    monkeypatch.setattr(guess, "build_checked", only_as_written)
    assert guess.guessed_kernel(f, target).func is f
