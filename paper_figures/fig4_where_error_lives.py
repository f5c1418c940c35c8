"""Figure 4: where the construction's error lives.

(a) For the worst task that `measure_sup_error` finds, f − g of the worst output over a
2-D slice of the input box: x_0 and x_1 on a grid over [-1, 1]², the other coordinates
fixed at the worst point's. With I = 2 the slice is the whole box, so the picture is the
task's complete error landscape: a lattice of bumps of period 4/N in each x_i (the
chords of the square interpolant), switched and mixed by the teacher's ReLU and readout.
(b) Per-task error over certificate for every task: each task's worst of its random
points (`SupErrorEstimate.task_errors`), with the certificate (1) and the sup the
gradient ascent reached marked. How far the mass sits from 1 is the certificate's slack.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from constructions.shallow import build_shallow
from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
from paper_figures.common import FigureResult, cached, config_of, finish, new_figure, plot_series, select
from verify.theorem.measure import measure_sup_error

NAME = "fig4_where_error_lives"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Where the construction's error lives. (a) f − g of one output over a slice of (x_0, x_1) for the"
    " worst task, with the worst point measured (star) and the slice's largest |f − g| (circle). (b) "
    "The histogram of per-task measured error ÷ certificate over every task, with the certificate "
    "(ratio 1) and the sup found by gradient ascent."
)


@dataclass(frozen=True)
class Config:
    I: int = 2  # the slice is then all of X, and the measurer adds its grid stage
    H: int = 16
    O: int = 16
    M: int = 16  # 696 tasks for the histogram
    K: int = 3
    weights: str = "discrete"
    eps: float = 1e-2
    grid: int = 241  # 6+ samples per bump period 4/N (N = 66 here)
    points_per_task: int = 64
    refine_steps: int = 100
    measure_grid: int | None = None  # the measurer's own x-grid for I ≤ 2 (None: its 257²)
    bins: int = 50
    seed: int = 0


QUICK = Config(I=2, H=3, O=3, M=4, K=2, grid=21, points_per_task=8, refine_steps=10,
               measure_grid=17, bins=10)


def error_slice(net, teacher, x_star: np.ndarray, z_star: np.ndarray, o: int, grid: int) -> tuple:
    """(axis, values (grid, grid)) with values[j, i] = (f − g)_o at x_0 = axis[i], x_1 = axis[j]."""
    axis = np.linspace(-1.0, 1.0, grid)
    x0, x1 = np.meshgrid(axis, axis)  # rows vary x_1: the image's y axis
    x = np.tile(x_star, (grid * grid, 1))
    x[:, 0], x[:, 1] = x0.ravel(), x1.ravel()
    z = torch.as_tensor(np.tile(z_star, (len(x), 1)))
    x = torch.as_tensor(x)
    with torch.no_grad():
        diff = net(torch.cat([teacher.encode(z), x], dim=1)) - teacher.forward(z, x)
    return axis, diff[:, o].numpy().reshape(grid, grid)


def compute(cfg: Config, progress: bool | None = None) -> tuple[list[dict], dict]:
    teacher = sample_hyperteacher(HyperteacherConfig(I=cfg.I, H=cfg.H, O=cfg.O, M=cfg.M, K=cfg.K,
                                                     weights=cfg.weights, seed=cfg.seed))
    net = build_shallow(teacher, cfg.eps)
    cert, floor = net.certificate(), net.rounding_floor()
    est = measure_sup_error(net, teacher, points_per_task=cfg.points_per_task,
                            refine_steps=cfg.refine_steps, grid_points=cfg.measure_grid, seed=cfg.seed,
                            progress=progress)
    x_star, z_star = est.x, est.z
    with torch.no_grad():
        z, x = torch.as_tensor(z_star[None]), torch.as_tensor(x_star[None])
        at_worst = (net(torch.cat([teacher.encode(z), x], dim=1)) - teacher.forward(z, x))[0].numpy()
    o = int(np.abs(at_worst).argmax())
    axis, values = error_slice(net, teacher, x_star, z_star, o, cfg.grid)

    ratios = est.task_errors / cert
    edges = np.linspace(0.0, max(1.0, float(ratios.max())), cfg.bins + 1)
    counts, _ = np.histogram(ratios, bins=edges)
    top = float(counts.max()) * 1.08
    sup_ratio = est.sup_error / cert
    j, i = np.unravel_index(np.abs(values).argmax(), values.shape)
    rows = [dict(panel="a", series="worst point", x=float(x_star[0]), y=float(x_star[1]),
                 value=float(at_worst[o])),
            dict(panel="a", series="slice maximum", x=float(axis[i]), y=float(axis[j]),
                 value=float(values[j, i]))]
    rows += [dict(panel="b", series="tasks", x=float(lo), x_right=float(hi), y=int(c))
             for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)]
    rows += [dict(panel="b", series="certificate", x=1.0, y=y) for y in (0.0, top)]
    rows += [dict(panel="b", series="sup after ascent", x=sup_ratio, y=y) for y in (0.0, top)]
    checks = {"measured sup <= certificate": est.sup_error <= cert + floor,
              "max |f - g| on the slice <= certificate": float(np.abs(values).max()) <= cert + floor,
              "every task's error <= certificate": bool((est.task_errors <= cert + floor).all())}
    meta = dict(config=cfg, N=net.N, C=net.C, a=net.a, certificate=cert, rounding_floor=floor,
                measured=est.to_dict(), measured_over_certificate=sup_ratio,
                slice=dict(output=o, fixed_x=x_star[2:], z_support=est.support,
                           z_values=[float(z_star[m]) for m in est.support], x0=axis, x1=axis, values=values,
                           max_abs_over_certificate=float(np.abs(values).max()) / cert),
                task_ratios=dict(values=ratios, min=float(ratios.min()), median=float(np.median(ratios)),
                                 max=float(ratios.max()), n=len(ratios), edges=edges, counts=counts),
                checks=checks)
    return rows, meta


def plot(rows: list[dict], meta: dict, cfg: Config):
    fig, axes = new_figure(1, 2, figsize=(11.0, 4.8), gridspec_kw=dict(width_ratios=[1.15, 1]))
    ax, bx = axes[0]
    s = meta["slice"]
    v = float(np.abs(s["values"]).max())
    image = ax.imshow(s["values"], origin="lower", extent=(-1, 1, -1, 1), cmap="RdBu_r", vmin=-v, vmax=v,
                      interpolation="nearest", aspect="equal")
    image.set_gid("f - g")
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    bar.set_label(f"(f − g) of output {s['output']}   (certificate {meta['certificate']:.2e})")
    plot_series(ax, rows, "worst point", "a", ls="none", marker="*", ms=14, mfc="gold", mec="k",
                label=f"worst point measured: |f − g| = {meta['measured']['sup_error']:.2e}")
    top = select(rows, "slice maximum", "a")[0]
    plot_series(ax, rows, "slice maximum", "a", ls="none", marker="o", ms=10, mfc="none", mec="k", mew=1.5,
                label=f"largest |f − g| on this grid: {abs(top['value']):.2e}")
    z_text = ", ".join(f"z{m}={w:.2g}" for m, w in zip(s["z_support"], s["z_values"], strict=True))
    fixed = "" if cfg.I <= 2 else ", other x_i at the worst point"
    ax.set(xlabel="x_0", ylabel="x_1",
           title=f"(a) worst task ({z_text}){fixed}\nI={cfg.I}, H={cfg.H}, M={cfg.M}, K={cfg.K}, "
                 f"ε={cfg.eps:g}, N={meta['N']}; max |f − g| here = "
                 f"{s['max_abs_over_certificate']:.3f} × certificate")
    ax.set_title(ax.get_title(), fontsize=9, pad=10)  # clear of the y axis' top tick label
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=8, frameon=False)

    t = meta["task_ratios"]
    hist = bx.stairs(t["counts"], t["edges"], fill=True, color="tab:blue", alpha=0.6,
                     label=f"{t['n']} tasks: worst of {cfg.points_per_task} random x each")
    hist.set_gid("tasks")
    plot_series(bx, rows, "certificate", "b", color="k", lw=1.5, label="certificate (ratio 1)")
    plot_series(bx, rows, "sup after ascent", "b", color="tab:red", ls="--", lw=1.2,
                label=f"sup after gradient ascent: {meta['measured_over_certificate']:.3f}")
    bx.set(xlabel="per-task measured error / certificate", ylabel="number of tasks", xlim=(0, None),
           ylim=(0, None), title=f"(b) per-task error / certificate: median {t['median']:.3f}, "
                                 f"max {t['max']:.3f}")
    bx.title.set_fontsize(9)
    # Below the axes, as (a)'s: the lines span the axes' height, with too little room between.
    bx.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=8, frameon=False)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    cfg = replace(QUICK if quick else Config(), seed=seed)
    rows, meta = cached(out, NAME, cfg, __name__, lambda: compute(cfg, progress))
    return finish(NAME, plot(rows, meta, cfg), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta, config_of(meta, "config", QUICK, Config()))
