"""The image experiment as a study (issue 25): the driver runs verify.images.train per grid point,
fingerprints its own code, and reports the correlation of decodability with held-out success.

The correlation's bootstrap interval is checked against Fisher's width, and the ladders'
effect rule on planted stores; the smoke study runs end to end.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("diffusers")

from verify.images import study_report as report  # noqa: E402
from verify.learning.records import mean_sd  # noqa: E402
from verify.studies import commands as study  # noqa: E402
from verify.studies import (
    provenance,
    verdicts,  # noqa: E402
)
from verify.studies.store import RunStore  # noqa: E402

STUDY = "image-composition"


# --- the statistics, against what the math says --------------------------------------------------

def test_correlation_points_are_scipys_and_the_bootstrap_interval_has_the_width_fisher_predicts():
    from scipy import stats

    rng = np.random.default_rng(3)
    rho, n = 0.6, 400
    x, e = rng.standard_normal((2, n))
    y = rho * x + math.sqrt(1 - rho**2) * e
    fit = report.correlation(x, y, n_boot=4000)
    assert fit["status"] == "fitted"
    assert fit["pearson"]["r"] == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert fit["spearman"]["r"] == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    # Fisher: atanh(r) has sd 1/sqrt(n − 3), so the 95% interval of r is about
    # 2·1.96·(1 − ρ²)/sqrt(n) = 0.126 wide; the bootstrap's must be near it.
    p = fit["pearson"]
    assert p["lo"] < p["r"] < p["hi"]
    assert 0.10 < p["hi"] - p["lo"] < 0.16
    assert p["lo"] < rho < p["hi"]
    assert p["degenerate"] == 0


def test_correlation_of_independent_samples_has_an_interval_around_zero_and_a_monotone_one_is_one():
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((2, 200))
    fit = report.correlation(x, y, n_boot=2000)
    assert fit["pearson"]["lo"] < 0 < fit["pearson"]["hi"]
    assert fit["spearman"]["lo"] < 0 < fit["spearman"]["hi"]
    z = np.linspace(0, 1, 12)
    mono = report.correlation(z, np.exp(3 * z), n_boot=2000)
    assert mono["spearman"]["r"] == pytest.approx(1.0) and mono["spearman"]["lo"] == pytest.approx(1.0)
    assert mono["pearson"]["r"] < 1  # not linear
    assert mono["pearson"]["degenerate"] > 0 or mono["pearson"]["lo"] < mono["pearson"]["hi"]


def test_correlation_refuses_a_constant_side_and_too_few_points():
    assert report.correlation([0.1, 0.2, 0.3], [0.5, 0.5, 0.5])["pearson"] is None
    assert report.correlation([0.1, 0.2], [0.1, 0.3])["status"].startswith("too few")


def test_within_takes_out_each_groups_mean():
    got = report.within([1.0, 3.0, 10.0, 14.0, 5.0], ["a", "a", "b", "b", "c"])
    np.testing.assert_allclose(got, [-1, 1, -2, 2, 0])


def _group(n_train, params, values):
    """A setting's row as _group_rows makes it, from its seeds' held-out success."""
    mean, sd = mean_sd(list(values))
    return dict(setting=dict(train_combinations=n_train, parameters=params), runs=len(values),
                test_success_mean=mean, test_success_sd=sd, test_success_values=dict(enumerate(values, 1)))


PLAN = verdicts.Plan(test="welch", claims=(
    verdicts.Claim("train_combinations", "helps"),
    verdicts.Claim("parameters", "helps", floor=0.1, why="nothing composes below it")))


def test_ladder_effects_compare_the_ends_of_each_ladder_at_every_other_setting():
    groups = [_group(16, 100, (0.10, 0.11, 0.09)), _group(32, 100, (0.30, 0.31, 0.29)),
              _group(48, 100, (0.50, 0.51, 0.49)),
              _group(16, 900, (0.50, 0.51, 0.49)), _group(48, 900, (0.30, 0.31, 0.29)),
              _group(16, 400, (0.2, 0.6, 1.0)), _group(48, 400, (0.19, 0.20, 0.21)),
              _group(8, 100, (0.01, 0.02, 0.03)), _group(8, 2500, (0.05, 0.06, 0.07))]
    effects, notes = report.ladder_effects(groups, PLAN)
    data = {(e["factor"], e["at"].get("parameters", e["at"].get("train_combinations"))): e for e in effects}
    e = data["train_combinations", 100]
    assert e["effect"] == "helps" and e["verdict"]["difference"] == pytest.approx(0.48)
    assert (e["low"], e["high"]) == (8, 48) and e["verdict"]["agrees"] == "yes"
    assert e["ladder"] == [(8, pytest.approx(0.02)), (16, pytest.approx(0.10)), (32, pytest.approx(0.30)),
                           (48, pytest.approx(0.50))]
    assert data["train_combinations", 900]["effect"] == "hurts"
    assert data["train_combinations", 900]["verdict"]["agrees"] == "NO"
    # −0.4, but one arm's seeds spread over 0.2–1.0: Welch t(2.0) = −1.73, no test rejects.
    e = data["train_combinations", 400]
    assert e["effect"] == "inconclusive" and e["verdict"]["agrees"] == "inconclusive"
    assert e["verdict"]["df"] == pytest.approx(2.0, abs=0.01) and "MDE" in e["test"]
    # The ends of each model-size ladder, whatever lies between: 100 → 900 (2500 only at 8).
    size = data["parameters", 16]
    assert size["effect"] == "helps" and (size["low"], size["high"]) == (100, 900)
    assert data["parameters", 48]["effect"] == "hurts"
    assert ("parameters", 32) not in data  # one model only: no ladder
    # At 8 combinations both models are below the claim's floor: the claim is not tested there.
    floor = data["parameters", 8]
    assert floor["effect"] == "not testable" and floor["verdict"]["agrees"] == "not testable"
    assert floor["verdict"]["p"] is None and "below the floor 0.1" in floor["test"]
    assert any(n.startswith("floor 0.1 for parameters") for n in notes)
    # Holm's family: every test that ran (the floor's comparison is none of them).
    assert sum(e["verdict"]["p"] is not None for e in effects) == len(effects) - 1
    assert f"Holm-corrected over the study's {len(effects) - 1} tests" in notes[0]


def test_one_seed_an_arm_is_not_testable_and_equal_seeds_make_an_exact_difference():
    (e,), _ = report.ladder_effects([_group(16, 100, (0.5,)), _group(48, 100, (0.9,))], PLAN)
    assert e["effect"] == "not testable" and e["verdict"]["agrees"] == "not testable"
    (e,), _ = report.ladder_effects([_group(16, 100, (0.5, 0.5)), _group(48, 100, (0.515, 0.515))], PLAN)
    assert e["effect"] == "helps" and e["verdict"]["p"] == 0.0


def test_the_best_layer_is_the_denoisers_never_the_text_encoders():
    d = {"text_encoder": dict(test_f1=1.0), "down_blocks.0.resnets.0": dict(test_f1=0.4),
         "up_blocks.0.resnets.0": dict(test_f1=0.7), "text_encoder@uncond": dict(test_f1=1.0)}
    assert report.best_unet_layer(d) == "up_blocks.0.resnets.0"
    assert report.best_unet_layer({"text_encoder": dict(test_f1=1.0)}) is None


# --- the driver runs the program the study names -------------------------------------------------

def test_the_study_names_its_program_and_the_driver_resolves_runs_with_that_programs_parser():
    from verify.images import train

    name, runs = study.expand(STUDY, "smoke")
    assert name == STUDY and study.study_program(STUDY) == "verify.images.train"
    assert {r.program for r in runs} == {"verify.images.train"} and len(runs) == 4
    for r in runs:
        assert r.config == train.run_config(train.parse_args([*r.argv, "--no-progress"]))  # the command line
        assert r.config == train.run_config(train.from_key(r.config))  # and the stored key
        assert r.config["program"] == "verify.images.train" and "out" not in r.config
    assert "--fractions" in runs[0].argv and runs[0].argv[runs[0].argv.index("--fractions") + 1:][:2] == (
        "0.5", "1.0")
    assert {r.config["train_combinations"] for r in runs} == {24, 48}
    # Every verify.sgd study still runs verify.sgd (kernel-vs-sgd runs verify.kernel).
    assert {study.study_program(n) for n in study.study_names() if n not in (STUDY, "kernel-vs-sgd")} == {
        "verify.sgd"}
    assert study.study_program("kernel-vs-sgd") == "verify.kernel"


def test_the_fingerprint_of_an_image_run_covers_the_image_code_and_not_the_drivers():
    modules = provenance.code_modules("verify.images.train")
    assert {"verify.images.train", "verify.images.denoiser", "verify.images.pipeline",
            "verify.images.activations", "verify.images.probes", "verify.images.judges",
            "constructions.tasks.images"} <= set(modules)
    assert not set(modules) & set(provenance.NOT_RESULT_CODE)
    assert "verify.images.study_report" not in modules  # the report reads results, it makes none
    assert provenance.code_fingerprint("verify.images.train") != provenance.code_fingerprint()
    assert "verify.images.train" not in provenance.code_modules()


def _yaml(tmp_path, body: str, name="s.yaml") -> str:
    path = tmp_path / name
    path.write_text("method: grid\n" + body)
    return str(path)


@pytest.mark.parametrize("body, says", [
    ("program: verify.nothing\nparameters:\n  seed: {value: 1}\n", "unknown program 'verify.nothing'"),
    ("program: verify.images.train\nparameters:\n  width: {value: 8}\n", "unknown parameter 'width'"),
    ("program: verify.images.train\nparameters:\n  eps: {value: 0.1}\n", "unknown parameter 'eps'"),
])
def test_a_bad_image_study_is_refused_in_one_line(tmp_path, capsys, body, says):
    code = study.main(["run", _yaml(tmp_path, body), "--scale", "paper", "--engine", "serial",
                       "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("flag", [["--pack", "2"], ["--checkpoint-minutes", "5"]])
def test_sgd_only_run_flags_are_refused_for_an_image_study(tmp_path, capsys, flag):
    code = study.main(["run", STUDY, "--scale", "smoke", "--out", str(tmp_path / "o"), *flag])
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"{flag[0]} applies to verify.sgd's studies" in err and len(err.splitlines()) == 1


def test_a_smoke_study_runs_end_to_end_train_analyse_report_export(tmp_path, capsys):
    """The whole path: the driver trains each grid point's denoiser, saves and reloads it,
    generates, probes and judges; the store keeps the reports; report and export read them back."""
    out = tmp_path / "o"
    assert study.main(["run", STUDY, "--scale", "smoke", "--engine", "serial", "--out", str(out), "--json",
                       "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["done"], summary["failed"], summary["program"]) == (4, 0, "verify.images.train")
    assert summary["code_fingerprint"] == provenance.code_fingerprint("verify.images.train")
    with RunStore(out / "study.sqlite", readonly=True) as store:
        rows = store.rows()
    assert {r["status"] for r in rows} == {"done"}
    for r in rows:  # each run saved its pipeline into its own folder, as a real model would sit
        folder = Path(r["report"]["model"]["folder"])
        assert folder.parent == out / "runs" / r["key"][:16] and (folder / "model_index.json").is_file()
    # Nothing left to do: a second run trains nothing.
    assert study.main(["run", STUDY, "--scale", "smoke", "--engine", "serial", "--out", str(out), "--json",
                       "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["already_done"] == 4

    assert study.main(["report", STUDY, "--scale", "smoke", "--out", str(out), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["runs_done"] == 4 and len(table["runs"]) == 4 and len(table["groups"]) == 2
    for run, row in zip(table["runs"], sorted(rows, key=lambda r: (r["config"]["train_combinations"],
                                                                   r["config"]["seed"])), strict=True):
        assert run["key"] == row["key"] and run["code"] == "current"
        assert run["test_success"] == row["report"]["success"]["test"]["rate"]
        assert run["decodability"] == row["report"]["decodability"][run["best_layer"]]["test_f1"]
    assert [e["factor"] for e in table["effects"]] == ["train_combinations"]
    assert table["correlation"]["n"] == 4
    md = (out / "effects.md").read_text()
    assert md.startswith("# image-composition (smoke): 4 runs done, 0 failed") and "## Runs" in md
    assert study.main(["export", STUDY, "--scale", "smoke", "--out", str(out)]) == 0
    lines = (out / "runs.csv").read_text().splitlines()
    layers = len(rows[0]["report"]["decodability"])
    assert len(lines) == 1 + 4 * layers and "test_f1" in lines[0]
    # Under another fingerprint (a refactor of the image code) a stored run's behaviour record is
    # replayed; its configuration also holds `program`, which no flag sets, and the replay skips it.
    from verify.studies import behaviour

    judge = behaviour.Judge("verify.images.train", "a-fingerprint-of-other-code")
    assert judge(rows[0]) == "current", judge.why


def test_an_image_run_loads_only_fingerprinted_modules_or_ones_named_as_changing_no_result(tmp_path):
    argv = ["--preset", "tiny", "--steps", "2", "--batch", "4", "--sample-steps", "2", "--n-seeds", "1",
            "--eval-prompts", "2", "--no-progress", "--out", str(tmp_path / "r")]
    code = ("import sys\nfrom verify.images import train\n"
            f"train.run(train.parse_args({argv!r}))\n"
            "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('theory', 'constructions', "
            "'verify')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert {"verify.images.denoiser", "verify.images.probes", "constructions.tasks.images"} <= loaded
    modules = set(provenance.code_modules("verify.images.train"))
    not_result = set(provenance.NOT_RESULT_CODE)
    assert loaded - modules <= not_result, loaded - modules - not_result


def test_figure_12s_line_is_least_squares_and_its_band_narrows_as_runs_grow():
    from paper_figures.fig12_images import fit_band

    rng = np.random.default_rng(5)
    widths = []
    for n in (12, 200):
        x = rng.uniform(0.3, 0.9, n)
        y = 0.8 * x - 0.1 + 0.05 * rng.standard_normal(n)
        grid = np.linspace(0.3, 0.9, 7)
        line, lo, hi, fit = fit_band(x, y, grid, n_boot=2000)
        slope, intercept = np.polyfit(x, y, 1)
        assert fit["slope"] == pytest.approx(slope) and fit["intercept"] == pytest.approx(intercept)
        np.testing.assert_allclose(line, slope * grid + intercept)
        assert np.all(lo <= line) and np.all(line <= hi)
        widths.append(float(np.mean(hi - lo)))
        if n == 200:  # the truth inside the band, and the band about 2·1.96·σ/sqrt(n)·(a leverage factor)
            truth = 0.8 * grid - 0.1
            assert np.all(lo < truth) and np.all(truth < hi)
    # sd of the fitted line ∝ 1/sqrt(n): about sqrt(200 / 12) = 4 times narrower.
    assert 2.5 < widths[0] / widths[1] < 7


# --- decodability beyond coverage: the partial fit over clusters ---------------------------------

def _clustered(effect: float, seed: int, split_seeds: int = 3, runs: int = 4):
    """Runs at coverages 16/32/48 × split seeds: success rises with coverage, and by `effect`
    per unit of decodability within a coverage; each (coverage, split seed) shares a shift."""
    rng = np.random.default_rng(seed)
    x, y, cov, clusters = [], [], [], []
    for c in (16, 32, 48):
        for s in range(split_seeds):
            shift = rng.normal(0, 0.05)
            for _ in range(runs):
                d = 0.5 + c / 100 + shift + rng.normal(0, 0.05)
                x.append(d)
                y.append(c / 60 + effect * (d - 0.5 - c / 100) + rng.normal(0, 0.02))
                cov.append(c)
                clusters.append((c, s))
    return x, y, cov, clusters


def test_the_partial_fit_is_fwl_and_its_cluster_interval_finds_a_planted_effect_and_no_effect():
    x, y, cov, clusters = _clustered(0.8, 0)
    fit = report.partial_fit(x, y, cov, clusters, n_boot=2000)
    # Frisch–Waugh–Lovell: the coefficient is least squares of y on decodability and coverage dummies.
    design = np.column_stack([x, *[np.equal(cov, c).astype(float) for c in (16, 32, 48)]])
    assert fit["slope"] == pytest.approx(np.linalg.lstsq(design, y, rcond=None)[0][0], rel=1e-9)
    assert fit["clusters"] == 9 and fit["status"] == "fitted" and fit["verdict"] == "> 0"
    assert fit["lo"] > 0 and fit["slope_lo"] < 0.8 < fit["slope_hi"]
    cm = fit["cluster_means"]
    assert cm["df"] == 9 - 3 - 1 and cm["lo"] < 0.8 < cm["hi"] and cm["verdict"] == "> 0"


def test_the_cluster_mean_test_holds_its_size_where_the_cluster_bootstrap_does_not():
    """100 planted null studies of 9 clusters: the verdict's test calls an effect at about its
    5% (binomial: at most 12 of 100 at 4 sd), while the cluster bootstrap's percentile interval,
    which the report shows as descriptive only, excludes 0 far more often (17 of 100 measured)."""
    verdicts_called = bootstrap_called = 0
    for seed in range(100):
        fit = report.partial_fit(*_clustered(0.0, seed), n_boot=400)
        verdicts_called += fit["verdict"] != "inconclusive"
        bootstrap_called += not fit["lo"] <= 0 <= fit["hi"]
    assert verdicts_called <= 12, verdicts_called
    assert bootstrap_called > verdicts_called


def test_the_partial_fit_gives_no_interval_below_eight_clusters_and_no_test_without_df():
    x, y, cov, clusters = _clustered(0.8, 0, split_seeds=2)
    fit = report.partial_fit(x, y, cov, clusters, n_boot=500)
    assert fit["clusters"] == 6 and fit["lo"] is None and "fewer than 8" in fit["status"] and fit["r"] > 0
    assert fit["cluster_means"]["df"] == 2 and fit["verdict"] == "> 0"  # 6 clusters still test
    one = report.partial_fit(*_clustered(0.8, 0, split_seeds=1), n_boot=100)
    assert one["cluster_means"]["slope"] is None and one["verdict"] == "inconclusive"
    assert "no degrees of freedom" in one["cluster_means"]["status"]


def test_runs_of_one_seed_on_other_splits_are_all_in_their_settings_arm():
    runs = [dict(train_combinations=16, parameters=100, model="m", seed=1, split_seed=s, train_success=1.0,
                 test_success=v, decodability=0.5, text_decodability=0.5) for s, v in ((0, 0.1), (1, 0.3))]
    (group,) = report._group_rows(runs)
    assert sorted(group["test_success_values"].values()) == [0.1, 0.3] and group["runs"] == 2


def _unit_group(n_train, params, by_split):
    """A setting's row with its runs' values keyed `split/seed` and their split-seed means."""
    values = {f"{k}/{i}": v for k, vs in by_split.items() for i, v in enumerate(vs, 1)}
    mean, sd = mean_sd(list(values.values()))
    return dict(setting=dict(train_combinations=n_train, parameters=params), runs=len(values),
                test_success_mean=mean, test_success_sd=sd, test_success_values=values,
                test_success_units={k: float(np.mean(vs)) for k, vs in by_split.items()})


def test_with_the_split_seed_as_unit_a_test_reads_one_mean_a_split_and_pairs_where_the_claim_says():
    """Issue 43: six runs an arm on three splits are three values, not six (the seeds within a split
    are not independent draws of the design); the model-size claim pairs its arms by split."""
    claims = (verdicts.Claim("train_combinations", "helps", delta=0.3, why="w"),
              verdicts.Claim("parameters", "helps", delta=0.1, why="w", test="paired"))
    by_run, by_unit = (verdicts.Plan(test="welch", claims=claims, unit=u) for u in (None, "split_seed"))
    groups = [_unit_group(16, 100, {0: (0.1, 0.12), 1: (0.3, 0.32), 2: (0.2, 0.21)}),
              _unit_group(48, 100, {0: (0.5, 0.52), 1: (0.7, 0.71), 2: (0.6, 0.62)}),
              _unit_group(48, 900, {0: (0.55, 0.57), 1: (0.76, 0.75), 2: (0.66, 0.67)})]
    runs = {(e["factor"]): e for e in report.ladder_effects(groups, by_run)[0]}
    units = {(e["factor"]): e for e in report.ladder_effects(groups, by_unit)[0]}
    assert runs["train_combinations"]["verdict"]["n"] == (6, 6)
    assert units["train_combinations"]["verdict"]["n"] == (3, 3)
    assert units["train_combinations"]["verdict"]["df"] < runs["train_combinations"]["verdict"]["df"]
    size = units["parameters"]["verdict"]
    assert size["test"] == "paired t" and size["n"] == (3, 3) and size["df"] == 2.0
    assert size["difference"] == pytest.approx((0.05 + 0.05 + 0.055) / 3, abs=1e-12)
    _, notes = report.ladder_effects(groups, by_unit)
    assert "split seeds (the unit" in notes[0] and "for parameters: paired" in notes[0]
    assert any(n.startswith("split seeds for 80% power") for n in notes)


def test_the_primary_fit_is_fragile_where_one_cluster_carries_it_and_robust_where_none_does():
    rng = np.random.default_rng(5)
    coverage = [c for c in (16, 32, 48) for _ in range(3) for _ in range(2)]
    clusters = [(c, s) for c in (16, 32, 48) for s in range(3) for _ in range(2)]
    x = rng.normal(0.5, 0.1, len(clusters))
    robust = [0.02 * c + 2.0 * xi + rng.normal(0, 0.01) for c, xi in zip(coverage, x, strict=True)]
    fit = report.cluster_means_fit(x, robust, coverage, clusters)
    assert fit["verdict"] == "> 0" and not fit["fragile"] and len(fit["leave_one_out"]) == 9
    # No relation but one cluster far off the line in the direction of its decodability.
    carried = [0.02 * c + rng.normal(0, 0.05) for c in coverage]
    x2 = x.copy()
    x2[[0, 1]] += 1.0  # cluster (16, 0)
    carried[0] += 1.5
    carried[1] += 1.5
    fit = report.cluster_means_fit(x2, carried, coverage, clusters)
    assert fit["verdict"] == "> 0" and fit["p"] < 0.001  # significant, on the strength of one cluster
    assert fit["fragile"] and fit["flips"] == 1
    assert [r["left_out"] for r in fit["leave_one_out"] if r["verdict"] != "> 0"] == [(16, 0)]


def test_an_undecided_claim_states_its_cost_in_split_seeds_runs_and_core_hours():
    """Issue 43: the image model-size claim is not run, its cost is stated. Here the paired
    model-size claim is inconclusive at 3 split seeds of 2 runs each: the power calculation's
    split seeds, less the 3 run, times 2 + 2 runs a split seed at 100 s and 300 s a run."""
    claims = (verdicts.Claim("parameters", "helps", delta=0.1, why="w", test="paired"),)
    plan = verdicts.Plan(test="welch", claims=claims, unit="split_seed")
    groups = [_unit_group(48, 100, {0: (0.5, 0.52), 1: (0.7, 0.71), 2: (0.6, 0.62)}),
              _unit_group(48, 900, {0: (0.55, 0.57), 1: (0.66, 0.65), 2: (0.7, 0.72)})]
    seconds = {(48, 100): 100.0, (48, 900): 300.0}
    (e,), notes = report.ladder_effects(groups, plan, seconds)
    assert e["effect"] == "inconclusive"
    (power,) = verdicts.power_rows(
        [report.ladder_comparisons(groups, "parameters", plan)[0][1]], plan, 2)
    extra = power["seeds_needed"] - 3
    (line,) = [n for n in notes if n.startswith("cost to resolve")]
    assert line == (f"cost to resolve parameters 100 → 900 (at train_combinations 48): {extra} more split "
                    f"seeds an arm ({power['seeds_needed']} in all, for an effect of 0.1), {4 * extra} runs, "
                    f"about {extra * 2 * 400 / 3600:.1f} core-hours at this store's run times")
    # Without run times (a report of groups alone), no cost; a decided claim costs nothing.
    assert not any(n.startswith("cost") for n in report.ladder_effects(groups, plan)[1])
    decided = [_unit_group(48, 100, {0: (0.5, 0.5), 1: (0.7, 0.7), 2: (0.6, 0.6)}),
               _unit_group(48, 900, {0: (0.9, 0.9), 1: (1.0, 1.0), 2: (0.95, 0.95)})]
    assert not any(n.startswith("cost") for n in report.ladder_effects(decided, plan, seconds)[1])
