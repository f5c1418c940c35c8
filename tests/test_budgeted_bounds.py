"""The instance bound's budgeted and early-stopping branches (issue 19, item 4): with no time,
a clock that runs out after a few steps, or a frontier cap of 0 or 1, every upper end that
levels_bound, zk_bound and gamma_bound return must stay above the brute-force value (the max
over every γ ∈ {0,1}^H and every kink, or a grid over x and z). Dropping the unreached tasks
(`bound = best` in levels_bound) or the open frontier (`return best * scale` at gamma_bound's
cap) is caught here."""

import itertools

import numpy as np
import pytest
import torch

import theory.instance as ti
import verify.theorem.instance as vi
from constructions.shallow import build_shallow
from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
from tests.strategies import FAST
from tests.test_instance_bound import exhaustive_zk_sup
from verify.theorem.measure import measure_sup_error, pointwise_error


def instance(seed: int, I=1, H=3, O=2, M=3, K=2, weights="khot", eps=1e-2):
    teacher = sample_hyperteacher(HyperteacherConfig(I=I, H=H, O=O, M=M, K=K, weights=weights, seed=seed))
    return teacher, build_shallow(teacher, eps)


def level_z(teacher) -> np.ndarray:
    """Every task of the family: each support of size ≤ K, each tuple of weight levels on it."""
    rows = []
    for size in range(1, teacher.K + 1):
        for support in itertools.combinations(range(teacher.M), size):
            for w in itertools.product(teacher.weight_values, repeat=size):
                z = np.zeros(teacher.M)
                z[list(support)] = w
                rows.append(z)
    return np.array(rows)


def brute_gamma(teacher, net, z: np.ndarray) -> float:
    """max over outputs o, vertices γ ∈ {0,1}^H and kinks of (C/N²)·Σ_i max_θ Σ_h γ_h·A_ho·B(θ, φ_ih),
    by enumeration: what gamma_bound computes for one task, exactly (up to rounding)."""
    N, C = net.N, net.C
    kinks = ti.kink_values(ti.task_phases(teacher.W, teacher.K, C, N, z[None]))[0]  # (I, 2H, H)
    return max(np.einsum("ikh,h->ik", kinks, np.array(g) * teacher.A[:, o]).max(axis=1).sum()
               for o in range(teacher.O) for g in itertools.product([0.0, 1.0], repeat=teacher.H)) * C / N**2


def grid_sup(net, teacher, z: np.ndarray, n_x: int = 2001) -> np.ndarray:
    """max over a grid of x ∈ [-1, 1] (I = 1) of ‖f − g‖∞ for each task z: errors the network has."""
    x = torch.linspace(-1.0, 1.0, n_x, dtype=torch.float64)[:, None]
    with torch.no_grad():
        return np.array([float(pointwise_error(net, teacher, torch.as_tensor(row).expand(n_x, -1), x).max())
                         for row in z])


class Clock:
    """A perf_counter that moves one second per call, so that `seconds=s` lets a loop that
    reads the clock once per step take about s steps, whatever the machine's speed."""

    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        self.t += 1.0
        return self.t


# ─── levels_bound ─────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("seed", range(4))
def test_levels_bound_with_no_time_is_the_largest_task_bound_and_above_brute_force(seed):
    teacher, net = instance(seed)
    z = level_z(teacher)
    truth = max(brute_gamma(teacher, net, row) for row in z)
    lv = vi.levels_bound(net, teacher, seconds=0.0, progress=False)
    tb = ti.task_bound(ti.task_phases(teacher.W, teacher.K, net.C, net.N, z), teacher.A, net.C, net.N)
    assert lv.settings["refined"] == 0 and not lv.settings["refined_exact"]
    # No γ pass: the bound is the largest task_bound (+ the float64 margin), and above every task.
    assert lv.bound == pytest.approx(tb.max() + lv.fp_margin, rel=1e-14, abs=0.0)
    assert truth <= lv.bound
    assert grid_sup(net, teacher, z).max() <= lv.bound + net.rounding_floor()


@pytest.mark.parametrize("steps", [2, 3, 5])
def test_levels_bound_stopped_after_a_few_tasks_stays_above_brute_force(monkeypatch, steps):
    """A clock that runs out after steps − 1 γ refinements: the tasks not reached must still
    count, through their task_bound (`unreached`). Seeds 2, 3 and 9 of this family have their
    worst task (by γ) 2nd, 2nd and 3rd in task_bound's order, found by trying."""
    caught_unreached = False
    for seed in [0, 2, 3, 9]:
        teacher, net = instance(seed, I=3, H=2, M=3, K=2)
        z = level_z(teacher)
        per_task = np.array([brute_gamma(teacher, net, row) for row in z])
        monkeypatch.setattr(vi, "time", Clock())
        lv = vi.levels_bound(net, teacher, seconds=float(steps), progress=False)
        monkeypatch.undo()
        refined = lv.settings["refined"]
        assert 0 < refined <= steps - 1
        assert per_task.max() <= lv.bound
        # Which instances exercise the branch: the best refined value is below a task not reached.
        tb = ti.task_bound(ti.task_phases(teacher.W, teacher.K, net.C, net.N, z), teacher.A, net.C, net.N)
        order = np.argsort(-tb, kind="stable")
        caught_unreached |= per_task[order[:refined]].max() < per_task.max()
    if steps <= 3:
        assert caught_unreached, "no instance had its worst task beyond the budget: the test would not bite"


def test_levels_bound_with_time_is_exact_and_equals_brute_force():
    """With time to spare the γ pass finishes: the bound is the brute-force max + the margin."""
    for seed in range(3):
        teacher, net = instance(seed)
        truth = max(brute_gamma(teacher, net, row) for row in level_z(teacher))
        lv = vi.levels_bound(net, teacher, seconds=60.0, progress=False)
        assert lv.settings["refined_exact"]
        assert truth <= lv.bound <= truth * (1 + 1e-12) + 2 * lv.fp_margin


def test_levels_bound_reports_what_it_refined():
    """With time to spare: `refined` is the number of tasks whose task_bound exceeds the γ bound
    it ends at (they are refined in descending order until the next is not above the best), the
    worst task and the top tasks are those of largest task_bound, and the other fields say what
    was bounded. Checked against task_bound and brute force over every task."""
    most = 0
    # Seeds 2, 3 and 9 of the second family need 2 or 3 refinements (see the test above).
    cases = [(0, {}), (1, {}), (2, {}), (2, dict(I=3, H=2)), (3, dict(I=3, H=2)), (9, dict(I=3, H=2))]
    for seed, sizes in cases:
        teacher, net = instance(seed, **sizes)
        z = level_z(teacher)
        truth = max(brute_gamma(teacher, net, row) for row in z)
        tb = ti.task_bound(ti.task_phases(teacher.W, teacher.K, net.C, net.N, z), teacher.A, net.C, net.N)
        lv = vi.levels_bound(net, teacher, seconds=20.0, keep=5, progress=False)
        refined = lv.settings["refined"]
        assert (tb > truth * (1 + 1e-9)).sum() <= refined <= (tb > truth * (1 - 1e-9)).sum()
        most = max(most, refined)
        assert lv.task_set == "levels" and lv.pieces == len(z)
        assert lv.settings["first_pass"] == pytest.approx(tb.max(), rel=1e-14, abs=0.0)
        assert lv.top_z.shape == (5, teacher.M) and np.array_equal(lv.z, lv.top_z[0])
        top_tb = ti.task_bound(ti.task_phases(teacher.W, teacher.K, net.C, net.N, lv.top_z), teacher.A,
                               net.C, net.N)
        assert top_tb == pytest.approx(np.sort(tb)[::-1][:5], rel=1e-14, abs=0.0)
        assert lv.settings["seconds"] == 20.0
        assert 0 <= lv.settings["first_pass_seconds"] <= lv.seconds < 20.0
    assert most >= 2, "no instance needed a second refinement: the count would not be tested"


def test_levels_bound_is_not_exact_when_gamma_bound_stopped_at_its_cap(monkeypatch):
    """Every gamma_bound stopped at a frontier of 0: the γ pass refines tasks but proves none
    exact, so `refined_exact` must be False, and the bound is still above brute force."""
    monkeypatch.setattr(ti, "GAMMA_FRONTIER", 0)
    teacher, net = instance(0)
    lv = vi.levels_bound(net, teacher, seconds=60.0, progress=False)
    assert lv.settings["refined"] > 0 and not lv.settings["refined_exact"]
    assert max(brute_gamma(teacher, net, row) for row in level_z(teacher)) <= lv.bound


def test_levels_bound_refuses_continuous_weights():
    teacher, net = instance(0, weights="continuous")
    with pytest.raises(ValueError, match="^continuous weights have no finite set of levels: use zk_bound$"):
        vi.levels_bound(net, teacher, seconds=0.0, progress=False)


# ─── gamma_bound at its frontier cap ──────────────────────────────────────────────────────────

@pytest.mark.parametrize("cap", [0, 1, 3])
def test_gamma_bound_stopped_at_a_tiny_frontier_stays_above_brute_force(monkeypatch, cap):
    """With the frontier capped, gamma_bound stops early and must return the largest bound of the
    nodes it keeps (not the best vertex seen so far)."""
    monkeypatch.setattr(ti, "GAMMA_FRONTIER", cap)
    stopped = 0
    for seed in range(12):
        teacher, net = instance(seed, I=2, H=4, O=2, M=2, K=1)
        N, C = net.N, net.C
        outputs = np.stack([np.zeros(teacher.O, dtype=np.int64), np.arange(teacher.O)], axis=1)
        for z in np.eye(teacher.M):
            kinks = ti.kink_values(ti.task_phases(teacher.W, teacher.K, C, N, z[None]))
            value, exact = ti.gamma_bound(kinks, teacher.A, C, N, outputs)
            truth = brute_gamma(teacher, net, z)
            assert truth <= value * (1 + 1e-12)
            assert value <= ti.task_bound(ti.task_phases(teacher.W, teacher.K, C, N, z[None]),
                                          teacher.A, C, N)[0] * (1 + 1e-12)
            stopped += not exact
    assert stopped > 0, "the cap never stopped the search: the test would not bite"


def test_gamma_bound_above_a_given_floor_returns_it_or_more():
    """`above`: the value returned is max(above, the task's bound), never less than either."""
    teacher, net = instance(1, I=2, H=4, O=2, M=2, K=1)
    N, C = net.N, net.C
    outputs = np.stack([np.zeros(2, dtype=np.int64), np.arange(2)], axis=1)
    z = np.eye(2)[0]
    kinks = ti.kink_values(ti.task_phases(teacher.W, 1, C, N, z[None]))
    truth = brute_gamma(teacher, net, z)
    for above in [0.0, 0.5 * truth, truth * 2]:
        value, exact = ti.gamma_bound(kinks, teacher.A, C, N, outputs, above=above)
        assert exact and value >= above * (1 - 1e-15) and value >= truth * (1 - 1e-12)
        assert value <= max(above, truth) * (1 + 1e-12)


# ─── zk_bound ─────────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("steps", [0, 1, 2, 4])
def test_zk_bound_stopped_after_a_few_splits_stays_above_a_grid(monkeypatch, steps):
    for seed in range(2):
        teacher, net = instance(seed, H=2, O=1, M=2, K=2, weights="continuous")
        truth = exhaustive_zk_sup(net, teacher, n_w=41, n_x=501)
        monkeypatch.setattr(vi, "time", Clock())
        zk = vi.zk_bound(net, teacher, seconds=float(steps), split_batch=2, grid=64, progress=False)
        monkeypatch.undo()
        assert (zk.pieces > 1) == (steps >= 2)
        assert truth <= zk.bound + net.rounding_floor()
        assert zk.bound <= net.certificate() * (1 + 1e-12) + 4 / 64 * net.certificate() + zk.fp_margin


def test_zk_bound_splits_only_lower_its_bound():
    """More splits never raise the bound (each box is replaced by its two halves, and a half's
    bound is over a subset of the box's phases)."""
    teacher, net = instance(0, H=2, O=1, M=2, K=2, weights="continuous")
    bounds, resolution = [], []
    for steps in [0, 2, 6, 40]:
        clock = Clock()
        vi.time, saved = clock, vi.time
        try:
            zk = vi.zk_bound(net, teacher, seconds=float(steps), split_batch=8, progress=False)
            bounds.append(zk.bound)
            resolution.append(zk.resolution)
        finally:
            vi.time = saved
    # Here the sup is within 1% of the certificate, so the bound hardly moves; the boxes shrink.
    assert resolution[-1] < 0.2 * resolution[0]
    assert all(b1 <= b0 * (1 + 1e-12) for b0, b1 in itertools.pairwise(bounds))


def test_zk_bound_with_no_time_is_the_largest_unit_box_bound():
    """No time: one box [0, 1]^K per support of size K, its phases' range from the centre and
    the slopes, bounded by box_bound at zk_bound's own grid; the answer is the largest, rounded
    up past the float64 margin, and the report names that box's centre."""
    teacher, net = instance(1, I=2, H=3, O=2, M=3, K=2, weights="continuous", eps=0.3)
    N, C, K = net.N, net.C, teacher.K  # N small: a unit box spans about one period of φ
    slopes = np.abs(ti.phase_slopes(teacher.W, K, C, N))
    best, where = -1.0, None
    supports = list(itertools.combinations(range(teacher.M), K))
    for S in supports:
        z = np.zeros((1, teacher.M))
        z[0, list(S)] = 0.5
        phi = ti.task_phases(teacher.W, K, C, N, z)
        radius = 0.5 * slopes[list(S)].sum(axis=0)[None]
        value = ti.box_bound(phi - radius, phi + radius, teacher.A, C, N, grid=16)[0]
        if value > best:
            best, where = value, z[0]
    zk = vi.zk_bound(net, teacher, seconds=0.0, grid=16, split_batch=2, progress=False)
    margin = ti.rounding_margin(teacher.W, teacher.A, K, C, N)
    assert zk.bound == pytest.approx(best + margin, rel=1e-15, abs=0.0) and zk.bound >= best + margin
    assert zk.task_set == "Z_K" and zk.pieces == len(supports) and np.array_equal(zk.z, where)
    assert zk.settings == dict(seconds=0.0, rounds=None, grid=16, split_batch=2) and zk.fp_margin == margin
    assert 0 <= zk.seconds < 60 and zk.resolution >= 1.0


def test_zk_bound_after_splits_stays_above_the_task_bound_of_random_tasks(monkeypatch):
    """After a few rounds of halving (a fake clock), every task of Z_K still lies in some box, so
    the bound stays above the task_bound of random tasks (a split that loses part of a box, or
    bounds a half at the wrong centre, falls below some). Each round splits split_batch boxes
    into two, counted in `pieces`."""
    from tests.strategies import random_tasks

    for seed in range(3):
        teacher, net = instance(seed, I=2, H=3, O=2, M=3, K=2, weights="continuous", eps=3e-2)
        z = random_tasks(teacher, 4000, seed)[0].numpy()
        tb = ti.task_bound(ti.task_phases(teacher.W, teacher.K, net.C, net.N, z), teacher.A, net.C, net.N)
        monkeypatch.setattr(vi, "time", Clock())
        zk = vi.zk_bound(net, teacher, seconds=100.0, grid=64, split_batch=8, progress=False)
        monkeypatch.undo()
        # 3 supports, then 99 rounds, each splitting min(8, boxes so far): 3, 6, then 8 × 97.
        assert zk.pieces == 3 + 2 * (3 + 6 + 97 * 8)
        assert tb.max() <= zk.bound


def test_levels_bound_covers_every_tuple_of_several_levels():
    """With several weight levels (discrete) and K = 2, every tuple of levels on a support is a
    task: levels_bound counts each and stays above brute force over all of them."""
    teacher, net = instance(0, weights="discrete")
    z = level_z(teacher)
    assert len(teacher.weight_values) > 1
    lv = vi.levels_bound(net, teacher, seconds=20.0, progress=False)
    assert lv.pieces == len(z)
    assert max(brute_gamma(teacher, net, row) for row in z) <= lv.bound


# ─── work budgets: rounds (zk_bound) and tasks (levels_bound) ────────────────────────────────
# Figure 3 bounds each point with a fixed amount of work, so that its data are the same on every
# machine. These hold that budget to what it says: it stops at the count asked for (a clock that
# would have stopped it elsewhere is not read), the answer stays above an error the network
# really has, and a second call returns the same bytes.


class NoClockInLoop(Clock):
    """A perf_counter that would end a time-budgeted loop at once (each call moves it an hour)."""

    def perf_counter(self):
        self.t += 3600.0
        return self.t


def boxes_after(supports: int, rounds: int, split_batch: int) -> int:
    """zk_bound's `pieces` after `rounds` rounds: each halves min(split_batch, boxes) boxes."""
    boxes = pieces = supports
    for _ in range(rounds):
        split = min(split_batch, boxes)
        boxes, pieces = boxes + split, pieces + 2 * split
    return pieces


@pytest.mark.parametrize("rounds", [0, 1, 3, 6])
def test_zk_bound_with_rounds_stops_where_it_says_and_stays_above_the_measured_error(monkeypatch, rounds):
    teacher, net = instance(0, H=2, O=1, M=2, K=2, weights="continuous")
    monkeypatch.setattr(vi, "time", NoClockInLoop())
    zk = vi.zk_bound(net, teacher, seconds=0.0, rounds=rounds, split_batch=2, grid=64, progress=False)
    again = vi.zk_bound(net, teacher, seconds=1e9, rounds=rounds, split_batch=2, grid=64, progress=False)
    monkeypatch.undo()
    assert zk.pieces == boxes_after(1, rounds, 2) and zk.settings["rounds"] == rounds
    # The same work whatever the clock says: the same answer, to the last bit.
    assert (zk.bound, zk.pieces, zk.resolution) == (again.bound, again.pieces, again.resolution)
    assert np.array_equal(zk.z, again.z)
    floor = net.rounding_floor()
    measured = measure_sup_error(net, teacher, progress=False, **FAST).sup_error
    assert 0 < measured <= zk.bound + floor
    assert exhaustive_zk_sup(net, teacher, n_w=41, n_x=501) <= zk.bound + floor


def test_zk_bound_with_rounds_counts_rounds_of_split_batch_boxes():
    """Three supports of size 2, split_batch 8: the first rounds split every box, then 8 a round;
    more rounds never raise the bound."""
    teacher, net = instance(1, I=2, H=3, O=2, M=3, K=2, weights="continuous", eps=3e-2)
    bounds = []
    for rounds in [0, 1, 2, 5]:
        zk = vi.zk_bound(net, teacher, rounds=rounds, grid=64, split_batch=8, progress=False)
        assert zk.pieces == boxes_after(3, rounds, 8)
        bounds.append(zk.bound)
    assert all(b1 <= b0 * (1 + 1e-12) for b0, b1 in itertools.pairwise(bounds))


@pytest.mark.parametrize("tasks", [0, 1, 2, 3, 10_000])
def test_levels_bound_with_tasks_stops_where_it_says_and_stays_above_brute_force(monkeypatch, tasks):
    """With `tasks` the γ pass refines that many tasks at most, whatever the clock says.
    Seeds 2, 3 and 9 of this family have their worst task 2nd, 2nd and 3rd in task_bound's
    order (see above): a budget of 1 or 2 tasks must still count it through its task_bound."""
    for seed in [0, 2, 3, 9]:
        teacher, net = instance(seed, I=3, H=2, M=3, K=2)
        z = level_z(teacher)
        per_task = np.array([brute_gamma(teacher, net, row) for row in z])
        monkeypatch.setattr(vi, "time", NoClockInLoop())
        lv = vi.levels_bound(net, teacher, seconds=0.0, tasks=tasks, progress=False)
        again = vi.levels_bound(net, teacher, seconds=1e9, tasks=tasks, progress=False)
        monkeypatch.undo()
        exact = vi.levels_bound(net, teacher, seconds=60.0, progress=False)
        refined = lv.settings["refined"]
        # It stops at the budget, or earlier where the rest cannot exceed what it has.
        assert refined == min(tasks, exact.settings["refined"]) and lv.settings["tasks"] == tasks
        assert lv.settings["refined_exact"] == (refined == exact.settings["refined"])
        assert (lv.bound, refined) == (again.bound, again.settings["refined"])
        assert np.array_equal(lv.top_z, again.top_z)
        assert per_task.max() <= lv.bound
        # An error the network has on the family's tasks (the measurer, weights kept at levels).
        measured = measure_sup_error(net, teacher, progress=False, refine_z=False, **FAST).sup_error
        assert 0 < measured <= lv.bound + net.rounding_floor()
        if tasks >= exact.settings["refined"]:
            assert lv.bound == exact.bound


def test_work_budgets_below_zero_are_refused():
    teacher, net = instance(0, weights="continuous")
    with pytest.raises(ValueError, match="^rounds must be >= 0, got -1$"):
        vi.zk_bound(net, teacher, rounds=-1, progress=False)
    teacher, net = instance(0)
    with pytest.raises(ValueError, match="^tasks must be >= 0, got -1$"):
        vi.levels_bound(net, teacher, tasks=-1, progress=False)
