"""Formulas of the `exact` construction: level codes, gates, the unit count, the rounding floor.

When active module weights take finitely many values (the `khot` and `discrete` families),
the product z_m·q with q ∈ [lo, hi] can be computed *exactly* by ReLU units whose on/off
state is set by a gate G(z_m) and a margin κ ≥ 1 (GATE_MARGIN = 2):

    ReLU(q − lo − κ·(hi − lo)·G) = q − lo   if G = 0,
                                 = 0        if G ≥ 1          (because q ≤ hi).

Write the level set V = {0} ∪ L as subset sums of a *level code*: weights ω_1..ω_n and a
pattern s(v) ∈ {0,1}^n with Σ_j ω_j s_j(v) = v for every v ∈ V. With gates G_j = 0 where
s_j = 1 and G_j ≥ 1 where s_j = 0,

    z·q = Σ_j ω_j·ReLU(q − lo − κ·(hi − lo)·G_j(z)) + z·lo      exactly, for z ∈ V, q ∈ [lo, hi].

The last term is linear in z, so carrying z (or that linear combination) finishes it. The
certificate is 0: no ε anywhere. The proof is one line per z ∈ V and does not depend on x
beyond q ∈ [lo, hi], which the box guarantees.

How many units? Take any construction in which a unit sees the signal q with a fixed weight
w_j, is read out with a fixed weight a_j, and is switched by anything computed from z; the
sum must equal z·q (+ terms free of q) for every q in [lo, hi]. At fixed z its slope in q
just above lo is Σ_j a_j·w_j·[unit j on there] = z: every v ∈ V is a subset sum of the n
numbers a_j·w_j, so n ≥ ⌈log₂|V|⌉. For `discrete` (|V| = 7) three units are impossible
(`log_code_impossible`, an exact finite check: the 8 subset sums must be V plus one x, which
their total 4·Σω pins down, and each weight is itself one of them); the search below finds a
4-unit code, ω = (1/10, 1/5, 1/5, 1/2), where the staircase z = Σ_j δ_j [z ≥ ℓ_j] needs 6.
For `khot`, one unit: ω = (1), G = 1 − z.

Gates are piecewise linear in z: G(z) = α + β·z + Σ_t γ_t ReLU(t − z). A gate that is
affine (no knots) can sit on the network's input, so `khot` needs 2 layers; otherwise the
knots ReLU(t − z_m) form a first hidden layer, shared by all gates of module m. The knots
face left so that a gate that is 0 on an up-set of levels is the single term γ·ReLU(t − z),
exactly 0 in floating point at its on levels (a right-facing basis ReLU(z − t) computes that
0 as a cancellation of terms up to 10; for discrete the largest on-level term sum drops from
36 to 28 and only the one non-monotone gate has any). Count
(R = min(I, H) signals per module, k distinct knots, carry M or H):
    2 layers: M·R·n + carry + H;    3 layers: M·(k + 1) + I + M·R·n + carry + H.
khot: M·H + M + H (560 at the defaults); discrete: 6M + I + 4·M·R + M + H (2304).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from theory.bounds import gamma, top_k_sum

# ─── Level codes and gates (exact rational arithmetic) ──────────────────────────────────


def as_fractions(levels) -> tuple[Fraction, ...]:
    """V = {0} ∪ levels as sorted exact rationals (0.6 → 3/5, not the binary float)."""
    values = {Fraction(float(v)).limit_denominator(10**6) for v in levels} | {Fraction(0)}
    if min(values) < 0:
        raise ValueError(f"levels must be ≥ 0, got {list(levels)}")
    return tuple(sorted(values))


@dataclass(frozen=True)
class Gate:
    """G(z) = alpha + beta·z + Σ_t gamma_t·ReLU(t − z): 0 on the unit's on-set, ≥ 1 off it."""

    alpha: Fraction
    beta: Fraction
    knots: tuple[Fraction, ...]
    gammas: tuple[Fraction, ...]

    def __call__(self, z: Fraction) -> Fraction:
        return self.alpha + self.beta * z + sum((g * max(t - z, 0) for t, g in
                                                zip(self.knots, self.gammas, strict=True)), Fraction(0))

    def _pairs(self):
        return zip(self.knots, self.gammas, strict=True)

    def slope_near(self, z: Fraction) -> Fraction:
        """max |G'| just left and just right of z: how much G moves when z is off by a hair."""
        right = self.beta - sum((g for t, g in self._pairs() if t > z), Fraction(0))
        left = right - sum((g for t, g in self._pairs() if t == z), Fraction(0))
        return max(abs(left), abs(right))

    def term_size(self, z: Fraction) -> Fraction:
        """|α| + |β|·z + Σ|γ_t|·(t − z)⁺: the size of the terms summed to evaluate G(z), z ≥ 0."""
        return abs(self.alpha) + abs(self.beta) * z + sum((abs(g) * max(t - z, 0) for t, g in self._pairs()),
                                                          Fraction(0))


def make_gate(V: tuple[Fraction, ...], on: frozenset) -> Gate:
    """The gate with fewest knots for on-set `on` ⊆ V (sorted V).

    Walk V in runs of on (G = 0) and off (G ≥ 1) points and place the nodes of a piecewise-linear
    interpolant: an on-run contributes its end points at 0; an off-run between two on-runs
    contributes the apex of the tent through the neighbouring on-nodes and (first off, 1),
    (last off, 1), which is ≥ 1 on the whole run;
    an off-run at either end contributes the node (its inner end, 1) and is covered by extending
    the end segment. Every node but the first and last is a knot, and each is forced: an on-run
    of ≥ 2 points needs a kink where G leaves 0 on each inner side, a single on point a convex
    kink, an inner off-run a concave one. So the knot count is minimal for this on-set.

    (Widening on-runs into flat plateaus [first − ρ, last + ρ], to make the gates insensitive to
    the orthogonal encoding's decode error, costs no knots but moved the knots off V, adding 2
    distinct knots for discrete, and did not lower the measured error: not used.)
    """
    if not on:
        return Gate(Fraction(1), Fraction(0), (), ())  # never on
    if len(on) == len(V):
        return Gate(Fraction(0), Fraction(0), (), ())  # always on
    runs = [(label, list(group)) for label, group in itertools.groupby(V, key=lambda v: v in on)]
    on_nodes = {r: ([points[0], points[-1]] if len(points) > 1 else [points[0]])
                for r, (is_on, points) in enumerate(runs) if is_on}
    nodes: list[tuple[Fraction, Fraction]] = []
    for r, (is_on, points) in enumerate(runs):
        if is_on:
            nodes += [(t, Fraction(0)) for t in on_nodes[r]]
        elif r == 0:
            nodes.append((points[-1], Fraction(1)))
        elif r == len(runs) - 1:
            nodes.append((points[0], Fraction(1)))
        else:
            s_prev, s_next = on_nodes[r - 1][-1], on_nodes[r + 1][0]
            a, b = 1 / (points[0] - s_prev), 1 / (s_next - points[-1])  # rising and falling slopes
            apex = (a * s_prev + b * s_next) / (a + b)  # where a(z − s_prev) = b(s_next − z)
            nodes.append((apex, a * (apex - s_prev)))
    # Left-facing basis: β is the last slope, and ReLU(t − z) adds γ_t = s_right − s_left of
    # slope change at t (its slope is −1 left of t, 0 right of it).
    slopes = [(g1 - g0) / (t1 - t0) for (t0, g0), (t1, g1) in itertools.pairwise(nodes)]
    beta = slopes[-1]
    alpha = nodes[-1][1] - beta * nodes[-1][0]
    knots, gammas = [], []
    for (t, _), s0, s1 in zip(nodes[1:-1], slopes[:-1], slopes[1:], strict=True):
        if s1 != s0:
            knots.append(t)
            gammas.append(s1 - s0)
    gate = Gate(alpha, beta, tuple(knots), tuple(gammas))
    assert all((gate(v) == 0) if v in on else (gate(v) >= 1) for v in V), "gate construction is wrong"
    return gate


@dataclass(frozen=True)
class LevelCode:
    """z = Σ_j weights_j·patterns[v]_j for every v ∈ V, with one gate per code unit."""

    V: tuple[Fraction, ...]
    weights: tuple[Fraction, ...]
    patterns: tuple[tuple[int, ...], ...]  # patterns[k] is s(V[k])
    gates: tuple[Gate, ...]

    @property
    def n(self) -> int:
        """Gated units per (module, signal)."""
        return len(self.weights)

    @property
    def knots(self) -> tuple[Fraction, ...]:
        """Distinct gate knots: one first-layer unit ReLU(t − z_m) per module and knot."""
        return tuple(sorted({t for g in self.gates for t in g.knots}))

    @property
    def layers(self) -> int:
        """Hidden layers of the network: 2 when every gate is affine in z, else 3."""
        return 2 if not self.knots else 3

    @property
    def dead_zone_carry(self) -> bool:
        r"""Whether the z carry can be ReLU(φ(z)) with φ(z) = z − ReLU(ℓ₁ − z)/ℓ₁ (3 layers,
        knot at the smallest level ℓ₁) or φ(z) = (1 + 1/ℓ₁)·z − 1 (2 layers, V = {0, ℓ₁}).
        φ(v) = v on V \ {0} and φ(0) = −1, so the carry is z on V and exactly 0 for an
        inactive module even when z is off 0 by rounding (the orthogonal encoding's decode):
        otherwise every one of the M modules adds its decode error to p_h."""
        return self.layers == 2 or self.V[1] in self.knots

    def check(self) -> bool:
        """Exact rational check of the code identity and of every gate on V."""
        sums_ok = all(sum((w * s for w, s in zip(self.weights, p, strict=True)), Fraction(0)) == v
                      for v, p in zip(self.V, self.patterns, strict=True))
        gates_ok = all((g(v) == 0) if p[j] else (g(v) >= 1)
                       for j, g in enumerate(self.gates) for v, p in zip(self.V, self.patterns, strict=True))
        return sums_ok and gates_ok


def staircase_code(levels) -> LevelCode:
    """z = Σ_j δ_j·[z ≥ ℓ_j], δ_j = ℓ_j − ℓ_{j−1}: always valid, n = |L| units."""
    V = as_fractions(levels)
    weights = tuple(b - a for a, b in itertools.pairwise(V))
    patterns = tuple(tuple(int(v >= t) for t in V[1:]) for v in V)
    return _with_gates(V, weights, patterns)


def _with_gates(V, weights, patterns) -> LevelCode:
    gates = tuple(make_gate(V, frozenset(v for v, p in zip(V, patterns, strict=True) if p[j]))
                  for j in range(len(weights)))
    return LevelCode(V, tuple(weights), tuple(tuple(p) for p in patterns), gates)


@lru_cache(maxsize=32)
def _search_code(V: tuple[Fraction, ...]) -> LevelCode:
    staircase = staircase_code(V)
    pool = sorted({b - a for a in V for b in V if b > a})  # positive weights from V's differences
    for n in range(max(1, math.ceil(math.log2(len(V)))), len(V) - 1):
        best = None
        for weights in itertools.combinations_with_replacement(pool, n):
            subsets: dict[Fraction, list[tuple[int, ...]]] = {}
            for bits in itertools.product((0, 1), repeat=n):
                total = sum((w * s for w, s in zip(weights, bits, strict=True)), Fraction(0))
                subsets.setdefault(total, []).append(bits)
            if not all(v in subsets for v in V):
                continue
            choices = [subsets[v] for v in V]
            if math.prod(len(c) for c in choices) > 4096:
                choices = [c[:1] for c in choices]
            for patterns in itertools.product(*choices):
                code = _with_gates(V, weights, patterns)
                key = (len(code.knots), sum(len(g.knots) for g in code.gates), weights)
                if best is None or key < best[0]:
                    best = (key, code)
        if best is not None:
            return best[1]
    return staircase


def level_code(levels) -> LevelCode:
    """The shortest code over V = {0} ∪ levels (fewest gated units), then fewest gate knots.

    Searches n = ⌈log₂|V|⌉, … with positive weights drawn from V's pairwise differences and
    falls back to the staircase (n = |L|). The search is a heuristic for the weights, but its
    result is always verified exactly, and for khot and discrete it meets the lower bound.
    """
    code = _search_code(as_fractions(levels))
    assert code.check()
    return code


def log_code_impossible(levels) -> bool:
    """True when no code with n = ⌈log₂|V|⌉ units exists; a proof for the case |V| + 1 = 2ⁿ.

    The 2ⁿ subset sums of any real ω_1..ω_n (signs allowed) must then be V plus one value x.
    Their total is 2ⁿ⁻¹·T with T = Σω, and T is itself a subset sum: either T = x, so
    x = ΣV/(2ⁿ⁻¹ − 1), or T ∈ V and x = 2ⁿ⁻¹·T − ΣV. So x takes finitely many values. Each
    ω_j is a subset sum too (a singleton), so ω is drawn from V ∪ {x}: a finite check.
    For discrete (n = 3) the symmetry s ↔ T − s already rules out every x but 3/2, and
    there ω ⊂ {1/2, 3/5, …} forces 1/2 + 3/5 = 11/10 into the sums, which is not in V ∪ {x}.
    """
    V = as_fractions(levels)
    n = max(1, math.ceil(math.log2(len(V))))
    if len(V) + 1 != 2**n:
        raise ValueError("this argument needs |V| + 1 = 2^n")
    half, total = 2 ** (n - 1), sum(V, Fraction(0))
    xs = {half * T - total for T in V}
    if half > 1:
        xs.add(total / (half - 1))
    for x in xs:
        target = sorted([*V, x])
        for weights in itertools.combinations_with_replacement(sorted(set(target)), n):
            sums = sorted(sum((w * s for w, s in zip(weights, bits, strict=True)), Fraction(0))
                          for bits in itertools.product((0, 1), repeat=n))
            if sums == target:
                return False
    return True


# ─── Counts ──────────────────────────────────────────────────────────────────────────────


GATE_MARGIN = 2.0  # gates are used as κ·G: off units then sit at pre-activation ≤ −span


def n_signals(I: int, H: int) -> int:
    """Signals gated per module: min(I, H). With H ≤ I the signal is q_mh = x·W_m[:,h] + b_m[h]
    (products z_m·q_mh); with I < H it is x_i (products z_m·x_i, mixed by W_m afterwards)."""
    return min(I, H)


@dataclass(frozen=True)
class ExactUnits:
    """Hidden units of the exact construction, by term."""

    gates: int  # M·k: knot units ReLU(t − z_m) (3 layers only)
    z_carry: int  # M: ReLU(z_m) = z_m beside the gates (3 layers only)
    x_carry: int  # I: ReLU(x_i + ρ) = x_i + ρ on the box (3 layers only)
    products: int  # M·R·n gated units
    carry: int  # next to the products: M (theorem: z, dead-zoned) or H (lean: Σ_m z̃_m·d'_mh + D_h)
    teacher: int  # H
    layers: int

    @property
    def total(self) -> int:
        return self.gates + self.z_carry + self.x_carry + self.products + self.carry + self.teacher

    @property
    def widths(self) -> tuple[int, ...]:
        if self.layers == 2:
            return (self.products + self.carry, self.teacher)
        return (self.gates + self.z_carry + self.x_carry, self.products + self.carry, self.teacher)

    @property
    def terms(self) -> dict[str, int]:
        terms = {"gates M·k": self.gates, "z carry M": self.z_carry, "x carry I": self.x_carry,
                 "products M·R·n": self.products, "carry": self.carry, "teacher H": self.teacher}
        return {k: v for k, v in terms.items() if v or k in ("products M·R·n", "teacher H")}


def exact_hidden_units(I: int, H: int, M: int, code: LevelCode, variant: str = "theorem") -> ExactUnits:
    if variant not in ("theorem", "lean"):
        raise ValueError(f"variant must be theorem or lean, got {variant!r}")
    R, k, three = n_signals(I, H), len(code.knots), code.layers == 3
    return ExactUnits(gates=M * k if three else 0, z_carry=M if three else 0, x_carry=I if three else 0,
                      products=M * R * code.n, carry=M if variant == "theorem" else H, teacher=H,
                      layers=code.layers)


def exact_count_formula(code: LevelCode, variant: str = "theorem") -> str:
    carry = "M" if variant == "theorem" else "H"
    if code.layers == 2:
        return f"M·R·{code.n} + {carry} + H  (R = min(I,H); widths (M·R·{code.n} + {carry}, H))"
    k = len(code.knots)
    return (f"M·({k} + 1) + I + M·R·{code.n} + {carry} + H  (R = min(I,H), {k} gate knots, "
            f"{code.n} code units; widths (M·{k + 1} + I, M·R·{code.n} + {carry}, H))")


def n_level_tasks(M: int, K: int, n_levels: int) -> int:
    """Σ_{k≤K} C(M,k)·L^k: every support with every assignment of the L nonzero levels."""
    return sum(math.comb(M, k) * n_levels**k for k in range(1, K + 1))


def certificate() -> float:
    """0: on the task set (x in the box, active z_m in the level set) f = g in exact arithmetic."""
    return 0.0


# ─── Rounding floor ──────────────────────────────────────────────────────────────────────


def decode_error(M: int, K: int, u: float, orthogonal: bool) -> float:
    """δ_z: how far a z-linear pre-activation r·z can be off, per unit ‖r‖₁, from encoding.

    Identity: 0 (z enters exactly). Orthogonal: e = fl(zQᵀ) is off by γ_M·√K per entry (rows
    of Q are unit vectors and ‖z‖₂ ≤ √K); the folded weights fl(rQᵀ) by γ_M·‖r‖₁; and the
    product Σ_k w_k e_k adds γ_M·‖w‖₂‖e‖₂. With ‖v‖₁ ≤ √M‖v‖₂ this sums to the value below.
    """
    if not orthogonal:
        return 0.0
    g = gamma(M, u)
    return g * math.sqrt(K) * (2 * math.sqrt(M) + 1) * (1 + g) * (1 + math.sqrt(M) * g)


def rounding_floor(*, U, c, Rm, d_prime, lo, span, code: LevelCode, A, W, b, K, variant="theorem",
                   D=None, orthogonal=False, margin=GATE_MARGIN, x_shift=1.0, u=2.0**-53) -> float:
    """Worst-case |fl(f) − fl(g)| on the task set, for the structured or the dense evaluator.

    The certificate is 0, so a measured error is rounding only, of the network *and* of the
    reference g; both are bounded here. A sum of n terms computed in any order is off by at most
    γ_n·Σ|terms|; products and sums that form a weight (span·κ·γ_t, Rm·ω/√K, the biases) add a
    few roundings, covered by adding them to n. Both evaluators sum the same terms in different
    groupings, so one bound covers both.

    Why it is small and does not grow with M: gates are scaled by κ = `margin` = 2, so an *off*
    unit has exact pre-activation q − lo − κ·span·G ≤ −span. Rounding (far below span) cannot
    switch it on, so it outputs exactly 0; the dead-zone z carry (LevelCode.dead_zone_carry)
    is exactly 0 for them too. So the M − K inactive modules contribute nothing to layer 3
    (but the lean carry, which sums z over all modules: Σ_m |d'_mh|·δ_z/√K with the orthogonal
    encoding). Per layer, on the units that are on:
    - layer 1 (3 layers): ReLU(t − z) is off by δ_z + 2u, the z carry by δ_z, the x carry
      ReLU(x + X0) by (X0 + 1)·u;
    - gated unit: Σ|terms| ≤ (2·X0 + 1)·Σ_i|U| + |c| + |lo| + κ·span·max_{v on}(|α| + |β|v +
      Σ|γ_t|(t − v)⁺), with γ_{2I+k+6}; plus κ·span·(G'·δ_z + 2u·Σ|γ_t|) + (X0 + 1)·u·Σ_i|U|
      from layer 1, where G' is
      the gate's steepest slope next to its on levels (δ_z is far below the distance to a knot);
    - teacher unit: the ≤ K active modules' on units (Σ_j ω_j s_j(v) = v ≤ 1, so their terms sum
      to ≤ Σ_r |Rm|·span/√K each) and the carry, with γ_{K·R·n + M + R + n + 6};
    - readout: γ_{H+1}·Σ_h|A_ho||p_h| plus the propagated Σ_h |A_ho|·err_h.
    g: W(z̃) and the pre-activation sum ≤ K + I + 3 nonzero terms, bounded by P_h ≤ Σ_{top K}
    (Σ_i|W_mih| + b_mh)/√K; then the readout as above.

    Arrays: U (M,I,R), c, lo, span (M,R), Rm (M,R,H), d_prime (M,H) = Σ_r Rm·lo + d (the z
    coefficient of p_h·√K), A (H,O), W (M,I,H), b (M,H), D (H,) the lean shift.
    """
    M, I, R = U.shape
    H, n, k = Rm.shape[2], code.n, len(code.knots)
    rk, kap = math.sqrt(K), float(margin)
    dz = decode_error(M, K, u, orthogonal)
    absU = np.abs(U).sum(axis=1)  # (M, R)
    V = code.V
    on_sets = [[v for v, p in zip(V, code.patterns, strict=True) if p[j]] for j in range(n)]
    gates_on = list(zip(code.gates, on_sets, strict=True))
    g_on = np.array([float(max(g.term_size(v) for v in on)) for g, on in gates_on])
    # How far a gate moves at its on levels when z is off by δ_z (below the distance to the next knot).
    g_lip = np.array([float(max(g.slope_near(v) for v in on)) for g, on in gates_on])
    clearance = min((abs(t - v) for g, on in gates_on for v in on for t in g.knots if t != v),
                    default=Fraction(1))
    if dz >= float(clearance):
        raise ValueError("decode error reaches the next knot; the local-slope argument does not apply")
    g_knot = np.array([float(sum((abs(x) for x in g.gammas), Fraction(0))) for g in code.gates])
    three = code.layers == 3
    X0 = float(x_shift)  # the x carry is ReLU(x + X0) ∈ [X0 − 1, X0 + 1], its bias folds −X0·ΣU
    base = ((2 * X0 + 1) * absU if three else absU) + np.abs(c) + np.abs(lo)  # (M, R)
    err2 = (gamma(2 * I + k + 6, u) * (base[..., None] + kap * span[..., None] * g_on)
            + kap * span[..., None] * (g_lip * dz + (2 * u * g_knot if three else 0.0))
            + ((X0 + 1) * u * absU)[..., None] * three)  # (M, R, n), on units
    if not np.all(err2 < (kap - 1) * span[..., None]):
        raise ValueError("rounding could switch an off unit on; the margin argument does not apply")
    w = np.array([abs(float(x)) for x in code.weights])
    absd = np.abs(d_prime)  # (M, H)
    absR = np.abs(Rm)
    # Per active module and h: its on units' terms (Σ_j ω_j s_j(v)·(q − lo) ≤ v·span ≤ span) and errors.
    v_max = float(max(V))
    on_terms = (np.einsum("mrh,mr->mh", absR, span) * v_max + absd) / rk
    on_err = np.einsum("mrh,mrj,j->mh", absR, err2, w) / rk
    if variant == "theorem":
        p_terms = top_k_sum(on_terms, K)
        if code.dead_zone_carry:  # φ has slope ≤ 1 + 1/ℓ₁ next to a level, 3 terms ≤ 1
            carry_err = top_k_sum(absd, K) / rk * ((1 + 1 / float(V[1])) * dz + gamma(3, u))
        else:
            carry_err = absd.sum(axis=0) / rk * dz
    else:
        y = top_k_sum(absd, K) / rk + D
        p_terms = top_k_sum(on_terms, K) + y + D
        carry_err = gamma(M + R + 4, u) * y + absd.sum(axis=0) / rk * dz
    err3 = top_k_sum(on_err, K) + carry_err
    err3 = err3 + gamma(K * R * n + M + R + n + 6, u) * (p_terms + err3)
    absA = np.abs(A)
    err_net = err3 @ absA + gamma(H + 1, u) * ((p_terms + err3) @ absA)
    P = top_k_sum(np.abs(W).sum(axis=1) + np.abs(b), K) / rk  # (H,)
    err_teacher = (gamma(K + I + 3, u) + gamma(H + 1, u) * (1 + gamma(K + I + 3, u))) * (P @ absA)
    return float((err_net + err_teacher).max())


# ─── Symbolic checks ─────────────────────────────────────────────────────────────────────


def symbolic_checks() -> dict[str, bool]:
    """The identities the construction rests on, checked by sympy / exact rationals."""
    import sympy as sp  # only here: the CLI never needs it, and it costs a quarter second to import

    q, lo = sp.symbols("q lo", real=True)
    span = sp.Symbol("span", positive=True)
    t = sp.Symbol("t", nonnegative=True)  # q = lo + t·span with t ∈ [0, 1]
    unit = lambda G: sp.Max(0, q - lo - span * G)  # noqa: E731
    on = sp.simplify(unit(0).subs(q, lo + t * span) - t * span) == 0
    # Off: pre-activation = span·(t − G) ≤ 0 for G ≥ 1, t ≤ 1; check on G = 1 + g, g ≥ 0.
    g = sp.Symbol("g", nonnegative=True)
    off_pre = sp.expand((q - lo - span * (1 + g)).subs(q, lo + t * span))
    off = sp.simplify(off_pre - span * (t - 1 - g)) == 0  # span > 0, t − 1 − g ≤ 0
    # The two-unit formula for binary z and |q| ≤ B.
    B = sp.Symbol("B", positive=True)
    s = sp.Symbol("s", real=True)  # q = s·B, s ∈ [-1, 1]
    two_unit = [sp.Max(0, s * B - B * (1 - zz)) - sp.Max(0, -s * B - B * (1 - zz)) for zz in (0, 1)]
    pieces = [sp.refine(e, sp.Q.ge(s, -1) & sp.Q.le(s, 1)) for e in two_unit]
    two_unit_ok = all(sp.simplify(p.subs(s, val) - zz * val * B) == 0
                      for p, zz in zip(pieces, (0, 1), strict=True)
                      for val in (sp.Rational(-1), sp.Rational(-1, 3), 0, sp.Rational(1, 2), 1))
    khot, discrete = level_code([1.0]), level_code([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    return {
        "gated unit on: ReLU(q − lo) = q − lo": on,
        "gated unit off: pre-activation = span·(t − 1 − g) ≤ 0": off,
        "two-unit formula z·q for z ∈ {0,1}": two_unit_ok,
        "khot code: one unit, affine gate": khot.check() and khot.n == 1 and khot.layers == 2,
        "discrete code: exact on V": discrete.check(),
        "discrete: 3 units impossible": log_code_impossible([0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
        "discrete: 4-unit code found": discrete.n == 4,
        "staircase code: exact on V": staircase_code([0.5, 0.6, 0.7, 0.8, 0.9, 1.0]).check(),
    }
