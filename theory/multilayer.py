"""Multi-layer hyperteachers (spec §1 extension, §6): the formulas behind their construction.

Teacher: h⁰ = x ∈ [-1,1]^I; for l = 1..L, h^l = ReLU(p^l) with
    p^l_h = Σ_i h^{l-1}_i c^l_ih(z) + b^l_h(z),  c^l_ih(z) = Σ_m z̃_m W^l_m[i,h],  b^l_h(z) = Σ_m z̃_m b^l_m[h],
and g = h^L·A (z̃ = z/√K). Everything below is numpy/math; `constructions/multilayer.py` builds the
network from these numbers.

Interval arithmetic (`interval_bounds`). Block l reads h^{l-1}_i ∈ [0, U_i] (x ∈ [-1, 1] for l = 1)
and centres it: h_i = m_i + h'_i with m_i = U_i/2 and |h'_i| ≤ R_i = U_i/2 (m = 0, R = 1 for x). Then
    p_h = Σ_i h'_i c_ih(z) + b'_h(z),   b'_m[h] = b_m[h] + Σ_i m_i W_m[i,h],
so the centre's part is linear in z and joins the bias, and h^l_h ∈ [0, U_h] with
    U_h = max(0, sup_{z ∈ Z_K} [Σ_i R_i |c_ih(z)| + b'_h(z)]).
The bracket is convex in z, so on each support's box [0,1]^S its sup sits at a vertex z = 1_T,
T ⊆ S: the sup over Z_K is a max over the Σ_{k≤K} C(M,k) vertices, which `instance` constants
enumerate (exact, given the box on h). C_ih = sup |c_ih| is exact too: the K largest positive (or
negative) W_m[i,h], over √K. Where the vertices are too many (see VERTEX_LIMIT) the sup is split
into per-term sups, U_h ≤ Σ_i R_i C_ih + sup b'_h ("separable", valid but looser: at the default
teacher U³ is 1948 instead of 208). `apriori` constants take C = √K·2σ(H_{l-1}) and b < 1/2,
which hold for every draw.

Error propagation (`error_bounds`). Block l computes p̂_h = Σ_i R_i C_ih (ŝ(u_ih) − ŝ(v_ih)) + b'_h(z)
from its approximate input ĥ, with u, v = (ĥ'_i/R_i ± c_ih/C_ih)/2 ∈ [-1, 1]. Against the true p:
    |p̂_h − p_h| ≤ Σ_i |R_i C_ih (ŝ(u) − ŝ(v)) − ĥ'_i c_ih| + Σ_i |c_ih(z)| |ĥ_i − h_i|
                ≤ Σ_i R_i C_ih / N_l²  +  F_l(δ^{l-1})_h  =: δ^l_h,
F_l(δ)_h = sup_{Z_K} Σ_i |c_ih(z)| δ_i (the Lipschitz constant of p_h in h, weighted by δ): a max over
the vertices again, or Σ_i C_ih δ_i (separable). The next block reads clamp(p̂) = min(max(p̂, 0), U)
= ReLU(p̂) − ReLU(p̂ − U): 1-Lipschitz and equal to ReLU(p) on the teacher (p ≤ U), so
|ĥ^l − h^l| ≤ min(δ^l, U) (both lie in [0, U]). The last block reads ReLU(p̂); the certificate is
max_o Σ_h |A_ho| δ^L_h.

Allocation (`allocate_N`). F_l is monotone, subadditive and positively homogeneous (a max of
nonnegative linear forms), so dropping the min the certificate is ≤ Σ_l κ_l / N_l² with
κ_l = max_o (|A|ᵀ F_L ∘ ⋯ ∘ F_{l+1}(e_l))_o, e_l = Σ_i R^l_i C^l_ih. Minimising Σ_l w_l N_l
(w_l = 2·H_{l-1}·H units per unit of N_l) under Σ_l κ_l/N_l² = ε gives (Lagrange)
N_l = t·(κ_l/w_l)^{1/3} with t² = Σ_l κ_l^{1/3} w_l^{2/3} / ε. We round up, then lower each N_l
(largest w_l first, by bisection) to the smallest value whose exact certificate is still ≤ ε.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from theory.bounds import CONSTANTS, TRUNCATION, check_eps, check_knots, gamma, init_std, top_k_sum

BIAS_MAX = 0.5  # module biases are Uniform[0, 0.5)
SQUARE_ALPHA_L1 = 6.0  # Σ_k |α_k| of ŝ_N = (2 − 2/N) + (N − 1)·4/N < 6


def sup_linear(w: np.ndarray, K: int) -> np.ndarray:
    """sup over Z_K of Σ_m z̃_m w_m, per column of w (M, ...): the K largest positive entries / √K."""
    return top_k_sum(np.maximum(w, 0.0), K) / math.sqrt(K)


def sup_abs_linear(w: np.ndarray, K: int) -> np.ndarray:
    """sup over Z_K of |Σ_m z̃_m w_m| per column: the larger of the two one-sided sups."""
    return np.maximum(sup_linear(w, K), sup_linear(-w, K))


VERTEX_LIMIT = 2**24  # vertices × H_{l-1} × H entries held per layer (128 MiB); beyond: separable


def n_vertices(M: int, K: int) -> int:
    """Nonzero vertices of Z_K: the indicator vectors 1_T of the Σ_{k≤K} C(M,k) supports T."""
    return sum(math.comb(M, k) for k in range(1, min(K, M) + 1))


def vertex_values(w: np.ndarray, K: int) -> np.ndarray:
    """Σ_{m∈T} w_m / √K for every support T with 1 ≤ |T| ≤ K: (V, ...) for w of shape (M, ...)."""
    M = w.shape[0]
    sizes = range(1, min(K, M) + 1)
    supports = itertools.chain.from_iterable(itertools.combinations(range(M), k) for k in sizes)
    rows = [w[list(T)].sum(axis=0) for T in supports]
    return np.stack(rows) / math.sqrt(K)


@dataclass(frozen=True)
class LayerBounds:
    """What block l knows about its teacher layer, from interval arithmetic."""

    C: np.ndarray  # (H_{l-1}, H): C_ih ≥ sup_{Z_K} |c_ih(z)|
    centre: np.ndarray  # (H_{l-1},): m_i, midpoint of the input's range (0 for x)
    R: np.ndarray  # (H_{l-1},): half-width of the input's range (1 for x)
    b_centred: np.ndarray  # (M, H): b'_m = b_m + Σ_i m_i W_m[i, :], the bias with the centre's part
    U: np.ndarray  # (H,): the teacher's h^l lies in [0, U] on X × Z_K
    abs_c: np.ndarray | None = None  # (V, H_{l-1}, H): |c_ih| at the vertices of Z_K, or None (separable)

    def lipschitz(self, delta: np.ndarray) -> np.ndarray:
        """F(δ)_h ≥ sup_{Z_K} Σ_i |c_ih(z)| δ_i: exact at the vertices, else Σ_i C_ih δ_i."""
        if self.abs_c is None:
            return self.C.T @ delta
        return np.einsum("vih,i->vh", self.abs_c, delta).max(axis=0)


def layer_bounds(W: np.ndarray, b: np.ndarray, K: int, centre: np.ndarray, R: np.ndarray,
                 constants: str = "instance", vertex_limit: int = VERTEX_LIMIT) -> LayerBounds:
    """One layer's bounds, given that its input lies in [centre − R, centre + R]."""
    M, n_in, H = W.shape
    b_centred = b + np.einsum("i,mih->mh", centre, W)
    abs_c = None
    if constants == "apriori":
        # |c_ih| ≤ K·2σ/√K; b'_h ≤ (K/√K)(1/2 + 2σ Σ_i m_i), so U = √K/2 + Σ_i (R_i + m_i)·C.
        C = np.full((n_in, H), math.sqrt(K) * TRUNCATION * init_std(n_in))
        U = np.full(H, math.sqrt(K) * BIAS_MAX) + (R + np.abs(centre)) @ C
    else:
        C = sup_abs_linear(W.reshape(M, -1), K).reshape(n_in, H)
        if n_vertices(M, K) * n_in * H <= vertex_limit:
            abs_c = np.abs(vertex_values(W, K))
            top = np.einsum("vih,i->vh", abs_c, R) + vertex_values(b_centred, K)
            U = np.maximum(0.0, top.max(axis=0))
        else:
            U = np.maximum(0.0, R @ C + sup_linear(b_centred, K))
    return LayerBounds(C=C, centre=centre, R=R, b_centred=b_centred, U=U, abs_c=abs_c)


def interval_bounds(Ws, bs, K: int, constants: str = "instance",
                    vertex_limit: int = VERTEX_LIMIT) -> list[LayerBounds]:
    """Per-layer ranges C, centres, half-widths R, centred biases and activation bounds U:
    x ∈ [-1, 1]^I for layer 1, then each layer's [0, U] is the next layer's input range."""
    if constants not in CONSTANTS:
        raise ValueError(f"constants must be one of {', '.join(CONSTANTS)}; got {constants!r}")
    out = []
    centre, R = np.zeros(Ws[0].shape[1]), np.ones(Ws[0].shape[1])
    for W, b in zip(Ws, bs, strict=True):
        out.append(layer_bounds(W, b, K, centre, R, constants, vertex_limit))
        centre, R = out[-1].U / 2, out[-1].U / 2
    return out


def error_bounds(bounds: list[LayerBounds], N) -> list[np.ndarray]:
    """δ^l per layer (see the module docstring); blocks before the last are clamped to U."""
    deltas, prev = [], np.zeros(bounds[0].C.shape[0])
    for l, (lb, N_l) in enumerate(zip(bounds, N, strict=True)):
        d = lb.lipschitz(prev) + (lb.C.T @ lb.R) / N_l**2
        if l < len(bounds) - 1:
            d = np.minimum(d, lb.U)
        deltas.append(d)
        prev = d
    return deltas


def certificate(bounds: list[LayerBounds], A: np.ndarray, N) -> float:
    """max_o Σ_h |A_ho| δ^L_h: each output is off by at most this on X × Z_K."""
    return float((np.abs(A).T @ error_bounds(bounds, N)[-1]).max())


def kappas(bounds: list[LayerBounds], A: np.ndarray) -> np.ndarray:
    """κ_l = max_o (|A|ᵀ F_L ∘ ⋯ ∘ F_{l+1}(e_l))_o, so certificate ≤ Σ_l κ_l / N_l²."""
    out = []
    for l, lb in enumerate(bounds):
        v = lb.C.T @ lb.R
        for later in bounds[l + 1:]:
            v = later.lipschitz(v)
        out.append(float((np.abs(A).T @ v).max()))
    return np.array(out)


def square_weights(bounds: list[LayerBounds]) -> np.ndarray:
    """w_l = 2·H_{l-1}·H: the hidden units block l spends per unit of N_l."""
    return np.array([2 * lb.C.shape[0] * lb.C.shape[1] for lb in bounds], dtype=float)


def allocate_N(bounds: list[LayerBounds], A: np.ndarray, eps: float) -> tuple[int, ...]:
    """N_l minimising Σ_l w_l N_l subject to certificate ≤ ε: Lagrange optimum, ceil, then trim."""
    check_eps(eps)
    kap, w = kappas(bounds, A), square_weights(bounds)
    t = math.sqrt(float(np.sum(np.cbrt(kap) * np.cbrt(w) ** 2)) / eps)
    N_real = [t * float(np.cbrt(k / wl)) for k, wl in zip(kap, w, strict=True)]
    check_knots(max(N_real), eps, "knots per square in one block")
    N = [max(1, math.ceil(n)) for n in N_real]
    # Σ κ_l/N_l² ≤ ε at the real-valued optimum, and ceil only lowers it; the float sums
    # can still land a hair above ε, so raise N where needed (a few steps at most below
    # MAX_KNOTS), then lower it greedily.
    for _ in range(4):
        if certificate(bounds, A, N) <= eps:
            break
        N = [n + 1 for n in N]
    else:
        raise ArithmeticError(f"allocate_N did not settle at N={N} for ε={eps!r}")
    for l in np.argsort(-w, kind="stable"):
        lo, hi = 0, N[l]  # certificate(N_l = hi) ≤ ε; it only grows as N_l falls
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if certificate(bounds, A, N[:l] + [mid] + N[l + 1:]) <= eps else (mid, hi)
        N[l] = hi
    return tuple(N)


@dataclass(frozen=True)
class MultiLayerHiddenUnits:
    """Hidden units of the multi-layer construction: per block a squares layer, then a teacher layer."""

    squares: tuple[int, ...]  # 2·H_{l-1}·H·N_l per block
    M: int
    H: int

    @property
    def L(self) -> int:
        return len(self.squares)

    @property
    def widths(self) -> tuple[int, ...]:
        """[squares_l + M carry z], then [H ReLU(p̂) + H clamp ReLU(p̂ − U) + M carry] (last: H)."""
        out = []
        for l, s in enumerate(self.squares):
            out += [s + self.M, (2 * self.H + self.M) if l < self.L - 1 else self.H]
        return tuple(out)

    @property
    def total(self) -> int:
        return sum(self.widths)

    @property
    def terms(self) -> dict[str, int]:
        terms = {f"squares 2·H_{l}·H·N_{l + 1}": s for l, s in enumerate(self.squares)}
        terms["carry z (2L−1)·M"] = (2 * self.L - 1) * self.M
        terms["teacher units L·H"] = self.L * self.H
        terms["clamp units (L−1)·H"] = (self.L - 1) * self.H
        return terms


def hidden_units(sizes, M: int, N) -> MultiLayerHiddenUnits:
    """sizes = (H_0 = I, H_1, ..., H_L) with H_l = H for l ≥ 1."""
    H = sizes[-1]
    return MultiLayerHiddenUnits(
        squares=tuple(2 * h_in * H * int(n) for h_in, n in zip(sizes[:-1], N, strict=True)), M=M, H=H)


def count_formula() -> str:
    return "Σ_l (2·H_{l−1}·H·N_l + M) + (L−1)·(2·H + M) + H"


def count_closed_form(I: int, H: int, M: int, N) -> int:
    """The formula as arithmetic, independent of MultiLayerHiddenUnits (tests compare the two)."""
    L = len(N)
    return sum(2 * (I if l == 0 else H) * H * N[l] + M for l in range(L)) + (L - 1) * (2 * H + M) + H


def rounding_floor(bounds: list[LayerBounds], Ws, A: np.ndarray, N, K: int, orthogonal: bool,
                   unit_roundoff: float = 2.0**-53, dense: bool = False) -> float:
    """Worst-case floating-point error of evaluating the network on X × Z_K.

    Model: a computed dot product of n terms is off by ≤ γ_n·Σ|terms| (γ_n = nu/(1 − nu)),
    ReLU is exact, errors in a layer's inputs pass through |weights|. Per block l, with r^{l-1}
    the error of each of the previous block's output units:
    - square pre-activations q = ĥ'_i/(2R_i) ± c_ih/(2C_ih) − t_k: local error
      γ_{n1}·T1 + ζ·‖ω‖₁ with T1 = (U + 2δ + 2r)/(2R) (the ReLU(p̂) and clamp units) [½ for x]
      + Σ|ω_m z_m| (ω = W/(2√K·C); over Z_K at most K terms, ≤ top-K sum; block 1 with the
      orthogonal encoding reads e instead: ≤ ‖ω‖₂·‖e‖₂ = ‖ω‖₂·‖z‖₂ ≤ ‖ω‖₂√K) + 3/2 (biases);
      ζ = γ_{M}√K is the error of a decoded z_m = (eQ)_m (0 for identity).
    - p̂_h = Σ_i R_i C_ih Σ_k α_k (s⁺ − s⁻) + b'(z): the square errors reach p̂ through
      Σ_k |α_k| ≤ 6 (dense) or the chord's slope ≤ 2 plus its own ~6 operations (structured);
      the accumulation adds γ_{n2}·T2, T2 = 2·6·(2 + q_err)·Σ_i R_i C_ih + Σ_m |b'_mh| z̃_m + U_h.
    - inherited: ĥ = ReLU(p̂) − ReLU(p̂ − U) is off by ≤ 2r; the block's map ĥ ↦ p̂ has slope
      ≤ R·C·(2 + 2)/(2R) = 2C per input (|ŝ'| ≤ 2), so r^l ≤ 4·Cᵀ r^{l-1} + local.
    The readout adds max_o Σ_h |A_ho| (r_h + γ_{H}(U_h + δ_h)). Dense: n1 = fan-in + 1 of the
    squares layer (M + I, then 2H + M), n2 = 2·H_{l-1}·N_l + M + 1. Structured: n1 = M + 4
    (c = z·W/C, centring, scaling, halving), n2 = H_{l-1} + M + 1, and magnitudes are no larger.
    """
    u = unit_roundoff
    M = Ws[0].shape[0]
    deltas = error_bounds(bounds, N)
    zeta = gamma(M, u) * math.sqrt(K) if orthogonal else 0.0
    r = np.zeros(bounds[0].C.shape[0])
    U_prev, d_prev = None, None
    for l, (lb, W, N_l) in enumerate(zip(bounds, Ws, N, strict=True)):
        n_in, H = lb.C.shape
        safe_C = np.where(lb.C > 0, lb.C, 1.0)
        omega = np.abs(W) / (2 * math.sqrt(K) * safe_C) * (lb.C > 0)  # (M, n_in, H)
        omega_l1 = omega.sum(axis=0)
        if l == 0 and orthogonal:
            omega_task = np.sqrt((omega**2).sum(axis=0)) * math.sqrt(K)
        else:
            omega_task = sup_linear(omega, K) * math.sqrt(K)  # top-K sum, z ≤ 1
        if l == 0:
            a_part, bias_part = np.full(n_in, 0.5), 1.0
        else:
            safe_R = np.where(lb.R > 0, lb.R, 1.0)
            a_part = np.where(lb.R > 0, (U_prev + 2 * d_prev + 2 * r) / (2 * safe_R), 0.0)
            bias_part = 1.5
        T1 = a_part[:, None] + omega_task + bias_part
        if dense:
            n1 = (M + n_in + 1) if l == 0 else (2 * n_in + M + 1)
            n2 = 2 * n_in * N_l + M + 1
            q_err = gamma(n1, u) * T1 + zeta * omega_l1
            square_err = 2 * SQUARE_ALPHA_L1 * q_err
        else:
            n1, n2 = M + 4, n_in + M + 1
            q_err = gamma(n1, u) * T1 + zeta * omega_l1
            # ŝ by its chord: slope ≤ 2 on the input error, own rounding ≤ γ_8·8 (|terms| ≤ 5 + knot)
            square_err = 2 * (2 * q_err + gamma(8, u) * 8.0)
        RC = lb.R[:, None] * lb.C
        b_abs = sup_linear(np.abs(lb.b_centred), K)
        T2 = (2 * SQUARE_ALPHA_L1 * (2 + q_err) * RC).sum(axis=0) + b_abs + lb.U
        local = (RC * square_err).sum(axis=0) + gamma(n2, u) * T2 \
            + zeta * np.abs(lb.b_centred).sum(axis=0) / math.sqrt(K)
        r = 4 * lb.C.T @ r + local
        U_prev, d_prev = lb.U, deltas[l]
    absA = np.abs(A)
    return float((absA.T @ (r + gamma(absA.shape[0], u) * (bounds[-1].U + deltas[-1]))).max())


def symbolic_checks() -> dict[str, bool]:
    """sympy checks of the identities the construction relies on."""
    import sympy as sp

    h, c, R, C, p = sp.symbols("h c R C p", real=True)
    U = sp.Symbol("U", positive=True)
    u, v = (h / R + c / C) / 2, (h / R - c / C) / 2
    checks = {"scaled polarization h·c = R·C·(u² − v²)": sp.simplify(R * C * (u**2 - v**2) - h * c) == 0}
    relu = lambda t: sp.Max(t, 0)  # noqa: E731
    clamp = sp.Min(sp.Max(p, 0), U)
    checks["clamp = ReLU(p) − ReLU(p − U)"] = all(
        sp.simplify((relu(p) - relu(p - U) - clamp).subs(p, val)) == 0
        for val in (-U, U / 3, U, 2 * U))
    # Lagrange: minimise Σ w_l N_l subject to Σ κ_l/N_l² = ε; N_l = t (κ_l/w_l)^{1/3} is stationary.
    k1, k2, w1, w2, eps = sp.symbols("kappa1 kappa2 w1 w2 epsilon", positive=True)
    t = sp.sqrt((sp.cbrt(k1) * sp.cbrt(w1) ** 2 + sp.cbrt(k2) * sp.cbrt(w2) ** 2) / eps)
    N1, N2 = t * sp.cbrt(k1 / w1), t * sp.cbrt(k2 / w2)
    lagr_ok = sp.simplify(k1 / N1**2 + k2 / N2**2 - eps) == 0
    # Stationarity: w_l = 2λ κ_l / N_l³ with one λ for both layers.
    lam1, lam2 = w1 * N1**3 / (2 * k1), w2 * N2**3 / (2 * k2)
    checks["Lagrange allocation meets ε and is stationary"] = lagr_ok and sp.simplify(lam1 - lam2) == 0
    # The terms of MultiLayerHiddenUnits sum to the count formula (symbolic N_l, L = 3).
    I_, H_, M_, n1, n2, n3 = sp.symbols("I H M N1 N2 N3", positive=True, integer=True)
    L_ = 3
    terms = (2 * I_ * H_ * n1 + 2 * H_ * H_ * (n2 + n3) + (2 * L_ - 1) * M_ + L_ * H_ + (L_ - 1) * H_)
    formula = sum(2 * hin * H_ * n + M_ for hin, n in ((I_, n1), (H_, n2), (H_, n3))) \
        + (L_ - 1) * (2 * H_ + M_) + H_
    checks["count terms sum to Σ_l (2·H_{l−1}·H·N_l + M) + (L−1)·(2H + M) + H"] = \
        sp.expand(terms - formula) == 0
    return checks
