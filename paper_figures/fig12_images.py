"""Figure 12: does decodability predict composition? The controlled image experiment (issue 25),
from the image-composition study's store (python -m verify.study; verify.images.train per run).

(a) held-out success (the exact judge: the share of held-out prompts' images fully right) against
the probe's held-out decodability at the denoiser's best layer, one point per run (colour: the
number of training combinations; marker: the model), with the least-squares line and its 95%
band (percentile bootstrap over runs); the title gives Pearson's r and Spearman's ρ with their
intervals, as `python -m verify.study report image-composition` prints them;
(b) held-out success against the number of training combinations, one line per model (mean ±
sd over seeds), training success dashed;
(c) held-out decodability against the number of training combinations, the same way, with the
text encoder's (which reads the prompt) dotted;
(d) the held-out images of two runs (the most and the fewest training combinations, largest
model, first seed) beside their prompts, each marked right or wrong by the judge.
The study's `cpu` store is read when it holds a finished run, else the `smoke` store, run now
if empty (seconds), and every title says "SMOKE DATA" then; runs made by other or unknown code
are marked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from paper_figures.common import COLOURS, MARKERS, FigureResult, finish, plot_series, select
from paper_figures.fig9_studies import store_of
from verify.studies import provenance
from verify.studies.store import RunStore

NAME = "fig12_images"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Does decodability predict composition? A small text-to-image denoiser (this project's "
    "image-composition study). (a) Held-out success against held-out decodability, one point per run,"
    " with the least-squares line and its 95% band. (b) Held-out (solid) and training (dashed) "
    "success, and (c) held-out decodability, against the number of training combinations, per model. "
    "(d) Held-out images of two runs beside their prompts, framed green when judged right and red "
    "when wrong."
)
STUDY = "image-composition"
PROGRAM = "verify.images.train"
BAND_RESAMPLES = 2000
SHOWN_SAMPLES = 8


def table(quick: bool, progress: bool | None) -> tuple[dict, Path]:
    """The study's report (verify.images.study_report) at cpu scale, or at smoke scale (run now if need
    be), and the store it read."""
    from verify.images.study_report import effects_table

    scale, out, keys = store_of(STUDY, quick, progress)
    return effects_table(STUDY, scale, out, keys, provenance.code_fingerprint(PROGRAM)), out


def fit_band(x, y, grid, n_boot: int = BAND_RESAMPLES, seed: int = 0):
    """The least-squares line of y on x at `grid`, and its 95% percentile band over bootstrap
    resamples of the points (resamples with one x value are dropped)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))
    xb, yb = x[idx], y[idx]
    xc = xb - xb.mean(1, keepdims=True)
    var = (xc * xc).sum(1)
    keep = var > 0
    b = (xc * (yb - yb.mean(1, keepdims=True))).sum(1)[keep] / var[keep]
    a = yb.mean(1)[keep] - b * xb.mean(1)[keep]
    lines = a[:, None] + b[:, None] * np.asarray(grid)[None, :]
    lo, hi = np.quantile(lines, [0.025, 0.975], axis=0)
    return slope * np.asarray(grid) + intercept, lo, hi, dict(slope=float(slope), intercept=float(intercept),
                                                               resamples=int(keep.sum()))


def _samples(out: Path, keys: list[str]) -> dict[str, dict]:
    with RunStore(out / "study.sqlite", readonly=True) as store:
        return {r["key"]: r["report"].get("samples") for r in store.rows(status="done") if r["key"] in keys}


def compute(quick: bool, progress: bool | None) -> tuple[list[dict], dict]:
    t, out = table(quick, progress)
    runs = [r for r in t["runs"] if r["decodability"] is not None and r["test_success"] is not None]
    rows: list[dict] = []
    for r in runs:
        rows.append(dict(panel="a", series=f"{r['model']}, {r['train_combinations']} training combinations",
                         model=r["model"], x=r["decodability"], y=r["test_success"],
                         train_combinations=r["train_combinations"], seed=r["seed"], key=r["key"],
                         best_layer=r["best_layer"], train_success=r["train_success"], code=r["code"]))
    fit = None
    if len({r["decodability"] for r in runs}) > 1:
        x, y = [r["decodability"] for r in runs], [r["test_success"] for r in runs]
        grid = np.linspace(min(x), max(x), 40)
        line, lo, hi, fit = fit_band(x, y, grid)
        rows += [dict(panel="a", series="least squares", x=float(g), y=float(v), lo=float(a), hi=float(b),
                      guide=True) for g, v, a, b in zip(grid, line, lo, hi, strict=True)]
    for g in t["groups"]:
        n = g["setting"]["train_combinations"]
        # One series per panel and line: each name says its panel's quantity.
        for panel, metric, suffix in (("b", "test_success", ", held out"),
                                      ("b", "train_success", ", training"),
                                      ("c", "decodability", ", best UNet layer"),
                                      ("c", "text_decodability", ", text encoder")):
            if g[f"{metric}_mean"] is not None:
                rows.append(dict(panel=panel, series=g["model"] + suffix, x=n, y=g[f"{metric}_mean"],
                                 sd=g[f"{metric}_sd"], runs=g["runs"], parameters=g["setting"]["parameters"]))
    rows.sort(key=lambda r: (r["panel"], r["series"], r["x"]))
    shown = []
    if runs:
        largest = max(r["parameters"] for r in runs)
        big = sorted((r for r in runs if r["parameters"] == largest), key=lambda r: (r["train_combinations"],
                                                                                    r["seed"]))
        most, fewest = big[-1]["train_combinations"], big[0]["train_combinations"]
        ends = [next(r for r in big if r["train_combinations"] == n) for n in dict.fromkeys((most, fewest))]
        samples = _samples(out, [r["key"] for r in ends])
        for r in ends:
            s = samples.get(r["key"])
            if s:
                shown.append(dict(key=r["key"], train_combinations=r["train_combinations"],
                                  model=r["model"], seed=r["seed"], **s))
    meta = dict(checks={}, study=STUDY, scale=t["scale"],
                runs=dict(done=t["runs_done"], failed=t["runs_failed"]),
                correlation=t["correlation"], partial=t["partial"],
                effects=t["effects"], notes=t["notes"], fit=fit, code_fingerprint=t["code_fingerprint"],
                stale=sum(r["code"] != "current" for r in t["runs"]), samples=shown)
    return rows, meta


def _title(text: str, meta: dict) -> str:
    smoke = meta["scale"] == "smoke"
    mark = "\n[SMOKE DATA: 10-step runs, no result]" if smoke else f"\n({meta['scale']} scale)"
    stale = f"\n[{meta['stale']} runs made by other or unknown code]" if meta["stale"] else ""
    return text + mark + stale


def _corr_text(fit: dict) -> str:
    if fit.get("status") != "fitted":
        return f"correlation: {fit.get('status')}"
    p, s = fit["pearson"], fit["spearman"]
    return (f"Pearson r = {p['r']:.2f} [{p['lo']:.2f}, {p['hi']:.2f}], "
            f"Spearman ρ = {s['r']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}] (n = {fit['n']})")


def _draw_scatter(axis, rows: list[dict], meta: dict) -> None:
    from matplotlib.lines import Line2D

    pts = [r for r in rows if r["panel"] == "a" and not r.get("guide")]
    coverages = sorted({r["train_combinations"] for r in pts})
    models = sorted({r["model"] for r in pts})
    for name in sorted({r["series"] for r in pts}):  # one marker set per (model, coverage)
        group = select(pts, name)
        axis.plot([r["x"] for r in group], [r["y"] for r in group], ls="none", ms=7,
                  marker=MARKERS[models.index(group[0]["model"]) % len(MARKERS)],
                  color=COLOURS[coverages.index(group[0]["train_combinations"]) % len(COLOURS)], gid=name)
    line = select(rows, "least squares", "a")
    if line:
        xs = [r["x"] for r in line]
        axis.plot(xs, [r["y"] for r in line], color="k", lw=1.2, gid="least squares")
        axis.fill_between(xs, [r["lo"] for r in line], [r["hi"] for r in line], color="k", alpha=0.12)
    # The legend's keys: colour for coverage, marker for model (proxies, not drawn on the axes).
    handles = [Line2D([], [], ls="none", marker="o", color=COLOURS[i % len(COLOURS)],
                      label=f"{n} training combinations") for i, n in enumerate(coverages)]
    handles += [Line2D([], [], ls="none", marker=MARKERS[j % len(MARKERS)], color="0.4", label=m)
                for j, m in enumerate(models)]
    if pts:
        axis.legend(handles=handles, fontsize=7, loc="upper left")
    axis.set(xlabel="held-out decodability (probe's weighted F1, best denoiser layer)",
             ylabel="held-out success (exact judge)", ylim=(-0.05, 1.05),
             title=_title("(a) decodability against composition, one point per run", meta))
    axis.text(0.98, 0.03, _corr_text(meta["correlation"]).replace(", Spearman", ",\nSpearman"),
              transform=axis.transAxes, ha="right", va="bottom", fontsize=8,
              bbox=dict(facecolor="white", edgecolor="0.7", alpha=0.9))
    axis.grid(True, alpha=0.3)


def _draw_ladder(axis, rows: list[dict], panel: str, ylabel: str, title: str, meta: dict) -> None:
    solid = {"b": ", held out", "c": ", best UNet layer"}[panel]
    names = sorted({r["series"] for r in rows if r["panel"] == panel})
    base = [n.removesuffix(solid) for n in names if n.endswith(solid)]
    for i, model in enumerate(base):
        colour, marker = COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)]
        for name, ls in ((model + solid, "-"), (f"{model}, training", "--"), (f"{model}, text encoder", ":")):
            pts = select(rows, name, panel)
            if not pts:
                continue
            plot_series(axis, rows, name, panel, color=colour, ls=ls, marker=marker if ls == "-" else None,
                        ms=5, lw=1.2, label=name)
            axis.vlines([r["x"] for r in pts], [r["y"] - (r["sd"] or 0) for r in pts],
                        [r["y"] + (r["sd"] or 0) for r in pts], color=colour, lw=1)  # ± sd over seeds
    if names:
        axis.legend(fontsize=7, loc="lower right")
    axis.set(xlabel="training combinations", ylabel=ylabel, ylim=(-0.05, 1.05), title=_title(title, meta))
    axis.grid(True, alpha=0.3)


def _draw_samples(fig, spec, meta: dict) -> None:
    from verify.images.analyse import sample_images

    shown = meta["samples"]
    if not shown:
        axis = fig.add_subplot(spec)
        axis.set_axis_off()
        axis.text(0.5, 0.5, "no samples in the store", ha="center", va="center")
        return
    grid = spec.subgridspec(len(shown), SHOWN_SAMPLES, hspace=0.9, wspace=0.15)
    for i, s in enumerate(shown):
        images = sample_images(s)
        for j in range(SHOWN_SAMPLES):
            axis = fig.add_subplot(grid[i, j])
            axis.set_xticks([])
            axis.set_yticks([])
            if j >= len(images):
                axis.set_axis_off()
                continue
            axis.imshow(images[j], interpolation="nearest")
            ok = s["success"][j]
            for side in axis.spines.values():
                side.set(color="tab:green" if ok else "tab:red", lw=2)
            axis.set_xlabel(s["prompts"][j].removeprefix("a ").replace(" and a ", "\n+ "), fontsize=5.5)
            if j == 0:
                axis.set_title(f"(d) held-out images, {s['train_combinations']} training combinations, "
                               f"{s['model']}, seed {s['seed']} (green: right, red: wrong)", fontsize=8,
                               loc="left")


def plot(rows: list[dict], meta: dict):
    fig = Figure(figsize=(15.0, 11.0))  # nested grids: laid out by hand, not by the constrained engine
    fig.subplots_adjust(left=0.05, right=0.98, top=0.9, bottom=0.04)
    outer = fig.add_gridspec(2, 1, height_ratios=(1.25, 1.0), hspace=0.35)
    top = outer[0].subgridspec(1, 3, wspace=0.28)
    _draw_scatter(fig.add_subplot(top[0]), rows, meta)
    _draw_ladder(fig.add_subplot(top[1]), rows, "b", "success (solid: held out; dashed: training)",
                 "(b) success against coverage", meta)
    _draw_ladder(fig.add_subplot(top[2]), rows, "c", "held-out decodability (dotted: text encoder)",
                 "(c) decodability against coverage", meta)
    _draw_samples(fig, outer[1], meta)
    fig.suptitle("Does decodability predict composition? A small text-to-image denoiser trained on a "
                 "rendered shape/colour/position family (this project's image-composition study)",
                 fontsize=10)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    del seed  # the study fixes its own seeds
    rows, meta = compute(quick, progress)
    return finish(NAME, plot(rows, meta), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta)
