"""The tuning database (SQLite by default; records are plain JSON)."""

from .database import Database, DatabaseError, TuningRecord

__all__ = ["Database", "DatabaseError", "TuningRecord"]
