"""Estimate sup over x ∈ [-1,1]^I and tasks z of ‖f(e(z), x) − g(x, z)‖_∞ for any network f.

A sup cannot be sampled, only bounded from below. Four stages push the estimate up:
1. random points on every support (enumerated when there are few enough, else a
   stratified sample), which ranks the tasks;
2. projected sign-gradient ascent from the worst points of the worst tasks, over x in
   the box and, with `refine_z`, over the support's weights in [0, 1], so the search
   covers the theorem's whole task set Z_K rather than the family's weight levels;
3. coordinate-wise line searches over x and the support's weights, from the ends of the
   ascent's paths and from uniform points of the worst tasks, in rounds that keep the best
   starts and search them harder. The error of a construction is a field of sharp peaks
   (one where the knots of many products line up), and a gradient stops on the first it
   climbs; a line across a coordinate's whole range looks past them. Their budget grows
   as an evaluation gets cheaper (see LINE_BOOST), so a small network, with a few tasks
   but a landscape no less rugged, is searched as hard as a large one;
4. for I ≤ 2, a dense grid over x on the worst tasks and on the line searches' best z.
The estimate is the largest error seen anywhere, with the (x, z) where it was seen.
`f` is any callable from a float64 (B, M_e + I) tensor to (B, O): the construction,
its dense nn.Sequential, or an SGD-trained MLP.
"""

from __future__ import annotations

import itertools
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

# The line searches (stage 3). Their budget is the ascent's evaluations times
# min(LINE_BOOST, LINE_NUMBERS / numbers_read(f, teacher)): about the ascent's for the
# default network (M = 32, I = H = 16, ~18,000 numbers), LINE_BOOST times for a small one
# (≤ 512 numbers), whose evaluations are cheap but whose (x, z) landscape is no less rugged.
LINE_BOOST = 32
LINE_NUMBERS = 2**14
# (sweeps, points of the grid over a coordinate's whole range, of the local grid) per round
LINE_ROUNDS = ((1, 65, 9), (2, 129, 17), (3, 257, 33), (6, 1025, 129))
LINE_KEEP = 4  # each round searches the best 1/LINE_KEEP of the previous one's starts
LINE_RADIUS = 0.05  # the local grid's half-width, as a fraction of the range, halved every sweep
LINE_OVERSAMPLE = 8  # uniform points drawn for each start of the first round
LINE_POOL = 2**11  # starts of the first round, at most
# Evaluations per start and coordinate, over all rounds.
LINE_COST = sum(s * (g + loc) / LINE_KEEP**r for r, (s, g, loc) in enumerate(LINE_ROUNDS))
# The dense grid over x (I ≤ 2) covers GRID_TASKS + 1 z's, or as many as GRID_ROWS rows hold.
GRID_TASKS = 8
GRID_ROWS = 2**17


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
                          for s in range(0, len(x), batch_rows)] or [torch.zeros(0, dtype=torch.float64)])


def measure_sup_error(f, teacher: Hyperteacher, *, encode=None, supports=None, max_tasks: int = MAX_TASKS,
                      points_per_task: int = 16, refine_tasks: int = 32, refine_starts: int = 16,
                      refine_steps: int = 100, refine_z: bool = True, grid_points: int | None = None,
                      seed: int = 0, batch_rows: int = 8192,
                      progress: bool | None = None) -> SupErrorEstimate:
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    I, M = teacher.I, teacher.M
    supports, z_tasks, enumerated = task_set(teacher, max_tasks, rng, supports)
    T, K = supports.shape
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
        if err.numel() == 0:
            return
        i = int(err.argmax())
        by_stage[stage] = max(by_stage.get(stage, 0.0), float(err[i]))
        if float(err[i]) > best["err"]:
            best.update(err=float(err[i]), x=x[i].detach().numpy().copy(), z=z[i].detach().numpy().copy())

    def error_at(sup: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return _chunked_error(f, teacher, _latents(sup, w, M), x, batch_rows, encode)

    top = np.argsort(-task_err)[: min(refine_tasks, T)]
    polished: list[np.ndarray] = []  # the line searches' best z, for the grid

    # Stage 2: projected sign-gradient ascent, tracking the best point on every path.
    if refine_steps > 0 and refine_starts > 0 and len(top) > 0:
        # refine_tasks × refine_starts paths in all, however few tasks there are: a family
        # with few tasks has an (x, z) space no smaller than one with many.
        per_task = -(-refine_tasks * refine_starts // len(top))
        R = len(top) * per_task
        task_of_path = np.repeat(top, per_task)
        x0 = sample_inputs(R, I, rng)
        x0[::per_task] = task_x[top]  # each task's best random point is one start
        x = torch.tensor(x0, requires_grad=True)
        sup = torch.as_tensor(supports[task_of_path])
        active = sup >= 0
        onehot = torch.zeros(R, K, M, dtype=torch.float64)
        onehot[active] = torch.nn.functional.one_hot(sup[active], M).double()
        w0 = torch.as_tensor(z_tasks[task_of_path]).gather(1, sup.clamp(min=0)) * active
        if refine_z:
            # Half the starts leave the family's weight levels for a uniform point of the
            # support's box: an exact level can sit where the error and its gradient vanish.
            fresh = torch.as_tensor(rng.random(R) < 0.5) & (torch.arange(R) % per_task != 0)
            w0[fresh] = torch.as_tensor(rng.random((int(fresh.sum()), K))) * active[fresh]
        w = w0.clone().requires_grad_(refine_z)
        path_err = torch.full((R,), -1.0, dtype=torch.float64)
        path_x, path_w = x0.copy(), w0.numpy().copy()
        bar = progress_bar(refine_steps, "gradient ascent", progress, unit="step")
        for step in range(refine_steps + 1):
            last = step == refine_steps  # the last point is scored, not moved
            with torch.set_grad_enabled(not last):
                z = torch.einsum("rk,rkm->rm", w, onehot)
                err = pointwise_error(f, teacher, z, x, encode)
            offer(err, x, z, "refine")
            better = (err.detach() > path_err).numpy()
            path_err = torch.maximum(path_err, err.detach())
            path_x[better], path_w[better] = x.detach().numpy()[better], w.detach().numpy()[better]
            if last:
                break
            err.sum().backward()
            # Geometric step decay: early large steps hop between the 1/N-scale bumps,
            # late small ones settle on the top of one.
            lr = 0.1 * (1e-4 / 0.1) ** (step / max(refine_steps - 1, 1))
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
        n_evals += R * (refine_steps + 1)

        # Stage 3: coordinate-wise line searches. The error is a field of sharp peaks, one
        # per alignment of the knots of many products, and the ascent stops on the first it
        # climbs; a line search along each coordinate of x and of the support's weights
        # looks across the peaks on that line. Its pool of starts is the ends of the paths
        # and uniform points of the worst tasks' (x, z) boxes; each round keeps the best
        # 1/LINE_KEEP of the last one's starts and searches them harder.
        d = I + (K if refine_z else 0)
        budget = R * (refine_steps + 1) * min(LINE_BOOST, LINE_NUMBERS / max(numbers_read(f, teacher), 1))
        pool = max(1, min(LINE_POOL, int(budget // (d * LINE_COST + LINE_OVERSAMPLE))))
        n_fresh = max(0, LINE_OVERSAMPLE * pool - R)
        task_of_fresh = top[np.arange(n_fresh) % len(top)]
        fresh_sup = torch.as_tensor(supports[task_of_fresh])
        fresh_x = torch.as_tensor(sample_inputs(n_fresh, I, rng))
        # Uniform weights over Z_K, or (levels only) fresh draws of the family's own weights.
        fresh_w = torch.as_tensor(rng.random((n_fresh, K)) if refine_z
                                  else support_weights(supports[task_of_fresh], teacher.weights, rng))
        fresh_w = fresh_w * (fresh_sup >= 0)
        fresh_err = error_at(fresh_sup, fresh_x, fresh_w)
        n_evals += n_fresh
        lsup, lx, lw = torch.cat([sup, fresh_sup]), torch.cat([torch.as_tensor(path_x), fresh_x]), \
            torch.cat([torch.as_tensor(path_w), fresh_w])
        lerr, ltask = torch.cat([path_err, fresh_err]), np.concatenate([task_of_path, task_of_fresh])
        offer(fresh_err, fresh_x, _latents(fresh_sup, fresh_w, M), "refine")
        for round_, (sweeps, grid, local) in enumerate(LINE_ROUNDS):
            n_starts = pool // LINE_KEEP**round_
            if n_starts == 0:  # a small pool stops early: its budget is spent
                break
            keep = _spread_over_tasks(lerr.numpy(), ltask, n_starts)
            lsup, lx, lw, ltask = lsup[keep], lx[keep], lw[keep], ltask[keep]
            if round_ == 0 and refine_z:  # and one with every weight at 1: the family's largest task
                lw = torch.cat([lw, (lsup[:1] >= 0).double()])
                lsup, lx = torch.cat([lsup, lsup[:1]]), torch.cat([lx, lx[:1]])
                ltask = np.append(ltask, ltask[0])
            lerr, lx, lw, evals = _line_search(error_at, lsup, lx, lw, refine_z, sweeps, grid, local)
            n_evals += evals
            offer(lerr, lx, _latents(lsup, lw, M), "refine")
        zl = _latents(lsup, lw, M)
        polished = [zl[i].numpy() for i in torch.argsort(-lerr)[:GRID_TASKS]]

    # Stage 4: a grid over x on the worst tasks, when the box is low-dimensional.
    if I <= 2:
        g = grid_points or (4097 if I == 1 else 257)
        axis = torch.linspace(-1.0, 1.0, g, dtype=torch.float64)
        grid = torch.cartesian_prod(*[axis] * I).view(-1, I)
        # The best z found so far (the ascent may have moved it off the family's levels)
        # first, then the line searches' best, then the worst tasks as drawn.
        candidates = [np.asarray(best["z"]), *polished[: GRID_TASKS // 2], *z_tasks[top[:GRID_TASKS]]]
        n_z = min(GRID_TASKS + 1, max(1, GRID_ROWS // len(grid)))  # the line searches cover the rest
        for z_grid in _distinct(candidates)[:n_z]:
            zt = torch.as_tensor(z_grid).expand(len(grid), M)
            offer(_chunked_error(f, teacher, zt, grid, batch_rows, encode), grid, zt, "grid")
            n_evals += len(grid)

    support = [int(m) for m in np.flatnonzero(best["z"])]
    settings = dict(max_tasks=max_tasks, points_per_task=points_per_task, refine_tasks=refine_tasks,
                    refine_starts=refine_starts, refine_steps=refine_steps, refine_z=refine_z,
                    seed=seed)
    return SupErrorEstimate(sup_error=best["err"], x=np.asarray(best["x"]), z=np.asarray(best["z"]),
                            support=support, by_stage=by_stage, task_errors=task_err, n_tasks=T,
                            tasks_enumerated=enumerated, n_evaluations=n_evals,
                            seconds=time.perf_counter() - start, settings=settings)


def numbers_read(f, teacher) -> int:
    """How many numbers one evaluation of the error reads: f's parameters and buffers (0 for
    a plain callable) and the teacher's arrays. It stands for the cost of an evaluation."""
    own = sum(t.numel() for t in itertools.chain(f.parameters(), f.buffers())) \
        if isinstance(f, torch.nn.Module) else 0
    arrays = [v for v in vars(teacher).values() if isinstance(v, (np.ndarray, tuple))]
    return own + sum(np.size(a) for v in arrays for a in (v if isinstance(v, tuple) else (v,)))


def _latents(sup: torch.Tensor, w: torch.Tensor, M: int) -> torch.Tensor:
    """Dense z (B, M) from supports (B, K), padded with -1, and their weights (B, K)."""
    return torch.zeros(len(sup), M, dtype=torch.float64).scatter_add_(1, sup.clamp(min=0), w * (sup >= 0))


def _spread_over_tasks(err: np.ndarray, task: np.ndarray, n: int) -> np.ndarray:
    """The n rows of largest error, at most an equal share of them from any one task, so
    the search keeps looking at several tasks while there are several."""
    share = -(-n // len(np.unique(task)))
    taken: dict[int, int] = {}
    chosen = []
    for r in np.argsort(-err, kind="stable"):
        t = int(task[r])
        if taken.get(t, 0) < share:
            taken[t] = taken.get(t, 0) + 1
            chosen.append(r)
            if len(chosen) == n:
                break
    return np.asarray(chosen)


def _line_search(error_at, sup: torch.Tensor, x: torch.Tensor, w: torch.Tensor, refine_z: bool,
                 sweeps: int, grid: int, local: int):
    """Coordinate-wise line searches from each row of (support, x, w), error_at(sup, x, w) the
    error there: along every x_i and (refine_z) every active weight w_k, `grid` points over
    the coordinate's whole range and `local` points around its current value, moving to
    the best; the local radius halves every sweep. Returns (errors, x, w, evaluations)."""
    I, K = x.shape[1], w.shape[1]
    coords = [("x", i) for i in range(I)] + ([("w", k) for k in range(K)] if refine_z else [])
    x, w = x.clone(), w.clone()
    err = error_at(sup, x, w)
    evals = len(x)
    span = {"x": (-1.0, 1.0), "w": (0.0, 1.0)}
    steps = torch.linspace(-1.0, 1.0, local, dtype=torch.float64)
    for sweep in range(sweeps):
        radius = LINE_RADIUS * 0.5**sweep
        for kind, j in coords:
            lo, hi = span[kind]
            rows = torch.arange(len(x)) if kind == "x" else torch.nonzero(sup[:, j] >= 0).flatten()
            if len(rows) == 0:
                continue
            v = (x if kind == "x" else w)[rows, j]
            cand = torch.cat([torch.linspace(lo, hi, grid, dtype=torch.float64).expand(len(rows), -1),
                              (v[:, None] + (hi - lo) * radius * steps).clamp(lo, hi)], dim=1)
            C = cand.shape[1]
            xs, ws = x[rows].repeat_interleave(C, 0), w[rows].repeat_interleave(C, 0)
            (xs if kind == "x" else ws)[:, j] = cand.reshape(-1)
            e = error_at(sup[rows].repeat_interleave(C, 0), xs, ws).view(len(rows), C)
            evals += len(rows) * C
            e_best, arg = e.max(dim=1)
            move = e_best > err[rows]
            (x if kind == "x" else w)[rows[move], j] = cand[move, arg[move]]
            err[rows] = torch.maximum(err[rows], e_best)
    return err, x, w, evals


def _distinct(zs: list[np.ndarray]) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for z in zs:
        if not any(np.array_equal(z, o) for o in out):
            out.append(z)
    return out


def fraction_of(value: float, bound: float) -> float:
    return value / bound if bound > 0 else math.inf
