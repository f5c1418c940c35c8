"""The paper's effects table, read from a study's store without training.

Runs are grouped by every configuration value that varies across the study except the
seed; each row gives, per network, the mean ± sd over seeds of the training and held-out
R² (the paper's estimator) and the number of runs. Where the paper states a number for a
row, the table puts it beside the measured one. Where the study compares supports, each is
tested against the random support, and where the study file states a claim on another
setting (more training tasks, a wider model), its treatment against its control, by
verify.studies.verdicts under the study file's plan (`verdicts:`: the test its design calls
for, the paper's claims, their margins and the effect the seeds must detect): the
outcome (helps, hurts, equivalent, inconclusive, not testable), the test it rests on, and
whether it agrees with the paper's claim. A disagreement is reported, not tuned away; an
untestable or inconclusive comparison is never called one.

Given the fingerprint of the code now installed, the table also says which runs were made
by other code or by unknown code (stored before runs recorded theirs): a `code` column per
row and a note with how many, so numbers that may predate a change to training or scoring
are never shown as current.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import numpy as np

from verify import cli
from verify.learning.families import DEFAULT_FAMILY, FAMILIES, family_named
from verify.learning.records import mean_sd, records_of
from verify.studies import behaviour, sequential, verdicts
from verify.studies.grids import study_analysis, study_deviations, study_plan
from verify.studies.status import stale_line
from verify.studies.store import RunStore, reads_report

CONVERGED_R2 = FAMILIES[DEFAULT_FAMILY].convergence[1]  # training R² a hyperteacher run must reach


def family_of(report: dict):
    """The task family of a stored report (reports stored before there were two families
    are the hyperteacher's)."""
    return family_named(report.get("family"))


@reads_report
def student_rows(report: dict) -> list[dict]:
    """The numbers the table reads from one verify.sgd report, one dict per trained network:
    the family's table metrics (and, on sides with more than K active modules, its headline
    metric), read from the report's metric records."""
    family = family_of(report)
    records = records_of(report)
    out = []
    for row in report["rows"]:
        if not row["network"].startswith("sgd "):
            continue  # the reference construction
        mine = {(m["side"], m["metric"]): m["value"] for m in records if m["network"] == row["network"]}
        probe = [v for name, v in (row.get("probe_r2") or []) if name != "encoding" and v is not None]
        values = {column: mine.get((side, metric)) for column, side, metric in (*family.effects_metrics,
                                                                              *family.effects_extra)}
        beyond = {f"{side}_{metric}": v for (side, metric), v in mine.items()
                  if side[:1] == "k" and metric == family.headline}
        # The training side of the held-out headline (train acc_all beside held-out acc_all),
        # which the fit comparisons read: the convergence metric may be another (acc).
        values["train_headline"] = mine.get(("train", family.headline))
        out.append(dict(network=row["network"].removeprefix("sgd "), family=family.name, **values,
                        hidden_units=row.get("hidden_units"), parameters=row.get("parameters"),
                        probe_r2=max(probe) if probe else None, n_train=report["split"]["n_train"], **beyond))
    return out


def column_of(family, side_metric: tuple[str, str]) -> str:
    """The effects column that holds a family's (side, metric)."""
    return next(column for column, *sm in family.effects_metrics if tuple(sm) == side_metric)


def hashable(v):
    return tuple(v) if isinstance(v, list) else v


def code_of(run: dict, judge: behaviour.Judge | None) -> str:
    """current, other or unknown: whether `run` was made by the installed code, or by code
    that behaves the same (`judge`: verify.studies.behaviour.Judge of the installed code;
    None, when no fingerprint is given, reads every run with a fingerprint as other)."""
    if judge is None:
        return behaviour.UNKNOWN if run.get("code_fingerprint") is None else behaviour.OTHER
    return judge(run)


def _code_cell(codes: list[str]) -> str:
    """A row's runs by the code that made them: `current`, or e.g. `unknown (2 of 2)`."""
    stale = [c for c in codes if c != "current"]
    if not stale:
        return "current"
    return " + ".join(f"{c} ({stale.count(c)} of {len(codes)})" for c in ("other", "unknown") if c in stale)


def effects_table(study: str, scale: str, out: Path, keys: set[str] | None = None,
                  fingerprint: str | None = None, plan: verdicts.Plan | None = None) -> dict:
    """The table of the runs in `keys` (the study's grid as it is now), or of every stored
    run; runs of an older grid left in the store are counted, not shown. With `fingerprint`
    (verify.studies.provenance.code_fingerprint()), runs made by other or unknown code are
    marked. The verdicts follow `plan`, by default the study file's (`verdicts:`; none for a
    study with no file)."""
    plan = plan if plan is not None else study_plan(study, missing_ok=True)
    judge = behaviour.Judge("verify.sgd", fingerprint) if fingerprint else None
    done, failed, old_grid = _read_runs(out, keys)
    varying = varying_settings(done)
    rows, seed_values, metric_columns = _rows(done, varying, judge, fingerprint)
    stale = {c: [r for r in done if code_of(r, judge) == c] if fingerprint else []
             for c in ("other", "unknown")}
    notes = _code_notes(study, scale, stale, len(done), fingerprint)
    notes += _paper_encoding(rows, varying)
    notes += [f"deviation from the paper at this scale: {d}" for d in study_deviations(study, scale)]
    staged = _claim_effects(rows, varying, notes, plan, seed_values)
    notes += _completeness_notes(rows, len(done), len(failed), len(old_grid), keys)
    columns = [*varying, "network", "runs", "n_train", *dict.fromkeys(metric_columns), "converged",
               *[c for c in ("paper_held_out_r2", "paper_effect", "effect_vs_random", "compared_with",
                             "effect", "train_effect", "gap_change", "test", "agrees")
                 if any(c in r for r in rows)],
               *(["code"] if stale["other"] or stale["unknown"] else [])]
    table = dict(study=study, scale=scale, runs_done=len(done), runs_failed=len(failed), group_by=varying,
                 columns=columns, rows=rows, notes=notes, code_fingerprint=fingerprint,
                 runs_other_code=len(stale["other"]), runs_unknown_code=len(stale["unknown"]))
    if plan.looks is not None:
        table["staged"] = staged
    analysis = study_analysis(study)  # the study file's `analysis:` (verify.studies.interfaces)
    if analysis is not None:
        table["analysis"] = analysis.analyse_runs(done)
    return table


def _read_runs(out: Path, keys: set[str] | None) -> tuple[list[dict], list[dict], list[dict]]:
    """(done, failed) runs of the grid `keys` (every stored run when None), and the stored
    runs of an older grid."""
    with RunStore(out / "study.sqlite", readonly=True) as store:
        runs = store.rows()
    old_grid = [r for r in runs if keys is not None and r["key"] not in keys]
    runs = [r for r in runs if keys is None or r["key"] in keys]
    return ([r for r in runs if r["status"] == "done"], [r for r in runs if r["status"] == "failed"],
            old_grid)


def varying_settings(done: list[dict]) -> list[str]:
    """The settings the table groups by: every one but the seed that varies among the runs of
    one family (in a grid that crosses the families, each family's own settings are absent
    from the other's runs), and the family itself where there are two."""
    by_family: dict[str, list] = {}
    for r in done:
        by_family.setdefault(r["config"].get("family", DEFAULT_FAMILY), []).append(r)
    settings = sorted({k for r in done for k in r["config"]})
    return [k for k in settings if k != "seed" and (k == "family" and len(by_family) > 1 or any(
        len({hashable(r["config"].get(k)) for r in runs_of}) > 1 for runs_of in by_family.values()))]


def _order(group: tuple) -> tuple:
    """Numbers by value (M = 8 before 16; widths 64×64 before 256×256), else text."""
    return tuple((0, v, "") if isinstance(v, int | float) else
                 (1, v, "") if isinstance(v, tuple) and all(isinstance(x, int | float) for x in v) else
                 (2, 0, str(v)) for v in group)


def _rows(done: list[dict], varying: list[str], judge, fingerprint: str | None):
    """One row per (varying settings, network): the mean ± sd over seeds of its family's
    metrics, whether every run converged, and the code that made its runs. Also, per row,
    {seed: its effect metric} (id(row) → that; the verdicts read it) and the metric columns in
    order of first use."""
    groups: dict[tuple, list] = {}
    for r in done:
        for s in student_rows(r["report"]):
            group = tuple(hashable(r["config"].get(k)) for k in varying) + (s["network"],)
            member = s | dict(code=code_of(r, judge), seed=r["config"].get("seed"))
            groups.setdefault(group, []).append(member)
    rows, seed_values, metric_columns = [], {}, []
    for group, members in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        family = FAMILIES[members[0]["family"]]
        row = dict(zip([*varying, "network"], group, strict=True), runs=len(members), family=family.name,
                   n_train=members[0]["n_train"])
        names = [c for c, _, _ in family.effects_metrics]
        for metric in [*names, "probe_r2", *(m for m, _, _ in family.effects_extra)]:
            row[f"{metric}_mean"], row[f"{metric}_sd"] = mean_sd([m[metric] for m in members])
        metric_columns += [c for m in names for c in (f"{m}_mean", f"{m}_sd")]
        metric_columns += ["probe_r2_mean", *(f"{m}_mean" for m, _, _ in family.effects_extra)]
        row["converged"] = all(family.converged(m[column_of(family, family.convergence_side_metric())])
                               for m in members)
        row["effect_metric"] = column_of(family, family.effect_side_metric())
        row["train_metric"] = column_of(family, family.convergence_side_metric())
        seed_values[id(row)] = {m["seed"]: m[row["effect_metric"]] for m in members
                                if m[row["effect_metric"]] is not None}
        seed_values[(id(row), "train")] = {m["seed"]: m[row["train_metric"]] for m in members
                                           if m[row["train_metric"]] is not None}
        seed_values[(id(row), "train_headline")] = {m["seed"]: m["train_headline"] for m in members
                                                    if m.get("train_headline") is not None}
        if fingerprint is not None:
            row["code"] = _code_cell([m["code"] for m in members])
        rows.append(row)
    return rows, seed_values, metric_columns


def _code_notes(study: str, scale: str, stale: dict[str, list], n_done: int,
                fingerprint: str | None) -> list[str]:
    """The note that says how many runs other or unknown code made, and how to rerun them."""
    other, unknown = stale["other"], stale["unknown"]
    if not (other or unknown):
        return []
    return [stale_line(len(other) + len(unknown), n_done, len(unknown),
                       sorted({r["code_fingerprint"] for r in other}), fingerprint,
                       f"`python -m verify.study run {study} --scale {scale} --rerun-stale`")
            + "; the `code` column says which rows"]


def _paper_encoding(rows: list[dict], varying: list[str]) -> list[str]:
    """The paper's held-out number beside each encoding's row, where the family has one."""
    families = [family_named(f) for f in dict.fromkeys(r["family"] for r in rows)]
    stated = [f for f in families if f.paper_by_encoding]
    if "encoding" not in varying or not stated:
        return []
    for row in rows:
        row["paper_held_out_r2"] = family_named(row["family"]).paper_by_encoding.get(row["encoding"])
    return [f"paper_held_out_r2: the paper's held-out {f.headline_label} for the encoding "
            f"({f.paper_by_encoding_setting})" for f in stated]


def store_notes(study: str, scale: str, *, n_done: int, n_failed: int, n_stale: int, n_old: int,
                keys: set[str] | None) -> list[str]:
    """What every study report says of its store: runs made by other code, failed runs, runs
    still missing from the grid, and stored runs of an earlier grid (left out)."""
    notes = []
    if n_stale:
        notes.append(f"{n_stale} of {n_done} runs were not made by this code (the `code` column); "
                     f"rerun them with `python -m verify.study run {study} --scale {scale} --rerun-stale`")
    if n_failed:
        notes.append(f"{n_failed} runs failed (python -m verify.study export shows each error)")
    if keys is not None and n_done + n_failed < len(keys):
        notes.append(f"{len(keys) - n_done - n_failed} of the grid's {len(keys)} runs have no result yet")
    if n_old:
        notes.append(f"{n_old} stored runs belong to an earlier version of the grid and are left out")
    return notes


def export_line(run: dict, config_keys: list[str]) -> dict:
    """A stored run's first columns in an export: key, status, error, time, its configuration
    (one column a setting) and the code that made it."""
    config = {k: key_cell(hashable(run["config"].get(k))) for k in config_keys}
    return dict(key=run["key"], status=run["status"], error=run["error"], seconds=run["seconds"],
                attempts=run["attempts"], **config, code_version=run["code_version"],
                code_fingerprint=run["code_fingerprint"])


def export_runs(out: Path, path: Path | str, lines_of) -> int:
    """Every stored run of the store in `out` as CSV lines at `path`: export_line's columns, then
    each dict of `lines_of(run)` (one line each); the number of runs. `path` is as
    cli.write_text_atomic takes it: the string `-` is stdout."""
    with RunStore(out / "study.sqlite", readonly=True) as store:
        runs = store.rows()
    config_keys = sorted({k for r in runs for k in r["config"]})
    lines = [export_line(r, config_keys) | extra for r in runs for extra in lines_of(r)]
    columns = list(dict.fromkeys(c for line in lines for c in line))
    cli.write_text_atomic(path, csv_text(columns, lines))
    return len(runs)


def _completeness_notes(rows: list[dict], n_done: int, n_failed: int, n_old: int,
                        keys: set[str] | None) -> list[str]:
    """What the table lacks: unconverged rows, failed runs, an older grid's runs, missing runs."""
    notes = []
    unconverged = sum(not r["converged"] for r in rows)
    if unconverged:
        families = [FAMILIES[f] for f in dict.fromkeys(r["family"] for r in rows)]
        rule = " or ".join(f"training {f.convergence[0]} < {f.convergence[1]}" for f in families)
        notes.append(f"{unconverged} of {len(rows)} rows did not converge ({rule} in some run): their "
                     "held-out numbers measure an undertrained network too")
    if n_failed:
        notes.append(f"{n_failed} runs failed (python -m verify.study export shows each error)")
    if n_old:
        notes.append(f"{n_old} stored runs belong to an earlier version of the grid and are left out")
    if keys is not None and n_done + n_failed < len(keys):
        notes.append(f"{len(keys) - n_done - n_failed} of the grid's {len(keys)} runs have no result yet")
    return notes


def contrasts(plan: verdicts.Plan, varying: list[str]) -> list[tuple[str, object]]:
    """The (factor, control) pairs a table tests: every support kind against `random` where the
    support varies, and each of the plan's claims on another factor that varies (its
    treatment against its control, e.g. held-out fraction 0.25 against 0.75)."""
    out = [("split", "random")] if "split" in varying else []
    out += [(c.factor, c.control) for c in plan.claims
            if c.factor != "split" and c.factor in varying and c.control is not None]
    return list(dict.fromkeys(out))


def _compared(rows: list[dict], varying: list[str], factor: str, control, plan: verdicts.Plan):
    """(treatment row, control row, claim) for one contrast: rows that differ from their control
    row in `factor` alone (same family, network and every other varying setting). For the
    support, every kind is compared with random; for another factor, only a claim's treatment."""
    others = [k for k in varying if k != factor]
    def key(r):
        return (r["family"], r["network"], *(r.get(k) for k in others))
    base = {key(r): r for r in rows if r.get(factor) == control}
    out = []
    for r in rows:
        ref, m = base.get(key(r)), r["effect_metric"]
        if ref is None or r is ref or r[f"{m}_mean"] is None or ref[f"{m}_mean"] is None:
            continue
        claim = plan.claim_for(factor, r.get(factor), control)
        if factor == "split" or claim is not None:
            out.append((r, ref, claim))
    return out


MATCHED_SHARE = 0.5  # matched training fit: the training difference shown within this share of δ


def fit_condition(r: dict, ref: dict, seed_values: dict, claim: verdicts.Claim | None, test: str,
                  level: float) -> tuple[str | None, str | None, bool]:
    """(why a held-out comparison of rows r and ref tests no claim, or None; what it rests on
    where it is tested at matched fit, or None; whether more seeds may show the match: the
    training difference so far within ±δ/2, or too few seeds to test it).

    A held-out gain may be only a training gain (issue 43), so the comparison is tested where
    both arms fit their training tasks (the family's convergence rule in every run), or, where
    an arm did not, at matched training fit: the paired difference of the headline metric on
    the training tasks (acc_all beside held-out acc_all, R² beside R²), on the claim's scale,
    is shown below δ/2 at the plan's level, on the side that could have made the held-out
    difference (a claim of an effect: one-sided, the way the held-out difference goes; a
    treatment that fits its training tasks worse and generalizes better is matched), or on
    both sides by TOST (a claim of no effect, where either side could mask or fake one). A
    training difference carried one for one to the held-out side is then at most half the
    smallest effect of interest. Without a claim (no δ) nothing is matched. A gate can only
    remove tests, so it cannot raise a test's error rate."""
    if r["converged"] and ref["converged"]:
        return None, None, False
    family = FAMILIES[r["family"]]
    metric, threshold = family.convergence

    def arm(row):
        values = list(seed_values[(id(row), "train")].values())
        below = sum(not family.converged(v) for v in values)
        mean = row[f"{row['train_metric']}_mean"]
        return (f"{_cell(mean)} "
                + (f"({below} of {len(values)} runs below)" if below else "(fit)"))
    why = (f"an arm did not fit its training tasks (training {metric} ≥ {threshold:g} in every run): "
           f"training {metric} {arm(r)} against {arm(ref)}")
    if claim is None or claim.delta is None:
        return why, None, False
    half = dataclasses.replace(claim, delta=MATCHED_SHARE * claim.delta)
    fit = verdicts.Comparison(name="training fit", treatment=seed_values[(id(r), "train_headline")],
                              control=seed_values[(id(ref), "train_headline")], claim=half)
    # A claim of an effect: only a training difference the held-out difference's way could
    # have made it, so that side alone is bounded; a claim of no effect: both sides.
    held = verdicts.Comparison(name="held-out", treatment=seed_values[id(r)], control=seed_values[id(ref)],
                               claim=claim)
    side = 0
    if claim.paper != verdicts.NO_EFFECT:
        a, b = held.arms(test)
        if len(a) and len(b):
            side = int(np.sign((a - b).mean() if test == "paired" else a.mean() - b.mean()))
    matched = verdicts.within_margin(fit, test, half.delta, side)
    if matched is None:
        return why, None, True
    diff, p = matched
    on = "" if claim.scale == "raw" else " of log(1 − R²)"
    bound = (f"TOST within {half.delta_text()}" if side == 0 else
             f"under {half.delta_text().lstrip('±')} in the held-out difference's direction")
    said = f"training {family.headline} difference{on} {diff:+.3g}, {bound}: p = {verdicts._g(p)}"
    if p < 1 - level:
        return None, f"at matched training fit ({said})", False
    return f"{why}; nor matched: {said}", None, (abs(diff) if side == 0 else side * diff) < half.delta


def fit_effects(r: dict, ref: dict, seed_values: dict, test: str) -> dict:
    """Beside a held-out difference, what the training side says of it: the training gain
    (treatment − control of the headline metric on the training tasks: the same metric as the
    held-out difference, so that acc_all's gap is not read against per-step acc) and the change
    of the generalization gap (training − held-out), paired by seed where the plan pairs them,
    so that a reader sees whether a gain composes or only fits."""
    train_t = seed_values[(id(r), "train_headline")]
    train_c = seed_values[(id(ref), "train_headline")]
    held_t, held_c = seed_values[id(r)], seed_values[id(ref)]
    def mean(d):
        return sum(d.values()) / len(d) if d else None
    if test == "paired":
        seeds = sorted(set(train_t) & set(train_c) & set(held_t) & set(held_c), key=str)
        if not seeds:
            return {}
        gain = [train_t[s] - train_c[s] for s in seeds]
        gap = [(train_t[s] - held_t[s]) - (train_c[s] - held_c[s]) for s in seeds]
        return dict(train_effect=sum(gain) / len(seeds), gap_change=sum(gap) / len(seeds))
    if not (train_t and train_c and held_t and held_c):
        return {}
    return dict(train_effect=mean(train_t) - mean(train_c),
                gap_change=(mean(train_t) - mean(held_t)) - (mean(train_c) - mean(held_c)))


def _claim_effects(rows: list[dict], varying: list[str], notes: list[str], plan: verdicts.Plan,
                   seed_values: dict) -> list[dict]:
    """Each contrast (`contrasts`): the difference of the held-out headline metric (R²,
    acc_all), judged with the study's plan (a test per comparison, Holm's correction over all
    of them; verify.studies.verdicts), and, where the study file states the paper's claim,
    whether the verdict agrees with it. A comparison whose arms did not both fit their
    training tasks is not testable (`unfit`); every one shows its training gain and change of
    the generalization gap beside it (`fit_effects`). The support's contrast fills
    `effect_vs_random`; any other fills `compared_with` (the control) and `effect`.

    Under a sequential plan (verify.studies.sequential) the verdicts are its looks', and the
    list returned says, per comparison, the seeds an arm its two rows need now: the settings of
    each row and the units of the look it was decided at or awaits (verify.studies.staged runs
    them); otherwise it is empty."""
    compared = []
    for factor, control in contrasts(plan, varying):
        for r, ref, claim in _compared(rows, varying, factor, control, plan):
            name = (f"{r['family']} {r['network']}: {r['split']} vs random" if factor == "split" else
                    f"{r['family']} {r['network']}"
                    + "".join(f", {k} {key_cell(r[k])}" for k in varying
                              if k != factor and r.get(k) is not None and k not in ("shapes", "student"))
                    + f": {factor} {key_cell(r[factor])} vs {key_cell(control)}")
            fails, matched, pending = fit_condition(r, ref, seed_values, claim, plan.test_for(claim),
                                                    plan.level)
            compared.append((r, ref, factor, control, matched, verdicts.Comparison(
                name=name, treatment=seed_values[id(r)], control=seed_values[id(ref)], claim=claim,
                condition_fails=fails, condition_pending=pending)))
            r |= fit_effects(r, ref, seed_values, plan.test_for(claim))
    if not compared:
        return []
    comparisons = [c for *_, c in compared]
    judged = (sequential.judge if plan.looks else verdicts.judge)(comparisons, plan)
    for (r, _, factor, control, matched, _), v in zip(compared, judged, strict=True):
        if factor == "split":
            r["effect_vs_random"] = verdicts.effect_text(v)
        else:
            r["compared_with"], r["effect"] = f"{factor} {key_cell(control)}", verdicts.effect_text(v)
        r["test"] = verdicts.test_text(v) + (f"; {matched}" if matched else "")
        if v.paper is not None:
            r["paper_effect"], r["agrees"] = v.paper, v.agrees
    measured = " or ".join(f"{m}_mean" for m in dict.fromkeys(r["effect_metric"] for r in rows))
    if any(f == "split" for _, _, f, *_ in compared):
        notes.append(f"effect_vs_random: {measured} minus the random support's")
    if any(f != "split" for _, _, f, *_ in compared):
        notes.append(f"effect: {measured} minus that of the row named in compared_with (the same "
                     "settings otherwise)")
    if any(not (r["converged"] and ref["converged"]) for r, ref, *_ in compared):
        notes.append("a comparison where an arm did not fit is tested at matched training fit: where the "
                     "training difference of the same metric, on the claim's scale, is shown below δ/2 on "
                     "the side that could have made the held-out difference (a claim of an effect: "
                     "one-sided; of no effect: both sides, TOST), at the plan's level, uncorrected (a "
                     "condition, not a claim); a training difference carried one for one to the held-out "
                     "side is then at most half of δ")
    if any("train_effect" in r for r in rows):
        notes.append("train_effect: the same difference of the same metric on the training tasks; "
                     "gap_change: the change of the generalization gap (training − held-out), treatment "
                     "less control: a held-out gain that equals the training gain (gap_change ≈ 0) is "
                     "fit, not composition")
    notes += (sequential.notes if plan.looks else verdicts.notes)(plan, comparisons, judged)
    return [dict(name=v.name, treatment={k: r.get(k) for k in varying},
                 control={k: ref.get(k) for k in varying}, units=v.wanted, outcome=v.outcome)
            for (r, ref, *_), v in zip(compared, judged, strict=True) if v.wanted is not None]


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


def key_cell(v) -> str:
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
    lines += ["| " + " | ".join((key_cell if c in keys else _cell)(r.get(c)) for c in cols) + " |"
              for r in table["rows"]]
    if table["notes"]:
        lines += [""] + [f"- {n}" for n in table["notes"]]
    if "analysis" in table:
        lines += ["", study_analysis(table["study"]).format_analysis(table["analysis"])]
    return "\n".join(lines)


def csv_text(columns: list[str], rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: _cell(r.get(c)) if isinstance(r.get(c), tuple) else r.get(c) for c in columns})
    return buf.getvalue()


def write_table(table: dict, out: Path) -> None:
    cli.write_text_atomic(out / "effects.md", format_markdown(table) + "\n")
    cli.write_text_atomic(out / "effects.csv", csv_text(table["columns"], table["rows"]))


def export_csv(out: Path, path: Path | str) -> int:
    """Every run, one line per (run, network): its configuration, status, error and metrics."""
    return export_runs(out, path, lambda r: student_rows(r["report"]) if r["report"] else [{}])
