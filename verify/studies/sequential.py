"""Seeds added by a plan, not by looking (issue 43): a group-sequential design for a study's
claims, with its error rates proven by construction and checked by simulation.

A study declares its looks, the number of units (seeds, or split seeds) an arm holds at each,
e.g. (3, 6, 10), and an alpha-spending function of the information fraction t = n_k / n_K
(Lan & DeMets 1983):

  obrien_fleming   α(t) = 2 − 2Φ(z_{1−α/2} / √t)     spends almost nothing early
  pocock           α(t) = α · ln(1 + (e − 1)·t)

At look k each of a claim's two tests (the difference test of Δ = 0 and the TOST of |Δ| < δ,
verify.studies.verdicts) runs at the level spent since the last look, α(t_k) − α(t_{k−1}),
divided among the family's m claims. By the union bound over looks and claims, the chance that
any claim is ever called an effect (or an equivalence) wrongly is at most α, whatever the
correlation between looks: no joint distribution of the looks' statistics is needed, at the
price of some power against the exact group-sequential boundaries.

A claim stops at the first look where a test rejects (efficacy: helps or hurts; trivial;
equivalence), or for futility when even the last look could not decide it either way: at the
sd measured so far and the last look's level, the units an arm needed to detect the difference
seen so far (or δ, where it is smaller: an effect below δ is not of interest) and those needed
to establish equivalence within δ (at a true difference of 0) both exceed the plan's last look.
Either outcome decides the claim, so a study stops only where neither is within reach: a large
effect is never stopped for want of power to see δ. A futility stop never rejects anything, so
it cannot raise the error rates. A claim still open at the last look is inconclusive.

The plan's power at an effect Δ lies between the power of the last look's test alone and the
sum of the looks' powers (`power_bounds`): a claim the last look would reject is rejected at
some look unless an earlier one stopped it for futility.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from verify.studies import verdicts

SPENDINGS = verdicts.SPENDINGS
EFFECT, TRIVIAL, EQUIVALENT, FUTILE, OPEN, INCONCLUSIVE = (
    "effect", "trivial", "equivalent", "futile", "open", "inconclusive")


def spent(t: float, alpha: float, spending: str) -> float:
    """The cumulative α spent at information fraction t ∈ [0, 1]."""
    from scipy import stats

    if not 0 <= t <= 1:
        raise ValueError(f"information fraction must be in [0, 1], got {t!r}")
    if t == 0:
        return 0.0
    if spending == "obrien_fleming":
        return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if spending == "pocock":
        return float(alpha * math.log(1 + (math.e - 1) * t))
    raise ValueError(f"spending must be one of {', '.join(SPENDINGS)}, got {spending!r}")


@dataclass(frozen=True)
class SequentialPlan:
    """Looks (units an arm at each, increasing, ≥ 2), the family's level α and the spending."""

    looks: tuple[int, ...]
    alpha: float = 0.05
    spending: str = "obrien_fleming"

    def __post_init__(self):
        looks = tuple(self.looks)
        whole = all(isinstance(n, int) and n >= 2 for n in looks)
        if not looks or not whole or list(looks) != sorted(set(looks)):
            raise ValueError(f"looks must be increasing whole numbers ≥ 2, got {self.looks!r}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha!r}")
        spent(1.0, self.alpha, self.spending)  # a bad spending name is refused here
        object.__setattr__(self, "looks", looks)

    def levels(self, family: int = 1) -> list[float]:
        """The level each look's tests run at: the α spent since the last look, over m claims."""
        n_max = self.looks[-1]
        cumulative = [spent(n / n_max, self.alpha, self.spending) for n in self.looks]
        return [(c - p) / family for c, p in zip(cumulative, [0.0, *cumulative[:-1]], strict=True)]

    def look_of(self, n: int) -> int | None:
        """The index of the look that n units an arm make (None: not a look)."""
        return self.looks.index(n) if n in self.looks else None


@dataclass
class Decision:
    state: str  # effect, trivial, equivalent, futile, open (go on), inconclusive (the last look)
    look: int  # the look (1-based) that decided it
    level: float  # the level its tests ran at
    difference: float | None = None
    p: float | None = None
    p_equivalence: float | None = None
    units_needed: int | None = None  # futility: what the last look's level would need


def decide(plan: SequentialPlan, look: int, a: np.ndarray, b: np.ndarray, *, delta: float | None,
           test: str = "paired", family: int = 1, power: float = 0.8, futility: bool = True) -> Decision:
    """A claim's state at look `look` (0-based) from the cumulative values of its arms (`a`
    treatment, `b` control; paired by position where test is paired). Without a δ
    (a comparison no claim names) there is no equivalence test and no futility stop."""
    level = plan.levels(family)[look]
    last = look == len(plan.looks) - 1
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    diff, se, df = verdicts._moments(test, a, b)
    p, p_eq = verdicts._p_values(test, a, b, delta, diff, se)
    out = Decision(OPEN, look + 1, level, diff, p, p_eq)
    differs, within = p < level, p_eq is not None and p_eq < level
    if differs and within:
        out.state = TRIVIAL
    elif differs:
        out.state = EFFECT
    elif within:
        out.state = EQUIVALENT
    elif last:
        out.state = INCONCLUSIVE
    elif futility and delta is not None:
        sd = verdicts.arm_sd(test, a, b)
        final = plan.levels(family)[-1]
        needs = [verdicts.seeds_needed(test, sd, alpha=final, power=power, **target)
                 for target in (dict(effect=max(abs(diff), delta)), dict(margin=delta))]
        needed = min((n for n in needs if n is not None), default=None)
        if needed is None or needed > plan.looks[-1]:
            out.state, out.units_needed = FUTILE, needed
    return out


def run_plan(plan: SequentialPlan, draw, *, delta: float, test: str = "paired", family: int = 1,
             power: float = 0.8, futility: bool = True) -> Decision:
    """The plan applied to one claim: `draw(n)` gives n more units of each arm (two arrays);
    looks follow until the claim stops. What a study's `--until-decided` does, on simulated
    arms (the tests, and a researcher planning a study)."""
    a, b = np.empty(0), np.empty(0)
    for k, n in enumerate(plan.looks):
        more_a, more_b = draw(n - len(a))
        a, b = np.concatenate([a, more_a]), np.concatenate([b, more_b])
        d = decide(plan, k, a, b, delta=delta, test=test, family=family, power=power,
                   futility=futility)
        if d.state != OPEN:
            return d
    raise AssertionError("the last look always decides")


def power_bounds(plan: SequentialPlan, effect: float, sd: float, *, test: str = "paired",
                 family: int = 1) -> tuple[float, float]:
    """Bounds on the chance that the plan calls an effect or a trivial difference (its
    difference test rejects) when the true difference is `effect` and an arm's units have sd
    `sd` (of the per-unit differences when paired), for the plan without futility stops: the
    last look's test alone (a lower bound: a claim that test rejects was rejected at some look),
    and the sum of every look's (an upper bound)."""
    levels = plan.levels(family)
    powers = []
    for n, level in zip(plan.looks, levels, strict=True):
        se, df = verdicts._se_df(test, sd, n)
        powers.append(verdicts.power_of(effect, se, df, level))
    return powers[-1], min(1.0, sum(powers))


# ----------------------------------------------------------------------------- a study's claims

def of(plan: verdicts.Plan) -> SequentialPlan:
    """The SequentialPlan of a study's verdicts plan (its `sequential:` block)."""
    if plan.looks is None:
        raise ValueError("the study's plan is not sequential")
    return SequentialPlan(plan.looks, 1 - plan.level, plan.spending)


def first_units(values: dict, n: int) -> dict:
    """An arm's first n units in the plan's order: seeds ascending (the grid's seeds, then those
    verify.studies.staged adds above them)."""
    return dict(sorted(values.items())[:n])


def _at(c: verdicts.Comparison, n: int, test: str) -> verdicts.Comparison:
    """The comparison on the units a look of n reads: the first n common seeds (paired), or each
    arm's first n."""
    if test == "paired":
        common = sorted(set(c.treatment) & set(c.control))[:n]
        t, u = {s: c.treatment[s] for s in common}, {s: c.control[s] for s in common}
    else:
        t, u = first_units(c.treatment, n), first_units(c.control, n)
    return verdicts.Comparison(c.name, t, u, c.claim, c.condition_fails, c.condition_pending)


def family_of(comparisons) -> int:
    """m: the comparisons the union bound divides α among: those whose condition holds, and
    those whose condition more units may yet show (counted from the start, so that a claim
    that becomes testable at a later look finds its share of α already set aside)."""
    return max(1, sum(not c.condition_fails or c.condition_pending for c in comparisons))


def judge(comparisons, plan: verdicts.Plan) -> list[verdicts.Verdict]:
    """Each comparison's verdict under the study's sequential plan (module docstring): walked
    look by look on its first units, it stops where `decide` does; a look whose units are not
    all in leaves it OPEN there (verify.study run --until-decided runs them)."""
    seq = of(plan)
    family = family_of(comparisons)
    return [_judge_one(c, plan, seq, family) for c in comparisons]


def _judge_one(c: verdicts.Comparison, plan: verdicts.Plan, seq: SequentialPlan,
               family: int) -> verdicts.Verdict:
    test, claim = plan.test_for(c.claim), c.claim
    if c.condition_fails:
        v = verdicts._measure(c, test, plan)
        if c.condition_pending:  # the next look's units may show the condition
            have = min(map(len, _at(c, seq.looks[-1], test).arms(test)))
            k = next((k for k, n in enumerate(seq.looks) if n > have), None)
            if k is not None:
                v.outcome, v.wanted = verdicts.OPEN, seq.looks[k]
                v.why = (f"{c.condition_fails}; open: look {k + 1} needs {seq.looks[k]} seeds an arm, "
                         f"{have} in")
        verdicts.agreement(v)
        return v
    levels = seq.levels(family)
    last = None  # the verdict of the last look whose units are all in
    for k, n in enumerate(seq.looks):
        sub = _at(c, n, test)
        have = min(len(sub.treatment), len(sub.control))
        if have < n:
            if claim is None:  # no paper claim: described at the looks it has, never given seeds
                return _unclaimed(sub, test, plan, last, k, n, have)
            return _open(c, sub, test, plan, last, k, n, have)
        v = verdicts._measure(sub, test, plan)
        v.look, v.looks, v.look_level, v.units, v.wanted = k + 1, len(seq.looks), levels[k], n, n
        a, b = sub.arms(test)
        d = decide(seq, k, a, b, delta=claim.delta if claim else None, test=test, family=family,
                   power=plan.power)
        last = v
        if d.state == OPEN:
            continue
        v.outcome = {EFFECT: verdicts.HELPS if v.difference > 0 else verdicts.HURTS,
                     TRIVIAL: verdicts.TRIVIAL, EQUIVALENT: verdicts.EQUIVALENT}.get(
                         d.state, verdicts.INCONCLUSIVE)
        if d.state == FUTILE:
            needed = d.units_needed or f"more than {verdicts.MAX_SEEDS}"
            v.why = (f"stopped for futility: {needed} seeds an arm needed at the last look's level to "
                     f"decide it either way (the plan ends at {seq.looks[-1]})")
        elif d.state == INCONCLUSIVE:
            v.mde = verdicts.minimum_detectable(v.se, v.df, v.look_level, plan.power)
        verdicts.agreement(v)
        return v
    raise AssertionError("the last look always decides")


def _unclaimed(sub, test, plan, last, k: int, n: int, have: int) -> verdicts.Verdict:
    """A comparison the study file states no claim for (a support kind the paper says nothing
    of): the plan spends no runs on it, so it is judged at its last complete look and stays
    inconclusive there if that look did not decide it (before its first: described, not tested)."""
    if last is None:
        v = verdicts._measure(sub, test, plan)
        v.p = v.p_equivalence = v.t = v.se = v.ci = None
        v.outcome = verdicts.NOT_TESTABLE
    else:
        v = last
        v.outcome = verdicts.INCONCLUSIVE
    v.wanted = None
    v.why = (f"no paper claim: the plan adds no seeds to it (look {k + 1} would need {n} seeds an arm, "
             f"{have} in)")
    return v


def _open(c, sub, test, plan, last, k: int, n: int, have: int) -> verdicts.Verdict:
    """An open claim: the numbers of its last complete look (none before its first), and the
    units an arm its next look wants."""
    if last is None:  # nothing complete: the units so far, described, not tested
        v = verdicts._measure(sub, test, plan)
        v.p = v.p_equivalence = v.t = v.se = v.ci = None
    else:
        v = last
    v.outcome, v.wanted = verdicts.OPEN, n
    v.why = f"open: look {k + 1} needs {n} seeds an arm, {have} in"
    verdicts.agreement(v)
    return v


def notes(plan: verdicts.Plan, comparisons, judged) -> list[str]:
    """What a report prints under a sequential plan's verdicts: the rule with each look's
    level, each claim's δ, and the seeds each needs at the last look's level."""
    seq, family = of(plan), family_of(comparisons)
    levels = seq.levels(family)
    name = {"obrien_fleming": "O'Brien–Fleming", "pocock": "Pocock"}[seq.spending]
    test = "paired t-test over the seeds both arms ran" if plan.test == "paired" else "Welch's t-test"
    rule = (f"verdicts by the study's sequential plan: looks at {', '.join(map(str, seq.looks))} seeds an "
            f"arm (seeds ascending: the grid's, then those `run --until-decided` adds above them), "
            f"{name}-type alpha spending (Lan–DeMets) of α = {seq.alpha:g} over the family's {family} "
            f"comparisons (union bound over looks and comparisons): each look's {test}, two-sided, and "
            f"TOST within δ run at " + ", ".join(f"{_level(x)}" for x in levels) + "; a claim stops at the "
            "first look where a test rejects ('helps'/'hurts', 'trivial', 'equivalent' as in a fixed "
            "design), or for futility where the last look could not decide it either way at the sd so far; "
            "'open': its next look's runs are not all in, and `python -m verify.study run STUDY "
            "--until-decided` runs them (verify/studies/sequential.py)")
    return ([rule] + verdicts.claim_lines(plan)
            + verdicts.power_lines(verdicts.power_rows(comparisons, plan, family, alpha=levels[-1]), plan,
                                   family, level=f"the last look's level {_level(levels[-1])}"))


def _level(x: float) -> str:
    return f"{x:.2g}" if x >= 0.001 else f"{x:.1e}"
