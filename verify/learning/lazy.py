"""The lazy-to-rich axis (issue 45; Chizat, Oyallon and Bach 2019, "On lazy training in
differentiable programming"): one width, trained as the centred, scaled model

    f_α(θ; x) = α · (f(θ; x) − f(θ₀; x)),

which is 0 at init for every α. For gradient descent on the loss of f_α at learning rate η/α²,
the parameters move O(1/α) while the function moves O(1): as α grows the training follows the
tangent kernel at init (lazy, the linearised network's regime), as α shrinks the features must
move (rich).

The students train with AdamW, not gradient descent. Adam divides each gradient by its own
running scale, so a gradient α times larger makes the same parameter step: the η/α² of gradient
descent would move the parameters O(1/α²) and the function O(1/α), and a large α would freeze
it rather than make it lazy. What keeps the function's step α-free under Adam is η/α (its
first step is exactly −η/α · sign(g) per parameter, so f_α moves by −η · J sign(g) at every
α): `learning_rate` gives that, and a test holds the first step's change of f_α the same
across α. AdamW's decay pulls θ towards 0, not θ₀, and would move f_α by O(η·λ) a step at any
α, so the axis is trained without decay unless one is asked for.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class Centred(nn.Module):
    """α · (net − net at init): `net`'s parameters train, a frozen copy holds θ₀ (it moves with
    .to() and never trains). The paper's decay mask reads `net`'s own parameter names."""

    def __init__(self, net: nn.Module, alpha: float):
        super().__init__()
        if not (alpha > 0 and alpha < float("inf")):
            raise ValueError(f"alpha must be a positive finite number, got {alpha}")
        self.net, self.alpha = net, float(alpha)
        self.init = copy.deepcopy(net).requires_grad_(False)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            at_init = self.init(rows)
        return self.alpha * (self.net(rows) - at_init)


def learning_rate(lr: float, alpha: float) -> float:
    """AdamW's learning rate for f_α: lr / α, the step that moves f_α as far at every α (module
    docstring; gradient descent's would be lr / α²)."""
    return lr / alpha


def parameter_movement(model: Centred) -> float:
    """‖θ − θ₀‖ / ‖θ₀‖ over every parameter: O(1/α) in the lazy regime."""
    now = torch.cat([p.detach().flatten().double() for p in model.net.parameters()])
    start = torch.cat([p.detach().flatten().double() for p in model.init.parameters()])
    return float(torch.linalg.vector_norm(now - start) / torch.linalg.vector_norm(start))
