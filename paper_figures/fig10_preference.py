"""Figure 10: the preference grid's sweeps (the paper's second task family), read from the
study stores (python -m verify.study) as figure 9 reads the hyperteacher's.

The headline metric is held-out acc_all: the share of held-out tasks whose demonstrated
episode the student imitates with every step right.
(a) scaling-data-preference: held-out acc_all against the number of training tasks, one
line per (M, K);
(b) scaling-model-preference: held-out acc_all against MLP width, one line per encoding
(and per depth where the grid varies it);
(c) task-support-preference: held-out acc_all per support kind; over each kind the paper
speaks of, the effect it states (the study file's `verdicts:` claims: its hyperteacher
claims, tested here on this family too) and the measured difference to the random support
(`effect_vs_random`, with the verdict of the effects table's test);
(d) scaling-law-preference: held-out acc_all against the number of training tasks, MLP
against transformer;
(e) convergence: every row's training per-step acc against the family's threshold
(PreferenceFamily.convergence, dotted), one column per study; a row with a run
below it is ringed;
(f) per-step against whole-episode accuracy: every row of every study at its held-out
per-step acc (x) and acc_all (y), each ± its sd over seeds, beside acc^T dashed (T: the
runs' steps per episode, `timelimit`): the whole-episode success if every step were right
independently with probability acc. An episode that ends early has fewer steps to get
right, so independent errors put a point on or above the curve; far above it, the errors
bunch in a few episodes. This panel was chosen because acc_all is the harsh metric: it
shows whether a low acc_all means errors spread over every episode or a few failed tasks.
Each point of (a)–(d) is the mean over seeds (bars: ± sd). A panel reads its study's `cpu`
store, else the `smoke` store (run now if empty), and says so in its title, exactly as
figure 9 does (it uses figure 9's functions); (e) and (f), which draw every study, say
which studies are smoke data. Each point in the data carries its `code`, and the title
says when runs were made by other or unknown code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from paper_figures.common import COLOURS, FigureResult, finish, new_figure, plot_series
from paper_figures.fig9_studies import (
    _title,
    convergence_rows,
    draw_measured,
    label_support_kinds,
    stale_note,
    study_meta,
    sweep_rows,
    table,
)
from verify.learning.families import PreferenceFamily
from verify.studies.grids import expand

NAME = "fig10_preference"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "The preference grid's sweeps run as studies (held-out acc_all: the share of held-out tasks "
    "imitated with every step right; mean ± sd over seeds). (a) Against training tasks, per (M, K); "
    "(b) against MLP width, per encoding; (c) per support kind, with the paper's stated effect and "
    "the measured one; (d) MLP against transformer; (e) every row's training per-step accuracy "
    "against the convergence threshold; (f) held-out acc_all against per-step accuracy, beside acc^T "
    "(independent errors)."
)
FAMILY = PreferenceFamily
# Each study and the kind of sweep it is (figure 9's panels by kind).
KINDS = {"scaling-data-preference": "scaling-data", "scaling-model-preference": "scaling-model",
         "task-support-preference": "task-support", "scaling-law-preference": "scaling-law"}
STUDIES = tuple(KINDS)
HEADLINE = f"held_out_{FAMILY.headline}"  # held_out_acc_all, the effects table's column
TRAIN = f"train_{FAMILY.convergence[0]}"  # train_acc
THRESHOLD = FAMILY.convergence[1]
RING = "some run below the threshold"
SMOKE = "SMOKE DATA: 20-step runs, no result"
# panel, its study (None: every study), title, x label, x scale, y label
PANELS = (
    ("a", STUDIES[0], "(a) scaling-data", "training tasks (supports)", "log", "held-out acc_all"),
    ("b", STUDIES[1], "(b) scaling-model", "MLP width", "log", "held-out acc_all"),
    ("c", STUDIES[2], "(c) task-support", None, "linear", "held-out acc_all"),
    ("d", STUDIES[3], "(d) scaling-law: MLP against transformer", "training tasks (supports)", "log",
     "held-out acc_all"),
    ("e", None, "(e) convergence: every row's training per-step acc", None, "linear",
     "training per-step acc (dotted: converged)"),
    ("f", None, "(f) held out: per-step acc against acc_all", "held-out per-step acc", "linear",
     "held-out acc_all (every step right)"),
)


def timelimits(tables: dict) -> list[int]:
    """The steps per episode (`timelimit`) of the runs the tables read."""
    return sorted({run.config["timelimit"] for study, t in tables.items()
                   for run in expand(study, t["scale"])[1]})


def episode_rows(tables: dict) -> list[dict]:
    """Panel (f): each row of every study at (held-out acc, held-out acc_all), one series per
    study (named by its kind: a series name belongs to one panel), and acc^T."""
    rows = [dict(panel="f", study=study, scale=t["scale"], series=KINDS[study], x=r["held_out_acc_mean"],
                 x_sd=r["held_out_acc_sd"], y=r[f"{HEADLINE}_mean"], sd=r[f"{HEADLINE}_sd"], runs=r["runs"],
                 converged=r["converged"], code=r.get("code"))
            for study, t in tables.items() for r in t["rows"]
            if r["held_out_acc_mean"] is not None and r[f"{HEADLINE}_mean"] is not None]
    for steps in timelimits(tables):
        rows += [dict(panel="f", series=f"independent steps: acc^{steps}", x=float(a), y=float(a) ** steps,
                      guide=True) for a in np.linspace(0.0, 1.0, 51)]
    return rows


def compute(quick: bool, progress: bool | None) -> tuple[list[dict], dict]:
    tables = {s: table(s, quick, progress) for s in STUDIES}
    rows = sweep_rows(tables, KINDS, HEADLINE, TRAIN)
    trained = convergence_rows(tables, "e", TRAIN)
    rows += trained + [r | dict(series=RING) for r in trained if not r["converged"]]
    rows += episode_rows(tables)
    rows.sort(key=lambda r: (r["panel"], r["series"], r["x"]))  # each series in x order, as drawn
    meta = study_meta(tables) | dict(family=FAMILY.name, metric=HEADLINE,
                                     convergence=dict(metric=TRAIN, threshold=THRESHOLD),
                                     timelimits=timelimits(tables))
    return rows, meta


def deviation_note(meta: dict) -> str:
    """The suptitle's line of what the drawn scales change from the paper's setup: what every
    drawn study shares (e.g. the objects in the grid), and where the rest is (the JSON lists
    each study's `deviations`, its effects table prints them)."""
    lists = [d for d in meta.get("deviations", {}).values() if d]
    if not lists:
        return ""
    shared = [d for d in lists[0] if all(d in other for other in lists)]
    return ("\nDeviations from the paper: " + "; ".join(shared) + ("; " if shared else "")
            + "each study's own in its effects table and this figure's JSON")


def _every_title(text: str, meta: dict) -> str:
    """A title for a panel that draws every study: which of them are smoke data."""
    smoke = [KINDS[s] for s, scale in meta["scales"].items() if scale == "smoke"]
    if len(smoke) == len(STUDIES):
        return f"{text}\n[{SMOKE}]"
    return f"{text}\n[{SMOKE}: {', '.join(smoke)}]" if smoke else text


def plot(rows: list[dict], meta: dict):
    fig, axes = new_figure(2, 3, figsize=(15.0, 9.5))
    measured = [r for r in rows if not r.get("guide") and r["series"] != RING]
    for axis, (panel, study, title, xlabel, xscale, ylabel) in zip(axes.flat, PANELS, strict=True):
        draw_measured(axis, measured, panel, points=panel in "cef")
        axis.set(xscale=xscale, xlabel=xlabel, ylabel=ylabel,
                 title=_title(title, study, meta) if study else _every_title(title, meta))
    cx, ex, fx = axes.flat[2], axes.flat[4], axes.flat[5]
    label_support_kinds(cx, rows, "c")
    ex.axhline(THRESHOLD, color="k", lw=0.8, ls=":")
    ex.set_xticks(range(len(STUDIES)), [k.replace("-", "-\n") for k in KINDS.values()], fontsize=7)
    if any(r["series"] == RING for r in rows):
        plot_series(ex, rows, RING, "e", ls="none", marker="o", ms=13, mfc="none", mec="k", mew=1.2,
                    label=RING)
    studies = sorted({r["series"] for r in measured if r["panel"] == "f"})  # draw_measured's colours
    for i, study in enumerate(studies):
        pts = [r for r in measured if r["panel"] == "f" and r["series"] == study]
        fx.hlines([r["y"] for r in pts], [r["x"] - (r["x_sd"] or 0) for r in pts],
                  [r["x"] + (r["x_sd"] or 0) for r in pts], color=COLOURS[i % len(COLOURS)], lw=1)
    for guide in sorted({r["series"] for r in rows if r.get("guide")}):
        plot_series(fx, rows, guide, "f", color="0.4", ls="--", lw=1, label=guide)
    fx.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
    for axis in axes.flat:
        if axis is not cx:
            axis.legend(fontsize=7.5, loc="best")
    fig.suptitle("The preference grid's sweeps as studies: held-out acc_all (every step of the episode "
                 "right), mean ± sd over seeds" + deviation_note(meta) + stale_note(meta), fontsize=10)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    del seed  # the studies fix their own seeds
    rows, meta = compute(quick, progress)
    return finish(NAME, plot(rows, meta), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta)
