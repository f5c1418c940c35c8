"""Issue 22: the width SGD needs as the number of modules M grows (the width-vs-M study).

The theorem builds a ReLU MLP of 2·I·H·N(ε) + M + H hidden units: a part that depends on ε
alone (N ~ 1/√ε) and one unit per module. Nothing says SGD finds it; a network that
memorises every task takes H·Σ_{k≤K} C(M, k) units instead (slope → K on log-log). From a
study's runs (a ladder of MLP widths at each M) this module computes:

- w*(M): the smallest width at which a held-out metric reaches a threshold (`width_needed`),
  interpolated linearly in log(width) between the last rung below and the first at or
  above it; never extrapolated ("not reached"); a first rung that already reaches it is
  reported as an upper bound ("below the ladder"); a ladder that crosses back is flagged
  and its first crossing used;
- per M, each seed's w*, their geometric mean, and an interval over seeds (min–max for one
  or two seeds, a 95% t-interval on log w* for three or more: `seed_interval` says which);
- the slope of log w* on log M over every seed (issue 43): each seed's w* exact where the runs
  that set it trained to R² 0.99, else an interval (`seed_observation`): a step-limited crossing
  (those runs did not converge, or a longer run of the same seed crossed lower: more steps never
  need more width) is censored to (floor, w*], floor the widest rung a converged run left short
  or 0; below the ladder (0, first rung]; never reached (widest rung, ∞). The fit is
  `censored_slope` (interval-censored maximum likelihood; the t-interval when all are exact), so
  no M is dropped for one censored seed;
- the slope intervals, w* and n*, Bonferroni over the m fits that give a verdict: each at
  1 − 0.05/m, the verdicts 95% family-wise (`bonferroni`);
- the construction's hidden units at a matched ε, its 1/√ε-term and its M-term apart
  (`construction_units`), and two memorisers with their slopes over the same M: one unit
  per (task, teacher unit), width ∝ tasks (→ K), and one whose weights, ∝ width² at a fixed
  depth, grow like the tasks, width ∝ √tasks (half that slope, → K/2: about 1 at K = 2, so
  a slope below 1 alone does not exclude memorisation);
- a verdict (`verdict`) named by the test it rests on: where the 95% interval lies against
  0, 1, the √-memoriser's and the memoriser's slopes (e.g. "slope < 0.97 at 95%"; the
  reference values come from the baselines alone, never from the data), "inconclusive"
  when it excludes none;
- the same for the training tasks n*(M) SGD needs at the widest rung of each depth, when the
  runs vary the held-out fraction there, beside M and all tasks Σ C(M, k) (`analyse`);
- for each w*, whether the runs on the rungs that set it trained to R² 0.99 (a width that
  stands in for too few steps is counted in `unconverged`).

Thresholds (CRITERIA): held-out R² ≥ 0.99 and ≥ 0.95 (the official estimator, metric "r2"
on side "held_out"), and held-out RMSE ≤ 0.15 and ≤ 0.10. The teacher's within-task output
sd is about 0.5 at every size measured (0.47–0.65 for I = H = O ∈ {2, 4, 16}, K ∈ {2, 3},
M 4–32, three seeds each), so these RMSEs are about R² 0.91 and 0.96: looser than the R²
thresholds, for a grid where held-out R² is limited by the training tasks. And the
in-distribution R² ≥ 0.99 and ≥ 0.95 (metric "r2" on side "train": fresh tasks of the
training supports, fresh weights and x): the width SGD needs to fit the training tasks. A
memoriser's grows like their number, ∝ Σ C(M, k) at a fixed held-out fraction; a
compositional solution's like M. Unlike the held-out thresholds it is not capped by how
many tasks the split leaves for training (few at small M: held-out R² stops short there
at any width). Matched ε
(`Criterion.matched_eps`): for RMSE ≤ τ, ε = τ (the construction's certificate bounds its
sup error, so its RMSE too, by ε: it meets the threshold on every task); for R² ≥ r,
ε = 0.5·√(1 − r), the RMSE that R² means for an output sd of 0.5.

Everything but `readout_norms` (which draws the study's teachers) is a pure function of
plain data (numbers, lists, dicts); `analyse` assembles them, `analyse_runs` reads a study
store's rows, and `format_analysis` prints the result.

The grid also varies the held-out fraction at the widest rung (a study file's `also:` adds such
a ladder without multiplying the grid), which gives n*(M), fitted by `censored_slope` over every
seed. Runs at twice the steps beside their twins are the longer-run check: they never enter a
ladder.

Reading the cpu study (I = H = O = 4, K = 2, M 6, 8, 16, 32, held-out fraction 0.25, widths
16–256 at depth 2 and 4, 20,000 steps of 32 tasks at cosine lr 3e-3, two seeds; the longer-run
check at 40,000 steps for seed 1 at depth 2, and 80,000 at M = 32, where w* still moved at
40,000, for widths 64 and 128 at both depths): the held-out thresholds are capped at small M by
the few training tasks there, so more modules bring more training tasks, and those, not width,
limit the smaller M. The construction's own units at a matched ε are dominated by its
1/√ε-term, so its total's slope is near 0 at this scale: SGD's widths are far below the
construction's. What the cpu scale cannot settle: K = 2 only (slope K = 2 is what memorisation
would show); M up to 32; the held-out fraction fixed, so training tasks and M grow together;
widths at most 256; two seeds. The paper-scale grid (K = 3, M 8–64, widths 64–2048, 300,000
steps, 294 runs) is 2.4e18 training FLOPs: 2.7 GPU-hours at 250 TFLOP/s achieved, more in
practice since the narrow rungs are bound by kernel launches (`verify.bench --device cuda
--pack`). tests/test_width_vs_m.py holds the analysis to synthetic ladders with known answers (a
planted exponent of 1 and 2 recovered inside its interval, a planted −1 called "slope < 0", a
ladder that never crosses reported as not reached, longer runs kept off the ladder) and runs
the smoke study end to end.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from verify.studies.store import reads_report
from verify.studies.verdicts import INCONCLUSIVE, interval_side

REACHED, BELOW, NOT_REACHED = "reached", "below the ladder", "not reached"
CONFIDENCE = 0.95
NETWORK = "sgd custom"  # a width × depth student (verify.sgd --shapes custom)
TEACHER_OUTPUT_SD = 0.5  # within-task sd of the hyperteacher's outputs, measured (module docstring)


# ----------------------------------------------------------------------------- thresholds

@dataclass(frozen=True)
class Criterion:
    """A held-out metric and the threshold it must reach."""

    metric: str  # "r2" (higher is better) or "rmse" (lower)
    threshold: float

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "rmse"

    @property
    def label(self) -> str:
        name = {"r2": "held-out R²", "rmse": "held-out RMSE", "train_r2": "in-distribution R²"}.get(
            self.metric, self.metric)
        return f"{name} {'≥' if self.higher_is_better else '≤'} {self.threshold:g}"

    def reaches(self, value: float) -> bool:
        return value >= self.threshold if self.higher_is_better else value <= self.threshold

    def matched_eps(self, output_sd: float = TEACHER_OUTPUT_SD) -> float:
        """The construction's ε set beside this threshold (module docstring)."""
        if self.metric == "rmse":
            return self.threshold
        if self.metric in ("r2", "train_r2"):
            return output_sd * math.sqrt(1.0 - self.threshold)
        raise ValueError(f"no matched ε for metric {self.metric!r}")


CRITERIA = (Criterion("r2", 0.99), Criterion("r2", 0.95), Criterion("rmse", 0.15), Criterion("rmse", 0.10),
            Criterion("train_r2", 0.99), Criterion("train_r2", 0.95))


# ----------------------------------------------------------------------------- w* on one ladder

@dataclass(frozen=True)
class Needed:
    """Where one ladder reaches a threshold."""

    width: float | None  # w* (an upper bound when status is BELOW; None when NOT_REACHED)
    status: str  # REACHED, BELOW or NOT_REACHED
    bracket: tuple[float, float] | None = None  # the rungs w* lies between (REACHED)
    non_monotone: bool = False  # a rung above the first crossing falls back short of the threshold
    missing: int = 0  # rungs without a value (left out)
    last: float | None = None  # the ladder's last rung with a value (NOT_REACHED: w* lies above it)

    @property
    def interval(self) -> tuple[float, float]:
        """Where w* lies, as the ladder knows it: between the bracketing rungs (REACHED), at or
        below the first rung (BELOW: (0, first]), above the last (NOT_REACHED: (last, ∞))."""
        if self.status == REACHED:
            return self.bracket
        if self.status == BELOW:
            return (0.0, self.width)
        return (self.last, math.inf)

    @property
    def note(self) -> str:
        parts = []
        if self.status == BELOW:
            parts.append(f"the first rung ({self.width:g}) already reaches it: w* ≤ {self.width:g}")
        if self.non_monotone:
            parts.append("not monotone: a wider rung falls back short; the first crossing is used")
        if self.missing:
            parts.append(f"{self.missing} rungs without a value left out")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        """Plain data (JSON): the interval's open upper end (not reached) as None."""
        if self.status == NOT_REACHED and self.last is None:
            interval = None
        else:
            lo, hi = self.interval
            interval = (lo, None if math.isinf(hi) else hi)
        return asdict(self) | dict(note=self.note, interval=interval)


def width_needed(widths, values, threshold: float, higher_is_better: bool = True) -> Needed:
    """The smallest width at which `values` reach `threshold` (≥, or ≤ when not
    higher_is_better), interpolated linearly in log(width) between the last rung short of it
    and the first that reaches it. Never extrapolated: a ladder that never reaches it is
    NOT_REACHED (width None); one whose first rung reaches it is BELOW the ladder (width: the
    first rung, an upper bound). A None or non-finite value is a rung left out. The widths
    must be positive and distinct (any order)."""
    widths = np.asarray(widths, dtype=float)
    if widths.ndim != 1 or len(widths) != len(values) or not len(widths):
        raise ValueError("widths and values must be two non-empty lists of one length")
    if not np.all(np.isfinite(widths) & (widths > 0)) or len(set(widths.tolist())) != len(widths):
        raise ValueError(f"widths must be positive, finite and distinct, got {widths.tolist()}")
    have = [v is not None and math.isfinite(v) for v in values]
    order = [i for i in np.argsort(widths) if have[i]]
    w = widths[order]
    v = np.array([values[i] for i in order], dtype=float)
    missing = len(widths) - len(order)
    reached = v >= threshold if higher_is_better else v <= threshold
    if not reached.any():
        return Needed(None, NOT_REACHED, missing=missing, last=float(w[-1]) if len(w) else None)
    first = int(np.argmax(reached))
    non_monotone = not reached[first:].all()
    if first == 0:
        return Needed(float(w[0]), BELOW, non_monotone=non_monotone, missing=missing)
    lo, hi = first - 1, first
    t = (threshold - v[lo]) / (v[hi] - v[lo])  # in (0, 1]: v[lo] is short of it, v[hi] reaches it
    log_w = math.log(w[lo]) + t * (math.log(w[hi]) - math.log(w[lo]))
    return Needed(float(math.exp(log_w)), REACHED, (float(w[lo]), float(w[hi])), non_monotone, missing)


# ----------------------------------------------------------------------------- over seeds

def seed_interval(values, confidence: float = CONFIDENCE) -> dict:
    """The geometric mean of positive `values` (one per seed) and an interval over them: the
    min–max for one or two values, a t-interval on their logs (n − 1 degrees of freedom)
    for three or more; `kind` says which."""
    v = np.asarray(values, dtype=float)
    if not len(v) or not np.all(np.isfinite(v) & (v > 0)):
        raise ValueError(f"need positive finite values, got {list(values)}")
    logs = np.log(v)
    mean = float(np.exp(logs.mean()))
    if len(v) < 3:
        return dict(mean=mean, lo=float(v.min()), hi=float(v.max()), n=len(v),
                    kind="one seed" if len(v) == 1 else "min–max over seeds")
    from scipy import stats

    half = stats.t.ppf(0.5 + confidence / 2, len(v) - 1) * logs.std(ddof=1) / math.sqrt(len(v))
    return dict(mean=mean, lo=float(np.exp(logs.mean() - half)), hi=float(np.exp(logs.mean() + half)),
                n=len(v), kind=f"{confidence:.0%} t-interval on log w over seeds")


def summarise_seeds(needed: list[Needed], confidence: float = CONFIDENCE) -> dict:
    """One M's w* over seeds: the mean and interval when every seed reached the threshold on
    the ladder (an upper bound, flagged, where some seed's first rung already did), else
    None and how many seeds did not."""
    n = len(needed)
    short = sum(x.status == NOT_REACHED for x in needed)
    below = sum(x.status == BELOW for x in needed)
    out = dict(seeds=n, not_reached=short, below_ladder=below,
               non_monotone=sum(x.non_monotone for x in needed))
    if not n or short:
        return out | dict(mean=None, lo=None, hi=None, kind=None,
                          status=f"not reached by {short} of {n} seeds" if n else "no runs")
    status = REACHED if not below else f"upper bound: below the ladder for {below} of {n} seeds"
    return out | seed_interval([x.width for x in needed], confidence) | dict(status=status,
                                                                             upper_bound=bool(below))


# ----------------------------------------------------------------------------- slopes

def fit_slope(M, w, confidence: float = CONFIDENCE) -> dict:
    """Least-squares slope of log w on log M with its `confidence` interval (t, n − 2
    degrees of freedom). Pairs whose w is None, non-finite or ≤ 0 (not reached) are left
    out; fewer than three pairs, or fewer than three distinct M, is "too few points"."""
    pairs = [(m.item() if isinstance(m, np.generic) else m, float(x)) for m, x in zip(M, w, strict=True)
             if x is not None and math.isfinite(x) and x > 0]
    n, distinct = len(pairs), len({m for m, _ in pairs})
    base = dict(n=n, n_M=distinct, confidence=confidence, Ms=sorted({m for m, _ in pairs}))
    if n < 3 or distinct < 3:
        return base | dict(status="too few points", slope=None, lo=None, hi=None, intercept=None, dof=None,
                           reason=f"{n} points at {distinct} distinct M; a slope with an interval needs "
                                  "three or more of each")
    from scipy import stats

    x = np.log([float(m) for m, _ in pairs])
    y = np.log([v for _, v in pairs])
    sxx = float(((x - x.mean()) ** 2).sum())
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    intercept = float(y.mean() - slope * x.mean())
    resid = y - (intercept + slope * x)
    se = math.sqrt(float((resid ** 2).sum()) / (n - 2) / sxx)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 2)) * se
    return base | dict(status="fitted", slope=slope, lo=slope - half, hi=slope + half, se=se,
                       intercept=intercept, dof=n - 2)


def censored_slope(M, intervals, confidence: float = CONFIDENCE) -> dict:
    """The slope of log n* on log M when each n* is known only as an interval (a ladder's
    bracketing rungs; (0, first rung] below the ladder; (last rung, ∞) not reached) or exactly
    (lo == hi: a w* interpolated on a ladder that converged): the maximum-likelihood fit of
    log n* = a + b·log M + σ·ε, ε ~ N(0, 1), whose likelihood of an interval is
    Φ((log hi − μ)/σ) − Φ((log lo − μ)/σ) (interval censoring) and of an exact value its normal
    density (the Tobit form). Seeds that never reach the threshold are kept as right-censored,
    not dropped. Interval: the profile likelihood's, {b : ℓ_max − ℓ_profile(b) ≤ drop}, found by
    bisection (None on a side where the likelihood never drops that far: the data do not bound
    it), with the drop that makes it the exact t-interval when every value is exact. Needs ≥ 3
    distinct M and at least two observations with a finite upper end."""
    from scipy import optimize, special, stats

    obs = [(m.item() if isinstance(m, np.generic) else m, float(lo), float(hi))
           for m, (lo, hi) in zip(M, intervals, strict=True)
           if lo is not None and hi is not None and (hi > lo >= 0 or 0 < lo == hi < math.inf)]
    n, distinct = len(obs), len({m for m, _, _ in obs})
    base = dict(n=n, n_M=distinct, confidence=confidence, method="interval-censored maximum likelihood",
                censored=sum(math.isinf(hi) or lo == 0 for _, lo, hi in obs),
                exact=sum(lo == hi for _, lo, hi in obs), Ms=sorted({m for m, _, _ in obs}))
    if distinct < 3 or sum(math.isfinite(hi) for _, _, hi in obs) < 2:
        return base | dict(status="too few points", slope=None, lo=None, hi=None,
                           reason=f"{n} observations at {distinct} distinct M; the fit needs three M "
                                  "and two with a finite upper end")
    # One-sided observations ((0, w*]: a step-limited crossing; (w, ∞): never reached) only say
    # where n* is not: with few values bounded on both sides, the likelihood is maximised by a
    # line that runs off to a cliff between them (slopes of −12 to −39 on the cpu store), and
    # the profile interval is not calibrated there. A slope needs three two-sided values at two M.
    two_sided = [(m, lo, hi) for m, lo, hi in obs if lo > 0 and math.isfinite(hi)]
    if len(two_sided) < 3 or len({m for m, _, _ in two_sided}) < 2:
        return base | dict(status="not identified", slope=None, lo=None, hi=None,
                           reason=f"{len(two_sided)} of {n} observations bounded on both sides (the rest "
                                  "only above or below): a slope needs three of them at two M")
    if base["exact"] == n:  # nothing censored: the ordinary regression, which this fit would reproduce
        return fit_slope([m for m, _, _ in obs], [hi for _, _, hi in obs], confidence) | base
    x = np.log([float(m) for m, _, _ in obs])
    lo_log = np.array([math.log(lo) if lo > 0 else -np.inf for _, lo, _ in obs])
    hi_log = np.array([math.log(hi) if math.isfinite(hi) else np.inf for _, _, hi in obs])
    exact = lo_log == hi_log

    def loglik(a, b, log_s):  # special.ndtr, not stats.norm.cdf: the same Φ at a tenth of the call cost
        mu, s = a + b * x, math.exp(log_s)
        p = special.ndtr((hi_log - mu) / s) - special.ndtr((lo_log - mu) / s)
        # An exact value's normal log density on log n* (its Jacobian 1/n* is a constant of the data).
        z = (hi_log[exact] - mu[exact]) / s
        dens = -0.5 * z * z - 0.5 * math.log(2 * math.pi) - log_s
        return float(np.sum(np.log(np.maximum(p[~exact], 1e-300))) + np.sum(dens))

    def best_given(b, start):
        fit = optimize.minimize(lambda t: -loglik(t[0], b, t[1]), start, method="Nelder-Mead",
                                options=dict(xatol=1e-10, fatol=1e-12, maxiter=20000))
        return -fit.fun, fit.x

    mids = np.where(np.isfinite(hi_log) & np.isfinite(lo_log), (lo_log + hi_log) / 2,
                    np.where(np.isfinite(hi_log), hi_log, lo_log))
    b0, a0 = np.polyfit(x, mids, 1)
    full = optimize.minimize(lambda t: -loglik(*t), [a0, b0, math.log(max(np.std(mids), 0.1))],
                             method="Nelder-Mead", options=dict(xatol=1e-10, fatol=1e-12, maxiter=40000))
    a_hat, b_hat, log_s_hat = full.x
    l_max = -full.fun
    if exact.any() and log_s_hat < math.log(1e-6):
        # The exact values lie on a line that meets every interval too (σ → 0): the slope is theirs.
        on_line = [(m, hi) for m, lo, hi in obs if lo == hi]
        return fit_slope([m for m, _ in on_line], [v for _, v in on_line], confidence) | base
    # Every interval met with probability → 1: σ → 0 and the slope is not pinned.
    if not exact.any() and l_max > -1e-6 * n:  # (a density can exceed 1: only intervals here)
        return base | dict(status="not identified", slope=None, lo=None, hi=None,
                           reason="a line meets every observation's interval exactly (σ → 0): the "
                                  "intervals do not pin the slope")
    # The profile likelihood's drop, calibrated as for the uncensored regression, where it is
    # exact: there 2(ℓ_max − ℓ_profile(b)) = n·log(1 + T²/(n − 2)) with T ~ t_{n−2} (the MLE of
    # σ divides by n), so the interval is the t-interval. χ²₁'s asymptotic 3.84 undercovers at
    # these n (88% of 60 planted fits at n = 21, 4 censored; the t form: see the tests).
    t = stats.t.ppf(0.5 + confidence / 2, n - 2)
    drop = n / 2 * math.log1p(t * t / (n - 2))

    def deficit(b):
        return l_max - best_given(b, [a_hat + (b_hat - b) * x.mean(), log_s_hat])[0] - drop

    def bound(direction):
        step = 0.25
        for _ in range(12):  # out to ±1000 in slope
            end = b_hat + direction * step
            if deficit(end) > 0:
                return float(optimize.brentq(deficit, *sorted((b_hat, end)), xtol=1e-6))
            step *= 2
        return None  # the data never bound it on this side

    return base | dict(status="fitted", slope=float(b_hat), lo=bound(-1), hi=bound(+1),
                       intercept=float(a_hat), sigma=float(math.exp(log_s_hat)), loglik=l_max)


def curve_slope(M, values) -> float | None:
    """The least-squares log-log slope of a baseline curve (no interval: it is exact)."""
    if len(set(M)) < 2:
        return None
    return float(np.polyfit(np.log(np.asarray(M, float)), np.log(np.asarray(values, float)), 1)[0])


def verdict(fit: dict, memorising_slope: float, sqrt_slope: float | None = None, *, what: str = "w*",
            memoriser: str = "memoriser") -> dict:
    """What the slope's interval establishes at its level, named by the test (verify.studies.
    verdicts.interval_side): against 0, 1 (linear in M), the √-memoriser's slope `sqrt_slope`
    (a network whose parameters, ∝ width², grow like the tasks: width ∝ √tasks) and the
    `memoriser`'s own slope over the same M (one unit per task: width ∝ tasks). `short` gives
    the tightest bounds established, e.g. "slope < 0.97 at 95%" or "1 < slope < 1.93 at 95%";
    "inconclusive" when the interval excludes none of them. The reference values come from the
    baselines alone, never from the data. An interval below 0 means something other than this
    resource limits the smaller M (`text` says so). Flags: `excludes_linear` (lo > 1),
    `excludes_memorising` (hi < memorising_slope), `excludes_sqrt_memorising` (hi < sqrt_slope)."""
    if fit["status"] != "fitted":
        reason = fit.get("reason", fit["status"])
        return dict(call=INCONCLUSIVE, short=f"inconclusive ({fit['status']})", excludes_linear=None,
                    excludes_memorising=None, excludes_sqrt_memorising=None,
                    text=f"inconclusive: {reason}")
    # An unbounded side (a censored fit's: verify.studies.width.censored_slope) is infinite.
    lo = -math.inf if fit["lo"] is None else fit["lo"]
    hi = math.inf if fit["hi"] is None else fit["hi"]
    refs = [("0", 0.0), ("linear in M", 1.0), (f"the {memoriser}", memorising_slope)]
    if sqrt_slope is not None:
        refs.insert(1, (f"the √-{memoriser}", sqrt_slope))
    sides = {name: interval_side(lo, hi, value) for name, value in refs}
    below = [(name, v) for name, v in refs if sides[name].startswith("<")]
    above = [(name, v) for name, v in refs if sides[name].startswith(">")]
    flags = dict(excludes_linear=bool(lo > 1.0), excludes_memorising=bool(hi < memorising_slope),
                 excludes_sqrt_memorising=None if sqrt_slope is None else bool(hi < sqrt_slope))
    # A fit in a family (analyse): the verdict holds at the family-wise level, its interval at its own.
    pct = f"{fit['family_wise']:.0%} family-wise" if fit.get("family_wise") else f"{fit['confidence']:.0%}"
    span = f"slope {fit['slope']:.2f}, {_level(fit['confidence'])} interval [{_end(lo)}, {_end(hi)}]"
    def num(v: float) -> str:  # 0 and 1 exactly, a baseline's slope to 2 decimals
        return f"{v:g}" if v in (0.0, 1.0) else f"{v:.2f}"

    def named(name: str, v: float) -> str:
        return name if name == num(v) else f"{name} ({num(v)})"

    if not below and not above:
        inside = [(name, v) for name, v in refs if lo <= v <= hi]
        short = f"inconclusive (contains {', '.join(num(v) for _, v in inside)})"
        return flags | dict(call=INCONCLUSIVE, short=short,
                            text=f"inconclusive: {span} contains " + ", ".join(named(*r) for r in inside))
    low = max(above, key=lambda r: r[1]) if above else None
    high = min(below, key=lambda r: r[1]) if below else None
    short = " < ".join([*([num(low[1])] if low else []), "slope", *([num(high[1])] if high else [])])
    short += f" at {pct}"
    sides_text = "; ".join([*(f"above {named(*r)}" for r in above), *(f"below {named(*r)}" for r in below)])
    text = f"{short}: {span}, {sides_text}"
    if hi < 0:  # less of the resource at more modules: another resource limits the smaller M
        text += (f"; {what} shrinks as M grows, so something other than this resource limits the smaller "
                 "M (at a fixed held-out fraction, the training tasks, which grow with M)")
    return flags | dict(call=short, short=short, text=text)


# ----------------------------------------------------------------------------- baselines

def construction_units(I: int, H: int, M: int, K: int, eps: float, a: float, C: float | None = None) -> dict:
    """The shallow construction's hidden units at ε (theory.bounds, the formula build_shallow
    builds): 2·I·H·N (the 1/√ε-term: N = ⌈√(I·C·a/ε)⌉ knots per square), M (the M-term: one
    carry unit per module) and H (the teacher's layer). C: the a-priori √K·C_W by default;
    a: the teacher's readout norm max_o Σ_h |A_ho| (readout_norms)."""
    from theory.bounds import N_for_eps, apriori_C, hidden_units

    C = apriori_C(I, K) if C is None else C
    N = N_for_eps(I, C, a, eps)
    units = hidden_units(I, H, M, N, "theorem")
    return dict(M=M, eps=eps, N=N, eps_term=units.squares, M_term=units.carry, H_term=units.teacher,
                total=units.total)


def memorisation_units(M: int, K: int, H: int) -> int:
    """H·Σ_{k=1..K} C(M, k): a copy of the teacher's H units per task."""
    from theory.bounds import memorization_hidden_units

    return memorization_hidden_units(M, K, H)


def readout_norms(I: int, H: int, O: int, K: int, seeds) -> dict[int, float]:
    """Each seed's teacher readout norm a (the construction's constant; the readout A is drawn
    from a stream of its own, so a does not depend on M)."""
    from constructions.base import construction_constants
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher

    return {int(s): construction_constants(sample_hyperteacher(
        HyperteacherConfig(I=I, H=H, O=O, M=K, K=K, seed=int(s))), "apriori")[1] for s in seeds}


# ----------------------------------------------------------------------------- a study's runs

@reads_report
def points_of(runs: list[dict]) -> list[dict]:
    """One plain record per done run of a width × depth MLP on the hyperteacher (store rows,
    as RunStore.rows gives them): its settings and its held-out R², RMSE and training R²."""
    from verify.learning.families import DEFAULT_FAMILY, HyperteacherFamily
    from verify.learning.records import lookup, records_of

    out = []
    for r in runs:
        c, report = r["config"], r.get("report")
        widths = c.get("widths") or []
        hyperteacher = c.get("family", DEFAULT_FAMILY) == HyperteacherFamily.name
        if (r.get("status") != "done" or report is None or not hyperteacher
                or not widths or len(set(widths)) != 1):
            continue
        metrics = records_of(report)
        out.append(dict(M=c["M"], K=c["K"], I=c["I"], H=c["H"], O=c["O"], seed=c["seed"],
                        held_out=c["held_out"], depth=len(widths), width=widths[0], steps=c["steps"],
                        n_train=report["split"]["n_train"],
                        r2=lookup(metrics, NETWORK, "held_out", "r2", None),
                        rmse=lookup(metrics, NETWORK, "held_out", "rmse", None),
                        train_r2=lookup(metrics, NETWORK, "train", "r2", None)))
    return out


def _one(points: list[dict], key: str):
    values = sorted({p[key] for p in points})
    if len(values) != 1:
        raise ValueError(f"the runs mix {key} = {values}; analyse one teacher size at a time")
    return values[0]


def _mean_sd(values) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None and math.isfinite(x)]
    if not v:
        return None, None
    return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0


def _ladders(points: list[dict], axis: str) -> dict[tuple, dict[int, list[dict]]]:
    """Points grouped into ladders along `axis` (width or n_train): (the other settings) →
    seed → that seed's points."""
    fixed = ("held_out", "depth", "M") if axis == "width" else ("depth", "width", "M")
    out: dict[tuple, dict[int, list[dict]]] = {}
    for p in points:
        out.setdefault(tuple(p[k] for k in fixed), {}).setdefault(p["seed"], []).append(p)
    return out


def _needed_on(ladder: list[dict], axis: str, criterion: Criterion) -> Needed:
    rungs: dict[float, list] = {}  # a rung run twice (two fractions giving one n_train): its mean
    for p in ladder:
        rungs.setdefault(float(p[axis]), []).append(p[criterion.metric])
    xs = sorted(rungs)
    values = [_mean_sd(rungs[x])[0] for x in xs]
    return width_needed(xs, values, criterion.threshold, criterion.higher_is_better)


def _converged_at(ladder: list[dict], axis: str, needed: Needed, converged_r2: float) -> bool | None:
    """Whether the runs on the rungs that set w* (the two bracketing it, or the first) trained
    to `converged_r2`; None when it was not reached."""
    rungs = needed.bracket or ((needed.width,) if needed.status == BELOW else ())
    runs = [p for p in ladder if float(p[axis]) in rungs]
    if not runs:
        return None
    return all(p["train_r2"] is not None and p["train_r2"] >= converged_r2 for p in runs)


def _needed_table(ladders: dict, axis: str, criterion: Criterion, group: tuple,
                  converged_r2: float, longer: dict | None = None, main: int | None = None) -> list[dict]:
    """Per M of one group (its settings but M): each seed's w* (or n*), whether the runs that
    set it converged, and their summary over seeds. For the in-distribution criterion, whose
    metric is the training fit itself, the rung below w* is short of it by definition: there
    convergence is not asked (None); the longer-run check says whether steps or width limit.
    Each seed's `observed` is where the fit puts it (seed_observation, with the `longer` runs'
    ladders of the same settings and seed; ∞ written None)."""
    rows = []
    ask = criterion.metric != "train_r2"
    for key in sorted(k for k in ladders if k[:-1] == group):
        seeds = ladders[key]
        needed = {s: _needed_on(seeds[s], axis, criterion) for s in sorted(seeds)}
        converged = {s: _converged_at(seeds[s], axis, n, converged_r2) if ask else None
                     for s, n in needed.items()}
        per_seed = {s: n.as_dict() | dict(converged=converged[s]) for s, n in needed.items()}
        if longer is not None:  # the w* fit's observations (n*'s takes each ladder's interval)
            for s in per_seed:
                lengths = _by_length(seeds[s], longer.get(key, {}).get(s, []), main)
                observed = seed_observation(lengths, main, axis, criterion, converged_r2)
                per_seed[s]["observed"] = _plain(observed)
        unconverged = sum(c is False for c in converged.values()) if ask else None
        rows.append(dict(M=key[-1], per_seed=per_seed, **summarise_seeds(list(needed.values())),
                         unconverged=unconverged))
    return rows


def _by_length(ladder: list[dict], longer: list[dict], main: int | None) -> dict:
    """One seed's ladder at each run length: the main one and the longer-run check's."""
    out = {main: ladder}
    for p in longer:
        out.setdefault(p["steps"], []).append(p)
    return out


def _plain(observed: dict | None) -> dict | None:
    """An observation as plain data (JSON): an open upper end as None."""
    if observed is None:
        return None
    return observed | dict(hi=None if math.isinf(observed["hi"]) else observed["hi"])


def _count_unconverged(rows: list[dict]) -> int | None:
    counts = [r["unconverged"] for r in rows]
    return None if any(c is None for c in counts) else sum(counts)


def _floor(lengths: dict, axis: str, criterion: Criterion, below: float, converged_r2: float) -> float:
    """The widest rung under `below` that some run, trained to `converged_r2`, left short of the
    threshold: there width, not steps, fell short, so w* lies above it; 0 when no such run."""
    short = [float(p[axis]) for pts in lengths.values() for p in pts
             if float(p[axis]) < below and p[criterion.metric] is not None
             and math.isfinite(p[criterion.metric]) and not criterion.reaches(p[criterion.metric])
             and p["train_r2"] is not None and p["train_r2"] >= converged_r2]
    return max(short, default=0.0)


def seed_observation(lengths: dict[int, list[dict]], main: int, axis: str, criterion: Criterion,
                     converged_r2: float) -> dict | None:
    """Where one seed's runs put w* at adequate steps, for the fit: `lengths` maps each run
    length to that seed's ladder at it (the study's `main` length and any longer-run check).
    More steps never need more width, so each length's crossing bounds w* above and the
    smallest is used (a longer run's where it crosses lower, `steps` says). The value is exact
    (lo == hi) when the runs that set it trained to `converged_r2`; a step-limited one (those
    runs did not, or a longer run crossed lower) is censored to (floor, w*], floor the widest
    rung a converged run left short (_floor) or 0. Below the ladder: (0, first rung]; never
    reached: (floor, ∞), right-censored at the widest rung that converged short (None: no such
    rung, nothing known). The in-distribution criteria, whose metric is the training fit
    itself, ask no convergence: a longer run alone can show them step-limited, and their
    right-censoring is at the ladder's last rung."""
    ask = criterion.metric != "train_r2"
    found = {n: _needed_on(pts, axis, criterion) for n, pts in lengths.items()}
    crossings = [(nd.width, n) for n, nd in found.items() if nd.status in (REACHED, BELOW)]
    if not crossings:
        last = found[main].last
        lo = _floor(lengths, axis, criterion, math.inf, converged_r2) if ask else last
        if not lo:
            return None
        return dict(lo=lo, hi=math.inf, exact=False, steps=main, why="not reached: right-censored")
    w, steps = min(crossings)
    nd = found[steps]
    if nd.status == BELOW:
        where = "below the ladder" if steps == main else f"crossed lower at {steps} steps (its first rung)"
        return dict(lo=0.0, hi=w, exact=False, steps=steps, why=f"{where}: left-censored")
    limited = steps != main or (ask and not _converged_at(lengths[steps], axis, nd, converged_r2))
    if not limited:
        return dict(lo=w, hi=w, exact=True, steps=steps, why="exact")
    why = (f"crossed lower at {steps} steps" if steps != main else "step-limited (unconverged)")
    return dict(lo=_floor(lengths, axis, criterion, w, converged_r2), hi=w, exact=False, steps=steps,
                why=f"{why}: censored")


def _censored_fit(rows: list[dict], confidence: float) -> dict:
    """The slope over every seed's observation (seed_observation): exact or censored, so an M
    with a seed short of the threshold, below the ladder or step-limited stays in the fit.
    `censored` counts the seeds known only as an interval."""
    observed = [(r["M"], (o["lo"], math.inf if o["hi"] is None else o["hi"])) for r in rows
                for o in (n["observed"] for n in r["per_seed"].values()) if o]
    fit = censored_slope([m for m, _ in observed], [iv for _, iv in observed], confidence)
    return fit | dict(censored=fit["n"] - fit["exact"])


def split_steps(points: list[dict]) -> tuple[list[dict], list[dict], int | None]:
    """(the runs at the study's main length, the others, that length): the main length is
    the one most runs have (the longest on a tie); points without `steps` are all main."""
    lengths = [p.get("steps") for p in points if p.get("steps") is not None]
    if not lengths:
        return points, [], None
    main = max(set(lengths), key=lambda n: (lengths.count(n), n))
    return ([p for p in points if p.get("steps") in (None, main)],
            [p for p in points if p.get("steps") not in (None, main)], main)


def longer_runs(main: list[dict], other: list[dict], criteria) -> dict:
    """The longer-run check: each run at another length beside the main-length run of the
    same M, depth, width, held-out fraction and seed, and, per criterion, whether the longer
    run reaches a threshold its main-length twin misses (a rung whose shortfall was steps,
    not width) or the other way round."""
    place = ("M", "depth", "width", "held_out", "seed")
    twin = {tuple(p[k] for k in place): p for p in main}
    pairs, unmatched = [], 0
    for q in sorted(other, key=lambda q: (*(q[k] for k in place), q["steps"])):
        p = twin.get(tuple(q[k] for k in place))
        if p is None:
            unmatched += 1
            continue
        flips = {}
        for c in criteria:
            a, b = p[c.metric], q[c.metric]
            if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
                continue
            if c.reaches(a) != c.reaches(b):
                flips[c.label] = f"reached only at {(q if c.reaches(b) else p)['steps']} steps"
        pairs.append({k: q[k] for k in place} | dict(
            steps=(p["steps"], q["steps"]), train_r2=(p["train_r2"], q["train_r2"]), r2=(p["r2"], q["r2"]),
            rmse=(p["rmse"], q["rmse"]), flips=flips))
    longer = [x for x in pairs if x["steps"][1] > x["steps"][0]]
    return dict(pairs=pairs, unmatched=unmatched,
                crossed=sum(f"reached only at {x['steps'][1]} steps" in x["flips"].values() for x in longer),
                longer=len(longer))


def analyse(points: list[dict], criteria=CRITERIA, norms: dict[int, float] | None = None,
            output_sd: float = TEACHER_OUTPUT_SD) -> dict:
    """The whole analysis of a study's points (points_of): w*(M) per held-out fraction,
    depth and criterion, its slope and verdict beside the construction's and the memoriser's,
    the training tasks needed where the runs vary the held-out fraction at a fixed width, and
    each ladder's mean curves (for the figure). `norms`: each seed's readout norm a
    (readout_norms); without them the construction's units are left out."""
    from verify.learning.families import HyperteacherFamily

    converged_r2 = HyperteacherFamily.convergence[1]  # training R² a run must reach
    if not points:
        return dict(runs=0, notes=["no finished run of a width × depth MLP on the hyperteacher"])
    criteria = list(criteria)
    # w*, n* and the curves rest on the runs of one length; runs of another are the check.
    points, other, steps = split_steps(points)
    check = longer_runs(points, other, criteria) if other else None
    I, H, O, K = (_one(points, k) for k in ("I", "H", "O", "K"))
    Ms = sorted({p["M"] for p in points})
    seeds = sorted({p["seed"] for p in points})
    notes = []
    if check is not None:
        n = check["unmatched"]
        left = f"; {n} runs of another length have no twin (left out)" if n else ""
        notes.append(f"longer-run check: {check['crossed']} of {check['longer']} longer runs reach a "
                     f"threshold their {steps}-step twin misses{left}")
    construction = [] if norms is None else _construction(criteria, Ms, seeds, (I, H, K), norms, output_sd)
    memorisation = _memorisation(Ms, K, H)
    ladders = _ladders(points, "width")
    longer = _ladders(other, "width")

    def fits(family: dict):
        return (_width_fits(points, (ladders, longer, steps), criteria, Ms, (H, K), construction,
                            converged_r2, family),
                _task_fits(points, criteria, Ms, K, converged_r2, family))

    widths, tasks = fits(bonferroni(1))
    family = bonferroni(sum(f["fit"]["status"] == "fitted" for f in [*widths, *tasks]))
    if family["m"] > 1:  # the statuses do not depend on the level: only the intervals are redone
        widths, tasks = fits(family)
        notes.append(family["text"])
    if not tasks:
        notes.append("training tasks needed: the runs vary no held-out fraction at a fixed width and M")
    unconverged = [p for p in points if p["train_r2"] is None or p["train_r2"] < converged_r2]
    if unconverged:
        notes.append(f"{len(unconverged)} of {len(points)} runs did not converge (training R² < "
                     f"{converged_r2}); column `unconverged`: how many w* rest on such a run (the rungs "
                     "that set it), where the width may stand in for too few steps")
    notes.append("w*: width of each of the `depth` hidden layers; the fit takes every seed "
                 "(interval-censored maximum likelihood, seed_observation): exact where the runs that set "
                 "it converged, censored where they did not or a longer run crossed lower ((floor, w*]), "
                 "below the ladder ((0, first rung]) or never reached ((widest rung, ∞)); the table's cells "
                 "are the main-length ladders; the construction and the memoriser are hidden units in all, "
                 "the √-memoriser a width")
    return dict(runs=len(points), steps=steps, longer_run_check=check, teacher=dict(I=I, H=H, O=O, K=K),
                Ms=Ms, seeds=seeds, family=family,
                criteria=[dict(metric=c.metric, threshold=c.threshold, label=c.label,
                               higher_is_better=c.higher_is_better, eps=c.matched_eps(output_sd))
                          for c in criteria],
                output_sd=output_sd, construction=construction, memorisation=memorisation, widths=widths,
                tasks=tasks, curves=_curves(ladders), notes=notes)


def bonferroni(m: int, confidence: float = CONFIDENCE) -> dict:
    """The level each of `m` slope intervals takes so that all hold together at `confidence`
    (Bonferroni: each at 1 − (1 − confidence)/m), and the report's line saying so."""
    m = max(int(m), 1)
    each = 1 - (1 - confidence) / m
    alpha = f"{1 - confidence:g}"
    return dict(m=m, confidence=confidence, each=each,
                text=f"{confidence:.0%} family-wise, Bonferroni over {m} fits: each at 1 − {alpha}/{m} "
                     f"= {_level(each)} (the slope intervals, w* and n*, that give a verdict)")


def _family_of(family: dict) -> dict:
    """What a fit carries of its family: the family-wise level where there is more than one."""
    return dict(family_wise=family["confidence"], family_m=family["m"]) if family["m"] > 1 else {}


def _level(confidence: float) -> str:
    """A level as a percentage to 4 digits (95%, 99.38%)."""
    return f"{100 * confidence:.4g}%"


def _construction(criteria, Ms, seeds, teacher: tuple[int, int, int], norms, output_sd) -> list[dict]:
    """The construction's hidden units at each criterion's matched ε, per M (mean over the
    seeds' readout norms), and their slope."""
    I, H, K = teacher
    out = []
    for c in criteria:
        eps = c.matched_eps(output_sd)
        per_M = []
        for M in Ms:
            per_seed = [construction_units(I, H, M, K, eps, norms[s]) for s in seeds]
            per_M.append(dict(M=M, eps=eps, N=[u["N"] for u in per_seed],
                              eps_term=float(np.mean([u["eps_term"] for u in per_seed])), M_term=M,
                              H_term=H, total=float(np.mean([u["total"] for u in per_seed]))))
        out.append(dict(criterion=c.label, eps=eps, per_M=per_M,
                        slope=curve_slope(Ms, [u["total"] for u in per_M]), M_term_slope=curve_slope(Ms, Ms)))
    return out


def _memorisation(Ms, K: int, H: int) -> dict:
    """Two memorisers: one unit per (task, teacher unit), width ∝ tasks; and one whose
    weights, ∝ width² at a fixed depth, hold as many numbers: width ∝ √tasks, half the slope."""
    out = dict(per_M=[dict(M=M, units=memorisation_units(M, K, H),
                           sqrt_width=math.sqrt(memorisation_units(M, K, H))) for M in Ms],
               asymptotic_slope=K, sqrt_asymptotic_slope=K / 2)
    out["slope"] = curve_slope(Ms, [u["units"] for u in out["per_M"]])
    out["sqrt_slope"] = curve_slope(Ms, [u["sqrt_width"] for u in out["per_M"]])
    return out


def _width_fits(points, ladders: tuple, criteria, Ms, teacher: tuple[int, int], construction,
                converged_r2, family: dict) -> list[dict]:
    """w*(M) per held-out fraction, depth and criterion, its fit over every seed (_censored_fit)
    at the `family`'s level, and its verdict against the memorisers' slopes over the same M.
    `ladders`: the main-length ladders, the longer runs' and the main length."""
    H, K = teacher
    ladders, longer, main = ladders

    def over(fit):
        return fit["Ms"] if fit["status"] == "fitted" else Ms

    widths = []
    for held_out in sorted({p["held_out"] for p in points}):
        for depth in sorted({p["depth"] for p in points}):
            # A single rung (the training-tasks ladder's other fractions) is no width ladder.
            if all(len({p["width"] for p in ladders[k][s]}) < 2 for k in ladders if k[:2] == (held_out, depth)
                   for s in ladders[k]):
                continue
            for i, c in enumerate(criteria):
                rows = _needed_table(ladders, "width", c, (held_out, depth), converged_r2, longer, main)
                if not rows:
                    continue
                fit = _censored_fit(rows, family["each"]) | _family_of(family)
                memo = curve_slope(over(fit), [memorisation_units(M, K, H) for M in over(fit)]) or float(K)
                per = {u["M"]: u["total"] for u in construction[i]["per_M"]} if construction else None
                widths.append(dict(held_out=held_out, depth=depth, criterion=c.label, metric=c.metric,
                                   threshold=c.threshold, per_M=rows, fit=fit,
                                   unconverged=_count_unconverged(rows),
                                   construction_slope=None if per is None else
                                   curve_slope(over(fit), [per[M] for M in over(fit)]),
                                   memorisation_slope=memo, sqrt_memorisation_slope=memo / 2,
                                   verdict=verdict(fit, memo, memo / 2)))
    return widths


def _task_fits(points, criteria, Ms, K: int, converged_r2, family: dict) -> list[dict]:
    """n*(M), the training tasks a held-out criterion needs at the widest rung where the runs
    vary the held-out fraction, by the interval-censored fit, against all tasks' slope."""
    from theory.bounds import n_tasks

    tasks = []
    by_n = _ladders(points, "n_train")
    varied = {k[:2] for k, seeds_of in by_n.items() if any(len({p["n_train"] for p in s}) > 1
                                                            for s in seeds_of.values())}
    widest = {d: max(w for dd, w in varied if dd == d) for d, _ in varied}  # the widest rung per depth
    for depth, width in sorted(widest.items()):
        # In-distribution fits get no easier with more training tasks: n* is a held-out notion.
        for c in (c for c in criteria if c.metric != "train_r2"):
            rows = _needed_table(by_n, "n_train", c, (depth, width), converged_r2)
            # Seeds that never reach the threshold, or reach it at the first rung, are censored
            # observations, not dropped ones: the fit takes each seed's interval.
            observed = [(r["M"], (lo, math.inf if hi is None else hi)) for r in rows
                        for lo, hi in (n["interval"] for n in r["per_seed"].values() if n["interval"])]
            fit = censored_slope([m for m, _ in observed], [iv for _, iv in observed],
                                 family["each"]) | _family_of(family)
            over = fit["Ms"] if fit["status"] == "fitted" else Ms
            all_slope = curve_slope(over, [n_tasks(M, K) for M in over]) or float(K)
            tasks.append(dict(depth=depth, width=width, criterion=c.label, metric=c.metric,
                              threshold=c.threshold, per_M=rows, fit=fit, all_tasks_slope=all_slope,
                              unconverged=_count_unconverged(rows),
                              all_tasks=[dict(M=M, tasks=n_tasks(M, K)) for M in Ms],
                              verdict=verdict(fit, all_slope, what="n*", memoriser="all tasks")))
    return tasks


def _curves(ladders) -> list[dict]:
    """Each ladder's metrics against width, mean and sd over seeds (for figure 11)."""
    curves = []
    for (held_out, depth, M), of_seed in sorted(ladders.items()):
        by_width: dict[int, list[dict]] = {}
        for p in (p for ps in of_seed.values() for p in ps):
            by_width.setdefault(p["width"], []).append(p)
        ws = sorted(by_width)
        stats = {m: [_mean_sd([p[m] for p in by_width[w]]) for w in ws] for m in ("r2", "rmse", "train_r2")}
        curves.append(dict(held_out=held_out, depth=depth, M=M, width=ws,
                           n_train=[by_width[w][0]["n_train"] for w in ws], seeds=len(of_seed),
                           **{f"{m}_{k}": [s[j] for s in stats[m]] for m in stats
                              for j, k in enumerate(("mean", "sd"))}))
    return curves


def analyse_runs(runs: list[dict]) -> dict:
    """analyse() of a study store's rows, with the construction's units for its teachers."""
    points = points_of(runs)
    if not points:
        return analyse(points)
    sizes = {k: _one(points, k) for k in ("I", "H", "O", "K")}
    return analyse(points, norms=readout_norms(sizes["I"], sizes["H"], sizes["O"], sizes["K"],
                                               sorted({p["seed"] for p in points})))


# ----------------------------------------------------------------------------- text

def _w(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _mean_cell(r: dict) -> str:
    """One M's w* (or n*) over seeds: mean [interval], ≤ for an upper bound, — when not reached."""
    if r["mean"] is None:
        return f"— ({r['not_reached']}/{r['seeds']} short)" if r["seeds"] else "no runs"
    mark = "≤ " if r.get("upper_bound") else ""
    star = "*" if r["non_monotone"] else ""
    if r["seeds"] == 1:
        return f"{mark}{_w(r['mean'])}{star}"
    return f"{mark}{_w(r['mean'])} [{_w(r['lo'])}, {_w(r['hi'])}]{star}"


def _slope_cell(fit: dict) -> str:
    if fit["status"] == "not identified":
        return f"not identified ({fit['n']} at {fit['n_M']} M)"
    if fit["status"] != "fitted":
        return f"too few points ({fit['n']} at {fit['n_M']} M)"
    censored = f", {fit['censored']} censored" if fit.get("censored") else ""
    lo = -math.inf if fit["lo"] is None else fit["lo"]
    hi = math.inf if fit["hi"] is None else fit["hi"]
    return f"{fit['slope']:.2f} [{_end(lo)}, {_end(hi)}] ({fit['n']} at {fit['n_M']} M{censored})"


def _end(x: float) -> str:
    """An interval's end: ±∞ where the data do not bound it."""
    return ("∞" if x > 0 else "−∞") if math.isinf(x) else f"{x:.2f}"


def _unconverged_cell(n: int | None) -> str:
    return "n/a (the training fit itself)" if n is None else str(n)


def _slope(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _by_M(title: str, rows: list[tuple[str, list[dict]]], Ms: list) -> list[str]:
    """A table of one row per (criterion, depth), one column per M."""
    out = ["", title, "", "| | " + " | ".join(f"M = {M}" for M in Ms) + " |", "|---|" + "---|" * len(Ms)]
    for label, per_M in rows:
        cells = {r["M"]: _mean_cell(r) for r in per_M}
        out.append(f"| {label} | " + " | ".join(cells.get(M, "—") for M in Ms) + " |")
    return out


def format_analysis(a: dict, compact: bool = False) -> str:
    """The analysis as markdown: the slopes and verdicts, the baselines, then w*(M) itself.
    `compact` (the README's block) gives the teacher, each fitted slope's verdict, the
    thresholds with too few points for a fit, and the notes (the tables are in the full report)."""
    if compact:
        return _compact(a)
    lines = ["## The width SGD needs as M grows (issue 22; verify/studies/width.py)", ""]
    if not a.get("runs"):
        return "\n".join(lines + [f"- {n}" for n in a.get("notes", [])])
    t, Ms, K = a["teacher"], a["Ms"], a["teacher"]["K"]
    kinds = sorted({r["kind"] for w in [*a["widths"], *a["tasks"]] for r in w["per_M"] if r["kind"]})
    lines += [f"teacher I = {t['I']}, H = {t['H']}, O = {t['O']}, K = {K}; M = {', '.join(map(str, Ms))}; "
              f"seeds {', '.join(map(str, a['seeds']))}; {a['runs']} runs. w*: the width of each hidden "
              "layer at which the held-out metric reaches the threshold (linear in log width between two "
              "rungs, never extrapolated). Slopes: log w* on log M over every seed, exact or censored "
              f"(interval-censored maximum likelihood), {_family_text(a)}; the baselines' over the same "
              "M (construction: hidden units at the matched ε; memoriser: H·Σ C(M,k), width ∝ tasks, "
              f"→ {K}; √-memoriser: width ∝ √tasks, → {K / 2:g}).", "",
              "| w* of | depth | held out | slope [CI] (points) | construction | √-memoriser | memoriser "
              "| verdict | unconverged |", "|---|---|---|---|---|---|---|---|---|"]
    for w in a["widths"]:
        lines.append(f"| {w['criterion']} | {w['depth']} | {w['held_out']:g} | {_slope_cell(w['fit'])} | "
                     f"{_slope(w['construction_slope'])} | {_slope(w['sqrt_memorisation_slope'])} | "
                     f"{_slope(w['memorisation_slope'])} | {w['verdict']['short']} | "
                     f"{_unconverged_cell(w['unconverged'])} |")
    for w in a["tasks"]:
        lines.append(f"| training tasks n*: {w['criterion']} | {w['depth']}×{w['width']} | varied | "
                     f"{_slope_cell(w['fit'])} | M: 1 | — | all tasks: {_slope(w['all_tasks_slope'])} | "
                     f"{w['verdict']['short']} | {w['unconverged']} |")
    memo = {u["M"]: u["units"] for u in a["memorisation"]["per_M"]}
    lines += ["", "Hidden units of the baselines: the construction's 2·I·H·N (1/√ε-term, the same at "
              "every M) + M (M-term) + H, at ε matched to each threshold; the memoriser's "
              "H·Σ_(k≤K) C(M,k)",
              "", "| | " + " | ".join(f"M = {M}" for M in Ms) + " | slope |",
              "|---|" + "---|" * (len(Ms) + 1)]
    for c in a["construction"]:
        cells = [f"{u['eps_term']:.0f} + {u['M_term']} + {u['H_term']}" for u in c["per_M"]]
        lines.append(f"| construction, ε = {c['eps']:.3g} ({c['criterion']}) | " + " | ".join(cells)
                     + f" | {_slope(c['slope'])} |")
    lines.append("| memoriser | " + " | ".join(str(memo[M]) for M in Ms)
                 + f" | {_slope(a['memorisation']['slope'])} |")
    sqrt_widths = " | ".join(f"{u['sqrt_width']:.1f}" for u in a["memorisation"]["per_M"])
    lines.append(f"| √-memoriser (width) | {sqrt_widths} | {_slope(a['memorisation']['sqrt_slope'])} |")
    for held_out in sorted({w["held_out"] for w in a["widths"]}):
        rows = [(f"{w['criterion']}, depth {w['depth']}", w["per_M"]) for w in a["widths"]
                if w["held_out"] == held_out]
        lines += _by_M(f"w*(M), held-out fraction {held_out:g}: mean over seeds [interval]", rows, Ms)
    if a["tasks"]:
        rows = [(f"{w['criterion']}, {w['depth']}×{w['width']}", w["per_M"]) for w in a["tasks"]]
        all_tasks = {u["M"]: u["tasks"] for u in a["tasks"][0]["all_tasks"]}
        lines += _by_M("training tasks needed n*(M) at the widest rung (the held-out fractions vary): "
                       "mean over seeds [interval]", rows, Ms)
        lines.append("| all tasks Σ C(M,k) | " + " | ".join(str(all_tasks[M]) for M in Ms) + " |")
    lines += ["", "- cells: geometric mean over seeds [interval: " + (", ".join(kinds) or "—") + "]; "
              "≤: some seed's first rung already reached it (an upper bound); —: some seed never reached it "
              "(n/N short); *: a ladder not monotone (its first crossing used)"]
    lines += _verdict_lines(a)
    lines += _longer_run_lines(a.get("longer_run_check"))
    lines += [f"- {n}" for n in a["notes"]]
    return "\n".join(lines)


def _family_text(a: dict) -> str:
    """The level the slope intervals hold at: family-wise where there are several."""
    family = a.get("family") or bonferroni(1)
    return family["text"] if family["m"] > 1 else f"{family['confidence']:.0%} CI"


def _verdict_lines(a: dict) -> list[str]:
    return ([f"- w*, {w['criterion']}, depth {w['depth']}, held out {w['held_out']:g}: {w['verdict']['text']}"
             for w in a["widths"] if w["fit"]["status"] == "fitted"]
            + [f"- n*, {w['criterion']}, {w['depth']}×{w['width']}: {w['verdict']['text']}"
               for w in a["tasks"] if w["fit"]["status"] == "fitted"])


def _compact(a: dict) -> str:
    """The README's block: what was fitted and what each slope's interval establishes."""
    if not a.get("runs"):
        return "\n".join(f"- {n}" for n in a.get("notes", []))
    t = a["teacher"]
    unfitted = [f"{w['criterion']} (depth {w['depth']}): {w['fit']['status']}" for w in a["widths"]
                if w["fit"]["status"] != "fitted"]
    unfitted += [f"n* {w['criterion']}: {w['fit']['status']}" for w in a["tasks"]
                 if w["fit"]["status"] != "fitted"]
    lines = [f"teacher I = {t['I']}, H = {t['H']}, O = {t['O']}, K = {t['K']}; "
             f"M = {', '.join(map(str, a['Ms']))}; seeds {', '.join(map(str, a['seeds']))}; "
             f"{a['runs']} runs. "
             f"Slopes of log w* (and log n*) on log M over every seed, {_family_text(a)}, and what each "
             "interval excludes:",
             *_verdict_lines(a)]
    if unfitted:
        lines.append("- no slope: " + "; ".join(unfitted))
    return "\n".join(lines + [f"- {n}" for n in a["notes"]])


def _pair(x: tuple, digits: int = 4) -> str:
    return " → ".join("—" if v is None else f"{v:.{digits}f}" for v in x)


def _longer_run_lines(check: dict | None) -> list[str]:
    if not check or not check["pairs"]:
        return []
    out = ["", "Longer-run check: runs at another length beside their twin at the study's (same M, depth, "
           "width, held-out fraction, seed)", "",
           "| M | depth | width | held out | seed | steps | in-distribution R² | held-out R² | "
           "held-out RMSE | thresholds that change |", "|---|---|---|---|---|---|---|---|---|---|"]
    for x in check["pairs"]:
        flips = "; ".join(f"{k}: {v}" for k, v in x["flips"].items()) or "none"
        out.append(f"| {x['M']} | {x['depth']} | {x['width']} | {x['held_out']:g} | {x['seed']} | "
                   f"{x['steps'][0]} → {x['steps'][1]} | {_pair(x['train_r2'])} | {_pair(x['r2'])} | "
                   f"{_pair(x['rmse'])} | {flips} |")
    return out
