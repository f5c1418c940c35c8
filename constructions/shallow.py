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

from constructions.hyperteacher import Hyperteacher
from theory.bounds import (
    CONSTANTS,
    VARIANTS,
    HiddenUnits,
    N_for_eps,
    apriori_C,
    certificate,
    count_formula,
    hidden_units,
    instance_C,
    readout_norm,
    rounding_floor,
    square_interpolant,
    square_relu_coefficients,
)

BYTES_PER_FLOAT64 = 8


class ShallowConstruction(nn.Module):
    """f(e(z), x) with sup_{X × Z_K} ‖f − g‖_∞ ≤ I·C·a/N² (the certificate).

    Every construction in this package has the same surface, which `verify` relies on:
    `name`, `task_set` (where the certificate holds), forward (the structured evaluator),
    certificate(), rounding_floor(), hidden_units() (.total, .widths, .terms),
    count_formula(), counted_widths(), dense_bytes(), to_sequential() and summary().
    """

    name = "shallow"
    task_set = "Z_K"  # every x in [-1,1]^I and every z in [0,1]^M with at most K nonzeros

    def __init__(self, teacher: Hyperteacher, N: int, C: float, a: float,
                 variant: str = "theorem", constants: str = "apriori"):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
        self.I, self.H, self.O, self.M, self.K = teacher.I, teacher.H, teacher.O, teacher.M, teacher.K
        self.N, self.C, self.a = int(N), float(C), float(a)
        self.variant, self.constants = variant, constants
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=torch.float64)  # noqa: E731
        root_K = math.sqrt(self.K)
        # c_ih(z)/C as one matmul: z (B, M) @ (M, I·H).
        self.register_buffer("W_over_C", t(teacher.W.reshape(self.M, -1) / (root_K * self.C)))
        self.register_buffer("b_tilde", t(teacher.b / root_K))  # b(z̃) = z @ b_tilde
        self.register_buffer("A", t(teacher.A))
        self.register_buffer("Q", t(teacher.Q) if teacher.Q is not None else None)
        # No buffer of the N knots: forward() uses the closed-form chord, so the structured
        # evaluator's memory does not grow with N (1/√ε); to_sequential() writes them.

    @property
    def input_dim(self) -> int:
        return self.M + self.I

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

    def decode(self, e: torch.Tensor) -> torch.Tensor:
        """z from e(z); the orthogonal map is undone by its transpose."""
        return e if self.Q is None else e @ self.Q

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

    def dense_bytes(self) -> int:
        """Memory the parameters of `to_sequential()` take."""
        n1, n2 = self.hidden_units().widths
        params = n1 * (self.input_dim + 1) + n2 * (n1 + 1) + self.O * (n2 + 1)
        return params * BYTES_PER_FLOAT64

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


def construction_constants(teacher: Hyperteacher, constants: str = "apriori") -> tuple[float, float]:
    """(C, a): C from the a-priori truncation bound or from this instance's exact range."""
    if constants not in CONSTANTS:
        raise ValueError(f"constants must be one of {', '.join(CONSTANTS)}; got {constants!r}")
    C = apriori_C(teacher.I, teacher.K) if constants == "apriori" else instance_C(teacher.W, teacher.K)
    return C, readout_norm(teacher.A)


def build_construction(teacher: Hyperteacher, eps: float, variant: str = "theorem",
                       constants: str = "apriori", C: float | None = None) -> ShallowConstruction:
    """The network the theorem promises for ε. Passing C overrides the derived constant
    (tests use it to check that a constant that is too small gets caught)."""
    C_derived, a = construction_constants(teacher, constants)
    C = C_derived if C is None else float(C)
    N = N_for_eps(teacher.I, C, a, eps)
    return ShallowConstruction(teacher, N=N, C=C, a=a, variant=variant, constants=constants)


def count_hidden_units(net: nn.Module) -> list[int]:
    """Hidden widths of any nn.Sequential MLP: out_features of every Linear but the last."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    return [m.out_features for m in linears[:-1]]
