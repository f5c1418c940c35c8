"""An exact ReLU MLP for finite weight sets (`khot`, `discrete`): error 0, no ε (spec §6).

The teacher's hidden pre-activation is p_h = Σ_m z̃_m·(x·W_m[:,h] + b_m[h]), z̃ = z/√K. Each
module contributes products z_m·q_mr of its weight with a *signal* q_mr(x) = x·U_m[:,r] + c_mr
that lies in [lo_mr, hi_mr] on the box X = [-1,1]^I:
- H ≤ I: the signals are the module's own units, q_mh = x·W_m[:,h] + b_m[h] (U = W_m, R = H);
- I < H: the signals are the inputs x_i (U = identity, R = I), mixed by W_m afterwards.
For z_m in the finite set V = {0} ∪ L, theory.exact finds a level code z = Σ_j ω_j·s_j(z) and
piecewise-linear gates G_j(z) (0 where s_j = 1, ≥ 1 where s_j = 0). With κ = 2 (GATE_MARGIN),
exactly for z_m ∈ V and q_mr ∈ [lo_mr, hi_mr]:

    z_m·q_mr = Σ_j ω_j·ReLU(q_mr − lo_mr − κ·(hi_mr − lo_mr)·G_j(z_m)) + z_m·lo_mr,

since an on unit (G = 0) outputs q − lo ≥ 0 and an off unit (G ≥ 1) has pre-activation
≤ q − hi − (hi − lo) ≤ −(hi − lo). The margin κ > 1 keeps every off unit at exactly 0 in
floating point too, so inactive modules add no rounding. Then p_h = (1/√K)·Σ_m [Σ_r Rm[m,r,h]·
(z_m·q_mr) + d_mh·z_m] (Rm = identity, d = 0 for the first kind of signal; Rm = W_m, d = b_m
for the second). The network:
- khot (V = {0, 1}, one code unit, affine gate G = 1 − z): two hidden layers
  (M·R gated units + carry, H);
- discrete (V = {0, .5, …, 1}, four code units ω = (.1, .2, .2, .5), gates with 5 distinct
  knots .5, …, .9): three hidden layers (M·5 knot units ReLU(t − z_m) + M carry of z + I
  carry ReLU(x_i + ρ), M·R·4 gated units + carry, H).
The carry next to the gated units is z itself (M units, variant "theorem"), through a dead
zone ReLU(z − ReLU(ℓ₁ − z)/ℓ₁) that is z on V and exactly 0 near z = 0 (so the orthogonal
encoding's decode error of the M − K inactive modules does not reach p_h), or the H offsets
Σ_m z̃_m·d'_mh shifted by D_h to be ≥ 0 on Z_K (variant "lean"). The count has no ε in it:
O(M·R·n) with n = ⌈log₂|V|⌉ or one more (theory.exact has the lower bound).

Certificate: 0 on the task set "levels" (x in the box, every active z_m in the teacher's level
set, at most K active modules; "theorem" is in fact exact for any number of them). The floor
is float64 rounding of f and of the reference g (theory.exact.rounding_floor).

Where it stops being exact (verify/theorem/exact_checks.py measures both):
- z between levels (the `continuous` family, or any z off V): gates are fractional, units
  are partly on, and the products are wrong by a fraction of |q|: the error is of the order
  of the output itself. The builder refuses `continuous` teachers for this reason.
- x off the box: exact for x ∈ [−ρ, ρ]^I, ρ = min over signals of half-range/Σ_i|U_mir|
  (`radius`: 1 with the instance's ranges, > 1 with the a-priori ones). Beyond it an on unit
  clips (q < lo) first, the x carry ReLU(x + ρ) clips below −ρ, and far out (q > hi + span)
  off units leak.

Measured on the default teacher (I = H = O = 16, M = 32, K = 3, discrete): 2,304 hidden units,
M·(5+1) + I + 4·M·min(I,H) + M + H (khot: M·min(I,H) + M + H = 560), the same at every ε; no
code of the level-code form does it with 3 gated units per module and signal (checked exactly).
Over all 1,089,408 discrete tasks the error is 6.4e-14. Off the task set (verify.bound prints
it): z between the levels gives errors as large as the output itself (4.1 against max |g| =
4.2); x is exact up to |x_i| ≤ 1.69 (the gates' margin), then leaks (0.66 at 1.86).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from constructions.base import Claim, Construction
from constructions.tasks.hyperteacher import (
    Hyperteacher,
    dense_latents,
    sample_inputs,
)
from theory.bounds import apriori_C_W, check_eps
from theory.exact import (
    GATE_MARGIN,
    ExactUnits,
    LevelCode,
    exact_count_formula,
    exact_hidden_units,
    level_code,
    n_level_tasks,
    rounding_floor,
)

CHUNK_ELEMENTS = 2**20  # 8 MiB of float64 per tensor in forward(): small chunks stay in cache


def _t(arr) -> torch.Tensor:
    return torch.as_tensor(np.array(arr, dtype=np.float64))


class ExactConstruction(Construction):
    """f(e(z), x) = g(x, z) exactly for x in the box and active z_m in the level set."""

    name = "exact"
    task_set = "levels"  # x ∈ [-1,1]^I, every active z_m in the teacher's finite level set

    def __init__(self, teacher: Hyperteacher, code: LevelCode, variant: str = "theorem",
                 constants: str = "apriori", span_scale: float = 1.0):
        super().__init__(teacher, variant, constants)
        self.code, self.span_scale = code, span_scale
        M, I, H = self.M, self.I, self.H
        if H <= I:  # signals q_mh = x·W_m[:,h] + b_m[h]
            self.signals = "units"
            U, c = teacher.W, teacher.b
            Rm, d = np.broadcast_to(np.eye(H), (M, H, H)), np.zeros((M, H))
            half = np.full((M, H), I * apriori_C_W(I)) if constants == "apriori" else np.abs(U).sum(axis=1)
        else:  # signals x_i, mixed by W_m in the next layer
            self.signals = "inputs"
            U, c = np.broadcast_to(np.eye(I), (M, I, I)), np.zeros((M, I))
            Rm, d = teacher.W, teacher.b
            half = np.ones((M, I))
        # q ∈ [c − half, c + half] on the box; span_scale < 1 is a deliberately wrong range (tests).
        lo, span = c - span_scale * half, 2 * span_scale * half
        # Exact for x ∈ [−ρ, ρ]^I with ρ = min half-range / Σ_i|U|: no signal leaves [lo, hi]
        # (≥ 1: the instance's own range; more with the a-priori one). The x carry ReLU(x + ρ)
        # is shifted by the same ρ so that it does not clip first.
        radius = (span_scale * half / np.abs(U).sum(axis=1)).min()
        d_prime = np.einsum("mrh,mr->mh", Rm, lo) + d  # coefficient of z_m in p_h·√K
        # Lean shift: Σ_m z̃_m d'_mh ≥ −D_h on Z_K (at most K terms, each z_m ≤ 1).
        neg = np.sort(np.maximum(-d_prime, 0.0), axis=0)[::-1][: self.K].sum(axis=0)
        for name, arr in dict(U=U, c=c, Rm=Rm, d_prime=d_prime, lo=lo, span=span,
                              D=neg / math.sqrt(self.K), W=teacher.W, b=teacher.b, x_shift=radius).items():
            self.register_buffer(name, _t(arr))
        f = lambda xs: _t([float(v) for v in xs])  # noqa: E731
        # Gates are used as κ·G (κ = GATE_MARGIN): off units then sit at pre-activation ≤ −span.
        self.register_buffer("omega", f(code.weights))
        self.register_buffer("alpha", GATE_MARGIN * f([g.alpha for g in code.gates]))
        self.register_buffer("beta", GATE_MARGIN * f([g.beta for g in code.gates]))
        self.register_buffer("knots", f(code.knots))
        gam = np.zeros((code.n, len(code.knots)))
        for j, g in enumerate(code.gates):
            for t, gj in zip(g.knots, g.gammas, strict=True):
                gam[j, code.knots.index(t)] = GATE_MARGIN * float(gj)
        self.register_buffer("gamma", _t(gam))
        # Dead-zone carry φ(z) = z − ReLU(ℓ₁ − z)/ℓ₁ (3 layers: reads knot ℓ₁) or (1 + 1/ℓ₁)z − 1.
        l1 = code.V[1]
        self.carry_knot = code.knots.index(l1) if code.layers == 3 and code.dead_zone_carry else -1
        self.register_buffer("inv_l1", _t(1 / float(l1)))

    # ─── protocol ──────────────────────────────────────────────────────────────────────
    @property
    def layers(self) -> int:
        return self.code.layers

    @property
    def radius(self) -> float:
        """ρ: exact for x ∈ [−ρ, ρ]^I (and z on the levels); the x carry is ReLU(x + ρ)."""
        return float(self.x_shift)

    def certificate(self) -> float:
        return 0.0

    def claim(self, eps: float, dense: bool = False) -> Claim:
        """Zero error on the task set "levels", up to float64 rounding (EXACT_TOL); verify
        measures that on every level task as well, and where exactness ends."""
        return replace(super().claim(eps, dense), exact=True)

    def rounding_floor(self, unit_roundoff: float = 2.0**-53, dense: bool = False) -> float:
        """Worst case |fl(f) − fl(g)| on the task set; one bound serves the structured and the
        dense evaluator (it allows for either order of the sums), so `dense` changes nothing."""
        return rounding_floor(
            U=self.U.numpy(), c=self.c.numpy(), Rm=self.Rm.numpy(), d_prime=self.d_prime.numpy(),
            lo=self.lo.numpy(), span=self.span.numpy(), code=self.code, A=self.A.numpy(),
            W=self.W.numpy(), b=self.b.numpy(), K=self.K, variant=self.variant, D=self.D.numpy(),
            orthogonal=self.Q is not None, x_shift=self.radius, u=unit_roundoff)

    def hidden_units(self) -> ExactUnits:
        return exact_hidden_units(self.I, self.H, self.M, self.code, self.variant)

    def count_formula(self) -> str:
        return exact_count_formula(self.code, self.variant)

    def counted_widths(self) -> list[int]:
        """Widths read off the buffers: knots × modules, the carries, gated units = modules ×
        signals × code units, the lean offsets D, and the readout's H."""
        M, I, R = self.U.shape
        carry = M if self.variant == "theorem" else self.D.numel()
        gated = M * R * self.omega.numel() + carry
        if self.knots.numel() == 0:
            return [gated, self.A.shape[0]]
        return [M * self.knots.numel() + M + I, gated, self.A.shape[0]]

    def summary(self) -> dict:
        c = self.code
        return dict(levels=[float(v) for v in c.V[1:]], code_weights=[str(w) for w in c.weights],
                    code_units=c.n, knots=[float(t) for t in c.knots], layers=c.layers,
                    signals=self.signals, R=int(self.U.shape[2]), variant=self.variant,
                    constants=self.constants, span_max=float(self.span.max()), span_scale=self.span_scale,
                    exact_radius=self.radius)

    # ─── the structured evaluator ──────────────────────────────────────────────────────
    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        # Every row holds M·R·n gated pre-activations (65,536 at M = 1024): rows go through
        # in chunks so that one chunk's are at most CHUNK_ELEMENTS, whatever the batch.
        # (The sparse path needs only the M·(n + knots) gate values per row; the full path
        # sub-chunks itself.)
        per_row = self.U.shape[0] * (self.omega.numel() + self.knots.numel() + 1)
        rows = max(1, CHUNK_ELEMENTS // per_row)
        if len(inputs) <= rows:
            return self._forward(inputs)
        return torch.cat([self._forward(chunk) for chunk in inputs.split(rows)])

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        M, I, R = self.U.shape
        z = self.decode(inputs[:, :M])
        x = inputs[:, M:]
        if self.layers == 3:
            zc = torch.relu(z)  # layer 1: z carry, knot units, x carry
            kn = torch.relu(self.knots - z[:, :, None])
            G = self.alpha + self.beta * zc[:, :, None] + kn @ self.gamma.T  # (B, M, n)
            x_in = torch.relu(x + self.radius) - self.radius
        else:
            zc = z  # affine gates read z from the input
            G = self.alpha + self.beta * z[:, :, None]
            x_in = x
        live = self._live_modules(G, x)
        if live is None:  # every module of every row, in chunks of CHUNK_ELEMENTS units
            rows = max(1, CHUNK_ELEMENTS // (M * R * self.omega.numel()))
            gated = torch.cat([self._gated_all(xc, Gc) for xc, Gc in zip(x_in.split(rows), G.split(rows),
                                                                          strict=True)])
        else:  # only the modules that can be on; the others' units are exactly 0
            q = torch.einsum("bi,bkir->bkr", x_in, self.U[live]) + self.c[live]
            pre = (q - self.lo[live])[..., None] - self.span[live][..., None] * G.gather(
                1, live[..., None].expand(-1, -1, G.shape[2]))[:, :, None, :]  # (B, k, R, n)
            gated = torch.einsum("bkr,bkrh->bh", torch.relu(pre) @ self.omega, self.Rm[live])
        root_K = math.sqrt(self.K)
        if self.variant == "theorem":
            if self.layers == 2:
                carry = torch.relu((1 + self.inv_l1) * z - 1)
            elif self.carry_knot >= 0:
                carry = torch.relu(zc - self.inv_l1 * kn[:, :, self.carry_knot])
            else:
                carry = torch.relu(zc)
            offset = carry @ self.d_prime / root_K
        else:
            offset = torch.relu(zc @ self.d_prime / root_K + self.D) - self.D
        p = gated / root_K + offset
        return torch.relu(p) @ self.A

    def _gated_all(self, x_in: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        M, I, R = self.U.shape
        q = (x_in @ self.U.permute(1, 0, 2).reshape(I, M * R)).view(-1, M, R) + self.c
        pre = (q - self.lo)[..., None] - self.span[..., None] * G[:, :, None, :]  # (B, M, R, n)
        products = torch.relu(pre) @ self.omega  # Σ_j ω_j·unit = z_m·(q − lo) on the task set
        return torch.einsum("bmr,mrh->bh", products, self.Rm)

    def _live_modules(self, G: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
        """(B, k) module indices that include every module whose gated units can be nonzero,
        or None when that is most of them. A module whose gates are all ≥ ¾ (κ·gate ≥ ¾κ)
        on a row whose x lies in [−ρ, ρ]^I, so that q ∈ [lo, hi], has every pre-activation
        ≤ span − 1.5·span < 0: its units are 0 exactly (the margin dwarfs rounding), and
        leaving them out changes only the order of a sum of exact zeros. On the task set
        that is every inactive module, so a row costs K modules instead of M. Rows with
        fewer live modules are padded with dead ones, which contribute 0 the same way."""
        if not len(G):
            return None
        in_box = x.detach().abs().amax(dim=1) <= self.radius
        live = (G.detach().amin(dim=2) < 0.75 * GATE_MARGIN) | ~in_box[:, None]
        k = int(live.sum(dim=1).max())
        if 2 * k > G.shape[1]:
            return None
        return torch.topk(live.to(torch.int8), max(k, 1), dim=1).indices

    # ─── the dense network ─────────────────────────────────────────────────────────────
    def to_sequential(self, dtype: torch.dtype = torch.float64) -> nn.Sequential:
        """Linear/ReLU only, input [e(z), x]. Gated rows are ordered (m, r, j); 3-layer
        first-layer rows are (m, knot), then z carry (m), then x carry (i)."""
        M, I, R = self.U.shape
        H, n, k = self.H, self.omega.numel(), self.knots.numel()
        widths = self.hidden_units().widths
        dims = [self.input_dim, *widths, self.O]
        linears = [nn.utils.skip_init(nn.Linear, a, b, dtype=torch.float64)
                   for a, b in itertools.pairwise(dims)]
        for lin in linears:
            with torch.no_grad():
                lin.weight.zero_()
                lin.bias.zero_()
        z_to_e = self.Q.T if self.Q is not None else None
        fold = lambda rows: rows @ z_to_e if z_to_e is not None else rows  # noqa: E731
        eye_M = torch.eye(M, dtype=torch.float64)
        root_K = math.sqrt(self.K)
        n_gated = M * R * n
        span_mrj = self.span[..., None].expand(M, R, n)
        U_rows = self.U.permute(0, 2, 1)[:, :, None, :].expand(M, R, n, I).reshape(n_gated, I)
        with torch.no_grad():
            if self.layers == 3:
                first, gated = linears[0], linears[1]
                w1 = first.weight
                w1[: M * k, :M] = fold(-eye_M.repeat_interleave(k, dim=0))  # ReLU(t − z_m)
                first.bias[: M * k] = self.knots.repeat(M)
                w1[M * k: M * k + M, :M] = fold(eye_M)  # z carry
                w1[M * k + M:, M:] = torch.eye(I, dtype=torch.float64)  # x carry: ReLU(x + ρ)
                first.bias[M * k + M:] = self.radius
                # Gated unit (m, r, j): Σ_i U·(xc − ρ) + c − lo − span·(α + β·zc + Σ_t γ·kn).
                w2 = gated.weight
                w2[:n_gated, M * k + M:] = U_rows
                for m in range(M):  # module m's gated rows read only module m's gate units
                    rows = slice(m * R * n, (m + 1) * R * n)
                    w2[rows, m * k:(m + 1) * k] = (-span_mrj[m, :, :, None] * self.gamma).reshape(R * n, k)
                    w2[rows, M * k + m] = (-span_mrj[m] * self.beta).reshape(-1)
                gated.bias[:n_gated] = ((self.c - self.radius * self.U.sum(dim=1) - self.lo)[..., None]
                                        - span_mrj * self.alpha).reshape(-1)
                z_cols, z_w = slice(M * k, M * k + M), eye_M  # the carry reads the z carry units
            else:
                gated = linears[0]
                w2 = gated.weight
                w2[:n_gated, M:] = U_rows
                rows = torch.zeros(n_gated, M, dtype=torch.float64)
                for m in range(M):
                    rows[m * R * n:(m + 1) * R * n, m] = (-span_mrj[m] * self.beta).reshape(-1)
                w2[:n_gated, :M] = fold(rows)
                gated.bias[:n_gated] = ((self.c - self.lo)[..., None] - span_mrj * self.alpha).reshape(-1)
                z_cols, z_w = slice(0, M), None  # the carry reads z from the input (folded)
            if self.variant == "theorem":  # the dead-zone carry of z
                if self.layers == 2:
                    rows, carry_bias = (1 + self.inv_l1) * eye_M, -torch.ones(M, dtype=torch.float64)
                else:
                    rows, carry_bias = eye_M, torch.zeros(M, dtype=torch.float64)
                    if self.carry_knot >= 0:
                        knot_cols = torch.arange(M) * k + self.carry_knot
                        w2[n_gated + torch.arange(M), knot_cols] = -self.inv_l1
            else:
                rows = self.d_prime.T / root_K
                carry_bias = self.D
            w2[n_gated:, z_cols] = rows if z_w is not None else fold(rows)
            gated.bias[n_gated:] = carry_bias
            # Teacher layer: p_h = (1/√K)Σ Rm·ω·unit + carry.
            teacher = linears[-2]
            per_unit = self.Rm.permute(2, 0, 1)[..., None] * self.omega  # (H, M, R, n)
            teacher.weight[:, :n_gated] = per_unit.reshape(H, -1) / root_K
            if self.variant == "theorem":
                teacher.weight[:, n_gated:] = self.d_prime.T / root_K
            else:
                teacher.weight[:, n_gated:] = torch.eye(H, dtype=torch.float64)
                teacher.bias.copy_(-self.D)
            linears[-1].weight.copy_(self.A.T)
        layers: list[nn.Module] = []
        for lin in linears[:-1]:
            layers += [lin.to(dtype), nn.ReLU()]
        return nn.Sequential(*layers, linears[-1].to(dtype))


def build_exact(teacher: Hyperteacher, eps: float | None = None, variant: str = "theorem",
                constants: str = "apriori", *, levels=None, span_scale: float = 1.0) -> ExactConstruction:
    """The exact network for a khot or discrete teacher. `eps` is accepted for the common
    protocol and only validated: the certificate is 0 for every ε. `levels` overrides the level
    set and `span_scale` shrinks the signal ranges (tests use both to build wrong networks)."""
    if eps is not None:
        check_eps(eps)
    if teacher.weights not in ("khot", "discrete") and levels is None:
        raise ValueError(
            f"exact needs a finite weight set (khot, discrete); {teacher.weights} weights take a "
            "continuum of values in [0.5, 1], where no finite set of gates is exact. Use the "
            "shallow construction (error ≤ ε with O(1/√ε + M) units) instead.")
    if not span_scale > 0:
        raise ValueError(f"span_scale must be > 0, got {span_scale!r}")
    code = level_code(teacher.weight_values if levels is None else levels)
    return ExactConstruction(teacher, code, variant=variant, constants=constants, span_scale=span_scale)


# ─── Tasks of the finite family and their errors ──────────────────────────────────────────


def enumerate_level_tasks(M: int, K: int, levels, max_tasks: int, rng: np.random.Generator) -> np.ndarray:
    """Every task of the finite family, supports × level assignments, as z (T, M), when there
    are at most max_tasks; else max_tasks of them, equally many per support size (uniform
    supports and levels within a size). Compare len(z) with theory.exact.n_level_tasks."""
    levels = np.asarray(levels, dtype=np.float64)
    L = len(levels)
    if n_level_tasks(M, K, L) <= max_tasks:
        rows = []
        for k in range(1, K + 1):
            supports = np.array(list(itertools.combinations(range(M), k)), dtype=np.int64)
            values = levels[np.array(list(itertools.product(range(L), repeat=k)), dtype=np.int64)]
            s = np.repeat(supports, len(values), axis=0)
            v = np.tile(values, (len(supports), 1))
            rows.append(dense_latents(s, v, M))
        return np.concatenate(rows)
    sizes = np.arange(max_tasks) % K + 1
    order = np.argsort(rng.random((max_tasks, M)), axis=1)[:, :K]
    supports = np.where(np.arange(K)[None, :] < sizes[:, None], order, -1)
    values = rng.choice(levels, size=supports.shape)
    return dense_latents(supports, values, M)


def task_points(net: ExactConstruction, z: np.ndarray, points: int, rng: np.random.Generator,
                spread: float = 1.0) -> np.ndarray:
    """x for each row of z: half uniform in the box, a quarter random vertices, a quarter
    'tight' vertices x = ±sign(U_m[:, r]) of an active module, where its signal sits at hi or
    lo and a gated unit's pre-activation is exactly 0 (the worst case for rounding and leaks).
    Rows are (task, point); `spread` scales the box."""
    T, I = len(z), net.I
    z_rep = np.repeat(z, points, axis=0)
    x = sample_inputs(T * points, I, rng)
    kind = np.tile(np.arange(points) % 4, T)  # 0, 1: uniform; 2: vertex; 3: tight vertex
    signs = rng.choice([-1.0, 1.0], size=(T * points, I))
    x[kind == 2] = signs[kind == 2]
    tight = np.flatnonzero(kind == 3)
    if len(tight):
        U = net.U.numpy()
        active = z_rep[tight] > 0
        # a random active module per row (module 0 where none is active)
        m = np.argmax(active * rng.random(active.shape), axis=1)
        r = rng.integers(0, U.shape[2], len(tight))
        s = np.sign(U[m, :, r])
        s = np.where(s == 0, signs[tight], s) * rng.choice([-1.0, 1.0], size=(len(tight), 1))
        x[tight] = s
    return spread * x
