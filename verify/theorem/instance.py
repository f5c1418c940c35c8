"""The instance bound: a rigorous upper bound on one network's sup error (theory/instance.py).

Two task sets:
- `levels_bound`: every task of the family (every support, every tuple of weight levels),
  each bounded over x by `task_bound`, then as many as time allows, largest first, by the
  tighter `gamma_bound`. Sound for the family's own tasks only.
- `zk_bound`: all of Z_K, by branch and bound over boxes of the support weights: each box's
  phases φ_ih are linear in z, so their ranges are exact, and `box_bound` bounds the error
  over the box. The largest box bound is the answer whenever the search stops, so a time
  budget only makes it looser, never unsound.
Both apply to the networks whose error has the phase form: the shallow construction (either
variant) and the deep one, which computes the shallow network with N = 2^(m+1) on the box.
`guided_search` is the lower end they aim: an error the network really has, found where the
bound says it is largest (each x_i on the lattice of the bound's best kink, then lattice points
picked coordinate by coordinate). `add_instance_bound` puts the bracket into verify.bound's
report: lower ≤ sup ≤ instance bound ≤ certificate ≤ ε.

Budgets (`--bound-seconds S`, default 30): S for the branch and bound over Z_K, and again for
gamma_bound's pass over the largest level tasks. The first pass (task_bound on every level
task) is not budgeted: 110 s for the default's 1,089,408 tasks on an idle machine. In place of
seconds, a call can give a budget of work that reads no clock, so that its answer is the same on
every machine: zk_bound's `rounds` (rounds of splitting) and levels_bound's `tasks` (γ
refinements); figure 3 uses them. Every end is sound whenever it stops; a budget only loosens
it (tests/test_budgeted_bounds.py). Each upper
end adds theory.instance.rounding_margin (JSON `fp_margin`, `rests_on`): on the default
instance (--M 32 --eps 1e-3) it is 8.0e-15, 2.1e-11 of the upper end over the tasks
(3.716e-4), far below the digits printed; tests/test_rigorous_ends.py evaluates task_bound in
rational arithmetic at N ≈ 1e6, where plain float64 falls below it, and the margin covers it.

Measured on the default instance at three ε (--bound-seconds 60, times on a shared machine;
all ÷ certificate; time = measure + guided + Z_K + tasks):

    ε      N      measured  guided  tasks' bound  bracket  Z_K bound  bracket  time
    1e-2   110    0.254     0.270   0.368         1.36×    1.000      3.70×    8.5 + 14 + 63 + 346 s
    1e-3   347    0.262     0.274   0.368         1.35×    1.000      3.65×    11 + 51 + 60 + 740 s
    1e-4   1,097  0.297     0.298   0.368         1.39×    1.000      3.36×    4.6 + 74 + 62 + 284 s

At each ε the upper end over the tasks is the task_bound of the first task that gamma_bound
did not reach within 60 s (about 20,000 of 1,089,408); a longer budget lowers it. So on the
family's own tasks the true sup lies between 0.27 and 0.37 of the certificate (a bracket of
1.35×): the certificate is loose by 2.7–3.7× here, and the measurer (0.262) misses little. On
the worst task the certificate's factor splits as follows (each a bound for that task, all
but the last proven):

    every product at its peak error 1/N², all of one sign (the certificate)        1.000
    each product at its own best x: its error depends on where c_ih(z) falls
      on the knot lattice, β(2φ_ih)                                                 0.745
    one x_i for the H products that share it (task_bound)                           0.421
    one γ_h per hidden unit, shared by the inputs (gamma_bound)                     0.282
    a real x, with the teacher's ReLUs as they are (guided search: an error
      the network has)                                                              0.274

Over all of Z_K (continuous weights) the bracket stays open: the branch and bound does not
get below the certificate, and 3.65× is the honest answer. The error is quasi-periodic in z:
each phase φ_ih moves through about 17 periods per unit of a module's weight, so a useful box
must pin its phases to about 0.01, which is 1e10 boxes per support here. On tiny instances the
same code closes the bracket: the tests hold the bound within 3% of a grid search on one
neuron.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from constructions.tasks.hyperteacher import enumerate_supports
from theory.instance import (
    beta,
    box_bound,
    gamma_bound,
    kink_values,
    phase_form_error,
    phase_slopes,
    rounding_margin,
    task_bound,
    task_phases,
)
from verify.cli import phase
from verify.cli import progress as progress_bar

# Rows of box_bound's (T, I, G, H) arrays per call: about 130 MB of temporaries at G = 256.
BOX_ROWS = 2**21
TASK_ROWS = 2**20  # rows of task_bound's (T, I, H, H) arrays per call, times 2


@dataclass
class InstanceBound:
    bound: float  # upper bound on sup ‖f − g‖∞ over x ∈ [-1,1]^I and the task set
    task_set: str  # "levels" (the family's own tasks) or "Z_K"
    z: np.ndarray  # the task (levels) or box centre (Z_K) where the bound is largest
    pieces: int  # tasks bounded (levels) or boxes bounded (Z_K)
    seconds: float
    # Z_K only: the largest bound over a box ÷ the largest bound at a box's centre. Near 1,
    # the boxes have shrunk until the bound is as tight as it is at single tasks.
    resolution: float = 1.0
    settings: dict = field(default_factory=dict)
    top_z: np.ndarray | None = None  # levels only: the tasks of largest bound, largest first
    fp_margin: float = 0.0  # theory.instance.rounding_margin, already added to `bound`


# What an instance bound's upper end rests on (the report's `rests_on`).
RESTS_ON = ("the phase form of the error (exact arithmetic, this teacher's float64 W, A, C); "
            "float64 evaluation with a proven gamma_n margin (fp_margin) added to each upper end")


def phase_form(net) -> tuple[int, float] | None:
    """(N, C) of a network whose error has the phase form, else None."""
    from constructions.deep import DeepConstruction
    from constructions.shallow import ShallowConstruction

    if isinstance(net, ShallowConstruction):
        return net.N, net.C
    if isinstance(net, DeepConstruction):
        return net.N_eff, net.C
    return None


def _phase_form_or_raise(net) -> tuple[int, float]:
    form = phase_form(net)
    if form is None:
        raise ValueError(f"the instance bound covers the shallow and deep constructions, not {net.name!r}")
    return form


def level_tasks(M: int, K: int, levels: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The family's tasks as (support rows (S, K) padded with -1, weight tuples per size):
    task (s, t) is support s with tuples[size − 1][t] on it."""
    tuples = [np.array(list(itertools.product(levels, repeat=k))) for k in range(1, K + 1)]
    return enumerate_supports(M, K), tuples


def _level_z(supports: np.ndarray, tuples: list[np.ndarray], s: np.ndarray, t: np.ndarray,
             M: int) -> np.ndarray:
    z = np.zeros((len(s), M))
    for k, tup in enumerate(tuples, start=1):
        rows = np.flatnonzero((supports[s] >= 0).sum(axis=1) == k)
        z[rows[:, None], supports[s[rows], :k]] = tup[t[rows]]
    return z


def levels_bound(net, teacher, seconds: float = 30.0, keep: int = 8,
                 progress: bool | None = None, tasks: int | None = None) -> InstanceBound:
    """An upper bound on the sup error over every task of the family, in two passes.
    1. task_bound of every task (vectorised).
    2. gamma_bound, which drops task_bound's loosest relaxation, on the tasks in descending
       order of their task_bound, for about `seconds`, or, given `tasks` (a work budget), on
       at most that many tasks with no clock read, so that the answer depends on the inputs
       alone: the answer is the largest gamma_bound seen, or the task_bound of the first task
       not reached if that is larger. It is exact (for this bound) once every task whose
       task_bound exceeds it has been refined.
    The `keep` tasks of largest bound are kept (top_z), for guided_search to aim at."""
    if teacher.weights == "continuous":
        raise ValueError("continuous weights have no finite set of levels: use zk_bound")
    if tasks is not None and tasks < 0:
        raise ValueError(f"tasks must be >= 0, got {tasks}")
    N, C = _phase_form_or_raise(net)
    start = time.perf_counter()
    M, K, I, H, O = teacher.M, teacher.K, teacher.I, teacher.H, teacher.O
    supports, tuples = level_tasks(M, K, teacher.weight_values)
    sizes = (supports >= 0).sum(axis=1)
    per_call = max(1, TASK_ROWS // (2 * I * H * H))
    task_s, task_t, first = [], [], []
    bar = progress_bar(len(supports), "instance bound (levels)", progress, unit="support")
    for k in range(1, K + 1):
        rows_k = np.flatnonzero(sizes == k)
        n_t = len(tuples[k - 1])
        step = max(1, per_call // n_t)
        for s in range(0, len(rows_k), step):
            sup_rows = np.repeat(rows_k[s:s + step], n_t)
            tup_rows = np.tile(np.arange(n_t), len(rows_k[s:s + step]))
            z = _level_z(supports, tuples, sup_rows, tup_rows, M)
            first.append(task_bound(task_phases(teacher.W, K, C, N, z), teacher.A, C, N))
            task_s.append(sup_rows)
            task_t.append(tup_rows)
            bar.update(len(rows_k[s:s + step]))
    bar.close()
    first, task_s, task_t = np.concatenate(first), np.concatenate(task_s), np.concatenate(task_t)
    order = np.argsort(-first, kind="stable")
    top_z = _level_z(supports, tuples, task_s[order[:keep]], task_t[order[:keep]], M)
    first_seconds = time.perf_counter() - start

    # Pass 2: the exact bound over γ, largest task_bound first.
    best, refined, outputs = 0.0, 0, np.stack([np.zeros(O, dtype=np.int64), np.arange(O)], axis=1)
    exact = True
    bar = progress_bar(None, "instance bound (levels, over γ)", progress, unit="task")
    deadline = time.perf_counter() + seconds

    def budget_left() -> bool:
        return refined < tasks if tasks is not None else time.perf_counter() < deadline

    while refined < len(order) and first[order[refined]] > best and budget_left():
        r = order[refined]
        z = _level_z(supports, tuples, task_s[r:r + 1], task_t[r:r + 1], M)
        kinks = kink_values(task_phases(teacher.W, K, C, N, z))
        value, done = gamma_bound(kinks, teacher.A, C, N, outputs, above=best)
        best, exact = max(best, value), exact and done
        refined += 1
        bar.update(1)
        next_first = first[order[refined]] if refined < len(order) else 0.0
        bar.set_postfix_str(f"bound {max(best, next_first):.3e}", refresh=False)
    bar.close()
    unreached = first[order[refined]] if refined < len(order) else 0.0
    # Every task's exact bound is ≤ its float64 one + margin: refined ones ≤ best, the others
    # ≤ unreached (they come later in the order), or ≤ best (skipped because below it).
    margin = rounding_margin(teacher.W, teacher.A, K, C, N)
    bound = float(np.nextafter(max(best, unreached) + margin, np.inf))
    return InstanceBound(bound=bound, task_set="levels", z=top_z[0], pieces=len(first),
                         seconds=time.perf_counter() - start, top_z=top_z, fp_margin=margin,
                         settings=dict(first_pass=float(first[order[0]]), first_pass_seconds=first_seconds,
                                       refined=refined, refined_exact=exact and unreached <= best,
                                       seconds=seconds, tasks=tasks))


def zk_bound(net, teacher, seconds: float = 30.0, grid: int = 256, split_batch: int = 256,
             progress: bool | None = None, rounds: int | None = None) -> InstanceBound:
    """An upper bound on the sup error over all of X × Z_K, by branch and bound over boxes of
    the support weights, for at most about `seconds` (the first pass over every support
    always completes), or, given `rounds` (a work budget), for exactly that many rounds of
    splitting with no clock read, so that the answer depends on the inputs alone. A round
    halves the split_batch boxes of largest bound (all of them while there are fewer), so
    `pieces` = the supports + 2 × the boxes split. Supports of size min(K, M) suffice: their
    boxes [0, 1]^K hold the smaller supports as faces."""
    if rounds is not None and rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    N, C = _phase_form_or_raise(net)
    start = time.perf_counter()
    M, K, I, H = teacher.M, teacher.K, teacher.I, teacher.H
    k = min(K, M)
    slopes = phase_slopes(teacher.W, K, C, N)  # (M, I, H)
    spread = np.abs(slopes).reshape(M, -1).sum(axis=1)  # how fast module m's weight moves φ
    sup = np.array(list(itertools.combinations(range(M), k)), dtype=np.int64)
    lo, hi = np.zeros((len(sup), k)), np.ones((len(sup), k))
    per_call = max(1, BOX_ROWS // (I * H * grid))

    def bound(sup, lo, hi):
        out, centre_out = np.empty(len(sup)), np.empty(len(sup))
        for s in range(0, len(sup), per_call):
            sl = slice(s, s + per_call)
            centre = np.zeros((len(sup[sl]), M))
            np.put_along_axis(centre, sup[sl], (lo[sl] + hi[sl]) / 2, axis=1)
            phi = task_phases(teacher.W, K, C, N, centre)
            radius = np.einsum("bk,bkih->bih", (hi[sl] - lo[sl]) / 2, np.abs(slopes[sup[sl]]))
            out[sl] = box_bound(phi - radius, phi + radius, teacher.A, C, N, grid)
            centre_out[sl] = task_bound(phi, teacher.A, C, N)
        return out, centre_out

    bar = progress_bar(None, "instance bound (Z_K)", progress, unit="box")
    b, centre_b = bound(sup, lo, hi)
    n_boxes = len(sup)
    bar.update(len(sup))
    done_rounds = 0

    def budget_left() -> bool:
        return done_rounds < rounds if rounds is not None else time.perf_counter() - start < seconds

    while budget_left():
        top = np.argpartition(-b, min(split_batch, len(b)) - 1)[:split_batch]
        # Split each box in half along the weight that moves its phases most.
        axis = np.argmax((hi[top] - lo[top]) * spread[sup[top]], axis=1)
        mid = (lo[top, axis] + hi[top, axis]) / 2
        lo2, hi2 = lo[top].copy(), hi[top].copy()
        hi[top, axis] = mid  # the box keeps its lower half
        lo2[np.arange(len(top)), axis] = mid  # the new one is the upper half
        b_low, c_low = bound(sup[top], lo[top], hi[top])
        b_up, c_up = bound(sup[top], lo2, hi2)
        b[top], centre_b[top] = b_low, c_low
        sup, lo, hi = np.concatenate([sup, sup[top]]), np.concatenate([lo, lo2]), np.concatenate([hi, hi2])
        b, centre_b = np.concatenate([b, b_up]), np.concatenate([centre_b, c_up])
        n_boxes += 2 * len(top)
        done_rounds += 1
        bar.update(2 * len(top))
        bar.set_postfix_str(f"bound {b.max():.3e}", refresh=False)
    bar.close()
    i = int(b.argmax())
    z = np.zeros(M)
    z[sup[i]] = (lo[i] + hi[i]) / 2
    margin = rounding_margin(teacher.W, teacher.A, K, C, N)
    return InstanceBound(bound=float(np.nextafter(b[i] + margin, np.inf)), task_set="Z_K", z=z,
                         pieces=n_boxes, fp_margin=margin,
                         seconds=time.perf_counter() - start, resolution=float(b.max() / centre_b.max()),
                         settings=dict(seconds=seconds, rounds=rounds, grid=grid, split_batch=split_batch))


def guided_search(net, teacher, z: np.ndarray, starts: int = 2, sweeps: int = 3,
                  seed: int = 0) -> tuple[float, np.ndarray, np.ndarray]:
    """A lower end aimed by the bound: for each task z (T, M) and each output and sign, put
    every x_i on the lattice of its best kink (θ_i ≡ ±φ_ij, task_bound's argmax), then
    choose among that lattice's N/2 points coordinate by coordinate, which is where the
    teacher's ReLUs decide how much of the bound is real. Returns (error, x, z) of the
    largest error found, evaluated on the network itself, so it is a real point of X × Z_K."""
    from verify.theorem.measure import pointwise_error

    N, C = _phase_form_or_raise(net)
    W, b, A, K = teacher.W, teacher.b, teacher.A, teacher.K
    I, O = teacher.I, teacher.O
    rng = np.random.default_rng(seed)
    best = (-1.0, None, None)
    for task in np.atleast_2d(z):
        phi = task_phases(W, K, C, N, task[None])[0]  # (I, H)
        Bm = beta(phi[:, :, None] + phi[:, None, :]) - beta(phi[:, :, None] - phi[:, None, :])  # (I, j, h)
        target = np.concatenate([A, -A], axis=1)  # (H, 2O): σ·A_ho, one chain per column
        up = (np.maximum(Bm[..., None] * target, 0.0)).sum(axis=2)  # (I, j, 2O)
        down = (np.maximum(-Bm[..., None] * target, 0.0)).sum(axis=2)  # at θ = −φ_ij
        j_up, j_down = up.argmax(axis=1), down.argmax(axis=1)  # (I, 2O)
        rows = np.arange(I)[:, None]
        theta = np.where(up.max(axis=1) >= down.max(axis=1), phi[rows, j_up], -phi[rows, j_down]).T  # (2O, I)
        # The lattice x = 4(θ + k)/N − 2 within [-1, 1]: n_k points per coordinate.
        base = 4.0 * (theta - np.floor(theta)) / N - 2.0
        lattice = base[..., None] + 4.0 * np.arange(N + 2) / N  # (2O, I, N + 2)
        lattice = np.where((lattice >= -1.0) & (lattice <= 1.0), lattice, np.nan)
        keep = ~np.isnan(lattice).all(axis=(0, 1))
        lattice = lattice[..., keep]
        n_k = lattice.shape[2]
        chains = np.repeat(np.arange(2 * O), starts)  # (R,)
        sign = np.where(chains < O, 1.0, -1.0)
        out = chains % O
        lat = lattice[chains]  # (R, I, n_k)
        valid = ~np.isnan(lat)
        pick = np.array([[rng.choice(np.flatnonzero(v)) for v in chain] for chain in valid])
        x = np.take_along_axis(lat, pick[..., None], axis=2)[..., 0]  # (R, I)
        task_rows = np.broadcast_to(task, (len(chains) * n_k, task.size))
        for _ in range(sweeps):
            for i in range(I):
                X = np.repeat(x[:, None, :], n_k, axis=1)  # (R, n_k, I)
                X[:, :, i] = np.where(valid[:, i], lat[:, i], x[:, i, None])
                err = phase_form_error(W, b, A, K, C, N, task_rows, X.reshape(-1, I))
                err = err.reshape(len(chains), n_k, O)
                value = sign[:, None] * err[np.arange(len(chains)), :, out]
                x[:, i] = X[np.arange(len(chains)), value.argmax(axis=1), i]
        # Score the chains' ends on the network itself.
        assert np.all(np.abs(x) <= 1.0)
        with torch.no_grad():
            zs = torch.as_tensor(np.broadcast_to(task, (len(x), task.size)).copy())
            e = pointwise_error(net, teacher, zs, torch.as_tensor(x)).numpy()
            r = int(e.argmax())
            # Again on its own: a batch's matmuls may round differently in the last bits, and the
            # error reported must be the one the network gives at (x, z) when asked for it alone.
            e_r = float(pointwise_error(net, teacher, zs[r:r + 1], torch.as_tensor(x[r:r + 1]))[0])
        if e_r > best[0]:
            best = (e_r, x[r].copy(), task.copy())
    return best

def add_instance_bound(report: dict, net, teacher, seconds: float, guided_tasks: int = 4,
                       progress: bool | None = None) -> None:
    """report["instance_bound"]: a bracket [lower, upper] around the true sup error over Z_K
    and, for a family with weight levels, over its own tasks. The upper ends are zk_bound
    (or the certificate, if lower) and levels_bound; the lower ends are the measurer's and
    guided_search's, aimed at the measurer's worst task and the levels' largest bounds."""
    m = report["measured"]
    measured_z = np.zeros(teacher.M)
    measured_z[m["z_support"]] = m["z_values"]
    zk = zk_bound(net, teacher, seconds=seconds, progress=progress)
    cert = report["certificate"]
    upper = min(zk.bound, cert)  # both are sound upper bounds
    has_levels = teacher.weights != "continuous"
    lv = levels_bound(net, teacher, seconds=seconds, progress=progress) if has_levels else None
    with phase("guided search", progress):
        start = time.perf_counter()
        no_levels = (-1.0, None, None)
        on_levels = guided_search(net, teacher, lv.top_z[:guided_tasks]) if lv is not None else no_levels
        at_measured = guided_search(net, teacher, measured_z[None])
        guided_seconds = time.perf_counter() - start
    guided = max(on_levels, at_measured, key=lambda r: r[0])
    n_guided = (len(lv.top_z[:guided_tasks]) if lv is not None else 0) + 1
    lower = max(m["sup_error"], guided[0])
    entry = dict(
        Z_K=dict(lower=lower, upper=upper, upper_over_lower=upper / lower if lower > 0 else math.inf,
                 lower_from="guided search" if guided[0] > m["sup_error"] else "measurer",
                 branch_and_bound=zk.bound, boxes=zk.pieces, resolution=zk.resolution,
                 over_certificate=upper / cert, seconds=zk.seconds, fp_margin=zk.fp_margin,
                 rests_on=RESTS_ON if zk.bound < cert else "the certificate I·C·a/N² (its proof)"),
        guided=dict(error=guided[0], x=guided[1], z_support=[int(k) for k in np.flatnonzero(guided[2])],
                    z_values=[float(v) for v in guided[2][guided[2] > 0]], tasks=n_guided,
                    seconds=guided_seconds))
    if lv is not None:
        ratio = lv.bound / on_levels[0] if on_levels[0] > 0 else math.inf  # as Z_K's: no error found
        entry["levels"] = dict(lower=on_levels[0], upper=lv.bound, upper_over_lower=ratio,
                               tasks=lv.pieces, over_certificate=lv.bound / cert, seconds=lv.seconds,
                               first_pass=lv.settings["first_pass"], refined=lv.settings["refined"],
                               refined_exact=lv.settings["refined_exact"],
                               worst_support=[int(k) for k in np.flatnonzero(lv.z)],
                               worst_values=[float(v) for v in lv.z[lv.z > 0]],
                               fp_margin=lv.fp_margin, rests_on=RESTS_ON)
    report["instance_bound"] = entry
    report["seconds"] += sum(e["seconds"] for e in entry.values())
    floor = report["rounding_floor_float64"]
    report["checks"]["lower end <= instance bound"] = lower <= upper + floor
    if lv is not None:
        report["checks"]["levels: lower end <= bound"] = on_levels[0] <= lv.bound + floor
    report["passed"] = all(report["checks"].values())


def error_fraction(bound: float, certificate: float) -> float:
    return bound / certificate if certificate > 0 else math.inf
