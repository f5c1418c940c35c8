"""Figure 8: hidden units against ε for every construction, at one M.

(a) log-log hidden units of `shallow` (the theorem, O(1/√ε + M)), `optimal` (a range and
a knot count per product), `deep` (sawtooth squares, O(log 1/ε)) and `exact` (gated
units, zero error on the family's weight levels, flat in ε), each counted on the built
object, with the memorization baseline (one copy of the teacher per task) for scale.
(b) their depth (hidden layers): `deep` buys its size with depth.
Every point is also measured, and the checks hold each construction to its own claim
(Construction.claim, the rule verify.bound applies): certificate ≤ ε and measured ≤
certificate (exact: measured ≤ 1e-12 on its task set). Every single-layer construction in
the registry is drawn, under its registry label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from constructions.registry import CONSTRUCTIONS, REGISTRY, build
from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
from paper_figures.common import (
    COLOURS,
    MARKERS,
    FigureResult,
    cached,
    config_of,
    finish,
    new_figure,
    plot_series,
)
from theory.bounds import memorization_hidden_units
from verify.cli import progress as progress_bar
from verify.theorem.check import COUNTED, count_built, shapes_note
from verify.theorem.measure import measure_sup_error

NAME = "fig8_constructions_vs_eps"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Every construction against ε at one M: (a) hidden units (log-log) of shallow (the theorem), "
    "optimal, deep and exact, each counted on the built object, beside the memorization baseline; (b)"
    " their depth in hidden layers. Every point is also measured and held to its construction's own "
    "error claim."
)
DEEP_TARGET = 100  # issue 5: deep needs ≥ 100× fewer units than shallow at ε = 1e-6, M = 32


@dataclass(frozen=True)
class Config:
    eps: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
    M: int = 32
    K: int = 3
    I: int = 16
    H: int = 16
    O: int = 16
    weights: str = "discrete"  # a finite level set, so `exact` applies
    seed: int = 0
    measure: tuple = (("max_tasks", 1000), ("points_per_task", 8), ("refine_tasks", 8),
                      ("refine_starts", 8), ("refine_steps", 30))


QUICK = Config(eps=(1e-1, 1e-3), M=4, K=2, I=3, H=3, O=3,
               measure=(("max_tasks", 50), ("points_per_task", 4), ("refine_tasks", 4),
                        ("refine_starts", 4), ("refine_steps", 10)))


def units_per_decade(units: dict, depth: dict, per_level: int) -> tuple[float | None, bool]:
    """(units added per decade of 1/ε, whether that is deep's O(log 1/ε) rate).

    One more tent level, per_level = 4·I·H + H more units, per factor 4 in 1/ε. Between two
    ε where the level count m is not held up by its floor m ≥ 1 (depth > 2), m differs from
    log₄ of the ε ratio by less than one (the ceiling), so the rate is within
    per_level / decades of per_level·log₄10. None when fewer than two such ε exist.
    """
    free = [e for e in units if depth[e] > 2]
    decades = math.log10(max(free) / min(free)) if free else 0.0
    if decades == 0:
        return None, True
    rate = (units[min(free)] - units[max(free)]) / decades
    return rate, abs(rate - per_level * math.log(10, 4)) <= per_level / decades


def measure_point(teacher, name: str, eps: float, cfg: Config) -> tuple[list[dict], str]:
    """One construction at one ε: its counted size and depth, and its measured error held
    to its own claim; and that claim's rule in words."""
    net = build(name, teacher, eps)
    count = count_built(net, teacher, cfg.seed)
    widths = count["widths"]
    claim = net.claim(eps)
    measured = measure_sup_error(net, teacher, seed=cfg.seed, progress=False, refine_z=claim.refine_z,
                                 **dict(cfg.measure)).sup_error
    return [dict(panel="a", series=name, x=eps, y=sum(widths), formula=net.hidden_units().total,
                 counted_from=count["counted_from"], count_ok=count["count_ok"],
                 depth=len(widths), certificate=claim.certificate, measured=measured,
                 within=claim.holds(measured)),
            dict(panel="b", series=f"{name} depth", x=eps, y=len(widths))], claim.rule


def compute(cfg: Config, progress: bool | None = None) -> tuple[list[dict], dict]:
    teacher = sample_hyperteacher(HyperteacherConfig(I=cfg.I, H=cfg.H, O=cfg.O, M=cfg.M, K=cfg.K,
                                                     weights=cfg.weights, seed=cfg.seed))
    rows, checks = [], {}
    # One bar over the (construction, ε) points rather than one per measurement: 24 short
    # bars would flicker past.
    with progress_bar(len(CONSTRUCTIONS) * len(cfg.eps), "networks", progress, unit="net") as bar:
        for name in CONSTRUCTIONS:
            for eps in cfg.eps:
                point, rule = measure_point(teacher, name, eps, cfg)
                rows += point
                bar.update(1)
            units = [r for r in rows if r["series"] == name and r["panel"] == "a"]
            counted = [r for r in units if r["counted_from"] in COUNTED]
            checks[f"{name}: count = formula (counted on {len(counted)} of {len(units)} built"
                   f"{shapes_note(units)})"] = bool(counted) and all(r["count_ok"] for r in counted)
            checks[f"{name}: {rule}"] = all(r["within"] for r in units)
    rows += [dict(panel="a", series="memorization", x=eps, y=memorization_hidden_units(cfg.M, cfg.K, cfg.H))
             for eps in (max(cfg.eps), min(cfg.eps))]

    units = {(r["series"], r["x"]): r["y"] for r in rows if r["panel"] == "a"}
    smallest = min(cfg.eps)
    deep_ratio = units["shallow", smallest] / units["deep", smallest]
    checks["optimal <= shallow at every ε"] = all(units["optimal", e] <= units["shallow", e] for e in cfg.eps)
    if smallest <= 1e-6 and cfg.M == 32:
        target = f"deep >= {DEEP_TARGET}x fewer units than shallow at ε = {smallest:g}"
        checks[target] = deep_ratio >= DEEP_TARGET
    per_level = 4 * cfg.I * cfg.H + cfg.H
    deep = [r for r in rows if r["series"] == "deep" and r["panel"] == "a"]
    deep_per_decade, ok = units_per_decade({r["x"]: r["y"] for r in deep}, {r["x"]: r["depth"] for r in deep},
                                           per_level)
    if deep_per_decade is not None:
        checks["deep: units grow like log(1/ε), (4IH + H)·log₄10 per decade"] = ok
    meta = dict(config=cfg, deep_over_shallow_at_smallest_eps=1 / deep_ratio,
                shallow_over_deep_at_smallest_eps=deep_ratio, deep_units_per_decade=deep_per_decade,
                deep_units_per_decade_theory=per_level * math.log(10, 4), checks=checks)
    return rows, meta


def plot(rows: list[dict], meta: dict, cfg: Config):
    fig, axes = new_figure(2, 1, figsize=(7.0, 7.0), sharex=True, gridspec_kw=dict(height_ratios=[3, 1.2]))
    ax, bx = axes[:, 0]
    for i, name in enumerate(CONSTRUCTIONS):
        style = dict(color=COLOURS[i % len(COLOURS)], marker=MARKERS[i % len(MARKERS)], ms=6, lw=1.2)
        plot_series(ax, rows, name, "a", label=REGISTRY[name].label, **style)
        plot_series(bx, rows, f"{name} depth", "b", **style)
    plot_series(ax, rows, "memorization", "a", color="0.4", ls=":", lw=1.2,
                label="memorization baseline, H·Σ C(M,k)")
    ax.set(xscale="log", yscale="log", ylabel="hidden units",
           title=f"Hidden units vs ε by construction  (I={cfg.I}, H={cfg.H}, O={cfg.O}, M={cfg.M}, "
                 f"K={cfg.K}, {cfg.weights} weights)")
    ax.title.set_fontsize(10)
    ax.invert_xaxis()  # smaller ε to the right: harder targets
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    ax.grid(True, which="major", alpha=0.3)
    ratio = meta["shallow_over_deep_at_smallest_eps"]
    ax.text(0.98, 0.13, f"at ε = {min(cfg.eps):g}: shallow / deep = {ratio:.0f}×",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
            bbox=dict(boxstyle="round", fc="white", ec="0.7"))
    bx.set(xscale="log", xlabel="ε (target sup error)", ylabel="hidden layers")
    bx.yaxis.get_major_locator().set_params(integer=True)
    bx.grid(True, which="major", alpha=0.3)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    cfg = replace(QUICK if quick else Config(), seed=seed)
    rows, meta = cached(out, NAME, cfg, __name__, lambda: compute(cfg, progress))
    return finish(NAME, plot(rows, meta, cfg), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta, config_of(meta, "config", QUICK, Config()))
