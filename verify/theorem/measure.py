"""Estimate sup over x ∈ [-1,1]^I and tasks z of ‖f(e(z), x) − g(x, z)‖_∞ for any network f.

A sup cannot be sampled, only bounded from below. Four stages push the estimate up, one
function each, sharing one BestPoint (the worst point seen, the stage that found it, the
evaluations each stage spent); one MeasureBudget (verify.presets, with every preset) says
what each stage may spend, and a stage whose budget is 0 is skipped alone:
1. random points (`random_stage`) on every support (enumerated when there are few enough,
   else a stratified sample), which ranks the tasks;
2. projected sign-gradient ascent (`ascent_stage`) from the worst points of the worst
   tasks, over x in the box and, with `refine_z`, over the support's weights in [0, 1], so
   the search covers the theorem's whole task set Z_K rather than the family's levels;
3. coordinate-wise line searches (`line_search_stage`) over x and the support's weights,
   from the ends of the ascent's paths (without an ascent, the random stage's best points)
   and from uniform points of the worst tasks, in rounds that keep the best starts and
   search them harder. The error of a construction is a field of sharp peaks (one where
   the knots of many products line up), and a gradient stops on the first it climbs; a
   line across a coordinate's whole range looks past them. Their budget grows as an
   evaluation gets cheaper (see LINE_BOOST), so a small network, with a few tasks but a
   landscape no less rugged, is searched as hard as a large one;
4. for I ≤ 2, a dense grid over x (`grid_stage`) on the worst tasks and on the line
   searches' best z.
The estimate is the largest error seen anywhere, with the (x, z) where it was seen.
`f` is any callable from a float64 (B, M_e + I) tensor to (B, O): the construction,
its dense nn.Sequential, or an SGD-trained MLP (a student that reads a task's samples as
one sequence is measured through verify.metrics.sup_error).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace

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
from verify.theorem.presets import DEFAULT_LINE_EVALUATIONS, DEFAULT_MEASURE, MeasureBudget

# The line searches (stage 3). Their budget is MeasureBudget.line_evaluations (by default
# the ascent's evaluations) times min(LINE_BOOST, LINE_NUMBERS / numbers_read(f, teacher)):
# about the ascent's for the default network (M = 32, I = H = 16, ~18,000 numbers),
# LINE_BOOST times for a small one (≤ 512 numbers), whose evaluations are cheap but whose
# (x, z) landscape is no less rugged.
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
    found_by: str = "random"  # the stage that found the worst point (see STAGES)
    evaluations_by_stage: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(sup_error=self.sup_error, x=self.x.tolist(), z_support=self.support,
                    z_values=[float(self.z[m]) for m in self.support], by_stage=self.by_stage,
                    n_tasks=self.n_tasks, tasks_enumerated=self.tasks_enumerated,
                    n_evaluations=self.n_evaluations, seconds=self.seconds, settings=self.settings,
                    found_by=self.found_by, evaluations_by_stage=self.evaluations_by_stage)


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


# The stages, in the order they run, and the key each reports its largest error under in
# `by_stage` (the ascent and the line searches share "refine", the key reports have always used).
STAGES = {"random": "random", "ascent": "refine", "line search": "refine", "grid": "grid"}


class BestPoint:
    """The worst point seen so far, shared by every stage: its error (`value`), where it
    is (x, z), which stage found it; and per stage, the largest error seen and the
    evaluations spent."""

    def __init__(self):
        self.value, self.x, self.z, self.stage = -math.inf, None, None, None
        self.by_stage: dict[str, float] = {}
        self.evaluations: dict[str, int] = {}

    def count(self, stage: str, n: int) -> None:
        self.evaluations[stage] = self.evaluations.get(stage, 0) + n

    def offer(self, err: torch.Tensor, x: torch.Tensor, z: torch.Tensor, stage: str) -> None:
        """Rows (err, x, z) a stage has evaluated; the first of the largest is kept if it
        beats the best so far (a tie keeps the earlier stage's point)."""
        err = err.detach()
        if err.numel() == 0:
            return
        i = int(err.argmax())
        key = STAGES[stage]
        self.by_stage[key] = max(self.by_stage.get(key, 0.0), float(err[i]))
        if float(err[i]) > self.value:
            self.value, self.stage = float(err[i]), stage
            self.x = np.asarray(x[i].detach()).copy()
            self.z = np.asarray(z[i].detach()).copy()

    @property
    def n_evaluations(self) -> int:
        return sum(self.evaluations.values())


@dataclass
class Objective:
    """The error ‖f(e(z), x) − g(x, z)‖_∞ of one network against one teacher, evaluated in
    row chunks that bound the memory; every evaluation is counted to the stage that asks."""

    f: object
    teacher: Hyperteacher
    encode: object
    batch_rows: int
    best: BestPoint

    def __call__(self, z: torch.Tensor, x: torch.Tensor, stage: str) -> torch.Tensor:
        self.best.count(stage, len(x))
        return _chunked_error(self.f, self.teacher, z, x, self.batch_rows, self.encode)

    def with_grad(self, z: torch.Tensor, x: torch.Tensor, stage: str) -> torch.Tensor:
        self.best.count(stage, len(x))
        return pointwise_error(self.f, self.teacher, z, x, self.encode)

    def on_support(self, sup: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stage: str) -> torch.Tensor:
        """The error at supports sup (B, K), padded with -1, with weights w (B, K)."""
        return self(_latents(sup, w, self.teacher.M), x, stage)


@dataclass
class Starts:
    """Points the later stages start from: support (R, K), x (R, I), the support's weights
    w (R, K), the error there and the index of the task each came from."""

    sup: torch.Tensor
    x: torch.Tensor
    w: torch.Tensor
    err: torch.Tensor
    task: np.ndarray


@dataclass
class Tasks:
    """The task set (supports (T, K), z (T, M)), with what the random stage found on each:
    its worst error and the x there, and the indices of the worst tasks, worst first."""

    supports: np.ndarray
    z: np.ndarray
    enumerated: bool
    err: np.ndarray
    x: np.ndarray
    top: np.ndarray

    def starts(self, tasks: np.ndarray) -> Starts:
        """Each task's worst random point, as a start."""
        sup = torch.as_tensor(self.supports[tasks])
        w = torch.as_tensor(self.z[tasks]).gather(1, sup.clamp(min=0)) * (sup >= 0)
        return Starts(sup, torch.as_tensor(self.x[tasks]), w, torch.as_tensor(self.err[tasks]), tasks)


def measure_sup_error(f, teacher: Hyperteacher, *, budget: MeasureBudget = DEFAULT_MEASURE, encode=None,
                      supports=None, refine_z: bool = True, seed: int = 0, batch_rows: int = 8192,
                      progress: bool | None = None, **budget_fields) -> SupErrorEstimate:
    """The largest error found by the four stages (see the module docstring), each given
    its share of `budget`. `budget_fields` (max_tasks=…, refine_steps=…, any field of
    MeasureBudget) replace the budget's own; `refine_z` lets the later stages move the
    support's weights over [0, 1] (Z_K) instead of keeping the family's levels."""
    start = time.perf_counter()
    budget = replace(budget, **budget_fields)
    rng = np.random.default_rng(seed)
    best = BestPoint()
    error = Objective(f, teacher, encode, batch_rows, best)
    tasks = random_stage(error, teacher, budget, rng, supports, progress)
    ends = ascent_stage(error, tasks, budget, refine_z, rng, progress)
    polished = line_search_stage(error, tasks, ends, budget, refine_z, rng)
    grid_stage(error, tasks, polished, budget)

    settings = dict(max_tasks=budget.max_tasks, points_per_task=budget.points_per_task,
                    refine_tasks=budget.refine_tasks, refine_starts=budget.refine_starts,
                    refine_steps=budget.refine_steps, refine_z=refine_z, seed=seed,
                    line_evaluations=budget.line_evaluations, grid_points=budget.grid_points)
    return SupErrorEstimate(sup_error=best.value, x=best.x, z=best.z,
                            support=[int(m) for m in np.flatnonzero(best.z)], by_stage=best.by_stage,
                            task_errors=tasks.err, n_tasks=len(tasks.supports),
                            tasks_enumerated=tasks.enumerated, n_evaluations=best.n_evaluations,
                            seconds=time.perf_counter() - start, settings=settings, found_by=best.stage,
                            evaluations_by_stage=dict(best.evaluations))


def random_stage(error: Objective, teacher: Hyperteacher, budget: MeasureBudget, rng: np.random.Generator,
                 supports, progress) -> Tasks:
    """Stage 1: points_per_task random x on every task, in row chunks; it ranks the tasks."""
    supports, z_tasks, enumerated = task_set(teacher, budget.max_tasks, rng, supports)
    T, P, I = len(supports), budget.points_per_task, teacher.I
    task_err, task_x = np.zeros(T), np.zeros((T, I))
    tasks_per_chunk = max(1, error.batch_rows // P)
    bar = progress_bar(T, "random points", progress, unit="task")
    for s in range(0, T, tasks_per_chunk):
        zc = torch.as_tensor(np.repeat(z_tasks[s:s + tasks_per_chunk], P, axis=0))
        xc = torch.as_tensor(sample_inputs(len(zc), I, rng))
        worst, where = error(zc, xc, "random").view(-1, P).max(dim=1)
        n = len(worst)
        task_err[s:s + n] = worst.numpy()
        task_x[s:s + n] = xc.view(-1, P, I)[torch.arange(n), where].numpy()
        bar.update(n)
    bar.close()
    error.best.offer(torch.as_tensor(task_err), torch.as_tensor(task_x), torch.as_tensor(z_tasks), "random")
    top = np.argsort(-task_err)[: min(budget.refine_tasks, T)]
    return Tasks(supports, z_tasks, enumerated, task_err, task_x, top)


def ascent_stage(error: Objective, tasks: Tasks, budget: MeasureBudget, refine_z: bool,
                 rng: np.random.Generator, progress) -> Starts | None:
    """Stage 2: projected sign-gradient ascent from the worst tasks, over x in the box and
    (refine_z) the support's weights in [0, 1]. Returns the best point of every path, or
    None when the budget has no ascent."""
    top, steps = tasks.top, budget.refine_steps
    if steps == 0 or budget.refine_starts == 0 or len(top) == 0:
        return None
    I, K, M = tasks.x.shape[1], tasks.supports.shape[1], tasks.z.shape[1]
    # refine_tasks × refine_starts paths in all, however few tasks there are: a family
    # with few tasks has an (x, z) space no smaller than one with many.
    per_task = -(-budget.refine_tasks * budget.refine_starts // len(top))
    R = len(top) * per_task
    task_of_path = np.repeat(top, per_task)
    x0 = sample_inputs(R, I, rng)
    x0[::per_task] = tasks.x[top]  # each task's best random point is one start
    x = torch.tensor(x0, requires_grad=True)
    sup = torch.as_tensor(tasks.supports[task_of_path])
    active = sup >= 0
    onehot = torch.zeros(R, K, M, dtype=torch.float64)
    onehot[active] = torch.nn.functional.one_hot(sup[active], M).double()
    w0 = torch.as_tensor(tasks.z[task_of_path]).gather(1, sup.clamp(min=0)) * active
    if refine_z:
        # Half the starts leave the family's weight levels for a uniform point of the
        # support's box: an exact level can sit where the error and its gradient vanish.
        fresh = torch.as_tensor(rng.random(R) < 0.5) & (torch.arange(R) % per_task != 0)
        w0[fresh] = torch.as_tensor(rng.random((int(fresh.sum()), K))) * active[fresh]
    w = w0.clone().requires_grad_(refine_z)
    path_err = torch.full((R,), -1.0, dtype=torch.float64)
    path_x, path_w = x0.copy(), w0.numpy().copy()
    bar = progress_bar(steps, "gradient ascent", progress, unit="step")
    for step in range(steps + 1):
        last = step == steps  # the last point is scored, not moved
        with torch.set_grad_enabled(not last):
            z = torch.einsum("rk,rkm->rm", w, onehot)
            err = error.with_grad(z, x, "ascent")
        error.best.offer(err, x, z, "ascent")
        better = (err.detach() > path_err).numpy()
        path_err = torch.maximum(path_err, err.detach())
        path_x[better], path_w[better] = x.detach().numpy()[better], w.detach().numpy()[better]
        if last:
            break
        err.sum().backward()
        # Geometric step decay: early large steps hop between the 1/N-scale bumps,
        # late small ones settle on the top of one.
        lr = 0.1 * (1e-4 / 0.1) ** (step / max(steps - 1, 1))
        with torch.no_grad():
            x += lr * torch.sign(x.grad)
            x.clamp_(-1.0, 1.0)
            x.grad = None
            if refine_z:
                w += lr * torch.sign(w.grad) * active
                w.clamp_(0.0, 1.0)
                w.grad = None
        bar.set_postfix_str(f"sup {error.best.value:.3e}", refresh=False)
        bar.update(1)
    bar.close()
    return Starts(sup, torch.as_tensor(path_x), torch.as_tensor(path_w), path_err, task_of_path)


def line_budget(error: Objective, budget: MeasureBudget) -> float:
    """The line searches' evaluations: the budget's (None: what the ascent spent, or with
    the ascent off the default ascent's), times min(LINE_BOOST, LINE_NUMBERS / the numbers
    one evaluation reads)."""
    base = budget.line_evaluations
    if base is None:
        base = error.best.evaluations.get("ascent", 0) or DEFAULT_LINE_EVALUATIONS
    return base * min(LINE_BOOST, LINE_NUMBERS / max(numbers_read(error.f, error.teacher), 1))


def line_search_stage(error: Objective, tasks: Tasks, ends: Starts | None, budget: MeasureBudget,
                      refine_z: bool, rng: np.random.Generator) -> list[np.ndarray]:
    """Stage 3: coordinate-wise line searches. The error is a field of sharp peaks, one per
    alignment of the knots of many products, and the ascent stops on the first it climbs;
    a line search along each coordinate of x and of the support's weights looks across the
    peaks on that line. Its pool of starts is the ascent's path ends (without an ascent, the
    worst tasks' best random points) and uniform points of the worst tasks' (x, z) boxes;
    each round keeps the best 1/LINE_KEEP of the last one's starts and searches them harder.
    Returns the best z found, worst first (at most GRID_TASKS), for the grid."""
    top = tasks.top
    if budget.line_evaluations == 0 or len(top) == 0:
        return []
    K, M = tasks.supports.shape[1], tasks.z.shape[1]
    given = ends if ends is not None else tasks.starts(top)
    d = tasks.x.shape[1] + (K if refine_z else 0)
    pool = max(1, min(LINE_POOL, int(line_budget(error, budget) // (d * LINE_COST + LINE_OVERSAMPLE))))
    fresh = uniform_starts(error, tasks, max(0, LINE_OVERSAMPLE * pool - len(given.x)), refine_z, rng)
    error.best.offer(fresh.err, fresh.x, _latents(fresh.sup, fresh.w, M), "line search")
    s = Starts(torch.cat([given.sup, fresh.sup]), torch.cat([given.x, fresh.x]),
               torch.cat([given.w, fresh.w]), torch.cat([given.err, fresh.err]),
               np.concatenate([given.task, fresh.task]))
    for round_, (sweeps, grid, local) in enumerate(LINE_ROUNDS):
        n_starts = pool // LINE_KEEP**round_
        if n_starts == 0:  # a small pool stops early: its budget is spent
            break
        keep = _spread_over_tasks(s.err.numpy(), s.task, n_starts)
        s = Starts(s.sup[keep], s.x[keep], s.w[keep], s.err[keep], s.task[keep])
        if round_ == 0 and refine_z:  # and one with every weight at 1: the family's largest task
            s = Starts(torch.cat([s.sup, s.sup[:1]]), torch.cat([s.x, s.x[:1]]),
                       torch.cat([s.w, (s.sup[:1] >= 0).double()]), s.err, np.append(s.task, s.task[0]))
        err, x, w = _line_search(error, s.sup, s.x, s.w, refine_z, sweeps, grid, local)
        s = Starts(s.sup, x, w, err, s.task)
        error.best.offer(err, x, _latents(s.sup, w, M), "line search")
    z = _latents(s.sup, s.w, M)
    return [z[i].numpy() for i in torch.argsort(-s.err)[:GRID_TASKS]]


def uniform_starts(error: Objective, tasks: Tasks, n: int, refine_z: bool,
                   rng: np.random.Generator) -> Starts:
    """n uniform points of the worst tasks' boxes, taken in turn: x uniform, the weights
    uniform over Z_K or (levels only) fresh draws of the family's own weights."""
    task = tasks.top[np.arange(n) % len(tasks.top)]
    sup = torch.as_tensor(tasks.supports[task])
    x = torch.as_tensor(sample_inputs(n, tasks.x.shape[1], rng))
    K = tasks.supports.shape[1]
    w = torch.as_tensor(rng.random((n, K)) if refine_z
                        else support_weights(tasks.supports[task], error.teacher.weights, rng)) * (sup >= 0)
    return Starts(sup, x, w, error.on_support(sup, x, w, "line search"), task)


def grid_stage(error: Objective, tasks: Tasks, polished: list[np.ndarray], budget: MeasureBudget) -> None:
    """Stage 4: for I ≤ 2, a grid over x on the best z found so far (the later stages may
    have moved it off the family's levels), the line searches' best, then the worst tasks
    as drawn; as many z as GRID_ROWS rows hold, at most GRID_TASKS + 1."""
    I, M = tasks.x.shape[1], tasks.z.shape[1]
    if I > 2 or budget.grid_points == 0:
        return
    g = budget.grid_points or (4097 if I == 1 else 257)
    axis = torch.linspace(-1.0, 1.0, g, dtype=torch.float64)
    grid = torch.cartesian_prod(*[axis] * I).view(-1, I)
    candidates = [error.best.z, *polished[: GRID_TASKS // 2], *tasks.z[tasks.top[:GRID_TASKS]]]
    n_z = min(GRID_TASKS + 1, max(1, GRID_ROWS // len(grid)))  # the line searches cover the rest
    for z_grid in _distinct(candidates)[:n_z]:
        zt = torch.as_tensor(z_grid).expand(len(grid), M)
        error.best.offer(error(zt, grid, "grid"), grid, zt, "grid")


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


def _line_search(error: Objective, sup: torch.Tensor, x: torch.Tensor, w: torch.Tensor, refine_z: bool,
                 sweeps: int, grid: int, local: int):
    """Coordinate-wise line searches from each row of (support, x, w): along every x_i and
    (refine_z) every active weight w_k, `grid` points over the coordinate's whole range and
    `local` points around its current value, moving to the best; the local radius halves
    every sweep. Returns (errors, x, w)."""
    I, K = x.shape[1], w.shape[1]
    coords = [("x", i) for i in range(I)] + ([("w", k) for k in range(K)] if refine_z else [])
    x, w = x.clone(), w.clone()
    err = error.on_support(sup, x, w, "line search")
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
            e = error.on_support(sup[rows].repeat_interleave(C, 0), xs, ws, "line search").view(len(rows), C)
            e_best, arg = e.max(dim=1)
            move = e_best > err[rows]
            (x if kind == "x" else w)[rows[move], j] = cand[move, arg[move]]
            err[rows] = torch.maximum(err[rows], e_best)
    return err, x, w


def _distinct(zs: list[np.ndarray]) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for z in zs:
        if not any(np.array_equal(z, o) for o in out):
            out.append(z)
    return out


def fraction_of(value: float, bound: float) -> float:
    return value / bound if bound > 0 else math.inf
