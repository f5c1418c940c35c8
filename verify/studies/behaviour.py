"""Provenance by behaviour, not bytes: whether the code installed now computes what a stored
run's code computed.

A run records its code fingerprint (a hash of the source of every module it rests on:
verify.studies.provenance.code_fingerprint). Equal fingerprints mean the same code. But any
edit, a renamed helper or a comment, changes the hash, although no number moves; marking
every store stale then punishes refactoring. So each run also records its behaviour: a few
numbers its program computes from the run's own configuration that any change to training
or scoring would move (verify.sgd's `behaviour`: the split, the learning-rate schedule,
every network's metrics before training, and the students' first training losses;
verify.images.train's: the split, the model's size, its first training losses, and the
generation, probes and judge on a few prompts after them). A run
whose fingerprint differs from the installed code's is then judged by replaying that
record with the installed code:

- current: the same fingerprint, or the replay matches the stored record within RTOL
  (float32 training on another CPU's BLAS differs by a few ulps: 1e-6 relative covers it
  with room, and a changed constant, data stream or metric moves these numbers by far more);
- other: the replay differs (the report says the first number that does), or the run has
  no record and another fingerprint;
- unknown: the run recorded no code at all (stored before runs did).

A program without a `behaviour` function is judged by its fingerprint alone. Replays are
cached per (run key, its fingerprint, the installed code's fingerprint) in the user's cache
folder (XDG_CACHE_HOME, else ~/.cache), so a store is replayed once per version of the code.
Runs made by the installed code before runs recorded their behaviour can have it recorded
now (`record_missing`, `verify.study record-behaviour STUDY`): the fingerprint proves the code
that made them is the code recording it; runs of other code can only be attested by a rerun.
A verify.sgd record costs 0.05–4 s a run (8 tasks a side, a cut sup-error search, the students'
first 4 training losses, the learning rate at 0, 5, 25, 50 and 100% of the run); a
verify.images.train record (4 prompts a side generated in 2 steps after the first 4 losses)
about 1 s a run for the tiny preset. tests/test_behaviour.py tests both directions on real
edits of a copy of the code: a renamed helper plus a comment keeps a store current, a loss
halved marks every run.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from verify.studies.grids import PROGRAMS
from verify.studies.store import RunStore

RTOL = 1e-6
ATOL = 1e-12
CURRENT, OTHER, UNKNOWN = "current", "other", "unknown"


def has_behaviour(program: str) -> bool:
    return hasattr(PROGRAMS[program].load(), "behaviour")


def record(program: str, config: dict) -> dict[str, list[float]] | None:
    """The behaviour record of the run of `program` whose key is `config` (a resolved
    configuration, as run_config gives it and a store keeps it; None: the program has none)."""
    module = PROGRAMS[program].load()
    if not hasattr(module, "behaviour"):
        return None
    behaviour = module.behaviour(module.from_key(config))
    return {name: [float(v) for v in values] for name, values in behaviour.items()}


def difference(stored: dict, replayed: dict, rtol: float = RTOL, atol: float = ATOL) -> str | None:
    """None when the two records agree (the same names, lengths, and every number within
    rtol·|stored| + atol, nan matching nan); else where they first differ, in words."""
    if set(stored) != set(replayed):
        gone, new = sorted(set(stored) - set(replayed)), sorted(set(replayed) - set(stored))
        return f"records differ in what they hold (only stored: {gone}; only now: {new})"
    for name in sorted(stored):
        a, b = stored[name], replayed[name]
        if len(a) != len(b):
            return f"{name}: {len(a)} numbers stored, {len(b)} now"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            x, y = (math.nan if v is None else float(v) for v in (x, y))
            if math.isnan(x) and math.isnan(y):
                continue
            if not abs(x - y) <= rtol * abs(x) + atol:
                return f"{name}[{i}]: {x!r} stored, {y!r} now"
    return None


def _cache_path() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "compgen-bound" / "behaviour.json"


def _load_cache() -> dict:
    try:
        return json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict) -> None:
    from verify.cli import write_text_atomic

    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(cache, sort_keys=True))
    except OSError:
        pass  # a read-only home: replays are simply not remembered


def replay_difference(program: str, run: dict, fingerprint: str, cache: dict) -> str:
    """Where the installed code (of `fingerprint`) first differs from the run's stored record
    when it replays it ("" where it agrees), cached in `cache` (the user's cache folder's,
    _load_cache(), read once by the caller) and saved there after each new replay."""
    slot = f"{run['key']}:{run['code_fingerprint']}:{fingerprint}"
    if slot not in cache:
        cache[slot] = difference(run["behaviour"], record(program, run["config"])) or ""
        _save_cache(cache)
    return cache[slot]


class Judge:
    """Each run's code status against the installed code (module docstring), its replays
    cached. `why[key]` says why a run is `other` when a replay says so."""

    def __init__(self, program: str, fingerprint: str):
        self.program, self.fingerprint = program, fingerprint
        self.why: dict[str, str] = {}
        self._cache: dict | None = None  # read on the first replay

    def __call__(self, run: dict) -> str:
        made_by = run.get("code_fingerprint")
        if made_by is None:
            return UNKNOWN
        if made_by == self.fingerprint or self.fingerprint in run.get("attested", ()):
            return CURRENT
        stored = run.get("behaviour")
        if not stored or not has_behaviour(self.program):
            return OTHER
        if self._cache is None:
            self._cache = _load_cache()
        why = replay_difference(self.program, run, self.fingerprint, self._cache)
        if why:
            self.why[run["key"]] = why
            return OTHER
        return CURRENT


def record_missing(program: str, store_path: Path, fingerprint: str, progress: bool | None = None) -> dict:
    """Record the behaviour of every done run in the store that the installed code made (its
    fingerprint equals `fingerprint`) and that has no record: the fingerprint proves this is
    the code that made it. Runs made by other or unknown code are left as they are (only a
    rerun can attest them). Returns the counts."""
    from verify.cli import progress as progress_bar

    if not has_behaviour(program):
        return dict(recorded=0, had=0, other_code=0, program_has_none=True)
    with RunStore(store_path) as store:
        done = store.rows(status="done")
        todo = [r for r in done if r["code_fingerprint"] == fingerprint and not r["behaviour"]]
        other = sum(r["code_fingerprint"] != fingerprint and not r["behaviour"] for r in done)
        counts = dict(recorded=0, had=sum(bool(r["behaviour"]) for r in done), other_code=other,
                      program_has_none=False)
        bar = progress_bar(len(todo), "behaviour records", progress, unit="run")
        for r in todo:
            store.set_behaviour(r["key"], record(program, r["config"]))
            counts["recorded"] += 1
            bar.update(1)
        bar.close()
    return counts


def attest(program: str, store_path: Path, fingerprint: str, progress: bool | None = None) -> dict:
    """Replay the behaviour record of every done run made by other code, and mark in the store
    each one the installed code (of `fingerprint`) reproduces: the store then says which code
    was shown to compute what each run computed, and a reader of that code (a fresh clone, CI)
    judges it current without replaying. Returns the counts, with why each that differs does."""
    from verify.cli import progress as progress_bar

    counts = dict(attested=0, already=0, differ={}, no_record=0)
    if not has_behaviour(program):
        return counts
    with RunStore(store_path) as store:
        todo = []
        for r in store.rows(status="done"):
            if r["code_fingerprint"] == fingerprint or fingerprint in r["attested"]:
                counts["already"] += 1
            elif not r["behaviour"] or r["code_fingerprint"] is None:
                counts["no_record"] += 1
            else:
                todo.append(r)
        bar = progress_bar(len(todo), "replays", progress, unit="run")
        cache = _load_cache()
        for r in todo:
            why = replay_difference(program, r, fingerprint, cache)
            if why:
                counts["differ"][r["key"]] = why
            else:
                store.attest(r["key"], fingerprint)
                counts["attested"] += 1
            bar.update(1)
        bar.close()
    return counts
