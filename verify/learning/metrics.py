"""Average-case metrics on a set of tasks, the same for trained networks and constructions.

- RMSE over tasks, samples and outputs.
- Compositional R²: the mean over tasks t and outputs o of 1 − MSE_{t,o} / Var_{t,o}, the
  variance taken over the task's own samples. `compositional_r2_paper` is the official
  code's estimator (every pair counts); `compositional_r2` is this project's, which skips
  pairs whose target does not vary.
- Linear decodability: `probe_r2` is the official code's probe (one row per task, ridge
  with λ = 1, mean per-dimension R², on the encoding, each layer before its ReLU and the
  output); `probe_r2_pooled` is this project's earlier probe, not the paper's.

The official code is github.com/smonsays/scale-compositionality; where a definition here
follows it, the comment names the file and function it was read from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from constructions.tasks.hyperteacher import Hyperteacher, dense_latents, sample_inputs, support_weights

# A (task, output) pair whose target barely varies over x (an output whose ReLUs are all
# off for that task, say) has no meaningful R²: 1 − MSE/Var would divide by ~0.
MIN_VARIANCE = 1e-12

# The paper's evaluation sizes (configs/teacher.py and compscale/callbacks.py).
PAPER_SAMPLES_PER_TASK = 16  # HyperTeacherConfig.num_samples: every task, train or eval, has 16
PAPER_HELD_OUT_TASKS = 1024  # DatasetConfig.num_ood (and num_test)
PAPER_PROBE_FIT_TASKS = 512  # ExtendedActivationProbing fits on the first half of the 1,024 'test' tasks
PAPER_PROBE_L2 = 1.0  # CallbackConfig.l2_reg


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


def sample_eval_tasks(teacher: Hyperteacher, supports: np.ndarray, n_tasks: int, samples_per_task: int,
                      rng: np.random.Generator) -> TaskSamples:
    """The paper's evaluation set: n_tasks tasks whose supports are drawn uniformly, with
    replacement, from `supports` (jax.random.choice in compscale/data/teacher.py), each with
    its own weights and samples_per_task fresh x."""
    return sample_tasks(teacher, supports[rng.integers(0, len(supports), n_tasks)], samples_per_task, rng)


def random_supports(M: int, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n supports of exactly k distinct modules, uniform (the official 'ood_k' tasks for
    k above K), as rows of module indices: (n, k)."""
    return np.sort(np.argsort(rng.random((n, M)), axis=1)[:, :k], axis=1)


def encoding_dim(encode, M: int) -> int:
    """Size of e(z): a TaskEncoder's own `dim` (asking a stochastic encoder would use up
    one of its draws), else measured on z = 0."""
    dim = getattr(encode, "dim", None)
    return int(dim) if dim is not None else int(encode(torch.zeros(1, M, dtype=torch.float64)).shape[1])


def apply_tasks(f, e: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Predictions (T, P, O) for encodings e (T, E) and samples x (T, P, I): a student's own
    forward_tasks where it has one (a transformer reads a task's samples as one sequence),
    else f on the rows [e(z), x] (an MLP, a construction)."""
    if hasattr(f, "forward_tasks"):
        return f.forward_tasks(e, x)
    T, P, _ = x.shape
    return f(torch.cat([e.repeat_interleave(P, dim=0), x.reshape(T * P, -1)], dim=1)).view(T, P, -1)


class OnDevice(nn.Module):
    """A trained student scored where it trained: inputs (float64, on the host) go to
    `device` in `dtype` (float32: the forward passes, the expensive part of scoring a large
    student, run on the accelerator), predictions come back as float64 on the host, where R²,
    RMSE and accuracy are computed. float32's rounding (2^-24 of a value) moves an R² by far
    less than the 1e-4 that separates runs (tests/test_training_loop.py measures it); the sup
    measurer, which certifies, keeps the float64 network."""

    def __init__(self, student: nn.Module, device, dtype=torch.float32):
        super().__init__()
        self.student, self.device, self.dtype = student.to(device, dtype), torch.device(device), dtype

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.student(rows.to(self.device, self.dtype)).to("cpu", torch.float64)


class OnDeviceTasks(OnDevice):
    """OnDevice for a student that reads a task's samples together (forward_tasks)."""

    def forward_tasks(self, e: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.student.forward_tasks(e.to(self.device, self.dtype), x.to(self.device, self.dtype)) \
                .to("cpu", torch.float64)


def on_device(student: nn.Module, device, dtype=torch.float32) -> OnDevice:
    """A copy of `student` that OnDevice scores on `device` in `dtype`."""
    import copy

    cls = OnDeviceTasks if hasattr(student, "forward_tasks") else OnDevice
    return cls(copy.deepcopy(student), device, dtype)


class SequenceRows(nn.Module):
    """A student that reads a task's samples as one sequence, as a function of rows
    [e (E), x_1 … x_P (P·I)] -> its P predictions (P·O): the function its R² scores, so
    that the sup error can score the same one (see sup_error)."""

    def __init__(self, student: nn.Module, P: int):
        super().__init__()
        self.student, self.P = student, P

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        E = self.student.E
        x = rows[:, E:].reshape(len(rows), self.P, -1)
        return self.student.forward_tasks(rows[:, :E], x).reshape(len(rows), -1)


class SequenceTeacher:
    """The teacher on the same rows: g(x_j, z) for each of P inputs x (P·I) of one task z,
    so the sup error's max over outputs is a max over every position and output. Every
    other attribute (M, K, weights, encode, …) is the teacher's own."""

    def __init__(self, teacher: Hyperteacher, P: int):
        self.teacher, self.P = teacher, P

    def __getattr__(self, name):
        return getattr(self.teacher, name)

    @property
    def I(self) -> int:  # noqa: E743 (the paper's name)
        return self.P * self.teacher.I

    @property
    def O(self) -> int:  # noqa: E743
        return self.P * self.teacher.O

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        rows = len(x)
        out = self.teacher.forward(z.repeat_interleave(self.P, dim=0), x.reshape(rows * self.P, -1))
        return out.reshape(rows, -1)


def reads_sequence(f) -> bool:
    """Whether a prediction of f depends on the task's other samples (a causal transformer
    reads x_1 … x_j for its j-th): then f is not a function of one (z, x) pair."""
    return bool(getattr(f, "reads_sequence", False))


def sup_error(f, teacher: Hyperteacher, encode, supports: np.ndarray, samples_per_task: int, seed: int,
              budget, **measure):
    """verify.measure's sup error of f over the supports, scoring the function the R²
    scores: for a student that reads a task's samples as one sequence, the largest error of
    any of its samples_per_task predictions, over the sequences of that many x (the search
    then moves every x_j); for any other network, ‖f(e(z), x) − g(x, z)‖_∞ at single points."""
    from verify.theorem.measure import measure_sup_error

    if reads_sequence(f):
        f, teacher = SequenceRows(f, samples_per_task), SequenceTeacher(teacher, samples_per_task)
    return measure_sup_error(f, teacher, encode=encode, supports=supports, seed=seed, progress=False,
                             budget=budget, **measure)


def predict_tasks(f, e: torch.Tensor, x: torch.Tensor, batch_rows: int = 8192) -> torch.Tensor:
    """f's predictions (T, P, O) for encodings e (T, E) and samples x (T, P, I), a few
    thousand rows at a time (the whole evaluation set at once would not fit a GPU)."""
    T, P, _ = x.shape
    step = max(1, batch_rows // P)
    with torch.no_grad():
        return torch.cat([apply_tasks(f, e[s:s + step], x[s:s + step]) for s in range(0, T, step)])


def predict(f, samples: TaskSamples, encode, batch_rows: int = 8192) -> torch.Tensor:
    with torch.no_grad():
        return predict_tasks(f, encode(samples.z), samples.x, batch_rows)


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


def compositional_r2_paper(pred: torch.Tensor, samples: TaskSamples) -> float:
    """The official R² (compscale/loss.py, MeanSquaredError, with base_mse from
    compscale/data/teacher.py): each squared error divided by its (task, output)'s variance
    over the task's own samples (ddof 0), averaged over tasks, samples and outputs, which is
    the mean over (task, output) pairs of 1 − MSE/Var. Every pair counts: a pair whose target
    is constant gives inf or nan here, as it would there."""
    mse = ((pred - samples.y) ** 2).mean(dim=1)
    var = samples.y.var(dim=1, unbiased=False)
    return float((1 - mse / var).mean())


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


def probe_r2_pooled(net: nn.Sequential, train: TaskSamples, test: TaskSamples, encode,
                    alpha: float = 1e-4, rows: int = 2000, seed: int = 0) -> list[float]:
    """This project's probe, not the paper's (that is `probe_r2`): held-out pooled R² of a
    ridge probe z ← post-ReLU activations, one value per hidden layer.

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


def probe_features(net: nn.Module, encoding: torch.Tensor,
                   x: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """What the official probe reads, for tasks with encodings (T, E) and samples x (T, P, I),
    one row per task, at its last sample. For an MLP: the encoding itself ("encoding"), then
    every Linear's output ("layer1", "layer2", … before their ReLUs, and "output"). Flax
    records each Dense module's output and a ReLU is no module, so the paper probes
    pre-activations (compscale/model/policy.py, MultilayerPerceptronPolicy; callbacks.py
    adds "z_layer"). A student with its own probe_features (the transformer: each block's
    residual stream at the sequence's last token) gives its own."""
    if hasattr(net, "probe_features"):
        return net.probe_features(encoding, x)
    x = x[:, -1]
    linears = [i for i, layer in enumerate(net) if isinstance(layer, nn.Linear)]
    feats, h = [("encoding", encoding)], torch.cat([encoding, x], dim=1)
    with torch.no_grad():
        for i, layer in enumerate(net):
            h = layer(h)
            if isinstance(layer, nn.Linear):
                name = "output" if i == linears[-1] else f"layer{linears.index(i) + 1}"
                feats.append((name, h))
    return feats


def ridge_fit_predict_paper(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                            l2_reg: float = PAPER_PROBE_L2) -> torch.Tensor:
    """The official ridge (compscale/model/regression.py, RidgeRegression): minimise
    |A w − y|² + l2_reg |w|² with A = [X, c], nothing centred, the intercept penalised too.
    The fit's intercept column c is 1 only on rows whose features are all nonzero (the code
    meant it as a padding mask), so on a sparse encoding the intercept is mostly absent;
    prediction always adds it. The official code solves by 10 steps of conjugate gradients
    from 0; this solves exactly, in the primal or the dual form, whichever is smaller."""
    mask = (train_x != 0).all(dim=1, keepdim=True).to(train_x.dtype)
    A = torch.cat([train_x, mask], dim=1)
    At = torch.cat([test_x, torch.ones(len(test_x), 1, dtype=test_x.dtype)], dim=1)
    n, d = A.shape
    if d <= n:
        w = torch.linalg.solve(A.T @ A + l2_reg * torch.eye(d, dtype=A.dtype), A.T @ train_y)
        return At @ w
    return (At @ A.T) @ torch.linalg.solve(A @ A.T + l2_reg * torch.eye(n, dtype=A.dtype), train_y)


def mean_dimension_r2(pred: torch.Tensor, target: torch.Tensor) -> float:
    """R² of each coordinate of z on its own (1 − SSE/SST, RidgeRegression.score), then the
    mean over coordinates (ExtendedActivationProbing). Unlike a pooled R², a coordinate that
    varies little weighs as much as one that varies a lot.

    A coordinate that is constant on the scored tasks (a module absent from every held-out
    support, say) has SST = 0 and no R²; the official score would be −inf or NaN there and
    poison the mean. It is left out of the mean here (this project's choice); NaN when no
    coordinate varies."""
    sse = ((pred - target) ** 2).sum(0)
    sst = ((target - target.mean(0)) ** 2).sum(0)
    varies = sst > 0
    if not bool(varies.any()):
        return math.nan
    return float((1 - sse[varies] / sst[varies]).mean())


def probe_r2(net: nn.Module, fit: TaskSamples, test: TaskSamples, encode,
             fit_tasks: int = PAPER_PROBE_FIT_TASKS, test_tasks: int = PAPER_HELD_OUT_TASKS,
             l2_reg: float = PAPER_PROBE_L2) -> list[tuple[str, float]]:
    """The paper's probe (compscale/callbacks.py, ExtendedActivationProbing): a ridge
    z ← features fitted on the first `fit_tasks` tasks of `fit` and scored on the first
    `test_tasks` of `test`, one row per task (its last sample, as the callback takes the last
    of each task's 16), by the mean per-dimension R². Returns (feature name, R²) for the
    encoding, each hidden layer before its ReLU, and the output (see probe_features)."""
    dtype = next(net.parameters()).dtype
    fit_z, test_z = fit.z[:fit_tasks], test.z[:test_tasks]
    fit_e = encode(fit_z).to(dtype)
    test_e = encode(test_z).to(dtype)
    return probe_r2_rows(net, fit_z, fit_e, fit.x[:fit_tasks], test_z, test_e, test.x[:test_tasks],
                         fit_tasks, test_tasks, l2_reg)


def probe_r2_rows(net: nn.Module, fit_z: torch.Tensor, fit_e: torch.Tensor, fit_x: torch.Tensor,
                  test_z: torch.Tensor, test_e: torch.Tensor, test_x: torch.Tensor,
                  fit_tasks: int = PAPER_PROBE_FIT_TASKS, test_tasks: int = PAPER_HELD_OUT_TASKS,
                  l2_reg: float = PAPER_PROBE_L2) -> list[tuple[str, float]]:
    """probe_r2 on tasks given as (z, e(z), rows x (T, P, I)): any family's, the preference
    grid's episodes included (the probe reads each task's last row, its last observation)."""
    dtype = next(net.parameters()).dtype

    def rows(z, e, x, n):
        return probe_features(net, e[:n].to(dtype), x[:n].to(dtype)), z[:n].double()

    fit_feats, fit_z = rows(fit_z, fit_e, fit_x, fit_tasks)
    test_feats, test_z = rows(test_z, test_e, test_x, test_tasks)
    return [(name, mean_dimension_r2(ridge_fit_predict_paper(a.double(), fit_z, b.double(), l2_reg), test_z))
            for (name, a), (_, b) in zip(fit_feats, test_feats, strict=True)]
