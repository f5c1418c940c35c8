"""Estimate sup over x ∈ [-1,1]^I and tasks z of ‖f(e(z), x) − g(x, z)‖_∞ for any network f.

A sup cannot be sampled, only bounded from below. Three stages push the estimate up:
1. random points on every support (enumerated when there are few enough, else a
   stratified sample), which ranks the tasks;
2. projected sign-gradient ascent from the worst points of the worst tasks, over x in
   the box and, with `refine_z`, over the support's weights in [0, 1], so the search
   covers the theorem's whole task set Z_K rather than the family's weight levels;
3. for I ≤ 2, a dense grid over x on those worst tasks.
The estimate is the largest error seen anywhere, with the (x, z) where it was seen.
`f` is any callable from a float64 (B, M_e + I) tensor to (B, O): the construction,
its dense nn.Sequential, or an SGD-trained MLP.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from constructions.tasks.hyperteacher import (
    Hyperteacher,
    dense_latents,
    enumerate_supports,
    sample_inputs,
    sample_supports,
    support_weights,
)
from verify.cli import progress as progress_bar
from verify.names import MAX_TASKS


@dataclass
class SupErrorEstimate:
    sup_error: float
    x: np.ndarray  # (I,) where the worst error was seen
    z: np.ndarray  # (M,) the task there
    support: list[int]
    by_stage: dict[str, float]
    task_errors: np.ndarray  # (T,) worst random-stage error per task, for distributions
    n_tasks: int
    tasks_enumerated: bool
    n_evaluations: int
    seconds: float
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(sup_error=self.sup_error, x=self.x.tolist(), z_support=self.support,
                    z_values=[float(self.z[m]) for m in self.support], by_stage=self.by_stage,
                    n_tasks=self.n_tasks, tasks_enumerated=self.tasks_enumerated,
                    n_evaluations=self.n_evaluations, seconds=self.seconds, settings=self.settings)


def task_set(teacher: Hyperteacher, max_tasks: int, rng: np.random.Generator, supports=None):
    """(supports (T, K), z (T, M), enumerated?) with one weight draw per support.

    `supports` restricts the tasks to a given set (a split's held-out side, say); it is
    used whole when it has at most max_tasks rows, else sampled without replacement."""
    if supports is not None:
        supports = np.asarray(supports)
        enumerated = len(supports) <= max_tasks
        if not enumerated:
            supports = supports[np.sort(rng.choice(len(supports), max_tasks, replace=False))]
    elif teacher.n_supports() <= max_tasks:
        enumerated, supports = True, enumerate_supports(teacher.M, teacher.K)
    else:
        enumerated, supports = False, sample_supports(teacher.M, teacher.K, max_tasks, rng)
    z = dense_latents(supports, support_weights(supports, teacher.weights, rng), teacher.M)
    return supports, z, enumerated


def pointwise_error(f, teacher: Hyperteacher, z: torch.Tensor, x: torch.Tensor, encode=None) -> torch.Tensor:
    """‖f(e(z), x) − g(x, z)‖_∞ for each row; e is `encode`, by default the teacher's own."""
    e = (teacher.encode if encode is None else encode)(z)
    out = f(torch.cat([e, x], dim=1))
    return (out - teacher.forward(z, x)).abs().amax(dim=1)


def _chunked_error(f, teacher, z, x, batch_rows, encode=None):
    with torch.no_grad():
        return torch.cat([pointwise_error(f, teacher, z[s:s + batch_rows], x[s:s + batch_rows], encode)
                          for s in range(0, len(x), batch_rows)])


def measure_sup_error(f, teacher: Hyperteacher, *, encode=None, supports=None, max_tasks: int = MAX_TASKS,
                      points_per_task: int = 16, refine_tasks: int = 32, refine_starts: int = 16,
                      refine_steps: int = 100, refine_z: bool = True, grid_points: int | None = None,
                      seed: int = 0, batch_rows: int = 8192,
                      progress: bool | None = None) -> SupErrorEstimate:
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    I, M = teacher.I, teacher.M
    supports, z_tasks, enumerated = task_set(teacher, max_tasks, rng, supports)
    T = len(supports)
    by_stage: dict[str, float] = {}

    # Stage 1: random points on every task, in row chunks that bound the memory.
    P = points_per_task
    task_err = np.zeros(T)
    task_x = np.zeros((T, I))
    tasks_per_chunk = max(1, batch_rows // P)
    bar = progress_bar(T, "random points", progress, unit="task")
    for s in range(0, T, tasks_per_chunk):
        zc = torch.as_tensor(np.repeat(z_tasks[s:s + tasks_per_chunk], P, axis=0))
        xc = torch.as_tensor(sample_inputs(len(zc), I, rng))
        err = _chunked_error(f, teacher, zc, xc, batch_rows, encode).view(-1, P)
        worst, where = err.max(dim=1)
        n = len(worst)
        task_err[s:s + n] = worst.numpy()
        task_x[s:s + n] = xc.view(-1, P, I)[torch.arange(n), where].numpy()
        bar.update(n)
    bar.close()
    n_evals = T * P
    by_stage["random"] = float(task_err.max())
    best = dict(err=by_stage["random"], x=task_x[task_err.argmax()], z=z_tasks[task_err.argmax()])

    def offer(err: torch.Tensor, x: torch.Tensor, z: torch.Tensor, stage: str):
        err = err.detach()
        i = int(err.argmax())
        by_stage[stage] = max(by_stage.get(stage, 0.0), float(err[i]))
        if float(err[i]) > best["err"]:
            best.update(err=float(err[i]), x=x[i].detach().numpy().copy(), z=z[i].detach().numpy().copy())

    top = np.argsort(-task_err)[: min(refine_tasks, T)]

    # Stage 2: projected sign-gradient ascent, tracking the best point on every path.
    if refine_steps > 0 and refine_starts > 0:
        R = len(top) * refine_starts
        task_of_start = np.repeat(top, refine_starts)
        x0 = sample_inputs(R, I, rng)
        x0[::refine_starts] = task_x[top]  # each task's best random point is one start
        x = torch.tensor(x0, requires_grad=True)
        sup = torch.as_tensor(supports[task_of_start])
        active = sup >= 0
        onehot = torch.zeros(R, sup.shape[1], M, dtype=torch.float64)
        onehot[active] = torch.nn.functional.one_hot(sup[active], M).double()
        w0 = torch.as_tensor(z_tasks[task_of_start]).gather(1, sup.clamp(min=0)) * active
        if refine_z:
            # Half the starts leave the family's weight levels for a uniform point of the
            # support's box: an exact level can sit where the error and its gradient vanish.
            fresh = torch.as_tensor(rng.random(R) < 0.5) & (torch.arange(R) % refine_starts != 0)
            w0[fresh] = torch.as_tensor(rng.random((int(fresh.sum()), sup.shape[1]))) * active[fresh]
        w = w0.clone().requires_grad_(refine_z)
        bar = progress_bar(refine_steps, "gradient ascent", progress, unit="step")
        for step in range(refine_steps):
            # Geometric step decay: early large steps hop between the 1/N-scale bumps,
            # late small ones settle on the top of one.
            lr = 0.1 * (1e-4 / 0.1) ** (step / max(refine_steps - 1, 1))
            z = torch.einsum("rk,rkm->rm", w, onehot)
            err = pointwise_error(f, teacher, z, x, encode)
            offer(err, x, z, "refine")
            err.sum().backward()
            with torch.no_grad():
                x += lr * torch.sign(x.grad)
                x.clamp_(-1.0, 1.0)
                x.grad = None
                if refine_z:
                    w += lr * torch.sign(w.grad) * active
                    w.clamp_(0.0, 1.0)
                    w.grad = None
            bar.set_postfix_str(f"sup {best['err']:.3e}", refresh=False)
            bar.update(1)
        bar.close()
        with torch.no_grad():
            z = torch.einsum("rk,rkm->rm", w, onehot)
            offer(pointwise_error(f, teacher, z, x, encode), x, z, "refine")
        n_evals += R * (refine_steps + 1)

    # Stage 3: a grid over x on the worst tasks, when the box is low-dimensional.
    if I <= 2:
        g = grid_points or (4097 if I == 1 else 257)
        axis = torch.linspace(-1.0, 1.0, g, dtype=torch.float64)
        grid = torch.cartesian_prod(*[axis] * I).view(-1, I)
        # The best z found so far (the ascent may have moved it off the family's levels)
        # first, then the worst tasks as drawn.
        candidates = [np.asarray(best["z"])] + [z_tasks[t] for t in top[: min(len(top), 8)]]
        for z_grid in candidates:
            zt = torch.as_tensor(z_grid).expand(len(grid), M)
            offer(_chunked_error(f, teacher, zt, grid, batch_rows, encode), grid, zt, "grid")
            n_evals += len(grid)

    support = [int(m) for m in np.flatnonzero(best["z"])]
    settings = dict(max_tasks=max_tasks, points_per_task=P, refine_tasks=refine_tasks,
                    refine_starts=refine_starts, refine_steps=refine_steps, refine_z=refine_z,
                    seed=seed)
    return SupErrorEstimate(sup_error=best["err"], x=np.asarray(best["x"]), z=np.asarray(best["z"]),
                            support=support, by_stage=by_stage, task_errors=task_err, n_tasks=T,
                            tasks_enumerated=enumerated, n_evaluations=n_evals,
                            seconds=time.perf_counter() - start, settings=settings)


def fraction_of(value: float, bound: float) -> float:
    return value / bound if bound > 0 else math.inf
