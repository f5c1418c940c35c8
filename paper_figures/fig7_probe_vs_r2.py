"""Figure 7: linear decodability of z against held-out compositional R², across every SGD
run of figures 5 and 6.

For each trained network, `verify.sgd` fits the paper's probe (verify.metrics.probe_r2):
a ridge z ← features with λ = 1, one row per task, fitted on 512 in-distribution tasks and
scored by the mean per-dimension R² on 1,024 held-out tasks, for the encoding, each hidden
layer before its ReLU and the output. The first layer is linear in [z, x], so it decodes z
almost perfectly in every network (≥ 0.999 here) and says nothing; each point is the
network at its last hidden layer (pre-ReLU), the representation the output is read from
(every layer's value is in the data). Colour: shape; marker: size; the number next to a point:
its training tasks. Pearson r is over the SGD points (drawn when there are at least
three); the construction, right on every task by design, is drawn for reference and
left out of r.

In the committed figure (figures 5–7 take ~5 min on 2 cores with --slow) r = +0.73 over the
14 SGD networks, but the split is by shape: the matched networks' last layer has the teacher's
4 units (probe ≈ −0.1, held-out R² 0.06–0.86), the balanced ones keep z (≈ 0.98, held-out R²
0.77–0.87). The construction composes exactly with a last layer from which z is not linearly
readable (−0.1): decodability there is not necessary. The same shows in verify.sgd's default
run: the first layer probes at 1.000, the construction's and the matched student's second layer
(the teacher's own H = 4 units) at −0.1, the balanced student's 742-unit second layer at 0.993.
For the transformer the features are the encoding, each block's residual stream and the final
LayerNorm at the last token; the official code probes no hypernetwork.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from paper_figures import sgd_data
from paper_figures.common import COLOURS, MARKERS, FigureResult, config_of, finish, new_figure, plot_series

NAME = "fig7_probe_vs_r2"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Linear decodability of z (the probe's held-out R² at the last hidden layer) against held-out "
    "compositional R², one point per SGD run of figures 5 and 6 (colour: shape; marker: size; the "
    "number beside a point: its training tasks), with the construction for "
    "reference. The side text gives Pearson's r over the SGD runs."
)
MIN_POINTS_FOR_R = 3


def hidden_layers(probe: list | None) -> list:
    """The hidden layers' probe R² (pre-ReLU), in order, from verify.sgd's (feature, R²) pairs;
    the encoding and the output are probed too but are not the network's representation."""
    return [v for name, v in probe or [] if name.startswith("layer")]


def last_layer(probe: list | None) -> tuple[int, float] | None:
    """(1-based hidden layer, probe R²) of the last hidden layer, or None when it has no
    finite score."""
    layers = hidden_layers(probe)
    if not layers or layers[-1] is None or not math.isfinite(layers[-1]):
        return None
    return len(layers), layers[-1]


def pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < MIN_POINTS_FOR_R or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return None
    return float(np.corrcoef(xs, ys)[0, 1])


def point(r: dict, row: dict, series: str) -> dict | None:
    last = last_layer(row["probe_r2"])
    y = row["held_out_r2"]
    if last is None or not math.isfinite(y):
        return None
    return dict(panel="a", series=series, x=last[1], y=y, layer=last[0],
                probe_r2_layers=" ".join(repr(float("nan" if v is None else v))
                                         for v in hidden_layers(row["probe_r2"])),
                network=row["network"],
                hidden_units=row["hidden_units"], eps=r["eps"], held_out_fraction=r["held_out"],
                n_train=r["split"]["n_train"], n_test=r["split"]["n_test"], train_r2=row["train_r2"],
                figures=" ".join(r["figures"]))


def compute(p: sgd_data.SgdPlan, progress: bool | None = None) -> tuple[list[dict], dict]:
    reports = sgd_data.all_reports(p, progress)
    sizes = sorted({r["rows"][0]["hidden_units"] for r in reports})
    rows: list[dict] = []
    dropped = 0
    for shape in p.shapes:
        for units in sizes:
            for r in reports:
                for row in sgd_data.sgd_rows(r):
                    if row["shape"] == shape and row["hidden_units"] == units:
                        pt = point(r, row, f"sgd {shape} {units} units")
                        dropped += pt is None
                        rows += [pt] if pt else []
    construction = [point(r, r["rows"][0], "construction") for r in reports]
    dropped_construction = sum(pt is None for pt in construction)
    rows += [pt for pt in construction if pt]

    sgd = [r for r in rows if r["series"] != "construction"]
    correlation = dict(all=dict(n=len(sgd), pearson_r=pearson([r["x"] for r in sgd], [r["y"] for r in sgd])))
    for shape in p.shapes:
        sel = [r for r in sgd if r["network"] == f"sgd {shape}"]
        correlation[shape] = dict(n=len(sel), pearson_r=pearson([r["x"] for r in sel], [r["y"] for r in sel]))
    # The probe fits one row per training task, so part of this correlation is the probe's own.
    probe_vs_tasks = pearson([r["x"] for r in sgd], [r["n_train"] for r in sgd])
    meta = dict(plan=p, checks={}, layer="last hidden layer, before its ReLU",
                correlation=correlation, probe_r2_vs_n_train_pearson_r=probe_vs_tasks,
                dropped_sgd_points=dropped, dropped_construction_points=dropped_construction,
                runs=[dict(eps=r["eps"], held_out=r["held_out"], figures=r["figures"], argv=r["argv"],
                           rows=[{k: x[k] for k in ("network", "hidden_units", "widths", "probe_r2",
                                                    "held_out_r2", "train_r2")} for x in r["rows"]])
                      for r in reports])
    return rows, meta


def plot(rows: list[dict], meta: dict, p: sgd_data.SgdPlan):
    fig, axes = new_figure(1, 2, figsize=(10.5, 6.0), gridspec_kw=dict(width_ratios=[1, 0.42]))
    ax, side = axes[0]
    sizes = sorted({int(r["hidden_units"]) for r in rows if r["series"] != "construction"})
    for i, shape in enumerate(p.shapes):
        for j, units in enumerate(sizes):
            series = f"sgd {shape} {units} units"
            if any(r["series"] == series for r in rows):
                c, m = COLOURS[i % len(COLOURS)], MARKERS[j % len(MARKERS)]
                plot_series(ax, rows, series, "a", ls="none", marker=m, ms=7, color=c, mec=c, alpha=0.85,
                            label=f"SGD {shape}, {units:,} hidden units")
    if any(r["series"] == "construction" for r in rows):
        plot_series(ax, rows, "construction", "a", ls="none", marker="*", ms=10, color="k", mfc="white",
                    label="construction (not in r)")
    for r in rows:
        ax.annotate(f"{r['n_train']:.0f}", (r["x"], r["y"]), xytext=(4, 3), textcoords="offset points",
                    fontsize=6.5, color="0.35")
    ax.axhline(1.0, color="0.3", lw=0.8, zorder=0)
    ax.set(xlabel="probe R² for z, last hidden layer (held-out tasks)", ylabel="held-out compositional R²",
           title=f"Decodability of z vs compositional generalization  (I={p.I}, H={p.H}, O={p.O}, M={p.M}, "
                 f"K={p.K})")
    ax.title.set_fontsize(10)
    ax.grid(True, alpha=0.3)
    side.axis("off")
    handles, labels = ax.get_legend_handles_labels()
    side.legend(handles, labels, loc="upper left", fontsize=7.5, frameon=False,
                title="numbers: training tasks", title_fontsize=7.5)
    lines = ["Pearson r, probe R² vs", "held-out R² (SGD runs):"]
    for key, c in meta["correlation"].items():
        r = "—" if c["pearson_r"] is None else f"{c['pearson_r']:+.3f}"
        lines.append(f"  {key:<9} n={c['n']:<3} r = {r}")
    r = meta["probe_r2_vs_n_train_pearson_r"]
    lines += ["", "probe R² vs training tasks:", f"  r = {'—' if r is None else f'{r:+.3f}'}"]
    construction = [r["x"] for r in rows if r["series"] == "construction"]
    if construction:  # its last hidden layer is the teacher's own H units
        lines += ["", "The construction's last hidden", "layer is the teacher's H units",
                  f"(probe {min(construction):.2f} – {max(construction):.2f}): it",
                  "composes without z being", "linearly readable there."]
    side.text(0.0, 0.0, "\n".join(lines), transform=side.transAxes, va="bottom", ha="left", fontsize=7.5,
              family="monospace")
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    p = sgd_data.plan(quick, seed)
    rows, meta = compute(p, progress)
    return finish(NAME, plot(rows, meta, p), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta, config_of(meta, "plan", sgd_data.QUICK, sgd_data.DEFAULT))
