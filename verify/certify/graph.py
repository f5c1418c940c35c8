"""Student minus teacher at fixed tasks, as one ReLU network of x (DiffNet).

For a fixed task z the hyperteacher g(z, ·) = ReLU(W(z̃)ᵀx + b(z̃))·A is a one-hidden-layer
ReLU network of x, and an MLP student f(e(z), ·) on [e(z), x] is a ReLU network of x whose
first layer has the bias b₁ + W₁[:, :E]·e(z). Their difference D(x) = f − g is one ReLU network:

    layer 0      z₀ = W₀ x + b₀         W₀ = [W₁ₓ; W(z̃)ᵀ] (the student's x-columns, shared, over the
                                        teacher's weights at the task), b₀ = [b₁ + W₁ₑ e(z); b(z̃)]
    layer j ≥ 1  z_j = W_j h_{j−1} + b_j  block diagonal: the student's layer, and the identity on the
                                        teacher's H hidden units (ReLU(h) = h for h ≥ 0: stable units)
    output       D = W_out h + b_out       W_out = [W_L, −Aᵀ], b_out = the student's last bias

with h_j = ReLU(z_j). Only layer 0 depends on the task; `DiffNet` holds it per task (the
teacher's rows and the biases) and the rest once.

Exactness. Every weight is a float64 number that the networks use as they are (a float32
student is widened exactly), with two exceptions that are computed: the student's task bias
b₁ + W₁ₑ·e(z) and the teacher's W(z̃), b(z̃) = Σ z̃_m (W_m, b_m), z̃ = z/√K. Their rounding is bounded
per layer-0 unit over x ∈ [-1, 1]^I by `d0` (γ_n of the sums of absolute terms, rounded up), which
the bounds add to every layer-0 bound (verify/certify/bounds.py): the certified network is the
exact-arithmetic f − g at the float64 e(z) and z.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from theory.bounds import gamma


@dataclass
class DiffNet:
    """D = f(e(z), ·) − g(z, ·) for T tasks at once, float64 (see the module docstring)."""

    Ws: torch.Tensor  # (n_s, I): the student's first-layer x-columns, shared by the tasks
    Wt: torch.Tensor  # (T, H, I): the teacher's W(z̃)ᵀ per task
    b0: torch.Tensor  # (T, n0): layer 0's biases per task, n0 = n_s + H
    d0: torch.Tensor  # (T, n0): a bound on their rounding (and the teacher's weights'), per unit
    hidden: list[tuple[torch.Tensor, torch.Tensor]]  # layers 1.. (W (n_j, n_{j−1}), b (n_j,))
    W_out: torch.Tensor  # (O, n_last)
    b_out: torch.Tensor  # (O,)

    @property
    def T(self) -> int:
        return self.Wt.shape[0]

    @property
    def I(self) -> int:  # noqa: E743
        return self.Ws.shape[1]

    @property
    def O(self) -> int:  # noqa: E743
        return self.W_out.shape[0]

    @property
    def widths(self) -> list[int]:
        return [self.b0.shape[1]] + [len(b) for _, b in self.hidden]

    @property
    def device(self):
        return self.Ws.device

    def root(self, task: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The tasks' whole input boxes: [-1, 1]^I each."""
        one = torch.ones(len(task), self.I, dtype=torch.float64, device=self.device)
        return -one, one

    def project(self, task: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """A point of the family for each input point: x itself (the task is fixed)."""
        return x

    def magnitude0(self) -> torch.Tensor:
        """Per layer-0 unit, a bound on |W₀x + b₀| + d₀ over every task and x ∈ [-1, 1]^I
        (not yet rounded up: bounds.py does)."""
        row = torch.cat([self.Ws.abs().sum(1).expand(self.T, -1), self.Wt.abs().sum(2)], dim=1)  # |W₀|·1
        return (row + self.b0.abs() + self.d0).max(0).values

    def first(self, task: torch.Tensor, lo=None, hi=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W₀ (B, n0, I), b₀ (B, n0), d₀ (B, n0)) of the tasks `task` (B,); the same on every box
        (lo, hi: unused here, a hull net's layer 0 depends on them)."""
        B = len(task)
        W0 = torch.cat([self.Ws.expand(B, *self.Ws.shape), self.Wt[task]], dim=1)
        return W0, self.b0[task], self.d0[task]

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The shared layers after layer 0, the output last."""
        return [*self.hidden, (self.W_out, self.b_out)]

    def to(self, device) -> DiffNet:
        move = lambda t: t.to(device)  # noqa: E731
        return DiffNet(
            move(self.Ws),
            move(self.Wt),
            move(self.b0),
            move(self.d0),
            [(move(W), move(b)) for W, b in self.hidden],
            move(self.W_out),
            move(self.b_out),
        )

    def forward(self, task: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """D at the points x (B, I) of the tasks `task` (B,), in float64: (B, O)."""
        W0, b0, _ = self.first(task)
        h = torch.relu(torch.einsum("bni,bi->bn", W0, x) + b0)
        for W, b in self.hidden:
            h = torch.relu(h @ W.T + b)
        return h @ self.W_out.T + self.b_out


def linear_layers(student: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """An MLP student's Linear layers as float64 (weight (out, in), bias), after checking that it is
    Linear, ReLU, …, Linear (ValueError otherwise: only MLP students are covered)."""
    mods = list(student.children()) if isinstance(student, torch.nn.Sequential) else []
    kinds = [type(m) for m in mods]
    want = [torch.nn.Linear, torch.nn.ReLU] * ((len(mods) - 1) // 2) + [torch.nn.Linear]
    if not mods or kinds != want:
        raise ValueError(
            "only MLP students (nn.Sequential of Linear and ReLU) can be certified, got "
            f"{type(student).__name__}"
        )
    return [
        (
            m.weight.detach().to(torch.float64).cpu(),
            (m.bias.detach() if m.bias is not None else torch.zeros(m.out_features)).to(torch.float64).cpu(),
        )
        for m in mods
        if isinstance(m, torch.nn.Linear)
    ]


def diff_net(student: torch.nn.Module, teacher, z: np.ndarray, encoded: np.ndarray) -> DiffNet:
    """The DiffNet of an MLP student on [e(z), x] against a single-layer hyperteacher, at the tasks
    z (T, M) whose encodings e(z) (T, E) are `encoded` (computed by the caller, as the student is
    fed them)."""
    if hasattr(teacher, "Ws"):
        raise ValueError("multi-layer teachers are not covered yet")
    layers = linear_layers(student)
    z = np.asarray(z, dtype=np.float64)
    e = torch.as_tensor(np.asarray(encoded, dtype=np.float64))
    E, I, H, K = e.shape[1], teacher.I, teacher.H, teacher.K
    (W1, b1), rest = layers[0], layers[1:]
    if not rest:
        raise ValueError("the student has no hidden layer")
    if W1.shape[1] != E + I:
        raise ValueError(f"the student reads {W1.shape[1]} inputs, the task gives E + I = {E} + {I}")
    if W1.shape[0] == 0 or layers[-1][0].shape[0] != teacher.O:
        raise ValueError(f"the student has {layers[-1][0].shape[0]} outputs, the teacher {teacher.O}")
    We, Ws = W1[:, :E], W1[:, E:].contiguous()
    zt = torch.as_tensor(z) / math.sqrt(K)
    W, b = torch.as_tensor(teacher.W), torch.as_tensor(teacher.b)  # (M, I, H), (M, H)
    Wt = torch.einsum("tm,mih->thi", zt, W)
    bt = zt @ b
    b0 = torch.cat([b1 + e @ We.T, bt], dim=1)
    # Rounding of the computed entries. Student: b₁ + Σ_e W₁ₑ e, E + 1 terms. Teacher: z̃ = z/√K is two
    # roundings (√K, the division), then Σ_m over M terms: relative error of z̃ ≤ 3u, so every entry
    # is off by ≤ γ_{M+4}·Σ_m |z_m/√K|·|W_m| (and b_m); a unit's pre-activation over |x_i| ≤ 1 by its
    # row's sum. Each margin is rounded up by a factor (1 + 2⁻⁴⁰) ≫ its own rounding.
    up = 1.0 + 2.0**-40
    d_s = gamma(E + 2) * (e.abs() @ We.abs().T + b1.abs()) * up
    zabs = torch.as_tensor(np.abs(z)) / math.sqrt(K)
    d_t = gamma(teacher.M + 4) * (torch.einsum("tm,mih->th", zabs, W.abs()) + zabs @ b.abs()) * up
    d0 = torch.cat([d_s, d_t], dim=1)
    hidden, W_out, b_out = stacked_layers(rest, teacher, H)
    return DiffNet(Ws, Wt, b0, d0, hidden, W_out, b_out)


def stacked_layers(rest, teacher, H: int):
    """The layers after the first of student − teacher as one network: each hidden layer of the
    student beside an identity that carries the teacher's H units (post-ReLU, so unchanged), and
    an output layer that subtracts the teacher's readout A. (hidden [(W, b)], W_out, b_out)."""
    hidden = []
    for W_j, b_j in rest[:-1]:
        n_out, n_in = W_j.shape
        block = torch.zeros(n_out + H, n_in + H, dtype=torch.float64)
        block[:n_out, :n_in], block[n_out:, n_in:] = W_j, torch.eye(H, dtype=torch.float64)
        hidden.append((block, torch.cat([b_j, torch.zeros(H, dtype=torch.float64)])))
    W_L, b_L = rest[-1]
    return hidden, torch.cat([W_L, -torch.as_tensor(teacher.A).T], dim=1), b_L.clone()
