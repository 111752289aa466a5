"""The tuning database: round trip, export/import, resume, concurrent writers, a killed
run, bad files and records from another machine."""

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

import tensortune as tt
from tensortune.database import Database, DatabaseError, TuningRecord

SMALL = dict(M=32, N=32, K=16)


def _rec(prog: str, lat: float | None, wl: str = "w1", target: str = "t1") -> TuningRecord:
    return TuningRecord(wl, target, "{}", prog, [lat] if lat else [],
                        None if lat else "wrong_result", None if lat else "bad")


def test_round_trip_top_k_and_export(tmp_path):
    db = Database(tmp_path / "a.db")
    db.add_workload("w1", "gmm", "text", 1e6)
    assert db.add(_rec("p1", 3e-3)) and db.add(_rec("p2", 1e-3)) and db.add(_rec("p3", None))
    assert not db.add(_rec("p1", 9e-3))  # the same program is stored once
    assert [r.program for r in db.top_k("w1", "t1", 5)] == ["p2", "p1"]
    assert db.count("w1", "t1") == 3
    n = db.export_jsonl(tmp_path / "x.jsonl")
    other = Database(tmp_path / "b.db")
    assert n == 3 and other.import_jsonl(tmp_path / "x.jsonl") == 3
    assert other.top_k("w1", "t1", 1)[0].latency == pytest.approx(1e-3)
    assert other.import_jsonl(tmp_path / "x.jsonl") == 0


def test_timings_reads_latency_and_features_by_workload(tmp_path):
    db = Database(tmp_path / "a.db")
    for wl in ("w1", "w2", "w3"):
        db.add_workload(wl, wl, "text", 1e6)
    db.add(dataclasses.replace(_rec("p1", 3e-3, "w2"), features=[1.0, 2.0]))
    db.add(dataclasses.replace(_rec("p2", None, "w2"), features=[3.0, 4.0]))
    db.add(dataclasses.replace(_rec("p3", 1e-3, "w3"), features=[5.0, 6.0]))
    db.add(dataclasses.replace(_rec("p4", 2e-3, "w1"), features=[7.0, 8.0]))
    db.add(dataclasses.replace(_rec("p5", 2e-3, "w2", target="t2"), features=[9.0, 9.0]))
    rows = {w: [(lat, json.loads(ft)) for lat, ft in got]
            for w, got in db.timings("t1", exclude="w1").items()}
    assert rows == {"w2": [(3e-3, [1.0, 2.0]), (float("inf"), [3.0, 4.0])],
                    "w3": [(1e-3, [5.0, 6.0])]}
    assert set(db.timings("t1")) == {"w1", "w2", "w3"}
    assert db.timings("t2") == {"w2": [(2e-3, "[9.0, 9.0]")]}


def test_reading_a_missing_database_says_so_and_creates_nothing(tmp_path, capsys):
    from tensortune.cli import main

    missing = tmp_path / "none.db"
    with pytest.raises(DatabaseError, match="no tuning database at .*none.db; tune into it"):
        tt.compile(tt.workloads.get("gmm", **SMALL), database=missing)
    for argv in (["show", "gmm", "--db", str(missing)], ["db", "list", "--db", str(missing)],
                 ["db", "export", str(tmp_path / "x.jsonl"), "--db", str(missing)]):
        assert main(argv) == 2
        assert "no tuning database at" in capsys.readouterr().err
    assert not missing.exists()


def test_bad_files(tmp_path):
    bad = tmp_path / "corrupt.db"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(DatabaseError, match="not a usable tensortune database"):
        Database(bad)
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"nope": 1}\n')
    with pytest.raises(DatabaseError, match="junk.jsonl:1: not a tensortune export line "
                       r"\(no field 'workload'; a line holds a record, or a workload"):
        Database(tmp_path / "c.db").import_jsonl(junk)
    junk.write_text('{"record": {"workload": "w"}}\n[1, 2]\n')
    with pytest.raises(DatabaseError, match="junk.jsonl:1: not a tensortune export line"):
        Database(tmp_path / "c.db").import_jsonl(junk)
    junk.write_text("[1, 2]\n")
    with pytest.raises(DatabaseError, match="a JSON object per line, got list"):
        Database(tmp_path / "c.db").import_jsonl(junk)
    with pytest.raises(DatabaseError, match=r"cannot open the tuning database .*t\.db "
                       r"\(unable to open database file\): its directory .*no does not exist"):
        Database(tmp_path / "no" / "t.db")
    # Files that cannot be read or written, or are not text: which file, and why.
    junk.write_bytes(b'{"workload": "\xd0\x00"}\n')
    with pytest.raises(DatabaseError, match="junk.jsonl: not a tensortune export: not UTF-8"):
        Database(tmp_path / "c.db").import_jsonl(junk)
    with pytest.raises(DatabaseError, match="cannot read .*gone.jsonl: No such file"):
        Database(tmp_path / "c.db").import_jsonl(tmp_path / "gone.jsonl")
    with pytest.raises(DatabaseError, match="cannot write .*x.jsonl: No such file"):
        Database(tmp_path / "c.db").export_jsonl(tmp_path / "no" / "x.jsonl")


def test_resume_never_remeasures(tmp_path):
    f = tt.workloads.get("gmm", **SMALL)
    path = tmp_path / "r.db"
    tt.tune(f, trials=6, database=path, strategy="replay", seed=1)
    tt.tune(f, trials=6, database=path, strategy="replay", seed=1)
    recs = Database(path).records(f.structural_hash())
    assert len(recs) == 12 and len({r.program for r in recs}) == 12
    # Another shape: the error gives the stored one's signature (the --shape to give)
    a = f.params[0]
    with pytest.raises(DatabaseError, match=rf"no record for gmm .*another shape or "
                       rf"definition \(workloads {f.structural_hash()}: gmm\(A: float32"
                       rf"\[{a.shape[0]}, {a.shape[1]}\], B"):
        tt.compile(tt.workloads.get("gmm", M=8, N=8, K=8), database=path)


def test_records_from_another_machine(tmp_path):
    f = tt.workloads.get("gmm", **SMALL)
    db = Database(tmp_path / "o.db")
    db.add(TuningRecord(f.structural_hash(), "elsewhere", "{}", "p", [1e-3],
                        target_desc="some other CPU"))
    with pytest.raises(DatabaseError, match="only for other machines \\(some other CPU\\)"):
        tt.compile(f, database=db)
    with pytest.raises(DatabaseError, match="no record for gmm"):
        tt.compile(tt.workloads.get("gmm", M=8, N=8, K=8), database=db)


_WORKER = """
import sys, tensortune as tt
f = tt.workloads.get("gmm", M=32, N=32, K=16)
tt.tune(f, trials=int(sys.argv[2]), database=sys.argv[1], strategy="replay",
        seed=int(sys.argv[3]))
"""


def test_two_concurrent_writers(tmp_path):
    path = str(tmp_path / "shared.db")
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, path, "8", str(s)],
                              stderr=subprocess.PIPE) for s in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-2000:]
    recs = Database(path).records()
    assert 8 < len(recs) <= 16 and len({r.program for r in recs}) == len(recs)


def test_killed_run_keeps_measured_records(tmp_path):
    path = str(tmp_path / "kill.db")
    p = subprocess.Popen([sys.executable, "-c", _WORKER, path, "400", "3"],
                         stderr=subprocess.DEVNULL)
    seen = 0
    deadline = time.time() + 240
    while time.time() < deadline and seen < 5:
        time.sleep(0.5)
        if os.path.exists(path):
            try:
                seen = sqlite3.connect(path).execute("SELECT COUNT(*) FROM records").fetchone()[0]
            except sqlite3.DatabaseError:
                pass
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert seen >= 5
    db = Database(path)
    assert len(db.records()) >= seen
    f = tt.workloads.get("gmm", **SMALL)
    assert tt.compile(f, database=db) is not None


_CREATOR = """
import sys
from tensortune.database import Database, TuningRecord
db = Database(sys.argv[1])
for i in range(10):
    db.add(TuningRecord("w", "t", "{}", f"p{sys.argv[2]}-{i}", [1e-3]))
"""


def test_processes_creating_one_database_at_once(tmp_path):
    """The switch to WAL on a new file races; every process must still get in."""
    for round_ in range(5):
        path = str(tmp_path / f"race{round_}.db")
        procs = [subprocess.Popen([sys.executable, "-c", _CREATOR, path, str(k)],
                                  stderr=subprocess.PIPE) for k in range(3)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()[-1500:]
        assert Database(path).count() == 30


_SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE workloads (hash TEXT PRIMARY KEY, name TEXT, text TEXT, flops REAL);
CREATE TABLE records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL, target TEXT NOT NULL, program TEXT NOT NULL,
    trace TEXT NOT NULL, latencies TEXT, latency REAL, error_kind TEXT, error_msg TEXT,
    build_seconds REAL, target_desc TEXT, created REAL, features TEXT,
    UNIQUE (workload, target, program));
INSERT INTO meta VALUES ('version', '2');
INSERT INTO records (workload, target, program, trace, latencies, latency)
    VALUES ('w1', 't1', 'p1', '{}', '[0.002]', 0.002);
"""


def test_a_version_2_database_is_upgraded_in_place(tmp_path):
    path = tmp_path / "v2.db"
    con = sqlite3.connect(path)
    con.executescript(_SCHEMA_2)
    con.close()
    db = Database(path)
    old = db.top_k("w1", "t1", 1)[0]
    assert old.source is None and old.latency == pytest.approx(2e-3)
    assert db.add(TuningRecord("w1", "t1", "{}", "p2", [1e-3], source="abc"))
    assert [(r.program, r.source) for r in db.top_k("w1", "t1", 2)] == [("p2", "abc"),
                                                                        ("p1", None)]
    db.close()
    assert Database(path).count() == 2        # opened again: already version 3
    version = sqlite3.connect(path).execute("SELECT value FROM meta").fetchone()[0]
    assert version == "3"


def test_compile_times_again_a_best_record_timed_with_other_c(tmp_path):
    """A record timed by an older code generator (its source hash differs from the C its
    program lowers to now) must not win on its stored timing."""
    import dataclasses

    import numpy as np

    from tensortune.codegen import emit_c, lower
    from tensortune.measure import source_hash
    from tensortune.search.records import replay

    f = tt.workloads.get("gmm", **SMALL)
    path = tmp_path / "stale.db"
    tt.tune(f, trials=6, database=path, strategy="replay", seed=4, retime_top=0)
    db = Database(path)
    wl, fp = f.structural_hash(), tt.Target.host().fingerprint()
    top = db.top_k(wl, fp, 6)
    assert all(r.source == source_hash(emit_c(lower(replay(f, r).func), tt.Target.host()))
               for r in top)        # tuning stores the hash of the C it timed
    # The slowest record, timed 1000x too fast by "an older tensortune" (another C).
    stale = dataclasses.replace(top[-1], latencies=[top[0].latency / 1000], source="0" * 16)
    db.update_timing(stale)
    kept = tt.compile(f, database=db, retime=False)
    assert kept.source == emit_c(lower(replay(f, stale).func), tt.Target.host())
    kernel = tt.compile(f, database=db)
    again = next(r for r in db.records(wl, fp) if r.program == stale.program)
    assert again.source == source_hash(kept.source)
    assert again.latency > 100 * stale.latency          # its own timing, not the stale one
    best = db.top_k(wl, fp, 1)[0]
    assert kernel.source == emit_c(lower(replay(f, best).func), tt.Target.host())
    a, b = (np.random.default_rng(0).standard_normal(s).astype("float32")
            for s in ((32, 16), (16, 32)))
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    # Now current: compile looks at the best record's C once and times nothing.
    before = [(r.program, r.latencies) for r in db.records(wl, fp)]
    tt.compile(f, database=db)
    assert [(r.program, r.latencies) for r in db.records(wl, fp)] == before


def test_compile_passes_over_a_best_record_whose_trace_no_longer_replays(tmp_path):
    f = tt.workloads.get("gmm", **SMALL)
    path = tmp_path / "old.db"
    tt.tune(f, trials=4, database=path, strategy="replay", seed=5, retime_top=0)
    db = Database(path)
    wl, fp = f.structural_hash(), tt.Target.host().fingerprint()
    # A record of an older tensortune, fastest on paper, naming a block this one lacks.
    gone = ('{"insts": [{"kind": "get_block", "inputs": ["C_old"], "attrs": {}, '
            '"outputs": [["BlockRV", "b0"]]}], "decisions": {}}')
    assert db.add(TuningRecord(wl, fp, gone, "old-program", [1e-9]))
    kernel = tt.compile(f, database=db)
    old = next(r for r in db.records(wl, fp) if r.program == "old-program")
    assert not old.ok and old.error_kind == "replay" and "C_old" in old.error_msg
    best = db.top_k(wl, fp, 1)[0]
    assert best.program != "old-program" and best.source is not None
    a = np.random.default_rng(1).standard_normal((32, 16)).astype("float32")
    b = np.random.default_rng(2).standard_normal((16, 32)).astype("float32")
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
