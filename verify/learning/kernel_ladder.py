"""What a ladder of kernel limits says about the limit itself (issue 45): "settled" when its
last doubling moved the held-out R² by less than a tolerance, else the asymptote of a stated
saturating model fitted to the rungs, with an interval.

**The model.** R(n) = R∞ − a·n^(−b), a ≥ 0, b > 0 (n: the rung's training tasks, or rows):
a power-law approach to a ceiling, the shape of a kernel regression's learning curve when
the target's spectral tail decays as a power (Spigler, Geiger and Wyart 2020; Bordelon,
Canatar and Pehlevan 2020). Fitted by least squares (scipy.optimize.least_squares), n
measured in units of the first rung's n.

**The interval: profile likelihood.** For each candidate asymptote c the best (a, b) gives
the residual sum of squares RSS(c); the interval is every c with
    (RSS(c) − RSS_min) / (RSS_min / (m − 3)) ≤ F(1, m − 3; level)
(m rungs, 3 parameters: the F-test interval, exact for a model linear in its parameters and
the usual approximation otherwise). It needs m ≥ 4 rungs, and is searched over c ≤ 1 (an R²
is at most 1): an interval that reaches 1 says the rungs do not bound the asymptote from
above ("upper end at the bound"), which is what a ladder that has not begun to bend gives;
below, over c ≥ the least rung's R² ("lower end at the bound").
"""

from __future__ import annotations

import math

import numpy as np

MODEL = "R(n) = R_inf - a * n**(-b), a >= 0, b > 0 (n in units of the first rung's)"
INTERVAL_METHOD = "profile likelihood: F(1, m - 3) test on the residual sum of squares"
R2_CEILING = 1.0  # an R² is at most 1: the profile is searched up to here
B_BOUNDS = (1e-3, 8.0)
GRID = 201  # candidate asymptotes on [min R², 1]; the ends are then found by root finding


def last_change(r2: list[float], per_doubling: int = 1) -> float | None:
    """How far the last doubling (the last `per_doubling` rungs) moved the held-out R² (None with
    fewer rungs)."""
    return None if len(r2) <= per_doubling else float(r2[-1] - r2[-1 - per_doubling])


def is_settled(r2: list[float], tolerance: float, per_doubling: int = 1) -> bool:
    change = last_change(r2, per_doubling)
    return change is not None and abs(change) < tolerance


def _fit_at(c: float, n: np.ndarray, r: np.ndarray) -> tuple[float, float, float]:
    """(RSS, a, b) of the best a ≥ 0, b ∈ B_BOUNDS with the asymptote held at c."""
    from scipy.optimize import least_squares

    gap = c - r
    if np.all(gap > 0) and len(n) > 1 and np.ptp(np.log(gap)) > 0:  # start from the log-linear fit
        slope, intercept = np.polyfit(np.log(n), np.log(gap), 1)
        a0, b0 = math.exp(intercept), float(np.clip(-slope, *B_BOUNDS))
    else:
        a0, b0 = max(float(np.max(gap)), 1e-6), 0.5
    a0 = max(a0, 1e-9)

    def residual(p):
        return r - (c - p[0] * n ** (-p[1]))

    best = least_squares(
        residual,
        [a0, b0],
        bounds=([0.0, B_BOUNDS[0]], [np.inf, B_BOUNDS[1]]),
        x_scale="jac",
        xtol=1e-14,
        ftol=1e-14,
        gtol=1e-14,
    )
    return float(2 * best.cost), float(best.x[0]), float(best.x[1])


def saturating_fit(n, r2, level: float = 0.95) -> dict:
    """The model's least-squares fit to the rungs (n, r2) and the profile-likelihood interval
    of its asymptote (module docstring). n increasing, at least 3 rungs (4 for an interval)."""
    from scipy.optimize import minimize_scalar
    from scipy.stats import f as f_dist

    n = np.asarray(n, dtype=float)
    r = np.asarray(r2, dtype=float)
    if len(n) < 3:
        raise ValueError(f"the saturating model has 3 parameters: it needs at least 3 rungs, got {len(n)}")
    n = n / n[0]
    lo = float(r.min())
    grid = np.linspace(lo, R2_CEILING, GRID)
    rss = np.array([_fit_at(c, n, r)[0] for c in grid])
    i = int(np.argmin(rss))
    bracket = (grid[max(i - 1, 0)], grid[min(i + 1, GRID - 1)])
    refined = minimize_scalar(
        lambda c: _fit_at(c, n, r)[0], bounds=bracket, method="bounded", options=dict(xatol=1e-10)
    )
    c_hat = float(refined.x) if refined.fun <= rss[i] else float(grid[i])
    rss_min, a, b = _fit_at(c_hat, n, r)
    dof = len(n) - 3
    out = dict(
        model=MODEL,
        r_inf=c_hat,
        a=a,
        b=b,
        rss=rss_min,
        rungs=len(n),
        residual_dof=dof,
        level=level,
        interval_method=INTERVAL_METHOD,
        interval=None,
        upper_at_bound=None,
        lower_at_bound=None,
    )
    if dof < 1:
        return out
    scale = max(rss_min / dof, 1e-300)
    threshold = float(f_dist.ppf(level, 1, dof))

    def excess(c):
        return (_fit_at(c, n, r)[0] - rss_min) / scale - threshold

    inside = (rss - rss_min) / scale <= threshold
    inside[i] = True
    # The interval: the run of grid points around the optimum inside the threshold, its ends
    # found by root finding between the last point in and the first out.
    from scipy.optimize import brentq

    j, k = i, i
    while j > 0 and inside[j - 1]:
        j -= 1
    while k < GRID - 1 and inside[k + 1]:
        k += 1
    lower = float(grid[0]) if j == 0 else brentq(excess, grid[j - 1], max(grid[j], c_hat), xtol=1e-10)
    upper = R2_CEILING if k == GRID - 1 else brentq(excess, min(grid[k], c_hat), grid[k + 1], xtol=1e-10)
    lower, upper = min(lower, c_hat), max(upper, c_hat)
    out.update(interval=[lower, upper], upper_at_bound=k == GRID - 1, lower_at_bound=j == 0)
    return out


def limit_of(n, r2, tolerance: float, level: float = 0.95, per_doubling: int = 1) -> dict:
    """What the ladder says of the limit: `settled` (the last rung's R², its last doubling, the
    last `per_doubling` rungs, moved it by less than `tolerance`), else `extrapolated` (the
    saturating model's R∞ with its interval, fitted to every rung), or `unresolved` (too few
    rungs to fit the model)."""
    change = last_change(r2, per_doubling)
    if is_settled(r2, tolerance, per_doubling):
        return dict(kind="settled", value=float(r2[-1]), last_change=change, tolerance=tolerance)
    if len(r2) < 3:
        return dict(
            kind="unresolved",
            value=None,
            last_change=change,
            tolerance=tolerance,
            why=f"not settled and {len(r2)} rung(s): the saturating model needs 3 (4 for an interval)",
        )
    fit = saturating_fit(n, r2, level)
    return dict(kind="extrapolated", value=fit["r_inf"], last_change=change, tolerance=tolerance, fit=fit)
