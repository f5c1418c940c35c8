"""Hypothesis strategies for small hyperteachers and their constructions."""

import numpy as np
import torch
from hypothesis import strategies as st

from constructions import ENCODINGS, WEIGHTS, HyperteacherConfig
from verify.theorem.presets import TEST_MEASURE


@st.composite
def small_configs(draw, max_io=6, max_M=10):
    M = draw(st.integers(1, max_M))
    return HyperteacherConfig(
        I=draw(st.integers(1, max_io)), H=draw(st.integers(1, max_io)), O=draw(st.integers(1, max_io)),
        M=M, K=draw(st.integers(1, min(3, M))), weights=draw(st.sampled_from(WEIGHTS)),
        encoding=draw(st.sampled_from(ENCODINGS)), seed=draw(st.integers(0, 2**16)))


# A light measurement for small instances (verify.presets.TEST_MEASURE, with every other
# preset), as keyword arguments of measure_sup_error.
FAST = TEST_MEASURE.kwargs()
# The same with a coarse grid for I ≤ 2, where the networks are deep or many (multi-layer, optimal).
FAST_COARSE_GRID = dict(FAST, grid_points=129)

log_eps = st.floats(-4.0, 0.0)  # ε = 10**log_eps ∈ [1e-4, 1]
# A certificate's constants: input size I, Lipschitz-like constant C, input radius a.
certificate_constants = dict(I=st.integers(1, 64), C=st.floats(1e-3, 1e3), a=st.floats(1e-3, 1e3))


def assert_smallest_that_certifies(size_for_eps, certificate, I, C, a, eps) -> int:
    """The size `size_for_eps` gives for ε: its certificate is at most ε, and one less's is
    not (1 is the smallest size). Returns it."""
    n = size_for_eps(I, C, a, eps)
    assert certificate(I, C, a, n) <= eps
    assert n == 1 or certificate(I, C, a, n - 1) > eps
    return n


def random_tasks(teacher, n: int, seed: int, spread: float = 1.0, z_spread: float = 1.0):
    """(z, x) float64 tensors: n tasks of Z_K (at most K nonzeros, each in [0, 1]) and
    n inputs of [-spread, spread]^I. With z_spread > 1 the nonzeros reach z_spread and a
    fifth of all entries is pushed below 0, so z leaves its box too (the dense network
    and the structured one are the same function on all of ℝ^D)."""
    rng = np.random.default_rng(seed)
    M, K = teacher.M, teacher.K
    z = rng.uniform(0, z_spread, (n, M)) * (rng.random((n, M)) < K / M)
    np.put_along_axis(z, np.argsort(-z, axis=1)[:, K:], 0.0, axis=1)  # at most K nonzeros
    if z_spread > 1:
        z -= (z_spread - 1) * rng.random((n, M)) * (rng.random((n, M)) < 0.2)
    x = rng.uniform(-spread, spread, (n, teacher.I))
    return torch.as_tensor(z), torch.as_tensor(x)


def random_inputs(teacher, n: int, seed: int, spread: float = 1.0, z_spread: float = 1.0):
    """The network inputs [e(z), x] of random_tasks."""
    z, x = random_tasks(teacher, n, seed, spread, z_spread)
    return torch.cat([teacher.encode(z), x], dim=1)
