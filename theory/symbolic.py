"""Symbolic derivations of the constants used in `theory.bounds` (sympy).

Each function derives one fact from scratch and returns what it found, so the tests
compare the derivation with the numeric formula instead of trusting either alone.

The theorem as built (constructions/shallow.py): teacher g(x, z) = ReLU(x·W(z̃) + b(z̃))·A,
z̃ = z/√K, W(z̃) = Σ_m z̃_m W_m. Write c_ih(z) = Σ_m z̃_m W_m[i,h], linear in z with |c_ih| ≤ C on
the task set. Polarization gives x_i·c_ih = C·(u² − v²) with u, v = (x_i ± c_ih/C)/2 ∈ [-1,1].
Each square is replaced by its linear interpolant on N uniform segments: N ReLUs, over t² by at
most 1/N² (at the midpoints). Layer 1 has 2·I·H·N such units plus M units that carry z (for the
bias b(z̃)); layer 2 is the teacher's H units; the output is the readout A. Errors: C/N² per
product, I·C/N² per hidden unit, a·I·C/N² per output. The constants:

- C, `apriori`: √K·2σ, σ = √(√3/I)/0.8796. Every entry is truncated at 2σ; K active modules,
  divided by √K. It does not depend on M, so the count has slope exactly 1 in M.
- C, `instance`: max_ih max(top-K positive, top-K negative sum of W_m[i,h]) / √K, the exact sup
  of |c_ih| over z ∈ [0,1]^M with ≤ K nonzeros. Never above the spec's √K·max|W|: 13% below it
  at M = 8, 3% at M = 32, 0.7% at M = 256.
- a = max_o Σ_h |A_ho|: the ∞→∞ operator norm of the readout (tested against brute force over
  {±1}^H).
- N = ⌈√(I·C·a/ε)⌉, computed exactly (no off-by-one from floating point), minimal with
  certificate I·C·a/N² ≤ ε.
The `lean` variant carries b(z̃) ≥ 0 itself (H units) instead of z (M units): its count
2·I·H·N + 2·H does not grow with M at all.
"""

from __future__ import annotations

import sympy as sp


def interpolation_error_on_segment():
    """Max of chord(t) − t² on [t0, t0 + h], and where it is attained.

    Returns (error_expr, argmax_expr, max_value) in the symbols t0, h. The chord of a
    convex function lies above it, the gap is (t − t0)(t0 + h − t), a parabola whose peak
    sits at the midpoint with value h²/4. With h = 2/N that is 1/N².
    """
    t, t0, h = sp.symbols("t t0 h", real=True)
    chord = t0**2 + ((t0 + h) ** 2 - t0**2) / h * (t - t0)
    error = sp.factor(sp.expand(chord - t**2))
    argmax = sp.solve(sp.diff(error, t), t)[0]
    max_value = sp.simplify(error.subs(t, argmax))
    return error, argmax, max_value


def interpolation_max_error_uniform(N=None):
    """h²/4 with h = 2/N: the square block's worst error on N uniform segments."""
    N = N if N is not None else sp.Symbol("N", positive=True, integer=True)
    _, _, max_value = interpolation_error_on_segment()
    return sp.simplify(max_value.subs(sp.Symbol("h", real=True), 2 / N))


def polarization_residual():
    """x·c − C·(u² − v²) with u = (x + c/C)/2, v = (x − c/C)/2; it simplifies to 0."""
    x, c = sp.symbols("x c", real=True)
    C = sp.Symbol("C", positive=True)
    u = (x + c / C) / 2
    v = (x - c / C) / 2
    return sp.simplify(x * c - C * (u**2 - v**2))


def product_error_bound():
    """Worst error of C·(ŝ(u) − ŝ(v)) against x·c, given 0 ≤ ŝ − t² ≤ δ for both squares.

    The two one-sided errors enter with opposite signs, so the difference lies in
    [−δ, δ], and the product is off by at most C·δ = C/N².
    """
    C, N = sp.symbols("C N", positive=True)
    e_u, e_v = sp.symbols("e_u e_v", nonnegative=True)
    delta = interpolation_max_error_uniform(N)
    diff = C * (e_u - e_v)
    worst = sp.Max(diff.subs({e_u: delta, e_v: 0}), -diff.subs({e_u: 0, e_v: delta}))
    return sp.simplify(worst)


def certificate_expr():
    """I·(C/N²)·a: I products per hidden unit, ReLU is 1-Lipschitz, readout norm a."""
    I, a, C, N = sp.symbols("I a C N", positive=True)
    return I * product_error_bound().subs(sp.Symbol("C", positive=True), C) * a


def N_sqrt_eps_limit():
    """lim_{ε→0} ⌈√(I·C·a/ε)⌉·√ε = √(I·C·a), squeezing the ceiling between x and x + 1."""
    I, C, a, eps = sp.symbols("I C a epsilon", positive=True)
    x = sp.sqrt(I * C * a / eps)
    lower = sp.limit(x * sp.sqrt(eps), eps, 0, "+")
    upper = sp.limit((x + 1) * sp.sqrt(eps), eps, 0, "+")
    return lower, upper


def count_in_M(variant: str = "theorem"):
    """Hidden units as a polynomial in M, with N fixed (a-priori constants do not see M)."""
    I, H, N, M = sp.symbols("I H N M", positive=True, integer=True)
    carry = M if variant == "theorem" else H
    return sp.Poly(2 * I * H * N + carry + H, M)
