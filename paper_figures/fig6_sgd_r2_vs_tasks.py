"""Figure 6: compositional R² on held-out tasks against the number of training tasks.

The paper's headline: scaling the data (here, the number of task supports seen in
training, out of all Σ_{k≤K} C(M, k)) leads SGD-trained MLPs to generalize to module
combinations they never saw. For each held-out fraction of the plan, `verify.sgd`
splits the supports at random (every module seen, the training supports connected),
trains one MLP per shape at the size of the construction for ε, and scores the
compositional R² (mean over tasks and outputs of 1 − MSE/Var) on training and held-out
tasks. (a) R², with references at 1 and 0.9; (b) 1 − R² on a log scale, where the
approach to 1 shows. The construction, right on every task by design, is the reference:
its held-out R² does not depend on the split.
"""

from __future__ import annotations

import math
from pathlib import Path

from paper_figures import sgd_data
from paper_figures.common import COLOURS, MARKERS, FigureResult, config_of, finish, new_figure, plot_series

NAME = "fig6_sgd_r2_vs_tasks"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Compositional R² of SGD-trained MLPs on held-out tasks against the number of training tasks "
    "(supports), one run per held-out fraction, at the construction's size for one ε. (a) R² on "
    "training and held-out tasks, with references at 1 and 0.9; (b) 1 − R² on a log scale. The "
    "construction, right on every task, is the reference."
)
SIDES = (("train", "training tasks"), ("held_out", "held-out tasks"))


def series_name(panel: str, network: str, side: str) -> str:
    return f"{'R2' if panel == 'a' else '1-R2'} {network} {side}"


def networks(p: sgd_data.SgdPlan) -> list[tuple[str, str]]:
    """(network, side) pairs drawn: every SGD shape on both sides, the construction held out."""
    return [(f"sgd {s}", side) for s in p.shapes for side, _ in SIDES] + [("construction", "held_out")]


def compute(p: sgd_data.SgdPlan, progress: bool | None = None) -> tuple[list[dict], dict]:
    reports = sgd_data.task_reports(p, progress)
    rows: list[dict] = []
    dropped = []
    for panel in ("a", "b"):
        for network, side in networks(p):
            for r in reports:
                row = r["rows"][0] if network == "construction" else next(
                    x for x in r["rows"] if x["network"] == network)
                r2 = row[f"{side}_r2"]
                y = r2 if panel == "a" else 1.0 - r2
                if not math.isfinite(y) or (panel == "b" and y <= 0):  # nothing to draw on a log axis
                    dropped.append(dict(panel=panel, network=network, side=side, held_out=r["held_out"]))
                    continue
                rows.append(dict(panel=panel, series=series_name(panel, network, side),
                                 x=r["split"]["n_train"], y=y, r2=r2, network=network, side=side,
                                 held_out_fraction=r["held_out"],
                                 n_test=r["split"]["n_test"], hidden_units=row["hidden_units"],
                                 r2_pairs_used=row[f"{side}_r2_pairs_used"], rmse=row[f"{side}_rmse"],
                                 sup=row[f"{side}_sup"]))
    table = [dict(n_train=r["split"]["n_train"], n_test=r["split"]["n_test"], held_out_fraction=r["held_out"],
                  **{x["network"]: dict(train_r2=x["train_r2"], held_out_r2=x["held_out_r2"])
                     for x in r["rows"]}) for r in reports]
    constr = [r["rows"][0] for r in reports]
    checks = {"construction: sup error <= certificate on held-out tasks (every split)":
              all(c["held_out_sup"] <= c["certificate"] for c in constr)}
    meta = dict(plan=p, checks=checks, eps=p.tasks_eps, n_supports=reports[0]["split"]["n_train"]
                + reports[0]["split"]["n_test"], train=reports[0]["train"], r2=table, dropped=dropped,
                runs=[dict(held_out=r["held_out"], argv=r["argv"], seconds=r["seconds"], split=r["split"],
                           rows=r["rows"]) for r in reports])
    return rows, meta


def plot(rows: list[dict], meta: dict, p: sgd_data.SgdPlan):
    fig, axes = new_figure(1, 3, figsize=(13.5, 5.4), gridspec_kw=dict(width_ratios=[1, 1, 0.45]))
    ax, bx, side = axes[0]
    for panel, axis in (("a", ax), ("b", bx)):
        for network, which in networks(p):
            series = series_name(panel, network, which)
            if not any(r["series"] == series for r in rows):
                continue  # every point dropped (non-finite R², or R² ≥ 1 on the log panel)
            if network == "construction":
                style = dict(color="k", marker="*", ms=10, ls=":", mfc="white")
            else:
                i = p.shapes.index(network.removeprefix("sgd "))
                held = which == "held_out"
                style = dict(color=COLOURS[i], marker=MARKERS[i], ms=7, ls="-" if held else "--",
                             mfc="white" if held else COLOURS[i])
            plot_series(axis, rows, series, panel, lw=1.5 if which == "held_out" else 1.0, mec=style["color"],
                        **style, label=f"{network}, {dict(SIDES)[which]}")
    for y in (1.0, 0.9):
        ax.axhline(y, color="0.3", lw=0.8, ls="-" if y == 1.0 else "--", zorder=0)
        ax.annotate(f"R² = {y:g}", (1.0, y), xycoords=("axes fraction", "data"), xytext=(3, 0),
                    textcoords="offset points", ha="left", va="center", fontsize=7.5, color="0.3",
                    annotation_clip=False)
    bx.axhline(0.1, color="0.3", lw=0.8, ls="--", zorder=0)
    bx.annotate("R² = 0.9", (1.0, 0.1), xycoords=("axes fraction", "data"), xytext=(3, 0),
                textcoords="offset points", ha="left", va="center", fontsize=7.5, color="0.3",
                annotation_clip=False)
    xs = sorted({r["x"] for r in rows})
    for axis in (ax, bx):
        axis.set(xlabel=f"training tasks (supports, of {meta['n_supports']})", xticks=xs)
        axis.grid(True, which="major", alpha=0.3)
    ax.set(ylabel="compositional R²", title="(a) R² (mean over tasks and outputs of 1 − MSE/Var)")
    bx.set(yscale="log", ylabel="1 − R²", title="(b) 1 − R², log scale")
    side.axis("off")
    handles, labels = ax.get_legend_handles_labels()
    side.legend(handles, labels, loc="upper left", fontsize=7.5, title_fontsize=7.5, frameon=False,
                title="filled: training tasks\nopen: held-out tasks")
    lines = ["R², held-out | train:", "tasks " + " ".join(f"{s:^13}" for s in p.shapes)]
    for t in meta["r2"]:
        lines.append(f"{t['n_train']:>5} " + " ".join(
            f"{t['sgd ' + s]['held_out_r2']:6.3f}|{t['sgd ' + s]['train_r2']:6.3f}" for s in p.shapes))
    c = [min(t[k]["held_out_r2"] for k in t if k.startswith("construction")) for t in meta["r2"]]
    lines += ["", f"construction, held-out: ≥ {min(c):.5f}"]
    side.text(0.0, 0.0, "\n".join(lines), transform=side.transAxes, va="bottom", ha="left", fontsize=7.5,
              family="monospace")
    t = meta["train"]
    units = sorted({r["hidden_units"] for r in rows})
    fig.suptitle(f"Held-out compositional R² vs training tasks  (I={p.I}, H={p.H}, O={p.O}, M={p.M}, "
                 f"K={p.K}; random splits; {units[0]} hidden units = construction at ε={p.tasks_eps:g}; "
                 f"AdamW, {t['steps']} steps)", fontsize=10)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    p = sgd_data.plan(quick, seed)
    rows, meta = compute(p, progress)
    return finish(NAME, plot(rows, meta, p), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta, config_of(meta, "plan", sgd_data.QUICK, sgd_data.DEFAULT))
