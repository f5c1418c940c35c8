"""Figure 13: is compositional generalization on the hyperteacher a kernel property or a
feature-learning one? (issue 35; this project's kernel-vs-sgd study, not the paper's.)

(a), (b), …, one panel per encoding: held-out R² against width for the trained MLP (solid) and the
MLP linearised at init (dashed), mean over seeds with 95% t-interval bars, beside the
infinite-width limits as horizontal lines (NTK regression solid grey, NNGP posterior mean
dotted, their intervals shaded); the title gives the widths at which the trained network is
above the NTK limit at its row budget (paired over seeds, Holm over widths, 95%; that limit is
not an asymptote, so this is not a claim that feature learning is needed);
then the trained network's NTK movement ‖Θ_T − Θ_0‖_F / ‖Θ_0‖_F against width, one line per
encoding (log axes): near 0 is the lazy regime;
then the kernel limit along tasks (issue 45): held-out R² against training tasks, one line per
kernel and seed (the study's `--max-tasks` ladders), the limit across seeds as a band (the settled
values' t interval, or the extrapolated asymptote's interval; the legend says which), and the
networks trained on the kernel's own rows (`--data finite`) as points at their tasks;
(last panel) the lazy-to-rich axis: held-out R² and the additivity score (held-out supports)
against α (log x), mean over seeds with 95% bars, beside the NTK limit's held-out R² and
additivity as horizontal lines.
A panel whose runs the store does not hold yet says "planned, not yet run" with their number.
The numbers are verify/studies/kernel_report.py's, as `python -m verify.study report
kernel-vs-sgd` prints them. The study's `cpu` store is read when it holds a finished run, else
the `smoke` store, run now if empty (a minute), and every title says "SMOKE DATA" then.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.transforms import offset_copy

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
from paper_figures.fig9_studies import code_mark, store_of
from verify.studies import provenance
from verify.studies.commands import study_deviations

NAME = "fig13_kernel"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Kernel limit or feature learning? (this project's kernel-vs-sgd study). One panel per task "
    "encoding: held-out R² against width for the trained MLP (solid) and the MLP linearised at "
    "initialisation (dashed), mean with 95% intervals over seeds, beside the infinite-width NTK "
    "(solid grey) and NNGP (dotted) limits with their intervals shaded; the title gives the widths "
    "where the trained network is above the NTK limit at its row budget (paired, Holm over widths). "
    "Then: how far the trained network's NTK moves, ‖Θ_T − Θ_0‖"
    " / ‖Θ_0‖, against width (log-log); the kernel limits' held-out R² against training tasks "
    "(one line a seed, the limit across seeds shaded: settled or extrapolated), with the networks "
    "trained on the kernel's own rows as points; and held-out R² and additivity along the "
    "lazy-to-rich axis α. A panel without its runs says they are planned, not yet run."
)
STUDY = "kernel-vs-sgd"
PROGRAM = "verify.kernel"
NETWORKS = {"trained": "-", "linearised": "--"}
LIMITS = {"ntk": "-", "nngp": ":"}
R2_FLOOR = -1.05  # R² panels start here; lower points (smoke runs) are in the data, off the axes


def table(quick: bool, progress: bool | None) -> dict:
    """The study's report at cpu scale, or at smoke scale (run now if need be)."""
    from verify.studies.kernel_report import effects_table

    scale, out, keys = store_of(STUDY, quick, progress)
    return effects_table(STUDY, scale, out, keys, provenance.code_fingerprint(PROGRAM))


def compute(quick: bool, progress: bool | None) -> tuple[list[dict], dict]:
    t = table(quick, progress)
    encodings = sorted({c["encoding"] for c in t["cells"]})
    rows = []
    for c in t["cells"]:
        r2 = c["held_out_r2"]
        if r2["mean"] is None:
            continue
        panel = "abcdefg"[encodings.index(c["encoding"])]
        base = dict(panel=panel, encoding=c["encoding"], method=c["method"], seeds=len(c["seeds"]),
                    lo=r2["lo"], hi=r2["hi"])
        if c["method"] in NETWORKS:
            rows.append(base | dict(series=c["method"], x=c["width"], y=r2["mean"]))
        if c["method"] == "trained" and c["kernel_movement"]["mean"] is not None:
            move = c["kernel_movement"]
            rows.append(dict(panel="movement", series=c["encoding"], x=c["width"], y=move["mean"],
                             lo=move["lo"], hi=move["hi"], encoding=c["encoding"], method="trained",
                             seeds=len(c["seeds"])))
    limits = {(c["encoding"], c["method"]): c["held_out_r2"] for c in t["cells"] if c["method"] in LIMITS}
    rows += _added_rows(t)
    rows.sort(key=lambda r: (r["panel"], r["series"], r["x"]))
    code = dict(other=t["runs_other_code"], unknown=t["runs_unknown_code"], done=t["runs_done"])
    meta = dict(checks={}, study=STUDY, scale=t["scale"], deviations=study_deviations(STUDY, t["scale"]),
                encodings=encodings, limits={f"{e} {m}": v for (e, m), v in limits.items()},
                calls={g["encoding"]: [[w["width"], w["trained_minus_ntk"]["verdict"]] for w in g["widths"]]
                       for g in t["gaps"]}, notes=t["notes"], code=code,
                runs=dict(done=t["runs_done"], failed=t["runs_failed"]),
                code_fingerprint=provenance.code_fingerprint(PROGRAM), **_added_meta(t))
    return rows, meta


def _added_rows(t: dict) -> list[dict]:
    """The added grids' points (kernel_report's along_tasks, equal_data and lazy_rich): each
    ladder rung (panel `tasks`, one series a kernel and seed), each finite-data network (its
    tasks, panel `tasks`), and per α its held-out R² and additivity (panel `alpha`)."""
    rows = []
    for a in t["along_tasks"]:
        for q in a["seeds"]:
            rows += [dict(panel="tasks", series=f"{a['method']} seed {q['seed']}", x=s["tasks"],
                          y=s["held_out_r2"], lo=None, hi=None, encoding=a["encoding"], method=a["method"],
                          seeds=1) for s in q["rungs"]]
    for g in t["equal_data"]:
        for m in g["methods"]:
            for w in m["widths"]:
                r2 = w["held_out_r2"]
                if r2["mean"] is not None and len(w["tasks"]) == 1:
                    rows.append(dict(panel="tasks", series=f"{m['method']} ×{w['width']} (finite)",
                                     x=w["tasks"][0], y=r2["mean"], lo=r2["lo"], hi=r2["hi"],
                                     encoding=g["encoding"], method=m["method"], seeds=len(w["seeds"])))
    for g in t["lazy_rich"]:
        for p in g["alphas"]:
            for name, series in (("held_out_r2", "held-out R²"), ("additivity", "additivity (held-out)")):
                v = p[name]
                if v["mean"] is not None:
                    rows.append(dict(panel="alpha", series=series, x=p["alpha"], y=v["mean"], lo=v["lo"],
                                     hi=v["hi"], encoding=g["encoding"], method="trained", seeds=v["n"]))
    return rows


def _added_meta(t: dict) -> dict:
    """What the added panels draw beside their points: the limit across seeds per kernel, the NTK
    limit's held-out R² and additivity at the α axis's seeds, and the runs planned, not yet run."""
    along = {f"{a['encoding']} {a['method']}": dict(kind=a["limit"]["kind"], mean=a["limit"]["mean"],
                                                    interval=a["limit"]["interval"])
             for a in t["along_tasks"]}
    refs = {}
    for g in t["lazy_rich"]:
        ntk = g["references"]["ntk"]
        refs = dict(width=g["width"], encoding=g["encoding"], ntk_r2=ntk["held_out_r2"]["mean"],
                    ntk_additivity=ntk["additivity"]["mean"],
                    linearised_additivity=g["references"]["linearised"]["additivity"]["mean"],
                    equivalent_at=g["equivalent_at"])
    return dict(along_tasks=along, alpha_refs=refs, planned=t.get("planned", {}))


def _title(text: str, meta: dict) -> str:
    scale = meta["scale"]
    # On a second line: two panels side by side leave a title one panel's width.
    mark = "\n[SMOKE DATA: 200-step runs, no result]" if scale == "smoke" else f"\n({scale} scale)"
    return text + mark + code_mark(meta["code"])


def _draw_encoding(axis, rows: list[dict], meta: dict, encoding: str, panel: str) -> None:
    widths = sorted({r["x"] for r in rows if r["panel"] == panel})
    for (method, style), colour in zip(NETWORKS.items(), COLOURS, strict=False):
        pts = select(rows, method, panel)
        if not pts:
            continue
        plot_series(axis, rows, method, panel, color=colour, ls=style, marker="o", ms=5, lw=1.4,
                    label=f"{method} network")
        axis.vlines([r["x"] for r in pts], [r["lo"] if r["lo"] is not None else r["y"] for r in pts],
                    [r["hi"] if r["hi"] is not None else r["y"] for r in pts], color=colour, lw=1)
    for method, style in LIMITS.items():
        limit = meta["limits"].get(f"{encoding} {method}")
        if limit is None or limit["mean"] is None:
            continue
        axis.axhline(limit["mean"], color="0.3", ls=style, lw=1.4, label=f"{method.upper()} limit (∞ width)")
        if limit["lo"] is not None and widths:
            axis.fill_between([min(widths), max(widths)], limit["lo"], limit["hi"], color="0.5", alpha=0.12)
    above = [f"×{w}" for w, call in meta["calls"].get(encoding, []) if call == "above the limit"]
    said = f"above at {', '.join(above)}" if above else "above at no width"
    axis.set(xscale="log", xlabel="width of each hidden layer", ylabel="held-out R² (compositional)",
             title=_title(f"({panel}) {encoding}: trained vs NTK at its rows\n{said} (Holm)", meta))
    low = min([r["lo"] if r["lo"] is not None else r["y"] for r in rows if r["panel"] == panel] or [0.0])
    if low < R2_FLOOR:
        axis.text(0.02, 0.02, f"bars and points below R² = {R2_FLOOR:g} are off the axes (in the data)",
                  transform=axis.transAxes, fontsize=7, color="tab:red")
    axis.set_ylim(max(R2_FLOOR, low - 0.05), 1.05)
    plain_ticks(axis, widths)
    axis.grid(True, which="both", alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7, loc="best")


def _planned(axis, meta: dict, kind: str, what: str) -> bool:
    """Says on the panel that its runs are planned, not yet run (True), when the data has none."""
    n = (meta.get("planned") or {}).get(kind, 0)
    said = (f"{what}:\nplanned, not yet run: {n} runs\n(python -m verify.study run {meta['study']} "
            f"--scale {meta['scale']})" if n else f"{what}:\nno such runs in this study's grid")
    axis.text(0.5, 0.5, said, transform=axis.transAxes, ha="center", va="center", fontsize=9, color="0.3")
    axis.set_xticks([])
    axis.set_yticks([])
    return True


def _draw_tasks(axis, rows: list[dict], meta: dict, letter: str) -> None:
    """Held-out R² against training tasks: a line per kernel and seed, the limit across seeds as a
    band (settled: the t interval; extrapolated: the asymptote's interval), finite-data networks
    as points with their bars."""
    title = f"({letter}) the kernel limit along tasks"
    pts = [r for r in rows if r["panel"] == "tasks"]
    ladders = sorted({r["series"] for r in pts if " seed " in r["series"]})
    if not ladders:
        _planned(axis, meta, "ladder", "the kernel limit along tasks")
        axis.set(title=_title(title, meta))
        return
    xs = sorted({r["x"] for r in pts})
    for method, style in LIMITS.items():
        colour = "0.25" if method == "ntk" else "tab:purple"
        for k, series in enumerate(s for s in ladders if s.startswith(f"{method} ")):
            plot_series(axis, rows, series, "tasks", color=colour, ls=style, marker=MARKERS[k % len(MARKERS)],
                        ms=4, lw=1.1, label=series)
        for key, lim in meta["along_tasks"].items():
            if key.endswith(f" {method}") and lim["interval"]:
                axis.fill_between([min(xs), max(xs)], *lim["interval"], color=colour, alpha=0.12,
                                  label=f"{method.upper()} limit, {lim['kind']}: "
                                        f"[{lim['interval'][0]:.3f}, {lim['interval'][1]:.3f}]")
    finite = sorted({r["series"] for r in pts if r["series"].endswith("(finite)")})
    for i, series in enumerate(finite):
        colour = COLOURS[i % len(COLOURS)]
        # The networks on the kernel's rows share one x (its tasks): side by side, 5 points apart
        # on the page, by an offset transform, so that each point's data stays its CSV row's.
        beside = offset_copy(axis.transData, fig=axis.figure, x=5 * (i - (len(finite) - 1) / 2),
                             units="points")
        plot_series(axis, rows, series, "tasks", color=colour, ls="none", marker=MARKERS[i % len(MARKERS)],
                    ms=5, label=series, transform=beside,
                    mfc="none" if series.startswith("linearised") else colour)  # hollow: linearised
        (r,) = select(rows, series, "tasks")
        if r["lo"] is not None:
            axis.vlines([r["x"]], [r["lo"]], [r["hi"]], color=colour, lw=1, transform=beside)
    axis.set(xscale="log", xlabel="training tasks the kernel fits (16 x a task)", ylabel="held-out R²",
             title=_title(title, meta), xlim=(min(xs) / 1.2, max(xs) * 1.08))  # room for the points beside
    low = min(r["lo"] if r["lo"] is not None else r["y"] for r in pts)
    axis.set_ylim(max(R2_FLOOR, low - 0.05), 1.05)
    plain_ticks(axis, xs)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=6, loc="lower right")


def _draw_alpha(axis, rows: list[dict], meta: dict, letter: str) -> None:
    """Held-out R² and additivity along α (log x), with the NTK limit's as horizontal lines."""
    refs = meta.get("alpha_refs") or {}
    title = f"({letter}) the lazy-to-rich axis" + (f" (width {refs['width']})" if refs else "")
    if not [r for r in rows if r["panel"] == "alpha"]:
        _planned(axis, meta, "alpha", "the lazy-to-rich axis α")
        axis.set(title=_title(title, meta))
        return
    for i, (series, style) in enumerate((("held-out R²", "-"), ("additivity (held-out)", "--"))):
        pts = select(rows, series, "alpha")
        if not pts:
            continue
        colour = COLOURS[i % len(COLOURS)]
        plot_series(axis, rows, series, "alpha", color=colour, ls=style, marker="o", ms=5, lw=1.4,
                    label=f"trained(α): {series}")
        axis.vlines([r["x"] for r in pts], [r["lo"] if r["lo"] is not None else r["y"] for r in pts],
                    [r["hi"] if r["hi"] is not None else r["y"] for r in pts], color=colour, lw=1)
        limit = refs.get("ntk_r2" if i == 0 else "ntk_additivity")
        if limit is not None:
            axis.axhline(limit, color=colour, ls=":", lw=1.2, label=f"NTK limit: {series}")
    xs = [r["x"] for r in rows if r["panel"] == "alpha"]
    at = ", ".join(f"{a:g}" for a in refs.get("equivalent_at") or [])
    axis.set(xscale="log", xlabel="α (large: lazy, small: rich)", ylabel="held-out R² / additivity",
             title=_title(f"{title}\nequivalent to the NTK limit at {'α = ' + at if at else 'no α'}", meta))
    low = min(r["lo"] if r["lo"] is not None else r["y"] for r in rows if r["panel"] == "alpha")
    axis.set_ylim(max(R2_FLOOR, low - 0.05), 1.05)
    plain_ticks(axis, xs)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=6, loc="lower left")


def plot(rows: list[dict], meta: dict):
    encodings = meta["encodings"] or ["identity"]
    # At most two panels a row: each keeps a width that reads when the figure is printed a
    # page wide (11 inches wide at most).
    panels = len(encodings) + 3
    ncols = min(2, panels)
    nrows = -(-panels // ncols)
    fig, axes = new_figure(nrows, ncols, figsize=(5.5 * ncols, 4.6 * nrows + 0.4))
    flat = [axis for row in axes for axis in row]
    for k, encoding in enumerate(encodings):
        _draw_encoding(flat[k], rows, meta, encoding, "abcdefg"[k])
    bx = flat[len(encodings)]
    for spare in flat[panels:]:
        spare.set_axis_off()
    for i, encoding in enumerate(sorted({r["series"] for r in rows if r["panel"] == "movement"})):
        plot_series(bx, rows, encoding, "movement", color=COLOURS[i % len(COLOURS)],
                    marker=MARKERS[i % len(MARKERS)], ms=5, lw=1.3, label=encoding)
    bx.set(xscale="log", yscale="log", xlabel="width of each hidden layer",
           ylabel="‖Θ_T − Θ_0‖ / ‖Θ_0‖ (trained network's NTK)",
           title=_title(f"({'abcdefgh'[len(encodings)]}) how far the NTK moves in training", meta))
    plain_ticks(bx, [r["x"] for r in rows if r["panel"] == "movement"])
    bx.grid(True, which="both", alpha=0.3)
    if bx.get_legend_handles_labels()[0]:
        bx.legend(fontsize=7)
    letters = "abcdefghij"
    _draw_tasks(flat[len(encodings) + 1], rows, meta, letters[len(encodings) + 1])
    _draw_alpha(flat[len(encodings) + 2], rows, meta, letters[len(encodings) + 2])
    fig.suptitle("Kernel limit or feature learning? Held-out R² of the infinite-width limits, the linearised "
                 "and the trained MLP (this project's kernel-vs-sgd study)", fontsize=10)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    del seed  # the study fixes its own seeds
    rows, meta = compute(quick, progress)
    return finish(NAME, plot(rows, meta), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta)
