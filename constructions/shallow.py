"""The theorem's explicit ReLU MLP (spec §3), in structured and in dense form.

`ShallowConstruction` holds the network's parameters in factored form: the teacher-side
affine map z ↦ c_ih(z)/C, the number N of knots of the square interpolant, and the carry of the
bias. Its forward pass computes exactly the function of the dense MLP
Linear → ReLU → Linear → ReLU → Linear of widths (2IHN + carry, H, O), but costs
O(I·H) per input instead of O(I·H·N), and never stores the (2IHN + carry) × (M + I)
first layer. `to_sequential()` materialises that dense network when it is wanted.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from constructions.base import Construction, construction_constants, widths_source
from constructions.tasks.hyperteacher import Hyperteacher
from theory.bounds import (
    HiddenUnits,
    N_for_eps,
    apriori_C_W,
    certificate,
    count_formula,
    hidden_units,
    rounding_floor,
    square_interpolant,
    square_relu_coefficients,
)


class ShallowConstruction(Construction):
    """f(e(z), x) with sup_{X × Z_K} ‖f − g‖_∞ ≤ I·C·a/N² (the certificate)."""

    name = "shallow"
    task_set = "Z_K"  # every x in [-1,1]^I and every z in [0,1]^M with at most K nonzeros

    def __init__(self, teacher: Hyperteacher, N: int, C: float, a: float,
                 variant: str = "theorem", constants: str = "apriori"):
        super().__init__(teacher, variant, constants)
        self.N, self.C, self.a = int(N), float(C), float(a)
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=torch.float64)  # noqa: E731
        root_K = math.sqrt(self.K)
        # c_ih(z)/C as one matmul: z (B, M) @ (M, I·H).
        self.register_buffer("W_over_C", t(teacher.W.reshape(self.M, -1) / (root_K * self.C)))
        self.register_buffer("b_tilde", t(teacher.b / root_K))  # b(z̃) = z @ b_tilde
        # No buffer of the N knots: forward() uses the closed-form chord, so the structured
        # evaluator's memory does not grow with N (1/√ε); to_sequential() writes them.

    def certificate(self) -> float:
        return certificate(self.I, self.C, self.a, self.N)

    def rounding_floor(self, unit_roundoff: float = 2.0**-53, dense: bool = False) -> float:
        """Worst-case floating-point error of evaluating this network (2⁻⁵³: float64),
        in structured form or, with `dense`, as the nn.Sequential."""
        return rounding_floor(self.I, self.H, self.M, self.K, self.C, self.a, self.N,
                              unit_roundoff, dense)

    def hidden_units(self) -> HiddenUnits:
        return hidden_units(self.I, self.H, self.M, self.N, self.variant)

    def count_formula(self) -> str:
        return count_formula(self.variant)

    def summary(self) -> dict:
        """The parameters that determine this network, for reports."""
        return dict(N=self.N, C=self.C, a=self.a, variant=self.variant, constants=self.constants)

    def report_fields(self, teacher: Hyperteacher, eps: float) -> dict:
        """The theorem's quantities: C against both bounds on |W|, N·√ε against its limit
        √(I·C·a), the count term by term and the other variant's count."""
        other = "lean" if self.variant == "theorem" else "theorem"
        units = self.hidden_units()
        return {
            "constants": dict(kind=self.constants, C=self.C, a=self.a, C_W_apriori=apriori_C_W(self.I),
                              C_W_instance=float(np.abs(teacher.W).max())),
            "N": self.N,
            "N_sqrt_eps": self.N * math.sqrt(eps),
            "N_sqrt_eps_limit": math.sqrt(self.I * self.C * self.a),
            "hidden_units_" + other: hidden_units(self.I, self.H, self.M, self.N, other).total,
            "hidden_units": dict(squares=units.squares, carry=units.carry, teacher=units.teacher),
        }

    def report_lines(self, r: dict) -> list[str]:
        c, u = r["constants"], r["hidden_units"]
        carry = "M" if r["variant"] == "theorem" else "H"
        other = "lean" if r["variant"] == "theorem" else "theorem"
        C_how = "√K·2σ, a-priori" if c["kind"] == "apriori" else "exact sup over Z_K"
        return [
            f"constants     C = {c['C']:.4f} ({C_how})   a = max_o Σ_h|A_ho| = {c['a']:.4f}",
            f"ε             {r['eps']:.3e}",
            f"N             {r['N']:,} = ⌈√(I·C·a/ε)⌉     N·√ε = {r['N_sqrt_eps']:.3f} "
            f"(→ √(I·C·a) = {r['N_sqrt_eps_limit']:.3f})",
            f"hidden units  squares 2·I·H·N = {u['squares']:,}",
            f"              carry {carry:<9} = {u['carry']:,}",
            f"              layer 2 H       = {u['teacher']:,}",
            f"              total           = {u['total']:,}   formula {u['formula']} = O(1/√ε + M)",
            f"              widths          = {tuple(u['widths'])} {widths_source(u)}",
            f"              ({other} variant: {r['hidden_units_' + other]:,})",
            f"certificate   I·C·a/N² = {r['certificate']:.3e}   (float64 rounding ≤ "
            f"{r['rounding_floor_float64']:.1e})",
        ]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        z = self.decode(inputs[:, : self.M])
        x = inputs[:, self.M:]
        c = (z @ self.W_over_C).view(-1, self.I, self.H)
        u = (x[:, :, None] + c) / 2
        v = (x[:, :, None] - c) / 2
        products = self.C * (square_interpolant(u, self.N) - square_interpolant(v, self.N))
        if self.variant == "theorem":
            carry = torch.relu(z) @ self.b_tilde
        else:
            carry = torch.relu(z @ self.b_tilde)
        return torch.relu(products.sum(dim=1) + carry) @ self.A

    def counted_widths(self) -> list[int]:
        """Hidden widths read off this object's parameters (not from the formula): two
        ReLU blocks of N units per (i, h) column of the teacher map, the carry (one unit
        per z_m, or per b_h), and the H units of the teacher's layer."""
        n_products = self.W_over_C.shape[1]
        carry = self.W_over_C.shape[0] if self.variant == "theorem" else self.b_tilde.shape[1]
        return [2 * n_products * self.N + carry, self.A.shape[0]]

    def to_sequential(self, dtype: torch.dtype = torch.float64) -> nn.Sequential:
        """The dense standard MLP: Linear, ReLU, Linear, ReLU, Linear, input [e(z), x].

        Layer-1 rows are ordered (square ∈ {u, v}, i, h, k), then the carry units. Weights
        are written in place into the Linear layers (skipping their random init), so the
        peak memory is one copy of the dense parameters plus a block of I·H·N rows.
        """
        I, H, M, N, C, D = self.I, self.H, self.M, self.N, self.C, self.input_dim
        knots, alpha = square_relu_coefficients(N)
        knots, alpha = torch.as_tensor(knots), torch.as_tensor(alpha)
        n_squares = 2 * I * H * N
        n1, n2 = self.hidden_units().widths
        first = nn.utils.skip_init(nn.Linear, D, n1, dtype=dtype)
        second = nn.utils.skip_init(nn.Linear, n1, n2, dtype=dtype)
        readout = nn.utils.skip_init(nn.Linear, n2, self.O, dtype=dtype)
        z_to_e = self.Q.T if self.Q is not None else None  # rows act on e = zQᵀ as on z

        with torch.no_grad():
            # Layer 1: u_ih − t_k = x_i/2 + c_ih/(2C) − t_k, and v the same with −c_ih.
            w1 = first.weight
            w1.zero_()
            c_rows = self.W_over_C.view(M, I, H).permute(1, 2, 0) / 2  # (I, H, M)
            if z_to_e is not None:
                c_rows = c_rows @ z_to_e
            squares = w1[:n_squares].view(2, I, H, N, D)
            for sign, block in zip((1.0, -1.0), squares, strict=True):
                block[..., :M] = sign * c_rows[:, :, None, :]
                block[..., M:].diagonal(dim1=0, dim2=3).fill_(0.5)  # x_i enters row (i, ·, ·)
            first.bias[:n_squares] = (-knots).repeat(2 * I * H)
            carry_z = torch.eye(M, dtype=torch.float64) if self.variant == "theorem" else self.b_tilde.T
            w1[n_squares:, :M] = carry_z @ z_to_e if z_to_e is not None else carry_z
            first.bias[n_squares:] = 0.0

            # Layer 2: p_h = Σ_i C(ŝ(u_ih) − ŝ(v_ih)) + b_h(z̃); the two constant 1s cancel.
            w2 = second.weight
            w2.zero_()
            per_unit = w2[:, :n_squares].view(H, 2, I, H, N)
            for h in range(H):
                per_unit[h, 0, :, h, :] = C * alpha
                per_unit[h, 1, :, h, :] = -C * alpha
            w2[:, n_squares:] = self.b_tilde.T if self.variant == "theorem" else torch.eye(H)
            second.bias.zero_()
            readout.weight.copy_(self.A.T)
            readout.bias.zero_()
        return nn.Sequential(first, nn.ReLU(), second, nn.ReLU(), readout)


def build_shallow(teacher: Hyperteacher, eps: float, variant: str = "theorem",
                       constants: str = "apriori", C: float | None = None) -> ShallowConstruction:
    """The network the theorem promises for ε. Passing C overrides the derived constant
    (tests use it to check that a constant that is too small gets caught)."""
    C_derived, a = construction_constants(teacher, constants)
    C = C_derived if C is None else float(C)
    N = N_for_eps(teacher.I, C, a, eps)
    return ShallowConstruction(teacher, N=N, C=C, a=a, variant=variant, constants=constants)


# The name before every builder was called build_NAME; kept so that users' scripts still run.
build_construction = build_shallow
