"""verify.sweep: the slope fits and their intervals, and the command's outputs."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import verify.theorem.sweep as sweep


@given(slope=st.floats(-3, 3), seed=st.integers(0, 10_000), noise=st.floats(1e-4, 0.1))
def test_interval_covers_the_true_slope_of_noisy_data_with_seed_offsets(slope, seed, noise):
    rng = np.random.default_rng(seed)
    x = np.tile(np.linspace(0, 5, 12), 3)
    seeds = np.repeat([0, 1, 2], 12)
    y = slope * x + np.array([0.0, 3.0, -7.0])[seeds] + rng.normal(0, noise, len(x))
    fit = sweep.fit_slope(x, y, "t", "g", slope, seeds=seeds)
    # A 95% interval misses the truth 5% of the time; at 6 standard errors it essentially never does.
    half = (fit.ci_high - fit.ci_low) / 2
    assert abs(fit.slope - slope) <= half * 6 / 2.0
    # Without per-seed intercepts the offsets would be mistaken for scatter.
    pooled = sweep.fit_slope(x, y, "t", "g", slope)
    assert pooled.ci_high - pooled.ci_low > fit.ci_high - fit.ci_low


def test_exact_data_gives_a_zero_width_interval_that_still_rejects_a_wrong_theory():
    x = np.array([4, 8, 16, 32, 64, 4, 8, 16, 32, 64], float)
    y = 1000 + x + np.repeat([0, 512], 5)
    assert sweep.fit_slope(x, y, "units vs M", "", 1.0, seeds=np.repeat([0, 1], 5)).agrees
    assert not sweep.fit_slope(x, y, "units vs M", "", 0.0, seeds=np.repeat([0, 1], 5)).agrees
    assert not sweep.fit_slope(x, y + 0.01 * x**2, "units vs M", "", 1.0, seeds=np.repeat([0, 1], 5)).agrees


@given(deltas=st.lists(st.floats(0, 1), min_size=3, max_size=12), scale=st.floats(1e-6, 1e-1))
def test_offset_bias_bound_bounds_the_slope_of_any_bounded_offset(deltas, scale):
    L = np.linspace(0, 7, len(deltas))
    r = scale * np.asarray(deltas)  # any offset with 0 ≤ r ≤ scale
    centred = L - L.mean()
    slope_of_r = float(centred @ (r - r.mean()) / (centred @ centred))
    assert abs(slope_of_r) <= sweep.offset_bias_bound(L, np.full(len(L), scale)) * (1 + 1e-12) + 1e-300


def test_one_over_eps_growth_is_caught_as_a_wrong_exponent():
    """Sizes that grow like 1/ε (a linear rather than square-root N) must fail the ½ fit."""
    eps = np.array([1e-3, 1e-4, 1e-5])
    L = np.log(1 / eps)
    fit = sweep.fit_slope(L, np.log(512 * 30 / eps + 48), "log units", "", 0.5,
                          tolerance=sweep.offset_bias_bound(L, np.full(3, 1e-3)))
    assert fit.slope == pytest.approx(1.0, abs=1e-3) and not fit.agrees


DEFAULT_ASYMPTOTIC = [e for e in sweep.SweepConfig().eps if e <= sweep.SweepConfig().asymptotic_eps]


def rate_rows(error_of_N, seeds=(0, 1, 2), ICa=11.0 * 11.0):
    """Sweep rows on the default grid's asymptotic ε: N = ⌈√(I·C·a/ε)⌉, certificate I·C·a/N²,
    and a measured error given as a function of (N, seed)."""
    rows = []
    for seed in seeds:
        for eps in DEFAULT_ASYMPTOTIC:
            N = math.ceil(math.sqrt(ICa * (1 + 0.1 * seed) / eps))
            rows.append(dict(N=N, seed=seed, certificate=ICa * (1 + 0.1 * seed) / N**2,
                             measured=error_of_N(N, seed)))
    return rows


def test_rate_fit_passes_an_n_minus_2_error_with_a_bounded_quasi_periodic_factor():
    """The phase form's prediction: (C/N²) times a factor that wobbles with N but has no trend."""
    fit = sweep.rate_fit(rate_rows(lambda N, s: 121 / N**2 * (0.26 + 0.05 * math.sin(3.7 * N + s))), "g")
    assert fit.tested and fit.agrees, fit


@pytest.mark.parametrize("rate", [1.0, 3.0])
def test_rate_fit_fails_an_error_of_the_wrong_rate(rate):
    """An error ∝ N⁻¹ (a network whose squares converge too slowly, even one far under the
    certificate here) and one ∝ N⁻³ (a measurer that weakens as N grows) both fail: the old
    one-sided fit (slope ≤ −2) passed the second."""
    rows = rate_rows(lambda N, s: 1e-4 * (347 / N) ** rate)
    fit = sweep.rate_fit(rows, "g")
    assert fit.tested and not fit.agrees, fit
    assert all(r["measured"] <= r["certificate"] for r in rows) or rate == 1.0


def test_a_network_whose_error_decays_like_one_over_n_fails_the_rate_fit(tmp_path, monkeypatch):
    """End to end: a structured evaluator whose squares use √N knots while its certificate
    claims N (error ∝ N⁻¹). The rate fit fails, and so does the dense count's agreement."""
    import constructions.shallow as shallow

    real = shallow.square_interpolant
    monkeypatch.setattr(shallow, "square_interpolant", lambda t, N: real(t, max(1, math.isqrt(N))))
    argv = [*TINY, "--eps", "1e-2", "1e-4", "--M", "3", "4", "--seeds", "0", "1", "--asymptotic-eps", "1e-2",
            "--out", str(tmp_path)]
    assert sweep.main(argv) == 1
    payload = strict_json((tmp_path / "sweep.json").read_text())
    rate = [f for f in payload["fits"] if f["name"] == sweep.ERROR_FIT]
    assert rate and all(f["status"] == "fail" and f["slope"] > 0.5 for f in rate), rate
    assert not any(r["passed"] for r in payload["rows"])


def test_a_grid_too_narrow_to_tell_the_rate_is_refused():
    narrow = sweep.SweepConfig(eps=(1e-3, 3e-4), seeds=(0, 1, 2))
    assert sweep.eps_fit_gap(narrow) is None  # the units' ε-slope can be tested on it
    gap = sweep.rate_fit_gap(narrow)
    assert gap and "N⁻¹" in gap.reason
    assert list(sweep.untestable(narrow).values()) == [[repr(sweep.ERROR_FIT)]]
    assert sweep.rate_fit_gap(sweep.SweepConfig()) is None
    assert sweep.rate_tolerance(0.5 * np.log(1 / np.array(DEFAULT_ASYMPTOTIC))) < sweep.MAX_RATE_TOLERANCE


def test_sweep_counts_on_the_built_network_and_a_padded_one_is_caught(monkeypatch):
    """Sizes come from the built nn.Sequential: one extra unit, padded in with zeros or an
    always-off ReLU (so the function and the agreement check are unchanged), is counted and
    fails the count check, whether the network is built with its weights or, too large for
    that, as shapes only."""
    from constructions.shallow import ShallowConstruction, build_shallow
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
    from verify.theorem.check import count_built

    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=3, K=2, seed=0))
    net = build_shallow(teacher, 1e-2)
    good = count_built(net, teacher, 0)
    assert good["counted_from"] == "nn.Sequential" and good["count_ok"] is True
    real = ShallowConstruction.to_sequential

    def with_extra_unit(weight_in: float, weight_out: float):
        def build(self, dtype=torch.float64):
            dense = real(self, dtype)
            first, second = dense[0], dense[2]
            wider = torch.nn.Linear(first.in_features, first.out_features + 1, dtype=dtype)
            wide_next = torch.nn.Linear(first.out_features + 1, second.out_features, dtype=dtype)
            with torch.no_grad():
                wider.weight[:-1], wider.bias[:-1] = first.weight, first.bias
                wider.weight[-1], wider.bias[-1] = weight_in, -1e3 if weight_in else 0.0  # never on
                wide_next.weight[:, :-1], wide_next.bias[:] = second.weight, second.bias
                wide_next.weight[:, -1] = weight_out
            return torch.nn.Sequential(wider, torch.nn.ReLU(), wide_next, *list(dense)[3:])
        return build

    for weights in ((0.0, 0.0), (1.0, 1.0)):
        monkeypatch.setattr(ShallowConstruction, "to_sequential", with_extra_unit(*weights))
        extra = count_built(net, teacher, 0)
        assert extra["agreement"] <= 1e-9 and extra["count_ok"] is False
        assert sum(extra["widths"]) == net.hidden_units().total + 1
        as_shapes = count_built(net, teacher, 0, max_bytes=0)
        assert as_shapes["counted_from"] == "nn.Sequential shapes" and as_shapes["count_ok"] is False
        assert sum(as_shapes["widths"]) == net.hidden_units().total + 1 and as_shapes["agreement"] is None
    monkeypatch.undo()
    too_large = count_built(net, teacher, 0, max_bytes=0)
    assert too_large["counted_from"] == "nn.Sequential shapes" and too_large["count_ok"] is True
    assert too_large["widths"] == good["widths"] and too_large["agreement"] is None


def test_the_shapes_count_is_the_built_count_on_a_sample_and_a_disagreement_fails(monkeypatch):
    """count_shapes builds the same nn.Sequential on the meta device (no memory): on a sample of
    networks of every construction, variant, M and ε it counts what the real build counts, a
    block written at the wrong size fails it as it fails the real build, and count_built, which
    holds the two counts together on every network it builds, fails a shapes count that is off."""
    from constructions.base import count_hidden_units
    from constructions.registry import CONSTRUCTIONS, build
    from constructions.shallow import ShallowConstruction, build_shallow
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
    from theory.bounds import HiddenUnits
    from verify import check

    sample = 0
    for M, K, eps, seed in ((3, 2, 1e-2, 0), (5, 3, 1e-3, 1), (8, 3, 3e-4, 2)):
        teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=M, K=K, seed=seed))
        nets = [build_shallow(teacher, eps, variant=v) for v in ("theorem", "lean")]
        nets += [build(name, teacher, eps) for name in CONSTRUCTIONS if name != "shallow"]
        for net in nets:
            built = count_hidden_units(net.to_sequential())
            assert check.count_shapes(net) == built and net.count_matches(built), (type(net).__name__, M, eps)
            sample += 1
    assert sample >= 12
    # A block of the wrong size fails the shapes build as it fails the real one.
    net = build_shallow(sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, seed=0)), 1e-2)
    units = net.hidden_units()
    wrong = HiddenUnits(units.squares, units.carry + 1, units.teacher)
    monkeypatch.setattr(ShallowConstruction, "hidden_units", lambda self: wrong)
    for build_it in (net.to_sequential, lambda: check.count_shapes(net)):
        with pytest.raises(RuntimeError):
            build_it()
    monkeypatch.undo()
    # A shapes count that is off by one unit fails count_built's check on a network it builds.
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, seed=0))
    net = build_shallow(teacher, 1e-2)
    assert check.count_built(net, teacher, 0)["count_ok"] is True
    real_count_shapes = check.count_shapes
    monkeypatch.setattr(check, "count_shapes",
                        lambda n: [w + (i == 0) for i, w in enumerate(real_count_shapes(n))])
    off = check.count_built(net, teacher, 0)
    assert off["counted_from"] == "nn.Sequential" and off["count_ok"] is False


def test_small_sweep_writes_tidy_files_and_agrees_with_theory(tmp_path):
    argv = ["--eps", "1e-2", "1e-3", "1e-4", "--M", "3", "6", "--K", "2", "--seeds", "0", "1",
            "--I", "4", "--H", "4", "--O", "3", "--asymptotic-eps", "1e-2", "--out", str(tmp_path),
            "--no-progress"]
    assert sweep.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "sweep.csv")))
    assert len(rows) == 3 * 2 * 2 * 2  # ε × M × seeds × variants
    for r in rows:
        assert r["counted_from"] == "nn.Sequential" and float(r["dense_vs_structured"]) <= 1e-9
        assert int(r["hidden_units"]) == int(r["formula_units"])
        assert float(r["certificate"]) <= float(r["eps"])
        assert float(r["measured"]) <= float(r["certificate"])
        assert float(r["seconds"]) > 0
    payload = json.loads((tmp_path / "sweep.json").read_text())
    names = {f["name"] for f in payload["fits"]}
    assert {"log units vs log 1/ε", sweep.ERROR_FIT, "units vs M"} <= names
    assert all(f["agrees"] for f in payload["fits"])
    by_variant = {f["group"].split()[0]: f["slope"] for f in payload["fits"] if f["name"] == "units vs M"}
    assert by_variant["theorem"] == pytest.approx(1.0) and by_variant["lean"] == pytest.approx(0.0, abs=1e-9)
    eps_slopes = [f["slope"] for f in payload["fits"] if f["name"] == "log units vs log 1/ε"]
    assert all(math.isclose(s, 0.5, abs_tol=0.01) for s in eps_slopes)


def strict_json(text: str):
    """json.loads that refuses Infinity and NaN, which are not JSON."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_strict_json_refuses_infinity():
    with pytest.raises(ValueError, match="Infinity"):
        strict_json('{"ci_low": -Infinity}')


def test_fit_without_residual_degrees_of_freedom_is_untested_not_a_pass():
    """Two points, or one x per seed: the old interval was [-inf, inf] and agreed with any theory."""
    for x, y, seeds in (([1.0, 2.0], [3.0, 5.0], None), ([1, 2], [1, 5], [0, 1]),
                        ([1, 2, 3], [1, 2, 4], [0, 0, 1])):
        fit = sweep.fit_slope(x, y, "t", "g", 1.0, seeds=seeds)
        assert not fit.tested and fit.agrees is None and fit.status == "untested"
        assert "degree of freedom" in fit.reason and math.isnan(fit.slope)
        row = dict(passed=True, measured_over_certificate=0.5, M=4, eps=1e-2, seed=0,
                   counted_from="nn.Sequential")
        assert "PASS" not in sweep.format_fits([fit], [row] * 2).splitlines()[1]
    # One more point gives a degree of freedom: a finite interval, tested.
    fit = sweep.fit_slope([1, 2, 3, 1, 2], [1, 2, 3, 5, 6], "t", "g", 1.0, seeds=[0, 0, 0, 1, 1])
    assert fit.tested and fit.agrees and math.isfinite(fit.ci_low) and math.isfinite(fit.ci_high)


@pytest.mark.parametrize("x,y", [([2, 2, 2, 2], [1, 2, 3, 4]), ([1, 2, 3, math.inf], [1, 2, 3, 4]),
                                 ([1, 2, 3, 4], [1, 2, 3, -math.inf])])
def test_fit_on_degenerate_data_is_untested(x, y):
    fit = sweep.fit_slope(x, y, "t", "g", 0.0, relation="<=")
    assert not fit.tested and fit.agrees is None
    strict_json(sweep.cli.to_json(fit.to_dict()))


def test_testability_is_decided_per_m_k_combination_that_runs():
    """K > M points are skipped: with M = 2, 3, 4 and one seed, K = 2 has three M (a degree of
    freedom) but K = 3 only two (none); K = 4 only one M."""
    sc = sweep.SweepConfig(eps=(1e-3, 1e-4, 1e-5), M=(2, 3, 4), K=(2, 3, 4), seeds=(0,))
    gaps = sweep.untestable(sc)
    reasons = {fit: gap.reason for gap, fits in gaps.items() for fit in fits}
    assert set(reasons) == {"'units vs M' (K=3)", "'units vs M' (K=4)"}
    assert "no residual degree of freedom" in reasons["'units vs M' (K=3)"]
    assert "1 distinct M ≥ K=4, needs ≥ 2" in reasons["'units vs M' (K=4)"]
    assert sweep.untestable(sweep.SweepConfig(eps=(1e-3, 1e-4, 1e-5), M=(2, 3, 4), K=(2,), seeds=(0,))) == {}
    # Instance constants promise no units-vs-M fit, so one M is fine there.
    assert sweep.untestable(sweep.SweepConfig(M=(8,), constants="instance")) == {}
    # Two ε ≤ asymptotic_eps and one seed: no degree of freedom for the ε-fits.
    gaps = sweep.untestable(sweep.SweepConfig(eps=(1e-2, 1e-3, 1e-5), M=(4, 8), seeds=(0, 1, 2)))
    assert gaps == {} and sweep.untestable(sweep.SweepConfig(eps=(1e-3, 1e-4), M=(4, 8, 16), seeds=(0,)))


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Output places that must be refused, and a run folder that must stay empty."""
    monkeypatch.chdir(tmp_path)  # the default --out would land here
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me\n")
    return dict(OUT=str(tmp_path / "out"), FILE=str(a_file), UNDER_FILE=str(a_file / "sub"))


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("argv,message", [
    (["--eps", "0"], "positive"), (["--M", "2", "--K", "3"], "at most"),
    (["--weights", "x"], "invalid choice"),
    (["--M", "-1"], "positive integer"), (["--seeds", "-1"], "seed in [0, 4294967295]"),
    (["--seeds", "0", "-1"], "seed"), (["--seeds", str(2**32)], "seed"),
    (["--threads", "0"], "positive integer"),
    (["--out", "FILE"], "existing file"), (["--out", "UNDER_FILE"], "cannot be written"),
    (["--eps", "1e-2", "--M", "4", "8", "--seeds", "0"], "--allow-untested"),
    (["--asymptotic-eps", "1e-9"], "--allow-untested"),
    (["--M", "8"], "--allow-untested"),
    (["--eps", "1e-20", "1e-23", "--M", "4", "8", "--seeds", "0", "1", "--I", "3", "--H", "2", "--O", "2",
      "--K", "2", "--asymptotic-eps", "1e-2"], "float64"),
])
def test_bad_input_exits_2_with_one_line(capsys, places, argv, message):
    argv = ["--out", places["OUT"], "--no-progress", *[places.get(a, a) for a in argv]]
    before = files_under(Path(places["OUT"]).parent)
    assert sweep.main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    assert err.startswith("verify.sweep: error: ") and message in err, err
    assert files_under(Path(places["OUT"]).parent) == before  # nothing written, the file kept
    assert Path(places["FILE"]).read_text() == "keep me\n"


def test_untestable_grid_names_the_reason_and_the_flag_that_helps(capsys, places):
    assert sweep.main(["--eps", "1e-2", "--M", "4", "8", "--seeds", "0", "--out", places["OUT"]]) == 2
    err = capsys.readouterr().err
    assert "0 distinct ε ≤ --asymptotic-eps 0.001" in err and "--eps values ≤ 0.001" in err
    assert "'units vs M' (K=3)" in err and "more --seeds or more --M values" in err
    assert not Path(places["OUT"]).exists()  # refused before the folder was made


TINY = ["--K", "2", "--I", "3", "--H", "2", "--O", "2", "--no-progress", "--allow-untested"]


@pytest.mark.parametrize("argv,untested,tested", [
    # No ε ≤ 1e-3 and one seed: nothing at all can be tested.
    (["--eps", "1e-2", "--M", "4", "8", "--seeds", "0"], {"log units vs log 1/ε", sweep.ERROR_FIT,
                                                          "units vs M"}, set()),
    (["--eps", "1e-2", "3e-3", "--M", "4", "5", "--seeds", "0", "1", "--asymptotic-eps", "1e-9"],
     {"log units vs log 1/ε", sweep.ERROR_FIT}, {"units vs M"}),
    # A single M: units vs M cannot be tested; two ε × two seeds leave a degree of freedom.
    (["--eps", "1e-2", "1e-4", "--M", "4", "--seeds", "0", "1", "--asymptotic-eps", "1e-2"],
     {"units vs M"}, {"log units vs log 1/ε", sweep.ERROR_FIT}),
])
def test_allow_untested_reports_not_tested_never_pass(capsys, tmp_path, argv, untested, tested):
    assert sweep.main([*TINY, *argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith(("log ", "units vs M"))]
    for name in untested:
        lines = [line for line in table if line.startswith(name)]
        assert lines and all("NOT TESTED (" in line and "PASS" not in line for line in lines), lines
    for name in tested:
        assert all(line.endswith("PASS") for line in table if line.startswith(name))
    assert "not tested (--allow-untested)" in out
    payload = strict_json((tmp_path / "sweep.json").read_text())
    for f in payload["fits"]:
        if f["name"] in untested:
            assert f["status"] == "untested" and f["agrees"] is None and f["reason"]
            assert f["slope"] is f["ci_low"] is f["ci_high"] is None
        else:
            assert f["name"] in tested and f["status"] == "pass" and f["agrees"] is True
    assert {f["name"] for f in payload["fits"]} == untested | tested  # no fit silently dropped


def test_json_output_is_strict_json(capsys, tmp_path):
    argv = [*TINY, "--eps", "1e-2", "--M", "4", "8", "--seeds", "0", "--out", str(tmp_path), "--json"]
    assert sweep.main(argv) == 0
    fits = strict_json(capsys.readouterr().out)
    assert len(fits) == 6 and all(f["status"] == "untested" and f["slope"] is None for f in fits)


def test_a_violated_fit_exits_1_even_when_others_are_untested(capsys, tmp_path, monkeypatch):
    """Untested fits do not hide a tested one that fails."""
    real = sweep.fit_slope
    monkeypatch.setattr(sweep, "fit_slope", lambda x, y, name, group, theory, **kw:
                        real(x, y, name, group, theory + 5 if name == "units vs M" else theory, **kw))
    argv = [*TINY, "--eps", "1e-2", "3e-3", "--M", "4", "5", "--seeds", "0", "1", "--asymptotic-eps", "1e-9",
            "--out", str(tmp_path)]
    assert sweep.main(argv) == 1
    assert "FAIL" in capsys.readouterr().out


