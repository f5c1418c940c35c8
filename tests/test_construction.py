"""The theorem's network: size = formula, certificate ≤ ε, measured ≤ certificate,
dense = structured; and the checks that show these assertions can fail.

The property tests draw random hyperteachers (I, H, O ≤ 6, M ≤ 10, K ≤ min(3, M), every weight
scheme and encoding, both variants and both constants, ε ∈ [1e-4, 1]) and assert count =
formula on the built nn.Sequential, certificate ≤ ε, dense = structured to 1e-10 (on and off
the box) and measured ≤ certificate. The checks that show the assertions can fail: the tiny
instance reaches ≥ 0.95 of the certificate, so an off-by-one in N is caught; a network checked
against a perturbed teacher is caught, on the right module; a constant C 20% too small is
caught. The other constructions' modules (test_exact.py, test_deep.py, test_optimal.py,
test_multilayer.py) have the same properties and their own catches: `deep` with one tent level
fewer and `optimal` with every N_ih one smaller measure above ε on the tiny instance; `exact`
with 10% too small ranges or a dropped weight level errs by > 1e-6; a multi-layer network
checked against a teacher with a perturbed layer-2 module fails; every N_ih − 1 of `optimal`
breaks its certificate (the allocation is minimal).
"""

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from constructions import HyperteacherConfig, build_shallow, sample_hyperteacher
from constructions.base import count_hidden_units
from tests.strategies import FAST, log_eps, random_inputs, small_configs
from theory.bounds import instance_C
from verify.theorem.measure import measure_sup_error


@given(cfg=small_configs(), log_eps=log_eps, variant=st.sampled_from(["theorem", "lean"]),
       constants=st.sampled_from(["apriori", "instance"]))
def test_theorem_holds_on_random_instances(cfg, log_eps, variant, constants):
    eps = 10.0**log_eps
    teacher = sample_hyperteacher(cfg)
    net = build_shallow(teacher, eps, variant=variant, constants=constants)
    dense = net.to_sequential()

    # Size: the Linear layers of the built MLP have the formula's widths.
    carry = cfg.M if variant == "theorem" else cfg.H
    assert count_hidden_units(dense) == [2 * cfg.I * cfg.H * net.N + carry, cfg.H]
    assert net.N == math.ceil(math.sqrt(cfg.I * net.C * net.a / eps) - 1e-9)
    assert all(isinstance(m, (torch.nn.Linear, torch.nn.ReLU)) for m in dense)

    # Certificate ≤ ε, and the constant really bounds |c_ih| on Z_K.
    assert net.certificate() <= eps
    assert instance_C(teacher.W, cfg.K) <= net.C * (1 + 1e-12)

    # Dense = structured, on the domain and off it (they are the same function on ℝ^D).
    inputs = random_inputs(teacher, 256, cfg.seed, spread=1.5)
    with torch.no_grad():
        assert (dense(inputs) - net(inputs)).abs().max() <= 1e-10

    # Measured sup error ≤ certificate (plus the float64 worst-case rounding).
    measured = measure_sup_error(net, teacher, seed=cfg.seed, **FAST)
    assert measured.sup_error <= net.certificate() + net.rounding_floor()


def tiny_teacher(seed, weights="continuous"):
    return sample_hyperteacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights=weights, seed=seed))


def exhaustive_sup_tiny(net, teacher, n=2001):
    """sup of |f − g| over an n × n grid of (x, z) ∈ [-1, 1] × [0, 1]: all of X × Z_K
    when I = M = K = 1, so this is the true sup up to the grid's resolution."""
    axis_x = torch.linspace(-1, 1, n, dtype=torch.float64)
    axis_z = torch.linspace(0, 1, n, dtype=torch.float64)
    x, z = (g.reshape(-1, 1) for g in torch.meshgrid(axis_x, axis_z, indexing="ij"))
    with torch.no_grad():
        return float((net(torch.cat([z, x], dim=1)) - teacher.forward(z, x)).abs().max())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("eps", [1e-2, 1e-3])
def test_certificate_is_reached_on_the_tiny_instance(seed, eps):
    """I = H = O = M = K = 1: one product, one unit. The certificate is attained when some
    (x, z) puts u on a segment midpoint and v on a knot while the unit is active. Over these
    12 cases the measurer found 0.992 to 0.9999 of the certificate; the floor asserts 0.95."""
    teacher = tiny_teacher(seed)
    net = build_shallow(teacher, eps)
    measured = measure_sup_error(net, teacher, seed=seed)
    fraction = measured.sup_error / net.certificate()
    assert 0.95 <= fraction <= 1 + net.rounding_floor() / net.certificate()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("eps", [1e-1, 1e-2])
def test_measurer_finds_the_exhaustive_sup_on_the_tiny_instance(seed, eps):
    """Against a 2001 × 2001 grid of all of X × Z_K. At ε = 0.1 with a small |W| the true
    sup is itself only ~0.7 of the certificate (c/C cannot reach 1/N), so this compares the
    measurer with the truth, not with the bound. Seen: measurer/grid ≥ 0.948."""
    teacher = tiny_teacher(seed)
    net = build_shallow(teacher, eps)
    truth = exhaustive_sup_tiny(net, teacher)
    assert truth <= net.certificate() + net.rounding_floor()
    measured = measure_sup_error(net, teacher, seed=seed).sup_error
    # Both are lower bounds of the sup, and the grid can miss the peak by a little, so
    # only the measurer's shortfall is asserted.
    assert measured >= 0.9 * truth


def test_off_by_one_in_N_is_caught_on_the_tiny_instance():
    """A certificate claimed for N + 1 while the network uses N must fail the check."""
    teacher = tiny_teacher(0)
    net = build_shallow(teacher, 1e-2)
    measured = measure_sup_error(net, teacher).sup_error
    wrong_certificate = net.I * net.C * net.a / (net.N + 1) ** 2
    assert measured > wrong_certificate


@pytest.mark.parametrize("encoding", ["identity", "orthogonal"])
def test_network_for_one_teacher_fails_against_a_perturbed_teacher(encoding):
    cfg = HyperteacherConfig(I=4, H=4, O=3, M=6, K=2, encoding=encoding, seed=11)
    teacher = sample_hyperteacher(cfg)
    net = build_shallow(teacher, 1e-3)
    assert measure_sup_error(net, teacher, **FAST).sup_error <= net.certificate()
    # Move one module by 2% of the truncation bound: tasks that use it change by far
    # more than the certificate; tasks without it do not change at all.
    W = teacher.W.copy()
    W[3] += 0.02 * np.sign(W[3]) * np.abs(W).max()
    perturbed = dataclasses.replace(teacher, W=W)
    result = measure_sup_error(net, perturbed, **FAST)
    assert result.sup_error > 3 * net.certificate()
    assert 3 in result.support


@pytest.mark.parametrize("shrink", [0.5, 0.8])
def test_a_constant_that_is_too_small_is_caught(shrink):
    """C below sup|c_ih| pushes u, v out of [-1, 1], where ŝ is no longer close to t²."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=3, O=2, M=5, K=3, seed=5))
    C_true = instance_C(teacher.W, teacher.K)
    net = build_shallow(teacher, 1e-3, C=shrink * C_true)
    measured = measure_sup_error(net, teacher, **FAST)
    assert measured.sup_error > net.certificate()


def test_lean_and_theorem_compute_the_same_function_with_different_carry():
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=5, O=2, M=9, K=2, seed=2))
    theorem = build_shallow(teacher, 1e-2, variant="theorem")
    lean = build_shallow(teacher, 1e-2, variant="lean")
    inputs = random_inputs(teacher, 128, 0)
    with torch.no_grad():
        assert (theorem(inputs) - lean(inputs)).abs().max() <= 1e-12
    assert theorem.hidden_units().carry == 9 and lean.hidden_units().carry == 5


def test_apriori_N_does_not_depend_on_M_so_the_count_has_slope_one():
    counts = []
    for M in (4, 8, 16, 32, 64):
        teacher = sample_hyperteacher(HyperteacherConfig(M=M, seed=0))
        counts.append(build_shallow(teacher, 1e-3).hidden_units().total)
    assert np.all(np.diff(counts) == np.diff([4, 8, 16, 32, 64]))


def test_state_dict_round_trip_gives_the_same_network(tmp_path):
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=3, O=2, M=4, K=2, seed=4))
    dense = build_shallow(teacher, 1e-2).to_sequential()
    torch.save(dense.state_dict(), tmp_path / "network.pt")
    n1, n2 = count_hidden_units(dense)
    fresh = torch.nn.Sequential(torch.nn.Linear(6, n1), torch.nn.ReLU(), torch.nn.Linear(n1, n2),
                                torch.nn.ReLU(), torch.nn.Linear(n2, 2)).double()
    fresh.load_state_dict(torch.load(tmp_path / "network.pt"))
    inputs = random_inputs(teacher, 64, 1)
    with torch.no_grad():
        assert torch.equal(fresh(inputs), dense(inputs))
        # The documented convention y = x @ weight.T + bias, written out.
        h = inputs
        for i, layer in enumerate(fresh[::2]):
            h = h @ layer.weight.T + layer.bias
            h = torch.relu(h) if i < 2 else h
        assert (h - dense(inputs)).abs().max() <= 1e-12
