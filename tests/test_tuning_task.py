"""A tuning task's steps: re-timing the best records, programs whose C was already
timed, the timing loops and the batch sizes."""

import pytest
from search_common import FUNCS

import tensortune as tt
from tensortune.database import Database
from tensortune.reference import check_close, evaluate, random_inputs


def test_retime_keeps_each_best_records_quietest_timing_and_drops_a_failed_check(tmp_path):
    import dataclasses

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


def test_a_candidate_whose_c_is_over_the_size_limit_is_a_recorded_error(tmp_path,
                                                                         monkeypatch):
    """C longer than ``SEARCH_SOURCE_LIMIT`` is not compiled: the candidate is stored as a
    codegen error that names the limit, and the search goes on to its next candidates
    (here every one, with the limit at 2 KB; GMM's sources are 8-20 KB). The draw
    workers' ``emit_one`` applies the same limit (both write C through ``candidate_c``)."""
    import tensortune.measure.builder as builder
    import tensortune.search.draw_pool as draw_pool
    from tensortune.measure.builder import write_c

    f = FUNCS["gmm"]
    sch = tt.Schedule(f)
    source, error = write_c(lambda: sch.func, tt.Target.host())
    assert error is None and len(source) > 2048
    assert write_c(lambda: sch.func, tt.Target.host(), len(source))[0] == source
    cut, why = write_c(lambda: sch.func, tt.Target.host(), len(source) - 1)
    assert cut is None and "SEARCH_SOURCE_LIMIT" in why

    monkeypatch.setattr(builder, "SEARCH_SOURCE_LIMIT", 2048)   # every search path reads it
    db = Database(tmp_path / "t.db")
    res = tt.tune(f, trials=4, database=db, strategy="replay", seed=0, draw_workers=0,
                  retime_top=0)
    recs = db.records(res.func.structural_hash(), tt.Target.host().fingerprint())
    assert res.trials == 4 and res.errors == 4 and len(recs) == 4
    assert all(r.error_kind == "codegen" and "SEARCH_SOURCE_LIMIT" in r.error_msg
               for r in recs)
    written = draw_pool.emit_one(res.func, [], [], recs[0].trace, tt.Target.host(), None)
    assert written[0] is None and "SEARCH_SOURCE_LIMIT" in written[1]
