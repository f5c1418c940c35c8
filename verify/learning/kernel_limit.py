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

**The solve.** (K(X, X) + λI) α = Y, with the jitter λ = `jitter` × mean diag K stated in the
report, by one of two solvers (`solver`; `auto` picks by rows, `chosen_solver`):
- `cholesky` (scipy's LAPACK, in place): K is built in row blocks, so the only n × n array is
  K itself, 8n² bytes. `auto` takes it up to CHOLESKY_MAX_ROWS = 32,768 rows (K is then
  CHOLESKY_BUDGET_BYTES = 8 GiB), every size the stored runs use.
- `cg` (`cg_solve`): conjugate gradients in float64, Jacobi-preconditioned (M = diag K + λ),
  each product (K + λI)P formed from the kernel function in blocks of BLOCK_ROWS rows from the
  diagonal on (K symmetric: each block serves its rows and, transposed, its columns), so no
  n × n array exists (memory O(BLOCK_ROWS · n)); it stops when every output's true residual
  ‖Y − (K + λI)α‖ is within `cg_tolerance` (1e-10) of ‖Y‖, or at `cg_max_iterations`
  (default CG_MAX_ITERATIONS = 2,000), and a solve that stops at the cap is reported as not
  converged (Fit.converged, a warning, the report's line), never as a fit. Each iteration
  costs half a Gram's kernel entries (n²/2), so it pays only where K does not fit: on 1,024
  rows of the cpu scale's teacher (seed 1, jitter 1e-10, κ = 1.4e4) it took 220 products
  and 99 s against Cholesky's 2.7 s (2 shared cores), agreeing on α to 3e-10 relative.
`solve_bytes` estimates either's memory before any work. Predictions are K(x*, X) α, in
blocks of x* and of X (KernelPredictor._block). The LAPACK calls run on as many BLAS threads
as torch's (`blas_threads`): a run pinned to one thread is pinned in its solve too.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from dataclasses import replace as dataclasses_replace

import numpy as np
import torch
from torch import nn

from verify.learning import kernels

KERNELS = ("ntk", "nngp")
BLOCK_ROWS = 1024  # rows of K(X*, X) made at a time: 3·depth blocks of BLOCK_ROWS × n float64 in flight
DEFAULT_JITTER = 1e-10  # λ / mean diag K: far below the kernels' float64 rounding at n ≤ 10⁴ (see the tests)
SOLVERS = ("auto", "cholesky", "cg")
# `auto` solves densely while K(X, X), 8n² bytes, fits this budget: up to 32,768 rows (2,048
# tasks × 16, the task ladder's target and the largest fit the store holds), cg beyond.
CHOLESKY_BUDGET_BYTES = 8 * 2**30
CHOLESKY_MAX_ROWS = math.isqrt(CHOLESKY_BUDGET_BYTES // 8)
CG_TOLERANCE = 1e-10  # ‖Y − (K + λI)α‖ / ‖Y‖, per output, at which cg stops
# cg's products (K + λI)P before it stops short of the tolerance, reported as not converged.
# Measured on the cpu scale's teacher (seed 1, depth 4, jitter 1e-10): 102 products at 256 rows
# (κ(K + λI) = 3.3e3), 220 at 1,024 rows (κ = 1.4e4); they grow like √κ.
CG_MAX_ITERATIONS = 2_000
# The (n, O) arrays cg holds: Y, α, the residual, the preconditioned one, the direction, its product.
CG_VECTORS = 6


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
    solver: str = "auto"  # chosen_solver: cholesky up to CHOLESKY_MAX_ROWS rows, cg beyond
    cg_tolerance: float = CG_TOLERANCE
    cg_max_iterations: int | None = None  # None: CG_MAX_ITERATIONS (cg_cap)

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
        if not (self.sigma_b2 >= 0 and math.isfinite(self.sigma_b2)):
            raise ValueError(f"sigma_b2 must be ≥ 0, got {self.sigma_b2!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if not (self.cg_tolerance > 0 and math.isfinite(self.cg_tolerance)):
            raise ValueError(f"cg_tolerance must be > 0, got {self.cg_tolerance!r}")
        if self.cg_max_iterations is not None and not (isinstance(self.cg_max_iterations, int)
                                                       and self.cg_max_iterations >= 1):
            raise ValueError(f"cg_max_iterations must be a positive integer, got {self.cg_max_iterations!r}")

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

    def diagonal_of(self, x: torch.Tensor) -> torch.Tensor:
        """K(x, x) for each row of x (n,), in closed form (kernels._layers): the diagonal that
        gram, gram_diagonal and gram_product all write, so the three agree to the bit."""
        if self.kernel == "ntk":
            return kernels.ntk(x, depth=self.depth, parametrization=self.parametrization,
                               sigma_w2=self.sigma_w2, sigma_b2=self.sigma_b2, diagonal=True)
        return self.sigma_w2 * kernels.nngp(x, depth=self.depth, sigma_w2=self.sigma_w2,
                                            sigma_b2=self.sigma_b2, diagonal=True) + self.sigma_b2

    def block_of(self, x: torch.Tensor, first: int, stop: int) -> torch.Tensor:
        """K(X[first:stop], X[first:]), the Gram's block row from its diagonal on, with the
        diagonal in closed form (diagonal_of)."""
        block = self.kernel_of(x[first:stop], x[first:])
        block.diagonal().copy_(self.diagonal_of(x[first:stop]))
        return block


def chosen_solver(solver: str, rows: int) -> str:
    """The solver a fit of `rows` rows runs: `solver`, or for `auto` cholesky while K fits
    CHOLESKY_BUDGET_BYTES (rows ≤ CHOLESKY_MAX_ROWS), cg beyond."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if solver != "auto":
        return solver
    return "cholesky" if rows <= CHOLESKY_MAX_ROWS else "cg"


def solve_bytes(rows: int, depth: int, solver: str = "cholesky", outputs: int = 1) -> int:
    """The memory a fit of `rows` training rows takes: the 3·depth temporary blocks of
    BLOCK_ROWS × rows the recursion holds while it makes a block of K, and, by Cholesky,
    K(X, X) itself; by cg, instead of K, the block being multiplied and its CG_VECTORS (rows,
    outputs) arrays and the diagonal."""
    blocks = 8 * 3 * depth * min(rows, BLOCK_ROWS) * rows
    if chosen_solver(solver, rows) == "cholesky":
        return 8 * rows * rows + blocks
    return blocks + 8 * min(rows, BLOCK_ROWS) * rows + 8 * rows * (CG_VECTORS * outputs + 1)


def gram(cfg: KernelConfig, x: torch.Tensor) -> torch.Tensor:
    """K(X, X) (n, n) float64, filled BLOCK_ROWS rows at a time: each block from the diagonal
    on (the kernel is symmetric), mirrored below it."""
    n = len(x)
    out = torch.empty(n, n, dtype=torch.float64)
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        out[start:stop, start:] = cfg.block_of(x, start, stop)
        out[stop:, start:stop] = out[start:stop, stop:].T
    return out


class KernelPredictor(nn.Module):
    """x* ↦ K(x*, X) α, a function of the rows a student reads ([e(z), x]), so the family's
    scoring (R², RMSE, the sup error's search, which differentiates it) takes it as it takes
    a network. No parameters: it trains nothing. Evaluated in blocks of BLOCK_ROWS rows × BLOCK_ROWS
    training rows (`_block`), so scoring never holds the cross-kernel of all its points × all n."""

    def __init__(self, cfg: KernelConfig, x_train: torch.Tensor, alpha: torch.Tensor):
        super().__init__()
        self.cfg = cfg
        self.register_buffer("x_train", x_train.to(torch.float64))
        self.register_buffer("alpha", alpha.to(torch.float64))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(torch.float64)
        if not len(rows):
            return rows.new_zeros(0, self.alpha.shape[1])
        return torch.cat([self._block(rows[s:s + BLOCK_ROWS]) for s in range(0, len(rows), BLOCK_ROWS)])

    def _block(self, rows: torch.Tensor) -> torch.Tensor:
        """K(rows, X) α for at most BLOCK_ROWS rows, summed over X in blocks of BLOCK_ROWS
        training rows: at most BLOCK_ROWS × BLOCK_ROWS kernel entries (and their 3·depth
        temporaries) exist at once, whatever n is. Differentiated (the sup search's ascent),
        each block is recomputed in the backward pass (torch.utils.checkpoint) rather than
        kept, so the graph holds (rows, O) per block, not the cross-kernel. One block of X
        (n ≤ BLOCK_ROWS) is the one product K(rows, X) @ α exactly as before."""
        n = len(self.x_train)
        if n <= BLOCK_ROWS:
            return self.cfg.kernel_of(rows, self.x_train) @ self.alpha
        grad = torch.is_grad_enabled() and rows.requires_grad
        out = None
        for s in range(0, n, BLOCK_ROWS):
            xs, alpha = self.x_train[s:s + BLOCK_ROWS], self.alpha[s:s + BLOCK_ROWS]
            if grad:
                from torch.utils.checkpoint import checkpoint

                part = checkpoint(_cross, self.cfg, rows, xs, alpha, use_reentrant=False)
            else:
                part = _cross(self.cfg, rows, xs, alpha)
            out = part if out is None else out + part
        return out


def _cross(cfg: KernelConfig, rows: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    return cfg.kernel_of(rows, x) @ alpha


class RungPredictor(KernelPredictor):
    """Every rung of a ladder along tasks at once: rung r's α (fitted on the first n_r of the
    rows x_train), zero below its n_r rows, side by side (n, R·O), so that one pass of
    K(x*, X)·[α_1 … α_R] gives each rung's K(x*, X_r)·α_r (outputs `parts[r]`): the cross-kernel
    of the points against the top rung's rows is formed once, not once a rung. Exact but for the
    order of the sums (the zeros add nothing)."""

    def __init__(self, cfg: KernelConfig, x_train: torch.Tensor, alphas: list[torch.Tensor]):
        n, outputs = len(x_train), alphas[0].shape[1]
        if any(len(a) > n or a.shape[1] != outputs for a in alphas):
            raise ValueError("each rung's α must have at most the top rung's rows and the same outputs")
        stacked = torch.zeros(n, outputs * len(alphas), dtype=torch.float64)
        for r, a in enumerate(alphas):
            stacked[:len(a), r * outputs:(r + 1) * outputs] = a
        super().__init__(cfg, x_train, stacked)
        self.parts = [slice(r * outputs, (r + 1) * outputs) for r in range(len(alphas))]


@dataclass
class Fit:
    predictor: KernelPredictor
    jitter_absolute: float  # λ added to K's diagonal
    train_rmse: float  # of the fitted rows (λ > 0 makes it a ridge fit: not exactly 0)
    seconds_kernel: float  # cholesky: the Gram; cg: its diagonal (the products are the solve's)
    seconds_solve: float
    solver: str = "cholesky"  # the one that ran (chosen_solver)
    iterations: int | None = None  # cg's products (K + λI)P, the final residual's check excluded
    relative_residual: float | None = None  # cg: max over outputs of ‖Y − (K + λI)α‖ / ‖Y‖, recomputed
    converged: bool = True  # cg: whether that residual reached cfg.cg_tolerance within the cap

    def summary(self) -> dict:
        return dict(jitter=self.predictor.cfg.jitter, jitter_absolute=self.jitter_absolute,
                    train_rows_rmse=self.train_rmse, seconds_kernel=self.seconds_kernel,
                    seconds_solve=self.seconds_solve, solver=self.solver, cg_iterations=self.iterations,
                    cg_relative_residual=self.relative_residual, converged=self.converged,
                    config=asdict(self.predictor.cfg))


# OpenBLAS's dpotrf can crash at n = 32,768 with exactly 2 threads (OpenBLAS issue 2562): from
# this many rows on, a solve that would run OpenBLAS on 2 threads runs it on 1.
OPENBLAS_TWO_THREAD_ROWS = 16_384


def solve_threads(threads: int, rows: int, openblas: bool) -> int:
    """The BLAS threads a solve of `rows` rows gets when torch runs on `threads`: the same,
    but 1 where OpenBLAS would run dpotrf on exactly 2 at OPENBLAS_TWO_THREAD_ROWS rows or more."""
    threads = max(1, int(threads))
    return 1 if openblas and threads == 2 and rows >= OPENBLAS_TWO_THREAD_ROWS else threads


@contextmanager
def blas_threads(threads: int, rows: int):
    """The BLAS (numpy's and scipy's LAPACK) pinned to solve_threads(threads, rows) threads
    while the block runs, through threadpoolctl (a dependency: pyproject.toml); the limits are
    restored after it."""
    from threadpoolctl import threadpool_info, threadpool_limits

    openblas = any(p.get("internal_api") == "openblas" for p in threadpool_info())
    with threadpool_limits(limits=solve_threads(threads, rows, openblas), user_api="blas"):
        yield


class NotPositiveDefinite(ValueError):
    """K(X, X) + λI has no Cholesky factor at this jitter (duplicate rows, or λ too small)."""


def factored_gram(cfg: KernelConfig, x: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(F, λ, the time the Gram was built): K(X, X) + λI factored by Cholesky in place, with
    λ = cfg.jitter × mean diag K. F is one n × n float64 array: its transpose, Fortran-ordered,
    holds the factor L in its lower triangle (so F's upper triangle is Lᵀ). NotPositiveDefinite
    where it has none."""
    import scipy.linalg

    k = gram(cfg, x)
    built = time.perf_counter()
    jitter = cfg.jitter * float(k.diagonal().mean())
    k.diagonal().add_(jitter)
    # K is symmetric, so its transpose is a Fortran-ordered view of the same memory, which
    # LAPACK factors in place; scipy copies a C-ordered array first (two n × n arrays at the
    # peak, where solve_bytes counts one). The factor overwrites K.
    k_f = k.numpy().T
    with blas_threads(torch.get_num_threads(), len(x)):
        try:
            factor, _ = scipy.linalg.cho_factor(k_f, lower=True, overwrite_a=True, check_finite=False)
        except np.linalg.LinAlgError as e:
            raise NotPositiveDefinite(f"K(X, X) + λI is not positive definite at jitter {cfg.jitter:g} "
                                      f"(λ = {jitter:.3g}): {e}; raise the jitter") from None
    if not np.may_share_memory(factor, k_f):  # a scipy that copied after all: F must hold L
        k_f[...] = factor
    return k, jitter, built


def fit(cfg: KernelConfig, x: torch.Tensor, y: torch.Tensor) -> Fit:
    """Kernel regression of y (n, O) on rows x (n, d): α = (K(X, X) + λI)⁻¹ Y by Cholesky, or
    by conjugate gradients where cfg.solver (chosen_solver) says so."""
    import scipy.linalg

    x, y = x.to(torch.float64), y.to(torch.float64)
    if chosen_solver(cfg.solver, len(x)) == "cg":
        return cg_fit(cfg, x, y)
    start = time.perf_counter()
    k, jitter, built = factored_gram(cfg, x)
    with blas_threads(torch.get_num_threads(), len(x)):
        alpha = torch.from_numpy(scipy.linalg.cho_solve((k.numpy().T, True), y.numpy(), check_finite=False))
    del k
    solved = time.perf_counter()
    # (K + λI) α = Y, so the fit's residual on its own rows is Y − Kα = λα: no second Gram.
    train_rmse = float((jitter * alpha).pow(2).mean().sqrt())
    return Fit(KernelPredictor(cfg, x, alpha), jitter, train_rmse, built - start, solved - built)


def nested_fits(cfg: KernelConfig, x: torch.Tensor, y: torch.Tensor, tasks: list[int]) -> list[Fit]:
    """Kernel regressions of y[:n] on x[:n], n = t · cfg.samples_per_task rows for each t in
    `tasks` (increasing; the last holds all of x), from one Gram and one Cholesky factor, of the
    largest: a ladder whose rungs are nested (nested_training_rows).

    K's leading n × n block is the Gram of the first n rows, and its Cholesky factor is the
    leading block of K's factor L. Forward substitution is nested too: (L⁻¹Y)[:n] = L_n⁻¹Y[:n].
    So rung n's α = L_nᵀ⁻¹ (L⁻¹Y)[:n] is one triangular solve, O(n²), where a fit of its own
    builds an n × n Gram and factors it, O(n³): on the cpu ladder (7 rungs, 4,096 → 32,768
    rows) the rungs below the top cost 0.98× the top's Gram and 0.54× its factor that way.
    One λ = jitter × mean diag K (the largest K's) serves every rung, where `fit` takes each
    fit's own mean diagonal; the two differ by the rows' spread of K(x, x), a relative 1e-10
    of K either way. Cholesky only: the top rung must fit CHOLESKY_BUDGET_BYTES (`fit` for cg)."""
    import scipy.linalg

    if (not tasks or list(tasks) != sorted(set(tasks)) or tasks[0] < 1
            or tasks[-1] * cfg.samples_per_task != len(x)):
        raise ValueError(f"tasks must increase from ≥ 1 to len(x) / samples_per_task = "
                         f"{len(x) / cfg.samples_per_task:g}, got {tasks!r}")
    cfgs = [dataclasses_replace(cfg, tasks=t) for t in tasks]
    if (solver := chosen_solver(cfg.solver, len(x))) != "cholesky":
        raise ValueError(f"nested fits factor K densely: {len(x):,} rows take {solver}")
    x, y = x.to(torch.float64), y.to(torch.float64)
    start = time.perf_counter()
    k, jitter, built = factored_gram(cfg, x)
    with blas_threads(torch.get_num_threads(), len(x)):
        w = torch.from_numpy(scipy.linalg.solve_triangular(k.numpy().T, y.numpy(), lower=True,
                                                           check_finite=False))
    factored = time.perf_counter()
    fits = []
    for rung in cfgs:  # k's upper triangle is Lᵀ (factored_gram)
        begun = time.perf_counter()
        alpha = upper_solve(k, w, rung.rows)
        took = time.perf_counter() - begun
        top = rung.rows == len(x)  # the Gram's and the factor's time is the top rung's
        fits.append(Fit(KernelPredictor(rung, x[:rung.rows], alpha), jitter,
                        float((jitter * alpha).pow(2).mean().sqrt()),
                        built - start if top else 0.0, (factored - built if top else 0.0) + took))
    return fits


def upper_solve(u: torch.Tensor, w: torch.Tensor, n: int, block: int = BLOCK_ROWS) -> torch.Tensor:
    """α with U[:n, :n] α = w[:n], U upper triangular in u's upper triangle (u's lower one is
    not read), by back substitution in row blocks: U[:n, :n] is a strided view that a library
    triangular solve would copy (up to 8n² bytes), while a block's products read it in place."""
    alpha = torch.empty(n, w.shape[1], dtype=torch.float64)
    for first in range(((n - 1) // block) * block, -1, -block):
        last = min(first + block, n)
        rhs = w[first:last] - u[first:last, last:n] @ alpha[last:n]
        alpha[first:last] = torch.linalg.solve_triangular(u[first:last, first:last], rhs, upper=True)
    return alpha


def gram_diagonal(cfg: KernelConfig, x: torch.Tensor) -> torch.Tensor:
    """diag K(X, X) (n,), from the diagonal blocks K(X_b, X_b) (BLOCK_ROWS rows each)."""
    return torch.cat([cfg.diagonal_of(x[s:s + BLOCK_ROWS]) for s in range(0, len(x), BLOCK_ROWS)])


def gram_product(cfg: KernelConfig, x: torch.Tensor, p: torch.Tensor, jitter: float) -> torch.Tensor:
    """(K(X, X) + λI) P for P (n, O), K formed BLOCK_ROWS rows at a time from the diagonal on,
    as `gram` fills it: each block K(X_b, X_{b:}) multiplies P's rows b: and, transposed, adds
    its off-diagonal part to the rows below (K symmetric). At most one block of K and its
    3·depth temporaries exist at once, whatever n is."""
    n = len(x)
    out = jitter * p
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        block = cfg.block_of(x, start, stop)
        out[start:stop] += block @ p[start:]
        out[stop:] += block[:, stop - start:].T @ p[start:stop]
    return out


def cg_cap(cfg: KernelConfig, rows: int) -> int:
    """The products cg may take: cfg.cg_max_iterations, or CG_MAX_ITERATIONS. Not the rows,
    exact arithmetic's bound: in float64 the directions lose their conjugacy and a
    small ill-conditioned Gram can need more (64 rows of the tests' small teacher: 5e-10 after
    64 products)."""
    return cfg.cg_max_iterations or CG_MAX_ITERATIONS


def cg_solve(cfg: KernelConfig, x: torch.Tensor, y: torch.Tensor, jitter: float,
             diagonal: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor, float, bool]:
    """α with (K + λI)α = Y (n, O) by Jacobi-preconditioned conjugate gradients, each output
    its own recurrence (one blocked product serves all O), float64. An output stops when its
    recurrence's residual is within cfg.cg_tolerance of its ‖Y‖; then the true residual Y −
    (K + λI)α is recomputed (one more product) and, where rounding has let it drift above the
    tolerance, CG restarts from it. Stops at cg_cap's products. Returns (α, products, the true
    residual (n, O), its max over outputs of ‖r‖ / ‖Y‖, whether every output reached the
    tolerance)."""
    n = len(x)
    cap = cg_cap(cfg, n)
    precondition = (diagonal + jitter)[:, None]  # M = diag(K + λI): > 0 for rows not all zero
    precondition = torch.where(precondition > 0, precondition, 1.0)
    y_norm = torch.linalg.vector_norm(y, dim=0)
    target = cfg.cg_tolerance * y_norm
    alpha = torch.zeros_like(y)
    residual = y.clone()
    iterations = 0

    def relative(r):
        norm = torch.linalg.vector_norm(r, dim=0)
        return torch.where(y_norm > 0, norm / torch.where(y_norm > 0, y_norm, 1.0), norm)

    while True:
        # (Re)start from the current residual: z = M⁻¹r, p = z.
        z = residual / precondition
        direction, rz = z.clone(), (residual * z).sum(0)
        active = torch.linalg.vector_norm(residual, dim=0) > target
        while bool(active.any()) and iterations < cap:
            product = gram_product(cfg, x, direction, jitter)
            iterations += 1
            curvature = (direction * product).sum(0)
            step = torch.where(active & (curvature > 0), rz / torch.where(curvature > 0, curvature, 1.0), 0.0)
            alpha += step * direction
            residual -= step * product
            active &= torch.linalg.vector_norm(residual, dim=0) > target
            z = residual / precondition
            rz_next = (residual * z).sum(0)
            beta = torch.where(active, rz_next / torch.where(rz != 0, rz, 1.0), 0.0)
            direction = torch.where(active, z + beta * direction, direction)
            rz = torch.where(active, rz_next, rz)
        residual = y - gram_product(cfg, x, alpha, jitter)  # the true residual, not the recurrence's
        reached = bool((torch.linalg.vector_norm(residual, dim=0) <= target).all())
        if reached or iterations >= cap:
            return alpha, iterations, residual, float(relative(residual).max()), reached


def cg_fit(cfg: KernelConfig, x: torch.Tensor, y: torch.Tensor) -> Fit:
    """fit's conjugate-gradient path: the same λ = jitter × mean diag K on the same diagonal,
    α by cg_solve, K never held whole. A solve that stops at the cap is returned with
    converged False and its residual (the caller reports it), and warned of on stderr."""
    import sys

    start = time.perf_counter()
    diagonal = gram_diagonal(cfg, x)
    built = time.perf_counter()
    jitter = cfg.jitter * float(diagonal.mean())
    alpha, iterations, true_residual, residual, converged = cg_solve(cfg, x, y, jitter, diagonal)
    solved = time.perf_counter()
    if not converged:
        print(f"warning: cg did NOT converge: relative residual {residual:.3g} after {iterations} "
              f"iterations (tolerance {cfg.cg_tolerance:g})", file=sys.stderr)
    # Y − Kα = λα + r, with r the true residual of (K + λI)α = Y (Cholesky's takes r = 0).
    train_rmse = float((jitter * alpha + true_residual).pow(2).mean().sqrt())
    return Fit(KernelPredictor(cfg, x, alpha), jitter, train_rmse, built - start, solved - built,
               solver="cg", iterations=iterations, relative_residual=residual, converged=converged)


def training_rows(family, train_supports: np.ndarray, cfg: KernelConfig, seed: int):
    """(rows [e(z), x] (n, E + I), targets (n, O)), float64: cfg.tasks tasks drawn as the
    family draws its training tasks, cfg.samples_per_task x each, from seed + 2."""
    from verify.learning.metrics import sample_eval_tasks

    rng = np.random.default_rng(seed + 2)
    samples = sample_eval_tasks(family.teacher, train_supports, cfg.tasks, cfg.samples_per_task, rng)
    return student_rows(family.encode, samples), samples.y.reshape(-1, samples.y.shape[-1])


# ----------------------------------------------------------------------------- the cost of scoring

# The sup error's search evaluates the predictor at many points, each against all n training
# rows; a fit of n rows costs its Gram's kernel entries and the Cholesky's n³/3 flops. Both are
# counted in kernel entries (deterministic, so a run's search does not depend on the machine's
# speed): one Cholesky flop is 1/SOLVE_FLOPS_PER_ENTRY of a kernel entry (measured on this
# project's 2-core machine at depth 4, one thread, OpenBLAS: 0.53 µs an entry, 22 GFlop/s in
# dpotrf, so ≈ 11,600 flops an entry; rounded down), and a differentiated row (the ascent)
# costs GRAD_ROW_COST forward rows (forward, the checkpoint's recompute, backward).
SOLVE_FLOPS_PER_ENTRY = 10_000
GRAD_ROW_COST = 3


def fit_cost(rows: int) -> float:
    """A fit's cost in kernel entries: the Gram's blocks (each from the diagonal on) and the
    Cholesky's rows³/3 flops."""
    entries = sum(min(BLOCK_ROWS, rows - s) * (rows - s) for s in range(0, rows, BLOCK_ROWS))
    return float(entries) + rows**3 / 3 / SOLVE_FLOPS_PER_ENTRY


def search_rows(budget, n_supports: int, I: int, numbers: int) -> tuple[float, float, float]:  # noqa: E741
    """The rows a sup search of `budget` evaluates on a side of `n_supports` supports, an upper
    bound from verify.theorem.measure's stages, in three parts: (the random stage's tasks ×
    points and the ascent's paths × (steps + 1) × GRAD_ROW_COST, which MeasureBudget.scaled
    cuts; the line searches' budget (the ascent's when unset, × min(LINE_BOOST, LINE_NUMBERS /
    the numbers an evaluation reads)) and one start's sweep, which it does not; the grid, for
    I ≤ 2)."""
    from verify.theorem import measure

    random = min(budget.max_tasks, n_supports) * budget.points_per_task
    paths = budget.refine_tasks * budget.refine_starts if budget.refine_steps and budget.refine_tasks else 0
    ascent = paths * (budget.refine_steps + 1)
    line = 0.0
    if budget.line_evaluations != 0 and budget.refine_tasks:
        base = ascent if budget.line_evaluations is None else budget.line_evaluations
        line = base * min(measure.LINE_BOOST, measure.LINE_NUMBERS / max(numbers, 1))
        line += I * measure.LINE_COST + measure.LINE_OVERSAMPLE  # a budget below one start buys one
    grid = 0
    if I <= 2 and budget.grid_points != 0:
        g = budget.grid_points or (4097 if I == 1 else 257)
        grid = g**I * min(measure.GRID_TASKS + 1, max(1, measure.GRID_ROWS // g**I))
    return float(random + GRAD_ROW_COST * ascent), float(line), float(grid)


def search_budget(budget, rows: int, sides: list[int], I: int, numbers: int):  # noqa: E741
    """The sup search a kernel predictor fitted on `rows` rows gets on sides of `sides`
    supports each, so that scoring costs no more than the fit: `budget` where rows × its
    search_rows on every side ≤ fit_cost(rows); else, as a short run's sequence student gets
    (families.hyperteacher.sequence_measure), no line searches (their least budget is one
    sweep of every coordinate) and the rest scaled (MeasureBudget.scaled) by the largest
    fraction that fits. scaled keeps one task and one ascent step at least, so a very small fit
    can still cost less than its least search: `within_fit` says whether it does. Returns
    (budget, fraction, the full search's estimated cost, the cut one's, the fit's), in kernel
    entries."""
    from dataclasses import replace

    parts = [search_rows(budget, s, I, numbers) for s in sides]
    full, fit_entries = rows * sum(map(sum, parts)), fit_cost(rows)
    if full <= fit_entries:
        return budget, 1.0, full, full, fit_entries
    def cut(fraction):
        return replace(budget.scaled(fraction), line_evaluations=0)

    def cost(fraction):
        return rows * sum(sum(search_rows(cut(fraction), s, I, numbers)) for s in sides)

    # The cut search's cost grows with the fraction (in steps: scaled rounds its counts):
    # bisection for the largest fraction within the fit.
    low, high = 1e-9, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cost(middle) <= fit_entries else (low, middle)
    return cut(low), low, full, cost(low), fit_entries


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
