"""verify.sweep: the slope fits and their intervals, and the command's outputs."""

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verify.sweep as sweep


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


def test_small_sweep_writes_tidy_files_and_agrees_with_theory(tmp_path):
    argv = ["--eps", "1e-2", "1e-3", "1e-4", "--M", "3", "6", "--K", "2", "--seeds", "0", "1",
            "--I", "4", "--H", "4", "--O", "3", "--out", str(tmp_path), "--no-progress"]
    assert sweep.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "sweep.csv")))
    assert len(rows) == 3 * 2 * 2 * 2  # ε × M × seeds × variants
    for r in rows:
        assert int(r["hidden_units"]) == int(r["formula_units"])
        assert float(r["certificate"]) <= float(r["eps"])
        assert float(r["measured"]) <= float(r["certificate"])
        assert float(r["seconds"]) > 0
    payload = json.loads((tmp_path / "sweep.json").read_text())
    names = {f["name"] for f in payload["fits"]}
    assert {"log units vs log 1/ε", "log measured vs log N", "units vs M"} <= names
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
        assert "PASS" not in sweep.format_fits([fit], [dict(passed=True, measured_over_certificate=0.5, M=4,
                                                            eps=1e-2, seed=0)] * 2).splitlines()[1]
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
    gaps = sweep.untestable(sweep.SweepConfig(eps=(1e-2, 1e-3, 1e-4), M=(4, 8), seeds=(0, 1, 2)))
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
    (["--eps", "1e-20", "1e-21", "--M", "4", "8", "--seeds", "0", "1", "--I", "3", "--H", "2", "--O", "2",
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
    (["--eps", "1e-2", "--M", "4", "8", "--seeds", "0"], {"log units vs log 1/ε", "log measured vs log N",
                                                          "units vs M"}, set()),
    (["--eps", "1e-2", "3e-3", "--M", "4", "5", "--seeds", "0", "1", "--asymptotic-eps", "1e-9"],
     {"log units vs log 1/ε", "log measured vs log N"}, {"units vs M"}),
    # A single M: units vs M cannot be tested; two ε × two seeds leave a degree of freedom.
    (["--eps", "1e-2", "3e-3", "--M", "4", "--seeds", "0", "1", "--asymptotic-eps", "1e-2"],
     {"units vs M"}, {"log units vs log 1/ε", "log measured vs log N"}),
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


def test_every_flag_has_help():
    for action in sweep.build_parser()._actions:
        assert action.help, action.option_strings


def test_a_closed_pipe_ends_quietly_and_the_files_are_written(tmp_path):
    read, write = os.pipe()
    os.close(read)  # every write to stdout now fails with EPIPE
    argv = [*TINY, "--eps", "1e-2", "--M", "4", "8", "--seeds", "0", "--out", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-m", "verify.sweep", *argv], stdout=write, stderr=subprocess.PIPE,
                          text=True, timeout=300)
    os.close(write)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv", "sweep.json"]
