"""The deep (tent-map) construction: size = formula, certificate ≤ ε, dense = structured,
measured ≤ certificate, it is the shallow interpolant with N = 2^{m+1}; and the checks that
catch one level too few or a range that is too small."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from constructions import HyperteacherConfig, sample_hyperteacher
from constructions.base import construction_constants, count_hidden_units
from constructions.deep import DeepConstruction, build_deep
from constructions.shallow import ShallowConstruction
from tests.strategies import (
    FAST,
    assert_smallest_that_certifies,
    certificate_constants,
    log_eps,
    random_inputs,
    small_configs,
)
from theory import deep as theory
from theory.bounds import instance_C, square_interpolant
from verify.theorem.measure import measure_sup_error

# The property test runs 20 examples: a lighter search keeps it near the file's budget (the
# tiny-instance tests below are the ones that check the measurer gets close to the sup).
LIGHT = dict(points_per_task=8, refine_tasks=4, refine_starts=8, refine_steps=25)




@given(cfg=small_configs(max_io=5, max_M=8), log_eps=log_eps,
       constants=st.sampled_from(["apriori", "instance"]))
def test_deep_construction_holds_on_random_instances(cfg, log_eps, constants):
    eps = 10.0**log_eps
    teacher = sample_hyperteacher(cfg)
    net = build_deep(teacher, eps, constants=constants)
    dense = net.to_sequential()

    # Size: the built MLP's widths are the formula's, and m is the smallest that certifies.
    widths = count_hidden_units(dense)
    assert widths == list(net.hidden_units().widths) == net.counted_widths()
    assert sum(widths) == theory.count(cfg.I, cfg.H, net.m) == (net.m + 1) * (4 * cfg.I * cfg.H + cfg.H)
    assert len(widths) == net.m + 1
    assert all(isinstance(mod, (torch.nn.Linear, torch.nn.ReLU)) for mod in dense)
    assert net.dense_bytes() == 8 * sum(p.numel() for p in dense.parameters())

    # Certificate ≤ ε, m minimal, and C really bounds |c_ih| on Z_K.
    assert net.certificate() <= eps
    assert net.m == 1 or theory.certificate(cfg.I, net.C, net.a, net.m - 1) > eps
    assert instance_C(teacher.W, cfg.K) <= net.C * (1 + 1e-12)

    # Dense = structured, on the task set and off it (x and z outside their boxes).
    with torch.no_grad():
        for spread in (1.0, 2.0):
            inputs = random_inputs(teacher, 256, cfg.seed, spread=spread, z_spread=spread)
            assert (dense(inputs) - net(inputs)).abs().max() <= 1e-10

    # Measured sup error ≤ certificate, plus the float64 worst-case rounding.
    measured = measure_sup_error(net, teacher, seed=cfg.seed, **LIGHT)
    assert measured.sup_error <= net.certificate() + net.rounding_floor()


@pytest.mark.parametrize("m", [1, 2, 5, 12])
def test_sawtooth_square_is_the_shallow_interpolant_with_N_2_to_the_m_plus_1(m):
    t = np.linspace(-1.0, 1.0, 20_001)
    f = theory.sawtooth_square(t, m)
    assert np.abs(f - square_interpolant(t, 2 ** (m + 1))).max() <= 1e-15
    gap = f - t**2
    assert gap.min() >= -1e-16 and gap.max() <= 4.0 ** -(m + 1) + 1e-16
    assert gap.max() >= 0.999 * 4.0 ** -(m + 1)  # reached at the segment midpoints


@pytest.mark.parametrize("encoding", ["identity", "orthogonal"])
def test_deep_equals_shallow_with_N_2_to_the_m_plus_1_on_the_box(encoding):
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=6, K=2, encoding=encoding, seed=3))
    net = build_deep(teacher, 1e-4)
    shallow = ShallowConstruction(teacher, N=net.N_eff, C=net.C, a=net.a)
    inputs = random_inputs(teacher, 512, 0)
    with torch.no_grad():
        assert (net(inputs) - shallow(inputs)).abs().max() <= 1e-12


def test_symbolic_checks():
    checks = theory.symbolic_checks(max_m=4)
    assert checks and all(checks.values()), checks


@given(**certificate_constants, log_eps=st.floats(-12, 2))
def test_levels_are_the_fewest_that_certify(I, C, a, log_eps):
    m = assert_smallest_that_certifies(theory.levels_for_eps, theory.certificate, I, C, a, 10.0**log_eps)
    assert theory.certificate(I, C, a, m) == pytest.approx(I * C * a / 4 ** (m + 1), rel=1e-15)


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf])
def test_bad_eps_and_options_are_refused(eps):
    teacher = sample_hyperteacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1))
    with pytest.raises(ValueError, match="positive finite"):
        build_deep(teacher, eps)
    with pytest.raises(ValueError, match="variant"):
        build_deep(teacher, 1e-2, variant="wide")
    with pytest.raises(ValueError, match="constants"):
        build_deep(teacher, 1e-2, constants="guess")


def tiny_teacher(seed):
    return sample_hyperteacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="continuous", seed=seed))


@pytest.mark.parametrize("seed", range(3))
def test_certificate_is_reached_and_one_level_fewer_violates_eps_on_the_tiny_instance(seed):
    """I = H = O = M = K = 1. ε is put where m = 4 certifies ε/2, so m = 3 certifies only 2ε.
    Seen: the measurer reaches ≥ 0.98 of the certificate for both, so m − 1 measures ~2ε."""
    teacher = tiny_teacher(seed)
    C, a = construction_constants(teacher)
    eps = 2 * theory.certificate(1, C, a, 4)
    net = build_deep(teacher, eps)
    assert net.m == 4
    measured = measure_sup_error(net, teacher, seed=seed).sup_error
    assert 0.9 * net.certificate() <= measured <= net.certificate() + net.rounding_floor()

    fewer = DeepConstruction(teacher, m=net.m - 1, C=C, a=a)
    assert measure_sup_error(fewer, teacher, seed=seed).sup_error > eps


@pytest.mark.parametrize("shrink", [0.5, 0.8])
def test_a_constant_that_is_too_small_is_caught(shrink):
    """C below sup|c_ih| pushes |u|, |v| past 1, where the tents fold back: f_m ≠ t²."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=3, O=2, M=5, K=3, seed=5))
    net = build_deep(teacher, 1e-3, C=shrink * instance_C(teacher.W, teacher.K))
    assert measure_sup_error(net, teacher, **FAST).sup_error > net.certificate()


def test_rounding_floor_bounds_float32_evaluation():
    """The floor is a formula in the unit roundoff u: with u = 2⁻²⁴ it must bound how far
    float32 evaluations (dense and structured) land from float64 on the task set."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=4, H=4, O=3, M=6, K=2, encoding="orthogonal", seed=7))
    net = build_deep(teacher, 1e-4)
    floor32 = net.rounding_floor(unit_roundoff=2.0**-24)
    inputs = random_inputs(teacher, 2048, 1)
    with torch.no_grad():
        reference = net(inputs)
        dense32 = net.to_sequential(dtype=torch.float32)(inputs.float()).double()
        structured32 = DeepConstruction(teacher, net.m, net.C, net.a).float()(inputs.float()).double()
    for value in (dense32, structured32):
        observed = float((value - reference).abs().max())
        assert 0 < observed <= floor32
    # And float64 leaves the certificate ≫ the floor at the ε = 1e-6 (default teacher).
    big = build_deep(sample_hyperteacher(HyperteacherConfig()), 1e-6)
    assert big.m == 13 and big.rounding_floor() <= big.certificate() / 100


def test_default_teacher_needs_hundreds_of_times_fewer_units_than_shallow():
    """The issue's target: at ε = 1e-6, M = 32, ≥ 100× fewer hidden units than shallow."""
    from constructions.shallow import build_shallow

    teacher = sample_hyperteacher(HyperteacherConfig())
    deep, shallow = build_deep(teacher, 1e-6), build_shallow(teacher, 1e-6)
    assert deep.hidden_units().total == 14 * (4 * 16 * 16 + 16) == 14_560
    assert shallow.hidden_units().total / deep.hidden_units().total >= 100
