"""python -m verify.exact_sup: the exact sup error of a construction on a small instance, by MILP.

verify.bound's measured sup error is found by search, so it is a lower estimate. Here it is
computed. For a fixed task z, f − g is a ReLU network in x (f: the construction's dense
nn.Sequential; g: the teacher's layers at z, then A), and max over x ∈ [-1,1]^I of ±(f − g)_o
is a mixed-integer linear program. Each ReLU whose pre-activation bounds straddle 0 gets the
big-M encoding with one binary; a ReLU that is stable on the box (bounds ≥ 0 or ≤ 0) is an
affine expression or 0 and needs none. Bounds are interval arithmetic over the MILP's own
variables, layer by layer. scipy.optimize.milp (HiGHS) solves one MILP per output o and sign.

Over z:
- the "levels" task set (khot, discrete: the exact construction's claim): every support and
  every combination of the family's weight levels, one MILP each, so the sup is exact;
- the "Z_K" task set (every weight in [0, 1] on a support of size K; and `continuous`
  levels, [0.5, 1]): a grid of cells over each support's weight box. f is a ReLU network in
  (e(z), x) jointly, so the MILP of a cell lets z_S range over the whole cell in f, and takes g
  at the cell's centre c; |g(z, x) − g(c, x)| ≤ Lg_o·δ (theory/lipschitz.py, δ the cell's
  half-width) is the remainder added to its bound. A cell whose upper end exceeds the lower
  end by more than the tolerance is halved along every axis (branch and bound over z) while
  the cell budget lasts. (Taking f at the centre too would add f's own Lipschitz constant,
  about 4× g's for the shallow construction: the brackets were 2.5× wider.)

lower is an error the network has: f − g evaluated in float64 at a MILP's maximiser. upper is
the largest MILP bound (+ remainder). HiGHS's tolerances are set to 1e-10 (its defaults allow a
1e-6 gap), and on the level tasks the two ends agree to about that (MILP_TOL allows 1e-8). A
MILP that HiGHS does not prove (status ≠ 0, e.g. its time limit; or no dual bound) gives no
upper end: its cell keeps the bound it inherited from the cell it was halved from, or inf,
and with an infinite upper end the report says `NOT proven` (`proven: false`). Big-M bounds,
interval bounds and the z-remainder are rounded outward (theory/lipschitz.py), so no feasible
point is cut off by rounding; the report's `rests_on` says so.

JSON report keys: teacher, construction, eps, certificate, rounding_floor, certified, rests_on,
measured_over_exact, checks, passed, exact (lower, upper, proven, on_levels, n_milps, n_cells,
n_time_limited, max_remainder, unstable_relus, z, x, seconds) and measured (sup_error,
refine_z, seconds). certified: upper + MILP_TOL ≤ certificate; measured_over_exact: measured ÷ upper.
Exit codes: 0 the checks hold, up to the rounding floor: measured ≤ upper + MILP_TOL (the measurer finds
no more than the MILP proves) and lower ≤ certificate (no error the network has exceeds it;
for the exact construction, upper ≤ 1e-12 + MILP_TOL); 1 a check fails; 2 usage error,
including an instance too large to solve (one line); 3 internal error; 130 interrupted.
upper ≤ certificate proves the certificate on this instance and is reported as `certified`;
it is not a check, because on Z_K the remainder leaves the bracket wider than the
certificate's slack (the shallow construction's sup is within 0.1% of its certificate).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import sys
import time
import warnings

import numpy as np

from theory.bounds import gamma
from theory.lipschitz import affine_interval, teacher_z_lipschitz
from verify import cli
from verify.cli import UsageError, positive_float, positive_int

# The size guard. A MILP's time grew about as the square of its binaries (unstable ReLUs) in
# our measurements on one busy core: 0.03 s at 8, 0.6 s at 44, 5 s at 62 (the deep
# construction's sawtooth, the slowest per binary). So the work is estimated as unstable² ×
# MILPs (tasks or cells × 2·O), and refused past MAX_WORK: about 30 s at the slowest rate.
MAX_WORK = 25_000
# HiGHS options passed through scipy (it forwards unknown ones verbatim, with a warning that
# is silenced below). Its defaults allow a 1e-6 gap and 1e-6 violations, too coarse for errors
# of 1e-2 to 1e-15; 1e-10 is the smallest feasibility tolerance it takes. A binary may still
# sit 1e-10 off 0 or 1, which lifts a MILP's value by about 1e-10 × a unit's bound × its
# readout: MILP_TOL allows for that wherever the upper end is compared with something.
HIGHS = dict(mip_rel_gap=1e-10, mip_abs_gap=1e-13, mip_feasibility_tolerance=1e-10,
             primal_feasibility_tolerance=1e-10, dual_feasibility_tolerance=1e-10)
MILP_TOL = 1e-8


# ─── the networks at a fixed task, as lists of (W, b) with ReLU between ─────────────────────

def dense_layers(net) -> list[tuple[np.ndarray, np.ndarray]]:
    """The construction's nn.Sequential as numpy (W: out × in, b) pairs."""
    import torch

    return [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy())
            for m in net.to_sequential() if isinstance(m, torch.nn.Linear)]


def teacher_arrays(teacher):
    """(Ws, bs): the teacher's layers, one for a single-layer hyperteacher."""
    return (teacher.Ws, teacher.bs) if hasattr(teacher, "Ws") else ((teacher.W,), (teacher.b,))


def f_on(layers, cols: np.ndarray):
    """f as a network on [z_S, x]: e(z) = cols·z_S, cols the encoding's columns of the support S."""
    (W, b), rest = layers[0], layers[1:]
    M = cols.shape[0]
    return [(np.hstack([W[:, :M] @ cols, W[:, M:]]), b), *rest]


def g_at(teacher, z: np.ndarray):
    """g at the task z as a network in x: layer l is h ↦ ReLU(W^l(z̃)ᵀh + b^l(z̃)), then A."""
    zt = z / math.sqrt(teacher.K)
    Ws, bs = teacher_arrays(teacher)
    layers = [(np.einsum("m,mih->hi", zt, W), zt @ b) for W, b in zip(Ws, bs, strict=True)]
    return layers + [(teacher.A.T, np.zeros(teacher.O))]


def g_on(teacher, z: np.ndarray, k: int):
    """g at the task z as a network on [z_S, x] that ignores z_S (k zero columns)."""
    (W, b), *rest = g_at(teacher, z)
    return [(np.hstack([np.zeros((len(b), k)), W]), b), *rest]


# ─── the MILP over an input box ───────────────────────────────────────────────────────────

def relu_rows(P, p, lo, hi, y, a):
    """Big-M rows (A_ub v ≤ b_ub) of y = ReLU(P·v + p) with binary a, when lo < 0 < hi:
    y ≥ P·v + p,  y ≤ P·v + p − lo·(1 − a),  y ≤ hi·a  (and 0 ≤ y ≤ hi as bounds)."""
    r1, r2, r3 = P.copy(), -P, np.zeros_like(P)
    r1[y] -= 1.0
    r2[y] += 1.0
    r2[a] -= lo
    r3[y], r3[a] = 1.0, -hi
    return [r1, r2, r3], [-p, p - lo, 0.0]


def pre_bounds(P, p, v_lo, v_hi):
    """Bounds of the pre-activations P·v + p over the variables' box (interval arithmetic)."""
    return affine_interval(P, p, v_lo, v_hi)


@contextlib.contextmanager
def quiet_stdout():
    """HiGHS (scipy 1.17) prints a debug line from C on stdout now and then; silence fd 1 while
    it runs, so that --json output stays JSON."""
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


class Milp:
    """max of ±(Σ_net sign·net(u))_o over the input box u ∈ [u_lo, u_hi], for ReLU networks
    `nets` on the same input u: variables v = [u, (y, a) per unstable ReLU]; each layer's
    outputs are affine in v (a stable unit is its pre-activation, or 0)."""

    def __init__(self, nets, signs, u_lo: np.ndarray, u_hi: np.ndarray):
        n_in = len(u_lo)
        n_max = n_in + 2 * sum(len(b) for net in nets for _, b in net[:-1])
        self.lo, self.hi = np.zeros(n_max), np.zeros(n_max)
        self.lo[:n_in], self.hi[:n_in] = u_lo, u_hi
        self.integer = np.zeros(n_max)
        rows, rhs = [], []
        n = n_in
        self.out, self.const = 0.0, 0.0  # Σ_net sign·(readout), affine in v
        for net, sign in zip(nets, signs, strict=True):
            E, c = np.eye(n_in, n_max), np.zeros(n_in)
            for W, b in net[:-1]:
                P, p = W @ E, W @ c + b
                lo, hi = pre_bounds(P, p, self.lo, self.hi)
                E, c = np.where((lo >= 0)[:, None], P, 0.0), np.where(lo >= 0, p, 0.0)
                for j in np.flatnonzero((lo < 0) & (hi > 0)):
                    y, a = n, n + 1
                    n += 2
                    self.hi[y], self.hi[a], self.integer[a] = hi[j], 1.0, 1
                    r, h = relu_rows(P[j], p[j], lo[j], hi[j], y, a)
                    rows += r
                    rhs += h
                    E[j, y] = 1.0
            W, b = net[-1]
            self.out = self.out + sign * (W @ E)
            self.const = self.const + sign * (W @ c + b)
        self.n = n
        self.A = np.array(rows)[:, :n] if rows else np.zeros((0, n))
        self.b = np.array(rhs)
        self.lo, self.hi, self.integer = self.lo[:n], self.hi[:n], self.integer[:n]
        self.out = self.out[:, :n]

    @property
    def binaries(self) -> int:
        return int(self.integer.sum())

    def solve(self, o: int, sign: float, time_limit: float):
        """(v at the best point found, its objective, HiGHS's upper bound, proven optimal)."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        cons = [LinearConstraint(self.A, -np.inf, self.b)] if len(self.b) else None
        with warnings.catch_warnings(), quiet_stdout():  # tolerance options go to HiGHS verbatim
            warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
            res = milp(-sign * self.out[o], integrality=self.integer, bounds=Bounds(self.lo, self.hi),
                       constraints=cons, options=dict(HIGHS, time_limit=time_limit))
        const = sign * self.const[o]
        if res.x is None:  # no point found in the time: x = 0 is one, and the bound is unknown
            return np.zeros(self.n), -np.inf, np.inf, False
        upper = proven_upper(res, self.binaries > 0)
        # + const rounds once: one ulp up keeps the end above the exact sum.
        return res.x, -res.fun + const, float(np.nextafter(upper + const, np.inf)), math.isfinite(upper)


def proven_upper(res, has_binaries: bool) -> float:
    """The max of the objective that HiGHS proved (scipy minimises −objective), or inf.
    - status 0 with a dual bound: the MILP's dual bound (never below the incumbent);
    - status 0 and no integer variable (every ReLU stable): scipy reports no dual bound for an
      LP, but HiGHS's simplex stops at "optimal" only with a primal and a dual solution feasible
      to its 1e-10 tolerances, whose objectives agree; so −fun is the LP's max up to those
      tolerances, as a MILP's dual bound is. MILP_TOL allows for them in every comparison;
    - anything else (1: a time or iteration limit; a MILP without a dual bound): no proof, inf.
      A time-limited MILP's dual bound is valid too, but it is not a proof that the search
      finished, and the upper end is reported only as proven."""
    if res.status != 0:
        return math.inf
    if res.mip_dual_bound is not None:
        return max(-res.mip_dual_bound, -res.fun)
    return math.inf if has_binaries else -res.fun


# ─── over tasks ─────────────────────────────────────────────────────────────────────────────

def task_boxes(net, teacher, task_set: str | None = None):
    """(supports, weight box lo, hi, on levels): the task set (the construction's own unless
    `task_set` names one) as boxes per support, or, on levels, the list of single tasks."""
    from constructions.tasks.hyperteacher import enumerate_supports

    M, K = teacher.M, teacher.K
    task_set = task_set or net.task_set
    if task_set == "levels" and teacher.weights != "continuous":
        boxes = []
        for row in enumerate_supports(M, K):
            S = row[row >= 0]
            boxes += [(S, np.array(w), np.array(w))
                      for w in itertools.product(teacher.weight_values, repeat=len(S))]
        return boxes, True
    if task_set == "levels":  # continuous levels: [0.5, 1] on every support size
        lo, hi = teacher.weight_values
        return [(row[row >= 0], np.full((row >= 0).sum(), lo), np.full((row >= 0).sum(), hi))
                for row in enumerate_supports(M, K)], False
    # Z_K: a support of size K with weights in [0, 1] holds every smaller one (weights 0).
    return [(np.array(S), np.zeros(K), np.ones(K)) for S in itertools.combinations(range(M), K)], False


def grid_cells(boxes, per_axis: int):
    """Split every box into per_axis cells along each of its axes (a point stays one cell)."""
    for S, lo, hi in boxes:
        if np.all(lo == hi):
            yield S, lo, hi
            continue
        step = (hi - lo) / per_axis
        for idx in itertools.product(range(per_axis), repeat=len(S)):
            c_lo = lo + step * np.array(idx)
            yield S, c_lo, c_lo + step


def halves(S, lo, hi):
    """The 2^|S| cells of a cell halved along every axis."""
    mid = (lo + hi) / 2
    for pick in itertools.product((0, 1), repeat=len(S)):
        pick = np.array(pick, dtype=bool)
        yield S, np.where(pick, mid, lo), np.where(pick, hi, mid)


class Problem:
    """Everything about (construction, teacher) that does not change with the task."""

    def __init__(self, net, teacher, time_limit: float = 10.0):
        self.teacher, self.time_limit = teacher, time_limit
        self.layers = dense_layers(net)
        self.Q = None if teacher.Q is None else np.asarray(teacher.Q)
        self.I, self.O, self.M, self.K = teacher.I, teacher.O, teacher.M, teacher.K
        self.n_milps = self.n_time_limited = 0

    def z_of(self, S, w):
        z = np.zeros(self.M)
        z[S] = w
        return z

    def cols(self, S) -> np.ndarray:
        """The encoding's columns of the support S: e(z) = cols·z_S."""
        return np.eye(self.M)[:, S] if self.Q is None else self.Q[:, S]

    def milp_at(self, S, lo, hi) -> Milp:
        """max over z_S ∈ [lo, hi] and x ∈ [-1,1]^I of ±(f(e(z), x) − g(x, c))_o, c the cell's
        centre: f is a ReLU network in (z, x) jointly, so the cell's z enters f exactly."""
        c = self.z_of(S, (lo + hi) / 2)
        box = np.ones(self.I)
        return Milp([f_on(self.layers, self.cols(S)), g_on(self.teacher, c, len(S))], [1.0, -1.0],
                    np.concatenate([lo, -box]), np.concatenate([hi, box]))

    def remainder(self, S, lo, hi) -> np.ndarray:
        """Per output, how far g can move from its value at the cell's centre: Lg·δ, δ the
        cell's half-width (theory/lipschitz.py; 0 for a single task)."""
        delta = float(np.max(hi - lo)) / 2
        if delta == 0:
            return np.zeros(self.O)
        Ws, bs = teacher_arrays(self.teacher)
        # hi − lo and the product round once each: γ_2 relative, then one ulp, keeps R outward.
        Lg = teacher_z_lipschitz(Ws, bs, self.teacher.A, self.K, S, lo, hi)
        return np.nextafter(Lg * delta * (1.0 + gamma(2)), np.inf)

    def error_at(self, z, x) -> float:
        """‖f(e(z), x) − g(x, z)‖_∞ evaluated in float64 (the dense network, as the MILP)."""
        v = np.concatenate([z if self.Q is None else self.Q @ z, x])
        for W, b in self.layers[:-1]:
            v = np.maximum(W @ v + b, 0.0)
        f = self.layers[-1][0] @ v + self.layers[-1][1]
        h = x
        for W, b in g_at(self.teacher, z)[:-1]:
            h = np.maximum(W @ h + b, 0.0)
        return float(np.abs(f - self.teacher.A.T @ h).max())

    def solve_cell(self, S, lo, hi, inherited, target: float):
        """(bounds per (o, sign), remainder, best (error, z, x) seen) of one cell: its MILP for
        every (o, sign) whose inherited bound (from the cell it was halved from, which holds it)
        still exceeds `target`, plus the remainder; the others keep their bound."""
        milp = self.milp_at(S, lo, hi)
        R = self.remainder(S, lo, hi)
        bounds, best = inherited.copy(), (-np.inf, None, None)
        for k, (o, sign) in enumerate(itertools.product(range(self.O), (1.0, -1.0))):
            if bounds[k] <= target:
                continue
            v, _, upper, proven = milp.solve(o, sign, self.time_limit)
            self.n_milps += 1
            self.n_time_limited += not proven
            z = self.z_of(S, np.clip(v[: len(S)], lo, hi))
            x = np.clip(v[len(S): len(S) + self.I], -1.0, 1.0)
            err = self.error_at(z, x)  # an error the network really has: the lower end
            if err > best[0]:
                best = (err, z, x)
            bounds[k] = min(bounds[k], np.nextafter(upper + R[o], np.inf))  # the sum rounded up
        return bounds, R, best


def exact_sup(net, teacher, *, grid: int = 4, max_cells: int = 64, rel_tol: float = 1e-2,
              abs_tol: float = 1e-13, time_limit: float = 5.0, task_set: str | None = None) -> dict:
    """The exact sup over the construction's task set of ‖f − g‖_∞ as a bracket [lower, upper]
    (see the module docstring). `grid`: cells per weight axis to start with (Z_K, continuous);
    `max_cells`: how many cells branch and bound may solve in all; it stops refining once
    upper ≤ lower·(1 + rel_tol) + abs_tol. `time_limit`: seconds per MILP. `task_set`:
    "levels" or "Z_K" instead of the construction's own.

    Measured ÷ exact on small instances (--grid 4 --rel-tol 1e-2 --time-limit 5 --max-cells 64;
    every MILP proven optimal; "÷ lower" > 1 means that the measurer's continuous search over z
    found more than the MILP's cells):

        instance                                               construction  exact [lower, upper]   ÷ lower
        --M 1 --K 1 --I 1 --H 1 --O 1 --weights continuous     shallow       [4.147e-2, 1.438e-1]   1.000
          --eps 0.05                                           optimal       [4.102e-2, 1.403e-1]   0.994
                                                               deep          [1.620e-2, 2.244e-1]   0.991
        --M 2 --K 2 --I 1 --H 1 --O 1 --weights khot           shallow       [9.163e-2, 7.717e-1]   0.995
          --eps 0.1                                            optimal       [8.609e-2, 7.717e-1]   1.000
        --M 2 --K 1 --I 2 --H 1 --O 2 --encoding orthogonal    optimal       [9.967e-2, 5.718e-1]   1.000
          --eps 0.1
        --M 2 --K 1 --I 1 --H 2 --O 1 --eps 0.05               exact (levels) [1.4e-15, 1.4e-15]    —
    (the exact construction's [1.4e-15, 1.4e-15] is float64 rounding)

    Over Z_K the upper end stays wide at these budgets, because the z-remainder is first order in
    the cell width. On the one-neuron instance it closes as about 1/cells: 10.9× at 16 cells,
    1.6× at 256 and 1.08× at 1,024 (114 s), where the lower end equals the certificate.
    `verify.bound --bound instance` closes the same bracket faster on those instances."""
    start = time.perf_counter()
    prob = Problem(net, teacher, time_limit)
    boxes, on_levels = task_boxes(net, teacher, task_set)
    lower, where, max_rem = -np.inf, (None, None), 0.0
    heap, tie = [], itertools.count()  # cells by their upper end, largest first

    def target():
        return lower * (1 + rel_tol) + abs_tol

    def visit(cell, inherited):
        nonlocal lower, where, max_rem
        bounds, R, (err, z, x) = prob.solve_cell(*cell, inherited, target())
        if err > lower:
            lower, where = err, (z, x)
        max_rem = max(max_rem, float(R.max()))
        heapq.heappush(heap, (-bounds.max(), next(tie), cell, bounds))

    cells = list(grid_cells(boxes, grid))
    for cell in cells:
        visit(cell, np.full(2 * teacher.O, np.inf))
    n_cells = len(cells)
    # Branch and bound over z: halve the cell with the largest upper end while it could hide
    # more than the tolerance above the lower end (a single task has nothing left to halve).
    while -heap[0][0] > target() and n_cells < max_cells and not on_levels:
        _, _, cell, bounds = heapq.heappop(heap)
        for child in halves(*cell):
            visit(child, bounds)
            n_cells += 1
    z, x = where
    upper = max(-heap[0][0], lower)
    # proven: the upper end rests on the solver's proofs only. A cell whose MILP proved nothing
    # keeps the bound of the cell it was halved from (which holds it), else inf.
    return dict(lower=lower, upper=upper, proven=math.isfinite(upper),
                on_levels=on_levels, n_milps=prob.n_milps, n_cells=n_cells,
                n_time_limited=prob.n_time_limited, max_remainder=max_rem, z=z, x=x,
                seconds=time.perf_counter() - start)


def work_estimate(net, teacher, grid: int, max_cells: int, task_set: str | None = None) -> dict:
    """The size guard's estimate, from one MILP encoding (no solve): unstable ReLUs in the first
    cell, MILPs (tasks or cells × 2·O) and work = unstable² × MILPs (see MAX_WORK)."""
    prob = Problem(net, teacher)
    boxes, on_levels = task_boxes(net, teacher, task_set)
    S, lo, hi = next(grid_cells(boxes, grid))
    unstable = prob.milp_at(S, lo, hi).binaries
    cells = len(boxes) if on_levels else max(max_cells, len(boxes) * grid ** len(S))
    milps = cells * 2 * teacher.O
    return dict(unstable=unstable, milps=milps, work=max(unstable, 1) ** 2 * milps)


# ─── the command line ───────────────────────────────────────────────────────────────────────

def build_parser() -> cli.Parser:
    from verify.theorem.bound import add_construction_flags

    p = cli.Parser("python -m verify.exact_sup", __doc__)
    cli.add_teacher_flags(p, dict(M=2, K=1, I=1, H=1, O=1))
    p.add_argument("--eps", type=positive_float, default=5e-2, help="target sup error ε > 0 (default 5e-2)")
    add_construction_flags(p, constants_help="apriori or instance",
                           layers_help="modular layers L of the teacher; L > 1 is built from shallow blocks")
    p.add_argument("--task-set", default="own", choices=("own", "levels", "Z_K"),
                   help="where to take the sup: the construction's own task set, the family's weight "
                        "levels (exact for khot and discrete), or all of Z_K (default own)")
    p.add_argument("--grid", type=positive_int, default=4,
                   help="cells per weight axis of the first z-grid (Z_K and continuous; default 4)")
    p.add_argument("--max-cells", type=positive_int, default=64,
                   help="z-cells the branch and bound may solve in all (default 64)")
    p.add_argument("--rel-tol", type=cli.non_negative_float, default=1e-2,
                   help="stop halving z-cells once upper ≤ lower·(1 + this) (default 1e-2)")
    p.add_argument("--time-limit", type=positive_float, default=5.0,
                   help="seconds per MILP; past it, the MILP proves no upper end (default 5)")
    cli.add_json(p)
    cli.add_common(p, threads_default="1: the networks are small")
    return p


def parse_args(argv) -> object:
    from verify.theorem.bound import check_teacher_and_construction

    args = build_parser().parse_args(argv)
    check_teacher_and_construction(args)
    if args.task_set == "Z_K" and args.construction == "exact":
        raise UsageError("--construction exact claims nothing off the weight levels: use --task-set levels")
    return args


def judge(claim, exact: dict, measured: float, floor: float) -> dict[str, bool]:
    """The checks, each up to the rounding floor. The measurer and the MILP must agree
    (measured ≤ upper); the claim must not be contradicted by an error the network has (lower ≤
    certificate; for an exact construction upper ≤ EXACT_TOL, up to the MILP's own tolerance).
    Whether upper ≤ certificate, which proves the certificate on this instance, is reported
    (`certified`) but not judged: on Z_K the Lipschitz remainder can leave the bracket wider
    than the gap between the sup and the certificate."""
    from constructions.base import EXACT_TOL

    # The solver's upper end may sit up to MILP_TOL below the exact max (its tolerances), so a
    # check that it contradicts the measurer allows MILP_TOL on its side.
    checks = {"measured <= exact upper": measured <= exact["upper"] + MILP_TOL + floor}
    if claim.exact:
        checks[f"exact upper <= {EXACT_TOL:g} + MILP_TOL (exact)"] = exact["upper"] <= EXACT_TOL + MILP_TOL
    else:
        checks["exact lower <= certificate"] = exact["lower"] <= claim.certificate + floor
    return checks


# What a proven upper end rests on (the report's `rests_on`).
RESTS_ON = ("HiGHS's proofs: status 0 with a dual bound (an LP: its optimum), else the upper end is "
            "inf; its 1e-10 tolerances, allowed for by MILP_TOL = 1e-8 in every comparison; big-M and "
            "interval bounds and the z-remainder rounded outward (gamma_n, then one ulp)")


def certified(upper: float, certificate: float) -> bool:
    """upper ≤ certificate as a proof: the solver's end may sit up to MILP_TOL below the exact
    max, so MILP_TOL counts against it (the exact construction's certificate 0 is therefore never
    `certified`; its claim is the check upper ≤ EXACT_TOL + MILP_TOL)."""
    return upper + MILP_TOL <= certificate


def run(args) -> dict:
    from constructions.registry import build
    from constructions.tasks.hyperteacher import HyperteacherConfig
    from verify.theorem.check import sample_teacher
    from verify.theorem.measure import measure_sup_error

    cfg = HyperteacherConfig(I=args.I, H=args.H, O=args.O, M=args.M, K=args.K,
                             weights=args.weights, encoding=args.encoding, seed=args.seed)
    teacher = sample_teacher(cfg, args.layers)
    try:
        net = build(args.construction, teacher, args.eps, variant=args.variant, constants=args.constants)
    except ValueError as e:
        raise UsageError(str(e)) from None
    task_set = net.task_set if args.task_set == "own" else args.task_set
    size = work_estimate(net, teacher, args.grid, args.max_cells, task_set)
    if size["work"] > MAX_WORK:
        raise UsageError(f"too large to solve exactly: {size['unstable']} unstable ReLUs, squared, × "
                         f"{size['milps']} MILPs = {size['work']:,} > {MAX_WORK:,}; use a larger --eps, "
                         "smaller --M, --K, --I, --H or --O, or fewer --max-cells")
    exact = exact_sup(net, teacher, grid=args.grid, max_cells=args.max_cells, rel_tol=args.rel_tol,
                      time_limit=args.time_limit, task_set=task_set) | dict(unstable_relus=size["unstable"])
    claim = net.claim(args.eps)
    refine_z = task_set == "Z_K"  # the measurer searches the same task set
    measured = measure_sup_error(net, teacher, refine_z=refine_z, seed=args.seed,
                                 progress=False if args.no_progress else None)
    # The MILP is the dense network's exact-arithmetic value, the measurer evaluates the
    # structured one in float64: either rounding may separate them.
    floor = max(net.rounding_floor(dense=False), net.rounding_floor(dense=True))
    checks = judge(claim, exact, measured.sup_error, floor)
    return dict(
        teacher=dict(I=args.I, H=args.H, O=args.O, M=args.M, K=args.K, L=args.layers,
                     weights=args.weights, encoding=args.encoding, seed=args.seed),
        construction=dict(name=net.name, task_set=task_set, variant=args.variant,
                          constants=args.constants),
        eps=args.eps, certificate=claim.certificate, rounding_floor=floor, exact=exact,
        certified=certified(exact["upper"], claim.certificate), rests_on=RESTS_ON,
        measured=dict(sup_error=measured.sup_error, refine_z=refine_z, seconds=measured.seconds),
        measured_over_exact=measured.sup_error / exact["upper"] if 0 < exact["upper"] < math.inf else None,
        checks=checks, passed=all(checks.values()))


def format_report(r: dict) -> str:
    e, m = r["exact"], r["measured"]
    over = "every level task" if e["on_levels"] else \
        f"{e['n_cells']} z-cells (Lipschitz remainder ≤ {e['max_remainder']:.2e})"
    ratio = r["measured_over_exact"]
    lines = [
        f"construction  {r['construction']['name']} on {r['construction']['task_set']}   ε {r['eps']:.3e}   "
        f"certificate {r['certificate']:.3e}   (float64 rounding ≤ {r['rounding_floor']:.1e})",
        f"exact sup     [{e['lower']:.6e}, {e['upper']:.6e}]   {'proven' if e['proven'] else 'NOT proven'}, "
        f"{e['seconds']:.2f} s: {e['n_milps']} MILPs over {over}, {e['unstable_relus']} unstable ReLUs",
        f"measured      {m['sup_error']:.6e}   {m['seconds']:.2f} s   measured ÷ exact upper "
        + ("—" if ratio is None else f"{ratio:.4f}"),
        f"certified     {'yes' if r['certified'] else 'no'} (exact upper + MILP_TOL ≤ certificate)",
    ]
    if e["n_time_limited"]:
        lines.append(f"{'':14}{e['n_time_limited']} MILPs proved no bound (time limit or no dual bound): "
                     "their cells keep the bound they inherited, or inf")
    lines.append(f"rests on      {r['rests_on']}")
    lines += [f"check         {name}: {'ok' if ok else 'VIOLATED'}" for name, ok in r["checks"].items()]
    return "\n".join(lines)


def work(args) -> int:
    cli.set_threads(args.threads, 1)  # small networks: one thread is fastest (verify/cli.py)
    report = run(args)
    cli.emit(cli.to_json(report) if args.json else format_report(report))
    return cli.EXIT_OK if report["passed"] else cli.EXIT_VIOLATED


def main(argv=None) -> int:
    return cli.main_of("verify.exact_sup", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
