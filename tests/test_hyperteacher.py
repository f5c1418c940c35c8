"""The task family of spec §1: sampling, supports, weights and the teacher's forward pass."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from constructions import (
    Hyperteacher,
    HyperteacherConfig,
    dense_latents,
    enumerate_supports,
    n_supports,
    sample_hyperteacher,
    sample_supports,
    support_weights,
)
from constructions.tasks.hyperteacher import DISCRETE_LEVELS
from tests.strategies import small_configs
from theory.bounds import init_std


def test_truncated_normal_has_the_bound_and_the_variance_of_the_paper_init():
    t = sample_hyperteacher(HyperteacherConfig(I=16, H=16, O=16, M=256, seed=1))
    sigma = init_std(16)
    assert np.abs(t.W).max() <= 2 * sigma and np.abs(t.A).max() <= 2 * sigma
    # σ is the pre-truncation scale; dividing it by the truncated std makes the variance
    # of the entries exactly √3/I. The sample variance of n draws has standard error
    # ≤ var·√(2/n) (a truncated normal has lighter tails than a normal).
    n, var = t.W.size, math.sqrt(3) / 16
    assert abs(t.W.var() - var) < 5 * var * math.sqrt(2 / n)
    assert abs(t.W.mean()) < 5 * math.sqrt(var / n)
    # Mass near the truncation points: a plain clip of a normal would pile up ~4.6% at ±2σ.
    assert (np.abs(t.W) > 0.999 * 2 * sigma).mean() < 1e-3
    assert t.b.min() >= 0 and t.b.max() < 0.5


def test_same_seed_same_teacher_and_nested_in_M():
    small = sample_hyperteacher(HyperteacherConfig(M=4, seed=7))
    big = sample_hyperteacher(HyperteacherConfig(M=9, seed=7))
    again = sample_hyperteacher(HyperteacherConfig(M=4, seed=7))
    np.testing.assert_array_equal(small.W, again.W)
    np.testing.assert_array_equal(small.A, big.A)
    np.testing.assert_array_equal(small.W, big.W[:4])
    assert not np.array_equal(small.W, sample_hyperteacher(HyperteacherConfig(M=4, seed=8)).W)


@pytest.mark.parametrize("M,K", [(1, 1), (5, 2), (6, 3), (10, 3), (7, 7)])
def test_enumerated_supports_are_all_distinct_subsets_of_size_1_to_K(M, K):
    rows = enumerate_supports(M, K)
    assert len(rows) == n_supports(M, K) == sum(math.comb(M, k) for k in range(1, K + 1))
    sets = {frozenset(r[r >= 0].tolist()) for r in rows}
    assert len(sets) == len(rows)
    assert all(1 <= len(s) <= K and max(s) < M for s in sets)


@given(M=st.integers(1, 50), K=st.integers(1, 5), n=st.integers(1, 200), seed=st.integers(0, 99))
def test_sampled_supports_are_valid_and_every_size_appears(M, K, n, seed):
    K = min(K, M)
    rows = sample_supports(M, K, n, np.random.default_rng(seed))
    sizes = (rows >= 0).sum(axis=1)
    for r in rows:
        active = r[r >= 0]
        assert len(set(active.tolist())) == len(active) and active.max() < M
    assert set(sizes.tolist()) == set(range(1, min(K, n) + 1))


@pytest.mark.parametrize("weights", ["khot", "discrete", "continuous"])
def test_weights_follow_the_spec(weights):
    rng = np.random.default_rng(0)
    supports = sample_supports(12, 3, 3000, rng)
    w = support_weights(supports, weights, rng)
    active = supports >= 0
    assert (w[~active] == 0).all()
    if weights == "khot":
        assert (w[active] == 1).all()
    elif weights == "discrete":
        assert set(np.unique(w[active])) == set(DISCRETE_LEVELS)
    else:
        assert (w[active] > 0.5).all() and (w[active] < 1.0).all()
        # w/(Σw + 1) with one module: the mean of E/(E+1) for E ~ Exp(1) is 1 − e·E1(1) ≈ 0.4037.
        single = w[active.sum(axis=1) == 1][:, 0]
        assert abs(2 * (single.mean() - 0.5) - 0.4037) < 5 * 0.25 / math.sqrt(len(single))


@given(cfg=small_configs(), seed=st.integers(0, 99))
def test_forward_matches_the_formula_written_out(cfg, seed):
    t = sample_hyperteacher(cfg)
    rng = np.random.default_rng(seed)
    supports = sample_supports(cfg.M, cfg.K, 16, rng)
    z = dense_latents(supports, support_weights(supports, cfg.weights, rng), cfg.M)
    x = rng.uniform(-1, 1, (16, cfg.I))
    z_tilde = z / math.sqrt(cfg.K)  # always √K, even when |S| < K
    expected = np.stack([
        np.maximum(x[n] @ np.tensordot(z_tilde[n], t.W, 1) + z_tilde[n] @ t.b, 0) @ t.A for n in range(16)
    ])
    got = t.forward(torch.as_tensor(z), torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)
    assert got.dtype == np.float64


def test_orthogonal_encoding_is_orthogonal_and_linear():
    t = sample_hyperteacher(HyperteacherConfig(M=7, encoding="orthogonal", seed=3))
    np.testing.assert_allclose(t.Q @ t.Q.T, np.eye(7), atol=1e-12)
    z = torch.rand(5, 7, dtype=torch.float64)
    np.testing.assert_allclose((t.encode(z) @ torch.as_tensor(t.Q)).numpy(), z.numpy(), atol=1e-12)
    identity = sample_hyperteacher(HyperteacherConfig(M=7, seed=3))
    assert identity.encode(z) is z


def test_npz_round_trip(tmp_path):
    t = sample_hyperteacher(HyperteacherConfig(M=5, K=2, encoding="orthogonal", weights="khot"))
    t.save_npz(tmp_path / "teacher.npz")
    back = Hyperteacher.load_npz(tmp_path / "teacher.npz")
    for name in ("W", "b", "A", "Q"):
        np.testing.assert_array_equal(getattr(t, name), getattr(back, name))
    assert (back.K, back.weights, back.encoding) == (2, "khot", "orthogonal")
    with np.load(tmp_path / "teacher.npz") as f:
        assert f["W"].shape == (5, 16, 16) and f["b"].shape == (5, 16) and f["A"].shape == (16, 16)
        np.testing.assert_array_equal(f["weight_values"], [1.0])


@pytest.mark.parametrize("kwargs,message", [
    (dict(M=3, K=4), "K must be at most M"),
    (dict(M=0), "M must be a positive integer"),
    (dict(I=-1), "I must be a positive integer"),
    (dict(weights="binary"), "weights must be one of"),
    (dict(encoding="tokens"), "encoding must be one of"),
])
def test_bad_configs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sample_hyperteacher(HyperteacherConfig(**kwargs))
