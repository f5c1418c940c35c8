"""The memorization baseline: exact on every `khot` task with H·Σ_k C(M, k) units, and the
checks that show where it breaks (a gate constant that is too small, fractional weights)."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given

import constructions.memorize as memorize
from constructions import (
    HyperteacherConfig,
    build_memorizer,
    dense_latents,
    enumerate_supports,
    sample_hyperteacher,
    sample_inputs,
    support_weights,
)
from constructions.base import count_hidden_units
from constructions.memorize import memorizer_bytes, support_modules
from tests.strategies import small_configs
from theory.bounds import memorization_hidden_units, n_tasks


def errors_on(net, teacher, z, x):
    """max_o |net − g| per row, for latents z (n, M) and inputs x (n, I)."""
    z, x = torch.as_tensor(z), torch.as_tensor(x)
    with torch.no_grad():
        out = net(torch.cat([teacher.encode(z), x], dim=1))
        return (out - teacher.forward(z, x)).abs().max(dim=1).values.numpy()


def every_task(teacher, points_per_task, seed, weights="khot"):
    """Every support, each with `points_per_task` random x ∈ [-1, 1]^I."""
    rng = np.random.default_rng(seed)
    supports = np.repeat(enumerate_supports(teacher.M, teacher.K), points_per_task, axis=0)
    z = dense_latents(supports, support_weights(supports, weights, rng), teacher.M)
    return z, sample_inputs(len(z), teacher.I, rng)


@given(cfg=small_configs(max_io=5, max_M=8))
def test_memorizer_is_exact_on_every_khot_task(cfg):
    teacher = sample_hyperteacher(dataclasses.replace(cfg, weights="khot"))
    net = build_memorizer(teacher)

    assert all(isinstance(m, (torch.nn.Linear, torch.nn.ReLU)) for m in net)
    assert all(p.dtype == torch.float64 for p in net.parameters())
    assert count_hidden_units(net) == [memorization_hidden_units(cfg.M, cfg.K, cfg.H)]
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    assert params == memorizer_bytes(cfg.M, cfg.K, cfg.I, cfg.H, cfg.O)

    z, x = every_task(teacher, points_per_task=4, seed=cfg.seed)
    assert errors_on(net, teacher, z, x).max() <= 1e-12
    # z = 0 closes every gate, and the teacher is ReLU(0)·A = 0 there too.
    x0 = sample_inputs(8, cfg.I, np.random.default_rng(cfg.seed + 1))
    assert errors_on(net, teacher, np.zeros((8, cfg.M)), x0).max() <= 1e-12


@pytest.mark.parametrize("encoding", ["identity", "orthogonal"])
@pytest.mark.parametrize("shrink", [0.5, 0.99])
def test_a_gate_constant_below_the_bound_leaks(encoding, shrink):
    """The worst unit (S*, h*) reaches B at x = sign(W_S*[:, h*]) (b ≥ 0). At a task S' one
    module away from S*, P_S*(z) = 1, so a B shrunk by any factor lets it through. Even
    0.99·B is caught: the bound is tight, and at B itself that point is exact."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=4, H=4, O=3, M=6, K=2, weights="khot",
                                                     encoding=encoding, seed=3))
    indicators, W_S, b_S = support_modules(teacher)
    reach = np.abs(W_S).sum(axis=1) + np.abs(b_S)
    s, h = np.unravel_index(reach.argmax(), reach.shape)
    B = float(reach[s, h])
    x = np.sign(W_S[s, :, h])[None]
    z = indicators[s][None].copy()
    members = np.flatnonzero(z[0])
    if len(members) > 1:
        z[0, members[0]] = 0.0  # S' = S* minus a module
    else:
        z[0, (members[0] + 1) % teacher.M] = 1.0  # S' = S* plus a module (K = 2 allows it)

    assert errors_on(build_memorizer(teacher), teacher, z, x).max() <= 1e-12
    leaky = build_memorizer(teacher, B=shrink * B)
    assert errors_on(leaky, teacher, z, x).max() > 1e-6


@pytest.mark.parametrize("weights", ["discrete", "continuous"])
@pytest.mark.parametrize("encoding", ["identity", "orthogonal"])
def test_fractional_weights_are_not_computed_exactly(weights, encoding):
    """With v_m < 1 the gates are fractional and W_S is the wrong combination: the error is
    O(1), not rounding. Discrete tasks whose weights all happen to be 1 stay exact."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=4, H=4, O=3, M=6, K=3, weights=weights,
                                                     encoding=encoding, seed=7))
    net = build_memorizer(teacher)
    z, x = every_task(teacher, points_per_task=4, seed=7, weights=weights)
    errors = errors_on(net, teacher, z, x)
    assert errors.max() > 1e-3
    binary = np.all((z == 0) | (z == 1), axis=1)
    if weights == "discrete":
        assert binary.any() and errors[binary].max() <= 1e-12
    assert errors[~binary].max() > 1e-3


@pytest.mark.parametrize(("M", "K"), [(1, 1), (5, 1), (5, 5), (7, 2), (8, 3), (12, 4)])
def test_n_tasks_counts_the_enumerated_supports(M, K):
    assert n_tasks(M, K) == len(enumerate_supports(M, K))


def test_memorizer_size_grows_like_M_to_the_K():
    H = 16
    units = memorization_hidden_units(1000, 3, H)
    assert abs(units / (math.comb(1000, 3) * H) - 1) < 0.01
    assert abs(units / (1000**3 / math.factorial(3) * H) - 1) < 0.01
    assert memorization_hidden_units(64, 3, H) == H * (41664 + 2016 + 64)


def test_too_large_a_memorizer_is_refused_before_allocating(monkeypatch):
    teacher = sample_hyperteacher(HyperteacherConfig(I=16, H=16, O=16, M=200, K=3, weights="khot"))

    def must_not_enumerate(*args):
        raise AssertionError("the size check must come before enumerating supports")

    monkeypatch.setattr(memorize, "enumerate_supports", must_not_enumerate)
    with pytest.raises(ValueError, match="GiB"):
        build_memorizer(teacher, max_bytes=2**30)
