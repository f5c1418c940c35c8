"""The ReLU MLP that approximates a multi-layer hyperteacher (constructions/tasks/multilayer.py)
on all of X × Z_K.

Construction: one block per teacher layer, each the shallow construction's two hidden layers:
- squares layer: N_l ReLUs for each of ŝ(u_ih), ŝ(v_ih), u, v = (ĥ'_i/R_i ± c_ih(z)/C_ih)/2, where
  ĥ' = ĥ − U/2 is the previous block's output centred on its interval [0, U] (x itself for l = 1),
  plus M units carrying z (ReLU(z) = z on Z_K);
- teacher layer: p̂_h = Σ_i R_i C_ih (ŝ(u) − ŝ(v)) + b'_h(z̃), where b' also holds the centre's part
  Σ_i (U_i/2) c_ih(z), linear in z. Before the last block: H units ReLU(p̂), H clamp units
  ReLU(p̂ − U) (so the next block reads ReLU(p̂) − ReLU(p̂ − U) = min(max(p̂, 0), U) ∈ [0, U], keeping
  its u, v in [-1, 1]) and M carry units; the last block: H units ReLU(p̂), then ·A.
Hidden units: Σ_l (2·H_{l−1}·H·N_l + M) + (L−1)·(2H + M) + H. The certificate and the choice of N_l
are derived in `theory.multilayer`: δ^l ≤ Cᵀ δ^{l-1} + Cᵀ R / N_l², certificate max_o (|A|ᵀ δ^L)_o.
Each block's input is bounded by interval arithmetic (with `--constants instance` exactly, as a
max over the vertices of Z_K); the N_l are allocated by a closed-form Lagrange rule and trimmed.

Measured (default teacher, `--constants instance`, ε = 1e-3): L = 2, 1,042,064 hidden units in 4
hidden layers, measured/certificate 0.10; L = 3, 4,544,752 units in 6, 0.045. The low ratio at
L = 3 is the Lipschitz bound's worst-case alignment across layers; on the one-neuron instance
an exhaustive grid reaches 0.96 of it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from constructions.base import Construction
from constructions.tasks.multilayer import MultiLayerHyperteacher
from theory import multilayer as theory
from theory.bounds import CONSTANTS, VARIANTS, readout_norm, square_interpolant, square_relu_coefficients


class MultiLayerConstruction(Construction):
    """f(e(z), x) with sup_{X × Z_K} ‖f − g‖_∞ ≤ max_o (|A|ᵀ δ^L)_o (see theory.multilayer)."""

    name = "multilayer"
    task_set = "Z_K"

    def __init__(self, teacher: MultiLayerHyperteacher, N, constants: str = "instance",
                 bounds: list[theory.LayerBounds] | None = None):
        # Always the "theorem" variant: every block after the first reads z itself (build_multilayer).
        super().__init__(teacher, "theorem", constants)
        self.L, self.sizes = teacher.L, teacher.sizes
        self.N = tuple(int(n) for n in N)
        if len(self.N) != self.L or min(self.N) < 1:
            raise ValueError(f"need one N_l ≥ 1 per layer (L = {self.L}), got {self.N}")
        self.bounds = theory.interval_bounds(teacher.Ws, teacher.bs, self.K, constants) \
            if bounds is None else bounds
        self._Ws = teacher.Ws  # kept for the rounding floor (magnitudes of the z-weights)
        self.orthogonal = teacher.Q is not None
        self.a = readout_norm(teacher.A)
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=torch.float64)  # noqa: E731
        root_K = math.sqrt(self.K)
        for l, (lb, W) in enumerate(zip(self.bounds, teacher.Ws, strict=True)):
            # A zero range (C_ih = 0 or R_i = 0) means the product is 0 on the task set; its
            # u, v weights are set to 0 and its output weight R·C is 0, in both forms alike.
            self.register_buffer(f"W_over_C{l}", t((W / root_K * _inverse(lb.C)).reshape(self.M, -1)))
            self.register_buffer(f"x_scale{l}", t(_inverse(lb.R)))
            self.register_buffer(f"centre{l}", t(lb.centre))
            self.register_buffer(f"RC{l}", t(lb.R[:, None] * lb.C))
            self.register_buffer(f"b_tilde{l}", t(lb.b_centred / root_K))
            if l < self.L - 1:
                self.register_buffer(f"U{l}", t(lb.U))

    def _block(self, l: int) -> dict[str, torch.Tensor]:
        names = ("W_over_C", "x_scale", "centre", "RC", "b_tilde")
        names += ("U",) if l < self.L - 1 else ()
        return {name: getattr(self, f"{name}{l}") for name in names}

    # -- the function -----------------------------------------------------------------------

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The dense network's function block by block, with ŝ in closed form (O(H_{l-1}·H) per row).

        Block 1's squares read z = e-decoded; every later use of z reads the carry ReLU(z), as
        the dense network does, so both agree off Z_K too."""
        z = self.decode(inputs[:, : self.M])
        h = inputs[:, self.M:]
        z_carry = torch.relu(z)
        for l in range(self.L):
            p = self._block(l)
            n_in = self.sizes[l]
            c = ((z if l == 0 else z_carry) @ p["W_over_C"]).view(-1, n_in, self.H)
            h_scaled = ((h - p["centre"]) * p["x_scale"])[:, :, None]
            u, v = (h_scaled + c) / 2, (h_scaled - c) / 2
            N = self.N[l]
            products = p["RC"] * (square_interpolant(u, N) - square_interpolant(v, N))
            pre = products.sum(dim=1) + z_carry @ p["b_tilde"]
            h = torch.relu(pre) - torch.relu(pre - p["U"]) if l < self.L - 1 else torch.relu(pre)
        return h @ self.A

    # -- the protocol -----------------------------------------------------------------------

    def certificate(self) -> float:
        return theory.certificate(self.bounds, self.A.numpy(), self.N)

    def error_bounds(self) -> list[np.ndarray]:
        return theory.error_bounds(self.bounds, self.N)

    def rounding_floor(self, unit_roundoff: float = 2.0**-53, dense: bool = False) -> float:
        return theory.rounding_floor(self.bounds, self._Ws, self.A.numpy(), self.N, self.K,
                                     self.orthogonal, unit_roundoff, dense)

    def hidden_units(self) -> theory.MultiLayerHiddenUnits:
        return theory.hidden_units(self.sizes, self.M, self.N)

    def count_formula(self) -> str:
        return theory.count_formula()

    def counted_widths(self) -> list[int]:
        """Widths read off the buffers: per block 2·(#products)·N_l + carry (rows of W_over_C),
        then H ReLU + H clamp (len U) + carry, or H (columns of A) for the last block."""
        out = []
        for l in range(self.L):
            p = self._block(l)
            M = p["W_over_C"].shape[0]
            out.append(2 * p["W_over_C"].shape[1] * self.N[l] + M)
            out.append(2 * p["U"].numel() + M if "U" in p else self.A.shape[0])
        return out

    def summary(self) -> dict:
        return dict(L=self.L, N=list(self.N), constants=self.constants, a=self.a,
                    kappa=theory.kappas(self.bounds, self.A.numpy()).tolist(),
                    U_max=[float(lb.U.max()) for lb in self.bounds],
                    C_max=[float(lb.C.max()) for lb in self.bounds])

    # -- the dense network ------------------------------------------------------------------

    def to_sequential(self, dtype: torch.dtype = torch.float64) -> nn.Sequential:
        """Linear/ReLU pairs, two per block, then the readout. Input [e(z), x].

        Squares-layer rows are ordered (square ∈ {u, v}, i, h, k), then M carry rows. The teacher
        layer's rows are the H units ReLU(p̂), then (not in the last block) H clamp units
        ReLU(p̂ − U) and M carry rows; the next block reads ĥ = ReLU(p̂) − ReLU(p̂ − U) from them.
        """
        M, H = self.M, self.H
        widths = self.hidden_units().widths
        z_to_e = self.Q.T if self.Q is not None else None
        layers: list[nn.Module] = []
        n_prev = self.input_dim
        for l in range(self.L):
            p = self._block(l)
            n_in, N = self.sizes[l], self.N[l]
            knots, alpha = (torch.as_tensor(a) for a in square_relu_coefficients(N))
            n_sq = 2 * n_in * H * N
            first = nn.utils.skip_init(nn.Linear, n_prev, widths[2 * l], dtype=dtype)
            second = nn.utils.skip_init(nn.Linear, widths[2 * l], widths[2 * l + 1], dtype=dtype)
            with torch.no_grad():
                w1 = first.weight
                w1.zero_()
                # Columns of the block's input: l = 1: [e (M), x (I)]; l ≥ 2: [ReLU(p̂) (H), clamp (H), z (M)].
                z_cols = slice(0, M) if l == 0 else slice(2 * H, 2 * H + M)
                c_rows = p["W_over_C"].view(M, n_in, H).permute(1, 2, 0) / 2  # (n_in, H, M)
                if l == 0 and z_to_e is not None:
                    c_rows = c_rows @ z_to_e
                half_scale = p["x_scale"] / 2
                squares = w1[:n_sq].view(2, n_in, H, N, n_prev)
                for sign, block in zip((1.0, -1.0), squares, strict=True):
                    block[..., z_cols] = sign * c_rows[:, :, None, :]
                    # ĥ_i enters row (·, i, ·, ·) with 1/(2R_i); .diagonal puts i last: (H, N, n_in).
                    if l == 0:
                        block[..., M:].diagonal(dim1=0, dim2=3).copy_(half_scale.expand(H, N, n_in))
                    else:
                        block[..., :H].diagonal(dim1=0, dim2=3).copy_(half_scale.expand(H, N, n_in))
                        block[..., H:2 * H].diagonal(dim1=0, dim2=3).copy_(-half_scale.expand(H, N, n_in))
                offset = -(p["centre"] * half_scale)  # (n_in,): −m_i/(2R_i)
                first.bias[:n_sq] = (offset[:, None, None] - knots[None, None, :]).expand(
                    n_in, H, N).reshape(-1).repeat(2)
                eye = torch.eye(M, dtype=torch.float64)
                w1[n_sq:, z_cols] = eye @ z_to_e if (l == 0 and z_to_e is not None) else eye
                first.bias[n_sq:] = 0.0

                # Teacher layer: p̂_h = Σ_i R_i C_ih Σ_k α_k (s⁺_ihk − s⁻_ihk) + b'_h(z̃).
                w2 = second.weight
                w2.zero_()
                n_units = H if l == self.L - 1 else 2 * H
                for copy in range(n_units // H):
                    per_unit = w2[copy * H:(copy + 1) * H, :n_sq].view(H, 2, n_in, H, N)
                    for h in range(H):
                        per_unit[h, 0, :, h, :] = p["RC"][:, h, None] * alpha
                        per_unit[h, 1, :, h, :] = -p["RC"][:, h, None] * alpha
                    w2[copy * H:(copy + 1) * H, n_sq:] = p["b_tilde"].T
                second.bias.zero_()
                if l < self.L - 1:
                    second.bias[H:2 * H] = -p["U"]
                    w2[2 * H:, n_sq:] = eye
            layers += [first, nn.ReLU(), second, nn.ReLU()]
            n_prev = widths[2 * l + 1]
        readout = nn.utils.skip_init(nn.Linear, n_prev, self.O, dtype=dtype)
        with torch.no_grad():
            readout.weight.copy_(self.A.T)
            readout.bias.zero_()
        return nn.Sequential(*layers, readout).to(dtype)


def _inverse(a: np.ndarray) -> np.ndarray:
    """1/a where a > 0, else 0 (a zero range: the product is 0 on the task set)."""
    return np.where(a > 0, 1.0 / np.where(a > 0, a, 1.0), 0.0)


def build_multilayer(teacher: MultiLayerHyperteacher, eps: float, variant: str = "theorem",
                     constants: str = "apriori", N=None) -> MultiLayerConstruction:
    """The multi-layer network for ε: interval bounds, then N_l from `theory.multilayer.allocate_N`.

    `variant="lean"` (carry b(z̃) instead of z) is not offered: every block after the first needs z
    itself for its c^l(z), so z is carried through the whole network anyway. Passing N overrides
    the allocation (tests use it to check that too small an N gets caught).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    if variant != "theorem":
        raise ValueError("the multilayer construction has no 'lean' variant: later blocks need z itself "
                         "(for c^l(z)), so z is carried through every block; use variant='theorem'")
    if constants not in CONSTANTS:
        raise ValueError(f"constants must be one of {', '.join(CONSTANTS)}; got {constants!r}")
    if not hasattr(teacher, "Ws"):
        raise ValueError("build_multilayer needs a MultiLayerHyperteacher "
                         "(see sample_multilayer_hyperteacher)")
    bounds = theory.interval_bounds(teacher.Ws, teacher.bs, teacher.K, constants)
    if N is None:
        N = theory.allocate_N(bounds, teacher.A, eps)
    return MultiLayerConstruction(teacher, N, constants=constants, bounds=bounds)
