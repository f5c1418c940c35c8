"""Figure 14: the certified held-out sup error of SGD students against width, beside the
construction's certificate at the same size (issue 46): the design card's comparison, rigorous on
both sides.

One panel, log axes: for each student of `python -m verify.certify.ladder` (depth-d MLPs of width w,
d·w hidden units, one colour per seed, each seed its own teacher), the certified bracket on its sup
error over every held-out task: a vertical bar from the lower end (an error found, open triangle ▲)
to the upper end (proven, filled triangle ▼); a bar whose search ran out of budget before the
bracket closed to the ratio is dashed and labelled "open" (its upper end is still proven). Beside
it (×) the run's own searched held-out sup error, a lower bound too. Black stars: the theorem's
construction with at most as many hidden units (N knots, 2·I·H·N + M + H units), at its certificate
I·C·a/N² for that seed's teacher, drawn at the student's unit count; where no construction is
that small (N < 1), the grey band says so. The side panel lists every network: training R²,
searched sup, bracket, ratio, time and boxes of the search, and the construction's ε.

Data: the ladder committed in paper_figures/output/fig14_ladder/ (ladder.json, read from the
working folder) when it is there and the figure is not --quick; otherwise the smoke ladder
(verify.certify.ladder --smoke: seconds), run now and cached, and the title says "SMOKE DATA".
Plotted x: a seed's points sit at the student's units × a small offset per seed, so that the
bars of two seeds do not hide each other (the CSV keeps the true count in hidden_units).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from paper_figures import DEFAULT_OUT
from paper_figures.common import COLOURS, FigureResult, cached, finish, new_figure, plot_series

NAME = "fig14_certified"
# The figure's caption: its PDF's Subject and its entry in captions.md.
CAPTION = (
    "Both sides certified: the held-out sup error of SGD-trained MLP students against hidden units "
    "(depth-4 students of growing width, one colour per seed), as a certified bracket (▼ the proven "
    "upper end, ▲ the lower end found; dashed where the search's budget ran out before the bracket "
    "closed), beside the run's own searched sup error (×) and the certificate I·C·a/N² of the "
    "theorem's construction with at most as many hidden units (★); the grey band marks sizes where "
    "no construction exists."
)
LADDER_DIR = DEFAULT_OUT / "fig14_ladder"  # relative to the working folder: the committed ladder
LADDER_CODE = "verify.certify.ladder"
OFFSET = 1.06  # seeds' x positions: units × OFFSET^(k − (seeds − 1)/2)


def load_ladder(quick: bool, out: Path, progress: bool | None) -> tuple[dict, str]:
    """(the ladder's report, its scale: "cpu" for the committed ladder, "smoke" for the smoke one)."""
    from verify.certify.ladder import SMOKE, read_ladder, run_ladder

    if not quick and (LADDER_DIR / "ladder.json").is_file():
        return read_ladder(LADDER_DIR), "cpu"

    def compute():
        with tempfile.TemporaryDirectory() as tmp:
            return run_ladder(SMOKE, Path(tmp), progress=False if progress is False else None)

    return cached(out, NAME, SMOKE, LADDER_CODE, compute), "smoke"


def rows_of(report: dict) -> list[dict]:
    """The plotted points: per network its bracket's ends, the searched sup, the construction."""
    seeds = list(report["ladder"]["seeds"])
    rows = []
    for r in report["rows"]:
        k = seeds.index(r["seed"])
        x = r["hidden_units"] * OFFSET ** (k - (len(seeds) - 1) / 2)
        base = dict(panel="a", x=x, hidden_units=r["hidden_units"], width=r["width"], seed=r["seed"],
                    closed=r["closed"], stop=r["stop"])
        rows.append(base | dict(series=f"upper seed {r['seed']}", y=r["upper"]))
        rows.append(base | dict(series=f"lower seed {r['seed']}", y=r["lower"]))
        rows.append(base | dict(series=f"searched seed {r['seed']}", y=r["searched_sup"]))
        c = r["construction"]
        if c["N"]:
            rows.append(base | dict(series=f"construction seed {r['seed']}", y=c["eps"], N=c["N"],
                                    construction_units=c["hidden_units"]))
    return rows


def compute(quick: bool, out: Path, progress: bool | None) -> tuple[list[dict], dict]:
    from verify.certify.ladder import COMPARISONS, check_rows, compare

    report, scale = load_ladder(quick, out, progress)
    checks = check_rows(report["rows"])
    ahead = [dict(width=r["width"], seed=r["seed"], hidden_units=r["hidden_units"], ahead=compare(r))
             for r in report["rows"]]
    meta = dict(checks=checks, scale=scale, ladder=report["ladder"], networks=report["rows"],
                ahead=ahead, ahead_means=COMPARISONS,
                complete=report.get("complete", True), seconds=report.get("seconds"),
                source=str(LADDER_DIR / "ladder.json") if scale == "cpu" else "verify.certify.ladder --smoke",
                rests_on=report.get("rests_on"))
    return rows_of(report), meta


AHEAD = dict(student="student ahead", construction="constr. ahead", undecided="undecided", none="")


def _table(meta: dict) -> str:
    from verify.certify.ladder import compare

    lines = ["width seed  R²    searched  certified [lower, upper]  ratio",
             "                   time    boxes  stop   construction: ahead"]
    for r in meta["networks"]:
        c = r["construction"]
        ratio = "∞" if r["ratio"] is None or not math.isfinite(r["ratio"]) else f"{r['ratio']:.2f}×"
        constr = f"N {c['N']}, ε {c['eps']:.3g}" if c["N"] else f"none (< {c['min_units']} u)"
        lines.append(f"{r['width']:>4} {r['seed']:>3} {r['train_r2']:>6.3f} {r['searched_sup']:>7.3g}  "
                     f"[{r['lower']:.3g}, {r['upper']:.3g}] {ratio}")
        lines.append(f"{'':>19}{r['seconds']:>5.0f} s {r['nodes']:>8,}  "
                     f"{'ratio' if r['closed'] else 'OPEN':<6} {constr}" + (
                         f": {AHEAD[compare(r)]}" if c["N"] else ""))
    lines += ["", "ahead, rigorously: student: its proven upper end < the", "construction's ε; constr.: ε < "
              "the student's lower end"]
    return "\n".join(lines)


def plot(rows: list[dict], meta: dict):
    fig, axes = new_figure(1, 2, figsize=(12.0, 5.6), gridspec_kw=dict(width_ratios=[1, 0.62]))
    ax, side = axes[0]
    d = meta["ladder"]
    seeds = list(d["seeds"])
    units = sorted({int(r["hidden_units"]) for r in rows})
    smallest = min(r["construction"]["min_units"] for r in meta["networks"])
    if units and units[0] < smallest:
        ax.axvspan(units[0] / 1.3, min(smallest, units[-1] * 1.3), color="0.85", alpha=0.6, lw=0,
                   label=f"no construction this small (it needs ≥ {smallest} units)")
    for k, seed in enumerate(seeds):
        colour = COLOURS[k % len(COLOURS)]
        ups = [r for r in rows if r["series"] == f"upper seed {seed}"]
        lows = {r["x"]: r["y"] for r in rows if r["series"] == f"lower seed {seed}"}
        for closed in (True, False):  # the bars: collections, not lines (the CSV holds their ends)
            bars = [r for r in ups if bool(r["closed"]) == closed]
            if bars:
                ax.vlines([r["x"] for r in bars], [lows[r["x"]] for r in bars], [r["y"] for r in bars],
                          color=colour, lw=2.0, linestyles="solid" if closed else "dashed",
                          gid=f"bracket {'closed' if closed else 'open'} seed {seed}",
                          label=None if closed else f"seed {seed}: open bracket (the budget ran out)")
        plot_series(ax, rows, f"upper seed {seed}", "a", ls="none", marker="v", ms=8, color=colour,
                    label=f"seed {seed}: certified upper end (proven)")
        plot_series(ax, rows, f"lower seed {seed}", "a", ls="none", marker="^", ms=8, mfc="white",
                    mec=colour, label=f"seed {seed}: lower end (an error found)")
        plot_series(ax, rows, f"searched seed {seed}", "a", ls="none", marker="x", ms=7, color=colour,
                    label=f"seed {seed}: the run's searched sup (lower bound)")
        if any(r["series"] == f"construction seed {seed}" for r in rows):
            plot_series(ax, rows, f"construction seed {seed}", "a", ls=":", lw=1.0, marker="*", ms=11,
                        color="k", mec=colour,
                        label=f"seed {seed}: construction's certificate, ≤ as many units")
    ax.set(xscale="log", yscale="log",
           xlabel="hidden units (students: depth × width; the construction: at most as many)",
           ylabel="sup over held-out tasks of ‖f − g‖∞")
    ax.set_xticks(units, [f"{u:,}" for u in units])
    ax.set_xticks([], minor=True)
    ax.grid(True, which="major", alpha=0.3)
    ys = [r["y"] for r in rows]
    ax.set_ylim(min(ys) / 2.5, max(ys) * 2.5)
    ax.set_xlim(units[0] / 1.3, units[-1] * 1.3)
    opened = [r for r in meta["networks"] if not r["closed"]]
    mark = "\n[SMOKE DATA: tiny teacher, 300-step students, no result]" if meta["scale"] == "smoke" else ""
    ax.set_title(f"(a) certified bracket per student, dashed: open at the budget ({len(opened)} of "
                 f"{len(meta['networks'])})" + mark, fontsize=9)
    side.axis("off")
    handles, labels = ax.get_legend_handles_labels()
    side.legend(handles, labels, loc="upper left", fontsize=7, frameon=False)
    side.text(0.0, 0.0, _table(meta), transform=side.transAxes, va="bottom", ha="left", fontsize=6.8,
              family="monospace")
    fig.suptitle("Certified held-out sup error of SGD students vs the construction at equal size  "
                 f"(I={d['I']}, H={d['H']}, O={d['O']}, M={d['M']}, K={d['K']}; depth-{d['depth']} MLPs, "
                 f"{d['steps']:,} steps; bracket to {d['ratio']:g}× or {d['seconds']:g} s a network)",
                 fontsize=9.5)
    return fig


def make(out: Path, *, quick: bool = False, seed: int = 0, progress: bool | None = None) -> FigureResult:
    del seed  # the ladder fixes its own seeds
    rows, meta = compute(quick, Path(out), progress)
    return finish(NAME, plot(rows, meta), rows, meta, out, preview=quick, caption=CAPTION)


def redraw(rows: list[dict], meta: dict):
    """The figure again from its data files (common.load_data), computing nothing."""
    return plot(rows, meta)
