"""A user's rerun of a study beside the committed results: `python -m verify.study compare
STUDY --out DIR` (issue 44).

Both stores are read by the study's own report (its effects table, of the runs the grid and any
sequential plan ask for). Rows are matched by their settings and network; for each the table
gives both means of every metric and their difference, and both verdicts. Training is float32
and its last digits differ between machines, so a metric is called the same where the two means
agree to `TOLERANCE` (absolute); a verdict is the same where its outcome and agreement are.
Runs only one store holds are counted, not compared.
"""

from __future__ import annotations

from pathlib import Path

from verify.studies import grids, staged

TOLERANCE = 1e-3  # of a mean R² or accuracy: well above float32 training's spread between machines
VERDICT_COLUMNS = ("effect_vs_random", "effect", "agrees")


def table_of(name: str, scale: str, out: Path) -> dict:
    """The study's report of the store in `out`."""
    return staged.study_table(name, scale, out)[1]


def compare(name: str, scale: str, mine: Path, reference: Path | None = None) -> dict:
    """Row by row, the metrics and verdicts of the store in `mine` against `reference` (by
    default the committed store shipped with the package)."""
    reference = reference or grids.PACKAGED_RESULTS_DIR / Path(name).stem / scale
    if not (reference / "study.sqlite").is_file():
        raise grids.UsageError(f"no committed {scale}-scale store of {name} to compare with ({reference})")
    ours, theirs = table_of(name, scale, mine), table_of(name, scale, reference)
    def key(row, table):
        return tuple(str(row.get(k)) for k in table["group_by"]) + (str(row.get("network")),)
    by_ref = {key(r, theirs): r for r in theirs["rows"]}
    lines, unmatched = [], 0
    for row in ours["rows"]:
        ref = by_ref.get(key(row, ours))
        if ref is None:
            unmatched += 1
            continue
        metrics = {}
        for column in row:
            a, b = row.get(column), ref.get(column)
            if column.endswith("_mean") and isinstance(a, int | float) and isinstance(b, int | float):
                metrics[column.removesuffix("_mean")] = dict(yours=a, committed=b, difference=a - b,
                                                             same=abs(a - b) <= TOLERANCE)
        verdicts = {c: dict(yours=row.get(c), committed=ref.get(c),
                            same=_outcome(row.get(c)) == _outcome(ref.get(c)))
                    for c in VERDICT_COLUMNS if row.get(c) is not None or ref.get(c) is not None}
        lines.append(dict(settings={k: row.get(k) for k in ours["group_by"]}, network=row.get("network"),
                          runs=dict(yours=row["runs"], committed=ref["runs"]), metrics=metrics,
                          verdicts=verdicts))
    return dict(study=ours["study"], scale=scale, yours=str(mine), committed=str(reference),
                tolerance=TOLERANCE, rows=lines, rows_only_yours=unmatched,
                rows_only_committed=len(theirs["rows"]) - len(lines),
                runs=dict(yours=ours["runs_done"], committed=theirs["runs_done"]))


def _outcome(cell) -> str | None:
    """An effect cell's outcome ('+0.126 (helps)' → 'helps'), or the cell (agrees: yes)."""
    if isinstance(cell, str) and cell.endswith(")") and "(" in cell:
        return cell[cell.rindex("(") + 1:-1]
    return cell


def format_comparison(c: dict) -> str:
    differ = [r for r in c["rows"] if not all(m["same"] for m in r["metrics"].values())
              or not all(v["same"] for v in r["verdicts"].values())]
    lines = [f"{c['study']} ({c['scale']}): your store {c['yours']} ({c['runs']['yours']} runs) against the "
             f"committed {c['committed']} ({c['runs']['committed']} runs): {len(c['rows'])} rows in both, "
             f"{len(c['rows']) - len(differ)} the same (means within {c['tolerance']:g}, the same verdicts)"
             + (f"; {c['rows_only_yours']} rows only in yours" if c["rows_only_yours"] else "")
             + (f"; {c['rows_only_committed']} only in the committed" if c["rows_only_committed"] else "")]
    for r in differ:
        where = ", ".join(f"{k} {v}" for k, v in r["settings"].items()) + f", {r['network']}"
        parts = [f"{m} {d['yours']:.4f} vs {d['committed']:.4f}" for m, d in r["metrics"].items()
                 if not d["same"]]
        parts += [f"{v}: {d['yours']} vs {d['committed']}" for v, d in r["verdicts"].items() if not d["same"]]
        runs = f"{r['runs']['yours']} vs {r['runs']['committed']} runs"
        lines.append(f"- {where} ({runs}): " + "; ".join(parts))
    return "\n".join(lines)
