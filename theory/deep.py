"""The `deep` construction's quantities as plain formulas (spec §6, "Depth").

The square of t ∈ [-1, 1] is built from composed tent maps (Yarotsky 2017). With
y = |t| ∈ [0, 1] and the tent map g(y) = 2·ReLU(y) − 4·ReLU(y − ½) (= 2y on [0, ½],
2 − 2y on [½, 1]), g_s = g∘g_{s−1}, g_0 = y:

    f_m(y) = y − Σ_{s=1..m} g_s(y) / 4^s

is the linear interpolant of y² on the 2^m uniform segments of [0, 1]. (Induction:
f_{s−1} − f_s is the chord-minus-parabola gap of the coarse segments, a tent of height
h²/4 on each segment of width h = 2^{1−s}, and g_s/4^s is exactly that tent, because g_s
rises from 0 to 1 and back to 0 on every such segment.) So f_m(|t|) is the interpolant
ŝ_N of t² on N = 2^{m+1} uniform segments of [-1, 1], and 0 ≤ f_m(|t|) − t² ≤ 1/N²
= 1/4^{m+1}. Everything else is the shallow theorem's argument (theory/bounds.py):
polarization x_i·c_ih = C(u² − v²), I products per teacher unit, ReLU 1-Lipschitz,
readout norm a, so the certificate is I·C·a / 4^{m+1}.

Hidden layers (the construction in constructions/deep.py):
- layer 1: per square (2·I·H of them: u_ih and v_ih) ReLU(t), ReLU(−t), ReLU(t − ½),
  ReLU(−t − ½), so y = |t| and g_1(y) = 2y − 4(ReLU(t − ½) + ReLU(−t − ½)) are linear in
  it; plus H accumulators ReLU(S + b_h(z̃)) with the shift S = I·C;
- layers 2..m: per square ReLU(g_{s−1}), ReLU(g_{s−1} − ½) (g_s = 2a − 4b); plus H
  accumulators acc_h ← ReLU(acc_h + C·Σ_i (τ(u_ih) − τ(v_ih))), τ the terms of f_m that
  the previous layer makes linear (y − g_1/4 first, then −g_s/4^s);
- layer m + 1: the teacher's H units ReLU(acc_h − S + the last terms); output ·A.
The accumulator stays ≥ 0 on the task set (f_s ∈ [0, 1], so |C·Σ_i (f_s(u) − f_s(v))| ≤ I·C
= S, and b ≥ 0), so its ReLUs never clip there. Count: (m+1)·(4·I·H + H), no M term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from theory.bounds import check_eps, gamma


def certificate(I: int, C: float, a: float, m: int) -> float:
    """I·C·a / 4^{m+1}: each of the I products per teacher unit is off by at most
    C·max(f_m(|t|) − t²) = C/4^{m+1}; the ReLU is 1-Lipschitz, the readout multiplies by
    at most a. ldexp divides by the power of two exactly."""
    return math.ldexp(I * C * a, -2 * (m + 1))


def levels_for_eps(I: int, C: float, a: float, eps: float) -> int:
    """Smallest m ≥ 1 with I·C·a / 4^{m+1} ≤ ε (m = 1 is the shallowest network: the
    first layer already yields g_1)."""
    check_eps(eps)
    m = 1
    while certificate(I, C, a, m) > eps:
        m += 1
    return m


def shift(I: int, C: float) -> float:
    """S = I·C: the accumulator holds S + b_h(z̃) + C·Σ_i (f_s(u_ih) − f_s(v_ih)), and the
    sum lies in [−I·C, I·C] on the box because each f_s ∈ [0, 1] there; b_h(z̃) ≥ 0."""
    return I * C


@dataclass(frozen=True)
class DeepHiddenUnits:
    """Hidden-unit count of the deep construction, split by term."""

    I: int
    H: int
    m: int

    @property
    def first(self) -> int:  # 4 ReLUs for each of the 2·I·H squares
        return 8 * self.I * self.H

    @property
    def levels(self) -> int:  # 2 ReLUs per square on each of layers 2..m
        return 4 * self.I * self.H * (self.m - 1)

    @property
    def accumulators(self) -> int:  # H on each of layers 1..m
        return self.H * self.m

    @property
    def teacher(self) -> int:  # layer m + 1: the teacher's own units
        return self.H

    @property
    def total(self) -> int:
        return self.first + self.levels + self.accumulators + self.teacher

    @property
    def widths(self) -> tuple[int, ...]:
        middle = (4 * self.I * self.H + self.H,) * (self.m - 1)
        return (8 * self.I * self.H + self.H, *middle, self.H)

    @property
    def depth(self) -> int:
        return self.m + 1

    @property
    def terms(self) -> dict[str, int]:
        return {"layer 1 squares 8·I·H": self.first, "levels 2..m 4·I·H·(m−1)": self.levels,
                "accumulators H·m": self.accumulators, f"layer {self.m + 1} H": self.teacher}


def hidden_units(I: int, H: int, m: int) -> DeepHiddenUnits:
    if m < 1:
        raise ValueError(f"m must be at least 1, got {m}")
    return DeepHiddenUnits(I=I, H=H, m=m)


def count_formula() -> str:
    return "(m+1)·(4·I·H + H)"


def count(I: int, H: int, m: int) -> int:
    """The closed form of `count_formula`."""
    return (m + 1) * (4 * I * H + H)


def rounding_floor(I: int, H: int, M: int, K: int, C: float, a: float, m: int, w: float,
                   orthogonal: bool = False, unit_roundoff: float = 2.0**-53) -> float:
    """Worst-case |computed − exact| of f − g on the task set, one bound for both the
    structured evaluator and the dense nn.Sequential, teacher's own rounding included.

    w = max|W_m[i,h]|/(√K·C) (≤ 1/K a priori), γ_n = n·u/(1 − n·u). To first order in u:
    - e0 = γ_{2M+I+2}·(1 + (K + [orthogonal]·2M√(KM))·w) bounds the error of every layer-1
      pre-activation ±t − {0, ½}: t = (x_i ± c_ih/C)/2 is a dot product of ≤ M + I + 1
      terms of total size ≤ 1 + K·w; an orthogonal code adds e = zQᵀ (the measurer's) and
      z = eQ (ours), each off by ≤ γ_M·√K per entry and worse by ≤ √M through |Q|.
    - λ = 30·γ_5 is the fresh rounding per tent level: a level's two pre-activations
      (≤ 5 nonzero terms of total size ≤ 4.5) are each off by ≤ 5·γ_5, and g = 2a − 4b
      turns that into ≤ 6·5·γ_5. With y and g_1 off by ≤ 2·e0 and 12·e0 + λ, and the tent
      map 2-Lipschitz, e_s + λ ≤ 2^{s−1}(e_1 + λ): the doubling is beaten by the 4^{−s}
      in f_m, and a square's terms together are off by ≤ 5·e0 + (e_1 + λ)/4 ≤ 8·e0 + λ.
      The magnitudes behind λ hold at every depth, however large e_s gets: g ≤ 1 on ℝ and
      g = 0 below 0, so every computed g_s lies in [−18ρ, 1 + 6ρ] (ρ = 5·γ_5).
    - a teacher unit collects 2I squares times C: 2·I·C·(8·e0 + λ); its m + 1 updates
      are sums of ≤ 8I + M + 2 nonzero terms of size ≤ 5IC + √K + M (acc ≤ 2IC + √K/2,
      the shift S, the new terms ≤ 2IC, the bias through an orthogonal code ≤ M).
    - the readout: γ_H·(IC + √K) (|p_h| ≤ IC + √K/2), then everything times a;
    - the teacher: γ_{M+I+H+2}·(3IC + 2√K) (W(z̃), x·W, b(z̃), readout; Σ_m z̃_m|W_m| ≤ 2C).
    The total is doubled, which covers the second-order terms with a wide margin while the
    γ's are ≪ 1 (inf once γ_{8I+M+2} > 1/100, far beyond float32 at any size used here).
    Dense and structured share the bound: where their roundings differ (the dense network
    sums zeros exactly, so only nonzero terms count) the larger is taken.
    """
    u = unit_roundoff
    e0 = gamma(2 * M + I + 2, u) * (1.0 + (K + (2 * M * math.sqrt(K * M) if orthogonal else 0.0)) * w)
    lam = 30.0 * gamma(5, u)
    if max(gamma(2 * M + I + 2, u), gamma(8 * I + M + 2, u), gamma(M + I + H + 2, u)) > 0.01:
        return math.inf
    IC, rK = I * C, math.sqrt(K)
    squares = 2.0 * IC * (8.0 * e0 + lam)
    accumulate = (m + 1) * gamma(8 * I + M + 2, u) * (5.0 * IC + rK + M)
    readout = gamma(H, u) * (IC + rK)
    teacher = gamma(M + I + H + 2, u) * (3.0 * IC + 2.0 * rK)
    return 2.0 * a * (squares + accumulate + readout + teacher)


def tent(y):
    """g(y) = 2·ReLU(y) − 4·ReLU(y − ½): the tent on [0, 1], 2-Lipschitz on ℝ (numpy)."""
    return 2.0 * np.maximum(y, 0.0) - 4.0 * np.maximum(y - 0.5, 0.0)


def sawtooth_square(t, m: int):
    """f_m(|t|) = |t| − Σ_{s=1..m} g_s(|t|)/4^s, by the composed tents (numpy)."""
    y = np.abs(np.asarray(t, dtype=np.float64))
    out, g = y.copy(), y
    for s in range(1, m + 1):
        g = tent(g)
        out = out - g / 4.0**s
    return out


def symbolic_checks(max_m: int = 5) -> dict[str, bool]:
    """Exact (rational) checks of the facts the certificate and the count rest on."""
    import sympy as sp

    y = sp.Symbol("y", real=True)
    half = sp.Rational(1, 2)

    def g(v):
        return 2 * sp.Max(v, 0) - 4 * sp.Max(v - half, 0)

    def f(v, m):
        out, gs = v, v
        for s in range(1, m + 1):
            gs = g(gs)
            out -= gs / sp.Integer(4) ** s
        return out

    checks = {}
    # f_m equals y² at the 2^m + 1 knots and is linear between them: at every quarter of a
    # segment it is the chord. Since f_m only has kinks at multiples of 2^{−m} (g_s kinks
    # at multiples of 2^{−s}), knots + chord points pin it down.
    interp = True
    for m in range(1, max_m + 1):
        n = 2**m
        for k in range(n + 1):
            interp &= f(sp.Rational(k, n), m) == sp.Rational(k, n) ** 2
        for k in range(n):
            lo, hi = sp.Rational(k, n), sp.Rational(k + 1, n)
            for j in (1, 2, 3):
                p = lo + (hi - lo) * sp.Rational(j, 4)
                interp &= f(p, m) == lo**2 + (lo + hi) * (p - lo)
    checks["f_m is the interpolant of y² on 2^m segments"] = bool(interp)
    # On a segment of width h the chord exceeds y² by (y − y0)(y0 + h − y) ≤ h²/4; with
    # h = 2^{−m} that is 1/4^{m+1}, the same as ŝ_N with N = 2^{m+1} (1/N²).
    y0, h = sp.symbols("y0 h", positive=True)
    gap = (y - y0) * (y0 + h - y)
    peak = sp.simplify(gap.subs(y, y0 + h / 2))
    m_ = sp.Symbol("m", positive=True, integer=True)
    checks["gap peak is 1/4^(m+1) = 1/N^2"] = (
        sp.simplify(peak.subs(h, 2**-m_) - sp.Integer(4) ** (-(m_ + 1))) == 0
        and sp.simplify(peak.subs(h, 2**-m_) - 1 / (2 ** (m_ + 1)) ** 2) == 0)
    # The first layer's four ReLUs give |t| and ReLU(|t| − ½) exactly, for every real t.
    t = sp.Symbol("t", real=True)
    r1, r2, r3, r4 = sp.Max(t, 0), sp.Max(-t, 0), sp.Max(t - half, 0), sp.Max(-t - half, 0)
    first_ok = all(
        (r1 + r2 - abs(t)).subs(t, v) == 0 and (r3 + r4 - sp.Max(abs(t) - half, 0)).subs(t, v) == 0
        for v in [sp.Rational(k, 8) for k in range(-24, 25)])
    checks["layer 1 gives |t| and ReLU(|t| − 1/2)"] = first_ok
    # The layer-2 accumulator term y − g_1/4 = (r1 + r2)/2 + (r3 + r4), identically in t.
    g1 = 2 * (r1 + r2) - 4 * (r3 + r4)
    checks["y - g_1/4 = (r1+r2)/2 + (r3+r4)"] = all(
        ((r1 + r2) - g1 / 4 - (r1 + r2) / 2 - (r3 + r4)).subs(t, sp.Rational(k, 7)) == 0
        for k in range(-14, 15))
    # The count: Σ widths = (m+1)(4IH + H).
    I, H = sp.symbols("I H", positive=True, integer=True)
    widths_sum = (8 * I * H + H) + (m_ - 1) * (4 * I * H + H) + H
    checks["sum of widths = (m+1)(4IH + H)"] = sp.expand(widths_sum - (m_ + 1) * (4 * I * H + H)) == 0
    return checks
