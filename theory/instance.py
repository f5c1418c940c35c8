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

Everything is numpy; nothing here knows about torch or about how a teacher is sampled.
"""

from __future__ import annotations

import math

import numpy as np


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
