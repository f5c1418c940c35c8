"""Instance-optimal allocation (spec §6): the theorem's network with one N per product.

Same architecture as `constructions.shallow` — Linear → ReLU → Linear → ReLU → Linear of
widths (Σ_ih 2·N_ih + carry, H, O) — but product (i, h) gets its own centre m_ih and
radius r_ih of c_ih(z) on Z_K and its own N_ih, chosen by theory.optimal.allocate to
minimise Σ N_ih subject to

    certificate = max_o Σ_h |A_ho| Σ_i r_ih / N_ih²  ≤  ε.

Unit h of layer 2 computes
    p_h = Σ_i [ r_ih·(ŝ_{N_ih}(u_ih) − ŝ_{N_ih}(v_ih)) + m_ih·(ReLU(u_ih+1) + ReLU(v_ih+1) − 2) ] + b_h(z̃)
with u, v = (x_i ± (c_ih − m_ih)/r_ih)/2. The ReLU(·+1) are the first units of the two
square blocks (knot −1), so the linear part m_ih·x_i costs no unit. Layer-1 rows are
grouped per product (i, h) in i-major order: N_ih rows for u, then N_ih for v; then the
carry (theorem: M units z_m; lean: H units b_h(z̃)), as in shallow.

`forward` is the structured evaluator (O(I·H) per input, never the dense matrix);
`to_sequential` writes the dense network. They are the same function on all of ℝ^D.

The N_ih minimise Σ N_ih under the certificate by its Lagrange dual (L-BFGS-B), then rounding
and greedy trimming. Measured on the default teacher (I = H = O = 16, M = 32, K = 3): the
integer Σ N_ih is within 5 (ε = 1e-3) of the dual lower bound, and every single N_ih − 1
breaks the certificate; the network is 0.816× the theorem's units (a-priori C), 0.830× the
shallow network with instance C (144,950 hidden units at ε = 1e-3, 4,581,944 at 1e-6).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from constructions.base import Construction
from constructions.tasks.hyperteacher import Hyperteacher
from theory import bounds
from theory import optimal as theory
from theory.bounds import square_interpolant, top_k_sum

CONSTANTS_NOTE = ("instance: per-(i, h) exact ranges of c_ih on Z_K; apriori: the truncation bound "
                  "√K·2σ for every product (only the readout weighting differs from the theorem)")


class OptimalConstruction(Construction):
    """f(e(z), x) with sup_{X × Z_K} ‖f − g‖_∞ ≤ max_o Σ_h |A_ho| Σ_i r_ih/N_ih²."""

    name = "optimal"
    task_set = "Z_K"  # every x in [-1,1]^I and every z in [0,1]^M with at most K nonzeros

    def __init__(self, teacher: Hyperteacher, N: np.ndarray, r: np.ndarray, m: np.ndarray,
                 variant: str = "theorem", constants: str = "instance", report: dict | None = None):
        super().__init__(teacher, variant, constants)
        N, r, m = np.asarray(N), np.asarray(r, dtype=np.float64), np.asarray(m, dtype=np.float64)
        if N.shape != (self.I, self.H) or r.shape != N.shape or m.shape != N.shape:
            raise ValueError(f"N, r and m must have shape (I, H) = {(self.I, self.H)}")
        if np.any(N < 1) or np.any(N != np.round(N)) or np.any(r < 0):
            raise ValueError("every N_ih must be an integer ≥ 1 and every r_ih ≥ 0")
        self.report = dict(report or {})
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=torch.float64)  # noqa: E731
        root_K = math.sqrt(self.K)
        safe_r = np.where(r > 0, r, 1.0)  # r_ih = 0 only if W[:, i, h] = 0: then c − m ≡ 0
        # (c_ih − m_ih)/r_ih = z @ W_over_r − offset, one matmul for all products.
        self.register_buffer("W_over_r", t((teacher.W / (root_K * safe_r)).reshape(self.M, -1)))
        self.register_buffer("offset", t(m / safe_r))
        self.register_buffer("r", t(r))
        self.register_buffer("m", t(m))
        self.register_buffer("N", torch.as_tensor(N.astype(np.int64)))
        self.register_buffer("b_tilde", t(teacher.b / root_K))
        self._floor_terms = self._rounding_magnitudes(teacher, safe_r)

    def _rounding_magnitudes(self, teacher: Hyperteacher, safe_r: np.ndarray) -> dict:
        """The Σ|terms| bounds theory.optimal.rounding_floor needs, for this teacher on Z_K.

        z-part of a square unit's pre-activation, Σ_m |z_m W_m[i,h]|/(2√K r_ih): identity,
        the K largest |W_m[i,h]|; orthogonal, ‖e‖₂ ≤ √K times the row's ℓ2 norm, times √M
        for the rounding of e = zQᵀ, of the decode and of the rows written through Q.
        """
        K, M = self.K, self.M
        absW = np.abs(teacher.W).reshape(M, -1)
        if teacher.Q is None:
            z_part = top_k_sum(absW, K) / (2 * math.sqrt(K))
        else:
            z_part = math.sqrt(M) * np.linalg.norm(absW, axis=0) / 2
        z_part = z_part.reshape(self.I, self.H) / safe_r
        # x_i/2 ≤ 1/2, the knot |t_k| ≤ 1 and the offset |m|/(2r) ≤ 1/2 (|m| ≤ r).
        layer1_terms = 2.0 + float(z_part.max())
        b = np.abs(teacher.b) / math.sqrt(K)  # (M, H)
        carry_sum = top_k_sum(b, K)  # sup of b_h(z̃) on Z_K
        carry_terms = carry_sum if teacher.Q is None else math.sqrt(M * K) * b.sum(axis=0)
        return dict(layer1_terms=layer1_terms, carry_sum=carry_sum, carry_terms=carry_terms)

    def certificate(self) -> float:
        return theory.certificate(self.r.numpy(), self.N.numpy(), self.A.numpy())

    def rounding_floor(self, unit_roundoff: float = 2.0**-53, dense: bool = False) -> float:
        """Worst-case float error on X × Z_K (theory.optimal.rounding_floor). The longest
        path: encode (M), layer 1 (D + 1 dense; decode, z·W, u and the chord structured),
        layer 2 (2·max_h Σ_i N_ih + carry + 1 dense; I products + 4 structured), readout H."""
        N = self.N.numpy()
        carry = self.hidden_units().carry
        if dense:
            n_ops = self.M + (self.input_dim + 1) + (2 * int(N.sum(axis=0).max()) + carry + 1) + self.H
        else:
            n_ops = self.M + (2 * self.M + 8) + (self.I + 4) + self.H
        return theory.rounding_floor(self.r.numpy(), self.m.numpy(), N, self.A.numpy(),
                                     n_ops=n_ops, unit_roundoff=unit_roundoff, **self._floor_terms)

    def hidden_units(self) -> theory.HiddenUnits:
        return theory.hidden_units(self.N.numpy(), self.M, self.H, self.variant)

    def count_formula(self) -> str:
        return theory.count_formula(self.variant)

    def summary(self) -> dict:
        """This network's allocation and, when built by build_optimal, the comparison with
        the theorem's uniform N at the same ε."""
        N = self.N.numpy()
        units = self.hidden_units()
        out = dict(N_min=int(N.min()), N_median=float(np.median(N)), N_max=int(N.max()), N_sum=int(N.sum()),
                   units=units.total, certificate=self.certificate(), variant=self.variant,
                   constants=self.constants, centered=bool(np.any(self.m.numpy() != 0)),
                   r_min=float(self.r.min()), r_max=float(self.r.max()))
        out.update(self.report)
        return out

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        # Products first, batch last: every per-product constant (r, m, N, offset) is then
        # one number per contiguous row of B entries, which keeps the elementwise kernels
        # vectorised (batch-first with an (I, H) operand runs ~3× slower for small I·H).
        z = self.decode(inputs[:, : self.M])
        x = inputs[:, self.M:].T[:, None, :]  # (I, 1, B)
        t = (self.W_over_r.T @ z.T).view(self.I, self.H, -1) - self.offset[..., None]
        uv = torch.stack((x + t, x - t)) / 2  # u and v: (2, I, H, B)
        s = square_interpolant(uv, self.N[..., None].to(torch.float64))
        squares = self.r[..., None] * (s[0] - s[1])
        # The first unit of each block is ReLU(· + 1); their sum minus 2 is x_i on the box.
        linear = self.m[..., None] * (torch.relu(uv + 1.0).sum(dim=0) - 2.0)
        if self.variant == "theorem":
            carry = torch.relu(z) @ self.b_tilde
        else:
            carry = torch.relu(z @ self.b_tilde)
        return torch.relu((squares + linear).sum(dim=0).T + carry) @ self.A

    def counted_widths(self) -> list[int]:
        """Hidden widths read off the buffers: two blocks of N_ih units per product, the
        carry (one unit per z_m, or per b_h), and the H units of the teacher's layer."""
        carry = self.W_over_r.shape[0] if self.variant == "theorem" else self.b_tilde.shape[1]
        return [2 * int(self.N.sum()) + carry, self.A.shape[0]]

    def to_sequential(self, dtype: torch.dtype = torch.float64) -> nn.Sequential:
        """The dense MLP; layer-1 rows per product (i, h): u-block then v-block, knots in
        order; then the carry. Every row's entries come from index arrays, no Python loop."""
        I, H, M, D = self.I, self.H, self.M, self.input_dim
        n1, n2 = self.hidden_units().widths
        first = nn.utils.skip_init(nn.Linear, D, n1, dtype=dtype)
        second = nn.utils.skip_init(nn.Linear, n1, n2, dtype=dtype)
        readout = nn.utils.skip_init(nn.Linear, n2, self.O, dtype=dtype)

        N = self.N.reshape(-1)
        sizes = 2 * N
        n_squares = int(sizes.sum())
        product = torch.repeat_interleave(torch.arange(I * H), sizes)  # (i, h) of every row
        within = torch.arange(n_squares) - (torch.cumsum(sizes, 0) - sizes)[product]
        N_row = N[product]
        is_v = within >= N_row
        k = (within - is_v * N_row).to(torch.float64)
        N_row = N_row.to(torch.float64)
        sign = 1.0 - 2.0 * is_v.to(torch.float64)
        knots = -1.0 + 2.0 * k / N_row
        alpha = torch.where(k == 0, -2.0 + 2.0 / N_row, 4.0 / N_row)  # slope, then its jumps
        rows = torch.arange(n_squares)
        z_to_e = self.Q.T if self.Q is not None else None  # rows act on e = zQᵀ as on z

        with torch.no_grad():
            # Layer 1: u − t_k = x_i/2 + (z·W/(√K r) − m/r)/2 − t_k; v has the opposite z-part.
            w1 = first.weight
            w1.zero_()
            z_rows = self.W_over_r.T / 2  # (I·H, M)
            if z_to_e is not None:
                z_rows = z_rows @ z_to_e
            w1[:n_squares, :M] = sign[:, None] * z_rows[product]
            w1[rows, M + product // H] = 0.5
            first.bias[:n_squares] = -sign * self.offset.reshape(-1)[product] / 2 - knots
            carry_z = torch.eye(M, dtype=torch.float64) if self.variant == "theorem" else self.b_tilde.T
            w1[n_squares:, :M] = carry_z @ z_to_e if z_to_e is not None else carry_z
            first.bias[n_squares:] = 0.0

            # Layer 2: ±r α_k on the square units, + m on each block's first unit, bias −2Σ_i m.
            w2 = second.weight
            w2.zero_()
            weight = sign * self.r.reshape(-1)[product] * alpha + (k == 0) * self.m.reshape(-1)[product]
            w2[product % H, rows] = weight
            w2[:, n_squares:] = self.b_tilde.T if self.variant == "theorem" else torch.eye(H)
            second.bias.copy_(-2.0 * self.m.sum(dim=0))
            readout.weight.copy_(self.A.T)
            readout.bias.zero_()
        return nn.Sequential(first, nn.ReLU(), second, nn.ReLU(), readout)


def uniform_comparison(teacher: Hyperteacher, eps: float, variant: str) -> dict:
    """The theorem's uniform N and units at ε, for both kinds of constants (shallow)."""
    a = bounds.readout_norm(teacher.A)
    out = {}
    for kind, C in (("apriori", bounds.apriori_C(teacher.I, teacher.K)),
                    ("instance", bounds.instance_C(teacher.W, teacher.K))):
        N = bounds.N_for_eps(teacher.I, C, a, eps)
        out[f"shallow_{kind}_N"] = N
        out[f"shallow_{kind}_units"] = bounds.hidden_units(teacher.I, teacher.H, teacher.M, N, variant).total
    return out


def build_optimal(teacher: Hyperteacher, eps: float, variant: str = "theorem", constants: str = "instance",
                  center: bool = True, compare: bool = True) -> OptimalConstruction:
    """The instance-optimal network for ε.

    constants: "instance" (default) uses each product's exact range on Z_K, centred unless
    center=False (then C_ih = max(pos, neg), the brief's design); "apriori" gives every
    product the truncation bound √K·2σ (no centre), so only the readout weights |A_ho|
    shape the allocation. compare adds to summary() the theorem's uniform N at the same ε
    (apriori and instance), the best uniform N under this certificate and, when centred,
    the uncentred allocation's size: one more solve, ~0.2 s at the default sizes.
    """
    if variant not in bounds.VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(bounds.VARIANTS)}; got {variant!r}")
    if constants not in bounds.CONSTANTS:
        raise ValueError(f"constants must be one of {', '.join(bounds.CONSTANTS)}; got {constants!r}")
    if constants == "instance":
        m, r = theory.product_constants(teacher.W, teacher.K, center=center)
    else:
        r = np.full((teacher.I, teacher.H), bounds.apriori_C(teacher.I, teacher.K))
        m = np.zeros_like(r)
    allocation = theory.allocate(r, teacher.A, eps)
    units = theory.hidden_units(allocation.N, teacher.M, teacher.H, variant).total
    carry_and_layer2 = units - 2 * allocation.total
    report = dict(eps=eps, N_sum_lower_bound=allocation.lower_bound,
                  units_lower_bound=2 * allocation.lower_bound + carry_and_layer2,
                  N_sum_continuous=allocation.continuous_sum, allocation_start=allocation.start,
                  trims=allocation.trims, solver_seconds=allocation.solver_seconds,
                  solver_iterations=allocation.solver_iterations,
                  binding_outputs=[int(o) for o in np.flatnonzero(allocation.multipliers > 0)])
    if compare:
        report.update(uniform_comparison(teacher, eps, variant))
        N_uniform = theory.uniform_N(r, teacher.A, eps)
        report.update(uniform_same_certificate_N=N_uniform,
                      uniform_same_certificate_units=2 * teacher.I * teacher.H * N_uniform + carry_and_layer2)
        if constants == "instance" and center:
            _, C_ih = theory.product_constants(teacher.W, teacher.K, center=False)
            uncentred = theory.allocate(C_ih, teacher.A, eps).total
            report.update(uncentered_N_sum=uncentred, uncentered_units=2 * uncentred + carry_and_layer2)
        for kind in ("apriori", "instance"):
            report[f"units_ratio_vs_shallow_{kind}"] = units / report[f"shallow_{kind}_units"]
    return OptimalConstruction(teacher, allocation.N, r, m, variant=variant, constants=constants,
                               report=report)
