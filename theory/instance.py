"""A rigorous bound on one teacher's sup error, far below the certificate (issue 13).

The shallow construction's error in phase form (exact; proven here, checked in
tests/test_instance_bound.py against the network itself). Write e(t) = ŝ_N(t) − t² for the
interpolant's excess on [-1, 1]. On the segment [t_k, t_k+1] of width 2/N,
e(t) = (t − t_k)(t_k+1 − t) = β((t + 1)·N/2)/N², where β(s) = 4·{s}·(1 − {s}) is the
1-periodic bump ({s} the fractional part). The construction's p̂_h differs from the
teacher's p_h = Σ_i x_i·c_ih(z) + b_h(z̃) by

    δ_h = C·Σ_i [e(u_ih) − e(v_ih)] = (C/N²)·Σ_i B(θ_i, φ_ih),   B(θ, φ) = β(θ + φ) − β(θ − φ),

with u, v = (x_i ± c_ih/C)/2 ∈ [-1, 1], the input's phase θ_i = (x_i + 2)·N/4 and the task's
phase φ_ih = N·c_ih(z)/(4C). Then f_o − g_o = Σ_h A_ho·(ReLU(p_h + δ_h) − ReLU(p_h)).

Three facts make the sup over x computable exactly:
1. ReLU(p + δ) − ReLU(p) = γ·δ with γ ∈ [0, 1], so σ(f − g)_o ≤ Σ_h (σA_ho·δ_h)⁺
   ≤ (C/N²)·Σ_i Σ_h (σA_ho·B(θ_i, φ_ih))⁺ for either sign σ, since (Σ_i a_i)⁺ ≤ Σ_i a_i⁺.
   The right side separates over i: each θ_i is free, so it is at most
   (C/N²)·Σ_i max_θ F_io(θ), F_io(θ) = Σ_h (σA_ho·B(θ, φ_ih))⁺, θ over a whole period
   (x_i ∈ [-1, 1] sweeps θ_i over N/2 periods; for N = 1 over half of one, and the whole
   period is then an over-estimate, still sound).
2. B is piecewise linear in θ: on a piece where {θ + φ} = θ + φ − k and {θ − φ} = θ − φ − j,
   B = 4·(2φ − k + j)·(1 − 2θ + k + j); the θ² terms cancel. Its kinks are at θ ≡ ±φ,
   and it vanishes at θ ≡ 0 and θ ≡ 1/2 (β is even, and symmetric about 1/2), which are
   also the only places a piece with 2φ − k + j ≠ 0 crosses zero.
3. So F_io is piecewise linear with kinks only at θ ∈ {0, 1/2} ∪ {±φ_ih mod 1}, and its
   maximum over the period is its largest value there (F = 0 at 0 and 1/2).
4. Both signs σ have the same bound: B(−θ, φ) = −B(θ, φ) (β is even), so the kinks of σ = −1
   are those of σ = +1 mirrored, with the same values.
Hence `task_bound`: an upper bound on sup_x ‖f(e(z), x) − g(x, z)‖∞ for one task z, exact
up to the two relaxations of fact 1 and float64 rounding.

Over a box of tasks (`box_bound`), each φ_ih ranges over an interval Φ_ih. Then
B(θ, φ) ≤ max_Φ β(θ + ·) − min_Φ β(θ − ·), and the smallest B likewise, and each side is
Lipschitz in θ with constant 8 (β is 4-Lipschitz, and a max or min of a window of it too).
The max over θ is taken on G grid points (θ_j + 1/2)/G, each within 1/(2G) of every θ,
plus the remainder 8·Σ_h|A_ho|/(2G) per i; summed over i, a fraction 4/G of the
certificate at most.

Floating point: task_bound, box_bound and gamma_bound return the float64 values of their
formulas, not rounded outward. `rounding_margin` is a proven γ_n bound (theory/bounds.gamma,
Higham §3.1) on how far any of them can lie below its exact value, for any task of Z_K;
verify/theorem/instance.py adds it to every upper end it reports (`fp_margin`). What it covers:
- the phases φ = N·(z·W)/(4C√K): an M-term dot product and 4 roundings, so each is off by at
  most γ_{M+4}·Φ, Φ = N·max_ih top-K Σ_m |W_mih|/(4C√K) ≥ |φ_ih| on Z_K; a box's ends add its
  centre, half-width and radius (γ_{K+6}·Φ and 3u·Φ): δ = γ_{M+K+16}·Φ in all. The max over
  θ of F is over a whole period whatever φ is, and B is 8-Lipschitz in φ (β is 4-Lipschitz),
  so an error δ in φ moves each bound by at most 8δ·Σ_h|A_ho| per i;
- each value of B (or of a box's extreme of β): the sums θ ± φ (u·2Φ), the fractional part
  (u), the product 4(s − d)(1 − s − d) (5u, |s|, |d| ≤ 1) and, for boxes, the θ grid's own
  rounding and its mirror (8u each, through the Lipschitz remainder): at most u·(16Φ + 64);
- the sums over h (γ_{2H+4}·Σ_h|A_ho|, also gamma_bound's partial sums and its pruning,
  which can discard a node whose exact bound exceeds `best` by no more than that), over i
  (γ_{I+3}, also the round trip of `above` through C/N²) and the factor C/N².
The margin is that sum times 2, which covers its own evaluation and the O(u²) terms. It does
not cover the phase form itself: the bounds are on the exact-arithmetic error of the ideal
construction with this teacher's float64 W, A and C (C ≥ |c_ih| on Z_K); the network's own
float64 evaluation adds its rounding floor, which the report states separately.

Everything is numpy; nothing here knows about torch or about how a teacher is sampled.
"""

from __future__ import annotations

import math

import numpy as np

from theory.bounds import gamma, readout_norm, top_k_sum


def beta(s):
    """The 1-periodic bump 4{s}(1 − {s}): N²·(ŝ_N(t) − t²) at the cell position s = (t + 1)N/2."""
    s = s - np.floor(s)
    return 4.0 * s * (1.0 - s)


def product_error(theta, phi):
    """B(θ, φ) = β(θ + φ) − β(θ − φ): N²/C times one product's error e(u) − e(v)."""
    return beta(theta + phi) - beta(theta - phi)


def task_phases(W: np.ndarray, K: int, C: float, N: int, z: np.ndarray) -> np.ndarray:
    """φ_ih = N·c_ih(z)/(4C) for tasks z (T, M): (T, I, H)."""
    M, I, H = W.shape
    c = (z @ W.reshape(M, I * H) / math.sqrt(K)).reshape(-1, I, H)
    return c * (N / (4.0 * C))


def input_phases(x: np.ndarray, N: int) -> np.ndarray:
    """θ_i = (x_i + 2)·N/4 for inputs x (..., I)."""
    return (x + 2.0) * (N / 4.0)


def task_bound(phi: np.ndarray, A: np.ndarray, C: float, N: int) -> np.ndarray:
    """Upper bound on sup_x ‖f − g‖∞ for each task, from its phases φ (T, I, H): (T,).

    max over σ, o of (C/N²)·Σ_i max_θ Σ_h (σA_ho·B(θ, φ_ih))⁺, the max over θ taken exactly
    at the kinks θ ≡ ±φ_ij (fact 3 of the module's docstring). β is even, so
    B(−φ_j, φ_h) = −B(φ_j, φ_h): the kinks at −φ_j give the values of those at +φ_j with σ
    flipped, and one H × H matrix of B per i serves both signs and both kinks."""
    s = phi[..., :, None] + phi[..., None, :]  # (T, I, j, h): θ = φ_ij against φ_ih
    d = phi[..., :, None] - phi[..., None, :]
    s -= np.floor(s)
    d -= np.floor(d)
    # B = β(s) − β(d) = 4(s − d)(1 − s − d), in place: it is symmetric in (j, h) (β is even),
    # so it serves as its own transpose below, and each reduction runs over a last axis.
    total = s + d
    s -= d
    np.subtract(1.0, total, out=total)
    s *= total
    s *= 4.0
    B = s
    # At θ = +φ_ij with σ = +1: Σ_h (A_ho·B)⁺ = Σ_h B⁺|A_ho| − Σ_h B·A⁻_ho; with σ = −1 (the
    # kink at −φ_ij with σ = +1) the same with A⁺ for A⁻.
    O = A.shape[1]
    shared = np.abs(A).T @ np.maximum(B, 0.0)  # (T, I, O, j)
    signed = np.concatenate([np.maximum(-A, 0.0), np.maximum(A, 0.0)], axis=1).T @ B  # (T, I, 2O, j)
    np.minimum(signed[..., :O, :], signed[..., O:, :], out=signed[..., :O, :])
    shared -= signed[..., :O, :]
    return shared.max(axis=-1).sum(axis=1).max(axis=1) * (C / N**2)  # best kink, then Σ_i, then o


def _beta_range(lo, hi):
    """(min, max) of β over the windows [lo, hi] (lo ≤ hi), elementwise."""
    b_lo, b_hi = beta(lo), beta(hi)
    has_peak = np.floor(hi - 0.5) >= np.ceil(lo - 0.5)
    has_zero = np.floor(hi) >= np.ceil(lo)
    return (np.where(has_zero, 0.0, np.minimum(b_lo, b_hi)),
            np.where(has_peak, 1.0, np.maximum(b_lo, b_hi)))


def box_bound(phi_lo: np.ndarray, phi_hi: np.ndarray, A: np.ndarray, C: float, N: int,
              grid: int = 256) -> np.ndarray:
    """Upper bound on the sup error over every task whose phases lie in [φ_lo, φ_hi] (T, I, H)
    and every x: (T,). A θ grid of `grid` points and its Lipschitz remainder (see the module's
    docstring); with φ_lo = φ_hi it is ≥ task_bound, and exceeds it by ≤ 4/grid of the
    certificate."""
    T, I, H = phi_lo.shape
    theta = (np.arange(grid) + 0.5) / grid
    th = theta[None, None, :, None]
    lo, hi = phi_lo[:, :, None, :], phi_hi[:, :, None, :]
    plus_min, plus_max = _beta_range(th + lo, th + hi)  # β(θ + φ)
    minus_min, minus_max = _beta_range(th - hi, th - lo)  # β(θ − φ)
    B_max = plus_max - minus_min  # (T, I, G, H)
    B_min = plus_min - minus_max
    # σ = +1 only: the grid is symmetric under θ → 1 − θ, which flips B's sign (fact 4), so
    # σ = −1 has the same maximum.
    A_pos, A_neg = np.maximum(A, 0.0), np.maximum(-A, 0.0)
    F = np.maximum(B_max, 0.0) @ A_pos + np.maximum(-B_min, 0.0) @ A_neg  # (T, I, G, O)
    remainder = 4.0 * np.abs(A).sum(axis=0) / grid  # (O,)
    return (F.max(axis=2) + remainder).sum(axis=1).max(axis=1) * (C / N**2)


def phase_slopes(W: np.ndarray, K: int, C: float, N: int) -> np.ndarray:
    """∂φ_ih/∂z_m = N·W_mih/(4C√K): (M, I, H). φ is linear in z, so over a box of z its
    range is exact: the centre's value ± Σ_m |slope_m|·half-width_m."""
    return W * (N / (4.0 * C * math.sqrt(K)))


def phase_form_error(W: np.ndarray, b: np.ndarray, A: np.ndarray, K: int, C: float, N: int,
                     z: np.ndarray, x: np.ndarray) -> np.ndarray:
    """f − g for rows of tasks z (B, M) and inputs x (B, I), from the phase form alone:
    δ_h = (C/N²)·Σ_i B(θ_i, φ_ih), then ReLU(p_h + δ_h) − ReLU(p_h) through the readout A.
    Equal to the shallow network's error (tests/test_instance_bound.py holds it to 1e-12)."""
    phi = task_phases(W, K, C, N, z)
    delta = (C / N**2) * product_error(input_phases(x, N)[:, :, None], phi).sum(axis=1)
    M, I, H = W.shape
    c = (z @ W.reshape(M, I * H)).reshape(-1, I, H) / math.sqrt(K)
    p = np.einsum("bi,bih->bh", x, c) + z @ b / math.sqrt(K)
    return (np.maximum(p + delta, 0.0) - np.maximum(p, 0.0)) @ A


def phase_scale(W: np.ndarray, K: int, C: float, N: int) -> float:
    """Φ = N·max_ih (top-K Σ_m |W_mih|)/(4C√K): a bound on |φ_ih| and on a box's |φ| + radius
    anywhere on Z_K (z ∈ [0, 1]^M with at most K nonzeros)."""
    M = W.shape[0]
    return float(top_k_sum(np.abs(W).reshape(M, -1), K).max()) * N / (4.0 * C * math.sqrt(K))


def rounding_margin(W: np.ndarray, A: np.ndarray, K: int, C: float, N: int) -> float:
    """A proven bound on exact − float64 value of task_bound, box_bound or gamma_bound, for any
    task or box of Z_K (the module docstring's "Floating point"): add it to an upper end."""
    M, I, H = W.shape
    u = 2.0**-53
    Phi = phase_scale(W, K, C, N)
    phase_err = gamma(M + K + 16) * Phi
    per_value = 8.0 * phase_err + u * (16.0 * Phi + 64.0)  # one B (or β extreme), in units of 1
    a = readout_norm(A)
    per_i = a * (per_value + gamma(2 * H + 4))  # one i's max over θ of Σ_h, off by at most this
    total = I * per_i + gamma(I + 3) * I * (a + per_i)  # the sum over i, and × C/N²
    return 2.0 * total * C / N**2


# The exact bound over γ (see `gamma_bound`) keeps at most this many partial assignments at
# once; past it, it stops and returns the largest bound of those it keeps (still sound).
GAMMA_FRONTIER = 2**16


def kink_values(phi: np.ndarray) -> np.ndarray:
    """B(θ, φ_ih) at every kink θ ∈ {+φ_ij, −φ_ij} of each task: (T, I, 2H kinks, H)."""
    s = phi[..., :, None] + phi[..., None, :]
    d = phi[..., :, None] - phi[..., None, :]
    s -= np.floor(s)
    d -= np.floor(d)
    B = 4.0 * (s - d) * (1.0 - s - d)
    return np.concatenate([B, -B], axis=-2)  # B(−φ_j, φ_h) = −B(φ_j, φ_h)


def gamma_bound(kinks: np.ndarray, A: np.ndarray, C: float, N: int, outputs: np.ndarray,
                above: float = 0.0) -> tuple[float, bool]:
    """max over the tasks' outputs (`outputs`: (P, 2) rows of (task, o) into kinks (T, I, 2H, H))
    of (C/N²)·max_{γ ∈ {0,1}^H} Σ_i max_θ Σ_h γ_h·A_ho·B(θ, φ_ih), or `above` if nothing
    exceeds it. Returns (value, exact).

    Why it bounds the error: σ(f − g)_o = Σ_h σA_ho·γ_h·δ_h with γ_h ∈ [0, 1] (fact 1), and
    for fixed γ the sum separates over i with each θ_i free; the max over γ of that convex
    function of γ is at a vertex. It is task_bound without the relaxation (Σ_i a_i)⁺ ≤ Σ_i a_i⁺,
    about 0.28 against 0.42 of the certificate on the default instance's worst task. σ drops
    out: −σ is the mirrored kink. Breadth-first branch and bound over γ, the A_ho of largest
    size first; a node's bound is task_bound's with γ fixed where assigned."""
    T, I, K2, H = kinks.shape
    scale = C / N**2
    best = above / scale
    task, o = outputs[:, 0], outputs[:, 1]
    order = np.argsort(-np.abs(A), axis=0)[:, o].T  # (P, H): each output's own order
    c = kinks[task] * A.T[o][:, None, None, :]  # (P, I, 2H, H)
    c = np.take_along_axis(c, order[:, None, None, :], axis=3)
    # rest[:, d]: Σ of c⁺ over the h not yet assigned at depth d.
    rest = np.concatenate([np.cumsum(np.maximum(c, 0.0)[..., ::-1], axis=3)[..., ::-1],
                           np.zeros(c.shape[:3] + (1,))], axis=3)
    pair = np.arange(len(outputs))
    P = np.zeros((len(outputs), I, K2))
    keep = (P + rest[pair, ..., 0]).max(axis=2).sum(axis=1) > best
    pair, P = pair[keep], P[keep]
    for d in range(H):
        pair = np.concatenate([pair, pair])
        P = np.concatenate([P, P + c[pair[len(pair) // 2:], ..., d]])
        best = max(best, P.max(axis=2).sum(axis=1).max(initial=best))  # the rest at γ = 0: a vertex
        bound = (P + rest[pair, ..., d + 1]).max(axis=2).sum(axis=1)
        keep = bound > best
        pair, P = pair[keep], P[keep]
        if len(P) == 0:
            return best * scale, True
        if len(P) > GAMMA_FRONTIER:
            return max(best, float(bound[keep].max())) * scale, False
    return best * scale, True
