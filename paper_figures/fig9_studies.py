"""Figure 9: the paper's sweeps, read from the study stores (python -m verify.study).

(a) scaling-data: held-out R² against the number of training tasks, one line per (M, K);
(b) scaling-model: held-out R² against MLP width, one line per task encoding (and per
depth where the grid varies it), with the paper's number for each encoding as a dashed
mark at the right;
(c) task-support: held-out R² per support kind, beside the paper's stated effect;
(d) scaling-law: held-out R² against the number of training tasks, MLP against transformer;
(e) size-matched: SGD's held-out sup error ÷ the construction's at equal hidden units,
against the construction's ε, one line per MLP shape;
(f) convergence: every row's training R² against the 0.99 the studies require.
Each point is the mean over seeds (bars: ± sd). A panel reads its study's `cpu` store (the
working folder's verify/studies/results/STUDY/cpu, else the committed one shipped with the
package; with `python -m paper_figures --studies DIR`, DIR/STUDY/cpu: a user's own stores, as
`python -m verify.study run STUDY --out DIR/STUDY/cpu` writes them); when that holds no
finished run it falls back to the `smoke` store under the working folder (running the smoke
study, seconds, if that is empty too) and says so in its title: smoke runs train for 20 steps
and are no result. With --quick every panel is smoke
data. A panel whose runs were made by other code than the installed one (another code
fingerprint) or by unknown code says so in its title, and each point in the data carries
its `code` (current, or how many of its runs are other/unknown).
"""

from __future__ import annotations

from pathlib import Path

from paper_figures.common import (
    COLOURS,
    MARKERS,
    STUDIES_ROOT,
    FigureResult,
    finish,
    new_figure,
    plain_ticks,
    plot_series,
    select,
)
from verify.learning.families import HyperteacherFamily
from verify.studies import provenance
from verify.studies.commands import default_out, expand, run_study, stored_out
from verify.studies.effects import CONVERGED_R2, effects_table
from verify.studies.staged import planned_runs
from verify.studies.store import RunStore, reading

NAME = "fig9_studies"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "The paper's sweeps run as studies (held-out R², mean ± sd over seeds; each panel names the "
    "store's scale). (a) Against the number of training tasks, per (M, K). (b) Against MLP width, per"
    " task encoding, with the paper's R² dashed at the right. (c) Per support kind, with the paper's "
    "stated effect and the measured one against the random support. (d) MLP against transformer, "
    "against training tasks. (e) SGD's held-out sup error ÷ the construction's at equal hidden units,"
    " against the construction's ε. (f) Every row's training R² against the 0.99 the studies require."
)
PAPER_R2 = HyperteacherFamily.paper_by_encoding  # the paper's held-out R² per encoding
STUDIES = ("scaling-data", "scaling-model", "task-support", "scaling-law", "size-matched")


def has_results(out: Path) -> bool:
    if not (out / "study.sqlite").is_file():
        return False
    with RunStore(out / "study.sqlite", readonly=True) as store:
        return "done" in store.statuses().values()


def store_of(study: str, quick: bool, progress: bool | None) -> tuple[str, Path, set[str]]:
    """(scale, store folder, the grid's run keys) a studies figure reads: the cpu store when
    it holds a finished run (and not --quick), else the smoke store, run now where it lacks runs.
    The cpu store is STUDIES_ROOT/STUDY/cpu where --studies names a root (a user's own runs)."""
    root = STUDIES_ROOT.get()
    cpu = root / study / "cpu" if root is not None else stored_out(study, "cpu")
    if not quick and has_results(cpu):
        scale, out = "cpu", cpu
    else:
        scale, out = "smoke", default_out(study, "smoke")
        run_study(study, "smoke", out, engine="serial", progress=progress)  # only what is missing
    return scale, out, {r.key for r in planned_runs(study, scale, out)[1]}


def table(study: str, quick: bool, progress: bool | None) -> dict:
    """The study's effects table (cpu scale, else smoke: store_of), of the runs in the study's
    grid as it is now."""
    scale, out, keys = store_of(study, quick, progress)
    with reading(out / "study.sqlite"):  # a report of another format: one line naming the store
        return effects_table(study, scale, out, keys, provenance.code_fingerprint())


def sweep_rows(tables: dict, kinds: dict[str, str], metric: str, train: str) -> list[dict]:
    """The points of the sweep panels (a), (b), …, one panel per study of `kinds` (study → its
    kind: scaling-data, scaling-model, task-support, scaling-law or size-matched), in order:
    one point per effects-table row that has the held-out `metric` (size-matched: the sup
    ratio), at its mean over seeds with the sd; each carries the row's training `train` mean."""
    rows = []
    for panel, (study, kind) in zip("abcdefgh"[:len(kinds)], kinds.items(), strict=True):
        t = tables[study]
        metric_y = "sup_ratio" if kind == "size-matched" else metric
        found = [r for r in t["rows"] if r[f"{metric_y}_mean"] is not None]
        depths = {len(r.get("widths") or ()) for r in found}
        for i, r in enumerate(sorted(found, key=lambda r: str(r.get("split", "")))):
            if kind == "scaling-data":
                series = " ".join(f"{k}={r[k]}" for k in ("M", "K") if k in r) or "every run"
                x = r["n_train"]
            elif kind == "scaling-model":  # one line per encoding, and per depth where that varies
                widths = r.get("widths") or (0,)
                series, x = r.get("encoding", "identity") + (f", depth {len(widths)}" if len(depths) > 1
                                                             else ""), widths[0]
            elif kind == "scaling-law":
                series = " ".join([r.get("student") or r["network"],
                                   *(f"{k}={r[k]}" for k in ("M", "K") if k in r)])
                x = r["n_train"]
            elif kind == "size-matched":  # ε is in the row only when the grid varies it
                series, x = r["network"], r.get("eps") or expand(study, t["scale"])[1][0].config["eps"]
            else:  # one point per support kind, at its index; the kind is in the row
                series, x = "support kinds", i
            rows.append(dict(panel=panel, study=study, scale=t["scale"], series=series, x=x,
                             y=r[f"{metric_y}_mean"], sd=r[f"{metric_y}_sd"], runs=r["runs"],
                             split=r.get("split"), **{train: r[f"{train}_mean"]}, converged=r["converged"],
                             paper=r.get("paper_held_out_r2") or r.get("paper_effect"),
                             effect_vs_random=r.get("effect_vs_random"), agrees=r.get("agrees"),
                             code=r.get("code")))
    return rows


def convergence_rows(tables: dict, panel: str, train: str) -> list[dict]:
    """Every row's training `train` metric (mean ± sd over seeds), one series per study, at
    the study's index (in the order of `tables`), its rows jittered apart."""
    rows = []
    for j, (study, t) in enumerate(tables.items()):
        trained = [r for r in t["rows"] if r[f"{train}_mean"] is not None]
        for k, r in enumerate(trained):
            rows.append(dict(panel=panel, study=study, scale=t["scale"], series=study,
                             x=j + 0.6 * (k + 0.5) / len(trained) - 0.3, y=r[f"{train}_mean"],
                             sd=r[f"{train}_sd"], runs=r["runs"], converged=r["converged"],
                             code=r.get("code")))
    return rows


def study_meta(tables: dict) -> dict:
    """What a studies figure's JSON says of its stores, per study: the scale read, the runs
    done and failed, the table's notes, how many runs other or unknown code made, and what
    each study's scale changes from the paper's setup (its study file's `deviations`)."""
    from verify.studies.commands import study_deviations

    return dict(checks={}, scales={s: t["scale"] for s, t in tables.items()},
                deviations={s: study_deviations(s, t["scale"]) for s, t in tables.items()},
                runs={s: dict(done=t["runs_done"], failed=t["runs_failed"]) for s, t in tables.items()},
                notes={s: t["notes"] for s, t in tables.items()},
                code_fingerprint=provenance.code_fingerprint(),
                code={s: dict(other=t["runs_other_code"], unknown=t["runs_unknown_code"], done=t["runs_done"])
                      for s, t in tables.items()})


def compute(quick: bool, progress: bool | None) -> tuple[list[dict], dict]:
    tables = {s: table(s, quick, progress) for s in STUDIES}
    rows = sweep_rows(tables, {s: s for s in STUDIES}, "held_out_r2", "train_r2")
    rows += convergence_rows(tables, "f", "train_r2")
    for enc in sorted({r["series"] for r in rows if r["panel"] == "b"} & set(PAPER_R2)):
        widest = max(r["x"] for r in rows if r["panel"] == "b" and r["series"] == enc)
        rows += [dict(panel="b", study="scaling-model", scale="paper", series=f"paper {enc}", x=widest * f,
                      y=PAPER_R2[enc]) for f in (1.2, 1.6)]
    rows.sort(key=lambda r: (r["panel"], r["series"], r["x"]))  # each series in x order, as drawn
    return rows, study_meta(tables)


def code_mark(code: dict) -> str:
    """A panel title's mark when some of its runs were made by other or unknown code."""
    parts = [f"{code[k]} of {code['done']} runs: {k} code" for k in ("other", "unknown") if code[k]]
    return f"\n[{'; '.join(parts)}]" if parts else ""


def _title(text: str, study: str, meta: dict) -> str:
    scale = meta["scales"][study]
    mark = "\n[SMOKE DATA: 20-step runs, no result]" if scale == "smoke" else f" ({scale} scale)"
    return text + mark + code_mark(meta["code"][study])


def draw_measured(axis, rows: list[dict], panel: str, *, points: bool = False) -> None:
    """Every measured series of the panel (a line, or markers alone with `points`), each
    point with its ± sd bar, and the paper's number for a series, where the rows hold one
    (series `paper NAME`), dashed in its colour."""
    measured = sorted({r["series"] for r in rows
                       if r["panel"] == panel and not r["series"].startswith("paper")})
    for i, name in enumerate(measured):
        colour, marker = COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)]
        pts = select(rows, name, panel)
        plot_series(axis, rows, name, panel, color=colour, marker=marker, ms=6, lw=1.3,
                    ls="none" if points else "-", label=name)
        axis.vlines([r["x"] for r in pts], [r["y"] - (r["sd"] or 0) for r in pts],
                    [r["y"] + (r["sd"] or 0) for r in pts], color=colour, lw=1)
        if f"paper {name}" in {r["series"] for r in rows}:
            plot_series(axis, rows, f"paper {name}", panel, color=colour, ls="--", lw=2)
    axis.grid(True, alpha=0.3)


def label_support_kinds(axis, rows: list[dict], panel: str) -> None:
    """The task-support panel's ticks (one per support kind) and, over each kind the paper
    makes a claim for (the study file's `verdicts:`), the paper's effect and the verdict on the
    measured one against the random support, written above its ± sd bar."""
    kinds = select(rows, "support kinds", panel)
    axis.set_xticks([r["x"] for r in kinds], [str(r["split"]).replace("_", "\n") for r in kinds], fontsize=7)
    for r in kinds:
        said = r["paper"]
        if said:
            top = r["y"] + (r["sd"] or 0)
            axis.annotate(f"paper: {said}\nhere: {r['effect_vs_random'] or '—'}", (r["x"], top),
                          xytext=(0, 6), textcoords="offset points", ha="center", va="bottom", fontsize=6.5)


def stale_note(meta: dict) -> str:
    """The suptitle's last line when some runs were made by other or unknown code, else ""."""
    stale = any(c["other"] or c["unknown"] for c in meta["code"].values())
    return ("\n[other code / unknown code: runs not made by the installed code (its fingerprint is in "
            "the figure's .json); python -m verify.study run STUDY --rerun-stale recomputes them]"
            if stale else "")


def plot(rows: list[dict], meta: dict):
    fig, axes = new_figure(2, 3, figsize=(15.0, 9.5))
    (ax, bx, cx), (dx, ex, fx) = axes
    for axis, panel in ((ax, "a"), (bx, "b"), (cx, "c"), (dx, "d"), (ex, "e"), (fx, "f")):
        draw_measured(axis, rows, panel, points=panel in "cf")
    # (b): in the empty band right of the widest rung, left of the paper's marks.
    for axis, where in ((ax, "lower right"), (bx, "lower right"), (dx, "lower left"), (ex, "best"),
                        (fx, "lower left")):
        axis.legend(fontsize=7.5, loc=where)
    ax.set(xlabel="training tasks (supports)", ylabel="held-out R²",
           title=_title("(a) scaling-data", "scaling-data", meta))
    bx.set(xscale="log", xlabel="MLP width (dashed: the paper's R², 4×1024, 300k steps)",
           ylabel="held-out R²",
           title=_title("(b) scaling-model", "scaling-model", meta))
    plain_ticks(bx, [r["x"] for r in rows if r["panel"] == "b" and not r["series"].startswith("paper")])
    label_support_kinds(cx, rows, "c")
    # Headroom above R² = 1 for the paper's effects written over the points, below the title.
    cx.set(ylabel="held-out R²", title=_title("(c) task-support", "task-support", meta),
           ylim=(min([-0.05] + [r["y"] - (r["sd"] or 0) - 0.05 for r in rows if r["panel"] == "c"]), 1.25),
           yticks=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    dx.set(xscale="log", xlabel="training tasks (supports)", ylabel="held-out R²",
           title=_title("(d) scaling-law: MLP against transformer", "scaling-law", meta))
    ex.set(xscale="log", yscale="log", xlabel="ε of the construction (sets the hidden units)",
           ylabel="SGD held-out sup error ÷ construction's",
           title=_title("(e) size-matched", "size-matched", meta))
    ex.axhline(1.0, color="k", lw=0.8, ls=":")
    fx.axhline(CONVERGED_R2, color="k", lw=0.8, ls=":")
    fx.set_xticks(range(len(STUDIES)), [s.replace("-", "-\n") for s in STUDIES], fontsize=7)
    fx.set(ylabel="training R² (dotted: converged)", title="(f) convergence: every row's training R²")
    fig.suptitle("The paper's sweeps as studies: held-out R² (the official estimator), mean ± sd over seeds"
                 + stale_note(meta), fontsize=10)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    del seed  # the studies fix their own seeds
    rows, meta = compute(quick, progress)
    return finish(NAME, plot(rows, meta), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta)
