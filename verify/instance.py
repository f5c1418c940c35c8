"""The instance bound: a rigorous upper bound on one network's sup error (theory/instance.py).

Two task sets:
- `levels_bound`: every task of the family (every support, every tuple of weight levels),
  each bounded exactly over x by `task_bound`. Sound for the family's own tasks only.
- `zk_bound`: all of Z_K, by branch and bound over boxes of the support weights: each box's
  phases φ_ih are linear in z, so their ranges are exact, and `box_bound` bounds the error
  over the box. The largest box bound is the answer whenever the search stops, so a time
  budget only makes it looser, never unsound.
Both apply to the networks whose error has the phase form: the shallow construction (either
variant) and the deep one, which computes the shallow network with N = 2^(m+1) on the box.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from constructions.tasks.hyperteacher import enumerate_supports
from theory.instance import box_bound, phase_slopes, task_bound, task_phases
from verify.cli import progress as progress_bar

# Rows of box_bound's (T, I, G, H) arrays per call: about 130 MB of temporaries at G = 256.
BOX_ROWS = 2**21
TASK_ROWS = 2**20  # rows of task_bound's (T, I, 2H, H) arrays per call


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


def levels_bound(net, teacher, progress: bool | None = None) -> InstanceBound:
    """max over every task of the family of task_bound: its sup error on those tasks."""
    if teacher.weights == "continuous":
        raise ValueError("continuous weights have no finite set of levels: use zk_bound")
    N, C = _phase_form_or_raise(net)
    start = time.perf_counter()
    M, K, I, H = teacher.M, teacher.K, teacher.I, teacher.H
    levels = teacher.weight_values
    supports = enumerate_supports(M, K)
    sizes = (supports >= 0).sum(axis=1)
    per_call = max(1, TASK_ROWS // (2 * I * H * H))
    best, best_z, n_tasks = -1.0, None, 0
    bar = progress_bar(len(supports), "instance bound (levels)", progress, unit="support")
    for k in range(1, K + 1):
        sup_k = supports[sizes == k][:, :k]
        tuples = np.array(list(itertools.product(levels, repeat=k)))  # (L^k, k)
        rows_per_support = len(tuples)
        step = max(1, per_call // rows_per_support)
        for s in range(0, len(sup_k), step):
            block = sup_k[s:s + step]
            z = np.zeros((len(block) * rows_per_support, M))
            np.put_along_axis(z, np.repeat(block, rows_per_support, axis=0),
                              np.tile(tuples, (len(block), 1)), axis=1)
            b = task_bound(task_phases(teacher.W, K, C, N, z), teacher.A, C, N)
            i = int(b.argmax())
            if b[i] > best:
                best, best_z = float(b[i]), z[i].copy()
            n_tasks += len(z)
            bar.update(len(block))
    bar.close()
    return InstanceBound(bound=best, task_set="levels", z=best_z, pieces=n_tasks,
                         seconds=time.perf_counter() - start)


def zk_bound(net, teacher, seconds: float = 30.0, grid: int = 256, split_batch: int = 256,
             progress: bool | None = None) -> InstanceBound:
    """An upper bound on the sup error over all of X × Z_K, by branch and bound over boxes of
    the support weights, for at most about `seconds` (the first pass over every support
    always completes). Supports of size min(K, M) suffice: their boxes [0, 1]^K hold the
    smaller supports as faces."""
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
    while time.perf_counter() - start < seconds:
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
        bar.update(2 * len(top))
        bar.set_postfix_str(f"bound {b.max():.3e}", refresh=False)
    bar.close()
    i = int(b.argmax())
    z = np.zeros(M)
    z[sup[i]] = (lo[i] + hi[i]) / 2
    return InstanceBound(bound=float(b[i]), task_set="Z_K", z=z, pieces=n_boxes,
                         seconds=time.perf_counter() - start, resolution=float(b.max() / centre_b.max()),
                         settings=dict(seconds=seconds, grid=grid, split_batch=split_batch))


def add_instance_bound(report: dict, net, teacher, seconds: float, progress: bool | None = None) -> None:
    """report["instance_bound"]: the upper ends over Z_K and over the family's own tasks, and
    the check that the measured error lies below the first."""
    zk = zk_bound(net, teacher, seconds=seconds, progress=progress)
    cert = report["certificate"]
    bound = min(zk.bound, cert)  # both are sound upper bounds
    entry = dict(Z_K=dict(bound=bound, branch_and_bound=zk.bound, boxes=zk.pieces, seconds=zk.seconds,
                          resolution=zk.resolution, over_certificate=bound / cert,
                          measured_over_bound=report["measured"]["sup_error"] / bound))
    if teacher.weights != "continuous":
        lv = levels_bound(net, teacher, progress=progress)
        entry["levels"] = dict(bound=lv.bound, tasks=lv.pieces, seconds=lv.seconds,
                               over_certificate=lv.bound / cert,
                               worst_support=[int(m) for m in np.flatnonzero(lv.z)],
                               worst_values=[float(v) for v in lv.z[lv.z > 0]])
    report["instance_bound"] = entry
    report["seconds"] += sum(e["seconds"] for e in entry.values())
    floor = report["rounding_floor_float64"]
    report["checks"]["measured <= instance bound"] = report["measured"]["sup_error"] <= bound + floor
    report["passed"] = all(report["checks"].values())



def error_fraction(bound: float, certificate: float) -> float:
    return bound / certificate if certificate > 0 else math.inf
