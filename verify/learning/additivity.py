"""Conjunction-wise additivity of a model's outputs over tasks (Lippl and Stachenfeld, ICLR
2025; issue 45): how much of what a model does on a task is a sum of effects of the
conjunctions of components it saw in training.

For the hyperteacher a task's components are its active modules. The score is read on the
level tasks at weight 1 (every support, each active module at 1.0, one of the discrete levels
the students train on): one task per support, so the task space is finite, as in the source
paper's discrete tasks. The model's outputs on fixed probe inputs x_1 … x_J are regressed, by
least squares over every support (training and held-out), on an intercept and the indicators
of the module sets of size 1 … K that some training support contains: a held-out support has
only its seen parts. The score of a side is the R² of that fit on its supports, averaged over
the J·O output columns (scikit-learn's `uniform_average`, what their code reports), and is
not given (NaN) where the fit has no residual degree of freedom: then every model fits exactly
(M = 5, K = 2: 15 supports, 15 independent columns). A model
whose output on a held-out support is a sum of effects of seen conjunctions scores 1 there; a
kernel with fixed features is near that (their result), a model that composes by an
interaction of its own lower.

Their definition (`analysis/additivity_analysis.py` in sflippl/compositional-generalization)
fits a near-zero ridge (α = 1e-10); here the minimum-norm least squares, its limit.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

PROBE_POINTS = 16  # x per support: J, the probe inputs every support is read at
LEVEL = 1.0  # the weight of every active module in the level tasks


def seen_conjunctions(train_supports: np.ndarray) -> list[frozenset[int]]:
    """Every non-empty module set contained in some training support (supports padded with −1),
    sorted by size, then modules."""
    seen: set[frozenset[int]] = set()
    for row in train_supports:
        modules = [int(m) for m in row if m >= 0]
        for k in range(1, len(modules) + 1):
            seen.update(frozenset(c) for c in itertools.combinations(modules, k))
    return sorted(seen, key=lambda c: (len(c), sorted(c)))


def features(supports: np.ndarray, conjunctions: list[frozenset[int]]) -> np.ndarray:
    """(S, 1 + C): an intercept and, per conjunction, whether the support contains it."""
    sets = [frozenset(int(m) for m in row if m >= 0) for row in supports]
    phi = np.array([[c <= s for c in conjunctions] for s in sets], dtype=np.float64)
    return np.hstack([np.ones((len(sets), 1)), phi.reshape(len(sets), len(conjunctions))])


def level_latents(supports: np.ndarray, M: int) -> torch.Tensor:
    """z (S, M) of the level tasks: each active module at LEVEL."""
    z = np.zeros((len(supports), M))
    for i, row in enumerate(supports):
        z[i, row[row >= 0]] = LEVEL
    return torch.from_numpy(z)


def score(outputs: np.ndarray, train_supports: np.ndarray, held_out_supports: np.ndarray) -> dict:
    """{'train': R², 'held_out': R², 'conjunctions': C} of `outputs` (S_train + S_held, D), the
    rows in that order, regressed on the seen conjunctions (module docstring)."""
    conjunctions = seen_conjunctions(train_supports)
    supports = np.concatenate([train_supports, held_out_supports])
    phi = features(supports, conjunctions)
    y = np.asarray(outputs, dtype=np.float64)
    coef, _, rank, _ = np.linalg.lstsq(phi, y, rcond=None)
    fitted = phi @ coef
    n_train = len(train_supports)
    sides = {"train": slice(0, n_train), "held_out": slice(n_train, len(supports))}
    # With no residual degree of freedom the fit is exact whatever the model: no score.
    scores = {side: _r2(y[rows], fitted[rows]) if rank < len(supports) else float("nan")
              for side, rows in sides.items()}
    return scores | {"conjunctions": len(conjunctions), "residual_dof": int(len(supports) - rank)}


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    """Mean over the columns with variance of 1 − SS_res / SS_tot (NaN where none has any)."""
    total = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
    used = total > 1e-12 * max(1.0, float(np.abs(y).max()) ** 2) * len(y)
    if not used.any():
        return float("nan")
    residual = ((y - fitted) ** 2).sum(axis=0)
    return float(np.mean(1.0 - residual[used] / total[used]))


def of_model(predictor, family, split, seed: int, points: int = PROBE_POINTS) -> dict:
    """The additivity score of a model (a callable on rows [e(z), x], as the family scores it)
    on the split's level tasks, at `points` probe inputs drawn uniformly on [−1, 1]^I by
    `seed`."""
    from verify.learning.metrics import predict_tasks

    supports = np.concatenate([split.train, split.test])
    z = level_latents(supports, split.M)
    rng = np.random.default_rng([seed, 45])  # its own stream: the run's draws stay as they were
    x = torch.from_numpy(rng.uniform(-1.0, 1.0, size=(1, points, family.I))).expand(len(supports), -1, -1)
    e = family.encode(z).to(torch.float64)
    outputs = predict_tasks(predictor, e, x.contiguous()).reshape(len(supports), -1).double().numpy()
    return score(outputs, split.train, split.test) | {"probe_points": points}
