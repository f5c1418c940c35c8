"""Tasks drawn on the training device (a family's batches) and for scoring: the supports a
batch's tasks use, their weights as the family's scheme draws them, and the encoder run where
z lives. Shared by the families that draw tasks from the hyperteacher's supports and
weights (hyperteacher, preference grid)."""

from __future__ import annotations

import numpy as np
import torch

from constructions.tasks.hyperteacher import DISCRETE_LEVELS, dense_latents, support_weights


class TaskDraw:
    """Tasks drawn on the training device from one generator: supports uniformly (with
    replacement) from the training ones, then their weights as the family's scheme draws
    them (support_weights, in torch), scattered into dense z (T, M) in float64."""

    def __init__(self, supports: np.ndarray, M: int, weights: str, generator: torch.Generator,
                 device: torch.device):
        self.M, self.scheme, self.generator, self.device = M, weights, generator, device
        # Copies: the arrays may be read-only (loaded from a file), and they move to the device.
        self.supports = torch.tensor(np.asarray(supports), dtype=torch.int64, device=device)
        self.levels = torch.tensor(DISCRETE_LEVELS, dtype=torch.float64, device=device)

    def weights(self, active: torch.Tensor) -> torch.Tensor:
        """Weights of the active entries (0 on padding), as support_weights draws them."""
        shape, g = active.shape, self.generator
        if self.scheme == "khot":
            w = torch.ones(shape, dtype=torch.float64, device=self.device)
        elif self.scheme == "discrete":
            w = self.levels[torch.randint(len(self.levels), shape, generator=g, device=self.device)]
        else:  # continuous: the official uniform-simplex draw, shifted into [0.5, 1]
            u = torch.rand(shape, generator=g, dtype=torch.float64, device=self.device)
            e = -torch.log1p(-u) * active
            w = 0.5 * e / (e.sum(dim=1, keepdim=True) + 1.0) + 0.5
        return w * active

    def __call__(self, T: int) -> torch.Tensor:
        rows = self.supports[torch.randint(len(self.supports), (T,), generator=self.generator,
                                           device=self.device)]
        active = rows >= 0
        # scatter_add: padding (−1 → column 0, weight 0) must not overwrite a real module 0.
        return torch.zeros(T, self.M, dtype=torch.float64, device=self.device).scatter_add_(
            1, rows.clamp(min=0), self.weights(active))


def encode_on(encode, z: torch.Tensor) -> torch.Tensor:
    """e(z) where z lives: every encoder runs on z's device (constructions.tasks.encodings),
    so nothing crosses to the host; `identity` needs no call at all."""
    if getattr(encode, "name", None) == "identity":
        return z
    return encode(z)


def eval_latents(supports: np.ndarray, n_tasks: int, weights: str, M: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(drawn supports, dense z) of n_tasks tasks whose supports are drawn uniformly, with
    replacement, from `supports` (jax.random.choice in the official reset_goal), each with
    its own weights."""
    drawn = supports[rng.integers(0, len(supports), n_tasks)]
    return drawn, dense_latents(drawn, support_weights(drawn, weights, rng), M)
