"""What a study's store holds, as `list`, `run`, `report` and the README's blocks say it: the
runs done and failed, and those made by other or unknown code (verify.studies.behaviour)."""

from __future__ import annotations

from pathlib import Path

from verify.studies import behaviour, provenance
from verify.studies.grids import Run
from verify.studies.store import RunStore


def n_done(s: dict) -> int:
    return s["done"] + s["already_done"]


def stale_line(n_stale: int, n_all: int, n_unknown: int, others: list[str], current: str,
               rerun: str = "--rerun-stale") -> str:
    """The line `run` and `report` print when stored results were made by other or unknown code."""
    parts = []
    if n_stale - n_unknown:
        parts.append(f"{n_stale - n_unknown} by other code (fingerprint "
                     f"{', '.join(provenance.short(f) for f in others)})")
    if n_unknown:
        parts.append(f"{n_unknown} by unknown code (stored before runs recorded their code)")
    # This code's fingerprint is named only beside other fingerprints: a table of unknown
    # code alone (the committed stores) then reads the same whatever code writes it.
    this = f" (fingerprint {provenance.short(current)})" if n_stale - n_unknown else ""
    return (f"{n_stale} of {n_all} done runs were not made by this code{this}: "
            f"{' and '.join(parts)}; rerun them with {rerun}")


def store_counts(runs: list[Run], store: Path) -> dict[str, int]:
    """What `store` holds of the grid `runs` (as it is now): done, failed, done by other or
    unknown code (verify.studies.behaviour), and rows of an earlier grid, only counted."""
    with RunStore(store, readonly=True) as s:
        stored = s.rows()
    keys = {r.key for r in runs}
    rows = [r for r in stored if r["key"] in keys]
    judge = behaviour.Judge(runs[0].program, provenance.code_fingerprint(runs[0].program))
    done = [r for r in rows if r["status"] == "done"]
    return dict(done=len(done), failed=sum(r["status"] == "failed" for r in rows),
                stale=sum(judge(r) != behaviour.CURRENT for r in done), earlier=len(stored) - len(rows))
