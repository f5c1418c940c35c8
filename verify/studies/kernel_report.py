"""The kernel-vs-sgd study's report (issue 35): where held-out R² sits for the kernel limits
(NTK, NNGP), the linearised network and the trained one, per encoding and width, with
intervals; and whether the gap between the NTK limit and SGD narrows or widens with width.

The tests, at 95%, each over seeds (a seed fixes the teacher, the split and the encoder, so
every method's run of one seed is paired with the others' of that seed):
- each method's held-out R²: mean and Student's t interval over its seeds (df = seeds − 1);
- the gap, trained − NTK limit, per width: paired t interval (df = pairs − 1);
- its trend with width: per seed, the least-squares slope of the gap on log₂ width, then a
  t interval of the seeds' slopes (df = seeds − 1) and the t test of slope 0. "widens" when
  the test rejects at 95% after Holm's correction over the study's trend tests (two an
  encoding) with a positive slope, "narrows" with a negative one, "inconclusive" otherwise or
  when fewer than 2 seeds have a slope;
- likewise |linearised − NTK|, which the theory says falls with width ("approaches").
The per-width gap intervals are descriptive (each at 95%, uncorrected).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from verify import cli
from verify.studies import behaviour
from verify.studies.effects import code_of, csv_text, export_runs, store_notes
from verify.studies.store import RunStore, reads_report
from verify.studies.verdicts import holm

PROGRAM = "verify.kernel"
LEVEL = 0.95
KERNEL_METHODS = ("ntk", "nngp")  # verify.learning.kernel_vs_sgd's (kept here: a report imports no torch)
METHODS = ("ntk", "nngp", "linearised", "trained")
RUN_COLUMNS = ("key", "encoding", "method", "width", "seed", "held_out_r2", "train_r2", "held_out_rmse",
               "kernel_movement", "code")


def _metric(report: dict, side: str, name: str):
    return next((m["value"] for m in report["metrics"] if m["side"] == side and m["metric"] == name), None)


@reads_report
def run_row(run: dict, judge=None) -> dict:
    report, config = run["report"], run["config"]
    return dict(key=run["key"], encoding=config.get("encoding", "identity"), method=report["method"],
                width=report.get("width"), seed=config.get("seed", 0),
                held_out_r2=_metric(report, "held_out", "r2"), train_r2=_metric(report, "train", "r2"),
                held_out_rmse=_metric(report, "held_out", "rmse"),
                kernel_movement=report["record"].get("kernel_movement"),
                code=code_of(run, judge) if judge else None)


def t_interval(values, level: float = LEVEL) -> dict:
    """Mean, sd and Student's t interval of the values (df = n − 1); no interval below 2."""
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    n = len(v)
    if n == 0:
        return dict(n=0, mean=None, sd=None, lo=None, hi=None, df=None, p=None)
    mean = float(v.mean())
    if n < 2:
        return dict(n=1, mean=mean, sd=None, lo=None, hi=None, df=0, p=None)
    sd = float(v.std(ddof=1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    # Two-sided one-sample t test of mean 0 (a gap or a slope of none).
    p = 1.0 if se == 0 and mean == 0 else 0.0 if se == 0 else float(2 * stats.t.sf(abs(mean) / se, n - 1))
    return dict(n=n, mean=mean, sd=sd, lo=mean - half, hi=mean + half, df=n - 1, p=p)


def direction(interval: dict, up: str, down: str) -> str:
    """`up` when the test rejects 0 at LEVEL after Holm's correction (`p_holm`) with a positive
    mean, `down` with a negative one, else inconclusive."""
    if interval["p"] is None:
        return "inconclusive (fewer than 2 seeds)"
    if interval["p_holm"] < 1 - LEVEL:
        return up if interval["mean"] > 0 else down
    return "inconclusive"


def _by(rows: list[dict], *keys: str) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def cells(rows: list[dict]) -> list[dict]:
    """Held-out R² per (encoding, method, width) with its interval (kernel limits: width None)."""
    out = []
    for (encoding, method, width), group in sorted(_by(rows, "encoding", "method", "width").items(),
                                                   key=lambda kv: (kv[0][0], METHODS.index(kv[0][1]),
                                                                   kv[0][2] or 0)):
        out.append(dict(encoding=encoding, method=method, width=width, seeds=sorted(r["seed"] for r in group),
                        held_out_r2=t_interval([r["held_out_r2"] for r in group]),
                        kernel_movement=t_interval([r["kernel_movement"] for r in group])))
    return out


def _paired(rows: list[dict], encoding: str, method: str, width, against: str = "ntk") -> dict[int, float]:
    """{seed: R²(method at width) − R²(against)} over the seeds that have both."""
    mine = {r["seed"]: r["held_out_r2"] for r in rows
            if (r["encoding"], r["method"], r["width"]) == (encoding, method, width)}
    base = {r["seed"]: r["held_out_r2"] for r in rows if (r["encoding"], r["method"]) == (encoding, against)}
    return {s: mine[s] - base[s] for s in sorted(mine.keys() & base.keys())
            if mine[s] is not None and base[s] is not None}


def _slopes(gaps: dict, transform=lambda g: g) -> list[float]:
    """Per seed, the least-squares slope of transform(gap) on log₂ width (seeds with ≥ 2 widths)."""
    per_seed: dict[int, list[tuple[float, float]]] = {}
    for width, by_seed in gaps.items():
        for seed, gap in by_seed.items():
            per_seed.setdefault(seed, []).append((math.log2(width), transform(gap)))
    slopes = []
    for points in per_seed.values():
        if len({x for x, _ in points}) >= 2:
            x, y = np.array(points).T
            slopes.append(float(np.polyfit(x, y, 1)[0]))
    return slopes


def gaps(rows: list[dict]) -> list[dict]:
    """Per encoding: trained − NTK and linearised − NTK at each width, and their trends."""
    out = []
    for encoding in sorted({r["encoding"] for r in rows}):
        entry = dict(encoding=encoding, widths=[], trend={})
        widths = sorted({r["width"] for r in rows if r["encoding"] == encoding and r["width"] is not None})
        found = {}
        for method in ("trained", "linearised"):
            found[method] = {w: _paired(rows, encoding, method, w) for w in widths}
        for w in widths:
            entry["widths"].append(dict(width=w, **{f"{m}_minus_ntk": t_interval(found[m][w].values())
                                                    for m in found}))
        entry["trend"] = dict(trained_minus_ntk_slope=t_interval(_slopes(found["trained"])),
                              linearised_distance_slope=t_interval(_slopes(found["linearised"], abs)))
        out.append(entry)
    _judge_trends(out)
    return out


def _judge_trends(entries: list[dict]) -> None:
    """The trend tests are one family (two an encoding): Holm's correction over the ones with a
    p-value, then each its verdict."""
    tests = [t for e in entries for t in e["trend"].values() if t["p"] is not None]
    for t, adjusted in zip(tests, holm([t["p"] for t in tests]), strict=True):
        t["p_holm"] = adjusted
    for e in entries:
        trained, linearised = e["trend"]["trained_minus_ntk_slope"], e["trend"]["linearised_distance_slope"]
        trained["verdict"] = direction(trained, "widens", "narrows")
        linearised["verdict"] = direction(linearised, "moves away", "approaches the NTK limit")


def effects_table(study: str, scale: str, out: Path, keys: set[str] | None = None,
                  fingerprint: str | None = None) -> dict:
    """The report of the runs in `keys` (the study's grid as it is now), or of every stored run;
    with `fingerprint`, runs made by other or unknown code are marked."""
    with RunStore(out / "study.sqlite", readonly=True) as store:
        stored = store.rows()
    runs = [r for r in stored if keys is None or r["key"] in keys]
    judge = behaviour.Judge(PROGRAM, fingerprint) if fingerprint else None
    done = [run_row(r, judge) for r in runs if r["status"] == "done"]
    failed = [r for r in runs if r["status"] == "failed"]
    done.sort(key=lambda r: (r["encoding"], METHODS.index(r["method"]), r["width"] or 0, r["seed"]))
    stale = [r for r in done if r["code"] not in (None, "current")]
    unsettled = [r for r in runs
                 if r["status"] == "done" and r["report"]["record"].get("ladder_settled") is False]
    notes = [f"{len(unsettled)} kernel limits' ladders did not settle (their held-out R² still moved by "
             "≥ 0.005 at the last doubling of x per task): they hold at their row budget, and more rows "
             "would raise them"] if unsettled else []
    notes += store_notes(study, scale, n_done=len(done), n_failed=len(failed), n_stale=len(stale),
                        n_old=len(stored) - len(runs), keys=keys)
    return cli.plain(dict(study=study, scale=scale, program=PROGRAM, runs_done=len(done),
                          runs_failed=len(failed), runs=done, cells=cells(done), gaps=gaps(done), notes=notes,
                          level=LEVEL,
                          code_fingerprint=fingerprint, runs_other_code=len(stale), runs_unknown_code=0,
                          columns=list(RUN_COLUMNS)))


def _iv(d: dict, spec: str = ".3f") -> str:
    if d["mean"] is None:
        return "—"
    if d["lo"] is None:
        return f"{d['mean']:{spec}} (1 seed)"
    return f"{d['mean']:{spec}} [{d['lo']:{spec}}, {d['hi']:{spec}}]"


def format_markdown(table: dict, runs: bool = True) -> str:
    pct = f"{table['level']:.0%}"
    lines = [f"# {table['study']} ({table['scale']} scale): the kernel limit beside SGD", "",
             f"{table['runs_done']} runs done, {table['runs_failed']} failed. Held-out R² (the paper's "
             f"compositional R²) with {pct} Student-t intervals over seeds; `—` where no run finished.", "",
             "| encoding | method | width | seeds | held-out R² | NTK movement |",
             "|---|---|---:|---:|---|---|"]
    for c in table["cells"]:
        move = _iv(c["kernel_movement"]) if c["method"] == "trained" else ""
        lines.append(f"| {c['encoding']} | {c['method']} | {c['width'] or '∞'} | {len(c['seeds'])} | "
                     f"{_iv(c['held_out_r2'])} | {move} |")
    lines += ["", f"## The gap to the NTK limit (paired over seeds, {pct})", "",
              "| encoding | width | trained − NTK | linearised − NTK |", "|---|---:|---|---|"]
    for g in table["gaps"]:
        for w in g["widths"]:
            lines.append(f"| {g['encoding']} | {w['width']} | {_iv(w['trained_minus_ntk'])} | "
                         f"{_iv(w['linearised_minus_ntk'])} |")
    lines += ["", "(Each interval at 95%, uncorrected: descriptive.) Trend with width: per seed the slope "
              "of the gap on log₂ width, then a t interval over seeds and the t test of slope 0, "
              "Holm-corrected over these trend tests.", ""]
    for g in table["gaps"]:
        t, lin = g["trend"]["trained_minus_ntk_slope"], g["trend"]["linearised_distance_slope"]
        lines.append(f"- {g['encoding']}: trained − NTK per doubling {_iv(t)}{_p(t)}: **{t['verdict']}**; "
                     f"|linearised − NTK| per doubling {_iv(lin)}{_p(lin)}: **{lin['verdict']}**")
    if table["notes"]:
        lines += ["", *[f"- {n}" for n in table["notes"]]]
    if runs:
        lines += ["", "## Runs", "", "| " + " | ".join(RUN_COLUMNS) + " |", "|" + "---|" * len(RUN_COLUMNS)]
        for r in table["runs"]:
            lines.append("| " + " | ".join(_cell(r[c]) for c in RUN_COLUMNS) + " |")
    return "\n".join(lines)


def format_compact(table: dict) -> str:
    """The study's README block (verify.studies.summary): each encoding's kernel limits, its
    widest trained and linearised networks, and the trend verdicts (format_markdown's report,
    less its tables)."""
    lines = []
    for g in table["gaps"]:
        mine = [c for c in table["cells"] if c["encoding"] == g["encoding"]]
        shown = [c for c in mine if c["width"] is None] + [c for c in map(_widest, [mine] * 2,
                                                                           ("trained", "linearised")) if c]
        cells = ", ".join(f"{c['method']}{'' if c['width'] is None else ' ×' + str(c['width'])} "
                          f"{_iv(c['held_out_r2'])}" for c in shown)
        t, lin = g["trend"]["trained_minus_ntk_slope"], g["trend"]["linearised_distance_slope"]
        lines.append(f"- {g['encoding']}: held-out R² {cells}. Per doubling of width, trained − NTK "
                     f"{_iv(t)}{_p(t)} **{t['verdict']}**, |linearised − NTK| {_iv(lin)}{_p(lin)} "
                     f"**{lin['verdict']}**")
    return "\n".join(lines + [f"- {n}" for n in table["notes"]])


def _p(test: dict) -> str:
    return "" if test.get("p_holm") is None else f", p_Holm = {test['p_holm']:.2g}"


def _widest(cells: list[dict], method: str) -> dict | None:
    return max((c for c in cells if c["method"] == method), key=lambda c: c["width"], default=None)


def _cell(v) -> str:
    return "—" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def write_table(table: dict, out: Path) -> None:
    cli.write_text_atomic(out / "effects.md", format_markdown(table) + "\n")
    cli.write_text_atomic(out / "effects.csv", csv_text(list(RUN_COLUMNS), table["runs"]))


def export_csv(out: Path, path: Path | str) -> int:
    """Every run, one line: its configuration, status, error, time and held-out numbers."""
    def lines_of(r: dict) -> list[dict]:
        row = run_row(r) if r["status"] == "done" else {}
        return [{k: row[k] for k in ("held_out_r2", "train_r2", "held_out_rmse", "kernel_movement") if row}]

    return export_runs(out, path, lines_of)
