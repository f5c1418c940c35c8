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
   - and, for every claim, the two one-sided tests (TOST) of |Δ| < δ: δ is the claim's one
     smallest effect of interest, stated in the study file with its reason, and it serves
     both sides (an effect smaller than δ is not the paper's effect; a no-effect claim holds
     within δ);
2. corrects every p-value of the family (difference and equivalence tests alike) by Holm's
   step-down procedure;
3. gives each comparison an outcome, from the two Holm-corrected tests:
   - "helps" or "hurts": the difference test rejects Δ = 0, the equivalence test does not
     put Δ within δ;
   - "trivial": both reject: a real difference smaller than δ;
   - "equivalent": only the equivalence test rejects;
   - "inconclusive": neither, with the minimum detectable effect (MDE) at this seed count;
   - "not testable": fewer than two seeds in an arm (no variance, no test), or the claim's
     condition does not hold here (with why: below a floor, or an arm that did not fit its
     training tasks, so that a held-out gain may be a training gain);
4. says whether it agrees with the paper: "yes" only where the outcome is the paper's claim
   (for a claim of no effect: equivalent or trivial); "NO" only where a test establishes
   otherwise (an effect of the other sign; an equivalence or a trivial difference where the
   paper claims an effect; an effect where it claims none); otherwise "inconclusive" or "not
   testable". A failure to reject is never a disagreement.

A claim's `scale` says where δ means the same everywhere: `raw` (the metric itself), or
`log_unexplained` for an R² near its ceiling, where each seed's value v is read as −log(1 − v):
a difference is the log-ratio of the two arms' unexplained variance, and δ = log 1.25 says
"within a quarter more or less of the unexplained variance", at R² 0.99 as at 0.5.

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
TRIVIAL = "trivial"  # a real difference smaller than the claim's δ
OPEN = "open"  # a sequential plan's claim whose next look's runs are not all in yet
SCALES = ("raw", "log_unexplained")
UNITS = (None, "split_seed")  # a study's unit of replication (Plan.unit)
NO_EFFECT = "no effect"
CLAIMS = (HELPS, HURTS, NO_EFFECT)
TESTS = ("paired", "welch")
SPENDINGS = ("obrien_fleming", "pocock")  # a sequential plan's alpha-spending (verify.studies.sequential)
MAX_SEEDS = 1000  # seeds_needed's search ends here ("more than 1000")


# ----------------------------------------------------------------------------- the study's plan

@dataclass(frozen=True)
class Claim:
    """One claim of the paper a study tests: `factor` at `treatment` against `control` (a
    report that compares a ladder's ends leaves both None), the paper's direction, and `delta`,
    the claim's one smallest effect of interest on its `scale` (module docstring), with `why`,
    its reason. δ is what the seeds are planned to detect (a claim of an effect) or to
    establish (a claim of no effect), and the equivalence margin of every claim. `floor` is a
    condition: the claim is tested only where at least one arm's mean reaches it (below,
    nothing composes and no difference can show); its reason goes in `why` too."""

    factor: str
    paper: str
    treatment: object = None
    control: object = None
    delta: float | None = None
    why: str | None = None
    scale: str = "raw"
    floor: float | None = None
    test: str | None = None  # the plan's test, unless the design pairs this claim's arms otherwise

    def validate(self, where: str) -> None:
        if self.paper not in CLAIMS:
            raise ValueError(f"{where}: paper must be one of {', '.join(CLAIMS)}, got {self.paper!r}")
        if not (isinstance(self.delta, int | float) and not isinstance(self.delta, bool) and self.delta > 0):
            raise ValueError(f"{where}: delta, the claim's smallest effect of interest, must be a positive "
                             f"number, got {self.delta!r}")
        if not self.why:
            raise ValueError(f"{where}: delta needs its reason (why)")
        if self.scale not in SCALES:
            raise ValueError(f"{where}: scale must be one of {', '.join(SCALES)}, got {self.scale!r}")
        if self.test is not None and self.test not in TESTS:
            raise ValueError(f"{where}: test must be one of {', '.join(TESTS)}, got {self.test!r}")
        if self.floor is not None and not (isinstance(self.floor, int | float) and self.floor > 0):
            raise ValueError(f"{where}: floor must be a positive number, got {self.floor!r}")

    def matches(self, factor: str, treatment, control) -> bool:
        return (self.factor == factor and self.treatment in (None, treatment)
                and self.control in (None, control))

    def on_scale(self, values: np.ndarray) -> np.ndarray:
        """The values the tests read: the metric itself, or −log(1 − v) (module docstring)."""
        if self.scale == "raw":
            return values
        if np.any(values >= 1):
            raise ValueError(f"scale log_unexplained needs values below 1 (an R²); got {values.max()!r}")
        return -np.log1p(-values)

    def delta_text(self) -> str | None:
        """δ as a reader takes it: ±0.02, or ×1.25 of the unexplained variance (None: no δ, as
        in a claim built in code without a plan)."""
        if self.delta is None:
            return None
        return f"±{self.delta:g}" if self.scale == "raw" else f"×{math.exp(self.delta):.3g} of 1 − R²"


@dataclass(frozen=True)
class Plan:
    """A study's `verdicts:` block: the test its design calls for, level, power, claims, and the
    unit of replication: what one value an arm is (None: a run's seed; `split_seed`: the mean
    of the runs that share a split, where the split, not the run, carries the design)."""

    test: str = "welch"
    level: float = 0.95
    power: float = 0.8
    claims: tuple[Claim, ...] = ()
    unit: str | None = None
    # A sequential plan (`sequential: {looks, spending}`): the units an arm holds at each look,
    # and the alpha-spending function; verify.studies.sequential judges such a study.
    looks: tuple[int, ...] | None = None
    spending: str = "obrien_fleming"

    def test_for(self, claim: Claim | None) -> str:
        return claim.test if claim is not None and claim.test else self.test

    def claim_for(self, factor: str, treatment=None, control=None) -> Claim | None:
        return next((c for c in self.claims if c.matches(factor, treatment, control)), None)


def plan_of(block: dict | None, where: str = "verdicts") -> Plan:
    """The Plan a study file's `verdicts:` mapping states (a study without one: Welch's test,
    no claims), checked: a bad block is a ValueError naming the field."""
    if block is None:
        return Plan()
    if not isinstance(block, dict):
        raise ValueError(f"{where}: must be a mapping (test, level, power, claims)")
    unknown = set(block) - {"test", "level", "power", "claims", "seeds", "unit", "sequential"}
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
    unit = block.get("unit")
    if unit not in UNITS:
        raise ValueError(f"{where}: unit must be one of {', '.join(map(str, UNITS))}, got {unit!r}")
    looks, spending = _sequential_of(block.get("sequential"), f"{where}.sequential")
    if looks is not None and unit is not None:
        raise ValueError(f"{where}.sequential: a sequential plan counts seeds; unit {unit!r} has none yet")
    return Plan(test=test, level=level, power=power, claims=tuple(claims), unit=unit, looks=looks,
                spending=spending)


def _sequential_of(block, where: str) -> tuple[tuple[int, ...] | None, str]:
    """(looks, spending) of a `sequential:` mapping, checked; (None, default) without one."""
    if block is None:
        return None, "obrien_fleming"
    if not isinstance(block, dict) or set(block) - {"looks", "spending"} or "looks" not in block:
        raise ValueError(f"{where}: a mapping with looks (units an arm at each look) and spending")
    looks, spending = block["looks"], block.get("spending", "obrien_fleming")
    if (not isinstance(looks, list) or not looks or not all(type(n) is int and n >= 2 for n in looks)
            or looks != sorted(set(looks))):
        raise ValueError(f"{where}: looks must be increasing whole numbers ≥ 2, got {looks!r}")
    if spending not in SPENDINGS:
        raise ValueError(f"{where}: spending must be one of {', '.join(SPENDINGS)}, got {spending!r}")
    return tuple(looks), spending


# ----------------------------------------------------------------------------- one comparison

@dataclass(frozen=True)
class Comparison:
    """Treatment less control, per seed: {seed: value} for each arm."""

    name: str
    treatment: dict
    control: dict
    claim: Claim | None = None
    condition_fails: str | None = None  # why the claim's condition does not hold here
    # The condition is not shown yet but more units may show it (matched training fit, whose
    # difference so far is within reach): a sequential plan then wants its next look's units.
    condition_pending: bool = False

    def raw_arms(self, test: str) -> tuple[np.ndarray, np.ndarray]:
        """Both arms in the order of their common seeds (paired), or each arm's own values
        (Welch), as measured."""
        if test == "paired":
            seeds = sorted(set(self.treatment) & set(self.control), key=str)
            return (np.array([self.treatment[s] for s in seeds], dtype=np.float64),
                    np.array([self.control[s] for s in seeds], dtype=np.float64))
        return (np.array(list(self.treatment.values()), dtype=np.float64),
                np.array(list(self.control.values()), dtype=np.float64))

    def arms(self, test: str) -> tuple[np.ndarray, np.ndarray]:
        """The values the tests read: raw_arms on the claim's scale."""
        a, b = self.raw_arms(test)
        return (a, b) if self.claim is None else (self.claim.on_scale(a), self.claim.on_scale(b))


@dataclass
class Verdict:
    name: str
    test: str  # "paired t" or "Welch t"
    n: tuple[int, int]  # seeds in each arm that the test read (paired: the common seeds twice)
    difference: float | None  # mean treatment − mean control (paired: mean of the differences), on the scale
    paper: str | None = None
    raw_difference: float | None = None  # the same, of the metric as measured
    scale: str = "raw"
    outcome: str = NOT_TESTABLE
    agrees: str | None = None  # yes, NO, inconclusive, not testable; None without a claim
    df: float | None = None
    t: float | None = None
    se: float | None = None
    ci: tuple[float, float] | None = None  # at the plan's level, uncorrected
    p: float | None = None
    p_holm: float | None = None
    margin: float | None = None  # the claim's δ, on its scale
    margin_text: str | None = None  # δ as a reader takes it (Claim.delta_text)
    why: str | None = None  # δ's reason, or why not testable
    p_equivalence: float | None = None
    p_equivalence_holm: float | None = None
    mde: float | None = None  # the effect detected with the plan's power at α/m, this se and df
    # A sequential plan's verdict (verify.studies.sequential): the look (1-based) it was decided
    # at, or the last complete one (open), of how many, the level its tests ran at there, and
    # the units an arm it read.
    look: int | None = None
    looks: int | None = None
    look_level: float | None = None
    units: int | None = None
    wanted: int | None = None  # the units an arm the plan wants: the deciding look's, or the next's

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
              se: float, sides: tuple[str, ...] = ("greater", "less")) -> tuple[float, float | None]:
    """Two-sided p of Δ = 0, and TOST's p of |Δ| ≥ margin (None without a margin), by scipy;
    `sides` ("greater",) keeps TOST's first one-sided test alone, of Δ ≤ −margin."""
    from scipy import stats

    if se == 0:  # module docstring: the t statistic is undefined, the difference exact
        inside = abs(diff) < margin if margin is not None and len(sides) == 2 else \
            margin is not None and diff > -margin
        return (0.0 if diff != 0 else 1.0), (None if margin is None else 0.0 if inside else 1.0)

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
    shifted = {"greater": a + margin, "less": a - margin}
    return p, float(max(ttest(shifted[side], b, side) for side in sides))


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


def within_margin(c: Comparison, test: str, margin: float, side: int = 0) -> tuple[float, float] | None:
    """(difference on the claim's scale, p of the null that it lies beyond the margin) of a
    comparison, uncorrected: TOST's p of |Δ| ≥ margin (side 0), or one side's alone, of Δ ≥
    margin (side +1) or Δ ≤ −margin (side −1). None with fewer than 2 units an arm (paired: in
    common). A condition's check, such as matched training fit
    (verify.studies.effects.fit_condition), not a claim's test."""
    a, b = c.arms(test)
    if min(len(a), len(b)) < 2:
        return None
    diff, se, _ = _moments(test, a, b)
    if side == 0:
        return diff, _p_values(test, a, b, margin, diff, se)[1]
    if side not in (1, -1):
        raise ValueError(f"side must be 0, 1 or -1, got {side!r}")
    # Side +1 is side −1 of the arms swapped: Δ ≥ margin ⇔ −Δ ≤ −margin.
    x, y = (b, a) if side == 1 else (a, b)
    return diff, _p_values(test, x, y, margin, -diff if side == 1 else diff, se, sides=("greater",))[1]


# ----------------------------------------------------------------------------- the family

def _measure(c: Comparison, test: str, plan: Plan) -> Verdict:
    a, b = c.arms(test)
    claim = c.claim
    name = "paired t" if test == "paired" else "Welch t"
    v = Verdict(name=c.name, test=name, n=(len(a), len(b)), paper=claim.paper if claim else None,
                difference=None, margin=claim.delta if claim else None, why=claim.why if claim else None,
                margin_text=claim.delta_text() if claim else None, scale=claim.scale if claim else "raw")
    if len(a) and len(b):
        raw_a, raw_b = c.raw_arms(test)
        v.raw_difference = (float((raw_a - raw_b).mean()) if test == "paired"
                            else float(raw_a.mean() - raw_b.mean()))
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
    """The outcome from the two Holm-corrected tests, and the agreement (module docstring)."""
    if v.p is None:
        v.outcome = NOT_TESTABLE
    else:
        differs = v.p_holm < alpha
        within = v.p_equivalence_holm is not None and v.p_equivalence_holm < alpha
        if differs and within:
            v.outcome = TRIVIAL
        elif differs:
            v.outcome = HELPS if v.difference > 0 else HURTS
        elif within:
            v.outcome = EQUIVALENT
        else:
            v.outcome = INCONCLUSIVE
    agreement(v)


def agreement(v: Verdict) -> None:
    """Whether the verdict's outcome agrees with the paper's claim (module docstring)."""
    if v.paper is None:
        return
    if v.outcome in (NOT_TESTABLE, INCONCLUSIVE, OPEN):
        v.agrees = v.outcome
    elif v.paper == NO_EFFECT:
        v.agrees = "yes" if v.outcome in (EQUIVALENT, TRIVIAL) else "NO"
    else:
        v.agrees = "yes" if v.outcome == v.paper else "NO"


def judge(comparisons: Sequence[Comparison], plan: Plan) -> list[Verdict]:
    """The verdict of each comparison, Holm-corrected over the family (module docstring)."""
    alpha = 1 - plan.level
    verdicts = [_measure(c, plan.test_for(c.claim), plan) for c in comparisons]
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
    on = "" if v.scale == "raw" else " of log(1 − R²)"
    if v.look is None:
        parts = [f"{v.test}({v.df:.3g}){on} = {v.t:.3g}, p_Holm = {_g(v.p_holm)}"]
    else:  # a sequential plan's look: the raw p against the level spent there
        parts = [f"look {v.look} of {v.looks} ({v.units} seeds an arm, level {_g(v.look_level)}): "
                 f"{v.test}({v.df:.3g}){on} = {v.t:.3g}, p = {_g(v.p)}"]
    if v.scale == "log_unexplained":
        lo, hi = (math.exp(-x) for x in v.ci)
        parts.append(f"1 − R² ratio {math.exp(-v.difference):.3g} [{hi:.3g}, {lo:.3g}]")
    if v.p_equivalence_holm is not None:
        parts.append(f"TOST {v.margin_text}: p_Holm = {_g(v.p_equivalence_holm)}")
    elif v.look is not None and v.p_equivalence is not None:
        parts.append(f"TOST {v.margin_text}: p = {_g(v.p_equivalence)}")
    if v.outcome == INCONCLUSIVE and v.mde is not None:
        parts.append(f"MDE {v.mde:.3g}" if v.scale == "raw" else f"MDE ×{math.exp(v.mde):.3g} of 1 − R²")
    if v.look is not None and v.outcome in (INCONCLUSIVE, OPEN) and v.why:
        parts.append(v.why)
    return "; ".join(parts)


def effect_text(v: Verdict) -> str:
    """The difference and the outcome: `-0.878 (inconclusive)`."""
    if v.difference is None:
        return f"— ({v.outcome})"
    raw = v.difference if v.raw_difference is None else v.raw_difference
    diff = 0.0 if abs(raw) < 5e-4 else raw  # printed to 3 decimals: no "-0.000"
    return f"{diff:+.3f} ({v.outcome})"


def rule_note(plan: Plan, family_size: int) -> str:
    """The note under a table that says how its verdicts were decided."""
    unit = "seeds" if plan.unit is None else f"{plan.unit.replace('_', ' ')}s (the unit: one mean each)"
    test = (f"paired t-test over the {unit} both arms ran" if plan.test == "paired"
            else f"Welch's t-test over {unit} (Welch–Satterthwaite df)")
    test += "".join(f"; for {c.factor}: {'paired' if c.test == 'paired' else 'Welch'}" for c in plan.claims
                    if c.test and c.test != plan.test)
    pct = round(100 * plan.level)
    return (f"verdicts: {test}, two-sided at {pct}%, Holm-corrected over the study's {family_size} tests; "
            f"each claim's one smallest effect δ serves both sides: 'helps'/'hurts' where the difference "
            f"test rejects 0 and TOST does not put it within δ, 'trivial' where both reject, 'equivalent' "
            f"where only TOST does, 'inconclusive' where neither does (MDE: the effect detected with "
            f"{round(100 * plan.power)}% power at "
            f"this seed count, at α/m); one seed an arm is 'not testable'; 'agrees: yes' only "
            f"where the outcome is the paper's claim (verify/studies/verdicts.py)")


def seed_sd(c: Comparison, test: str) -> float | None:
    """The seed sd the power calculation reads: of the per-seed differences (paired), or the
    root mean square of the two arms' sds (Welch; with n seeds an arm its se is sd·√(2/n))."""
    a, b = c.arms(test)
    return arm_sd(test, a, b) if min(len(a), len(b)) >= 2 else None


def arm_sd(test: str, a: np.ndarray, b: np.ndarray) -> float:
    """seed_sd of two arms' values (≥ 2 each): of the differences (paired), else the two sds' rms."""
    if test == "paired":
        return float((a - b).std(ddof=1))
    return float(math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2))


def power_rows(comparisons: Sequence[Comparison], plan: Plan, family: int, *,
               alpha: float | None = None) -> list[dict]:
    """Per comparison with a claim, measured with ≥ 2 seeds an arm: its seed sd (on the claim's
    scale), and the seeds an arm needs for the plan's power at level α/family (Bonferroni: the
    power holds after Holm's correction) to detect δ (a claim of an effect) or to establish
    equivalence within δ at a true difference of 0 (a claim of no effect). `alpha`, where given,
    is the level instead (a sequential plan's last look)."""
    alpha = (1 - plan.level) / max(family, 1) if alpha is None else alpha
    rows = []
    for c in comparisons:
        claim, test = c.claim, plan.test_for(c.claim)
        sd = seed_sd(c, test)
        if claim is None or claim.delta is None or sd is None or c.condition_fails:
            continue
        if claim.paper == NO_EFFECT:
            n = seeds_needed(test, sd, alpha=alpha, power=plan.power, margin=claim.delta)
            target = f"equivalence within {claim.delta_text()}"
        else:
            n = seeds_needed(test, sd, alpha=alpha, power=plan.power, effect=claim.delta)
            target = f"an effect of {claim.delta_text().lstrip('±')}"
        rows.append(dict(name=c.name, sd=sd, target=target, seeds_needed=n,
                         seeds_run=min(len(c.treatment), len(c.control))))
    return rows


def notes(plan: Plan, comparisons: Sequence[Comparison], judged: Sequence[Verdict]) -> list[str]:
    """What a report prints under its verdicts: the rule, each claim's δ (and floor) and its
    reason, and the seeds each claim needs for the plan's power."""
    family = family_size(judged)
    return ([rule_note(plan, family)] + claim_lines(plan)
            + power_lines(power_rows(comparisons, plan, family), plan, family))


def claim_lines(plan: Plan) -> list[str]:
    """Each claim's δ (and floor) and its reason."""
    out = []
    for c in plan.claims:
        what = f"{c.factor}" + (f" {c.treatment}" if c.treatment is not None else "")
        if c.delta is None:  # a claim built in code, without a plan's δ
            if c.floor:
                out.append(f"floor {c.floor:g} for {c.factor}: tested only where an arm's mean reaches it; "
                           f"{c.why}")
            continue
        floor = f"; floor {c.floor:g}: tested only where an arm's mean reaches it" if c.floor else ""
        out.append(f"δ {c.delta_text()} for {what} ({c.paper}){floor}: {c.why}")
    return out


def power_lines(rows: list[dict], plan: Plan, family: int, *, level: str | None = None) -> list[str]:
    """The power rows as notes under a table (`level`: how the level reads, by default α/m)."""
    pct = round(100 * plan.power)
    unit = "seed" if plan.unit is None else plan.unit.replace("_", " ")
    level = level or f"α = {1 - plan.level:.2g}/{family}"
    return [f"{unit}s for {pct}% power at {level}: {r['name']}: {unit} sd "
            f"{r['sd']:.3g} → {r['seeds_needed'] or f'more than {MAX_SEEDS}'} {unit}s an arm to show "
            f"{r['target']} (run: {r['seeds_run']})" for r in rows]
