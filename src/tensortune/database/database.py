"""The tuning database: every measured candidate, kept in SQLite (the embedded default).

Workloads are keyed by structural hash; records by workload, target fingerprint and the
hash of the scheduled program (so a program is never measured twice, however its trace
was written). Each record is committed on its own in WAL mode: a tuning run killed
mid-batch loses nothing already measured, and two tuning processes can share one file.
Records are plain JSON, exported and imported as JSON lines. Each record also holds a
hash of the C source that was timed: a database outlives the code generator that filled
it, and ``tt.compile`` times again a best record whose program now lowers to other C.

Example:
    >>> db = Database("tuning.db")
    >>> db.add(TuningRecord(wl, target.fingerprint(), trace_json, prog_hash, [1.2e-3]))
    >>> best = db.top_k(wl, target.fingerprint(), 1)[0]
"""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from ..errors import TensorTuneError

SCHEMA_VERSION = 3   # 3 added records.source; a version-2 file is upgraded in place
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS workloads (
    hash TEXT PRIMARY KEY, name TEXT, text TEXT, flops REAL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL, target TEXT NOT NULL, program TEXT NOT NULL,
    trace TEXT NOT NULL, latencies TEXT, latency REAL, error_kind TEXT, error_msg TEXT,
    build_seconds REAL, target_desc TEXT, created REAL, features TEXT, source TEXT,
    UNIQUE (workload, target, program));
CREATE INDEX IF NOT EXISTS records_best ON records (workload, target, latency);
"""


class DatabaseError(TensorTuneError):
    """The database file is unusable or has no record for a request."""


@dataclass(frozen=True)
class TuningRecord:
    workload: str
    target: str
    trace: str                      # Trace.as_json()
    program: str                    # structural hash of the scheduled program
    latencies: list[float] = field(default_factory=list)
    error_kind: str | None = None
    error_msg: str | None = None
    build_seconds: float = 0.0
    target_desc: str = ""
    created: float = field(default_factory=time.time)
    features: list[float] = field(default_factory=list)   # cost-model features (transfer)
    source: str | None = None       # hash of the C source timed; None before schema 3

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.latencies)

    @property
    def latency(self) -> float:
        return statistics.median(self.latencies) if self.ok else float("inf")


class Database:
    """A SQLite tuning database at ``path`` (created if missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=60, isolation_level=None)
        except sqlite3.OperationalError as e:
            where = self.path.resolve().parent
            why = f"its directory {where} does not exist" if not where.is_dir() else \
                f"check that {where} is writable"
            raise DatabaseError(f"cannot open the tuning database {self.path} ({e}): "
                                f"{why}") from e
        # Two processes creating one file race on the switch to WAL, and SQLite reports
        # that lock at once instead of waiting: retry with a short random back-off.
        for _attempt in range(200):
            try:
                self._init()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise DatabaseError(f"{self.path} is not a usable tensortune database "
                                        f"({e}); move it away or pass another path") from e
                time.sleep(0.02 + random.random() * 0.08)
            except sqlite3.DatabaseError as e:
                raise DatabaseError(f"{self.path} is not a usable tensortune database ({e}); "
                                    "move it away or pass another path") from e
        raise DatabaseError(f"{self.path} stayed locked by another process for too long")

    @classmethod
    def existing(cls, path: str | Path) -> Database:
        """The database already at ``path``: a ``DatabaseError`` if there is no file there,
        rather than a new empty database (which commands that only read it would leave
        behind).

        Example:
            >>> db = Database.existing("tuning.db")
        """
        if not Path(path).is_file():
            raise DatabaseError(f"no tuning database at {path}; tune into it first "
                                f"(tt.tune(func, database={str(path)!r}) or "
                                f"tensortune tune NAME --db {path})")
        return cls(path)

    def _init(self) -> None:
        self.conn.execute("PRAGMA busy_timeout=60000")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(_SCHEMA)
        row = self.conn.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        if row is None:
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)",
                              (str(SCHEMA_VERSION),))
        elif int(row[0]) == 2:
            self._upgrade_from_2()
        elif int(row[0]) != SCHEMA_VERSION:
            raise DatabaseError(f"{self.path}: schema version {row[0]}, this tensortune "
                                f"reads version {SCHEMA_VERSION}")

    def _upgrade_from_2(self) -> None:
        """Add the source column. Its records keep ``source`` None: timed by some earlier
        code generator, which ``tt.compile`` treats as a reason to time them again."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:   # another process may have upgraded it between our read and our lock
            row = self.conn.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            if int(row[0]) == 2:
                self.conn.execute("ALTER TABLE records ADD COLUMN source TEXT")
                self.conn.execute("UPDATE meta SET value=? WHERE key='version'",
                                  (str(SCHEMA_VERSION),))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def add_workload(self, hash_: str, name: str, text: str, flops: float) -> None:
        self.conn.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?)",
                          (hash_, name, text, flops))

    def add(self, rec: TuningRecord) -> bool:
        """Store one record (its own transaction). False if the program was already there."""
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO records (workload, target, program, trace, latencies, "
            "latency, error_kind, error_msg, build_seconds, target_desc, created, features, "
            "source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rec.workload, rec.target, rec.program, rec.trace, json.dumps(rec.latencies),
             rec.latency if rec.ok else None, rec.error_kind, rec.error_msg,
             rec.build_seconds, rec.target_desc, rec.created, json.dumps(rec.features),
             rec.source))
        return cur.rowcount == 1

    def update_timing(self, rec: TuningRecord) -> None:
        """Replace the stored timing, error and source hash of ``rec``'s program (same
        workload and target) with ``rec``'s: a re-timing of the best candidates, or a
        check that one of them failed later."""
        self.conn.execute(
            "UPDATE records SET latencies=?, latency=?, error_kind=?, error_msg=?, source=? "
            "WHERE workload=? AND target=? AND program=?",
            (json.dumps(rec.latencies), rec.latency if rec.ok else None, rec.error_kind,
             rec.error_msg, rec.source, rec.workload, rec.target, rec.program))

    # ------------------------------------------------------------------ reads
    def _records(self, where: str, args: tuple, tail: str = "") -> list[TuningRecord]:
        rows = self.conn.execute(
            "SELECT workload, target, trace, program, latencies, error_kind, error_msg, "
            f"build_seconds, target_desc, created, features, source FROM records WHERE "
            f"{where} {tail}", args)
        return [TuningRecord(w, t, tr, p, json.loads(lat or "[]"), ek, em, bs, td, cr,
                             json.loads(ft or "[]"), src)
                for w, t, tr, p, lat, ek, em, bs, td, cr, ft, src in rows]

    def top_k(self, workload: str, target: str, k: int) -> list[TuningRecord]:
        """The k fastest correct records, fastest first."""
        return self._records("workload=? AND target=? AND latency IS NOT NULL",
                             (workload, target), f"ORDER BY latency LIMIT {int(k)}")

    def records(self, workload: str | None = None,
                target: str | None = None) -> list[TuningRecord]:
        conds, args = ["1=1"], []
        if workload is not None:
            conds.append("workload=?")
            args.append(workload)
        if target is not None:
            conds.append("target=?")
            args.append(target)
        return self._records(" AND ".join(conds), tuple(args), "ORDER BY id")

    def timings(self, target: str, exclude: str | None = None
                ) -> dict[str, list[tuple[float, str]]]:
        """(latency, features as their stored JSON text) of every record for ``target``,
        by workload (``exclude`` left out), the workloads in ``workloads()``'s order (by
        name) and each one's records in the order they were stored; a failed record's
        latency is inf. Reads two columns, not the traces, and leaves the features
        undecoded: a transfer model trains on a sample of a database that may hold tens
        of thousands of records, and reading and decoding 47,500 took 1.15 s.

        Example:
            >>> rows = db.timings(target.fingerprint(), exclude=func.structural_hash())
            >>> lat, features = rows[wl][0][0], json.loads(rows[wl][0][1])
        """
        where, args = ("r.target=?", (target,)) if exclude is None else \
            ("r.target=? AND r.workload!=?", (target, exclude))
        rows = self.conn.execute(
            "SELECT r.workload, r.latency, r.features FROM records r JOIN workloads w ON "
            f"w.hash = r.workload WHERE {where} ORDER BY w.name, w.hash, r.id", args)
        out: dict[str, list[tuple[float, str]]] = {}
        for w, lat, ft in rows:
            out.setdefault(w, []).append((float("inf") if lat is None else float(lat),
                                          ft or "[]"))
        return out

    def programs(self, workload: str, target: str) -> set[str]:
        rows = self.conn.execute("SELECT program FROM records WHERE workload=? AND target=?",
                                 (workload, target))
        return {r[0] for r in rows}

    def count(self, workload: str | None = None, target: str | None = None) -> int:
        q = "SELECT COUNT(*) FROM records WHERE (? IS NULL OR workload=?) AND " \
            "(? IS NULL OR target=?)"
        return int(self.conn.execute(q, (workload, workload, target, target)).fetchone()[0])

    def targets(self, workload: str) -> dict[str, str]:
        rows = self.conn.execute("SELECT DISTINCT target, target_desc FROM records WHERE "
                                 "workload=?", (workload,))
        return {t: d for t, d in rows}

    def workloads(self) -> list[tuple[str, str, float, int]]:
        """(hash, name, flops, number of records) of every workload."""
        rows = self.conn.execute(
            "SELECT w.hash, w.name, w.flops, COUNT(r.id) FROM workloads w LEFT JOIN records r "
            "ON r.workload = w.hash GROUP BY w.hash ORDER BY w.name")
        return list(rows)

    def workload_text(self, hash_: str) -> tuple[str, str] | None:
        row = self.conn.execute("SELECT name, text FROM workloads WHERE hash=?",
                                (hash_,)).fetchone()
        return None if row is None else (row[0], row[1])

    def find_workloads(self, name: str) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT hash FROM workloads WHERE name=?",
                                                (name,))]

    def has_name_ending(self, suffix: str) -> bool:
        """Whether some workload's name ends with ``suffix`` (a form's, ``_winograd4``)."""
        return self.conn.execute("SELECT 1 FROM workloads WHERE substr(name, ?) = ? LIMIT 1",
                                 (-len(suffix), suffix)).fetchone() is not None

    # ------------------------------------------------------------------ JSON lines
    def export_jsonl(self, path: str | Path) -> int:
        """Write every workload and record as JSON lines; returns how many records."""
        n = 0
        with _open_text(path, "w") as f:
            for h, name, flops, _ in self.workloads():
                text = self.workload_text(h)
                f.write(json.dumps({"workload": h, "name": name, "flops": flops,
                                    "text": text[1] if text else ""}) + "\n")
            for rec in self.records():
                f.write(json.dumps({"record": asdict(rec)}) + "\n")
                n += 1
        return n

    def import_jsonl(self, path: str | Path) -> int:
        """Add the records of an export; returns how many were new."""
        n = 0
        try:
            with _open_text(path, "r") as f:
                for i, line in enumerate(f, 1):
                    n += self._import_line(line, f"{path}:{i}")
        except UnicodeDecodeError as e:
            # (Decoded a block at a time: which line is not known.)
            raise DatabaseError(f"{path}: not a tensortune export: not UTF-8 text "
                                f"({e.reason})") from e
        return n

    def _import_line(self, line: str, where: str) -> int:
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise TypeError(f"a JSON object per line, got {type(obj).__name__}")
            if "record" in obj:
                return int(self.add(TuningRecord(**obj["record"])))
            self.add_workload(obj["workload"], obj["name"], obj["text"], obj["flops"])
            return 0
        except KeyError as e:
            raise DatabaseError(
                f"{where}: not a tensortune export line (no field {e}; a line holds a "
                "record, or a workload with workload, name, text and flops)") from e
        except (json.JSONDecodeError, TypeError) as e:
            raise DatabaseError(f"{where}: not a tensortune export line ({e})") from e


def _open_text(path: str | Path, mode: str) -> IO[str]:
    """``open(path, mode)``, or a DatabaseError that says which file and why."""
    try:
        return open(path, mode, encoding="utf-8")
    except OSError as e:
        raise DatabaseError(f"cannot {'read' if mode == 'r' else 'write'} {path}: "
                            f"{e.strerror or e}") from e
