"""The sequential plan (verify/studies/sequential.py, issue 43): its size and power by
simulation with the truth planted, 2,000 simulated studies each. A rate estimated from R draws
has sd sqrt(p(1 − p)/R); each check allows 4 of those."""

import math

import numpy as np
import pytest

from verify.studies import sequential as S

R = 2000
PLAN = S.SequentialPlan((3, 6, 10))
DELTA, SD = 0.5, 0.3  # a design the last look can power: 4 units an arm detect δ at its level


def _rates(plan, effect, *, futility=True, seed=0, delta=DELTA):
    rng = np.random.default_rng(seed)
    counts = {}
    for _ in range(R):
        d = S.run_plan(plan, lambda n: (rng.normal(effect, SD, n), np.zeros(n)), delta=delta,
                       futility=futility)
        counts[d.state] = counts.get(d.state, 0) + 1
    return {k: v / R for k, v in counts.items()}


def _tol(p):
    return 4 * math.sqrt(p * (1 - p) / R)


def test_the_spending_functions_spend_alpha_by_the_last_look_and_little_early():
    for spending in S.SPENDINGS:
        levels = S.SequentialPlan((3, 6, 10), spending=spending).levels()
        assert sum(levels) == pytest.approx(0.05, abs=1e-12) and all(v > 0 for v in levels)
    obf = S.SequentialPlan((3, 6, 10)).levels()
    assert obf[0] < 1e-3 < obf[1] < obf[2]  # O'Brien–Fleming: almost nothing at 30% information
    assert S.SequentialPlan((3, 6, 10)).levels(family=4)[2] == pytest.approx(obf[2] / 4)
    with pytest.raises(ValueError, match="increasing whole numbers"):
        S.SequentialPlan((6, 3))
    with pytest.raises(ValueError, match="spending must be one of"):
        S.SequentialPlan((3, 6), spending="haybittle")


@pytest.mark.parametrize("delta,futility", [(DELTA, True), (0.1, False)])
def test_under_no_difference_the_plan_calls_an_effect_at_most_5_percent_of_the_time(delta, futility):
    """δ 0.1 without futility: no look stops for equivalence, every look spends its α."""
    rates = _rates(PLAN, 0.0, delta=delta, futility=futility)
    wrong = rates.get(S.EFFECT, 0) + rates.get(S.TRIVIAL, 0)
    assert wrong <= 0.05 + _tol(0.05), rates


def test_spending_alpha_at_every_look_would_break_the_size():
    """The check can fail: testing every look at the full α (no spending) calls an effect too
    often when nothing differs (δ 0.1: no early stop for equivalence hides it)."""
    class Unspent(S.SequentialPlan):
        def levels(self, family=1):
            return [self.alpha / family] * len(self.looks)
    rates = _rates(Unspent((3, 6, 10)), 0.0, futility=False, seed=1, delta=0.1)
    assert rates.get(S.EFFECT, 0) + rates.get(S.TRIVIAL, 0) > 0.05 + _tol(0.05), rates


def test_at_the_margin_equivalence_is_called_at_most_5_percent_of_the_time():
    rates = _rates(PLAN, DELTA, seed=2)
    assert rates.get(S.EQUIVALENT, 0) + rates.get(S.TRIVIAL, 0) <= 0.05 + _tol(0.05), rates


@pytest.mark.parametrize("effect", [0.5, 0.8])
def test_under_the_planned_effect_the_power_is_as_stated(effect):
    lo, hi = S.power_bounds(PLAN, effect, SD)
    rates = _rates(PLAN, effect, futility=False, seed=3)
    called = rates.get(S.EFFECT, 0) + rates.get(S.TRIVIAL, 0)
    assert lo - _tol(lo) <= called <= hi + _tol(min(hi, 0.99)), (called, lo, hi)
    assert lo >= 0.8 or effect < 0.6  # the design powers δ itself at its last look


def test_futility_stops_early_where_the_last_look_could_not_decide_and_never_rejects():
    rng = np.random.default_rng(4)
    d = S.decide(PLAN, 0, rng.normal(0, 3.0, 3), np.zeros(3), delta=DELTA)  # sd 3: needs far more units
    assert d.state == S.FUTILE and (d.units_needed is None or d.units_needed > 10)
    d = S.decide(PLAN, 2, rng.normal(0, 3.0, 10), np.zeros(10), delta=DELTA)
    assert d.state == S.INCONCLUSIVE and d.look == 3


def test_a_large_effect_is_not_stopped_for_want_of_power_to_see_delta():
    """Futility asks whether the last look could decide the claim either way: a difference
    that is large against a noisy sd goes on (its own effect is within reach), where the same
    sd around 0 stops."""
    rng = np.random.default_rng(5)
    noise = rng.normal(0, 1.0, 3)
    assert S.decide(PLAN, 0, 2.5 + noise, np.zeros(3), delta=0.1).state == S.OPEN
    assert S.decide(PLAN, 0, noise - noise.mean(), np.zeros(3), delta=0.1).state == S.FUTILE


def _pending(n_units, pending=True):
    from verify.studies import verdicts as V
    claim = V.Claim("split", "hurts", "a", "b", delta=0.05, why="w")
    rng = np.random.default_rng(1)
    treat = dict(enumerate(0.7 + 0.01 * rng.standard_normal(n_units)))
    control = dict(enumerate(0.8 + 0.01 * rng.standard_normal(n_units)))
    return V.Comparison("unfit", treat, control, claim, condition_fails="an arm did not fit; nor matched",
                        condition_pending=pending)


def test_a_condition_more_seeds_may_show_wants_the_next_look_and_holds_its_share_of_alpha():
    """Matched training fit not shown yet, within reach (verify.studies.effects.fit_condition):
    the plan wants the next look's units instead of leaving the claim untestable for good, and
    the claim counts in the family m from the start. A condition out of reach wants nothing;
    at the last look a pending one is not testable."""
    from verify.studies import verdicts as V
    plan = V.Plan(test="paired", claims=(V.Claim("split", "hurts", "a", "b", delta=0.05, why="w"),),
                  looks=(2, 4, 8))
    ok = V.Comparison("fit", {1: 0.7, 2: 0.71}, {1: 0.8, 2: 0.79}, plan.claims[0])
    first = S.judge([_pending(2), ok], plan)[0]
    assert (first.outcome, first.wanted, first.agrees) == (V.OPEN, 4, V.OPEN)
    assert first.why.endswith("; open: look 2 needs 4 seeds an arm, 2 in") and first.p is None
    assert S.family_of([_pending(2), ok]) == 2 and S.family_of([_pending(2, pending=False), ok]) == 1
    between = S.judge([_pending(5)], plan)[0]
    assert (between.outcome, between.wanted) == (V.OPEN, 8)
    out_of_reach = S.judge([_pending(2, pending=False)], plan)[0]
    assert (out_of_reach.outcome, out_of_reach.wanted) == (V.NOT_TESTABLE, None)
    last = S.judge([_pending(8)], plan)[0]
    assert (last.outcome, last.wanted, last.agrees) == (V.NOT_TESTABLE, None, V.NOT_TESTABLE)


def test_a_comparison_without_a_claim_is_judged_at_its_looks_and_never_given_seeds():
    """task-support compares every support kind with random, the paper claims three: the others
    are judged at their last complete look, inconclusive there if undecided, and want no runs
    (a plan that wanted them spent 10 runs a look on supports nobody claims anything of)."""
    from verify.studies import verdicts as V
    plan = V.Plan(test="paired", claims=(V.Claim("split", "hurts", "a", "random", delta=0.03, why="w"),),
                  looks=(5, 10, 20))
    rng = np.random.default_rng(3)
    noisy = V.Comparison("equal vs random", dict(enumerate(0.9 + 0.01 * rng.standard_normal(5))),
                         dict(enumerate(0.9 + 0.01 * rng.standard_normal(5))))
    v = S.judge([noisy], plan)[0]
    assert (v.outcome, v.wanted, v.look) == (V.INCONCLUSIVE, None, 1)
    assert "no paper claim: the plan adds no seeds to it (look 2 would need 10 seeds an arm, 5 in)" in v.why
    assert v.p is not None and v.agrees is None
    few = S.judge([V.Comparison("x", {1: 0.9, 2: 0.8}, {1: 0.7, 2: 0.75})], plan)[0]
    assert (few.outcome, few.wanted, few.p) == (V.NOT_TESTABLE, None, None)
    # A claimed comparison with the same numbers stays open and wants look 2's seeds.
    claimed = V.Comparison("a vs random", noisy.treatment, noisy.control, plan.claims[0])
    assert (S.judge([claimed], plan)[0].outcome, S.judge([claimed], plan)[0].wanted) == (V.OPEN, 10)
