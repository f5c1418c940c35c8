"""The exact construction for finite weight sets: codes and gates are exact in rationals, the
network's size is the formula, dense = structured, the error is rounding only (≤ 1e-12 and ≤
the floor) on every task of the finite family; and the checks that show these can fail."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from constructions import HyperteacherConfig, sample_hyperteacher
from constructions.base import count_hidden_units
from constructions.exact import (
    build_exact,
    enumerate_level_tasks,
    task_points,
)
from tests.strategies import small_configs
from theory.exact import (
    as_fractions,
    level_code,
    log_code_impossible,
    n_level_tasks,
    n_signals,
    staircase_code,
    symbolic_checks,
)
from verify.theorem.exact_checks import exact_task_errors, off_task_set_errors
from verify.theorem.measure import measure_sup_error

DISCRETE = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
EXACT_TOL = 1e-12  # the bar for "exact"; the floor below is the derived one


def finite_configs():
    return small_configs(max_io=5, max_M=8).filter(lambda c: c.weights != "continuous")


def inputs_on_and_off(teacher, n, seed):
    """[e(z), x] with z off the levels and above 1, x off the box: the same function everywhere."""
    rng = np.random.default_rng(seed)
    z = rng.uniform(-0.2, 1.3, (n, teacher.M)) * (rng.random((n, teacher.M)) < 0.5)
    x = rng.uniform(-2.0, 2.0, (n, teacher.I))
    return torch.cat([teacher.encode(torch.as_tensor(z)), torch.as_tensor(x)], dim=1)


# ─── theory ──────────────────────────────────────────────────────────────────────────────


def test_symbolic_checks_hold():
    checks = symbolic_checks()
    assert all(checks.values()), checks


def test_codes_for_the_two_families():
    khot, discrete = level_code([1.0]), level_code(DISCRETE)
    assert (khot.n, khot.layers, khot.knots) == (1, 2, ())
    assert discrete.n == 4 and discrete.layers == 3 and len(discrete.knots) == 5
    assert discrete.weights == (Fraction(1, 10), Fraction(1, 5), Fraction(1, 5), Fraction(1, 2))
    # Three units cannot work (proof in log_code_impossible); the staircase needs six.
    assert log_code_impossible(DISCRETE) and not log_code_impossible([1, 2, 3, 4, 5, 6])
    assert staircase_code(DISCRETE).n == 6 and staircase_code(DISCRETE).check()


@given(st.lists(st.integers(1, 40), min_size=1, max_size=4, unique=True), st.integers(1, 20))
def test_level_code_is_exact_for_any_level_set(numerators, denominator):
    levels = [n / denominator for n in numerators]
    code = level_code(levels)
    V = as_fractions(levels)
    assert code.check() and code.V == V
    assert math.ceil(math.log2(len(V))) <= code.n <= len(V) - 1
    for g, j in zip(code.gates, range(code.n), strict=True):
        on = [v for v, p in zip(V, code.patterns, strict=True) if p[j]]
        assert all(g(v) == 0 for v in on) and all(g(v) >= 1 for v in V if v not in on)


def test_a_wrong_code_fails_its_check():
    code = level_code(DISCRETE)
    bad = code.__class__(code.V, code.weights[:-1] + (Fraction(2, 5),), code.patterns, code.gates)
    assert not bad.check()


# ─── the network ─────────────────────────────────────────────────────────────────────────


@given(cfg=finite_configs(), variant=st.sampled_from(["theorem", "lean"]),
       constants=st.sampled_from(["apriori", "instance"]))
def test_exact_on_every_task_of_random_finite_families(cfg, variant, constants):
    teacher = sample_hyperteacher(cfg)
    net = build_exact(teacher, variant=variant, constants=constants)
    dense = net.to_sequential()
    assert all(isinstance(m, (torch.nn.Linear, torch.nn.ReLU)) for m in dense)

    # Size: the built MLP's widths are the formula's, and the formula is the closed form.
    code, M, R = net.code, cfg.M, n_signals(cfg.I, cfg.H)
    carry = M if variant == "theorem" else cfg.H
    if cfg.weights == "khot":
        expected = [M * R + carry, cfg.H]
    else:
        expected = [M * 5 + M + cfg.I, M * R * 4 + carry, cfg.H]
    assert count_hidden_units(dense) == expected == list(net.hidden_units().widths) == net.counted_widths()
    assert net.hidden_units().total == sum(expected) and net.certificate() == 0.0
    assert len(code.knots) == (0 if cfg.weights == "khot" else 5)

    # Dense = structured, on the task set and far off it.
    inputs = inputs_on_and_off(teacher, 256, cfg.seed)
    with torch.no_grad():
        assert (dense(inputs) - net(inputs)).abs().max() <= 1e-10

    # Every task of the finite family (a sample when there are more than 1000), with box vertices
    # where units sit at pre-activation 0.
    rng = np.random.default_rng(cfg.seed)
    z = enumerate_level_tasks(M, cfg.K, teacher.weight_values, 1000, rng)
    assert len(z) == min(1000, n_level_tasks(M, cfg.K, len(teacher.weight_values)))
    floor = net.rounding_floor()
    assert 0 < floor == net.rounding_floor(dense=True) <= 1e-10  # a worst case, but not a vacuous one
    for f in (net, dense):
        errors = exact_task_errors(net, teacher, z, 8, rng, f=f)
        assert errors.max() <= min(EXACT_TOL, floor)
    measured = measure_sup_error(net, teacher, refine_z=False, seed=cfg.seed, max_tasks=300,
                                 points_per_task=4, refine_tasks=4, refine_starts=4, refine_steps=20)
    assert measured.sup_error <= min(EXACT_TOL, floor)


def test_level_tasks_are_enumerated_whole_or_sampled_by_size():
    rng = np.random.default_rng(0)
    z = enumerate_level_tasks(5, 2, DISCRETE, 10**6, rng)
    assert len(z) == n_level_tasks(5, 2, 6) == 5 * 6 + 10 * 36 == len(np.unique(z, axis=0))
    assert set(np.unique(z)) == {0.0, *DISCRETE} and ((z > 0).sum(axis=1) <= 2).all()
    sample = enumerate_level_tasks(32, 3, DISCRETE, 999, rng)
    assert len(sample) == 999 and np.bincount((sample > 0).sum(axis=1)).tolist() == [0, 333, 333, 333]


@pytest.mark.parametrize("weights", ["khot", "discrete"])
def test_inactive_modules_are_dead_zones(weights):
    """Off units (gate margin κ = 2) and the dead-zone z carry are exactly 0 for z near 0, so a
    decode error on inactive modules (the orthogonal encoding's) changes nothing at all."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=3, O=2, M=6, K=2, weights=weights, seed=5))
    net = build_exact(teacher)
    rng = np.random.default_rng(0)
    z = enumerate_level_tasks(6, 2, teacher.weight_values, 200, rng)
    x = torch.as_tensor(task_points(net, z, 1, rng))
    noisy = z + (z == 0) * rng.uniform(-1e-9, 1e-9, z.shape)
    with torch.no_grad():
        clean, perturbed = (net(torch.cat([torch.as_tensor(zz), x], dim=1)) for zz in (z, noisy))
    assert torch.equal(clean, perturbed)


def test_the_default_teachers_counts():
    counts = {}
    for weights in ("khot", "discrete"):
        net = build_exact(sample_hyperteacher(HyperteacherConfig(weights=weights)))
        counts[weights] = (net.hidden_units().widths, net.hidden_units().total)
    # khot: 32·16 gated + 32 carry, 16. discrete: 32·5 knots + 32 + 16, 32·16·4 gated + 32, 16.
    assert counts == {"khot": ((544, 16), 560), "discrete": ((208, 2080, 16), 2304)}


def test_fewer_inputs_than_units_gates_the_inputs():
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=5, O=2, M=4, K=2, weights="khot", seed=3))
    net = build_exact(teacher)
    assert net.signals == "inputs" and net.hidden_units().widths == (4 * 2 + 4, 5)
    z = enumerate_level_tasks(4, 2, [1.0], 100, np.random.default_rng(0))
    assert exact_task_errors(net, teacher, z, 16, np.random.default_rng(1)).max() <= EXACT_TOL


def test_state_dict_round_trip(tmp_path):
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=2, O=2, M=4, K=2, weights="discrete", seed=4))
    dense = build_exact(teacher).to_sequential()
    torch.save(dense.state_dict(), tmp_path / "net.pt")
    fresh = build_exact(teacher).to_sequential()
    for p in fresh.parameters():
        torch.nn.init.normal_(p)
    fresh.load_state_dict(torch.load(tmp_path / "net.pt"))
    inputs = inputs_on_and_off(teacher, 64, 0)
    with torch.no_grad():
        assert torch.equal(fresh(inputs), dense(inputs))


# ─── refusing, and catching wrong networks ───────────────────────────────────────────────


def test_continuous_weights_and_bad_options_are_refused():
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=1, M=3, K=2, weights="continuous"))
    with pytest.raises(ValueError, match="exact needs a finite weight set"):
        build_exact(teacher)
    khot = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=1, M=3, K=2, weights="khot"))
    for bad in (dict(eps=-1.0), dict(eps=float("nan")), dict(variant="wide"), dict(constants="guess")):
        with pytest.raises(ValueError):
            build_exact(khot, **bad)
    build_exact(khot, eps=1e-3)  # ε is accepted and has nothing to do


@pytest.mark.parametrize("weights", ["khot", "discrete"])
@pytest.mark.parametrize("size", [3, 4])
def test_a_range_10_percent_too_small_is_caught(weights, size):
    """span_scale = 0.9: at a box vertex a signal drops below lo and its on unit clips; the
    error is of the size of the signal, far above rounding. (With one module the teacher's
    own ReLU hides it: a clipped signal is negative there, and so is p_h. Off units have the
    gate margin κ = 2 and would need a range half as large to leak.)"""
    teacher = sample_hyperteacher(HyperteacherConfig(I=size, H=size, O=size, M=size, K=size,
                                                     weights=weights, seed=7))
    rng = np.random.default_rng(0)
    z = enumerate_level_tasks(teacher.M, teacher.K, teacher.weight_values, 10**4, rng)
    good = build_exact(teacher, constants="instance")
    bad = build_exact(teacher, constants="instance", span_scale=0.9)
    assert exact_task_errors(good, teacher, z, 16, rng).max() <= EXACT_TOL
    assert exact_task_errors(bad, teacher, z, 16, rng).max() > 1e-6


@pytest.mark.parametrize("dropped", [0, 3, 5])
def test_a_dropped_level_is_caught(dropped):
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=3, K=2, weights="discrete", seed=1))
    levels = [v for i, v in enumerate(DISCRETE) if i != dropped]
    net = build_exact(teacher, levels=levels)
    rng = np.random.default_rng(0)
    z = enumerate_level_tasks(3, 2, DISCRETE, 10**4, rng)
    errors = exact_task_errors(net, teacher, z, 8, rng)
    uses_dropped = np.isclose(z, DISCRETE[dropped]).any(axis=1)
    assert errors[~uses_dropped].max() <= EXACT_TOL
    assert errors[uses_dropped].min() > 1e-6  # every task with the missing level is wrong


# ─── where exactness stops ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize("weights", ["khot", "discrete"])
def test_exactness_stops_between_levels_and_off_the_box(weights):
    teacher = sample_hyperteacher(HyperteacherConfig(I=4, H=4, O=3, M=6, K=2, weights=weights, seed=2))
    net = build_exact(teacher)
    r = net.radius
    refine = dict(max_tasks=50, refine_tasks=4, refine_steps=20)
    report = off_task_set_errors(net, teacher, np.random.default_rng(0), n_tasks=200, points=4,
                                 spreads=(r, 1.5 * r), refine=refine)
    # z between levels: wrong by a sizeable fraction of the output.
    assert report["z_uniform"]["max_error"] > 0.05 * report["z_uniform"]["teacher_max"]
    assert report["z_refined_sup"]["sup_error"] >= report["z_uniform"]["max_error"] > 1e-3
    # x off the box: exact up to the radius ρ (> 1 with the a-priori ranges), wrong beyond it.
    off = report["x_off_box"]
    assert report["exact_radius"] == r > 1.5
    assert off[f"{r:.4g}"]["max_error"] <= EXACT_TOL
    assert off[f"{1.5 * r:.4g}"]["max_error"] > 1e-3
    # More than K active modules stay exact with the z carry: the construction never used K.
    assert report["supports_above_K"]["max_error"] <= EXACT_TOL


@pytest.mark.parametrize("weights", ["khot", "discrete"])
@pytest.mark.parametrize("encoding", ["identity", "orthogonal"])
def test_skipping_dead_modules_computes_the_same_function(weights, encoding, monkeypatch):
    """The structured evaluator leaves out modules whose gated units are provably 0; forcing
    every module through must give the same outputs, on the task set and off it."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=4, H=3, O=2, M=12, K=2, weights=weights,
                                                     encoding=encoding, seed=5))
    net = build_exact(teacher)
    rng = np.random.default_rng(0)
    z = enumerate_level_tasks(12, 2, teacher.weight_values, 400, rng)
    on = torch.cat([teacher.encode(torch.as_tensor(z)), torch.as_tensor(rng.uniform(-1, 1, (len(z), 4)))], 1)
    inputs = torch.cat([on, inputs_on_and_off(teacher, 400, 1)])
    full_calls = []
    real_full = type(net)._gated_all
    monkeypatch.setattr(type(net), "_gated_all", lambda self, *a: full_calls.append(1) or real_full(self, *a))
    with torch.no_grad():
        net(on)
        assert not full_calls  # on the task set every row takes the sparse path
        sparse = net(inputs)
        monkeypatch.setattr(type(net), "_live_modules", lambda self, G, x: None)
        full = net(inputs)
    torch.testing.assert_close(sparse, full, rtol=0, atol=1e-12)
