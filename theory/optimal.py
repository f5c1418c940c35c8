"""Instance-optimal allocation (spec §6): one range and one N per product (i, h).

The theorem's network spends the same N on each of the I·H products x_i·c_ih(z) and
charges every one the worst range C and the worst readout row a. Here each product gets
its own:

- Range. c_ih(z) = Σ_m z̃_m W_m[i,h] is linear in z, so on Z_K it fills exactly
  [−neg_ih, pos_ih], with pos/neg the sum of the K largest positive/negative W_m[i,h]
  over √K (`product_ranges`). We centre it: m_ih = (pos − neg)/2, r_ih = (pos + neg)/2,
  and polarise x_i·(c_ih − m_ih) = r_ih·(u² − v²) with u, v = (x_i ± (c_ih − m_ih)/r_ih)/2
  ∈ [-1, 1]. The rest, m_ih·x_i, is linear in x and costs no unit: the first ReLU of
  each square block has its knot at −1, so ReLU(u+1) + ReLU(v+1) − 2 = u + v = x_i on the
  box. (Without centring the range would be C_ih = max(pos, neg) ≥ r_ih, the brief's
  design; `center=False` gives it.)
- Error. ŝ_N − t² ∈ [0, 1/N²] on [-1, 1] (theory.symbolic), so product (i, h) is off by
  at most r_ih/N_ih². Unit h's pre-activation is off by ≤ Σ_i r_ih/N_ih², the ReLU is
  1-Lipschitz, and output o sums |A_ho| of those:

      certificate = max_o Σ_h |A_ho| Σ_i r_ih / N_ih²

  With N_ih = N and r_ih ≤ C this is ≤ I·C·a/N², the theorem's certificate.
- Allocation. Minimise Σ_ih N_ih subject to load_o(N) = Σ_(i,h) w_o,ih N_ih⁻² ≤ ε for
  every o (w_o,ih = |A_ho|·r_ih) and N_ih ≥ 1. The relaxation over reals is convex. Its
  Lagrange dual is g(λ) = Σ_ih φ(Σ_o λ_o w_o,ih) − ε·Σ_o λ_o with
  φ(s) = min_{N≥1} N + s/N², attained at N = max(1, (2s)^{1/3}) (KKT). g is concave and
  smooth in λ ≥ 0; we maximise it with L-BFGS-B. By weak duality g(λ) is a lower bound
  on Σ N of every feasible allocation, integer or not, for *any* λ ≥ 0: it certifies
  how close the integer answer is, whether or not the solver fully converged.
  Integer N: round the continuous optimum up (feasible), then trim greedily by 1 where
  the certificate stays ≤ ε, cheapest certificate increase relative to slack first,
  until no single decrement fits. The uniform N that fits the same certificate is the
  fallback start, so the answer never uses more units than that.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from theory import bounds
from theory.bounds import VARIANTS, check_eps, gamma, top_k_sum

UNIT_ROUNDOFF = 2.0**-53


def product_ranges(W: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(pos, neg), each (I, H): sup and −inf over Z_K of c_ih(z) = Σ_m z_m W_m[i,h]/√K.

    z ∈ [0,1]^M with ≤ K nonzeros maximises the sum by picking the K largest positive
    W_m[i,h] at weight 1 (and 0 is in the range, z = 0). The same operations as
    theory.bounds.instance_C, so max(pos, neg).max() equals it bit for bit.
    """
    M, I, H = W.shape
    flat = W.reshape(M, -1)
    top_pos = top_k_sum(np.maximum(flat, 0.0), K)
    top_neg = top_k_sum(np.maximum(-flat, 0.0), K)
    root_K = math.sqrt(K)
    return (top_pos / root_K).reshape(I, H), (top_neg / root_K).reshape(I, H)


def product_constants(W: np.ndarray, K: int, center: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(m, r), each (I, H): |c_ih(z) − m_ih| ≤ r_ih on Z_K.

    Centred: m = (pos − neg)/2, r = (pos + neg)/2, the exact half-width of the range.
    Uncentred: m = 0, r = max(pos, neg) = C_ih, the brief's per-product range.
    """
    pos, neg = product_ranges(W, K)
    if center:
        return (pos - neg) / 2.0, (pos + neg) / 2.0
    return np.zeros_like(pos), np.maximum(pos, neg)


def output_loads(r: np.ndarray, N: np.ndarray, A: np.ndarray) -> np.ndarray:
    """load_o = Σ_h |A_ho| Σ_i r_ih/N_ih², shape (O,): the error bound of output o."""
    per_unit = (r / np.asarray(N, dtype=np.float64) ** 2).sum(axis=0)  # (H,)
    return np.abs(A).T @ per_unit


def certificate(r: np.ndarray, N: np.ndarray, A: np.ndarray) -> float:
    """max_o Σ_h |A_ho| Σ_i r_ih/N_ih²: the proven sup error over X × Z_K."""
    return float(output_loads(r, N, A).max())


def budget(eps: float, I: int, H: int) -> float:
    """The largest computed certificate we accept for ε.

    Every term of the float certificate passes ≤ I + H + 2 roundings (N², r/N², the sum
    over i, the product with |A_ho|, the sum over h), so the exact value is
    ≤ computed/(1 − γ). Accepting computed ≤ ε·(1 − 2γ) makes the exact certificate of the
    float constants ≤ ε: a relative margin of ~10⁻¹⁴, invisible in N.
    """
    check_eps(eps)
    return eps * (1.0 - 2.0 * gamma(I + H + 2))


def fits(r: np.ndarray, N: np.ndarray, A: np.ndarray, eps: float) -> bool:
    """Whether the certificate of N is ≤ ε in exact arithmetic (see `budget`)."""
    return certificate(r, N, A) <= budget(eps, *r.shape)


def uniform_N(r: np.ndarray, A: np.ndarray, eps: float) -> int:
    """Smallest single N for all products with this (per-product) certificate ≤ ε."""
    ones = np.ones(r.shape)
    N_real = math.sqrt(certificate(r, ones, A) / budget(eps, *r.shape))
    bounds.check_knots(N_real, eps)
    N = max(1, math.ceil(N_real))
    for _ in range(4):  # float slips only: bounded (see theory.bounds.MAX_KNOTS)
        if N > 1 and fits(r, (N - 1) * ones, A, eps):
            N -= 1
        elif not fits(r, N * ones, A, eps):
            N += 1
        else:
            return N
    raise ArithmeticError(f"uniform_N did not settle at N={N} for ε={eps!r}")


@dataclass(frozen=True)
class Allocation:
    """The integer N_ih, with the continuous relaxation that certifies it."""

    N: np.ndarray  # (I, H) int64, feasible and minimal (no single N_ih − 1 fits)
    lower_bound: float  # g(λ): no allocation, integer or real, has a smaller Σ N
    continuous_sum: float  # Σ N of the feasible continuous point the rounding started from
    multipliers: np.ndarray  # (O,) λ_o ≥ 0 of load_o ≤ ε at the dual optimum: > 0 where o binds
    start: str  # "continuous" or "uniform": where the trimmed answer came from
    trims: int  # unit decrements the greedy pass made
    solver_seconds: float
    solver_iterations: int

    @property
    def total(self) -> int:
        return int(self.N.sum())


def allocate(r: np.ndarray, A: np.ndarray, eps: float) -> Allocation:
    """Minimise Σ N_ih subject to certificate ≤ ε and N_ih ≥ 1 (module docstring)."""
    I, H = r.shape
    start_time = time.perf_counter()
    eps_eff = budget(eps, I, H)
    # w[o, i·H + h] = |A_ho| r_ih / ε: the constraints read w @ N⁻² ≤ 1.
    w = (np.abs(A).T[:, None, :] * r[None, :, :]).reshape(A.shape[1], I * H) / eps_eff
    N_uniform = uniform_N(r, A, eps)
    if not w.any():  # every product is identically 0: one dead pair of units each
        ones = np.ones((I, H), dtype=np.int64)
        return Allocation(ones, float(I * H), float(I * H), np.zeros(A.shape[1]), "uniform", 0, 0.0, 0)

    # Dual ascent in λ = λ0·ν. λ0 puts N(ν = 1) at the scale of the uniform N, and the
    # objective is divided by the uniform Σ N, so L-BFGS-B works on O(1) numbers.
    col = w.sum(axis=0)
    lam0 = N_uniform**3 / (2.0 * col.mean())
    scale = float(I * H * N_uniform)

    def primal(nu):
        s = lam0 * (nu @ w)
        return s, np.maximum(1.0, np.cbrt(2.0 * s))

    def negative_dual(nu):
        s, N = primal(nu)
        g = float(np.sum(N + s / N**2) - lam0 * nu.sum())
        grad = lam0 * (w @ N**-2 - 1.0)  # Danskin: the constraint residuals at N(λ)
        return -g / scale, -grad / scale

    result = minimize(negative_dual, np.ones(A.shape[1]), jac=True, method="L-BFGS-B",
                      bounds=[(0.0, None)] * A.shape[1],
                      options=dict(maxiter=5000, ftol=1e-15, gtol=1e-12))
    nu = np.maximum(result.x, 0.0)
    lower_bound = -negative_dual(nu)[0] * scale
    N_cont = primal(nu)[1]
    # The solver's point can miss the constraints by a hair; scaling N by √(max load)
    # restores them (load ∝ N⁻²), giving a feasible continuous point.
    N_cont = N_cont * math.sqrt(max(1.0, float((w @ N_cont**-2).max())))
    solver_seconds = time.perf_counter() - start_time

    N = np.ceil(N_cont).astype(np.int64).reshape(I, H)
    while not fits(r, N, A, eps):  # only float slips can land here; each pass grows every N
        N = np.ceil(N * (1.0 + 1e-9) + 1e-9).astype(np.int64)
    N, trims = trim(r, N, A, eps)
    start = "continuous"
    if N_uniform * I * H < N.sum():  # near-uniform instances: start from the uniform N
        N_u, trims_u = trim(r, np.full((I, H), N_uniform, dtype=np.int64), A, eps)
        if N_u.sum() < N.sum():
            N, trims, start = N_u, trims_u, "uniform"
    return Allocation(N=N, lower_bound=float(lower_bound), continuous_sum=float(N_cont.sum()),
                      multipliers=lam0 * nu / eps_eff, start=start, trims=trims,
                      solver_seconds=solver_seconds, solver_iterations=int(result.nit))


def trim(r: np.ndarray, N: np.ndarray, A: np.ndarray, eps: float) -> tuple[np.ndarray, int]:
    """Decrease single N_ih by 1 while the certificate stays ≤ ε; stop at a minimal point.

    Every decrement saves the same 2 units, so the greedy choice is the one that uses the
    least of the scarcest slack: argmin over (i, h) of max_o Δload_o / slack_o. Each
    accepted step is re-checked with `fits` on the recomputed certificate (no drift).
    """
    N = N.copy()
    eps_eff = budget(eps, *r.shape)
    Aabs = np.abs(A)
    blocked = np.zeros(N.shape, dtype=bool)
    trims = 0
    while True:
        slack = eps_eff - output_loads(r, N, A)  # (O,)
        Nf = N.astype(np.float64)
        step = np.where(N >= 2, r * (1.0 / np.maximum(Nf - 1.0, 1.0) ** 2 - 1.0 / Nf**2), np.inf)
        delta = Aabs.T[:, None, :] * step[None]  # (O, I, H): load increase of each decrement
        delta = np.where(np.isnan(delta), 0.0, delta)  # 0·inf where |A_ho| = 0
        ok = (delta <= slack[:, None, None]).all(axis=0) & (N >= 2) & ~blocked
        if not ok.any():
            return N, trims
        score = (delta / np.maximum(slack, np.finfo(float).tiny)[:, None, None]).max(axis=0)
        flat = int(np.argmin(np.where(ok, score, np.inf)))
        i, h = divmod(flat, N.shape[1])
        N[i, h] -= 1
        if fits(r, N, A, eps):
            trims += 1
        else:  # the incremental test passed by an ulp that the full sum does not grant
            N[i, h] += 1
            blocked[i, h] = True


class HiddenUnits(bounds.HiddenUnits):
    """The shallow count with Σ_ih 2·N_ih squares (N_ih ReLUs for each of ŝ(u_ih), ŝ(v_ih))
    in place of 2·I·H·N; carry and teacher units as in the theorem's network."""

    @property
    def terms(self) -> dict[str, int]:
        return {"squares Σ 2·N_ih": self.squares, "carry": self.carry, "layer 2 H": self.teacher}


def hidden_units(N: np.ndarray, M: int, H: int, variant: str = "theorem") -> HiddenUnits:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    return HiddenUnits(squares=2 * int(np.sum(N)), carry=M if variant == "theorem" else H, teacher=H)


def count_formula(variant: str = "theorem") -> str:
    return "Σ_ih 2·N_ih + M + H" if variant == "theorem" else "Σ_ih 2·N_ih + 2·H"


def rounding_floor(r: np.ndarray, m: np.ndarray, N: np.ndarray, A: np.ndarray, carry_sum: np.ndarray,
                   layer1_terms: float, carry_terms: np.ndarray, n_ops: int,
                   unit_roundoff: float = UNIT_ROUNDOFF) -> float:
    """First-order worst-case floating-point error of the network on X × Z_K.

    Forward error of a layer y = W·h + b computed in floats: |ŷ − y| ≤ γ_n·(|W||h| + |b|)
    for n accumulated terms, in any summation order; it reaches output o through |A_ho|
    and the 1-Lipschitz ReLUs. With one γ_n (n = every operation on the longest path,
    `n_ops`, so each layer's γ ≤ γ_n) the error of output o is at most
    γ_n·Σ_h |A_ho|·(magnitudes of all three layers of unit h):

    - layer 2 and readout: Σ_k |α_k|·ReLU(t − t_k) ≤ 8 per square block on [-1, 1]
      (|α_0|·2 ≤ 4, and Σ_{k≥1} α_k (t − t_k)₊ = ŝ − 1 + |α_0|(t + 1) ≤ 4), so the squares
      give 16·Σ_i r_ih; the centring weights m on the first units and the bias −2m give
      6·Σ_i |m_ih|; the carry gives ≤ carry_sum_h = sup b_h(z̃). |p_h| and so the readout's
      terms are below the same sum.
    - layer 1: each square unit's pre-activation has Σ|terms| ≤ layer1_terms (x_i/2, the
      z-part, the knot and the offset m/2r); its error is weighted by Σ_k|α_k| ≤ 6 per
      block times r_ih, plus |m_ih| on the first unit: Σ_i (12 r_ih + 2|m_ih|)·layer1_terms.
      The carry units add carry_terms_h.
    Second-order terms (products of two roundings) are below n·u times this and ignored.
    float64: u = 2⁻⁵³; float32: u = 2⁻²⁴.
    """
    g = gamma(n_ops, unit_roundoff)
    r, m = np.asarray(r), np.abs(np.asarray(m))
    per_unit = (16.0 * r.sum(0) + 6.0 * m.sum(0) + carry_sum
                + (12.0 * r + 2.0 * m).sum(0) * layer1_terms + carry_terms)
    return float(g * (np.abs(A).T @ per_unit).max())


def symbolic_checks() -> dict[str, bool]:
    """The identities the construction rests on, derived with sympy."""
    import sympy as sp

    x, c, m, t = sp.symbols("x c m t", real=True)
    r, s, N = sp.symbols("r s N", positive=True)
    u = (x + (c - m) / r) / 2
    v = (x - (c - m) / r) / 2
    # x·c = r(u² − v²) + m·x: centred polarisation.
    centred = sp.simplify(x * c - (r * (u**2 - v**2) + m * x)) == 0
    # On the box u, v ≥ −1, so ReLU(u+1) + ReLU(v+1) − 2 = u + v = x: m·x for free.
    linear_part = sp.simplify((u + 1) + (v + 1) - 2 - x) == 0
    # KKT of N + s/N²: stationary at N = (2s)^{1/3}, a minimum, with value (3/2)(2s)^{1/3}.
    f = N + s / N**2
    N_star = sp.cbrt(2 * s)
    kkt = sp.simplify(sp.diff(f, N).subs(N, N_star)) == 0
    convex = bool(sp.diff(f, N, 2).is_positive)  # 6s/N⁴ > 0: the relaxation is convex
    value = sp.simplify(f.subs(N, N_star) - sp.Rational(3, 2) * sp.cbrt(2 * s)) == 0
    # The square blocks' |α| sums: |α_0|·2 + Σ_{k≥1} α_k·2 on [-1, 1] and Σ_k |α_k| ≤ 6.
    alpha0, alpha_k = -2 + 2 / N, 4 / N
    abs_alpha_sum = sp.simplify(-alpha0 + (N - 1) * alpha_k - (6 - 6 / N)) == 0
    return dict(centred_polarisation=centred, linear_part_from_first_units=linear_part,
                kkt_stationary_point=kkt, objective_convex=convex, kkt_value=value,
                abs_alpha_sum=abs_alpha_sum)
