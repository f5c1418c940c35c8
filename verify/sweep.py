"""python -m verify.sweep: the theorem's two scaling claims, measured over a grid.

For every (ε, M, K, seed) it builds the construction, certifies it and measures its sup
error (the fast path: sampled tasks, short ascent), then fits from those runs:
  - the slope of log(hidden units) against log(1/ε): theory 1/2;
  - the slope of log(measured error) against log(N): the bound needs ≤ −2;
  - the slope of hidden units against M (a-priori constants): 1 for `theorem`, 0 for `lean`.
Each slope comes with a 95% confidence interval from the regression. Exit code 1 when a
slope disagrees with the theory beyond its interval or when any run violates a bound.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from constructions.hyperteacher import WEIGHTS, HyperteacherConfig
from constructions.shallow import build_construction
from theory.bounds import CONSTANTS, VARIANTS, hidden_units
from verify.bound import UsageError, positive_float, positive_int, verify_point
from verify.progress import Progress

FAST_MEASURE = dict(max_tasks=2000, points_per_task=8, refine_tasks=16, refine_starts=8, refine_steps=50)


@dataclass(frozen=True)
class SweepConfig:
    eps: tuple[float, ...] = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)
    M: tuple[int, ...] = (4, 8, 16, 32, 64)
    K: tuple[int, ...] = (3,)
    seeds: tuple[int, ...] = (0, 1, 2)
    I: int = 16
    H: int = 16
    O: int = 16
    weights: str = "discrete"
    constants: str = "apriori"
    asymptotic_eps: float = 1e-3  # the ε-slope is fitted on ε ≤ this


@dataclass
class SlopeFit:
    name: str
    group: str
    slope: float
    ci_low: float
    ci_high: float
    theory: float
    tolerance: float  # extra allowance derived from the formula's finite-size offset
    relation: str  # "=" or "<="
    n: int

    @property
    def agrees(self) -> bool:
        if self.relation == "<=":
            return bool(self.ci_low <= self.theory + self.tolerance)
        return bool(self.ci_low - self.tolerance <= self.theory <= self.ci_high + self.tolerance)


def fit_slope(x, y, name, group, theory, relation="=", tolerance=0.0, seeds=None) -> SlopeFit:
    """OLS slope of y on x with a two-sided 95% t-interval.

    With `seeds`, each seed gets its own intercept (a within-seed regression): a teacher's
    readout norm a moves N by a constant factor per seed, which is not scatter about the
    slope. Exact data gives an interval as wide as float64 rounding of the fit.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    groups = np.zeros(len(x), int) if seeds is None else np.unique(seeds, return_inverse=True)[1]
    n_groups = groups.max() + 1
    xc = x - (np.bincount(groups, x) / np.bincount(groups))[groups]
    yc = y - (np.bincount(groups, y) / np.bincount(groups))[groups]
    sxx = float(xc @ xc)
    slope = float(xc @ yc) / sxx
    dof = len(x) - n_groups - 1
    if dof > 0:
        residual = yc - slope * xc
        half = stats.t.ppf(0.975, dof) * math.sqrt(float(residual @ residual) / dof / sxx)
    else:
        half = math.inf
    half = max(half, 1e-9 * max(1.0, abs(slope)))
    return SlopeFit(name, group, slope, slope - half, slope + half, float(theory), float(tolerance),
                    relation, len(x))


def offset_bias_bound(L: np.ndarray, delta: np.ndarray) -> float:
    """Largest OLS-slope change a perturbation r(L) with 0 ≤ r ≤ delta can cause.

    log(2IH·N + M + H) = ½·log(1/ε) + const + r, where r = log(1 + (2IH·θ + M + H)/(2IH·√(ICa/ε)))
    and θ ∈ [0, 1) is the ceiling's fraction: r ≤ delta = (2IH + M + H)/(2IH·√(ICa/ε)).
    The OLS slope of r is Σ(L − L̄)(r − r̄)/Σ(L − L̄)², at most Σ|L − L̄|·δ_max/Σ(L − L̄)².
    """
    centred = L - L.mean()
    return float(np.abs(centred).sum() * delta.max() / (centred**2).sum())


def run_sweep(sc: SweepConfig, measure: dict | None = None, progress: bool | None = None) -> list[dict]:
    """One row per (ε, M, K, seed, variant). Both variants compute the same function, so
    each point is measured once and the row for the other variant shares that measurement."""
    measure = FAST_MEASURE | (measure or {})
    points = [(e, M, K, s) for K in sc.K for M in sc.M for e in sc.eps for s in sc.seeds if K <= M]
    bar = Progress(len(points), "sweep", progress)
    rows = []
    for eps, M, K, seed in points:
        start = time.perf_counter()
        cfg = HyperteacherConfig(I=sc.I, H=sc.H, O=sc.O, M=M, K=K, weights=sc.weights, seed=seed)
        report, teacher, _, _ = verify_point(cfg, eps, "theorem", sc.constants, build_dense=False,
                                             measure=measure, progress=False)
        seconds = time.perf_counter() - start
        for variant in VARIANTS:
            # Sizes are counted on each variant's built network, never taken from the formula.
            net = build_construction(teacher, eps, variant=variant, constants=sc.constants)
            widths = net.counted_widths()
            units = hidden_units(sc.I, sc.H, M, net.N, variant)
            if sum(widths) != units.total:
                report["passed"] = False
            rows.append(dict(
                eps=eps, M=M, K=K, seed=seed, variant=variant, I=sc.I, H=sc.H, O=sc.O,
                weights=sc.weights, constants=sc.constants, n_supports=report["teacher"]["n_supports"],
                C=report["constants"]["C"], a=report["constants"]["a"], N=report["N"],
                N_sqrt_eps=report["N_sqrt_eps"], squares=widths[0] - units.carry, carry=units.carry,
                teacher_units=widths[1], hidden_units=sum(widths), formula_units=units.total,
                certificate=report["certificate"],
                measured=report["measured"]["sup_error"],
                measured_over_certificate=report["measured_over_certificate"],
                tasks_measured=report["measured"]["n_tasks"],
                tasks_enumerated=report["measured"]["tasks_enumerated"],
                certificate_le_eps=report["checks"]["certificate <= eps"],
                measured_le_certificate=report["checks"]["measured <= certificate"],
                passed=report["passed"], seconds=seconds))
        bar.update(1, f"M={M} ε={eps:.0e}")
    bar.close()
    return rows


def fit_scaling(rows: list[dict], sc: SweepConfig) -> list[SlopeFit]:
    fits = []
    theorem_rows = [r for r in rows if r["variant"] == "theorem"]
    for K in sc.K:
        for M in sc.M:
            sel = [r for r in theorem_rows if r["M"] == M and r["K"] == K and r["eps"] <= sc.asymptotic_eps]
            if len({r["eps"] for r in sel}) < 2:
                continue
            seeds = [r["seed"] for r in sel]
            L = np.log([1 / r["eps"] for r in sel])
            squares_per_N = 2 * sc.I * sc.H
            delta = np.array([(squares_per_N + M + sc.H) / (squares_per_N * r["N_sqrt_eps"] / math.sqrt(
                r["eps"]) - squares_per_N) for r in sel])  # N − 1 < √(ICa/ε): a safe denominator
            fits.append(fit_slope(L, np.log([r["hidden_units"] for r in sel]), "log units vs log 1/ε",
                                  f"M={M} K={K}", 0.5, tolerance=offset_bias_bound(L, delta), seeds=seeds))
            fits.append(fit_slope(np.log([r["N"] for r in sel]), np.log([r["measured"] for r in sel]),
                                  "log measured vs log N", f"M={M} K={K}", -2.0, relation="<=", seeds=seeds))
    if sc.constants == "apriori":
        for K in sc.K:
            for eps in sc.eps:
                for variant, theory in (("theorem", 1.0), ("lean", 0.0)):
                    sel = [r for r in rows if r["variant"] == variant and r["K"] == K and r["eps"] == eps]
                    if len({r["M"] for r in sel}) >= 2:
                        fits.append(fit_slope([r["M"] for r in sel], [r["hidden_units"] for r in sel],
                                              "units vs M", f"{variant} K={K} ε={eps:.0e}", theory,
                                              seeds=[r["seed"] for r in sel]))
    return fits


def write_outputs(out: Path, rows: list[dict], fits: list[SlopeFit], sc: SweepConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sweep.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    payload = dict(config=asdict(sc), rows=rows,
                   fits=[asdict(f) | dict(agrees=f.agrees) for f in fits])
    (out / "sweep.json").write_text(json.dumps(payload, indent=2))


def format_fits(fits: list[SlopeFit], rows: list[dict]) -> str:
    lines = [f"{'fit':<22} {'group':<26} {'slope':>9}  {'95% interval':<22} {'theory':>12}  verdict"]
    for f in fits:
        theory = f"{f.relation} {f.theory:g}" + (f" ± {f.tolerance:.1e}" if f.tolerance else "")
        lines.append(f"{f.name:<22} {f.group:<26} {f.slope:>9.5f}  [{f.ci_low:.5f}, {f.ci_high:.5f}]"
                     f"{'':<2} {theory:>12}  {'PASS' if f.agrees else 'FAIL'}")
    bad = [r for r in rows if not r["passed"]]
    worst = max(rows, key=lambda r: r["measured_over_certificate"])
    lines.append(f"runs: {len(rows) // 2} points, {len(bad) // 2} violating a bound; largest "
                 f"measured/certificate {worst['measured_over_certificate']:.3f} (M={worst['M']}, "
                 f"ε={worst['eps']:.0e}, seed {worst['seed']})")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m verify.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.error = lambda message: (_ for _ in ()).throw(UsageError(message))  # one line, exit 2
    d = SweepConfig()
    p.add_argument("--eps", type=positive_float, nargs="+", default=list(d.eps))
    p.add_argument("--M", type=positive_int, nargs="+", default=list(d.M))
    p.add_argument("--K", type=positive_int, nargs="+", default=list(d.K))
    p.add_argument("--seeds", type=int, nargs="+", default=list(d.seeds))
    p.add_argument("--I", type=positive_int, default=d.I)
    p.add_argument("--H", type=positive_int, default=d.H)
    p.add_argument("--O", type=positive_int, default=d.O)
    p.add_argument("--weights", default=d.weights, choices=WEIGHTS)
    p.add_argument("--constants", default=d.constants, choices=CONSTANTS)
    p.add_argument("--asymptotic-eps", type=positive_float, default=d.asymptotic_eps,
                   help="fit the ε-slope on ε ≤ this (default 1e-3)")
    p.add_argument("--out", default="sweep_out", help="folder for sweep.csv and sweep.json")
    p.add_argument("--json", action="store_true", help="print the fits as JSON")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if max(args.K) > max(args.M):
        raise UsageError(f"every K must be at most some M (got K={max(args.K)}, largest M={max(args.M)})")
    return args


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        sc = SweepConfig(eps=tuple(sorted(args.eps, reverse=True)), M=tuple(sorted(args.M)),
                         K=tuple(args.K), seeds=tuple(args.seeds), I=args.I, H=args.H, O=args.O,
                         weights=args.weights, constants=args.constants, asymptotic_eps=args.asymptotic_eps)
        rows = run_sweep(sc, progress=False if args.no_progress else None)
    except UsageError as e:
        print(f"verify.sweep: error: {e} (see --help)", file=sys.stderr)
        return 2
    fits = fit_scaling(rows, sc)
    write_outputs(Path(args.out), rows, fits, sc)
    if args.json:
        print(json.dumps([asdict(f) | dict(agrees=f.agrees) for f in fits], indent=2))
    else:
        print(format_fits(fits, rows))
        print(f"wrote {Path(args.out) / 'sweep.csv'} and sweep.json")
    ok = all(f.agrees for f in fits) and all(r["passed"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
