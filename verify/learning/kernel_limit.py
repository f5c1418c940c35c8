"""The infinite-width limit of training an MLP student on the hyperteacher: kernel regression
with the student's NTK or NNGP (verify.learning.kernels), fitted on the tasks an SGD run
trains on and scored by the family's own scoring code.

**Why kernel regression.** Gradient flow on the MSE ½‖f(X) − Y‖² from a network at infinite
width stays in its linearisation and converges to
    f_∞(x*) = f_0(x*) + Θ(x*, X) Θ(X, X)⁻¹ (Y − f_0(X))
(Jacot et al. 2018; Lee et al. 2019, eq. 16). Over initialisations f_0 is a centred Gaussian
process, so the mean predictor is Θ(x*, X) Θ(X, X)⁻¹ Y: this module's NTK limit. The NNGP
posterior mean is K(x*, X) K(X, X)⁻¹ Y with the output's NNGP K (Lee et al. 2018). Both are
fitted here; neither depends on the kernel's overall scale (so Θ_SP / n serves for the
standard-parametrization limit), both on the layers' relative shares (kernels.py).

**Outputs.** The students' O outputs share every hidden layer, and at infinite width their
NTK and NNGP are the scalar kernel times the identity over outputs: one solve with O
right-hand sides.

**The data.** Rows are what the students read, [e(z), x], for `tasks` tasks drawn as the
family draws its training tasks (supports uniformly from the training supports, their
weights, `samples_per_task` x each) from a generator of its own (seed + 2: the scoring sides
use seed + 1). SGD sees fresh tasks at every step; kernel regression needs a finite set, so
`sample_ladder` grows the samples per task until the held-out numbers stop moving.

**The solve.** K(X, X) + λI by Cholesky (scipy's LAPACK, in place), with the jitter
λ = `jitter` × mean diag K stated in the report; K is built in row blocks, so the only n × n
array is K itself (`solve_bytes` estimates the memory before any work). Predictions are
K(x*, X) α, in blocks of x*.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from verify.learning import kernels

KERNELS = ("ntk", "nngp")
BLOCK_ROWS = 1024  # rows of K(X*, X) made at a time: 3·depth blocks of BLOCK_ROWS × n float64 in flight
DEFAULT_JITTER = 1e-10  # λ / mean diag K: far below the kernels' float64 rounding at n ≤ 10⁴ (see the tests)


@dataclass(frozen=True)
class KernelConfig:
    """One kernel limit: which kernel, of which student (depth, parametrization, its init's
    σ_w², σ_b²), fitted on how many training rows, with what jitter."""

    kernel: str = "ntk"
    depth: int = 4
    parametrization: str = "standard"
    sigma_w2: float = 1.0  # LeCun-normal kernels (verify.learning.students.dense)
    sigma_b2: float = 0.0  # zero biases at init
    tasks: int = 1024
    samples_per_task: int = 8
    jitter: float = DEFAULT_JITTER

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.kernel!r}")
        if self.parametrization not in kernels.PARAMETRIZATIONS:
            raise ValueError(f"parametrization must be one of {kernels.PARAMETRIZATIONS}, "
                             f"got {self.parametrization!r}")
        for name in ("depth", "tasks", "samples_per_task"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (self.jitter >= 0 and math.isfinite(self.jitter)):
            raise ValueError(f"jitter must be ≥ 0, got {self.jitter!r}")

    @property
    def rows(self) -> int:
        return self.tasks * self.samples_per_task

    def kernel_of(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The scalar kernel between rows x (a, d) and y (b, d): Θ (NTK limit, per the
        parametrization) or the output's NNGP σ_w² Σ^L + σ_b²."""
        if self.kernel == "ntk":
            return kernels.ntk(x, y, depth=self.depth, parametrization=self.parametrization,
                               sigma_w2=self.sigma_w2, sigma_b2=self.sigma_b2)
        return self.sigma_w2 * kernels.nngp(x, y, depth=self.depth, sigma_w2=self.sigma_w2,
                                            sigma_b2=self.sigma_b2) + self.sigma_b2


def solve_bytes(rows: int, depth: int) -> int:
    """The memory a fit of `rows` training rows takes: K(X, X), and the 3·depth temporary
    blocks of BLOCK_ROWS × rows the recursion holds while it fills K."""
    return 8 * rows * rows + 8 * 3 * depth * min(rows, BLOCK_ROWS) * rows


def gram(cfg: KernelConfig, x: torch.Tensor) -> torch.Tensor:
    """K(X, X) (n, n) float64, filled BLOCK_ROWS rows at a time: each block from the diagonal
    on (the kernel is symmetric), mirrored below it."""
    n = len(x)
    out = torch.empty(n, n, dtype=torch.float64)
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        out[start:stop, start:] = cfg.kernel_of(x[start:stop], x[start:])
        out[stop:, start:stop] = out[start:stop, stop:].T
    return out


class KernelPredictor(nn.Module):
    """x* ↦ K(x*, X) α, a function of the rows a student reads ([e(z), x]), so the family's
    scoring (R², RMSE, the sup error's search, which differentiates it) takes it as it takes
    a network. No parameters: it trains nothing."""

    def __init__(self, cfg: KernelConfig, x_train: torch.Tensor, alpha: torch.Tensor):
        super().__init__()
        self.cfg = cfg
        self.register_buffer("x_train", x_train.to(torch.float64))
        self.register_buffer("alpha", alpha.to(torch.float64))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(torch.float64)
        return torch.cat([self.cfg.kernel_of(rows[s:s + BLOCK_ROWS], self.x_train) @ self.alpha
                          for s in range(0, len(rows), BLOCK_ROWS)]) if len(rows) else rows.new_zeros(0, 1)


@dataclass
class Fit:
    predictor: KernelPredictor
    jitter_absolute: float  # λ added to K's diagonal
    train_rmse: float  # of the fitted rows (λ > 0 makes it a ridge fit: not exactly 0)
    seconds_kernel: float
    seconds_solve: float

    def summary(self) -> dict:
        return dict(jitter=self.predictor.cfg.jitter, jitter_absolute=self.jitter_absolute,
                    train_rows_rmse=self.train_rmse, seconds_kernel=self.seconds_kernel,
                    seconds_solve=self.seconds_solve, config=asdict(self.predictor.cfg))


class NotPositiveDefinite(ValueError):
    """K(X, X) + λI has no Cholesky factor at this jitter (duplicate rows, or λ too small)."""


def fit(cfg: KernelConfig, x: torch.Tensor, y: torch.Tensor) -> Fit:
    """Kernel regression of y (n, O) on rows x (n, d): α = (K(X, X) + λI)⁻¹ Y by Cholesky."""
    import scipy.linalg

    x, y = x.to(torch.float64), y.to(torch.float64)
    start = time.perf_counter()
    k = gram(cfg, x)
    built = time.perf_counter()
    jitter = cfg.jitter * float(k.diagonal().mean())
    k.diagonal().add_(jitter)
    # K is symmetric, so its transpose is a Fortran-ordered view of the same memory, which
    # LAPACK factors in place; scipy copies a C-ordered array first (two n × n arrays at the
    # peak, where solve_bytes counts one). The factor overwrites K.
    k_np = k.numpy().T
    try:
        factor = scipy.linalg.cho_factor(k_np, lower=True, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError as e:
        raise NotPositiveDefinite(f"K(X, X) + λI is not positive definite at jitter {cfg.jitter:g} "
                                  f"(λ = {jitter:.3g}): {e}; raise the jitter") from None
    alpha = torch.from_numpy(scipy.linalg.cho_solve(factor, y.numpy(), check_finite=False))
    del k, k_np, factor
    solved = time.perf_counter()
    # (K + λI) α = Y, so the fit's residual on its own rows is Y − Kα = λα: no second Gram.
    train_rmse = float((jitter * alpha).pow(2).mean().sqrt())
    return Fit(KernelPredictor(cfg, x, alpha), jitter, train_rmse, built - start, solved - built)


def training_rows(family, train_supports: np.ndarray, cfg: KernelConfig, seed: int):
    """(rows [e(z), x] (n, E + I), targets (n, O)), float64: cfg.tasks tasks drawn as the
    family draws its training tasks, cfg.samples_per_task x each, from seed + 2."""
    from verify.learning.metrics import sample_eval_tasks

    rng = np.random.default_rng(seed + 2)
    samples = sample_eval_tasks(family.teacher, train_supports, cfg.tasks, cfg.samples_per_task, rng)
    return student_rows(family.encode, samples), samples.y.reshape(-1, samples.y.shape[-1])


def nested_training_rows(family, train_supports: np.ndarray, cfg: KernelConfig, seed: int):
    """training_rows's rows and targets (the same draw, the same numbers) and, for each of the
    cfg.tasks tasks, the index into `train_supports` of its support. The draw is task-major, so
    the first t tasks' rows are the first t·samples_per_task rows: a ladder along tasks that
    draws its largest rung once fits nested sets (rung k's tasks ⊂ rung k+1's), and its top
    rung is the fit of `--tasks` = its tasks."""
    from verify.learning.metrics import sample_tasks

    rng = np.random.default_rng(seed + 2)
    which = rng.integers(0, len(train_supports), cfg.tasks)  # as sample_eval_tasks draws them
    samples = sample_tasks(family.teacher, train_supports[which], cfg.samples_per_task, rng)
    return student_rows(family.encode, samples), samples.y.reshape(-1, samples.y.shape[-1]), which


def student_rows(encode, samples) -> torch.Tensor:
    """The rows an MLP student reads for sampled tasks, [e(z), x] (T·P, E + I), float64."""
    e = encode(samples.z).to(torch.float64)
    T, P, _ = samples.x.shape
    return torch.cat([e[:, None, :].expand(T, P, e.shape[1]), samples.x], dim=2).reshape(T * P, -1)
