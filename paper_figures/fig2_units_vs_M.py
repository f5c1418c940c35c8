"""Figure 2: hidden units against the number of modules M, next to the number of tasks.

For each ε: the theorem variant (carries z: + M, slope 1 in M) and the lean variant
(carries b(z̃): flat), both counted on the built nn.Sequential (verify.theorem.check.count_built:
with its weights up to 512 MiB, where it is also checked to compute the structured
evaluator's function, and as shapes only beyond, marked in each row's `counted_from`). The
memorization baseline (one copy of the teacher's H units per task) is built and its
Linear widths counted where it fits in memory, and drawn from its formula beyond. The
number of tasks Σ_{k≤K} C(M, k) is its own series: it and the memorizer grow like M^K.

The committed figure: the memorizer built and counted up to M = 32, its formula beyond; the
construction's 40 networks all counted on their nn.Sequential (the largest, 4.7 GiB at
M = 1024, ε = 1e-4, as shapes only).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from constructions.base import count_hidden_units
from constructions.memorize import build_memorizer
from constructions.shallow import build_shallow
from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
from paper_figures.common import COLOURS, FigureResult, cached, config_of, finish, new_figure, plot_series
from theory.bounds import VARIANTS, hidden_units, memorization_hidden_units, n_tasks
from verify.theorem.check import COUNTED, count_built, shapes_note
from verify.theorem.sweep import fit_slope

NAME = "fig2_units_vs_M"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Hidden units against the number of modules M, for two ε. (a) Log-log: the theorem's network "
    "(2IHN + M + H) and the lean variant (2IHN + 2H), counted on the built networks; the memorization"
    " baseline (H units per task), built up to M = 32 and from its formula beyond; and the number of "
    "tasks Σ_(k≤K) C(M,k). The box gives each OLS slope in M. (b) The units each network adds as M "
    "grows from its smallest value, on linear axes, beside a slope-1 line: the theorem's network adds"
    " one unit per module, the lean one none."
)


@dataclass(frozen=True)
class Config:
    M: tuple[int, ...] = (3, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # K ≤ M, so M starts at K
    eps: tuple[float, ...] = (1e-2, 1e-4)
    K: int = 3
    I: int = 16
    H: int = 16
    O: int = 16
    memorizer_max_M: int = 32  # build the memorizer up to here (87,808 units at M = 32, K = 3)
    seed: int = 0


QUICK = Config(M=(2, 4, 8, 64), eps=(1e-2,), K=2, I=3, H=3, O=3, memorizer_max_M=8)


def compute(cfg: Config) -> tuple[list[dict], dict]:
    rows: list[dict] = []
    checks: dict[str, bool] = {}
    # `khot` teachers: the memorizer is exact only for them, and the construction's size
    # does not depend on the weight scheme, so one teacher per M serves every series.
    teachers = {M: sample_hyperteacher(HyperteacherConfig(I=cfg.I, H=cfg.H, O=cfg.O, M=M, K=cfg.K,
                                                          weights="khot", seed=cfg.seed)) for M in cfg.M}
    fits = []
    for eps in cfg.eps:
        for variant in VARIANTS:
            series = f"{variant} eps={eps:g}"
            sel = []
            for M, teacher in teachers.items():
                net = build_shallow(teacher, eps, variant=variant)
                count = count_built(net, teacher, cfg.seed)
                sel.append(dict(panel="a", series=series, x=M, y=sum(count["widths"]), variant=variant,
                                eps=eps, N=net.N, formula=hidden_units(cfg.I, cfg.H, M, net.N, variant).total,
                                counted_from=count["counted_from"], count_ok=count["count_ok"]))
            rows += sel
            counted = [r for r in sel if r["counted_from"] in COUNTED]
            fit = fit_slope([r["x"] for r in counted], [r["y"] for r in counted], "units vs M", series,
                            1.0 if variant == "theorem" else 0.0)
            fits.append(fit)
            checks[f"{series}: count = formula (counted on {len(counted)} of {len(sel)} built"
                   f"{shapes_note(sel)})"] = bool(counted) and all(r["count_ok"] for r in counted)
            checks[f"{series}: slope in M = {fit.theory:g}"] = fit.agrees
    built = [M for M in cfg.M if M <= cfg.memorizer_max_M]
    memo = [dict(panel="a", series="memorization built", x=M, y=sum(count_hidden_units(build_memorizer(
        teachers[M]))), formula=memorization_hidden_units(M, cfg.K, cfg.H)) for M in built]
    checks["memorization built: count = H·Σ C(M,k)"] = all(r["y"] == r["formula"] for r in memo)
    rows += memo
    # The formula series starts at the last built M, so the two meet on the plot.
    rows += [dict(panel="a", series="memorization formula", x=M, y=memorization_hidden_units(M, cfg.K, cfg.H))
             for M in cfg.M if not built or M >= built[-1]]
    rows += [dict(panel="a", series="tasks", x=M, y=n_tasks(M, cfg.K)) for M in cfg.M]
    # Panel (b): growth over the smallest M, where the log axes of (a) hide the slope.
    M0 = cfg.M[0]
    for eps in cfg.eps:
        for variant in VARIANTS:
            sel = [r for r in rows if r["series"] == f"{variant} eps={eps:g}"]
            rows += [dict(panel="b", series=f"{variant} eps={eps:g} growth", x=r["x"], y=r["y"] - sel[0]["y"],
                          variant=variant, eps=eps) for r in sel]
    rows += [dict(panel="b", series="slope 1", x=M, y=M - M0) for M in (M0, cfg.M[-1])]
    # Where the memorizer overtakes the theorem's network, per ε (first M on the grid).
    crossover = {}
    for eps in cfg.eps:
        theorem = {r["x"]: r["y"] for r in rows if r["series"] == f"theorem eps={eps:g}"}
        larger = [M for M in cfg.M if memorization_hidden_units(M, cfg.K, cfg.H) > theorem[M]]
        crossover[f"{eps:g}"] = larger[0] if larger else None
    meta = dict(config=cfg, fits=[vars(f) | dict(agrees=f.agrees) for f in fits],
                memorizer_exceeds_theorem_from_M=crossover, checks=checks)
    return rows, meta


def plot(rows: list[dict], meta: dict, cfg: Config):
    fig, axes = new_figure(1, 2, figsize=(12.0, 5.4), gridspec_kw=dict(width_ratios=[1.55, 1]))
    ax, bx = axes[0]
    for i, eps in enumerate(cfg.eps):
        c = COLOURS[i % len(COLOURS)]
        plot_series(ax, rows, f"theorem eps={eps:g}", "a", color=c, marker="o", ms=5,
                    label=f"theorem (2IHN + M + H), ε = {eps:g}")
        plot_series(ax, rows, f"lean eps={eps:g}", "a", color=c, marker="x", ms=6, ls=":",
                    label=f"lean (2IHN + 2H), ε = {eps:g}")
        plot_series(bx, rows, f"theorem eps={eps:g} growth", "b", color=c, marker="o", ms=7 - 2.5 * i,
                    ls="none", label=f"theorem, ε = {eps:g}")
        plot_series(bx, rows, f"lean eps={eps:g} growth", "b", color=c, marker="x", ms=8 - 2.5 * i,
                    ls="none", label=f"lean, ε = {eps:g}")
    memo = COLOURS[3]
    plot_series(ax, rows, "memorization built", "a", color=memo, marker="s", ms=6,
                label="memorization, built (H·Σ C(M,k))")
    plot_series(ax, rows, "memorization formula", "a", color=memo, marker="s", mfc="none", ms=8,
                ls="--", label="memorization, formula")
    plot_series(ax, rows, "tasks", "a", color="0.45", marker="^", ms=5, ls="-.",
                label=f"number of tasks Σ_(k≤{cfg.K}) C(M,k)")
    ax.set(xscale="log", yscale="log", xlabel="number of modules M",
           ylabel="hidden units  (grey: number of tasks)",
           title=f"(a) hidden units vs M  (I={cfg.I}, H={cfg.H}, O={cfg.O}, K={cfg.K}, khot teacher)")
    ax.set_xscale("log", base=2)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    lines = ["OLS slope of units vs M:"]
    lines += [f"  {f['group'].replace(' eps=', ', ε = '):<18} {f['slope']:8.5f}  (theory {f['theory']:g})"
              for f in meta["fits"]]
    ax.text(0.98, 0.03, "\n".join(lines), transform=ax.transAxes, va="bottom", ha="right", ma="left",
            fontsize=8, family="monospace", bbox=dict(boxstyle="round", fc="white", ec="0.7"))

    plot_series(bx, rows, "slope 1", "b", color="0.4", ls="--", lw=1, label=f"M − {cfg.M[0]} (slope 1)")
    bx.set(xlabel="number of modules M", ylabel=f"units(M) − units(M = {cfg.M[0]})",
           title=f"(b) hidden units added as M grows from {cfg.M[0]} (linear axes)")
    for a in (ax, bx):
        a.title.set_fontsize(10)
    bx.grid(True, alpha=0.3)
    bx.legend(loc="upper left", fontsize=8, framealpha=0.9)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    # `progress` is unused: this figure builds networks but measures none, and its bar is
    # the one __main__ shows for every figure.
    cfg = replace(QUICK if quick else Config(), seed=seed)
    rows, meta = cached(out, NAME, cfg, __name__, lambda: compute(cfg))
    return finish(NAME, plot(rows, meta, cfg), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta, config_of(meta, "config", QUICK, Config()))
