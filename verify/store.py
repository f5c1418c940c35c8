"""A study's results: one SQLite row per run, keyed by a hash of its resolved configuration.

Only the driver writes, and every change is its own transaction: a run is marked
`running` when it is handed to a worker, then `done` (with its verify.sgd report) or
`failed` (with the error text). A driver killed at any moment leaves a consistent file
(SQLite's journal rolls back a half-written transaction); runs it left `running` are
simply not done, and the next invocation starts them again.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key      TEXT PRIMARY KEY,   -- config_key(config)
    study    TEXT NOT NULL,
    scale    TEXT NOT NULL,
    config   TEXT NOT NULL,      -- JSON: the resolved configuration
    status   TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    report   TEXT,               -- JSON: verify.sgd's report, when done
    error    TEXT,               -- when failed
    seconds  REAL,               -- the run's own wall time
    attempts INTEGER NOT NULL DEFAULT 0,
    updated  REAL NOT NULL       -- Unix time of the last change
)
"""
STATUSES = ("running", "done", "failed")


def config_key(config: dict) -> str:
    """A stable hash of a configuration: canonical JSON (sorted keys, no spaces), SHA-256."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


class RunStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)  # explicit transactions
        self.db.execute("PRAGMA synchronous = FULL")
        with self._transaction():
            self.db.execute(SCHEMA)

    def _transaction(self):
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def statuses(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, status FROM runs"))

    def start(self, key: str, study: str, scale: str, config: dict) -> None:
        with self._transaction():
            self.db.execute(
                "INSERT INTO runs (key, study, scale, config, status, attempts, updated) "
                "VALUES (?, ?, ?, ?, 'running', 1, ?) ON CONFLICT(key) DO UPDATE SET "
                "status = 'running', error = NULL, attempts = attempts + 1, updated = excluded.updated",
                (key, study, scale, json.dumps(config, sort_keys=True), time.time()))

    def finish(self, key: str, report: dict, seconds: float) -> None:
        from verify.cli import to_json  # strict JSON: a non-finite metric is stored as null

        with self._transaction():
            self.db.execute("UPDATE runs SET status = 'done', report = ?, error = NULL, seconds = ?, "
                            "updated = ? WHERE key = ?", (to_json(report), seconds, time.time(), key))

    def fail(self, key: str, error: str, seconds: float) -> None:
        with self._transaction():
            self.db.execute("UPDATE runs SET status = 'failed', error = ?, seconds = ?, updated = ? "
                            "WHERE key = ?",
                            (error, seconds, time.time(), key))

    def rows(self, status: str | None = None) -> list[dict]:
        """Every run (or those with `status`), config and report decoded, oldest first."""
        query = "SELECT key, study, scale, config, status, report, error, seconds, attempts FROM runs"
        params: tuple = ()
        if status is not None:
            query, params = query + " WHERE status = ?", (status,)
        out = []
        for key, study, scale, config, st, report, error, seconds, attempts in self.db.execute(
                query + " ORDER BY rowid", params):
            out.append(dict(key=key, study=study, scale=scale, config=json.loads(config), status=st,
                            report=None if report is None else json.loads(report), error=error,
                            seconds=seconds, attempts=attempts))
        return out


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any exception (Ctrl-C included)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return False
