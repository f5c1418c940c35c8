"""Multi-layer hyperteachers (spec §1, extension): h⁰ = x ∈ [-1,1]^I; h^l = ReLU(h^{l-1}·W^l(z̃) +
b^l(z̃)) for l = 1..L, W^l(z̃) = Σ_m z̃_m W^l_m with modules of fan-in H_{l-1}, b^l_m ~ U[0, 0.5);
g = h^L·A. With L = 1 it is exactly `sample_hyperteacher`'s teacher (same seed, same arrays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from constructions.tasks.hyperteacher import (
    HyperteacherConfig,
    TeacherBase,
    sample_hyperteacher,
    truncated_normal,
)


@dataclass(frozen=True, kw_only=True)
class MultiLayerHyperteacher(TeacherBase):
    """g(x, z) = h^L·A with h^l = ReLU(h^{l-1}·W^l(z̃) + b^l(z̃)), h⁰ = x. Arrays are float64 numpy."""

    Ws: tuple  # L arrays (M, H_{l-1}, H)
    bs: tuple  # L arrays (M, H)

    def _layer_weights(self) -> tuple[np.ndarray, ...]:
        return self.Ws

    def _forward_arrays(self) -> dict:
        return dict(Ws=self.Ws, bs=self.bs, A=self.A)

    @property
    def L(self) -> int:
        return len(self.Ws)

    @property
    def W(self) -> np.ndarray:
        """Hyperteacher's W, so single-layer constructions accept an L = 1 teacher (and only that)."""
        if self.L != 1:
            raise AttributeError(f"a {self.L}-layer teacher has no single W; use Ws (build_multilayer)")
        return self.Ws[0]

    @property
    def b(self) -> np.ndarray:
        if self.L != 1:
            raise AttributeError(f"a {self.L}-layer teacher has no single b; use bs (build_multilayer)")
        return self.bs[0]

    @property
    def sizes(self) -> tuple[int, ...]:
        """(H_0 = I, H_1, ..., H_L)."""
        return (self.I,) + tuple(W.shape[2] for W in self.Ws)

    def activations(self, z: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        """[h¹, ..., h^L] for rows of z (B, M) and x (B, I), on x's device and in its dtype."""
        arrays = self.tensors(x)  # the arrays, kept where x lives
        z_tilde = z / math.sqrt(self.K)
        h, out = x, []
        for W, b in zip(arrays["Ws"], arrays["bs"], strict=True):
            W_z = (z_tilde @ W.reshape(self.M, -1)).reshape(-1, W.shape[1], W.shape[2])
            h = torch.relu(torch.einsum("bi,bih->bh", h, W_z) + z_tilde @ b)
            out.append(h)
        return out

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """g(x, z), on x's device and in its dtype; differentiable in both."""
        return self.activations(z, x)[-1] @ self.tensors(x)["A"]

    def save_npz(self, path) -> None:
        layers = {}
        for l, (W, b) in enumerate(zip(self.Ws, self.bs, strict=True), start=1):
            layers[f"W{l}"], layers[f"b{l}"] = W, b
        self._save_npz(path, after_K=dict(L=np.int64(self.L)), last=layers)

    @classmethod
    def load_npz(cls, path) -> MultiLayerHyperteacher:
        with np.load(path) as f:
            L = int(f["L"])
            return cls(Ws=tuple(f[f"W{l}"] for l in range(1, L + 1)),
                       bs=tuple(f[f"b{l}"] for l in range(1, L + 1)), **cls._loaded_fields(f))


def sample_multilayer_hyperteacher(cfg: HyperteacherConfig, L: int) -> MultiLayerHyperteacher:
    """Layer 1, A and Q are `sample_hyperteacher(cfg)`'s arrays (so L = 1 is that teacher).

    Layers l ≥ 2 draw W^l, b^l from children 4 + 2(l−2) and 5 + 2(l−2) of SeedSequence(cfg.seed):
    spawn(n) numbers its children 0..n−1 the same way for every n, so the first four are the
    single-layer teacher's streams and layer l's arrays do not depend on L.
    """
    if not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"L (layers) must be a positive integer, got {L!r}")
    base = sample_hyperteacher(cfg)
    children = np.random.SeedSequence(cfg.seed).spawn(4 + 2 * (L - 1))[4:]
    Ws, bs = [base.W], [base.b]
    for l in range(L - 1):
        rng_W, rng_b = (np.random.default_rng(s) for s in children[2 * l: 2 * l + 2])
        Ws.append(truncated_normal(rng_W, (cfg.M, cfg.H, cfg.H), fan_in=cfg.H))
        bs.append(rng_b.uniform(0.0, 0.5, size=(cfg.M, cfg.H)))
    return MultiLayerHyperteacher(Ws=tuple(Ws), bs=tuple(bs), A=base.A, K=cfg.K, weights=cfg.weights,
                                  encoding=cfg.encoding, Q=base.Q)
