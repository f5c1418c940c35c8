"""A study's results: one SQLite row per run, keyed by a hash of its resolved configuration.

Only the driver writes, and every change is its own transaction: a run is marked
`running` when it is handed to a worker, then `done` (with its verify.sgd report) or
`failed` (with the error text). A driver killed at any moment leaves a consistent file
(SQLite's journal rolls back a half-written transaction); runs it left `running` are
simply not done, and the next invocation starts them again.

Each finished or failed run also records the code that made it: the project's version
and verify.study's fingerprint of the modules that train and score a run, and its behaviour
record (verify.studies.behaviour: the numbers a later version of the code replays to show it
computes the same). Stores written before runs recorded these get the columns on first
writable open (an ALTER TABLE adding nullable columns); their rows read None there, "code
unknown", "no record". A store opened read-only (`report`, `list`, the figures: a committed
store may sit in a read-only install) is never altered, and its missing columns read None too.

Running a study again skips what is done (real output, the smoke scale: 2 runs of 20 steps):

    $ python -m verify.study run task-support --scale smoke
    task-support (smoke, ray): 2 runs; 2 done now, 0 already done, 0 failed (5 s)
    store: verify/studies/results/task-support/smoke/study.sqlite
    $ python -m verify.study run task-support --scale smoke
    task-support (smoke, ray): 2 runs; 0 done now, 2 already done, 0 failed (0 s)

A driver killed with SIGKILL leaves a consistent store (tested: SQLite's integrity check, then
the next invocation runs only the missing runs); a pack's members are stored one row each,
marked `packed_with`.
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
    updated  REAL NOT NULL,      -- Unix time of the last change
    code_version     TEXT,       -- the project's version that made the result (NULL: unknown)
    code_fingerprint TEXT,       -- verify.studies.provenance.code_fingerprint() of that code (NULL: unknown)
    behaviour        TEXT,       -- JSON: the run's behaviour record (verify.studies.behaviour; NULL: none)
    attested         TEXT        -- JSON: fingerprints of later code that replayed that record (NULL: none)
)
"""
STATUSES = ("running", "done", "failed")
# Columns added after the first stores were written: (name, type), nullable, added by migrate().
ADDED_COLUMNS = (("code_version", "TEXT"), ("code_fingerprint", "TEXT"), ("behaviour", "TEXT"),
                 ("attested", "TEXT"))


def config_key(config: dict) -> str:
    """A stable hash of a configuration: canonical JSON (sorted keys, no spaces), SHA-256."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


class RunStore:
    def __init__(self, path: str | Path, *, readonly: bool = False):
        """Open (creating and migrating) the store at `path`; with `readonly`, open an
        existing store without writing to it (no table created, no column added)."""
        self.path = Path(path)
        self.readonly = readonly
        if readonly:
            self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60,
                                      isolation_level=None)
        else:
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)  # explicit transactions
            self.db.execute("PRAGMA synchronous = FULL")
            with self._transaction():
                self.db.execute(SCHEMA)
                self._migrate()
        self.columns = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}

    def _migrate(self) -> None:
        """Add the columns a store written by older code lacks (nullable: old rows read None)."""
        have = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}
        for name, kind in ADDED_COLUMNS:
            if name not in have:
                self.db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")

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

    def fingerprints(self) -> dict[str, str | None]:
        """Each run's code fingerprint (None: made before runs recorded their code, or not finished)."""
        if "code_fingerprint" not in self.columns:
            return dict.fromkeys(self.statuses())
        return dict(self.db.execute("SELECT key, code_fingerprint FROM runs"))

    def start(self, key: str, study: str, scale: str, config: dict) -> None:
        with self._transaction():
            self.db.execute(
                "INSERT INTO runs (key, study, scale, config, status, attempts, updated) "
                "VALUES (?, ?, ?, ?, 'running', 1, ?) ON CONFLICT(key) DO UPDATE SET "
                "status = 'running', error = NULL, attempts = attempts + 1, updated = excluded.updated, "
                "code_version = NULL, code_fingerprint = NULL, behaviour = NULL, attested = NULL",
                (key, study, scale, json.dumps(config, sort_keys=True), time.time()))

    def finish(self, key: str, report: dict, seconds: float, *, version: str | None = None,
               fingerprint: str | None = None, behaviour: dict | None = None) -> None:
        """Mark the run done with its report, the code that made it (None: unknown) and its
        behaviour record (None: none)."""
        from verify.cli import to_json  # strict JSON: a non-finite metric is stored as null

        with self._transaction():
            self.db.execute("UPDATE runs SET status = 'done', report = ?, error = NULL, seconds = ?, "
                            "updated = ?, code_version = ?, code_fingerprint = ?, behaviour = ? "
                            "WHERE key = ?",
                            (to_json(report), seconds, time.time(), version, fingerprint,
                             None if behaviour is None else _behaviour_json(behaviour), key))

    def set_behaviour(self, key: str, behaviour: dict) -> None:
        """Record a done run's behaviour (verify.studies.behaviour.record_missing)."""
        with self._transaction():
            self.db.execute("UPDATE runs SET behaviour = ? WHERE key = ? AND status = 'done'",
                            (_behaviour_json(behaviour), key))

    def attest(self, key: str, fingerprint: str) -> None:
        """Record that the code of `fingerprint` replayed the done run's behaviour record within
        verify.studies.behaviour's tolerance (verify.studies.behaviour.attest)."""
        with self._transaction():
            (attested,) = self.db.execute("SELECT attested FROM runs WHERE key = ?", (key,)).fetchone()
            known = json.loads(attested) if attested else []
            if fingerprint not in known:
                self.db.execute("UPDATE runs SET attested = ? WHERE key = ? AND status = 'done'",
                                (json.dumps(known + [fingerprint]), key))

    def fail(self, key: str, error: str, seconds: float, *, version: str | None = None,
             fingerprint: str | None = None) -> None:
        with self._transaction():
            self.db.execute("UPDATE runs SET status = 'failed', error = ?, seconds = ?, updated = ?, "
                            "code_version = ?, code_fingerprint = ? WHERE key = ?",
                            (error, seconds, time.time(), version, fingerprint, key))

    def rows(self, status: str | None = None) -> list[dict]:
        """Every run (or those with `status`), config and report decoded, oldest first;
        code_version and code_fingerprint are None where the code is unknown; `attested` lists
        the fingerprints of later code that replayed the run's behaviour record."""
        code = [c if c in self.columns else f"NULL AS {c}" for c, _ in ADDED_COLUMNS]
        query = ("SELECT key, study, scale, config, status, report, error, seconds, attempts, "
                 f"{', '.join(code)} FROM runs")
        params: tuple = ()
        if status is not None:
            query, params = query + " WHERE status = ?", (status,)
        out = []
        for (key, study, scale, config, st, report, error, seconds, attempts, version, fingerprint,
             behaviour, attested) in self.db.execute(query + " ORDER BY rowid", params):
            out.append(dict(key=key, study=study, scale=scale, config=json.loads(config), status=st,
                            report=None if report is None else json.loads(report), error=error,
                            seconds=seconds, attempts=attempts, code_version=version,
                            code_fingerprint=fingerprint,
                            behaviour=None if behaviour is None else json.loads(behaviour),
                            attested=json.loads(attested) if attested else []))
        return out


def _behaviour_json(behaviour: dict) -> str:
    """A behaviour record as JSON: nan (a metric a side could not take) as null."""
    return json.dumps({k: [None if v != v else v for v in values] for k, values in behaviour.items()},
                      sort_keys=True, allow_nan=False)


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any exception (Ctrl-C included)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return False
