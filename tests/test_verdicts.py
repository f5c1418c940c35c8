"""The one verdict module (verify/studies/verdicts.py): its tests against scipy and the math,
their size and power against simulation, Holm's correction, the outcome and agreement rules, and
the study files' plans. The simulations' tolerances are binomial: a rate estimated from R draws
has sd sqrt(p(1 − p)/R), and each check allows 4 of those."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from verify.studies import commands as driver
from verify.studies import grids, staged
from verify.studies import verdicts as V
from verify.studies.effects import effects_table

HURTS = V.Claim("split", "hurts")
SAME = V.Claim("split", "no effect", delta=0.1, why="a stated reason")
HURTS_BY = V.Claim("split", "hurts", delta=0.1, why="a stated reason")  # δ on both sides


def comparison(treatment, control, claim=None, name="c"):
    return V.Comparison(name, dict(enumerate(treatment)), dict(enumerate(control)), claim)


def one(treatment, control, claim=None, test="welch", level=0.95) -> V.Verdict:
    (v,) = V.judge([comparison(treatment, control, claim)], V.Plan(test=test, level=level))
    return v


# ----------------------------------------------------------------------------- against scipy

@pytest.mark.parametrize("test", V.TESTS)
def test_the_statistic_df_and_interval_are_scipys(test):
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.3, 0.2, 5), rng.normal(0.0, 0.5, 5)
    v = one(a, b, test=test)
    ref = stats.ttest_rel(a, b) if test == "paired" else stats.ttest_ind(a, b, equal_var=False)
    # t and df from the module's own moments, p from scipy: they must agree with scipy's test.
    assert v.t == pytest.approx(ref.statistic, rel=1e-12) and v.df == pytest.approx(ref.df, rel=1e-12)
    assert v.p == pytest.approx(ref.pvalue, rel=1e-12) and v.p_holm == v.p  # a family of one
    lo, hi = ref.confidence_interval(0.95)
    assert v.ci == (pytest.approx(lo, rel=1e-10), pytest.approx(hi, rel=1e-10))
    assert v.test == ("paired t" if test == "paired" else "Welch t")


def test_the_committed_task_support_verdicts_are_welchs_test_of_the_tables_means_and_sds():
    """Issue 32 recomputed Welch's test from the committed table's means and sds (p = 0.039 for
    non_compositional on the store it measured). The verdict's test, read from the store's
    seeds, must be that test, and its outcome what Holm makes of it."""
    out = grids.PACKAGED_RESULTS_DIR / "task-support" / "cpu"
    plan = V.Plan(test="welch", claims=(V.Claim("split", "hurts", "non_compositional", "random"),))
    # The runs of the study's plan (its store also keeps an earlier grid's, at 10,000 steps).
    keys = {r.key for r in staged.planned_runs("task-support", "cpu", out)[1]}
    table = effects_table("task-support", "cpu", out, keys=keys, plan=plan)
    rows = {r["split"]: r for r in table["rows"]}
    ref = rows["random"]
    # Issue 43: a comparison whose arms did not both fit is not tested, and leaves the family.
    unfit = {split for split, r in rows.items() if "did not fit" in (r.get("test") or "")}
    family = len(rows) - 1 - len(unfit)
    ps = {}
    for split, r in rows.items():
        if split == "random" or split in unfit:
            continue
        ps[split] = stats.ttest_ind_from_stats(r["held_out_r2_mean"], r["held_out_r2_sd"], r["runs"],
                                               ref["held_out_r2_mean"], ref["held_out_r2_sd"], ref["runs"],
                                               equal_var=False).pvalue
    adjusted = dict(zip(ps, V.holm(list(ps.values())), strict=True))
    for split, p in adjusted.items():
        r = rows[split]
        assert f"p_Holm = {V._g(p)}" in r["test"], (split, r["test"], p)
        called = r["effect_vs_random"].split("(")[1].rstrip(")")
        assert (called in (V.HELPS, V.HURTS)) == (p < 0.05), (split, called, p)
    assert rows["non_compositional"]["agrees"] in ("yes", "inconclusive", "not testable") and family >= 1


# ----------------------------------------------------------------------------- size and power

@pytest.mark.parametrize("test,n", [("paired", 2), ("paired", 4), ("welch", 3)])
def test_under_no_difference_an_effect_is_called_at_most_5_percent_of_the_time(test, n):
    """The test's size: the old rule (an effect beyond 2 standard errors) would call one in
    30% (paired, n = 2: P(|t_1| > 2)) and 12% (n = 4) of these; 95% must mean 5%."""
    rng = np.random.default_rng(1)
    R = 4000
    a, b = rng.normal(size=(2, R, n))
    called = sum(one(a[i], b[i], test=test).outcome in (V.HELPS, V.HURTS) for i in range(R))
    tol = 4 * math.sqrt(0.05 * 0.95 / R)
    if test == "paired":  # exact: the differences are normal
        assert abs(called / R - 0.05) < tol, called / R
    else:  # Welch is slightly conservative at equal variances
        assert 0.03 < called / R < 0.05 + tol, called / R
    assert stats.t.sf(2, 1) * 2 > 0.29  # what the old rule's size was at one df


def test_power_of_matches_simulation_and_seeds_needed_is_the_first_n_with_that_power():
    rng = np.random.default_rng(2)
    sd, effect, alpha = 0.05, 0.06, 0.05 / 3
    n = V.seeds_needed("paired", sd, alpha=alpha, power=0.8, effect=effect)
    se, df = sd / math.sqrt(n), n - 1
    assert V.power_of(effect, se, df, alpha) >= 0.8
    assert V.power_of(effect, sd / math.sqrt(n - 1), n - 2, alpha) < 0.8
    R = 4000
    d = rng.normal(effect, sd, (R, n))
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    simulated = np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, df))
    expected = V.power_of(effect, se, df, alpha)
    assert abs(simulated - expected) < 4 * math.sqrt(expected * (1 - expected) / R), (simulated, expected)


def test_the_mde_is_the_effect_with_the_planned_power():
    mde = V.minimum_detectable(0.1, 3.0, 0.05, 0.8)
    assert V.power_of(mde, 0.1, 3.0, 0.05) == pytest.approx(0.8, abs=1e-9)
    assert V.minimum_detectable(0.0, 3.0, 0.05, 0.8) == 0.0


def test_tost_establishes_equivalence_when_the_truth_is_zero_and_rarely_at_the_margin():
    rng = np.random.default_rng(3)
    R, n, sd, margin = 2000, 6, 0.05, 0.1
    claim = V.Claim("split", "no effect", delta=margin, why="stated")
    plan = V.Plan(test="paired")
    def equivalent(truth):
        (v,) = V.judge([comparison(rng.normal(truth, sd, n), np.zeros(n), claim)], plan)
        return v.outcome == V.EQUIVALENT

    at_zero = sum(equivalent(0.0) for _ in range(R))
    # 2 tests in the family (difference and TOST): the TOST runs at 0.05 or 0.025 after Holm,
    # so its power lies between equivalence_power at those levels.
    se = sd / math.sqrt(n)
    lo, hi = V.equivalence_power(margin, se, n - 1, 0.025), V.equivalence_power(margin, se, n - 1, 0.05)
    tol = 4 * math.sqrt(0.25 / R)
    assert lo - tol < at_zero / R < hi + tol, (at_zero / R, lo, hi)
    at_margin = sum(equivalent(margin) for _ in range(R))
    assert at_margin / R < 0.05 + 4 * math.sqrt(0.05 * 0.95 / R)  # TOST's size at the boundary


def test_seeds_needed_for_equivalence_and_its_limits():
    n = V.seeds_needed("welch", 0.01, alpha=0.05, power=0.8, margin=0.02)
    se, df = 0.01 * math.sqrt(2 / n), 2 * (n - 1)
    assert V.equivalence_power(0.02, se, df, 0.05) >= 0.8
    assert V.equivalence_power(0.02, 0.01 * math.sqrt(2 / (n - 1)), 2 * (n - 2), 0.05) < 0.8
    assert V.seeds_needed("paired", 1.0, alpha=0.05, power=0.8, effect=1e-3) is None  # beyond MAX_SEEDS
    with pytest.raises(ValueError, match="one of effect and margin"):
        V.seeds_needed("paired", 1.0, alpha=0.05, power=0.8)


# ----------------------------------------------------------------------------- Holm

def test_holm_on_a_worked_example_and_its_properties():
    assert V.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rng = np.random.default_rng(4)
    for _ in range(200):
        p = rng.uniform(0, 0.2, rng.integers(1, 8)).tolist()
        adj = V.holm(p)
        assert all(a >= q for a, q in zip(adj, p, strict=True))  # never below the raw p
        assert all(a <= min(1.0, len(p) * q) + 1e-15 for a, q in zip(adj, p, strict=True))  # nor Bonferroni
        order = np.argsort(p)
        assert np.all(np.diff(np.array(adj)[order]) >= 0)  # monotone in the raw order


def test_the_family_is_corrected_together():
    """Two clear effects alone reject; beside three null comparisons, Holm still rejects the
    clearest but a p of 0.02 is no longer an effect."""
    plan = V.Plan(test="paired")
    strong = comparison([1.0, 1.1, 0.9, 1.05], [0, 0.01, -0.01, 0.02])
    weak = comparison([0.3, 0.1, 0.5, 0.2], [0, 0, 0, 0])  # paired t(3) = 3.66, p = 0.035
    assert V.judge([weak], plan)[0].outcome == V.HELPS
    nulls = [comparison([0.1, -0.1, 0.05, -0.05], [0, 0, 0, 0]) for _ in range(3)]
    got = V.judge([strong, weak, *nulls], plan)
    assert got[0].outcome == V.HELPS and got[1].outcome == V.INCONCLUSIVE
    assert got[1].p < 0.05 < got[1].p_holm and V.family_size(got) == 5


# ----------------------------------------------------------------------------- outcomes and agreement

def test_agreement_is_yes_only_for_the_papers_outcome_and_no_only_for_a_tested_opposite():
    clear_drop, clear_rise = ([0.1, 0.11, 0.09], [0.9, 0.91, 0.89]), ([0.9, 0.91, 0.89], [0.1, 0.11, 0.09])
    noisy = ([0.1, 0.9, 0.5], [0.6, 0.2, 0.7])
    assert one(*clear_drop, HURTS).agrees == "yes"
    assert one(*clear_rise, HURTS).agrees == "NO"
    assert one(*noisy, HURTS).agrees == "inconclusive"  # never NO
    tiny = ([0.500, 0.501, 0.499, 0.5], [0.5, 0.5005, 0.4995, 0.5])
    assert one(*tiny, SAME).outcome == V.EQUIVALENT and one(*tiny, SAME).agrees == "yes"
    assert one(*tiny, HURTS).agrees == "inconclusive"  # no margin asked: not an equivalence
    assert one(*clear_drop, SAME).outcome == V.HURTS and one(*clear_drop, SAME).agrees == "NO"
    # A real difference inside δ is trivial: it agrees with no effect, never with an effect.
    small = ([0.50, 0.51, 0.49, 0.50, 0.505], [0.53, 0.54, 0.52, 0.531, 0.535])
    assert one(*small, HURTS_BY, test="paired").outcome == V.TRIVIAL
    assert one(*small, HURTS_BY, test="paired").agrees == "NO"
    assert one(*small, SAME, test="paired").agrees == "yes"
    assert one(*clear_drop, HURTS_BY, test="paired").outcome == V.HURTS
    assert one(*noisy, SAME).agrees == "inconclusive"
    assert one([0.5], [0.1, 0.2], HURTS).agrees == "not testable"
    assert one([0.5, 0.6], [0.1, 0.2]).agrees is None  # no claim, no agreement


def test_an_equivalence_where_the_paper_claims_an_effect_is_no():
    v = V.Verdict(name="c", test="paired t", n=(3, 3), difference=0.0, paper="hurts", p=0.9, p_holm=0.9,
                  p_equivalence=0.01, p_equivalence_holm=0.02)
    V._outcome(v, 0.05)
    assert (v.outcome, v.agrees) == (V.EQUIVALENT, "NO")


def test_one_seed_zero_variance_and_conditions():
    v = one([0.5], [0.4, 0.3])
    assert v.outcome == V.NOT_TESTABLE and "fewer than 2 seeds" in v.why and v.p is None
    assert V.test_text(v) == v.why
    v = one([0.5, 0.5], [0.4, 0.4])  # every seed the same: the difference is exact
    assert (v.outcome, v.p, v.se) == (V.HELPS, 0.0, 0.0)
    v = one([0.5, 0.5], [0.5, 0.5], SAME)
    assert v.outcome == V.EQUIVALENT
    floor = V.Comparison("c", {1: 0.1, 2: 0.2}, {1: 0.0, 2: 0.1}, HURTS, "below the floor")
    (v,) = V.judge([floor], V.Plan())
    assert (v.outcome, v.agrees, v.why) == (V.NOT_TESTABLE, "not testable", "below the floor")


def test_a_paired_test_reads_the_seeds_both_arms_ran():
    c = V.Comparison("c", {1: 0.5, 2: 0.6, 3: 0.7}, {2: 0.1, 3: 0.2, 4: 0.9}, None)
    a, b = c.arms("paired")
    assert a.tolist() == [0.6, 0.7] and b.tolist() == [0.1, 0.2]
    assert V.judge([c], V.Plan(test="paired"))[0].n == (2, 2)


def test_interval_side():
    assert V.interval_side(0.1, 0.5, 0.0) == "> 0"
    assert V.interval_side(0.2, 0.9, 1.0) == "< 1"
    assert V.interval_side(-0.1, 0.5, 0.0) == V.INCONCLUSIVE


# ----------------------------------------------------------------------------- plans

def test_plan_of_refuses_a_claim_without_its_delta_and_reason_and_other_bad_blocks():
    with pytest.raises(ValueError, match="delta, the claim's smallest effect of interest"):
        V.plan_of(dict(claims=[dict(factor="split", paper="hurts")]))
    with pytest.raises(ValueError, match="delta needs its reason"):
        V.plan_of(dict(claims=[dict(factor="split", paper="no effect", delta=0.02)]))
    with pytest.raises(ValueError, match="scale must be one of"):
        V.plan_of(dict(claims=[dict(factor="split", paper="hurts", delta=0.1, why="w", scale="logit")]))
    with pytest.raises(ValueError, match="paper must be one of"):
        V.plan_of(dict(claims=[dict(factor="split", paper="no clear effect")]))
    with pytest.raises(ValueError, match="test must be one of"):
        V.plan_of(dict(test="student"))
    with pytest.raises(ValueError, match="unknown field 'alpha'"):
        V.plan_of(dict(alpha=0.05))
    with pytest.raises(ValueError, match="a mapping with factor and paper"):
        V.plan_of(dict(claims=[dict(factor="split", paper="hurts", margin=0.1)]))  # the old name
    with pytest.raises(ValueError, match="floor must be a positive number"):
        V.plan_of(dict(claims=[dict(factor="split", paper="hurts", delta=0.1, why="w", floor=-1)]))
    assert V.plan_of(None) == V.Plan()


def test_every_study_file_states_a_valid_plan_and_every_claim_its_delta_and_reason():
    for name in driver.study_names():
        plan = driver.study_plan(name)
        for c in plan.claims:
            assert c.delta > 0 and c.why, (name, c)
    assert driver.study_plan("task-support").test == "paired"
    assert {c.treatment for c in driver.study_plan("task-support").claims} == {
        "non_compositional", "unpopular_modules", "popular_modules"}


def test_a_study_with_a_bad_verdicts_block_is_refused_in_one_line_before_any_run(tmp_path):
    study = Path(driver.study_file("task-support")).read_text().replace("delta: 0.2231", "delta: -1")
    path = tmp_path / "bad.yaml"
    path.write_text(study)
    argv = ["run", str(path), "--scale", "smoke", "--engine", "serial", "--out", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, "-m", "verify.study", *argv], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "smallest effect of interest" in proc.stderr
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- issue 43

def test_equivalence_is_decided_on_the_holm_corrected_tost_p():
    """The issue's case: TOST's raw p is 0.042, below 0.05, but the family holds two tests (the
    difference and the TOST), so Holm makes it 0.084: inconclusive, not equivalent."""
    a, b = [-0.033, -0.019, 0.025, 0.063], [-0.008, 0.082, -0.04, 0.021]
    v = one(a, b, V.Claim("split", "no effect", delta=0.1, why="w"), test="paired")
    assert v.p_equivalence == pytest.approx(0.0419, abs=1e-4) and v.p_equivalence_holm == pytest.approx(
        2 * v.p_equivalence, rel=1e-12)
    assert (v.outcome, v.agrees) == (V.INCONCLUSIVE, "inconclusive")


def test_equivalence_power_against_a_simulation_at_its_stated_level():
    """TOST at level α rejects when both one-sided t tests do, each at α (not α/2). Simulated with
    the sd estimated (R = 4,000: 4 binomial sds are 0.032; the formula's fixed-se approximation
    adds about 0.02 at n = 10), the rate must meet equivalence_power at α and not at α/2 (a
    two-sided critical value: 0.21 here against 0.50)."""
    rng = np.random.default_rng(7)
    R, n, sd, margin, alpha = 4000, 10, 1.0, 0.8, 0.05
    d = rng.normal(0.0, sd, (R, n))
    m, se = d.mean(1), d.std(1, ddof=1) / math.sqrt(n)
    t = stats.t.ppf(1 - alpha, n - 1)
    simulated = np.mean(((m + margin) / se > t) & ((m - margin) / se < -t))
    stated = V.equivalence_power(margin, sd / math.sqrt(n), n - 1, alpha)
    assert abs(simulated - stated) < 0.05, (simulated, stated)
    assert abs(simulated - V.equivalence_power(margin, sd / math.sqrt(n), n - 1, alpha / 2)) > 0.25


def _seeds_by_power(sd, delta, alpha, power, equivalence=False):
    """The fewest seeds (paired) at which the test reaches `power`, by direct search over
    power_of / equivalence_power (the oracle power_rows must match)."""
    for n in range(2, 1000):
        se, df = sd / math.sqrt(n), n - 1
        got = V.equivalence_power(delta, se, df, alpha) if equivalence else V.power_of(delta, se, df, alpha)
        if got >= power:
            return n
    return None


def test_power_rows_count_seeds_at_the_power_and_at_alpha_over_the_family():
    rng = np.random.default_rng(11)
    effect = V.Claim("split", "hurts", "a", "random", delta=0.1, why="w")
    none_ = V.Claim("split", "no effect", "b", "random", delta=0.1, why="w")
    cs = [V.Comparison("a", dict(enumerate(rng.normal(-0.2, 0.1, 4))), dict(enumerate(rng.normal(0, 0.1, 4))),
                       effect),
          V.Comparison("b", dict(enumerate(rng.normal(0, 0.1, 4))), dict(enumerate(rng.normal(0, 0.1, 4))),
                       none_)]
    plan = V.Plan(test="paired")
    rows = {r["name"]: r for r in V.power_rows(cs, plan, family=4)}
    for c, equivalence in ((cs[0], False), (cs[1], True)):
        sd = V.seed_sd(c, "paired")
        want = _seeds_by_power(sd, 0.1, 0.05 / 4, 0.8, equivalence)
        assert rows[c.name]["seeds_needed"] == want and rows[c.name]["sd"] == sd
        # The mutants: the level in place of the power, α in place of α/m.
        assert want != _seeds_by_power(sd, 0.1, 0.05 / 4, 0.95, equivalence)
        assert want != _seeds_by_power(sd, 0.1, 0.05, 0.8, equivalence)


def test_a_log_unexplained_claim_tests_the_ratio_of_unexplained_variance():
    """Near the ceiling the same R² difference is a large ratio of 1 − R²: 0.985 against 0.989
    is ×1.36 of the unexplained variance, beyond ×1.25; far from it, 0.50 against 0.504 is not."""
    claim = V.Claim("split", "no effect", delta=math.log(1.25), why="w", scale="log_unexplained")
    near = one([0.985, 0.9848, 0.9852, 0.9851], [0.989, 0.9889, 0.9891, 0.989], claim, test="paired")
    assert near.outcome == V.HURTS and near.agrees == "NO"
    assert near.raw_difference == pytest.approx(-0.003975, abs=1e-9)
    assert "1 − R² ratio 1.3" in V.test_text(near) and V.effect_text(near).startswith("-0.004")
    far = one([0.500, 0.499, 0.501, 0.5005], [0.504, 0.503, 0.505, 0.5045], claim, test="paired")
    assert far.outcome == V.TRIVIAL and far.agrees == "yes"
    with pytest.raises(ValueError, match="values below 1"):
        one([1.0, 0.9], [0.9, 0.8], claim)


def _fit_table(train_treatment, train_control, headline=None):
    """A two-row table as effects.py builds it, the held-out gain the same in both cases. The
    training metric the convergence rule reads is `train_*`; `headline`, the two arms' values of
    the held-out metric on the training tasks (as acc_all beside the rule's acc), is the same
    unless given."""
    from verify.studies import effects as E
    rows, seeds = [], {}
    heads = headline or (train_treatment, train_control)
    arms = ((256, train_treatment, heads[0], [0.95, 0.96, 0.94]),
            (128, train_control, heads[1], [0.9, 0.91, 0.89]))
    for width, train, head, held in arms:
        row = dict(family="hyperteacher", network="custom", widths=width, train_metric="train_r2",
                   effect_metric="held_out_r2", train_r2_mean=float(np.mean(train)),
                   held_out_r2_mean=float(np.mean(held)),
                   converged=all(t >= 0.99 for t in train))
        seeds[id(row)] = dict(enumerate(held))
        seeds[(id(row), "train")] = dict(enumerate(train))
        seeds[(id(row), "train_headline")] = dict(enumerate(head))
        rows.append(row)
    plan = V.Plan(test="paired", claims=(V.Claim("widths", "helps", 256, 128, delta=0.02, why="w"),))
    notes = []
    E._claim_effects(rows, ["widths"], notes, plan, seeds)
    return rows[0]


def test_a_held_out_claim_is_tested_only_where_both_arms_fit_and_shows_the_training_gain():
    fit = _fit_table([0.995, 0.996, 0.994], [0.992, 0.993, 0.991])
    assert fit["agrees"] == "yes" and "helps" in fit["effect"]
    assert fit["train_effect"] == pytest.approx(0.003) and fit["gap_change"] == pytest.approx(-0.047)
    unfit = _fit_table([0.995, 0.996, 0.994], [0.95, 0.993, 0.991])  # one control run short
    assert unfit["agrees"] == "not testable" and "not testable" in unfit["effect"]
    assert "an arm did not fit" in unfit["test"] and "1 of 3 runs below" in unfit["test"]
    assert "nor matched" in unfit["test"]


def test_arms_that_did_not_fit_are_compared_at_matched_training_fit_within_half_of_delta():
    """δ 0.02, so matched means the training difference shown within ±0.01 by TOST (3 seeds,
    t(2)). Both arms below the rule's 0.99, their training fits equal to 2e-4: the held-out gain
    is tested, and the table says on what. A steady training difference of 0.015 is within δ
    but not within δ/2: not matched (a rule that used the whole δ would test it)."""
    matched = _fit_table([0.985, 0.986, 0.984], [0.9852, 0.9859, 0.9842])
    assert matched["effect"] == "+0.050 (helps)" and matched["agrees"] == "yes"
    assert ("at matched training fit (training r2 difference -0.0001, under 0.01 in the held-out "
            "difference's direction: p = " in matched["test"])
    # A treatment that fits its training tasks worse by 0.03 and generalizes better: no training
    # gain made its held-out gain, so one side is all the claim needs (TOST would refuse it).
    worse = _fit_table([0.955, 0.956, 0.954], [0.985, 0.9859, 0.9842])
    assert worse["agrees"] == "yes"
    assert "at matched training fit (training r2 difference -0.03" in worse["test"]
    steady = _fit_table([0.985, 0.986, 0.984], [0.970, 0.9711, 0.9689])
    assert steady["agrees"] == "not testable"
    assert "nor matched: training r2 difference +0.015" in steady["test"]
    # One training seed in common cannot show a match: no variance to test it with.
    one = _fit_table([0.985], [0.9852])
    assert one["agrees"] == "not testable" and "nor matched" not in one["test"]


def test_the_training_gain_is_read_on_the_held_out_metric_not_the_convergence_rules():
    """Preference: the rule reads per-step acc, the claim acc_all; a held-out acc_all gain is read
    against the acc_all gain on the training tasks. Here the rule's metric moves by 0.003 and the
    headline's by 0.04: the training gain is 0.04, and the gap change -0.01."""
    row = _fit_table([0.995, 0.996, 0.994], [0.992, 0.993, 0.991],
                     headline=([0.90, 0.91, 0.89], [0.86, 0.87, 0.85]))
    assert row["train_effect"] == pytest.approx(0.04) and row["gap_change"] == pytest.approx(-0.01)


def test_the_floor_needs_one_arm_above_it_not_both():
    from verify.images.study_report import ladder_comparisons
    plan = V.Plan(claims=(V.Claim("parameters", "helps", delta=0.1, why="w", floor=0.1),))
    def group(p, success):
        return dict(setting=dict(parameters=p, train_combinations=16),
                    test_success_mean=float(np.mean(success)), test_success_values=dict(enumerate(success)))
    one_above = ladder_comparisons([group(1, [0.05, 0.06]), group(2, [0.2, 0.3])], "parameters", plan)
    both_below = ladder_comparisons([group(1, [0.05, 0.06]), group(2, [0.07, 0.08])], "parameters", plan)
    assert one_above[0][1].condition_fails is None
    assert "below the floor" in both_below[0][1].condition_fails


@pytest.mark.parametrize("study", sorted(p.parent.parent.name for p in grids.PACKAGED_RESULTS_DIR.glob(
    "*/cpu/effects.md")))
def test_every_committed_effects_md_is_what_report_makes_of_its_store(study, tmp_path):
    """Byte for byte: `verify.study report STUDY --scale cpu` on the committed store writes the
    committed effects.md (so a changed verdict rule or number cannot go unnoticed)."""
    committed = grids.PACKAGED_RESULTS_DIR / study / "cpu"
    # Run outside the checkout: report reads the committed store and writes into the working folder.
    proc = subprocess.run([sys.executable, "-m", "verify.study", "report", study, "--scale", "cpu"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "verify" / "studies" / "results" / study / "cpu"
    assert (written / "effects.md").read_text() == (committed / "effects.md").read_text()
    assert (written / "effects.csv").read_text() == (committed / "effects.csv").read_text()


def test_a_match_within_reach_is_pending_and_one_beyond_half_of_delta_is_not():
    """fit_condition's third value, which a sequential plan reads (tests/test_sequential.py):
    a training difference so far inside ±δ/2 that TOST cannot yet show is pending; a steady
    0.015 against δ/2 = 0.01 is not; one seed (no test yet) is."""
    from verify.studies import effects as E
    claim = V.Claim("widths", "helps", 256, 128, delta=0.02, why="w")

    def condition(train_t, train_c, claim=claim):
        rows = [dict(family="hyperteacher", converged=False, train_metric="train_r2",
                     train_r2_mean=float(np.mean(t))) for t in (train_t, train_c)]
        seeds = {}
        for row, train, held in zip(rows, (train_t, train_c), (0.95, 0.9), strict=True):
            seeds[(id(row), "train")] = seeds[(id(row), "train_headline")] = dict(enumerate(train))
            seeds[id(row)] = dict.fromkeys(range(len(train)), held)  # the treatment generalizes better
        return E.fit_condition(*rows, seeds, claim, "paired", 0.95)
    assert condition([0.985, 0.986, 0.984], [0.975, 0.991, 0.979])[2] is True  # +0.0033 ± a lot
    assert condition([0.985, 0.986, 0.984], [0.970, 0.9711, 0.9689])[2] is False
    assert condition([0.985], [0.97])[2] is True
    fails, matched, pending = condition([0.985, 0.986, 0.984], [0.9852, 0.9859, 0.9842])
    assert fails is None and matched.startswith("at matched training fit") and pending is False
    # A claim of no effect bounds both sides: a treatment 0.03 worse is not matched, and out of reach.
    none = V.Claim("widths", "no effect", 256, 128, delta=0.02, why="w")
    worse = ([0.955, 0.956, 0.954], [0.985, 0.9859, 0.9842])
    assert condition(*worse)[0] is None
    fails, matched, pending = condition(*worse, claim=none)
    assert "nor matched" in fails and "TOST within ±0.01" in fails and matched is None and pending is False


def test_within_margin_bounds_the_side_asked_for_and_tost_takes_the_larger_p():
    """Paired differences 0.05, 0.06, 0.035 (mean 0.0483) against a margin of 0.05: beyond +0.05
    cannot be ruled out (p 0.42), beyond −0.05 can (p 0.0027); TOST is the larger. With no
    spread the difference is exact: inside or not."""
    c = V.Comparison("x", {1: 0.50, 2: 0.52, 3: 0.49}, {1: 0.45, 2: 0.46, 3: 0.455}, None)
    (d0, p0), (d1, p1), (d2, p2) = (V.within_margin(c, "paired", 0.05, side) for side in (0, 1, -1))
    assert d0 == d1 == d2 == pytest.approx(0.048333, abs=1e-6)
    assert p1 == pytest.approx(0.41994, abs=1e-4) and p2 == pytest.approx(0.0027070, abs=1e-6)
    assert p0 == max(p1, p2)
    exact = V.Comparison("x", {1: 0.5, 2: 0.75}, {1: 0.4375, 2: 0.6875}, None)  # 0.0625 each seed
    assert [V.within_margin(exact, "paired", 0.05, s)[1] for s in (0, 1, -1)] == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="side"):
        V.within_margin(c, "paired", 0.05, 2)
