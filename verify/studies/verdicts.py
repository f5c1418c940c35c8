"""Verdicts: whether a study's difference is an effect, an equivalence, or inconclusive, and
whether that agrees with the paper. Every study's report decides its verdicts here.

A report builds one `Comparison` per difference it reads (treatment arm less control arm, one
value per seed in each, higher meaning better) and passes the study's whole family of them,
with the study's `Plan`, to `judge`. `judge`

1. tests each difference at the plan's level (95%, two-sided) with scipy.stats:
   - a paired t-test on the per-seed differences (n − 1 degrees of freedom) where the design
     pairs seeds (`test: paired`: one seed draws what both arms share, such as the teacher and
     the initialisation), over the seeds both arms ran;
   - otherwise Welch's t-test (Welch–Satterthwaite degrees of freedom);
   - and, where the claim is "no effect", the two one-sided tests (TOST) of |Δ| < margin, the
     margin and its reason stated in the study file;
2. corrects every p-value of the family (difference and equivalence tests alike) by Holm's
   step-down procedure;
3. gives each comparison an outcome:
   - "helps" or "hurts": the difference test rejects Δ = 0 after Holm;
   - "equivalent": the TOST rejects |Δ| ≥ margin after Holm (this wins over a significant but
     smaller-than-margin difference);
   - "inconclusive": neither, with the minimum detectable effect (MDE) at this seed count;
   - "not testable": fewer than two seeds in an arm (no variance, no test), or the claim's
     condition does not hold here (with why);
4. says whether it agrees with the paper: "yes" only where the outcome is the paper's claim;
   "NO" only where a test establishes the opposite (an effect of the other sign, an
   equivalence where the paper claims an effect, an effect where it claims none); otherwise
   "inconclusive" or "not testable". A failure to reject is never a disagreement.

Seeds by power (`seeds_needed`): the seeds per arm at which the difference test detects a
stated effect, or the TOST establishes the margin when the truth is 0, with the plan's power
at level α/m, m the family's size (Bonferroni's level: Holm's strictest step, so the power
holds after the correction), from the seed sd measured so far. `power_rows` gives it per
claim, and `notes` prints it under a report (the study files quote it beside their seeds).

A zero sd in both arms (every seed the same number, e.g. accuracy 1.0) makes the standard
error 0: a nonzero difference is then an effect (p = 0) and a zero one an equivalence under
any margin (p = 0); the t-test itself is undefined there, and scipy's answer carries a warning.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HELPS, HURTS, EQUIVALENT, INCONCLUSIVE, NOT_TESTABLE = "helps", "hurts", "equivalent", "inconclusive", \
    "not testable"
NO_EFFECT = "no effect"
CLAIMS = (HELPS, HURTS, NO_EFFECT)
TESTS = ("paired", "welch")
MAX_SEEDS = 1000  # seeds_needed's search ends here ("more than 1000")


# ----------------------------------------------------------------------------- the study's plan

@dataclass(frozen=True)
class Claim:
    """One claim of the paper a study tests: `factor` at `treatment` against `control` (a
    report that compares a ladder's ends leaves both None), the paper's direction, and for a
    claim of no effect the equivalence margin and why. `detect` is the effect size the seeds
    are planned to detect (effect claims), `floor` a condition: the claim is tested only where
    at least one arm's mean reaches it (below, nothing composes and no difference can show)."""

    factor: str
    paper: str
    treatment: object = None
    control: object = None
    margin: float | None = None
    why: str | None = None
    detect: float | None = None
    floor: float | None = None

    def validate(self, where: str) -> None:
        if self.paper not in CLAIMS:
            raise ValueError(f"{where}: paper must be one of {', '.join(CLAIMS)}, got {self.paper!r}")
        if self.paper == NO_EFFECT and not (self.margin and self.margin > 0 and self.why):
            raise ValueError(f"{where}: a claim of no effect needs a positive margin and its reason (why)")
        if self.paper != NO_EFFECT and self.margin is not None:
            raise ValueError(f"{where}: a margin belongs to a claim of no effect")
        if self.floor is not None and not self.why:
            raise ValueError(f"{where}: a floor needs its reason (why)")
        for name in ("detect", "floor"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int | float) and v > 0):
                raise ValueError(f"{where}: {name} must be a positive number, got {v!r}")

    def matches(self, factor: str, treatment, control) -> bool:
        return (self.factor == factor and self.treatment in (None, treatment)
                and self.control in (None, control))


@dataclass(frozen=True)
class Plan:
    """A study's `verdicts:` block: the test its design calls for, level, power, claims."""

    test: str = "welch"
    level: float = 0.95
    power: float = 0.8
    claims: tuple[Claim, ...] = ()

    def claim_for(self, factor: str, treatment=None, control=None) -> Claim | None:
        return next((c for c in self.claims if c.matches(factor, treatment, control)), None)


def plan_of(block: dict | None, where: str = "verdicts") -> Plan:
    """The Plan a study file's `verdicts:` mapping states (a study without one: Welch's test,
    no claims), checked: a bad block is a ValueError naming the field."""
    if block is None:
        return Plan()
    if not isinstance(block, dict):
        raise ValueError(f"{where}: must be a mapping (test, level, power, claims)")
    unknown = set(block) - {"test", "level", "power", "claims", "seeds"}
    if unknown:
        raise ValueError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    test = block.get("test", "welch")
    if test not in TESTS:
        raise ValueError(f"{where}: test must be one of {', '.join(TESTS)}, got {test!r}")
    level, power = block.get("level", 0.95), block.get("power", 0.8)
    for name, v in (("level", level), ("power", power)):
        if not (isinstance(v, float) and 0.5 < v < 1):
            raise ValueError(f"{where}: {name} must be a number in (0.5, 1), got {v!r}")
    claims = []
    for i, c in enumerate(block.get("claims") or []):
        fields = set(Claim.__dataclass_fields__)
        if not isinstance(c, dict) or not {"factor", "paper"} <= set(c) or set(c) - fields:
            raise ValueError(f"{where}.claims[{i}]: a mapping with factor and paper (and any of "
                             f"{', '.join(sorted(fields - {'factor', 'paper'}))})")
        # A list in YAML (a layer shape: widths [512, 512]) is the tuple a run's config holds.
        claim = Claim(**{k: tuple(v) if isinstance(v, list) else v for k, v in c.items()})
        claim.validate(f"{where}.claims[{i}]")
        claims.append(claim)
    return Plan(test=test, level=level, power=power, claims=tuple(claims))


# ----------------------------------------------------------------------------- one comparison

@dataclass(frozen=True)
class Comparison:
    """Treatment less control, per seed: {seed: value} for each arm."""

    name: str
    treatment: dict
    control: dict
    claim: Claim | None = None
    condition_fails: str | None = None  # why the claim's condition does not hold here

    def arms(self, test: str) -> tuple[np.ndarray, np.ndarray]:
        """The values the test reads: both arms in the order of their common seeds (paired), or
        each arm's own values (Welch)."""
        if test == "paired":
            seeds = sorted(set(self.treatment) & set(self.control), key=str)
            return (np.array([self.treatment[s] for s in seeds], dtype=np.float64),
                    np.array([self.control[s] for s in seeds], dtype=np.float64))
        return (np.array(list(self.treatment.values()), dtype=np.float64),
                np.array(list(self.control.values()), dtype=np.float64))


@dataclass
class Verdict:
    name: str
    test: str  # "paired t" or "Welch t"
    n: tuple[int, int]  # seeds in each arm that the test read (paired: the common seeds twice)
    difference: float | None  # mean treatment − mean control (paired: mean of the differences)
    paper: str | None = None
    outcome: str = NOT_TESTABLE
    agrees: str | None = None  # yes, NO, inconclusive, not testable; None without a claim
    df: float | None = None
    t: float | None = None
    se: float | None = None
    ci: tuple[float, float] | None = None  # at the plan's level, uncorrected
    p: float | None = None
    p_holm: float | None = None
    margin: float | None = None
    why: str | None = None  # the margin's reason, or why not testable
    p_equivalence: float | None = None
    p_equivalence_holm: float | None = None
    mde: float | None = None  # the effect detected with the plan's power at α/m, this se and df

    def as_dict(self) -> dict:
        return dict(vars(self))


def _moments(test: str, a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(difference, its standard error, degrees of freedom) of the test on these arms."""
    if test == "paired":
        d = a - b
        return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))), float(len(d) - 1)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
    return float(a.mean() - b.mean()), se, float(df)


def _p_values(test: str, a: np.ndarray, b: np.ndarray, margin: float | None, diff: float,
              se: float) -> tuple[float, float | None]:
    """Two-sided p of Δ = 0, and TOST's p of |Δ| ≥ margin (None without a margin), by scipy."""
    from scipy import stats

    if se == 0:  # module docstring: the t statistic is undefined, the difference exact
        return (0.0 if diff != 0 else 1.0), (None if margin is None else 0.0 if abs(diff) < margin else 1.0)

    def ttest(x, y, alternative):
        with warnings.catch_warnings():  # an arm of equal values: exact, though scipy warns of cancellation
            warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
            if test == "paired":
                return stats.ttest_rel(x, y, alternative=alternative).pvalue
            return stats.ttest_ind(x, y, equal_var=False, alternative=alternative).pvalue

    p = float(ttest(a, b, "two-sided"))
    if margin is None:
        return p, None
    # H0: Δ ≤ −margin (shift the treatment up by the margin) and H0: Δ ≥ margin.
    return p, float(max(ttest(a + margin, b, "greater"), ttest(a - margin, b, "less")))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: the i-th smallest times
    (m − i + 1), made monotone, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def power_of(effect: float, se: float, df: float, alpha: float) -> float:
    """Power of the two-sided t-test at level alpha for a true difference `effect`, with this
    standard error and df (noncentral t)."""
    from scipy import stats

    if se == 0:
        return 1.0 if effect != 0 else alpha
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = abs(effect) / se
    # The lower tail as the upper tail of −T: scipy 1.17's nct.cdf(−76.39, 1, 8.0) is nan.
    return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))


def equivalence_power(margin: float, se: float, df: float, alpha: float) -> float:
    """Power of TOST at level alpha to establish |Δ| < margin when the true Δ is 0: both
    one-sided tests reject when |estimate| < margin − t_{1−α}·se, which has probability
    2·F_t((margin/se) − t_{1−α}) − 1 (the usual t approximation)."""
    from scipy import stats

    if se == 0:
        return 1.0
    return max(0.0, float(2 * stats.t.cdf(margin / se - stats.t.ppf(1 - alpha, df), df) - 1))


def minimum_detectable(se: float, df: float, alpha: float, power: float) -> float:
    """The smallest |Δ| the two-sided test at alpha detects with `power` (0 when se is 0)."""
    from scipy.optimize import brentq

    if se == 0:
        return 0.0
    hi = se
    while power_of(hi, se, df, alpha) < power:
        hi *= 2
    return float(brentq(lambda d: power_of(d, se, df, alpha) - power, 0.0, hi, xtol=1e-12 * hi))


def _se_df(test: str, sd: float, n: int) -> tuple[float, float]:
    """Standard error and df at n seeds an arm: paired (sd of the per-seed differences), or
    Welch with two arms of sd `sd` each."""
    if test == "paired":
        return sd / math.sqrt(n), n - 1.0
    return sd * math.sqrt(2.0 / n), 2.0 * (n - 1)


def seeds_needed(test: str, sd: float, *, alpha: float, power: float, effect: float | None = None,
                 margin: float | None = None) -> int | None:
    """The fewest seeds an arm (≥ 2) at which the test detects `effect` (or TOST establishes
    `margin` at a true Δ of 0) with `power` at level alpha, for arms whose seed sd is `sd` (the
    sd of the per-seed differences when paired). None: more than MAX_SEEDS."""
    if (effect is None) == (margin is None):
        raise ValueError("give one of effect and margin")
    for n in range(2, MAX_SEEDS + 1):
        se, df = _se_df(test, sd, n)
        got = (power_of(effect, se, df, alpha) if effect is not None
               else equivalence_power(margin, se, df, alpha))
        if got >= power:
            return n
    return None


# ----------------------------------------------------------------------------- the family

def _measure(c: Comparison, test: str, plan: Plan) -> Verdict:
    a, b = c.arms(test)
    claim = c.claim
    name = "paired t" if test == "paired" else "Welch t"
    v = Verdict(name=c.name, test=name, n=(len(a), len(b)), paper=claim.paper if claim else None,
                difference=None, margin=claim.margin if claim else None, why=claim.why if claim else None)
    if len(a) and len(b):
        v.difference = float((a - b).mean()) if test == "paired" else float(a.mean() - b.mean())
    if c.condition_fails:
        v.why = c.condition_fails
        return v
    if min(len(a), len(b)) < 2:
        which = "that both arms ran" if test == "paired" else "in an arm"
        v.why = f"fewer than 2 seeds {which}: no variance, no test"
        return v
    from scipy import stats

    v.difference, v.se, v.df = _moments(test, a, b)
    if v.se > 0:
        v.t = v.difference / v.se
    else:  # the difference is exact (module docstring)
        v.t = math.copysign(math.inf, v.difference) if v.difference else 0.0
    half = stats.t.ppf(0.5 + plan.level / 2, v.df) * v.se
    v.ci = (v.difference - half, v.difference + half)
    v.p, v.p_equivalence = _p_values(test, a, b, v.margin, v.difference, v.se)
    return v


def _outcome(v: Verdict, alpha: float) -> None:
    if v.p is None:
        v.outcome = NOT_TESTABLE
    elif v.p_equivalence_holm is not None and v.p_equivalence_holm < alpha:
        v.outcome = EQUIVALENT
    elif v.p_holm < alpha:
        v.outcome = HELPS if v.difference > 0 else HURTS
    else:
        v.outcome = INCONCLUSIVE
    if v.paper is None:
        return
    if v.outcome in (NOT_TESTABLE, INCONCLUSIVE):
        v.agrees = v.outcome
    elif v.paper == NO_EFFECT:
        v.agrees = "yes" if v.outcome == EQUIVALENT else "NO"
    else:
        v.agrees = "yes" if v.outcome == v.paper else "NO"


def judge(comparisons: Sequence[Comparison], plan: Plan) -> list[Verdict]:
    """The verdict of each comparison, Holm-corrected over the family (module docstring)."""
    alpha = 1 - plan.level
    verdicts = [_measure(c, plan.test, plan) for c in comparisons]
    family = [(v, "p") for v in verdicts if v.p is not None]
    family += [(v, "p_equivalence") for v in verdicts if v.p_equivalence is not None]
    for (v, which), adjusted in zip(family, holm([getattr(v, w) for v, w in family]), strict=True):
        setattr(v, f"{which}_holm", adjusted)
    for v in verdicts:
        if v.p is not None:
            v.mde = minimum_detectable(v.se, v.df, alpha / len(family), plan.power)
        _outcome(v, alpha)
    return verdicts


def family_size(verdicts: Sequence[Verdict]) -> int:
    """The number of tests Holm's correction ran over."""
    return sum((v.p is not None) + (v.p_equivalence is not None) for v in verdicts)


def interval_side(lo: float, hi: float, value: float) -> str:
    """Where an interval (at the report's level) puts a quantity against `value`: "> value"
    or "< value" when it excludes it, else "inconclusive" (an interval is a test at its level:
    the verdicts of a fit's slope or a correlation, outside any Holm family)."""
    if lo > value:
        return f"> {value:g}"
    if hi < value:
        return f"< {value:g}"
    return INCONCLUSIVE


# ----------------------------------------------------------------------------- text

def _g(x: float) -> str:
    return f"{x:.2g}" if x >= 0.001 or x == 0 else f"{x:.1e}"


def test_text(v: Verdict) -> str:
    """What the verdict rests on, in one cell: e.g. `paired t(1) = -11.2, p_Holm = 0.23; MDE 1.31`."""
    if v.p is None:
        return v.why
    parts = [f"{v.test}({v.df:.3g}) = {v.t:.3g}, p_Holm = {_g(v.p_holm)}"]
    if v.p_equivalence_holm is not None:
        parts.append(f"TOST ±{v.margin:g}: p_Holm = {_g(v.p_equivalence_holm)}")
    if v.outcome == INCONCLUSIVE:
        parts.append(f"MDE {v.mde:.3g}")
    return "; ".join(parts)


def effect_text(v: Verdict) -> str:
    """The difference and the outcome: `-0.878 (inconclusive)`."""
    if v.difference is None:
        return f"— ({v.outcome})"
    diff = 0.0 if abs(v.difference) < 5e-4 else v.difference  # printed to 3 decimals: no "-0.000"
    return f"{diff:+.3f} ({v.outcome})"


def rule_note(plan: Plan, family_size: int) -> str:
    """The note under a table that says how its verdicts were decided."""
    test = ("paired t-test over the seeds both arms ran" if plan.test == "paired"
            else "Welch's t-test (Welch–Satterthwaite df)")
    pct = round(100 * plan.level)
    return (f"verdicts: {test}, two-sided at {pct}%, Holm-corrected over the study's {family_size} tests; "
            f"a claim of no effect is 'equivalent' only when TOST puts the difference within its margin; "
            f"'inconclusive' is neither (MDE: the effect detected with {round(100 * plan.power)}% power at "
            f"this seed count, at α/m); one seed an arm is 'not testable'; 'agrees: yes' only "
            f"where the outcome is the paper's claim (verify/studies/verdicts.py)")


def seed_sd(c: Comparison, test: str) -> float | None:
    """The seed sd the power calculation reads: of the per-seed differences (paired), or the
    root mean square of the two arms' sds (Welch; with n seeds an arm its se is sd·√(2/n))."""
    a, b = c.arms(test)
    if min(len(a), len(b)) < 2:
        return None
    if test == "paired":
        return float((a - b).std(ddof=1))
    return float(math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2))


def power_rows(comparisons: Sequence[Comparison], plan: Plan, family: int) -> list[dict]:
    """Per comparison whose claim states what the seeds must detect (`detect`) or establish
    (`margin`), measured with ≥ 2 seeds an arm: its seed sd, and the seeds an arm needs for the
    plan's power at level α/family (Bonferroni: the power holds after Holm's correction)."""
    alpha = (1 - plan.level) / max(family, 1)
    rows = []
    for c in comparisons:
        claim, sd = c.claim, seed_sd(c, plan.test)
        planned = claim is not None and (claim.detect is not None or claim.margin is not None)
        if not planned or sd is None or c.condition_fails:
            continue
        if claim.margin is not None:
            n = seeds_needed(plan.test, sd, alpha=alpha, power=plan.power, margin=claim.margin)
            target = f"equivalence within ±{claim.margin:g}"
        else:
            n = seeds_needed(plan.test, sd, alpha=alpha, power=plan.power, effect=claim.detect)
            target = f"an effect of {claim.detect:g}"
        rows.append(dict(name=c.name, sd=sd, target=target, seeds_needed=n,
                         seeds_run=min(len(c.treatment), len(c.control))))
    return rows


def notes(plan: Plan, comparisons: Sequence[Comparison], judged: Sequence[Verdict]) -> list[str]:
    """What a report prints under its verdicts: the rule, each claim's margin or floor and its
    reason, and the seeds each claim needs for the plan's power."""
    family = family_size(judged)
    out = [rule_note(plan, family)]
    out += [f"margin ±{c.margin:g} for {c.factor} {c.treatment}: {c.why}" for c in plan.claims if c.margin]
    out += [f"floor {c.floor:g} for {c.factor}: tested only where an arm's mean reaches it; {c.why}"
            for c in plan.claims if c.floor]
    return out + power_lines(power_rows(comparisons, plan, family), plan, family)


def power_lines(rows: list[dict], plan: Plan, family: int) -> list[str]:
    """The power rows as notes under a table."""
    pct = round(100 * plan.power)
    return [f"seeds for {pct}% power at α = {1 - plan.level:.2g}/{family}: {r['name']}: seed sd "
            f"{r['sd']:.3g} → {r['seeds_needed'] or f'more than {MAX_SEEDS}'} seeds an arm to show "
            f"{r['target']} (run: {r['seeds_run']})" for r in rows]
