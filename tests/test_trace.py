"""Traces: JSON round-trip, replay equality, new decisions, seeded determinism, Python."""


import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs


def _sampled(sch: tt.Schedule) -> None:
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ti = sch.sample_perfect_tile(i, 2, max_innermost_factor=8)
    tj = sch.sample_perfect_tile(j, 2, max_innermost_factor=16)
    i0, i1 = sch.split(i, ti)
    j0, j1 = sch.split(j, tj)
    sch.reorder(i0, j0, k, i1, j1)
    u = sch.sample_categorical([0, 4, 16], [0.3, 0.3, 0.4])
    sch.annotate(i0, "pragma_unroll", u)
    sch.parallel(i0)
    sch.vectorize(j1)


def test_json_round_trip_and_replay():
    f = tt.workloads.get("gmm", M=32, N=48, K=16)
    sch = tt.Schedule(f, seed=3)
    _sampled(sch)
    text = sch.trace.as_json()
    t = tt.Trace.from_json(text)
    assert t.as_json() == text
    again = tt.Schedule(f)
    t.apply(again)
    assert str(again.func) == str(sch.func)


def test_seeded_sampling_is_deterministic_and_decisions_replace():
    f = tt.workloads.get("gmm", M=32, N=48, K=16)
    a, b = tt.Schedule(f, seed=11), tt.Schedule(f, seed=11)
    _sampled(a)
    _sampled(b)
    assert str(a.func) == str(b.func)
    idx = min(a.trace.decisions)
    t2 = a.trace.with_decision(idx, [32, 1])
    c = tt.Schedule(f)
    t2.apply(c)
    text = str(c.func)
    assert "for i_0 in parallel(32, pragma_unroll=" in text and "for i_1 in range(1)" in text
    ins = random_inputs(f)
    check_close(tt.build(c)(*ins), evaluate(f, ins)[0])


def test_as_python_runs_and_gives_the_same_program():
    f = tt.workloads.get("dense", small=True)
    sch = tt.Schedule(f, seed=5)
    mm = sch.get_block("matmul")
    y = sch.get_block("Y")
    i, j, k = sch.get_loops(mm)
    j0, j1 = sch.split(j, [None, 8])
    sch.reverse_compute_at(y, j0)
    loc = sch.sample_compute_location(sch.get_block("matmul"))
    sch.compute_at(sch.get_block("matmul"), loc)
    code = sch.trace.as_python()
    assert "sch.reverse_compute_at(" in code and "decision=" in code
    fresh = tt.Schedule(f)
    exec(code, {"sch": fresh, "tt": tt})
    assert str(fresh.func) == str(sch.func)


def test_as_python_of_a_sampled_space_program_replays_it():
    """A program drawn from the default space (whole-vector tiles: ``multiple=``, packed
    copies, post-processors) printed as Python and run on a fresh schedule is the same
    program."""
    from tensortune.space import PostOrderApply, sample

    f = tt.workloads.get("dep", C=4, H=6, W=16)
    gen = PostOrderApply.default(tt.Target.host())
    sch = sample(f, gen.generate(f)[0], seed=3, postprocs=gen.postprocs)
    assert sch is not None
    code = sch.trace.as_python()
    assert "multiple=" in code
    fresh = tt.Schedule(f)
    exec(code, {"sch": fresh, "tt": tt})
    assert str(fresh.func) == str(sch.func)


def test_bad_trace_json():
    import pytest

    with pytest.raises(tt.TraceError, match="malformed"):
        tt.Trace.from_json("{}")
    bad = '{"insts": [{"kind": "get_loops", "inputs": [{"rv": "b9"}], "attrs": {}, ' \
          '"outputs": []}], "decisions": {}}'
    with pytest.raises(tt.TraceError, match="b9 before defining it"):
        tt.Trace.from_json(bad)


def test_a_root_location_replays_with_a_new_decision():
    # Drawn at the root when the space was made; replayed with a loop decision, compute_at
    # must follow the new location (it once stayed at the root).
    f = tt.workloads.get("c2d", small=True)
    sch = tt.Schedule(f)
    pad = sch.get_block("pad")
    sch.compute_at(pad, sch.sample_compute_location(pad, decision=0))
    idx = min(sch.trace.decisions)
    assert 'block("pad"' in str(sch.func).split("for n in")[0]  # at the root
    for d in range(1, len(sch.compute_location_candidates(sch.get_block("pad")))):
        again = tt.Schedule(f)
        sch.trace.with_decision(idx, d).apply(again)
        text = str(again.func)
        assert text.index('block("pad"') > text.index("for n in"), d
        ins = random_inputs(f)
        check_close(tt.build(again)(*ins), evaluate(f, ins)[0])


def test_as_python_unpacks_lists_of_one():
    f = tt.workloads.get("softmax", M=4, N=16)
    sch = tt.Schedule(f)
    (prod,) = sch.get_producers(sch.get_block("rowsum"))
    sch.compute_at(prod, sch.sample_compute_location(prod, decision=0))
    code = sch.trace.as_python()
    assert "= sch.get_producers(" in code and code.count("[b") >= 1
    fresh = tt.Schedule(f)
    exec(code, {"sch": fresh, "tt": tt})
    assert str(fresh.func) == str(sch.func)
