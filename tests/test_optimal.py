"""The instance-optimal construction: size = formula, certificate ≤ ε, dense = structured,
measured ≤ certificate; the allocation is feasible, minimal and close to its lower bound;
and a too-small N, radius or a forgotten centre is caught by measurement."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from constructions import HyperteacherConfig, build_shallow, sample_hyperteacher
from constructions.base import count_hidden_units
from constructions.optimal import OptimalConstruction, build_optimal, square_interpolant
from tests.strategies import FAST_COARSE_GRID as FAST
from tests.strategies import log_eps, random_inputs, small_configs
from theory import bounds
from theory import optimal as theory
from verify.theorem.measure import measure_sup_error

# As in test_construction, plus a coarser x-grid for I = 2 (129² instead of 257² points).




def assert_minimal(net, eps):
    """No single N_ih − 1 keeps the certificate ≤ ε: greedy trimming reached a minimal point."""
    N, r, A = net.N.numpy(), net.r.numpy(), net.A.numpy()
    for i, h in zip(*np.nonzero(N >= 2), strict=True):
        smaller = N.copy()
        smaller[i, h] -= 1
        assert not theory.fits(r, smaller, A, eps), (i, h)


@given(cfg=small_configs(max_io=5, max_M=8), log_eps=log_eps, variant=st.sampled_from(["theorem", "lean"]),
       constants=st.sampled_from(["instance", "apriori"]), center=st.booleans())
def test_construction_holds_on_random_instances(cfg, log_eps, variant, constants, center):
    eps = 10.0**log_eps
    teacher = sample_hyperteacher(cfg)
    net = build_optimal(teacher, eps, variant=variant, constants=constants, center=center)
    dense = net.to_sequential()
    N = net.N.numpy()

    # Size: the built MLP's widths = the formula = what the buffers say.
    carry = cfg.M if variant == "theorem" else cfg.H
    assert count_hidden_units(dense) == [2 * int(N.sum()) + carry, cfg.H]
    assert net.counted_widths() == list(net.hidden_units().widths) == count_hidden_units(dense)
    assert net.hidden_units().total == sum(net.hidden_units().terms.values())
    assert all(isinstance(m, (torch.nn.Linear, torch.nn.ReLU)) for m in dense)

    # Certificate ≤ ε; the allocation is minimal, within IH of its lower bound, and never
    # larger than the theorem's uniform N with exact constants.
    assert net.certificate() <= eps
    assert_minimal(net, eps)
    s = net.summary()
    assert s["N_sum_lower_bound"] <= s["N_sum"] * (1 + 1e-9)
    assert s["N_sum"] <= s["N_sum_lower_bound"] + cfg.I * cfg.H
    assert s["N_sum"] <= cfg.I * cfg.H * s["uniform_same_certificate_N"]
    if constants == "instance":
        assert s["units"] <= s["shallow_instance_units"]

    # Dense = structured, on the box and off it.
    inputs = random_inputs(teacher, 256, cfg.seed, spread=1.5)
    with torch.no_grad():
        assert (dense(inputs) - net(inputs)).abs().max() <= 1e-10

    # Measured sup error ≤ certificate (plus the float64 worst-case rounding).
    measured = measure_sup_error(net, teacher, seed=cfg.seed, **FAST)
    assert measured.sup_error <= net.certificate() + net.rounding_floor()


@given(cfg=small_configs(max_io=4, max_M=6))
def test_product_ranges_are_the_exact_range_of_c_on_Z_K(cfg):
    """c_ih is linear in z, so its extremes over Z_K sit at 0/1 vertices with ≤ K ones:
    enumerate them all and compare with the top-K formula (and with bounds.instance_C)."""
    teacher = sample_hyperteacher(cfg)
    pos, neg = theory.product_ranges(teacher.W, cfg.K)
    vertices = [np.zeros(cfg.M)]
    for k in range(1, cfg.K + 1):
        for support in itertools.combinations(range(cfg.M), k):
            z = np.zeros(cfg.M)
            z[list(support)] = 1.0
            vertices.append(z)
    c = np.einsum("vm,mih->vih", np.array(vertices), teacher.W) / math.sqrt(cfg.K)
    np.testing.assert_allclose(pos, c.max(axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(neg, -c.min(axis=0), rtol=1e-13, atol=1e-15)
    assert np.maximum(pos, neg).max() == bounds.instance_C(teacher.W, cfg.K)
    m, r = theory.product_constants(teacher.W, cfg.K)
    assert np.all(np.abs(c - m) <= r * (1 + 1e-12))
    assert np.all(r <= np.maximum(pos, neg))


def test_allocation_on_the_default_teacher_is_near_its_lower_bound():
    """I = H = O = 16: the integer Σ N is within IH (and 0.1%) of the dual lower bound,
    every single decrement breaks the certificate, and it beats the uniform N."""
    teacher = sample_hyperteacher(HyperteacherConfig(M=8))
    for center in (True, False):
        m, r = theory.product_constants(teacher.W, teacher.K, center=center)
        allocation = theory.allocate(r, teacher.A, 1e-3)
        assert theory.fits(r, allocation.N, teacher.A, 1e-3)
        assert allocation.lower_bound <= allocation.total <= allocation.lower_bound + 256
        assert allocation.total <= 1.001 * allocation.lower_bound
        assert allocation.total < 256 * theory.uniform_N(r, teacher.A, 1e-3)
        # KKT: the multipliers give back the continuous optimum, N_ih = max(1, (2 r_ih Σ_o λ_o
        # |A_ho|)^{1/3}), and its Σ N meets the dual bound (no duality gap).
        s = r * (np.abs(teacher.A) @ allocation.multipliers)[None, :]
        N_kkt = np.maximum(1.0, np.cbrt(2 * s))
        assert N_kkt.sum() == pytest.approx(allocation.continuous_sum, rel=1e-6)
        assert allocation.continuous_sum == pytest.approx(allocation.lower_bound, rel=1e-8)
        assert np.abs(allocation.N - N_kkt).max() <= 0.05 * N_kkt.max()


def test_uniform_instance_uses_the_uniform_N():
    """One product: the optimum is the single N with r·a/N² ≤ ε."""
    r, A = np.array([[0.7]]), np.array([[1.3]])
    for eps in (1e-1, 1e-3, 1e-5):
        allocation = theory.allocate(r, A, eps)
        assert allocation.total == theory.uniform_N(r, A, eps) == math.ceil(math.sqrt(0.7 * 1.3 / eps))


@pytest.mark.parametrize("N", [1, 2, 3, 7, 40])
def test_per_product_interpolant_matches_the_scalar_one(N):
    """The same continuous piecewise-linear function, written with different float steps
    (so the segment picked at a knot may differ): they agree to rounding. On |t| ≤ 3 each
    sums terms of size ≤ 9 + 4·4 with ≤ 8 roundings: |difference| ≤ 2·γ_8·25 < 5e-14."""
    t = torch.linspace(-3, 3, 6001, dtype=torch.float64)
    tol = 2 * theory.gamma(8) * 25
    ours = square_interpolant(t, torch.full_like(t, float(N)))
    assert (ours - bounds.square_interpolant(t, N)).abs().max() <= tol
    # and with a different N per column, broadcast
    Ns = torch.tensor([1.0, 2.0, float(N)], dtype=torch.float64)
    grid = square_interpolant(t[:, None].expand(-1, 3), Ns)
    for j, n in enumerate(Ns.tolist()):
        assert (grid[:, j] - bounds.square_interpolant(t, int(n))).abs().max() <= tol


def test_symbolic_checks_hold():
    checks = theory.symbolic_checks()
    assert checks and all(checks.values()), checks


def tiny_teacher(seed):
    return sample_hyperteacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="continuous", seed=seed))


@pytest.mark.parametrize("seed", range(3))
def test_certificate_is_reached_and_one_N_less_is_caught_on_the_tiny_instance(seed):
    """I = H = O = M = K = 1. Centred, (c − m)/r covers all of [-1, 1], so u can sit on a
    midpoint and v on a knot: the certificate is attained (seen 0.992–1.0 of it over 6
    seeds × 2 ε). One N less has a certificate > ε and measures > ε (seen 1.003–2.1 ε)."""
    teacher = tiny_teacher(seed)
    eps = 1e-3
    net = build_optimal(teacher, eps, compare=False)
    measured = measure_sup_error(net, teacher, seed=seed).sup_error
    assert 0.9 * net.certificate() <= measured <= net.certificate() + net.rounding_floor()
    smaller = OptimalConstruction(teacher, net.N.numpy() - 1, net.r.numpy(), net.m.numpy())
    assert smaller.certificate() > eps
    assert measure_sup_error(smaller, teacher, seed=seed).sup_error > eps


@pytest.mark.parametrize("mistake", ["radius_half", "no_centre"])
def test_a_wrong_range_is_caught(mistake):
    """A radius below the half-width, or the centred radius without the centre, pushes u
    or v out of [-1, 1], where ŝ is no longer close to t²."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=3, O=2, M=5, K=3, seed=5))
    net = build_optimal(teacher, 1e-3, compare=False)
    r, m = net.r.numpy(), net.m.numpy()
    if mistake == "radius_half":
        wrong = OptimalConstruction(teacher, net.N.numpy(), 0.5 * r, m)
    else:
        wrong = OptimalConstruction(teacher, net.N.numpy(), r, np.zeros_like(m))
    assert wrong.certificate() <= 1e-3
    assert measure_sup_error(wrong, teacher, **FAST).sup_error > wrong.certificate()


def test_summary_compares_with_the_theorem_at_the_same_eps():
    teacher = sample_hyperteacher(HyperteacherConfig(I=6, H=5, O=4, M=7, K=3, seed=1))
    net = build_optimal(teacher, 1e-4)
    s = net.summary()
    shallow = build_shallow(teacher, 1e-4, constants="instance")
    assert s["shallow_instance_units"] == shallow.hidden_units().total
    assert s["shallow_apriori_units"] == build_shallow(teacher, 1e-4).hidden_units().total
    # Centring and the allocation each save units here (both are strict on this teacher).
    assert s["units"] < s["uncentered_units"] and s["units"] < s["uniform_same_certificate_units"]
    assert s["units"] < s["shallow_instance_units"] <= s["shallow_apriori_units"]
    assert s["units_ratio_vs_shallow_instance"] == s["units"] / s["shallow_instance_units"]
    assert s["N_min"] <= s["N_median"] <= s["N_max"] and s["certificate"] <= 1e-4


def test_state_dict_round_trip_gives_the_same_network():
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=2, O=2, M=4, K=2, encoding="orthogonal", seed=4))
    net = build_optimal(teacher, 1e-3, compare=False)
    shape = (teacher.I, teacher.H)
    fresh = OptimalConstruction(teacher, np.ones(shape), np.ones(shape), np.zeros(shape))
    fresh.load_state_dict(net.state_dict())
    inputs = random_inputs(teacher, 64, 1, spread=1.5)
    with torch.no_grad():
        assert torch.equal(fresh(inputs), net(inputs))
    assert fresh.certificate() == net.certificate() and fresh.counted_widths() == net.counted_widths()


def test_bad_input_is_refused():
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=3, K=2))
    for kwargs in (dict(variant="wide"), dict(constants="exact")):
        with pytest.raises(ValueError, match="must be one of"):
            build_optimal(teacher, 1e-2, **kwargs)
    for eps in (0.0, -1e-3, math.inf, math.nan):
        with pytest.raises(ValueError, match="eps"):
            build_optimal(teacher, eps)
    with pytest.raises(ValueError, match="N_ih"):
        OptimalConstruction(teacher, np.zeros((2, 2)), np.ones((2, 2)), np.zeros((2, 2)))
