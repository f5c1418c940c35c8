"""Issue 22, the analysis of the width-vs-M study (verify/studies/width.py): w* on a ladder,
w* over seeds, the slope of log w* on log M and its verdict, the construction's unit split
and the memoriser, then the smoke study end to end through `report` and figure 11."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from verify.studies import commands as study
from verify.studies import grids, provenance, width
from verify.studies.effects import effects_table
from verify.studies.store import RunStore
from verify.studies.width import BELOW, NOT_REACHED, REACHED, Criterion

STUDY = "width-vs-M"


# ----------------------------------------------------------------------------- w* on one ladder

def test_w_star_is_interpolated_linearly_in_log_width_between_the_two_rungs_that_bracket_it():
    needed = width.width_needed([8, 16, 32, 64], [0.5, 0.8, 0.96, 0.99], 0.9)
    t = (0.9 - 0.8) / (0.96 - 0.8)
    assert needed.status == REACHED and needed.bracket == (16.0, 32.0) and not needed.non_monotone
    assert needed.width == pytest.approx(16 * 2**t, rel=1e-12)
    assert math.log(needed.width) == pytest.approx((1 - t) * math.log(16) + t * math.log(32), rel=1e-12)
    # The rungs in any order; a rung exactly at the threshold is w*.
    assert width.width_needed([64, 8, 32, 16], [0.99, 0.5, 0.96, 0.8], 0.9) == needed
    assert width.width_needed([8, 16, 32], [0.5, 0.8, 0.9], 0.9).width == pytest.approx(32, rel=1e-12)


def test_a_ladder_that_never_reaches_the_threshold_is_not_reached_never_extrapolated():
    needed = width.width_needed([8, 16, 32, 64], [0.5, 0.7, 0.85, 0.89], 0.9)
    assert (needed.status, needed.width, needed.bracket) == (NOT_REACHED, None, None)


def test_a_first_rung_already_at_the_threshold_is_an_upper_bound_and_flagged():
    needed = width.width_needed([8, 16, 32], [0.95, 0.97, 0.99], 0.9)
    assert (needed.status, needed.width) == (BELOW, 8.0)
    assert "w* ≤ 8" in needed.note


def test_rmse_lower_is_better_crosses_downwards():
    needed = width.width_needed([4, 8, 16], [0.4, 0.2, 0.05], 0.1, higher_is_better=False)
    assert needed.status == REACHED and needed.bracket == (8.0, 16.0)
    assert needed.width == pytest.approx(8 * 2 ** (2 / 3), rel=1e-12)
    assert Criterion("rmse", 0.1).reaches(0.05) and not Criterion("rmse", 0.1).reaches(0.2)
    assert width.width_needed([4, 8], [0.4, 0.3], 0.1, higher_is_better=False).status == NOT_REACHED


def test_a_non_monotone_ladder_uses_its_first_crossing_and_says_so():
    needed = width.width_needed([2, 4, 8, 16], [0.5, 0.95, 0.85, 0.97], 0.9)
    assert needed.bracket == (2.0, 4.0) and needed.non_monotone and "first crossing" in needed.note
    assert needed.width == pytest.approx(2 * 2 ** ((0.9 - 0.5) / (0.95 - 0.5)), rel=1e-12)


def test_rungs_without_a_value_are_left_out_and_bad_ladders_refused():
    needed = width.width_needed([4, 8, 16], [0.5, None, 0.95], 0.9)
    assert needed.bracket == (4.0, 16.0) and needed.missing == 1
    assert width.width_needed([4, 8], [float("nan"), None], 0.9).status == NOT_REACHED
    for widths in ([4, 4], [0, 8], [-4, 8]):
        with pytest.raises(ValueError):
            width.width_needed(widths, [0.5, 0.9], 0.9)
    with pytest.raises(ValueError):
        width.width_needed([4, 8, 16], [0.5, 0.9], 0.9)


# ----------------------------------------------------------------------------- over seeds

def test_the_interval_over_seeds_is_min_max_below_three_seeds_and_a_t_interval_from_three():
    two = width.seed_interval([10.0, 40.0])
    assert (two["mean"], two["lo"], two["hi"], two["kind"]) == (pytest.approx(20.0), 10.0, 40.0,
                                                                "min–max over seeds")
    v = np.array([10.0, 14.0, 20.0, 12.0])
    four = width.seed_interval(v)
    half = stats.t.ppf(0.975, 3) * np.log(v).std(ddof=1) / 2
    assert four["mean"] == pytest.approx(math.exp(np.log(v).mean()), rel=1e-12)
    assert (four["lo"], four["hi"]) == (pytest.approx(four["mean"] * math.exp(-half), rel=1e-12),
                                        pytest.approx(four["mean"] * math.exp(half), rel=1e-12))
    assert four["kind"] == "95% t-interval on log w over seeds"


def test_an_m_where_a_seed_fell_short_has_no_mean_and_one_below_the_ladder_is_an_upper_bound():
    reached, below = width.Needed(12.0, REACHED, (8.0, 16.0)), width.Needed(8.0, BELOW)
    short = width.summarise_seeds([reached, width.Needed(None, NOT_REACHED)])
    assert short["mean"] is None and short["status"] == "not reached by 1 of 2 seeds"
    bound = width.summarise_seeds([reached, below])
    assert bound["upper_bound"] and bound["status"].startswith("upper bound") and bound["hi"] == 12.0


# ----------------------------------------------------------------------------- slopes and verdicts

MS = [4, 6, 8, 12, 16, 24, 32]


def planted(beta: float, noise: float, seed: int, seeds: int = 3, c: float = 5.0):
    """w* = c·M^beta × exp(N(0, noise)), one per (seed, M)."""
    rng = np.random.default_rng(seed)
    M = np.repeat(MS, seeds)
    return M, c * M.astype(float) ** beta * np.exp(rng.normal(0.0, noise, len(M)))


@pytest.mark.parametrize("beta", [1.0, 2.0])
def test_the_slope_fit_recovers_a_planted_exponent_and_its_interval_covers_it(beta):
    covered = 0
    for seed in range(40):
        M, w = planted(beta, 0.15, seed)
        fit = width.fit_slope(M, w)
        ref = stats.linregress(np.log(M), np.log(w))
        assert fit["slope"] == pytest.approx(ref.slope, rel=1e-10)
        assert fit["se"] == pytest.approx(ref.stderr, rel=1e-10)
        assert (fit["n"], fit["n_M"], fit["dof"]) == (21, 7, 19)
        assert fit["hi"] - fit["slope"] == pytest.approx(stats.t.ppf(0.975, 19) * ref.stderr, rel=1e-10)
        covered += fit["lo"] <= beta <= fit["hi"]
        assert abs(fit["slope"] - beta) < 0.25
    assert covered >= 34  # 95% intervals: about 38 of 40, and seed-fixed


def test_pairs_not_reached_are_left_out_and_too_few_points_is_said():
    M, w = planted(1.0, 0.1, 0)
    w = list(w)
    w[0] = None
    w[1] = float("nan")
    assert width.fit_slope(M, w)["n"] == 19
    few = width.fit_slope([4, 4, 8, 8], [1.0, 2.0, 3.0, 4.0])
    assert few["status"] == "too few points" and few["slope"] is None and "distinct M" in few["reason"]
    assert width.verdict(few, 1.9)["short"] == "inconclusive (too few points)"


def test_the_verdict_names_the_bounds_its_interval_establishes_against_the_baselines():
    memo = width.curve_slope(MS, [width.memorisation_units(M, 2, 4) for M in MS])
    assert 1.8 < memo < 2.0  # H·Σ C(M,k) over M 4–32 at K = 2: below K at finite M
    calls = {}
    for beta in (-1.0, 0.5, 1.0, 1.45, 2.5):
        M, w = planted(beta, 0.05, 1)
        calls[beta] = width.verdict(width.fit_slope(M, w), memo, memo / 2)
    s = f"{memo / 2:.2f}"
    assert calls[0.5]["short"] == f"0 < slope < {s} at 95%" and calls[0.5]["excludes_sqrt_memorising"]
    # A w* that shrinks with M is limited by something else at small M.
    assert calls[-1.0]["short"] == "slope < 0 at 95%" and "something other" in calls[-1.0]["text"]
    assert calls[2.5]["short"] == f"{memo:.2f} < slope at 95%" and calls[2.5]["excludes_linear"]
    assert calls[1.45]["short"] == f"1 < slope < {memo:.2f} at 95%"
    # A slope of exactly 1 ([0.967, 1.003]): above the √-memoriser's 0.96, but 1 is inside.
    assert calls[1.0]["short"] == f"{s} < slope < {memo:.2f} at 95%"
    assert calls[1.0]["excludes_memorising"] and not calls[1.0]["excludes_linear"]
    # A wide interval excludes none of them.
    M, w = planted(1.5, 2.0, 3, seeds=1)
    wide = width.verdict(width.fit_slope(M, w), memo, memo / 2)
    assert wide["call"] == "inconclusive" and wide["short"].startswith("inconclusive (contains 0, ")


# ----------------------------------------------------------------------------- the baselines

@pytest.mark.parametrize("eps", [0.05, 0.1])
def test_the_constructions_m_term_is_m_and_its_eps_term_is_the_built_networks(eps):
    from constructions.base import count_hidden_units
    from constructions.shallow import build_shallow
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher

    I, H, O, K, seed = 4, 4, 4, 2, 1
    a = width.readout_norms(I, H, O, K, [seed])[seed]
    units = {}
    for M in (4, 16):
        teacher = sample_hyperteacher(HyperteacherConfig(I=I, H=H, O=O, M=M, K=K, seed=seed))
        built = build_shallow(teacher, eps)
        u = units[M] = width.construction_units(I, H, M, K, eps, a)
        assert u["N"] == built.N and u["eps_term"] == 2 * I * H * built.N
        assert (u["M_term"], u["H_term"]) == (M, H)
        assert [u["eps_term"] + u["M_term"], u["H_term"]] == built.counted_widths()
        assert count_hidden_units(built.to_sequential()) == built.counted_widths()  # the network as built
        assert u["total"] == sum(built.counted_widths())
    assert units[4]["eps_term"] == units[16]["eps_term"]  # the 1/√ε-term does not depend on M
    assert units[16]["total"] - units[4]["total"] == 12  # the M-term: one unit per module


def test_matched_eps_and_the_memoriser():
    assert Criterion("rmse", 0.1).matched_eps() == 0.1
    assert Criterion("r2", 0.99).matched_eps() == pytest.approx(0.05)
    assert Criterion("r2", 0.95).matched_eps(output_sd=1.0) == pytest.approx(math.sqrt(0.05))
    assert width.memorisation_units(8, 2, 4) == 4 * (8 + 28)
    assert width.memorisation_units(16, 3, 16) == 16 * (16 + 120 + 560)
    assert width.curve_slope([4, 8, 16], [4, 8, 16]) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- the whole analysis

def law_r2(w, M, beta, c, held_out=0.25):
    """A held-out R² linear in log w, reaching 0.95 at w = c·M^beta (held-out fraction 0.25);
    a larger held-out fraction (fewer training tasks) costs 0.03."""
    return 0.95 + 0.04 * (math.log(w) - beta * math.log(M) - math.log(c)) - (0.03 if held_out > 0.25 else 0.0)


def points(beta_of_depth: dict, Ms, widths, seeds, noise=0.0, held_outs=(0.25,)):
    rng = np.random.default_rng(0)
    out = []
    for M in Ms:
        for seed in seeds:
            shift = rng.normal(0.0, noise)
            for depth, (beta, c) in beta_of_depth.items():
                for f in held_outs:
                    for w in widths:
                        r2 = law_r2(w, M, beta, c * math.exp(shift), f)
                        out.append(dict(M=M, K=2, I=4, H=4, O=4, seed=seed, held_out=f, depth=depth, width=w,
                                        n_train=int(round((1 - f) * (M + M * (M - 1) / 2))), r2=r2,
                                        rmse=0.5 * math.sqrt(max(1 - r2, 1e-9)), train_r2=0.995))
    return out


def test_the_analysis_finds_the_planted_w_star_per_m_and_each_depths_slope():
    pts = points({2: (1.0, 1.0), 4: (2.5, 0.05)}, MS, [2, 4, 8, 16, 32, 64, 128, 256], seeds=[1, 2, 3],
                 noise=0.05)
    for p in pts:  # one seed's runs at M = 8, depth 2 stop short of training R² 0.99
        if (p["M"], p["depth"], p["seed"]) == (8, 2, 1):
            p["train_r2"] = 0.9
    a = width.analyse(pts, criteria=[Criterion("r2", 0.95)], norms={1: 3.0, 2: 3.0, 3: 3.0})
    rows = {w["depth"]: w for w in a["widths"]}
    assert [r["unconverged"] for r in rows[2]["per_M"]] == [0, 0, 1, 0, 0, 0, 0]
    assert rows[2]["per_M"][2]["per_seed"][1]["converged"] is False and rows[4]["unconverged"] == 0
    for r in rows[2]["per_M"]:
        assert r["seeds"] == 3 and r["kind"] == "95% t-interval on log w over seeds"
        assert r["lo"] <= r["mean"] <= r["hi"]
        assert r["mean"] == pytest.approx(r["M"], rel=0.2)  # c = 1, beta = 1, small noise
    # Every seed is a point (issue 43): 21, the unconverged seed at M = 8 censored to (0, w*].
    assert rows[2]["fit"]["lo"] <= 1.0 <= rows[2]["fit"]["hi"] and rows[2]["fit"]["n"] == 21
    assert rows[2]["fit"]["censored"] == 1 and rows[2]["per_M"][2]["per_seed"][1]["observed"]["lo"] == 0
    memo = rows[2]["memorisation_slope"]
    # Two fits give a verdict: each interval at 1 − 0.05/2, the verdict family-wise.
    assert a["family"]["m"] == 2 and rows[2]["fit"]["confidence"] == pytest.approx(0.975)
    # 21 seeds (19 dof), not 7 means (5): narrow enough to exclude memo / 2, with 1 inside.
    assert rows[2]["verdict"]["short"] == f"{memo / 2:.2f} < slope < {memo:.2f} at 95% family-wise"
    # Depth 4's w* = 0.05·M^2.5 is below the ladder (w* < 2) at the smallest M: kept, left-censored.
    assert rows[4]["per_M"][0]["upper_bound"] and rows[4]["fit"]["Ms"][0] == 4
    assert rows[4]["verdict"]["short"] == f"{rows[4]['memorisation_slope']:.2f} < slope at 95% family-wise"
    fitted = rows[4]["fit"]["Ms"]
    assert rows[4]["memorisation_slope"] == pytest.approx(
        width.curve_slope(fitted, [width.memorisation_units(M, 2, 4) for M in fitted]))
    # The construction at the matched ε: its units as construction_units gives them, its slope near 0.
    (c,) = a["construction"]
    assert c["per_M"][0]["total"] == width.construction_units(4, 4, 4, 2, 0.5 * math.sqrt(0.05), 3.0)["total"]
    assert 0 < c["slope"] < 0.1 and a["tasks"] == []
    text = width.format_analysis(a)
    assert "| held-out R² ≥ 0.95 | 4 | 0.25 |" in text and "< slope at 95%" in text
    json.dumps(a, allow_nan=False)


def test_the_training_tasks_needed_come_from_the_held_out_ladder_at_the_widest_rung():
    pts = points({2: (1.0, 1.0)}, [4, 8, 16], [4, 8], seeds=[1], held_outs=(0.25, 0.5, 0.75))
    a = width.analyse(pts, criteria=[Criterion("r2", 0.95)])
    (t,) = a["tasks"]
    assert (t["depth"], t["width"]) == (2, 8)
    for r in t["per_M"]:
        M = r["M"]
        ladder = sorted((p["n_train"], p["r2"]) for p in pts if p["M"] == M and p["width"] == 8)
        expected = width.width_needed([n for n, _ in ladder], [v for _, v in ladder], 0.95)
        converged = None if expected.status == NOT_REACHED else True  # every run here trained to 0.995
        assert r["per_seed"][1] == expected.as_dict() | dict(converged=converged)
    assert a["construction"] == []  # no readout norms given: no construction


def test_the_in_distribution_criterion_reads_the_training_side_not_the_held_out_one():
    """Training R² planted at slope 2 (a memoriser's), held-out R² at slope 1: each criterion
    finds its own, and the in-distribution one adds no training-tasks ladder."""
    pts = points({2: (1.0, 1.0)}, MS, [2.0**k for k in range(-2, 10)], seeds=[1], held_outs=(0.25, 0.5))
    for p in pts:  # w* = M²/128: the held-out crossings (w* = M) rest on runs trained to 0.99
        p["train_r2"] = 0.99 + 0.04 * (math.log(p["width"]) - 2 * math.log(p["M"]) + math.log(128))
    a = width.analyse(pts, criteria=[Criterion("r2", 0.95), Criterion("train_r2", 0.99)])
    fits = {(w["metric"], w["held_out"]): w["fit"] for w in a["widths"]}
    assert fits[("r2", 0.25)]["slope"] == pytest.approx(1.0, abs=0.05)
    assert fits[("train_r2", 0.25)]["slope"] == pytest.approx(2.0, abs=0.05)
    assert [w["metric"] for w in a["tasks"]] == ["r2"]
    # Convergence is the training fit itself there: not asked, never counted as met or missed.
    unconverged = {w["metric"]: w["unconverged"] for w in a["widths"] if w["held_out"] == 0.25}
    assert unconverged["train_r2"] is None and unconverged["r2"] == 0
    text = width.format_analysis(a)
    assert "in-distribution R² ≥ 0.99" in text and "n/a (the training fit itself)" in text


def test_runs_of_another_length_are_the_longer_run_check_not_rungs_of_the_ladder():
    """Twice-as-long twins of two rungs: one crosses the threshold only with the extra steps
    (its shortfall was steps), the other does not (width). Neither moves the table's w*, which
    rests on the main-length runs alone; the one that crosses lower makes the fit's observation
    of that seed censored below it (issue 43); a longer run with no twin is counted, not matched."""
    pts = points({2: (1.0, 1.0)}, [4, 8, 16], [2, 4, 8, 16, 32], seeds=[1])
    for p in pts:
        p["steps"] = 100
    main = width.analyse([dict(p) for p in pts], criteria=[Criterion("r2", 0.95)])
    below = next(p for p in pts if (p["M"], p["width"]) == (8, 4))  # R² 0.95 + 0.04·ln(1/2): short
    assert below["r2"] < 0.95
    crosses = dict(below, steps=200, r2=0.96)
    stays = dict(next(p for p in pts if (p["M"], p["width"]) == (16, 2)), steps=200)
    stays["r2"] += 0.01
    orphan = dict(pts[0], width=64, steps=200)
    a = width.analyse([*pts, crosses, stays, orphan], criteria=[Criterion("r2", 0.95)])
    assert a["steps"] == 100 and a["runs"] == len(pts)
    def table(rows):
        return [r | dict(per_seed={s: {k: v for k, v in n.items() if k != "observed"}
                                   for s, n in r["per_seed"].items()}) for r in rows]

    assert table(a["widths"][0]["per_M"]) == table(main["widths"][0]["per_M"])
    observed = {r["M"]: r["per_seed"][1]["observed"] for r in a["widths"][0]["per_M"]}
    assert observed[8] == dict(lo=0.0, hi=4.0, exact=False, steps=200,
                               why="crossed lower at 200 steps (its first rung): left-censored")
    assert observed[16]["exact"] and observed[16]["steps"] == 100
    check = a["longer_run_check"]
    assert (check["longer"], check["crossed"], check["unmatched"]) == (2, 1, 1)
    (x,) = [x for x in check["pairs"] if x["M"] == 8]
    assert x["steps"] == (100, 200) and x["flips"] == {"held-out R² ≥ 0.95": "reached only at 200 steps"}
    assert [x["flips"] for x in check["pairs"] if x["M"] == 16] == [{}]
    text = width.format_analysis(a)
    assert "Longer-run check" in text and "| 8 | 2 | 4 | 0.25 | 1 | 100 → 200 |" in text
    assert "1 of 2 longer runs reach a threshold their 100-step twin misses" in text


def test_a_held_out_fraction_run_at_one_width_only_gives_n_star_not_a_width_ladder():
    """The cpu grid's shape: the width ladder at fraction 0.25, the other fractions at the widest
    rung only (the training-tasks ladder). Those single rungs make no w* row."""
    pts = [p for p in points({2: (1.0, 1.0)}, [4, 8, 16], [4, 8, 16], seeds=[1], held_outs=(0.25, 0.5, 0.75))
           if p["held_out"] == 0.25 or p["width"] == 16]
    a = width.analyse(pts, criteria=[Criterion("r2", 0.95)])
    assert {w["held_out"] for w in a["widths"]} == {0.25}
    assert [(t["depth"], t["width"]) for t in a["tasks"]] == [(2, 16)]


# ----------------------------------------------------------------------------- stores, report, figure

def hand_made(config: dict, r2: float, rmse: float, train_r2: float = 0.995) -> dict:
    """A hyperteacher report of one width × depth student with these held-out numbers."""
    values = dict(train=dict(r2=train_r2, rmse=0.01, sup=0.1), held_out=dict(r2=r2, rmse=rmse, sup=0.2))
    S = config["M"] + config["M"] * (config["M"] - 1) // 2
    return dict(family="hyperteacher", split=dict(n_train=S - int(config["held_out"] * S)),
                construction_within_certificate=True,
                rows=[dict(network="construction ε=0.01"),
                      dict(network="sgd custom", widths=config["widths"],
                           hidden_units=sum(config["widths"]))],
                metrics=[dict(network="sgd custom", side=side, metric=m, value=v)
                         for side, of_side in values.items() for m, v in of_side.items()])


def fill_store(out, runs, law) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with RunStore(out / "study.sqlite") as store:
        for run in runs:
            c = run.config
            r2 = law(c["widths"][0], c["M"], len(c["widths"]), c["held_out"])
            store.start(run.key, STUDY, "smoke", run.config)
            store.finish(run.key, hand_made(c, r2, 0.5 * math.sqrt(max(1 - r2, 1e-9))), 1.0,
                         version=provenance.code_version(), fingerprint=provenance.code_fingerprint())


PLANTED = {2: (1.5, 1 / 2.2), 4: (0.5, 1.2)}  # depth → (beta, c): w* = c·M^beta at held-out R² 0.95


def smoke_law(w, M, depth, held_out):
    # Depth 2: w* = M^1.5 / 2.2 (2.36, 3.64, 6.68 at M = 3, 4, 6); depth 4: w* = 1.2·√M (2.08, 2.4, 2.94).
    beta, c = PLANTED[depth]
    return law_r2(w, M, beta, c, held_out)


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # No committed cpu store of this study (one may be committed later): the figure reads smoke.
    monkeypatch.setattr(grids, "PACKAGED_RESULTS_DIR", tmp_path / "nothing-committed")
    return tmp_path


def test_the_report_and_figure_of_a_hand_made_store_show_the_planted_w_star(here, capsys):
    pytest.importorskip("matplotlib")
    from paper_figures import fig11_width_vs_M as fig11
    from paper_figures.common import read_csv, select

    out = study.default_out(STUDY, "smoke")
    runs = study.expand(STUDY, "smoke")[1]
    fill_store(out, runs, smoke_law)
    table = effects_table(STUDY, "smoke", out, {r.key for r in runs}, provenance.code_fingerprint())
    a = table["analysis"]
    by = {(w["held_out"], w["depth"], w["criterion"]): w for w in a["widths"]}
    for depth, (beta, c) in PLANTED.items():
        w = by[(0.25, depth, "held-out R² ≥ 0.95")]
        assert [r["mean"] for r in w["per_M"]] == pytest.approx([c * M**beta for M in (3, 4, 6)], rel=1e-9)
        assert w["fit"]["slope"] == pytest.approx(beta, abs=1e-9) and w["fit"]["n"] == 3
    assert by[(0.25, 2, "held-out R² ≥ 0.95")]["verdict"]["short"] == "1 < slope < 1.81 at 95% family-wise"
    sqrt_memo = by[(0.25, 4, "held-out R² ≥ 0.95")]["sqrt_memorisation_slope"]  # 0.90 over M 3–6
    assert by[(0.25, 4, "held-out R² ≥ 0.95")]["verdict"]["short"] == (
        f"0 < slope < {sqrt_memo:.2f} at 95% family-wise")
    assert by[(0.25, 2, "held-out R² ≥ 0.99")]["per_M"][-1]["status"] == "not reached by 1 of 1 seeds"
    # `report` prints it below the effects table, and --json carries it.
    assert study.main(["report", STUDY, "--scale", "smoke"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# width-vs-M (smoke): 36 runs done")
    assert "## The width SGD needs as M grows" in text
    assert "| held-out R² ≥ 0.95 | 2 | 0.25 | 1.50 [1.50, 1.50] (3 at 3 M) |" in text
    assert study.main(["report", STUDY, "--scale", "smoke", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["analysis"]["widths"][0]["per_M"][0]["M"] == 3
    # Figure 11 draws w* × depth (hidden units) at the smallest held-out fraction.
    result = fig11.make(here / "fig", progress=False)
    meta = json.loads((here / "fig" / f"{fig11.NAME}.json").read_text())
    assert meta["scales"] == {STUDY: "smoke"} and meta["held_out"] == 0.25 and meta["passed"]
    rows = read_csv(here / "fig" / f"{fig11.NAME}.csv")
    drawn = {ln.get_gid(): ln for axis in result.figure.axes for ln in axis.get_lines() if ln.get_gid()}
    for depth, (beta, c) in PLANTED.items():
        name = f"SGD depth {depth}, held-out R² ≥ 0.95"
        assert [r["y"] for r in select(rows, name, "a")] == pytest.approx(
            [depth * c * M**beta for M in (3, 4, 6)], rel=1e-9)
        np.testing.assert_allclose(drawn[name].get_ydata(), [r["y"] for r in select(rows, name, "a")])
    assert {r["series"] for r in rows} == set(drawn)
    assert all(t.get_title().endswith("[SMOKE DATA: 20-step runs, no result]") for t in result.figure.axes
               if t.get_title())


def test_the_smoke_study_runs_end_to_end_then_report_and_figure_read_it(here, capsys):
    """Real runs: the smoke grid, serially, into the working folder (a tmp folder here)."""
    pytest.importorskip("matplotlib")
    from paper_figures import fig11_width_vs_M as fig11

    out = study.default_out(STUDY, "smoke")
    summary = study.run_study(STUDY, "smoke", out, engine="serial", progress=False)
    assert (summary["runs"], summary["done"], summary["failed"]) == (36, 36, 0)  # every split builds
    assert study.main(["report", STUDY, "--scale", "smoke"]) == 0
    text = capsys.readouterr().out
    assert "## The width SGD needs as M grows" in text and "| w* of | depth | held out |" in text
    assert "training tasks needed n*(M) at the widest rung" in text  # two held-out fractions
    assert study.main(["report", STUDY, "--scale", "smoke", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["analysis"]
    assert a["runs"] == 36 and a["Ms"] == [3, 4, 6]
    # fractions × depths × thresholds (held-out and in-distribution); n*: held-out thresholds only
    assert len(a["widths"]) == 2 * 2 * 6 and len(a["tasks"]) == 2 * 4
    assert [u["M_term"] for u in a["construction"][0]["per_M"]] == [3, 4, 6]
    assert [u["units"] for u in a["memorisation"]["per_M"]] == [2 * 6, 2 * 10, 2 * 21]
    assert (out / "effects.md").read_text().count("## The width SGD needs as M grows") == 1
    result = fig11.make(here / "fig", progress=False)  # reads the store: nothing is run again
    assert sorted(p.suffix for p in result.files) == [".csv", ".json", ".pdf", ".png"]
    assert json.loads((here / "fig" / f"{fig11.NAME}.json").read_text())["runs"] == {
        STUDY: dict(done=36, failed=0)}


# ----------------------------------------------------------------------------- censored n*

RUNGS = [2.0**k for k in range(1, 8)]  # a ladder 2–128


def on_ladder(v: float) -> tuple[float, float]:
    """Where a ladder of RUNGS puts a value: its bracket, (0, 2] below, (128, ∞) above."""
    if v <= RUNGS[0]:
        return (0.0, RUNGS[0])
    if v > RUNGS[-1]:
        return (RUNGS[-1], math.inf)
    i = next(i for i, r in enumerate(RUNGS) if r >= v)
    return (RUNGS[i - 1], RUNGS[i])


def test_the_censored_fit_is_the_t_interval_when_nothing_is_censored():
    rng = np.random.default_rng(0)
    M = np.repeat(MS, 3)
    v = 2 * M**1.5 * np.exp(rng.normal(0, 0.2, len(M)))
    fit = width.censored_slope(M, [(x * (1 - 1e-3), x * (1 + 1e-3)) for x in v])  # narrow: ~ exact
    ols = width.fit_slope(M, v)
    for k in ("slope", "lo", "hi"):
        assert fit[k] == pytest.approx(ols[k], rel=1e-6), k
    assert fit["censored"] == 0 and fit["sigma"] == pytest.approx(
        math.sqrt(np.sum((np.log(v) - ols["intercept"] - ols["slope"] * np.log(M)) ** 2) / len(v)), rel=1e-4)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeds_that_never_reach_bias_a_fit_that_drops_them_and_not_the_censored_one(seed):
    """A planted slope of 1.5 on a ladder that ends at 128: about a third of the seeds never
    reach it (the large M's and the unlucky). Dropping them, as the fit before issue 32 did,
    leaves the lucky ones and a slope whose interval excludes 1.5; the censored fit covers it."""
    rng = np.random.default_rng(seed)
    M = np.repeat(MS, 20)
    observed = [on_ladder(x) for x in 2 * M**1.5 * np.exp(rng.normal(0, 0.4, len(M)))]
    fit = width.censored_slope(M, observed)
    assert fit["status"] == "fitted" and fit["censored"] > 40
    assert fit["lo"] <= 1.5 <= fit["hi"]
    kept = [(m, math.sqrt(a * b)) for m, (a, b) in zip(M, observed, strict=True)
            if a > 0 and math.isfinite(b)]
    dropped = width.fit_slope([m for m, _ in kept], [w for _, w in kept])
    assert dropped["hi"] < 1.5


def test_the_censored_fit_says_too_few_points_and_when_the_intervals_do_not_pin_the_slope():
    assert width.censored_slope([4, 8], [(2, 4), (4, 8)])["status"] == "too few points"
    # Any slope above ~5 meets all four intervals exactly: σ → 0 and the slope is not pinned.
    loose = width.censored_slope([4, 4, 8, 16], [(2, 4), (2, 4), (128, math.inf), (128, math.inf)])
    assert loose["status"] == "not identified" and loose["slope"] is None
    assert width.verdict(loose, 1.9)["short"] == "inconclusive (not identified)"
    # One censored point among pinned ones: fitted, with a wide interval.
    few = width.censored_slope([4, 8, 16, 32], [(2, 4), (4, 8), (8, 16), (128, math.inf)])
    assert few["status"] == "fitted" and few["lo"] < few["slope"] < few["hi"] and few["censored"] == 1


# ----------------------------------------------------------------------------- issue 43: censored w*, family

def planted_ladder(seeds=(1, 2, 3)):
    """w* = M (held-out R² 0.95) on a ladder 2–256, small noise, every run trained to 0.995."""
    return points({2: (1.0, 1.0)}, MS, [2.0**k for k in range(1, 9)], seeds=list(seeds), noise=0.05)


def test_an_m_whose_seed_never_reaches_stays_in_the_w_star_fit_right_censored():
    pts = planted_ladder()
    for p in pts:  # seed 3 at the largest M never reaches R² 0.95 inside the ladder
        if (p["M"], p["seed"]) == (32, 3):
            p["r2"] -= 0.5
    (w,) = width.analyse(pts, criteria=[Criterion("r2", 0.95)])["widths"]
    assert w["per_M"][-1]["mean"] is None  # the table's cell: not reached by 1 of 3
    assert w["per_M"][-1]["per_seed"][3]["observed"] == dict(lo=256.0, hi=None, exact=False, steps=None,
                                                             why="not reached: right-censored")
    fit = w["fit"]
    assert (fit["n"], fit["n_M"], fit["censored"], fit["Ms"][-1]) == (21, 7, 1, 32)
    # Its seed needs more than 256 (planted far above): it pulls the slope up, inside the interval.
    assert fit["lo"] <= 1.0 <= fit["hi"] and abs(fit["slope"] - 1.0) < 0.3


def test_a_step_limited_crossing_is_censored_not_exact():
    pts = planted_ladder()
    for p in pts:  # seed 1 at M = 32 stops short of training R² 0.99: its crossing is step-limited
        if (p["M"], p["seed"]) == (32, 1):
            p["train_r2"] = 0.9
            p["r2"] -= 0.04  # and crosses late, at twice the planted width
    (w,) = width.analyse(pts, criteria=[Criterion("r2", 0.95)])["widths"]
    seed = w["per_M"][-1]["per_seed"][1]
    assert seed["converged"] is False and w["per_M"][-1]["unconverged"] == 1
    assert seed["observed"] == dict(lo=0.0, hi=pytest.approx(seed["width"]), exact=False, steps=None,
                                    why="step-limited (unconverged): censored")
    assert w["fit"]["censored"] == 1
    # Taken as exact, the late crossing pulls the slope up; censored, it only bounds w*(32) above.
    exact = [(r["M"], (n["width"], n["width"])) for r in w["per_M"] for n in r["per_seed"].values()]
    as_exact = width.censored_slope([m for m, _ in exact], [iv for _, iv in exact], w["fit"]["confidence"])
    assert as_exact["slope"] > w["fit"]["slope"] + 0.02
    assert w["fit"]["lo"] <= 1.0 <= w["fit"]["hi"]


def test_the_slope_intervals_are_bonferroni_over_the_fits_that_give_a_verdict():
    for m in (1, 3, 8):
        assert width.bonferroni(m)["each"] == pytest.approx(1 - 0.05 / m, rel=1e-15)
    assert width.bonferroni(3)["text"].startswith(
        "95% family-wise, Bonferroni over 3 fits: each at 1 − 0.05/3")
    pts = points({2: (1.0, 1.0), 4: (1.5, 0.5)}, MS, [2.0**k for k in range(1, 9)], seeds=[1, 2], noise=0.05)
    # Two criteria × two depths; RMSE ≤ 0 is never reached: too few points, no verdict.
    a = width.analyse(pts, criteria=[Criterion("r2", 0.95), Criterion("rmse", 0.1), Criterion("rmse", 0.0)])
    fitted = [w for w in a["widths"] if w["fit"]["status"] == "fitted"]
    assert len(a["widths"]) == 6 and len(fitted) == 4 and a["family"]["m"] == 4
    assert all(w["fit"]["confidence"] == pytest.approx(1 - 0.05 / 4) for w in a["widths"])
    assert all(w["verdict"]["short"].endswith("at 95% family-wise") or w["verdict"]["call"] == "inconclusive"
               for w in fitted)
    line = "95% family-wise, Bonferroni over 4 fits: each at 1 − 0.05/4 = 98.75%"
    assert line in width.format_analysis(a) and line in width.format_analysis(a, compact=True)
    # The interval at 1 − 0.05/4 is the wider one: the same fit at 95% sits inside it.
    w = fitted[0]
    observed = [(r["M"], (n["observed"]["lo"], n["observed"]["hi"])) for r in w["per_M"]
                for n in r["per_seed"].values()]
    plain = width.censored_slope([m for m, _ in observed], [iv for _, iv in observed])
    assert w["fit"]["lo"] < plain["lo"] < plain["hi"] < w["fit"]["hi"]


def test_a_fit_of_one_sided_observations_gives_no_slope():
    """Crossings known only from above ((0, w*]: step-limited) beside one seed never reached make
    the likelihood run off a cliff (the cpu store's held-out fits gave −12 to −39 before this
    rule): without three values bounded on both sides at two M there is no slope."""
    M = [6, 6, 8, 8, 16, 16, 32, 32]
    one_sided = [(0.0, 64.0), (256.0, math.inf), (0.0, 32.0), (0.0, 32.0), (0.0, 64.0), (0.0, 48.0),
                 (0.0, 128.0), (0.0, 96.0)]
    fit = width.censored_slope(M, one_sided)
    assert fit["status"] == "not identified" and fit["slope"] is None and "1 of 8" not in fit["reason"]
    assert fit["reason"].startswith("0 of 8 observations bounded on both sides")
    # Three two-sided values at two M (and the rest one-sided) are enough to fit.
    some = [(40.0, 40.0), (32.0, 64.0), *one_sided[2:5], (48.0, 48.0), *one_sided[6:]]
    assert width.censored_slope(M, some)["status"] == "fitted"
