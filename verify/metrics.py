"""Average-case metrics on a set of tasks, the same for trained networks and constructions.

- RMSE over tasks, samples and outputs.
- Compositional R², as in the paper: the mean over tasks t and outputs o of
  1 − MSE_{t,o} / Var_{t,o}, the variance taken over the task's own samples.
- Linear decodability: a ridge probe per hidden layer that predicts z from the layer's
  activations, fitted on a fixed number of rows from training tasks and scored by R² on
  the same number of rows from held-out tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from constructions.hyperteacher import Hyperteacher, dense_latents, sample_inputs, support_weights

# A (task, output) pair whose target barely varies over x (an output whose ReLUs are all
# off for that task, say) has no meaningful R²: 1 − MSE/Var would divide by ~0.
MIN_VARIANCE = 1e-12


@dataclass(frozen=True)
class TaskSamples:
    z: torch.Tensor  # (T, M)
    x: torch.Tensor  # (T, P, I)
    y: torch.Tensor  # (T, P, O), the teacher's outputs


def sample_tasks(teacher: Hyperteacher, supports: np.ndarray, samples_per_task: int,
                 rng: np.random.Generator) -> TaskSamples:
    z = dense_latents(supports, support_weights(supports, teacher.weights, rng), teacher.M)
    T, P = len(supports), samples_per_task
    x = torch.as_tensor(sample_inputs(T * P, teacher.I, rng))
    z_rows = torch.as_tensor(np.repeat(z, P, axis=0))
    with torch.no_grad():
        y = teacher.forward(z_rows, x)
    return TaskSamples(torch.as_tensor(z), x.view(T, P, -1), y.view(T, P, -1))


def network_inputs(samples: TaskSamples, encode) -> torch.Tensor:
    T, P, _ = samples.x.shape
    e = encode(samples.z)
    return torch.cat([e.repeat_interleave(P, dim=0), samples.x.reshape(T * P, -1)], dim=1)


def predict(f, samples: TaskSamples, encode, batch_rows: int = 8192) -> torch.Tensor:
    inputs = network_inputs(samples, encode)
    with torch.no_grad():
        out = torch.cat([f(inputs[s:s + batch_rows]) for s in range(0, len(inputs), batch_rows)])
    return out.view(samples.y.shape)


def rmse(pred: torch.Tensor, samples: TaskSamples) -> float:
    return float(((pred - samples.y) ** 2).mean().sqrt())


def compositional_r2(pred: torch.Tensor, samples: TaskSamples) -> tuple[float, float]:
    """(mean R² over (task, output) pairs with target variance, fraction of pairs used)."""
    mse = ((pred - samples.y) ** 2).mean(dim=1)
    var = samples.y.var(dim=1, unbiased=False)
    used = var > MIN_VARIANCE
    if not bool(used.any()):
        return float("nan"), 0.0
    return float((1 - mse[used] / var[used]).mean()), float(used.double().mean())


def hidden_activations(net: nn.Sequential, inputs: torch.Tensor) -> list[torch.Tensor]:
    """Outputs of every ReLU of a Linear/ReLU stack, in order."""
    acts, h = [], inputs
    with torch.no_grad():
        for layer in net:
            h = layer(h)
            if isinstance(layer, nn.ReLU):
                acts.append(h)
    return acts


def ridge_fit_predict(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                      alpha: float) -> torch.Tensor:
    """Ridge regression with an intercept, in whichever of the primal (features ≤ samples)
    or dual (kernel) form is smaller: a 177,000-unit layer is probed through an n × n
    system instead of a 177,000 × 177,000 one."""
    mu_x, mu_y = train_x.mean(0), train_y.mean(0)
    X, Y, Xt = train_x - mu_x, train_y - mu_y, test_x - mu_x
    n, d = X.shape
    scale = float(X.pow(2).sum() / n) or 1.0  # alpha relative to the features' size
    if d <= n:
        coef = torch.linalg.solve(X.T @ X + alpha * scale * n * torch.eye(d, dtype=X.dtype), X.T @ Y)
        return Xt @ coef + mu_y
    dual = torch.linalg.solve(X @ X.T + alpha * scale * n * torch.eye(n, dtype=X.dtype), Y)
    return (Xt @ X.T) @ dual + mu_y


def r2_score(pred: torch.Tensor, target: torch.Tensor) -> float:
    """1 − SSE/SST pooled over all coordinates of z."""
    sst = float(((target - target.mean(0)) ** 2).sum())
    return 1.0 - float(((pred - target) ** 2).sum()) / sst if sst > 0 else float("nan")


def probe_r2(net: nn.Sequential, train: TaskSamples, test: TaskSamples, encode,
             alpha: float = 1e-4, rows: int = 2000, seed: int = 0) -> list[float]:
    """Held-out R² of a ridge probe z ← hidden activations, one value per hidden layer.

    The probe sees the same number of rows however many tasks there are: `rows` (task,
    sample) pairs drawn uniformly from each side. One row per task would let the probe's
    own sample size grow with the number of training tasks, and its R² would then track
    the task count rather than the network. The rows carry different x for the same z, so
    a high score means z is readable whatever the input. `rows` also bounds the dual
    system's size.
    """
    rng = np.random.default_rng(seed)
    dtype = next(net.parameters()).dtype

    def probe_rows(samples: TaskSamples):
        T, P, _ = samples.x.shape
        pick = torch.as_tensor(rng.choice(T * P, size=min(rows, T * P), replace=False))
        t, s = pick // P, pick % P
        inputs = torch.cat([encode(samples.z[t]), samples.x[t, s]], dim=1)
        return hidden_activations(net, inputs.to(dtype)), samples.z[t]

    train_acts, train_z = probe_rows(train)
    test_acts, test_z = probe_rows(test)
    return [r2_score(ridge_fit_predict(a.double(), train_z, b.double(), alpha), test_z)
            for a, b in zip(train_acts, test_acts, strict=True)]
