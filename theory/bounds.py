"""The theorem's quantities as plain formulas (spec §2–3).

Everything here is a function of sizes and of a few arrays; nothing depends on
torch or on how a teacher is sampled, so `constructions/` and `verify/` can share
one source of truth for N(ε), the certificate and the neuron count.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

# Standard deviation of a standard normal truncated to [-2, 2]. Dividing by it makes
# the truncated draw have the variance s / fan_in (the paper's initialiser).
TRUNCNORM_STD = 0.87962566103423978
INIT_SCALE = math.sqrt(3.0)
TRUNCATION = 2.0

VARIANTS = ("theorem", "lean")
CONSTANTS = ("apriori", "instance")


def init_std(fan_in: int, scale: float = INIT_SCALE) -> float:
    """σ of the truncated-normal initialiser with the given fan-in."""
    return math.sqrt(scale / fan_in) / TRUNCNORM_STD


def apriori_C_W(I: int) -> float:
    """The truncation bound 2σ on every |W_m[i, h]|: it holds for every draw and every M."""
    return TRUNCATION * init_std(I)


def apriori_C(I: int, K: int) -> float:
    """C = √K·C_W bounds |c_ih(z)| = |Σ_m z_m W_m[i,h]| / √K on Z_K (K terms, each ≤ C_W)."""
    return math.sqrt(K) * apriori_C_W(I)


def check_eps(eps) -> None:
    """ValueError unless ε is a positive finite number: every N(ε) and every builder asks this."""
    if not isinstance(eps, numbers.Real) or not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")


def top_k_sum(a: np.ndarray, K: int, axis: int = 0) -> np.ndarray:
    """Sum of the K largest entries along `axis`: the worst case over at most K active modules.
    Every sup over Z_K of a sum over modules is one of these."""
    k = min(K, a.shape[axis])
    return -np.partition(-a, k - 1, axis=axis).take(np.arange(k), axis=axis).sum(axis=axis)


def gamma(n: int, unit_roundoff: float = 2.0**-53) -> float:
    """γ_n = n·u/(1 − n·u): a dot product or sum of n terms, in any order, is off by at most
    γ_n·Σ|terms| (Higham, Accuracy and Stability, §3.1); inf once n·u ≥ 1. u = 2⁻⁵³: float64."""
    return math.inf if n * unit_roundoff >= 1.0 else n * unit_roundoff / (1.0 - n * unit_roundoff)


def instance_C(W: np.ndarray, K: int) -> float:
    """The exact sup over Z_K of |c_ih(z)|, maximised over (i, h).

    On z ∈ [0,1]^M with at most K nonzeros, Σ_m z_m w_m is largest when z picks the
    K largest positive w_m, and smallest when it picks the K most negative ones. So the
    sup is max(top-K positive sum, top-K negative sum) / √K. This is never larger than
    the spec's √K·max|W| and usually ~20% smaller, which lowers N at no cost.
    """
    flat = W.reshape(W.shape[0], -1)
    top_pos = top_k_sum(np.maximum(flat, 0.0), K)
    top_neg = top_k_sum(np.maximum(-flat, 0.0), K)
    return float(np.maximum(top_pos, top_neg).max() / math.sqrt(K))


def readout_norm(A: np.ndarray) -> float:
    """a = max_o Σ_h |A[h, o]|: the ∞→∞ operator norm of x ↦ x·A."""
    return float(np.abs(A).sum(axis=0).max())


# The most knots one square may have. Far beyond any network that can be built (2·I·H·N
# units), and far below 2⁵³, where N ± 1 stops changing a float64 certificate: so every
# search for N below moves the certificate with each step and ends within a few steps.
MAX_KNOTS = 2**40


def check_knots(N_real: float, eps: float, what: str = "knots per square") -> None:
    """Refuse an ε that would need more than MAX_KNOTS (also inf or nan) knots per square."""
    if not N_real <= MAX_KNOTS:
        raise ValueError(f"ε={eps:g} would need about {N_real:.2g} {what}, more than 2^40: no network "
                         "of that size can be built or checked; use a larger ε")


def N_for_eps(I: int, C: float, a: float, eps: float) -> int:
    """Smallest N with I·C·a/N² ≤ ε, i.e. ⌈√(I·C·a/ε)⌉ computed without rounding slips.
    ValueError when that N would exceed MAX_KNOTS."""
    check_eps(eps)
    N_real = math.sqrt(I * C * a / eps)
    check_knots(N_real, eps)
    N = max(1, math.ceil(N_real))
    # sqrt and ceil in floating point can land one off either way: fix it exactly, in a
    # bounded number of steps (a slip is at most a few units below 2⁵³).
    for _ in range(4):
        if N > 1 and certificate(I, C, a, N - 1) <= eps:
            N -= 1
        elif certificate(I, C, a, N) > eps:
            N += 1
        else:
            return N
    raise ArithmeticError(f"N_for_eps did not settle at N={N} for ε={eps!r}")


def certificate(I: int, C: float, a: float, N: int) -> float:
    """Guaranteed sup error I·C·a/N²: each of the I products per hidden unit is off by
    at most C/N², the ReLU is 1-Lipschitz, and the readout multiplies by at most a."""
    return I * C * a / N**2


def rounding_floor(I: int, H: int, M: int, K: int, C: float, a: float, N: int,
                   unit_roundoff: float = 2.0**-53, dense: bool = True) -> float:
    """Worst-case rounding error of evaluating the network in floating point.

    The dense MLP's longest accumulation is a layer-2 unit: n = 2·I·N + M terms, then H in
    the readout. The structured evaluator sums only M (for c = z·W), I and H terms. Partial
    sums stay below 16·I·C + √K in size (each ŝ-sum's partial sums lie within [-4, 8],
    times C, for u and v, plus the bias ≤ √K/2), and the readout multiplies by at most a.
    The classical bound γ_n·Σ|terms| with γ_n = n·u/(1 − n·u) gives the floor below which
    a measured error says nothing about the approximation. It is a worst case: typical
    rounding grows like √n·u. float64: u = 2⁻⁵³; float32: u = 2⁻²⁴.
    """
    n = (2 * I * N + M + H) if dense else (M + I + H)
    g = gamma(n, unit_roundoff)
    return math.inf if math.isinf(g) else g * a * (16.0 * I * C + math.sqrt(K))


def square_knots(N: int) -> np.ndarray:
    """The N+1 uniform knots t_k = -1 + 2k/N of [-1, 1]."""
    return -1.0 + 2.0 * np.arange(N + 1) / N


def square_relu_coefficients(N: int) -> tuple[np.ndarray, np.ndarray]:
    """(t_k, α_k) for k < N with ŝ_N(t) = 1 + Σ_k α_k ReLU(t − t_k) on t ≥ -1.

    α_0 is the first segment's slope t_0 + t_1; every later α_k is the change of slope
    at an inner knot, t_{k+1} − t_{k-1} = 4/N.
    """
    t = square_knots(N)
    slopes = t[:-1] + t[1:]
    alpha = np.diff(slopes, prepend=0.0)
    return t[:-1], alpha


def square_interpolant(t, N):
    """ŝ_N evaluated in closed form, equal to the ReLU sum on all of ℝ. t: numpy or torch;
    N: an int, or an array/tensor broadcast against t (one N per product, `optimal`).

    On a segment [t_k, t_{k+1}] the chord of t² is t_k² + (t_k + t_{k+1})(t − t_k); above 1
    it extends the last chord. Below -1 every ReLU is off and ŝ = 1, the chord's value at
    -1 exactly, so clamping t at -1 covers that case with one operation instead of a mask
    (the measurer calls this ~50 times per measurement).
    """
    xp = _namespace(t)
    t = xp.clip(t, -1.0, None)
    k = xp.clip(xp.floor((t + 1.0) * (N / 2.0)), None, N - 1)
    t_k = -1.0 + 2.0 * k / N
    return t_k * t_k + (2.0 * t_k + 2.0 / N) * (t - t_k)


def _namespace(t):
    """numpy or torch, whichever `t` belongs to, so one formula serves both."""
    if isinstance(t, np.ndarray):
        return np
    import torch

    return torch


@dataclass(frozen=True)
class HiddenUnits:
    """Hidden-unit count of the shallow construction, split by term."""

    squares: int  # 2·I·H·N: N ReLUs for each of ŝ(u_ih) and ŝ(v_ih)
    carry: int  # M (theorem: carries z) or H (lean: carries b(z̃) ≥ 0)
    teacher: int  # H: the teacher's own hidden layer, p_h then ReLU

    @property
    def total(self) -> int:
        return self.squares + self.carry + self.teacher

    @property
    def widths(self) -> tuple[int, int]:
        return (self.squares + self.carry, self.teacher)

    @property
    def terms(self) -> dict[str, int]:
        """The count split into named terms that sum to `total` (the CLI prints these)."""
        return {"squares 2·I·H·N": self.squares, "carry": self.carry, "layer 2 H": self.teacher}


def hidden_units(I: int, H: int, M: int, N: int, variant: str = "theorem") -> HiddenUnits:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    carry = M if variant == "theorem" else H
    return HiddenUnits(squares=2 * I * H * N, carry=carry, teacher=H)


def count_formula(variant: str = "theorem") -> str:
    return "2·I·H·N + M + H" if variant == "theorem" else "2·I·H·N + 2·H"


def n_tasks(M: int, K: int) -> int:
    """Σ_{k=1..K} C(M, k): how many distinct supports (tasks, for `khot`) there are."""
    return sum(math.comb(M, k) for k in range(1, K + 1))


def memorization_hidden_units(M: int, K: int, H: int) -> int:
    """Width of the memorizing network: a copy of the teacher's H units per task, so it
    grows like H·M^K/K! where the compositional construction grows like M."""
    return H * n_tasks(M, K)
