"""Two controls that place a trained MLP between the kernel limit and feature learning:
the network linearised at its initialisation, and how far its NTK moves in training.

**The linearised network** (Lee et al. 2019): the first-order Taylor expansion of the
student in its parameters at init θ₀,
    f_lin(θ; x) = f(θ₀; x) + J_θ f(θ₀; x) (θ − θ₀),
a model linear in θ whose features, the Jacobian at init, never move. Trained by the same
optimiser and steps as the student (AdamW on θ, the paper's decay mask), it is the lazy
regime at finite width; as the width grows it approaches the NTK predictor (kernel_limit)
plus the init's own function f(θ₀). The directional derivative is propagated alongside the
forward pass at θ₀ (a forward-mode product, as torch.func.jvp computes it, written out for
the Linear/ReLU stack so that ordinary autograd trains θ through it):
    h = W₀ a + b₀,  ḣ = (W − W₀) a + W₀ ȧ + (b − b₀),  a' = φ(h),  ȧ' = φ'(h) ḣ.

**Kernel movement**: ‖Θ_T − Θ₀‖_F / ‖Θ₀‖_F, the relative change of the empirical NTK
(mean over the O outputs of each output's NTK, kernels.empirical_ntk) on fixed probe rows,
from init to the end of training. Near 0: the lazy regime; of order 1: the features moved.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from verify.learning import kernels


class Linearised(nn.Module):
    """The Linear/ReLU student `net` linearised at its current parameters (its init). Its
    parameters θ start at θ₀ and are the student's own (the same names and shapes, so the
    paper's decay mask applies as to the student); θ₀ is kept as buffers."""

    def __init__(self, net: nn.Sequential):
        super().__init__()
        if not all(isinstance(m, nn.Linear | nn.ReLU) for m in net):
            raise ValueError("Linearised takes an nn.Sequential of Linear and ReLU layers (an MLP student)")
        self.net = net
        self.init = copy.deepcopy(net).requires_grad_(False)  # θ₀: moves with .to(), never trains

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        a, tangent = rows, torch.zeros_like(rows)
        for now, at_init in zip(self.net, self.init, strict=True):
            if isinstance(now, nn.Linear):
                h = at_init(a)
                tangent = nn.functional.linear(a, now.weight - at_init.weight) + tangent @ at_init.weight.T
                if now.bias is not None:
                    tangent = tangent + (now.bias - at_init.bias)
                a = h
            else:  # ReLU: the derivative at init gates the tangent
                tangent = tangent * (a > 0).to(tangent.dtype)
                a = torch.relu(a)
        return a + tangent


def output_ntk(net: nn.Sequential, rows: torch.Tensor) -> torch.Tensor:
    """The empirical NTK of an MLP with O outputs on `rows`, averaged over its outputs:
    (1/O) Σ_o Θ_o(X, X), each output's exact NTK (kernels.empirical_ntk), float64."""
    net = copy.deepcopy(net).double()
    head = net[-1]
    total = torch.zeros(len(rows), len(rows), dtype=torch.float64)
    for o in range(head.out_features):
        one = nn.Linear(head.in_features, 1, bias=head.bias is not None).double()
        with torch.no_grad():
            one.weight.copy_(head.weight[o:o + 1])
            if head.bias is not None:
                one.bias.copy_(head.bias[o:o + 1])
        theta, _ = kernels.empirical_ntk(nn.Sequential(*net[:-1], one), rows)
        total += theta
    return total / head.out_features


def kernel_movement(before: nn.Sequential, after: nn.Sequential, rows: torch.Tensor) -> float:
    """‖Θ_after − Θ_before‖_F / ‖Θ_before‖_F on `rows` (output_ntk of each)."""
    theta0, theta1 = output_ntk(before, rows), output_ntk(after, rows)
    return float(torch.linalg.matrix_norm(theta1 - theta0) / torch.linalg.matrix_norm(theta0))
