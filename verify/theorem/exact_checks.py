"""Measurements for the exact construction: its error on every task of the finite family,
and where it stops being exact (z between the weight levels, x off the box, more than K
active modules). They live in verify/theorem/ because they use the measurer; the task lists and
the input points they draw are in constructions/exact.py."""

from __future__ import annotations

import time

import numpy as np
import torch

from constructions.exact import ExactConstruction, enumerate_level_tasks, task_points
from constructions.tasks.hyperteacher import Hyperteacher, dense_latents, sample_inputs, support_weights
from theory.exact import n_level_tasks
from verify.theorem.measure import measure_sup_error, pointwise_error
from verify.theorem.presets import MAX_TASKS


def exact_task_errors(net: ExactConstruction, teacher: Hyperteacher, z_tasks: np.ndarray,
                      points_per_task: int, rng: np.random.Generator, *, f=None, encode=None,
                      spread: float = 1.0, batch_rows: int = 4096) -> np.ndarray:
    """Max over `points_per_task` x (see task_points) of ‖f(e(z), x) − g(x, z)‖_∞, per task.
    f defaults to the structured evaluator; pass the nn.Sequential to measure it instead."""
    f = net if f is None else f
    out = np.empty(len(z_tasks))
    tasks_per_chunk = max(1, batch_rows // points_per_task)
    with torch.no_grad():
        for s in range(0, len(z_tasks), tasks_per_chunk):
            zc = z_tasks[s: s + tasks_per_chunk]
            x = torch.as_tensor(task_points(net, zc, points_per_task, rng, spread))
            z = torch.as_tensor(np.repeat(zc, points_per_task, axis=0))
            err = pointwise_error(f, teacher, z, x, encode).view(len(zc), points_per_task)
            out[s: s + len(zc)] = err.amax(dim=1).numpy()
    return out


def off_task_set_errors(net: ExactConstruction, teacher: Hyperteacher, rng: np.random.Generator, *,
                        n_tasks: int = 2000, points: int = 8, spreads=None,
                        refine: dict | None = None) -> dict:
    """Where exactness stops, measured. Returns a JSON-able dict:
    - z_uniform / z_continuous: z uniform on a random support in [0,1] (off the levels), or drawn
      as the `continuous` family does ([0.5, 1]); max and mean error next to the teacher's
      output scale (max and RMS |g| on the same points);
    - z_refined_sup: measure_sup_error with refine_z=True (gradient ascent over Z_K);
    - exact_radius ρ: the network is exact for x ∈ [−ρ, ρ]^I (ρ ≥ 1, > 1 with a-priori ranges);
    - x_off_box: level tasks with x in [-s, s]^I for s in `spreads` (default 1.1, 1.5, 2 and
      ρ·(1, 1.1, 1.5, 2)): max error and the fraction of points > 1e-12 (fraction_above_1e_12);
    - supports_above_K: level tasks with K < |S| ≤ min(M, 2K), x in the box."""
    M, K, I = net.M, net.K, net.I
    levels = [float(v) for v in net.code.V[1:]]

    def scored(z, x):
        z, x = torch.as_tensor(z), torch.as_tensor(x)
        with torch.no_grad():
            err = pointwise_error(net, teacher, z, x)
            g = teacher.forward(z, x).abs()
        return dict(max_error=float(err.max()), mean_error=float(err.mean()),
                    teacher_max=float(g.max()), teacher_rms=float(g.pow(2).mean().sqrt()),
                    fraction_above_1e_12=float((err > 1e-12).double().mean()))

    out: dict = {}
    supports = enumerate_level_tasks(M, K, [1.0], n_tasks, rng)[:n_tasks] > 0  # random supports
    supports = np.repeat(supports, points, axis=0)
    x = sample_inputs(len(supports), I, rng)
    out["z_uniform"] = scored(supports * rng.random(supports.shape), x)
    cont = np.zeros(supports.shape)
    for row, s in enumerate(supports):
        idx = np.flatnonzero(s)
        padded = np.full((1, K), -1)
        padded[0, : len(idx)] = idx
        cont[row] = dense_latents(padded, support_weights(padded, "continuous", rng), M)[0]
    out["z_continuous"] = scored(cont, x)
    refine = dict(max_tasks=200, points_per_task=8, refine_tasks=8, refine_starts=8, refine_steps=40) | (
        refine or {})
    est = measure_sup_error(net, teacher, refine_z=True, seed=int(rng.integers(2**31)), **refine)
    out["z_refined_sup"] = dict(sup_error=est.sup_error, z_values=[float(est.z[m]) for m in est.support])

    z_levels = enumerate_level_tasks(M, K, levels, n_tasks, rng)
    out["exact_radius"] = net.radius
    out["x_off_box"] = {}
    if spreads is None:
        spreads = (1.1, 1.5, 2.0, *(net.radius * f for f in (1.0, 1.1, 1.5, 2.0)))
    for s in spreads:
        z = np.repeat(z_levels, points, axis=0)
        out["x_off_box"][f"{s:.4g}"] = scored(z, task_points(net, z_levels, points, rng, spread=s))
    if M > K:
        big = np.zeros((n_tasks, M))
        for row in range(n_tasks):
            k = int(rng.integers(K + 1, min(M, 2 * K) + 1))
            big[row, rng.choice(M, k, replace=False)] = rng.choice(levels, k)
        z = np.repeat(big, points, axis=0)
        out["supports_above_K"] = scored(z, task_points(net, big, points, rng))
    return out


def every_level_task(net, f, teacher, measure: dict, seed: int) -> dict:
    """The exact construction's error on every task of the finite family (supports × weight
    levels), or on a sample of max_tasks of them: the random stage of the measurer draws one
    level assignment per support only."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed + 3)
    max_tasks = measure.get("max_tasks", MAX_TASKS)
    total = n_level_tasks(net.M, net.K, len(teacher.weight_values))
    z = enumerate_level_tasks(net.M, net.K, teacher.weight_values, max_tasks, rng)
    errors = exact_task_errors(net, teacher, z, measure.get("points_per_task", 16), rng, f=f)
    return dict(max_error=float(errors.max()), n_tasks=len(z), of=total, enumerated=len(z) == total,
                seconds=time.perf_counter() - start)
