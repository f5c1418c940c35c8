"""The paper's effects table, read from a study's store without training.

Runs are grouped by every configuration value that varies across the study except the
seed; each row gives, per network, the mean ± sd over seeds of the training and held-out
R² (the paper's estimator) and the number of runs. Where the paper states a number or an
effect for a row, the table puts it beside the measured one and says whether they agree;
a disagreement is reported, not tuned away.

Given the fingerprint of the code now installed, the table also says which runs were made
by other code or by unknown code (stored before runs recorded theirs): a `code` column per
row and a note with how many, so numbers that may predate a change to training or scoring
are never shown as current.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from verify import cli
from verify.store import RunStore

# The paper's held-out R² by encoding (hyperteacher, M = 16, K = 3, MLP).
PAPER_ENCODING_R2 = {"identity": 1.00, "orthogonal": 1.00, "tokens": 1.00, "invertible_nn": 0.95,
                     "interval_shuffle": 0.98, "fewshot": 0.97}
# The paper's task-support effects, against the random support.
PAPER_SUPPORT_EFFECTS = {"non_compositional": "hurts", "unpopular_modules": "hurts",
                         "popular_modules": "no clear effect"}
CONVERGED_R2 = 0.99  # training-task R² a run must reach to count as converged
MIN_EFFECT = 0.01  # the smallest R² difference called an effect, whatever the seeds' spread


def student_rows(report: dict) -> list[dict]:
    """The numbers the table reads from one verify.sgd report, one dict per trained network."""
    out = []
    for row in report["rows"][1:]:
        probe = [v for name, v in (row.get("probe_r2") or []) if name != "encoding" and v is not None]
        out.append(dict(network=row["network"].removeprefix("sgd "), train_r2=row["train_r2"],
                        held_out_r2=row["held_out_r2"], held_out_sup=row["held_out_sup"],
                        sup_ratio=row.get("sgd_over_construction_held_out_sup"),
                        hidden_units=row.get("hidden_units"), parameters=row.get("parameters"),
                        probe_r2=max(probe) if probe else None, n_train=report["split"]["n_train"],
                        **{k: v for k, v in row.items() if k.startswith("k") and k.endswith("_r2")}))
    return out


def mean_sd(values: list) -> tuple[float | None, float | None]:
    """Mean and sample sd (ddof 1; 0 for one value) of the finite values; None, None if none."""
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return None, None
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def code_of(run: dict, fingerprint: str | None) -> str:
    """current, other or unknown: whether `run` was made by the code whose fingerprint is given."""
    if run.get("code_fingerprint") is None:
        return "unknown"
    return "current" if run["code_fingerprint"] == fingerprint else "other"


def _code_cell(codes: list[str]) -> str:
    """A row's runs by the code that made them: `current`, or e.g. `unknown (2 of 2)`."""
    stale = [c for c in codes if c != "current"]
    if not stale:
        return "current"
    return " + ".join(f"{c} ({stale.count(c)} of {len(codes)})" for c in ("other", "unknown") if c in stale)


def effects_table(study: str, scale: str, out: Path, keys: set[str] | None = None,
                  fingerprint: str | None = None) -> dict:
    """The table of the runs in `keys` (the study's grid as it is now), or of every stored
    run; runs of an older grid left in the store are counted, not shown. With `fingerprint`
    (verify.study.code_fingerprint()), runs made by other or unknown code are marked."""
    with RunStore(out / "study.sqlite", readonly=True) as store:
        runs = store.rows()
    old_grid = [r for r in runs if keys is not None and r["key"] not in keys]
    runs = [r for r in runs if keys is None or r["key"] in keys]
    done = [r for r in runs if r["status"] == "done"]
    failed = [r for r in runs if r["status"] == "failed"]
    settings = sorted({k for r in done for k in r["config"]})
    varying = [k for k in settings if k != "seed"
               and len({_hashable(r["config"].get(k)) for r in done}) > 1]
    groups: dict[tuple, list] = {}
    for r in done:
        for s in student_rows(r["report"]):
            group = tuple(_hashable(r["config"].get(k)) for k in varying) + (s["network"],)
            groups.setdefault(group, []).append(s | dict(code=code_of(r, fingerprint)))
    rows = []
    def order(group):  # numbers by value (M = 8 before 16), anything else by its text
        return tuple((0, v, "") if isinstance(v, int | float) else (1, 0, str(v)) for v in group)

    for group, members in sorted(groups.items(), key=lambda kv: order(kv[0])):
        row = dict(zip([*varying, "network"], group, strict=True), runs=len(members))
        row["n_train"] = members[0]["n_train"]
        for metric in ("train_r2", "held_out_r2", "probe_r2", "sup_ratio"):
            row[f"{metric}_mean"], row[f"{metric}_sd"] = mean_sd([m[metric] for m in members])
        row["converged"] = all(m["train_r2"] is not None and m["train_r2"] >= CONVERGED_R2 for m in members)
        if fingerprint is not None:
            row["code"] = _code_cell([m["code"] for m in members])
        rows.append(row)
    notes = []
    other = [r for r in done if code_of(r, fingerprint) == "other"] if fingerprint else []
    unknown = [r for r in done if code_of(r, fingerprint) == "unknown"] if fingerprint else []
    if other or unknown:
        from verify.study import stale_line

        notes.append(stale_line(len(other) + len(unknown), len(done), len(unknown),
                                sorted({r["code_fingerprint"] for r in other}), fingerprint,
                                f"`python -m verify.study run {study} --scale {scale} --rerun-stale`")
                     + "; the `code` column says which rows")
    if "encoding" in varying:
        for row in rows:
            row["paper_held_out_r2"] = PAPER_ENCODING_R2.get(row["encoding"])
        notes.append("paper_held_out_r2: the paper's held-out R² for the encoding (M = 16, K = 3, 4×1024 "
                     "MLP, 300k steps)")
    if "split" in varying:
        _support_effects(rows, notes)
    unconverged = sum(not r["converged"] for r in rows)
    if unconverged:
        notes.append(f"{unconverged} of {len(rows)} rows did not converge (training R² < {CONVERGED_R2} in "
                     "some run): their held-out R² measures an undertrained network too")
    if failed:
        notes.append(f"{len(failed)} runs failed (python -m verify.study export shows each error)")
    if old_grid:
        notes.append(f"{len(old_grid)} stored runs belong to an earlier version of the grid and are left out")
    if keys is not None and len(done) + len(failed) < len(keys):
        missing = len(keys) - len(done) - len(failed)
        notes.append(f"{missing} of the grid's {len(keys)} runs have no result yet")
    columns = [*varying, "network", "runs", "n_train", "train_r2_mean", "train_r2_sd", "held_out_r2_mean",
               "held_out_r2_sd", "probe_r2_mean", "sup_ratio_mean", "converged",
               *[c for c in ("paper_held_out_r2", "paper_effect", "effect_vs_random", "agrees")
                 if any(c in r for r in rows)],
               *(["code"] if other or unknown else [])]
    return dict(study=study, scale=scale, runs_done=len(done), runs_failed=len(failed), group_by=varying,
                columns=columns, rows=rows, notes=notes, code_fingerprint=fingerprint,
                runs_other_code=len(other), runs_unknown_code=len(unknown))


def _support_effects(rows: list[dict], notes: list[str]) -> None:
    """Each support kind against `random`: the difference of mean held-out R², called an
    effect when it is larger than MIN_EFFECT and than twice its standard error."""
    base = {r["network"]: r for r in rows if r.get("split") == "random"}
    for r in rows:
        ref = base.get(r["network"])
        if ref is None or r is ref or r["held_out_r2_mean"] is None or ref["held_out_r2_mean"] is None:
            continue
        diff = r["held_out_r2_mean"] - ref["held_out_r2_mean"]
        se = math.sqrt(r["held_out_r2_sd"] ** 2 / r["runs"] + ref["held_out_r2_sd"] ** 2 / ref["runs"])
        threshold = max(MIN_EFFECT, 2 * se)
        seen = "hurts" if diff < -threshold else "helps" if diff > threshold else "no clear effect"
        r["effect_vs_random"] = f"{diff:+.3f} ({seen})"
        if r["split"] in PAPER_SUPPORT_EFFECTS:
            r["paper_effect"] = PAPER_SUPPORT_EFFECTS[r["split"]]
            r["agrees"] = "yes" if seen == r["paper_effect"] else "NO"
    notes.append(f"effect_vs_random: mean held-out R² minus the random support's; an effect when beyond "
                 f"{MIN_EFFECT} and twice its standard error over seeds")


def _cell(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 100 else f"{v:.3g}"
    if isinstance(v, tuple):
        return "×".join(map(str, v))
    return str(v)


def _key_cell(v) -> str:
    """A configuration value, in full (a held-out fraction 0.999999 must not print as 1.0000)."""
    if isinstance(v, float):
        return f"{v:g}"
    return _cell(v)


def format_markdown(table: dict) -> str:
    cols = table["columns"]
    keys = set(table["group_by"])
    lines = [f"# {table['study']} ({table['scale']}): {table['runs_done']} runs done, "
             f"{table['runs_failed']} failed", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join((_key_cell if c in keys else _cell)(r.get(c)) for c in cols) + " |"
              for r in table["rows"]]
    if table["notes"]:
        lines += [""] + [f"- {n}" for n in table["notes"]]
    return "\n".join(lines)


def _csv_text(columns: list[str], rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: _cell(r.get(c)) if isinstance(r.get(c), tuple) else r.get(c) for c in columns})
    return buf.getvalue()


def write_table(table: dict, out: Path) -> None:
    cli.write_text_atomic(out / "effects.md", format_markdown(table) + "\n")
    cli.write_text_atomic(out / "effects.csv", _csv_text(table["columns"], table["rows"]))


def export_csv(out: Path, path: Path) -> int:
    """Every run, one line per (run, network): its configuration, status, error and metrics."""
    with RunStore(out / "study.sqlite", readonly=True) as store:
        runs = store.rows()
    config_keys = sorted({k for r in runs for k in r["config"]})
    lines = []
    for r in runs:
        config = {k: _key_cell(_hashable(r["config"].get(k))) for k in config_keys}
        base = dict(key=r["key"], status=r["status"], error=r["error"], seconds=r["seconds"],
                    attempts=r["attempts"], **config, code_version=r["code_version"],
                    code_fingerprint=r["code_fingerprint"])
        for s in (student_rows(r["report"]) if r["report"] else [{}]):
            lines.append(base | s)
    columns = list(dict.fromkeys(c for line in lines for c in line))
    cli.write_text_atomic(path, _csv_text(columns, lines))
    return len(runs)
