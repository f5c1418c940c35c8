"""Figure 5: the construction against SGD-trained MLPs of the same size, on training and
on held-out tasks.

For each ε of the plan, `verify.sgd` builds the construction (whose hidden-unit count is
set by ε) and trains one MLP per shape with exactly as many hidden units: `matched` (the
construction's widths) and `balanced` (two equal layers). (a) the sup error (a lower
estimate, `verify.measure`) and (b) the RMSE, against hidden units, log-log; filled
markers and solid lines on the training tasks, open markers and dashed lines on the
held-out ones. The construction's certificate I·C·a/N² bounds its sup error on every
task, seen in training or not; nothing bounds SGD's, and the text box gives its ratio
to the construction's at equal size.
"""

from __future__ import annotations

from pathlib import Path

from paper_figures import sgd_data
from paper_figures.common import COLOURS, MARKERS, FigureResult, config_of, finish, new_figure, plot_series

NAME = "fig5_sgd_error_vs_size"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "The construction against SGD-trained MLPs with as many hidden units (matched widths, and two "
    "balanced layers), one size per ε. (a) Sup error and (b) RMSE against hidden units, log-log, on "
    "training tasks (filled, solid) and held-out tasks (open, dashed); the construction's certificate"
    " bounds its sup error on every task, and the box gives SGD's ratio to the construction at equal "
    "size."
)
SIDES = (("train", "training tasks"), ("held_out", "held-out tasks"))
METRICS = (("a", "sup", "sup", "sup error"), ("b", "RMSE", "rmse", "RMSE"))  # panel, series, key, title


def series_name(metric: str, network: str, side: str) -> str:
    return f"{metric} {network} {side}"


def compute(p: sgd_data.SgdPlan, progress: bool | None = None) -> tuple[list[dict], dict]:
    reports = sgd_data.size_reports(p, progress)
    networks = ["construction", *(f"sgd {s}" for s in p.shapes)]
    rows: list[dict] = []
    for panel, metric, key, _ in METRICS:
        for network in networks:
            for side, _ in SIDES:
                for r in reports:
                    row = r["rows"][0] if network == "construction" else next(
                        x for x in r["rows"] if x["network"] == network)
                    rows.append(dict(panel=panel, series=series_name(metric, network, side),
                                     x=row["hidden_units"], y=row[f"{side}_{key}"], eps=r["eps"],
                                     network=network, side=side, widths=str(row["widths"]),
                                     n_train=r["split"]["n_train"], n_test=r["split"]["n_test"]))
    rows += [dict(panel="a", series="certificate", x=r["rows"][0]["hidden_units"],
                  y=r["rows"][0]["certificate"], eps=r["eps"]) for r in reports]

    ratios = []
    for r in reports:
        c = r["rows"][0]
        for row in sgd_data.sgd_rows(r):
            ratios.append(dict(eps=r["eps"], hidden_units=row["hidden_units"], shape=row["shape"],
                               **{f"{side}_{m}": row[f"{side}_{m}"] / c[f"{side}_{m}"]
                                  for side, _ in SIDES for m in ("sup", "rmse")}))
    constr = [r["rows"][0] for r in reports]
    checks = {"construction: sup error <= certificate on training tasks (every size)":
              all(c["train_sup"] <= c["certificate"] for c in constr),
              "construction: sup error <= certificate on held-out tasks (every size)":
              all(c["held_out_sup"] <= c["certificate"] for c in constr)}
    meta = dict(plan=p, checks=checks, split=reports[0]["split"], train=reports[0]["train"],
                sgd_over_construction=ratios,
                runs=[dict(eps=r["eps"], argv=r["argv"], seconds=r["seconds"], rows=r["rows"])
                      for r in reports])
    return rows, meta


def plot(rows: list[dict], meta: dict, p: sgd_data.SgdPlan):
    fig, axes = new_figure(1, 3, figsize=(13.5, 5.4), gridspec_kw=dict(width_ratios=[1, 1, 0.45]))
    networks = ["construction", *(f"sgd {s}" for s in p.shapes)]
    sizes = sorted({int(r["x"]) for r in rows})
    for ax, (panel, metric, _, label) in zip(axes[0], METRICS, strict=False):
        if panel == "a":
            plot_series(ax, rows, "certificate", "a", color="k", lw=1.0, ls=":", marker="_", ms=12, mew=1.5,
                        label="construction's certificate I·C·a/N²")
        for i, network in enumerate(networks):
            c, m = ("k", "*") if network == "construction" else (COLOURS[i - 1], MARKERS[i - 1])
            for side, side_label in SIDES:
                train = side == "train"
                plot_series(ax, rows, series_name(metric, network, side), panel, color=c, marker=m,
                            ls="--" if train else "-", lw=1.0 if train else 1.5, ms=10 if m == "*" else 7,
                            mec=c, mfc=c if train else "white", label=f"{network}, {side_label}")
        ax.set(xscale="log", yscale="log", xlabel="hidden units (the same for the construction and SGD)",
               ylabel="sup ‖f − g‖∞ (lower estimate)" if panel == "a" else "RMSE",
               title=f"({panel}) {label}")
        ax.set_xticks(sizes, [f"{u:,}" for u in sizes])
        ax.set_xticks([], minor=True)
        ax.grid(True, which="major", alpha=0.3)
    side = axes[0, 2]
    side.axis("off")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    side.legend(handles, labels, loc="upper left", fontsize=7.5, title_fontsize=7.5, frameon=False,
                title="filled: training tasks\nopen: held-out tasks")
    eps = {int(r["x"]): r["eps"] for r in rows if r["series"] == "certificate"}
    lines = ["SGD sup error / construction's", "at equal size, train | held-out:"]
    lines += [f"{r['hidden_units']:>5,} {r['shape']:<8} {r['train_sup']:>5.0f}× | {r['held_out_sup']:>4.0f}×"
              for r in meta["sgd_over_construction"]]
    lines += ["", "construction's ε:"] + [f"{u:>5,} units: ε = {e:g}" for u, e in eps.items()]
    side.text(0.0, 0.0, "\n".join(lines), transform=side.transAxes, va="bottom", ha="left", fontsize=7.5,
              family="monospace")
    s, t = meta["split"], meta["train"]
    fig.suptitle(f"Construction vs SGD at equal size  (I={p.I}, H={p.H}, O={p.O}, M={p.M}, K={p.K}; "
                 f"random split: {s['n_train']} training supports, {s['n_test']} held out; AdamW, "
                 f"{t['steps']} steps)",
                 fontsize=10)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    p = sgd_data.plan(quick, seed)
    rows, meta = compute(p, progress)
    return finish(NAME, plot(rows, meta, p), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta, config_of(meta, "plan", sgd_data.QUICK, sgd_data.DEFAULT))
