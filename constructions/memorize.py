"""The memorization baseline: a ReLU MLP that stores every task of a `khot` hyperteacher
separately, the non-compositional solution the paper contrasts with its O(1/√ε + M) one.

One hidden layer, H units per support S (1 ≤ |S| ≤ K):

    unit_{S,h} = ReLU(x·W_S[:, h] + b_S[h] − B·P_S(z)),  W_S = Σ_{m∈S} W_m/√K, b_S likewise,
    P_S(z)     = |S| − Σ_{m∈S} z_m + Σ_{m∉S} z_m        (affine in z, so one Linear holds it),
    out_o      = Σ_S Σ_h A[h, o]·unit_{S,h}.

For binary z, P_S(z) = |S Δ supp(z)|: 0 when z = 1_S, at least 1 otherwise. B bounds
|x·W_S[:, h] + b_S[h]| on X = [-1, 1]^I, so every other task's units are switched off and
the network equals the teacher exactly (up to float64 rounding). At z = 0 every gate is
closed and both are 0. The width is H·Σ_{k≤K} C(M, k) ~ H·M^K/K!.

Where it stops being exact:
- It needs a `khot` teacher (z = 1_S) with K ≤ M, as `HyperteacherConfig` enforces. For
  `discrete` and `continuous` weights z = v·1_S with v_m < 1, P_S(z) = Σ_{m∈S}(1 − v_m) is
  fractional: the task's own gate is partly closed, and gates of neighbouring supports
  (P < 1 there too) leak. Even a perfect gate would not help, since W_S stores the
  weight-1 combination, not the v-weighted one; the continuum of such tasks cannot be
  stored one by one. Other weight schemes are not refused: tests/test_memorize.py measures
  the resulting error.
- Off the box (|x_i| > 1) B may be too small and gates can leak.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from constructions.base import BYTES_PER_FLOAT64
from constructions.tasks.hyperteacher import Hyperteacher, dense_latents, enumerate_supports
from theory.bounds import memorization_hidden_units

GiB = 2**30


def memorizer_bytes(M: int, K: int, I: int, H: int, O: int) -> int:
    """Dense float64 parameter memory of the memorizer, from the sizes alone."""
    n1 = memorization_hidden_units(M, K, H)
    return (n1 * (M + I + 1) + O * (n1 + 1)) * BYTES_PER_FLOAT64


def support_modules(teacher: Hyperteacher) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(1_S, W_S, b_S) for every support: (S, M), (S, I, H), (S, H)."""
    M, I, H = teacher.M, teacher.I, teacher.H
    supports = enumerate_supports(M, teacher.K)
    indicators = dense_latents(supports, np.ones(supports.shape), M)
    root_K = math.sqrt(teacher.K)
    W_S = (indicators @ teacher.W.reshape(M, I * H) / root_K).reshape(-1, I, H)
    b_S = indicators @ teacher.b / root_K
    return indicators, W_S, b_S


def gate_bound(W_S: np.ndarray, b_S: np.ndarray) -> float:
    """max over S, h of Σ_i |W_S[i, h]| + |b_S[h]|: the largest |pre-activation| on X."""
    return float((np.abs(W_S).sum(axis=1) + np.abs(b_S)).max())


def build_memorizer(teacher: Hyperteacher, max_bytes: int = 2 * GiB,
                    B: float | None = None) -> nn.Sequential:
    """Linear(M + I, H·n_tasks), ReLU, Linear(H·n_tasks, O) on inputs [e(z), x], float64.

    Hidden units are ordered (support as in `enumerate_supports`, h). Raises ValueError
    before allocating anything if the parameters would exceed `max_bytes`; for large M
    use `memorizer_bytes` / `theory.bounds.memorization_hidden_units` instead. Building
    needs about twice that memory at its peak. `B` overrides the gate constant (tests use
    a too-small one to show that the gates then leak).
    """
    M, I, H, O = teacher.M, teacher.I, teacher.H, teacher.O
    needed = memorizer_bytes(M, teacher.K, I, H, O)
    if needed > max_bytes:
        raise ValueError(
            f"the memorizer for M={M}, K={teacher.K}, I={I}, H={H}, O={O} has "
            f"{memorization_hidden_units(M, teacher.K, H):,} hidden units and would need "
            f"{needed / GiB:.2f} GiB of parameters (max_bytes allows {max_bytes / GiB:.2f} GiB)")

    indicators, W_S, b_S = support_modules(teacher)
    n_S = len(indicators)
    B = gate_bound(W_S, b_S) if B is None else float(B)

    # −B·P_S(z) = −B|S| + B·Σ_m (2·[m∈S] − 1)·z_m, the same for each of the task's H units.
    w1_z = np.repeat(B * (2.0 * indicators - 1.0), H, axis=0)
    if teacher.Q is not None:
        w1_z = w1_z @ teacher.Q.T  # acts on e = zQᵀ as the old rows acted on z
    w1_x = W_S.transpose(0, 2, 1).reshape(n_S * H, I)
    b1 = (b_S - B * indicators.sum(axis=1, keepdims=True)).reshape(-1)
    w2 = np.tile(teacher.A.T, (1, n_S))  # every task reads out through the same A

    net = nn.Sequential(nn.utils.skip_init(nn.Linear, M + I, n_S * H, dtype=torch.float64),
                        nn.ReLU(),
                        nn.utils.skip_init(nn.Linear, n_S * H, O, dtype=torch.float64))
    weights = [(np.concatenate([w1_z, w1_x], axis=1), b1), (w2, np.zeros(O))]
    del w1_z, w1_x
    for linear, (w, b) in zip(net[::2], weights, strict=True):
        # from_numpy shares the arrays, so the network costs no second copy.
        linear.weight = nn.Parameter(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float64)))
        linear.bias = nn.Parameter(torch.from_numpy(np.ascontiguousarray(b, dtype=np.float64)))
    return net
