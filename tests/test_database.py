"""The tuning database: round trip, export/import, resume, concurrent writers, a killed
run, bad files and records from another machine."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

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


def test_bad_files(tmp_path):
    bad = tmp_path / "corrupt.db"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(DatabaseError, match="not a usable tensortune database"):
        Database(bad)
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"nope": 1}\n')
    with pytest.raises(DatabaseError, match="junk.jsonl:1: not a tensortune export line"):
        Database(tmp_path / "c.db").import_jsonl(junk)


def test_resume_never_remeasures(tmp_path):
    f = tt.workloads.get("gmm", **SMALL)
    path = tmp_path / "r.db"
    tt.tune(f, trials=6, database=path, strategy="replay", seed=1)
    tt.tune(f, trials=6, database=path, strategy="replay", seed=1)
    recs = Database(path).records(f.structural_hash())
    assert len(recs) == 12 and len({r.program for r in recs}) == 12


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
