"""Figure 11: the width SGD needs as the number of modules grows (issue 22), from the
width-vs-M study's store (python -m verify.study; this project's study, not the paper's).

(a) w*(M) on log axes, as hidden units (depth × w*, w* the width of each layer at which the
held-out or the in-distribution R² reaches 0.99 or 0.95; mean over seeds, bars: the
interval over seeds), beside
the construction's hidden units at the matched ε (2·I·H·N + M + H) and the memoriser's
H·Σ_{k≤K} C(M, k); the legend gives each fitted slope with its 95% interval; a point marked
≤ is an upper bound (some seed's narrowest rung already reached the threshold);
(b) the training tasks needed n*(M) at the widest rung, where the study varies the held-out
fraction, beside all tasks Σ C(M, k) and M (one task per module); otherwise it says so;
(c), (d), …: R² against width, one colour per M (solid: held out, dashed: in-distribution),
one panel per depth, the thresholds dotted.
(a), (c), (d) read the runs at the study's smallest held-out fraction (the most training
tasks). The numbers are verify/studies/width.py's, as `python -m verify.study report
width-vs-M` prints them. The study's `cpu` store is read when it holds a finished run, else
the `smoke` store, run now if empty (seconds), and every title says "SMOKE DATA" then, as
figure 9 does (whose functions this uses); runs made by other or unknown code are marked.
"""

from __future__ import annotations

from pathlib import Path

from paper_figures.common import (
    COLOURS,
    MARKERS,
    FigureResult,
    finish,
    new_figure,
    plain_ticks,
    plot_series,
    select,
)
from paper_figures.fig9_studies import _title, stale_note, study_meta, table

NAME = "fig11_width_vs_M"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "The width SGD needs as the number of modules M grows (this project's width-vs-M study). (a) "
    "Hidden units (depth × w*, w* the narrowest width reaching an R² threshold) against M, log-log, "
    "with each fitted slope and its 95% interval, beside the construction's units and the "
    "memoriser's. (b) The training tasks needed at the widest rung, beside M and all tasks Σ C(M,k). "
    "(c), (d) R² against width per depth, one colour per M: held out solid, in-distribution dashed, "
    "the thresholds dotted."
)
STUDY = "width-vs-M"
# The criteria drawn: held-out R², and in-distribution R² (the width to fit the training tasks, not
# capped by how many the split leaves at small M); the report also gives the RMSE ones.
SHOWN = ("r2", "train_r2")
R2_FLOOR = -1.05  # R² panels start here; lower points (smoke runs) are in the data, off the axes


def _shown(entries: list[dict]) -> list[dict]:
    return [e for e in entries if e["metric"] in SHOWN]


def _fit_label(fit: dict) -> str:
    if fit["status"] != "fitted":
        return "slope: too few points"
    # A censored fit's side the data do not bound is None (verify.studies.width.censored_slope).
    lo, hi = (f"{x:.2f}" if x is not None else "∞" for x in (fit["lo"], fit["hi"]))
    return f"slope {fit['slope']:.2f} [{'−' if lo == '∞' else ''}{lo}, {hi}]"


def needed_rows(panel: str, entry: dict, series: str, scale: float = 1.0) -> list[dict]:
    """One point per M whose mean over seeds exists (every seed reached the threshold, or an
    upper bound), × `scale` (a depth: hidden units from a width)."""
    return [dict(panel=panel, series=series, x=r["M"], y=r["mean"] * scale, lo=r["lo"] * scale,
                 hi=r["hi"] * scale, interval=r["kind"], upper_bound=r.get("upper_bound", False),
                 seeds=r["seeds"]) for r in entry["per_M"] if r["mean"] is not None]


def compute(quick: bool, progress: bool | None) -> tuple[list[dict], dict]:
    t = table(STUDY, quick, progress)
    a = t.get("analysis") or {}
    rows: list[dict] = []
    fits, held_out = [], None
    if a.get("runs"):
        held_out = min(w["held_out"] for w in a["widths"])
        for w in _shown(a["widths"]):
            if w["held_out"] != held_out:
                continue
            series = f"SGD depth {w['depth']}, {w['criterion']}"
            rows += needed_rows("a", w, series, scale=w["depth"])
            fits.append(dict(panel="a", series=series, fit=w["fit"], verdict=w["verdict"],
                             construction_slope=w["construction_slope"],
                             memorisation_slope=w["memorisation_slope"]))
        for c in a["construction"]:
            if c["criterion"].startswith("held-out R²"):
                rows += [dict(panel="a", series=f"construction ε={c['eps']:.3g} ({c['criterion']})", x=u["M"],
                              y=u["total"], eps_term=u["eps_term"], M_term=u["M_term"], H_term=u["H_term"],
                              guide=True) for u in c["per_M"]]
        rows += [dict(panel="a", series="memoriser H·Σ C(M,k)", x=u["M"], y=u["units"], guide=True)
                 for u in a["memorisation"]["per_M"]]
        for w in _shown(a["tasks"]):
            series = f"SGD {w['depth']}×{w['width']}, {w['criterion']}"
            rows += needed_rows("b", w, series)
            fits.append(dict(panel="b", series=series, fit=w["fit"], verdict=w["verdict"],
                             all_tasks_slope=w["all_tasks_slope"]))
        if a["tasks"]:
            rows += [dict(panel="b", series="all tasks Σ C(M,k)", x=u["M"], y=u["tasks"], guide=True)
                     for u in a["tasks"][0]["all_tasks"]]
            rows += [dict(panel="b", series="M (one task per module)", x=M, y=M, guide=True) for M in a["Ms"]]
        depths = sorted({c["depth"] for c in a["curves"]})
        for depth, panel in zip(depths, "cdefgh", strict=False):
            for c in a["curves"]:
                if c["depth"] == depth and c["held_out"] == held_out:
                    rows += [dict(panel=panel, series=f"depth {depth}, M={c['M']}", x=w, y=r2, sd=sd,
                                  n_train=n, train_r2=tr, M=c["M"], depth=depth)
                             for w, r2, sd, n, tr in zip(c["width"], c["r2_mean"], c["r2_sd"], c["n_train"],
                                                         c["train_r2_mean"], strict=True) if r2 is not None]
                    fitted = zip(c["width"], c["train_r2_mean"], c["train_r2_sd"], strict=True)
                    rows += [dict(panel=panel, series=f"depth {depth}, M={c['M']}, in-distribution", x=w,
                                  y=tr, sd=sd, M=c["M"], depth=depth, in_distribution=True)
                             for w, tr, sd in fitted if tr is not None]
    rows.sort(key=lambda r: (r["panel"], r["series"], r["x"]))  # each series in x order, as drawn
    meta = study_meta({STUDY: t}) | dict(
        study=STUDY, held_out=held_out, fits=fits, teacher=a.get("teacher"),
        analysis_notes=a.get("notes", []),
        thresholds=sorted({c["threshold"] for c in _shown(a.get("criteria", []))}),
        depths=sorted({c["depth"] for c in a.get("curves", [])}))
    return rows, meta


def _draw_needed(axis, rows: list[dict], panel: str, fits: list[dict]) -> None:
    slopes = {f["series"]: _fit_label(f["fit"]) for f in fits if f["panel"] == panel}
    measured = sorted({r["series"] for r in rows if r["panel"] == panel and not r.get("guide")})
    for i, name in enumerate(measured):
        colour = COLOURS[i % len(COLOURS)]
        pts = select(rows, name, panel)
        plot_series(axis, rows, name, panel, color=colour, marker=MARKERS[i % len(MARKERS)], ms=6, lw=1.3,
                    label=f"{name}: {slopes.get(name, '')}")
        axis.vlines([r["x"] for r in pts], [r["lo"] for r in pts], [r["hi"] for r in pts], color=colour, lw=1)
        for r in pts:
            if r["upper_bound"]:  # some seed's first rung already reached it: w* is at most this
                axis.annotate("≤", (r["x"], r["y"]), xytext=(-9, -3), textcoords="offset points", fontsize=9,
                              color=colour)
    guides = sorted({r["series"] for r in rows if r["panel"] == panel and r.get("guide")})
    for j, name in enumerate(guides):
        plot_series(axis, rows, name, panel, color=str(0.2 + 0.2 * j), ls=("--", ":", "-.")[j % 3], lw=1.4,
                    label=name)
    if not measured:
        axis.text(0.5, 0.5, "no M at which every seed reached a threshold", transform=axis.transAxes,
                  ha="center", va="center", fontsize=8, color="tab:red")


def plot(rows: list[dict], meta: dict):
    depths = meta["depths"] or [2]
    ncols = max(2, len(depths))
    fig, axes = new_figure(2, ncols, figsize=(6.5 * ncols, 11.5))
    ax, bx = axes[0][0], axes[0][1]
    for extra in axes[0][2:]:
        extra.set_axis_off()
    _draw_needed(ax, rows, "a", meta["fits"])
    where = f", held-out fraction {meta['held_out']:g}" if meta["held_out"] is not None else ""
    ax.set(xscale="log", yscale="log", xlabel="M (modules)", ylabel="hidden units (SGD: depth × w*)",
           title=_title(f"(a) width needed for an R² threshold against M{where}", STUDY, meta))
    if any(r["panel"] == "b" for r in rows):
        _draw_needed(bx, rows, "b", meta["fits"])
        bx.set(xscale="log", yscale="log")
    else:
        bx.text(0.5, 0.5, "the study varies no held-out fraction at a fixed width:\nno training tasks needed "
                "to show", transform=bx.transAxes, ha="center", va="center", fontsize=9)
    bx.set(xlabel="M (modules)", ylabel="training tasks (supports)",
           title=_title("(b) training tasks needed at the widest rung", STUDY, meta))
    for axis, panel in ((ax, "a"), (bx, "b")):
        plain_ticks(axis, [r["x"] for r in rows if r["panel"] == panel])
        axis.grid(True, which="both", alpha=0.3)
    # (a)'s lines fill its axes: its legend goes below them, beside (b)'s, which fits in (b).
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.11), frameon=False)
    if bx.get_legend_handles_labels()[0]:
        bx.legend(fontsize=7, loc="best")
    for k, (depth, panel) in enumerate(zip(depths, "cdefgh", strict=False)):
        axis = axes[1][k]
        names = sorted({r["series"] for r in rows if r["panel"] == panel and not r.get("in_distribution")},
                       key=lambda name: int(name.split("M=")[1]))
        for i, name in enumerate(names):
            colour = COLOURS[i % len(COLOURS)]
            pts = select(rows, name, panel)
            plot_series(axis, rows, name, panel, color=colour, marker=MARKERS[i % len(MARKERS)], ms=5, lw=1.3,
                        label=name.split(", ")[1])
            axis.vlines([r["x"] for r in pts], [r["y"] - (r["sd"] or 0) for r in pts],
                        [r["y"] + (r["sd"] or 0) for r in pts], color=colour, lw=1)
            plot_series(axis, rows, f"{name}, in-distribution", panel, color=colour, ls="--", lw=0.9)
        for threshold in meta["thresholds"]:
            axis.axhline(threshold, color="k", lw=0.8, ls=":")
        low = min([r["y"] for r in rows if r["panel"] == panel] or [0.0])
        if low < R2_FLOOR:
            axis.text(0.02, 0.02, f"points below R² = {R2_FLOOR:g} are off the axes (in the data)",
                      transform=axis.transAxes, fontsize=7, color="tab:red")
        axis.set(xscale="log", ylim=(max(R2_FLOOR, low - 0.05), 1.02),
                 xlabel=f"width of each of the {depth} layers",
                 ylabel="R²: held out (solid), in-distribution (dashed); dotted: thresholds",
                 title=_title(f"({panel}) R² against width, depth {depth}", STUDY, meta))
        plain_ticks(axis, [r["x"] for r in rows if r["panel"] == panel])
        axis.grid(True, which="both", alpha=0.3)
        if names:
            axis.legend(fontsize=7, loc="lower right", ncols=2)
    for axis in axes[1][len(depths):]:
        axis.set_axis_off()
    fig.suptitle("Does SGD find the linear-in-M solution? The width SGD needs as M grows (this project's "
                 "width-vs-M study)" + stale_note(meta), fontsize=10)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    del seed  # the study fixes its own seeds
    rows, meta = compute(quick, progress)
    return finish(NAME, plot(rows, meta), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta)
