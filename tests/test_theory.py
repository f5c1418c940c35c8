"""The constants of `theory.bounds`, derived symbolically and checked numerically."""

import itertools
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from constructions import enumerate_supports
from tests.strategies import assert_smallest_that_certifies, certificate_constants
from theory import bounds, symbolic


def test_interpolation_error_peaks_at_midpoint_with_h2_over_4():
    error, argmax, max_value = symbolic.interpolation_error_on_segment()
    t, t0, h = sp.symbols("t t0 h", real=True)
    assert sp.simplify(argmax - (t0 + h / 2)) == 0
    assert sp.simplify(max_value - h**2 / 4) == 0
    # The chord lies above t² on the whole segment and touches it at both ends.
    assert error.subs(t, t0) == 0 and sp.simplify(error.subs(t, t0 + h)) == 0
    assert sp.simplify(error.subs(t, t0 + h / 3) - 2 * h**2 / 9) == 0


def test_uniform_knots_give_one_over_N_squared():
    N = sp.Symbol("N", positive=True, integer=True)
    assert sp.simplify(symbolic.interpolation_max_error_uniform(N) - 1 / N**2) == 0


def test_polarization_identity():
    assert symbolic.polarization_residual() == 0


def test_certificate_formula_matches_the_derivation():
    I, a, C, N = sp.symbols("I a C N", positive=True)
    derived = symbolic.certificate_expr()
    assert sp.simplify(derived - I * C * a / N**2) == 0
    rng = np.random.default_rng(0)
    for _ in range(20):
        vals = dict(I=int(rng.integers(1, 30)), C=rng.uniform(0.1, 5), a=rng.uniform(0.1, 20),
                    N=int(rng.integers(1, 10_000)))
        expected = float(derived.subs({I: vals["I"], a: vals["a"], C: vals["C"], N: vals["N"]}))
        assert bounds.certificate(**vals) == pytest.approx(expected, rel=1e-12)


def test_N_sqrt_eps_tends_to_sqrt_ICa():
    lower, upper = symbolic.N_sqrt_eps_limit()
    I, C, a = sp.symbols("I C a", positive=True)
    assert sp.simplify(lower - sp.sqrt(I * C * a)) == 0
    assert sp.simplify(upper - lower) == 0
    # And numerically, N·√ε approaches the limit from above with a gap ≤ √ε.
    for eps in 10.0 ** -np.arange(1, 12):
        N = bounds.N_for_eps(16, 1.3, 5.8, eps)
        limit = math.sqrt(16 * 1.3 * 5.8)
        assert limit <= N * math.sqrt(eps) <= limit + math.sqrt(eps) + 1e-12


def test_count_is_affine_in_M_with_slope_1_theorem_and_0_lean():
    theorem, lean = symbolic.count_in_M("theorem"), symbolic.count_in_M("lean")
    assert theorem.degree() == 1 and theorem.coeffs()[0] == 1
    assert lean.degree() == 0
    I, H, N, M = sp.symbols("I H N M", positive=True, integer=True)
    for I_, H_, N_, M_ in [(16, 16, 347, 32), (1, 1, 1, 1), (3, 5, 7, 11)]:
        for variant, poly in (("theorem", theorem), ("lean", lean)):
            value = poly.as_expr().subs({I: I_, H: H_, N: N_, M: M_})
            assert bounds.hidden_units(I_, H_, M_, N_, variant).total == value


@given(**certificate_constants, log_eps=st.floats(-12, 2))
def test_N_is_the_smallest_that_certifies(I, C, a, log_eps):
    assert_smallest_that_certifies(bounds.N_for_eps, bounds.certificate, I, C, a, 10.0**log_eps)


@given(**certificate_constants, log_eps=st.floats(-330, -12))
def test_N_search_is_bounded_for_any_tiny_eps(I, C, a, log_eps):
    """Down to subnormal ε: either the minimal N (≤ MAX_KNOTS), or a ValueError that says
    why; never an endless search (the old loop never ended at ε = 1e-300)."""
    eps = 10.0**log_eps
    if eps == 0.0:
        return
    try:
        N = bounds.N_for_eps(I, C, a, eps)
    except ValueError as e:
        assert "2^40" in str(e) and math.sqrt(I * C * a / eps) > bounds.MAX_KNOTS
        return
    assert N <= bounds.MAX_KNOTS + 1
    assert bounds.certificate(I, C, a, N) <= eps
    assert N == 1 or bounds.certificate(I, C, a, N - 1) > eps


@pytest.mark.parametrize("eps", [0.0, -1e-3, math.nan, math.inf])
def test_N_rejects_bad_eps(eps):
    with pytest.raises(ValueError, match="positive finite"):
        bounds.N_for_eps(16, 1.0, 1.0, eps)


@given(N=st.integers(1, 3000))
def test_square_block_error_is_one_over_N2_at_midpoints_and_never_more(N):
    # ŝ and t² are O(1) and each carries a few ulps; their difference is exact otherwise.
    rounding = 8 * 2.0**-53
    knots = bounds.square_knots(N)
    mids = (knots[:-1] + knots[1:]) / 2
    np.testing.assert_allclose(bounds.square_interpolant(mids, N) - mids**2, 1 / N**2, rtol=0, atol=rounding)
    t = np.linspace(-1, 1, 20_001)
    err = bounds.square_interpolant(t, N) - t**2
    assert err.min() >= -rounding and err.max() <= 1 / N**2 + rounding
    np.testing.assert_allclose(bounds.square_interpolant(knots, N), knots**2, rtol=0, atol=rounding)


@given(N=st.integers(1, 500))
def test_relu_sum_equals_closed_form_interpolant_on_the_real_line(N):
    knots, alpha = bounds.square_relu_coefficients(N)
    assert alpha[0] == pytest.approx(-2 + 2 / N) and np.allclose(alpha[1:], 4 / N)
    t = np.linspace(-2, 2, 4001)
    relu_sum = 1.0 + np.maximum(t[:, None] - knots[None, :], 0.0) @ alpha
    np.testing.assert_allclose(relu_sum, bounds.square_interpolant(t, N), atol=1e-12)


@given(M=st.integers(1, 8), K=st.integers(1, 3), seed=st.integers(0, 1000))
def test_instance_C_is_the_exact_sup_over_Z_K(M, K, seed):
    K = min(K, M)
    W = np.random.default_rng(seed).normal(size=(M, 2, 3))
    # |Σ z_m w_m| is convex in z, so its max over the box of a support is at a 0/1 vertex:
    # enumerating every support with z = 1 covers all vertices of Z_K.
    supports = enumerate_supports(M, K)
    z = np.zeros((len(supports), M))
    for row, s in enumerate(supports):
        z[row, s[s >= 0]] = 1.0
    brute = np.abs(np.einsum("sm,mih->sih", z, W)).max() / math.sqrt(K)
    assert bounds.instance_C(W, K) == pytest.approx(brute, rel=1e-12)
    assert bounds.instance_C(W, K) <= math.sqrt(K) * np.abs(W).max() + 1e-12


@given(H=st.integers(1, 8), O=st.integers(1, 5), seed=st.integers(0, 1000))
def test_readout_norm_is_the_inf_to_inf_operator_norm(H, O, seed):
    A = np.random.default_rng(seed).normal(size=(H, O))
    corners = np.array(np.meshgrid(*[[-1.0, 1.0]] * H)).reshape(H, -1).T  # {-1, 1}^H
    assert bounds.readout_norm(A) == pytest.approx(np.abs(corners @ A).max(), rel=1e-12)


def test_apriori_constant_is_the_truncation_bound():
    sigma = math.sqrt(math.sqrt(3) / 16) / 0.87962566103423978
    assert bounds.apriori_C_W(16) == pytest.approx(2 * sigma, rel=1e-15)
    assert bounds.apriori_C(16, 3) == pytest.approx(2 * sigma * math.sqrt(3), rel=1e-15)


def test_rounding_floor_grows_with_N_and_is_far_larger_for_float32():
    f64 = bounds.rounding_floor(16, 16, 32, 3, 1.3, 5.8, 347)
    f32 = bounds.rounding_floor(16, 16, 32, 3, 1.3, 5.8, 347, unit_roundoff=2.0**-24)
    assert 0 < f64 < 1e-8 < f32
    assert bounds.rounding_floor(16, 16, 32, 3, 1.3, 5.8, 3470) > f64
    assert bounds.rounding_floor(16, 16, 32, 3, 1.3, 5.8, 347, dense=False) < f64


def test_rounding_floor_is_the_documented_gamma_bound():
    """The floor is γ_n·a·(16·I·C + √K) with n = 2·I·N + M + H terms for the dense network and
    M + I + H for the structured one (the docstring's count), written out here on one case, so
    that a shorter count (a smaller floor, a weaker claim) is caught; and inf once γ_n is."""
    I, H, M, K, C, a, N = 2, 3, 5, 2, 1.5, 2.5, 100
    size = a * (16 * I * C + math.sqrt(K))
    assert bounds.rounding_floor(I, H, M, K, C, a, N) == bounds.gamma(2 * 2 * 100 + 5 + 3) * size
    assert bounds.rounding_floor(I, H, M, K, C, a, N, dense=False) == bounds.gamma(5 + 2 + 3) * size
    # n·u ≥ 1: no bound at all (inf), whatever the readout, never nan.
    assert bounds.rounding_floor(1, 1, 1, 1, 1.0, 0.0, 1, unit_roundoff=0.5) == math.inf


def test_gamma_is_higham_gamma_n_and_inf_from_n_u_equal_to_one():
    assert bounds.gamma(10, 0.01) == pytest.approx(0.1 / 0.9, rel=1e-15, abs=0.0)
    assert bounds.gamma(3) == pytest.approx(3 * 2.0**-53 / (1 - 3 * 2.0**-53), rel=1e-15, abs=0.0)
    assert bounds.gamma(100, 0.01) == math.inf and bounds.gamma(150, 0.01) == math.inf


@given(M=st.integers(1, 8), K=st.integers(1, 8), seed=st.integers(0, 1000))
def test_top_k_sum_is_the_sum_of_the_k_largest(M, K, seed):
    a = np.random.default_rng(seed).normal(size=(M, 3))
    expected = np.sort(a, axis=0)[::-1][:K].sum(axis=0)
    assert np.allclose(bounds.top_k_sum(a, K), expected, rtol=1e-14, atol=0.0)
    big = np.random.default_rng(seed).normal(size=(1000, 2))  # past numpy's small-array full sort
    expected = np.sort(big, axis=0)[::-1][:K].sum(axis=0)
    assert np.allclose(bounds.top_k_sum(big, K), expected, rtol=1e-12, atol=0.0)


def test_N_is_minimal_at_and_next_to_each_certificate_value():
    """ε exactly a certificate value I·C·a/N² (the boundary the ≤ decides) and one ulp either
    side: N_for_eps is the smallest N whose certificate is ≤ ε, found by counting up from 1,
    including where sqrt and ceil land one off (both of its correcting steps are taken here)."""
    rng = np.random.default_rng(0)
    steps = {"down": 0, "up": 0}
    for _ in range(300):
        I, C, a = int(rng.integers(1, 20)), float(rng.uniform(0.1, 3)), float(rng.uniform(0.1, 3))
        for N in (1, 2, 3, int(rng.integers(4, 2000))):
            cert = bounds.certificate(I, C, a, N)
            for eps in (cert, np.nextafter(cert, 0.0), np.nextafter(cert, np.inf)):
                start = max(1, math.ceil(math.sqrt(I * C * a / eps)))
                brute = next(n for n in itertools.count(max(1, start - 3))
                             if bounds.certificate(I, C, a, n) <= eps)
                assert brute == 1 or bounds.certificate(I, C, a, brute - 1) > eps
                assert bounds.N_for_eps(I, C, a, float(eps)) == brute
                steps["down"] += brute < start
                steps["up"] += brute > start
    assert steps["down"] > 0 and steps["up"] > 0
