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
equivalence), or for futility when even the last look could not decide it: the units an arm
that the last look's level needs, at the sd measured so far, exceed the plan's last look. A
futility stop never rejects anything, so it cannot raise the error rates. A claim still open at
the last look is inconclusive.

The plan's power at an effect Δ lies between the power of the last look's test alone and the
sum of the looks' powers (`power_bounds`): a claim the last look would reject is rejected at
some look unless an earlier one stopped it for futility.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from verify.studies import verdicts

SPENDINGS = ("obrien_fleming", "pocock")
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


def decide(plan: SequentialPlan, look: int, a: np.ndarray, b: np.ndarray, *, delta: float,
           test: str = "paired", family: int = 1, power: float = 0.8, paper: str = verdicts.HELPS,
           futility: bool = True) -> Decision:
    """A claim's state at look `look` (0-based) from the cumulative values of its arms (`a`
    treatment, `b` control; paired by position where test is paired). `paper` says which
    target the futility rule plans for: an effect of δ, or equivalence within δ."""
    level = plan.levels(family)[look]
    last = look == len(plan.looks) - 1
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    diff, se, df = verdicts._moments(test, a, b)
    p, p_eq = verdicts._p_values(test, a, b, delta, diff, se)
    out = Decision(OPEN, look + 1, level, diff, p, p_eq)
    differs, within = p < level, p_eq < level
    if differs and within:
        out.state = TRIVIAL
    elif differs:
        out.state = EFFECT
    elif within:
        out.state = EQUIVALENT
    elif last:
        out.state = INCONCLUSIVE
    elif futility:
        sd = verdicts.arm_sd(test, a, b)
        final = plan.levels(family)[-1]
        target = dict(margin=delta) if paper == verdicts.NO_EFFECT else dict(effect=delta)
        needed = verdicts.seeds_needed(test, sd, alpha=final, power=power, **target)
        if needed is None or needed > plan.looks[-1]:
            out.state, out.units_needed = FUTILE, needed
    return out


def run_plan(plan: SequentialPlan, draw, *, delta: float, test: str = "paired", family: int = 1,
             power: float = 0.8, paper: str = verdicts.HELPS, futility: bool = True) -> Decision:
    """The plan applied to one claim: `draw(n)` gives n more units of each arm (two arrays);
    looks follow until the claim stops. What a study's `--until-decided` does, on simulated
    arms (the tests, and a researcher planning a study)."""
    a, b = np.empty(0), np.empty(0)
    for k, n in enumerate(plan.looks):
        more_a, more_b = draw(n - len(a))
        a, b = np.concatenate([a, more_a]), np.concatenate([b, more_b])
        d = decide(plan, k, a, b, delta=delta, test=test, family=family, power=power, paper=paper,
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
