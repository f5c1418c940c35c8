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

A file that is not such a store (empty, truncated, random bytes, a `runs` table without the
columns this code reads, a value that is not the JSON it should be, a report in a format this
code's readers do not know) is refused with one line naming the file (StoreError, a usage
error: exit 2), and is left as it was: it is checked through a connection that cannot create
or write before anything is written.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sqlite3
import time
from pathlib import Path

from verify.cli import UsageError

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
# The columns every store has had since the first: without one, the file is not a store this code reads.
BASE_COLUMNS = ("key", "study", "scale", "config", "status", "report", "error", "seconds", "attempts",
                "updated")


class StoreError(UsageError):
    """A file that is not a study store this code can read: one line naming it (exit 2)."""

    def __init__(self, path: str | Path, what: str):
        super().__init__(f"study store {path}: {what}")


class ReportFormatError(UsageError):
    """A stored report that a reader of this code cannot read (reads_report). It is a
    UsageError of its own, and `reading` adds the store's path where the caller knows it."""


def reads_report(read):
    """Mark `read` as a reader of stored reports: what a report of another format makes it
    raise (a missing key, a value of another type) becomes ReportFormatError, not a traceback."""
    @functools.wraps(read)
    def reader(*args, **kwargs):
        try:
            return read(*args, **kwargs)
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            detail = f"no key {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
            raise ReportFormatError(f"a stored report is not in the format this code reads ({detail}); "
                                    "was it written by another version of this project?") from e
    return reader


@contextlib.contextmanager
def reading(path: str | Path):
    """Name the store at `path` in the ReportFormatError its readers raise within the block."""
    try:
        yield
    except StoreError:
        raise
    except ReportFormatError as e:
        raise StoreError(path, str(e)) from e


def config_key(config: dict) -> str:
    """A stable hash of a configuration: canonical JSON (sorted keys, no spaces), SHA-256."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


class RunStore:
    def __init__(self, path: str | Path, *, readonly: bool = False):
        """Open (creating and migrating) the store at `path`; with `readonly`, open an
        existing store without writing to it (no table created, no column added). An existing
        file is checked before anything is written to it (StoreError if it is not a store)."""
        self.path = Path(path)
        self.readonly = readonly
        existed = self.path.exists()
        if existed and self.path.is_file() and self.path.stat().st_size == 0:
            # SQLite would take an empty file for an empty database, and a writer would make it one.
            raise StoreError(self.path, "empty (0 bytes), not a study store; delete it to start afresh")
        if readonly or existed:
            self.db = self._connect("ro" if readonly else "rw")
            try:
                self.columns = self._check_columns()
                if not readonly:
                    self._check_sound()
            except StoreError:
                self.db.close()  # the caller's `with` never starts
                raise
        else:  # a new store: SQLite creates the file
            self.db = self._connect("rwc")
        if not readonly:
            self.db.execute("PRAGMA synchronous = FULL")
            with self._transaction():
                self.db.execute(SCHEMA)
                self._migrate()
            self.columns = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}

    def _connect(self, mode: str) -> sqlite3.Connection:
        """A connection in SQLite's `mode` (ro; rw, which never creates the file; rwc), with
        explicit transactions."""
        try:
            return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode={mode}", uri=True, timeout=60,
                                   isolation_level=None)
        except sqlite3.DatabaseError as e:
            raise StoreError(self.path, f"cannot be opened ({e})") from None

    def _check_columns(self) -> set[str]:
        """The runs table's columns, once they hold every column this code reads (else StoreError)."""
        have = {row[1] for row in self._read("PRAGMA table_info(runs)")}
        if not have:
            raise StoreError(self.path, "no `runs` table: not a study store")
        missing = [c for c in BASE_COLUMNS if c not in have]
        if missing:
            raise StoreError(self.path, f"its `runs` table lacks the column(s) {', '.join(missing)} that "
                                        f"this code reads (it has {', '.join(sorted(have))}): not a study "
                                        "store this code can read")
        return have

    def _check_sound(self) -> None:
        """StoreError unless SQLite finds every page of the file sound: a writer checks before
        it migrates (a read-only reader finds damage where it reads, and writes nothing)."""
        found = [line for (line,) in self._read("PRAGMA quick_check")]
        if found != ["ok"]:
            raise StoreError(self.path, f"not a sound SQLite database (its check found: {found[0]})")

    def _read(self, query: str, params: tuple = ()) -> list[tuple]:
        """The rows of a read query; a file SQLite cannot read (random bytes, truncated) is a
        StoreError, not a traceback."""
        try:
            return self.db.execute(query, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(self.path, _unreadable(self.path, e)) from None

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
        return dict(self._read("SELECT key, status FROM runs"))

    def fingerprints(self) -> dict[str, str | None]:
        """Each run's code fingerprint (None: made before runs recorded their code, or not finished)."""
        if "code_fingerprint" not in self.columns:
            return dict.fromkeys(self.statuses())
        return dict(self._read("SELECT key, code_fingerprint FROM runs"))

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
             behaviour, attested) in self._read(query + " ORDER BY rowid", params):
            out.append(dict(key=key, study=study, scale=scale, config=self._json(key, "config", config, dict),
                            status=st, report=self._json(key, "report", report, dict), error=error,
                            seconds=seconds, attempts=attempts, code_version=version,
                            code_fingerprint=fingerprint,
                            behaviour=self._json(key, "behaviour", behaviour, dict),
                            attested=self._json(key, "attested", attested or None, list) or []))
        return out

    def _json(self, key: str, column: str, text: str | None, kind: type):
        """A JSON column's value (None stays None), which must decode to `kind` (else StoreError)."""
        if text is None:
            return None
        try:
            value = json.loads(text)
        except (ValueError, TypeError) as e:  # TypeError: a value stored as a number or blob
            raise StoreError(self.path, f"run {key}: its {column} is not JSON ({e})") from None
        if not isinstance(value, kind):
            what = "an object" if kind is dict else "a list"
            raise StoreError(self.path, f"run {key}: its {column} is JSON but not {what}")
        return value


def _unreadable(path: Path, e: sqlite3.DatabaseError) -> str:
    """Why SQLite cannot read the file: a driver killed mid-write (its journal is still beside
    it, and a read-only open may not roll it back), or a file that is not a sound database."""
    if getattr(e, "sqlite_errorname", "") == "SQLITE_READONLY_ROLLBACK":
        return (f"a driver was killed while writing it ({path.name}-journal is beside it): the next "
                "`run` into its folder rolls that write back; reading does not write")
    return f"not a readable SQLite database ({e})"


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
