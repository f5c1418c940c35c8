"""verify.sweep: the slope fits and their intervals, and the command's outputs."""

import csv
import json
import math

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


@pytest.mark.parametrize("argv", [["--eps", "0"], ["--M", "2", "--K", "3"], ["--weights", "x"],
                                  ["--M", "-1"]])
def test_bad_input_exits_2_with_one_line(capsys, argv):
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
