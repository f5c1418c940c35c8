"""The instance bound (theory/instance.py, verify/theorem/instance.py): its phase form is the network's
error exactly, and each of its upper ends is above every error a search or a grid finds,
and below the certificate. Broken versions of it (a dropped remainder, a dropped (·)⁺, one
kink of two) are caught by the same grids."""

import itertools
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from constructions.deep import build_deep
from constructions.shallow import build_shallow
from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
from tests.strategies import FAST, random_tasks
from theory.bounds import certificate
from theory.instance import beta, box_bound, gamma_bound, kink_values, task_bound, task_phases
from theory.instance import phase_form_error as theory_phase_form_error
from verify.theorem import bound
from verify.theorem.instance import guided_search, levels_bound, zk_bound
from verify.theorem.measure import measure_sup_error, pointwise_error

EXAMPLES = max(4, settings.default.max_examples // 5)


@st.composite
def tiny(draw, max_io=3, max_M=3):
    """(teacher, network) with I = 1 (so a grid over x is exhaustive) unless max_io says otherwise."""
    M = draw(st.integers(1, max_M))
    cfg = HyperteacherConfig(I=draw(st.integers(1, max_io)), H=draw(st.integers(1, max_io)),
                             O=draw(st.integers(1, 2)), M=M, K=draw(st.integers(1, min(2, M))),
                             weights=draw(st.sampled_from(["khot", "discrete"])),
                             encoding=draw(st.sampled_from(["identity", "orthogonal"])),
                             seed=draw(st.integers(0, 2**16)))
    teacher = sample_hyperteacher(cfg)
    eps = 10.0 ** draw(st.floats(-2.5, -1.0))
    build = draw(st.sampled_from([build_shallow, build_deep]))
    return teacher, build(teacher, eps, constants=draw(st.sampled_from(["apriori", "instance"])))


def N_of(net) -> int:
    return net.N_eff if hasattr(net, "N_eff") else net.N


def phase_form_error(net, teacher, z: np.ndarray, x: np.ndarray) -> np.ndarray:
    return theory_phase_form_error(teacher.W, teacher.b, teacher.A, teacher.K, net.C, N_of(net), z, x)


def grid_sup(net, teacher, z: np.ndarray, n_x: int = 4001) -> np.ndarray:
    """max over a grid of x ∈ [-1, 1] (I = 1) of ‖f − g‖∞, for each task z: (T,)."""
    x = torch.linspace(-1.0, 1.0, n_x, dtype=torch.float64)[:, None]
    zt = torch.as_tensor(z)
    with torch.no_grad():
        return np.array([float(pointwise_error(net, teacher, row.expand(n_x, -1), x).max()) for row in zt])


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=tiny(max_io=4, max_M=5), seed=st.integers(0, 2**16))
def test_the_phase_form_is_the_networks_error(case, seed):
    teacher, net = case
    z, x = random_tasks(teacher, 256, seed)
    inputs = torch.cat([teacher.encode(z), x], dim=1)
    with torch.no_grad():
        network = (net(inputs) - teacher.forward(z, x)).numpy()
    assert np.abs(phase_form_error(net, teacher, z.numpy(), x.numpy()) - network).max() <= 1e-12


def test_beta_is_the_interpolants_excess_scaled():
    N = 7
    t = np.linspace(-1.0, 1.0, 1001)
    from theory.bounds import square_interpolant

    assert np.abs(beta((t + 1.0) * N / 2.0) / N**2 - (square_interpolant(t, N) - t * t)).max() <= 1e-15


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=tiny(max_io=1), data=st.data())
def test_task_bound_is_above_a_grid_over_x_and_below_the_certificate(case, data):
    teacher, net = case
    z, _ = random_tasks(teacher, 16, data.draw(st.integers(0, 2**16)))
    z = z.numpy()
    b = task_bound(task_phases(teacher.W, teacher.K, net.C, N_of(net), z), teacher.A, net.C, N_of(net))
    floor = net.rounding_floor()
    assert (grid_sup(net, teacher, z) <= b + floor).all()
    assert (b <= net.certificate() * (1 + 1e-12)).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(phi=st.lists(st.floats(-20, 20), min_size=6, max_size=6), width=st.floats(0.0, 0.5),
       where=st.lists(st.floats(0, 1), min_size=6, max_size=6), seed=st.integers(0, 2**16))
def test_box_bound_is_above_the_task_bound_of_every_task_in_the_box(phi, width, where, seed):
    A = np.random.default_rng(seed).normal(size=(3, 2))
    lo = np.array(phi).reshape(1, 2, 3)
    hi = lo + width
    inside = lo + width * np.array(where).reshape(1, 2, 3)
    assert task_bound(inside, A, 1.3, 9)[0] <= box_bound(lo, hi, A, 1.3, 9)[0] * (1 + 1e-12)
    # A point box exceeds the exact task bound by at most the grid's remainder.
    gap = box_bound(inside, inside, A, 1.3, 9, grid=256)[0] - task_bound(inside, A, 1.3, 9)[0]
    assert -1e-15 <= gap <= 2 * 4.0 / 256 * np.abs(A).sum(axis=0).max() * 1.3 / 81


def exhaustive_zk_sup(net, teacher, n_w: int = 101, n_x: int = 1001) -> float:
    """max over a grid of x (I = 1) and of every support's weights in [0, 1]."""
    k = min(teacher.K, teacher.M)
    ws = np.array(list(itertools.product(np.linspace(0.0, 1.0, n_w), repeat=k)))
    worst = 0.0
    for support in itertools.combinations(range(teacher.M), k):
        z = np.zeros((len(ws), teacher.M))
        z[:, list(support)] = ws
        worst = max(worst, float(grid_sup(net, teacher, z, n_x=n_x).max()))
    return worst


@settings(max_examples=max(3, EXAMPLES // 2), deadline=None)
@given(case=tiny(max_io=1, max_M=2))
def test_zk_bound_is_above_an_exhaustive_grid_and_the_measurer(case):
    teacher, net = case
    zk = zk_bound(net, teacher, seconds=1.0, progress=False)
    floor = net.rounding_floor()
    assert exhaustive_zk_sup(net, teacher, n_w=41 if teacher.K == 2 else 201) <= zk.bound + floor
    assert measure_sup_error(net, teacher, progress=False, **FAST).sup_error <= zk.bound + floor


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=tiny(max_io=1))
def test_levels_bound_is_above_every_level_task(case):
    teacher, net = case
    lv = levels_bound(net, teacher, progress=False)
    k = teacher.K
    rows = []
    for size in range(1, k + 1):
        for support in itertools.combinations(range(teacher.M), size):
            for w in itertools.product(teacher.weight_values, repeat=size):
                z = np.zeros(teacher.M)
                z[list(support)] = w
                rows.append(z)
    assert grid_sup(net, teacher, np.array(rows)).max() <= lv.bound + net.rounding_floor()
    assert lv.bound <= net.certificate() * (1 + 1e-12)


def test_on_tiny_instances_the_bracket_closes():
    """One neuron (I = H = O = M = K = 1): the branch and bound gets within 3% of a grid's sup."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="khot", seed=1))
    net = build_shallow(teacher, 1e-2)
    zk = zk_bound(net, teacher, seconds=2.0, progress=False)
    on_grid = exhaustive_zk_sup(net, teacher, n_w=2001)
    assert on_grid <= zk.bound <= 1.03 * on_grid


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=tiny(max_io=3), seed=st.integers(0, 2**16))
def test_guided_search_finds_a_real_error_below_the_task_bound(case, seed):
    teacher, net = case
    z, _ = random_tasks(teacher, 2, seed)
    err, x, at = guided_search(net, teacher, z.numpy(), seed=seed)
    assert np.abs(x).max() <= 1.0 and any(np.array_equal(at, row) for row in z.numpy())
    with torch.no_grad():
        again = pointwise_error(net, teacher, torch.as_tensor(at)[None], torch.as_tensor(x)[None])
    assert float(again) == err
    N = N_of(net)
    assert err <= task_bound(task_phases(teacher.W, teacher.K, net.C, N, at[None]), teacher.A, net.C, N)[0] \
        + net.rounding_floor()


# Broken bounds, each caught on a small instance by the same grids.

def task_bound_one_kink(phi, A, C, N):
    """Wrong: the kinks at +φ only, for σ = +1 only (it forgets the mirrored kinks)."""
    B = beta(phi[..., :, None] + phi[..., None, :]) - beta(phi[..., :, None] - phi[..., None, :])
    F = np.maximum(B, 0.0) @ np.maximum(A, 0.0) + np.maximum(-B, 0.0) @ np.maximum(-A, 0.0)
    return F.max(axis=2).sum(axis=1).max(axis=1) * (C / N**2)


def task_bound_signed(phi, A, C, N):
    """Wrong: drops the (·)⁺ of fact 1, as if every hidden unit were active, one sign only."""
    B = beta(phi[..., :, None] + phi[..., None, :]) - beta(phi[..., :, None] - phi[..., None, :])
    return (B @ A).max(axis=2).sum(axis=1).max(axis=1) * (C / N**2)


@pytest.mark.parametrize("broken", [task_bound_one_kink, task_bound_signed])
def test_a_broken_task_bound_is_caught(broken):
    caught = 0
    for seed in range(20):
        teacher = sample_hyperteacher(HyperteacherConfig(I=1, H=3, O=2, M=2, K=1, weights="khot", seed=seed))
        net = build_shallow(teacher, 1e-2)
        z = np.eye(2)
        b = broken(task_phases(teacher.W, 1, net.C, net.N, z), teacher.A, net.C, net.N)
        caught += bool((grid_sup(net, teacher, z) > b + 1e-12).any())
    assert caught > 0


def test_a_box_bound_without_its_remainder_is_caught():
    """On a coarse θ grid the remainder is what keeps the bound above the truth."""
    caught = 0
    for seed in range(20):
        teacher = sample_hyperteacher(HyperteacherConfig(I=1, H=3, O=2, M=2, K=1, weights="khot", seed=seed))
        net = build_shallow(teacher, 1e-2)
        phi = task_phases(teacher.W, 1, net.C, net.N, np.eye(2))
        grid = 4
        without = box_bound(phi, phi, teacher.A, net.C, net.N, grid) - \
            4.0 * np.abs(teacher.A).sum(axis=0).max() / grid * net.C / net.N**2
        caught += bool((grid_sup(net, teacher, np.eye(2)) > without + 1e-12).any())
        assert (grid_sup(net, teacher, np.eye(2)) <= box_bound(phi, phi, teacher.A, net.C, net.N, grid)).all()
    assert caught > 0


def test_the_instance_bound_never_exceeds_the_certificate_formula():
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=4, K=2, seed=2))
    net = build_shallow(teacher, 1e-3)
    phi = task_phases(teacher.W, 2, net.C, net.N, np.random.default_rng(0).random((64, 4)))
    assert (task_bound(phi, teacher.A, net.C, net.N) <= certificate(3, net.C, net.a, net.N)).all()


def test_cli_prints_the_bracket_and_refuses_other_constructions(capsys):
    argv = "--M 3 --K 2 --I 1 --H 2 --O 1 --eps 1e-2 --bound instance --bound-seconds 1 --no-progress".split()
    assert bound.main(argv + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ib = report["instance_bound"]
    assert set(ib) == {"Z_K", "levels", "guided"}
    zk = ib["Z_K"]
    assert report["measured"]["sup_error"] <= zk["lower"] <= zk["upper"] <= report["certificate"]
    # They tie when the bracket closes, up to rounding.
    assert ib["levels"]["lower"] <= ib["levels"]["upper"] + report["rounding_floor_float64"]
    assert report["checks"]["lower end <= instance bound"] and report["passed"]
    assert bound.main(argv) == 0
    assert "bracket" in capsys.readouterr().out
    assert bound.main(argv + ["--construction", "optimal"]) == 2
    assert "--bound instance covers" in capsys.readouterr().err


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=tiny(max_io=3), seed=st.integers(0, 2**16))
def test_gamma_bound_is_the_max_over_every_vertex_and_between_the_truth_and_task_bound(case, seed):
    teacher, net = case
    z, _ = random_tasks(teacher, 1, seed)
    z = z.numpy()
    N, C, H, O = N_of(net), net.C, teacher.H, teacher.O
    phi = task_phases(teacher.W, teacher.K, C, N, z)
    kinks = kink_values(phi)[0]  # (I, 2H, H)
    outputs = np.stack([np.zeros(O, dtype=np.int64), np.arange(O)], axis=1)
    value, exact = gamma_bound(kinks[None], teacher.A, C, N, outputs)
    brute = max((np.einsum("ikh,h->ik", kinks, np.array(g) * teacher.A[:, o]).max(axis=1).sum())
                for o in range(O) for g in itertools.product([0.0, 1.0], repeat=H)) * C / N**2
    assert exact and value == pytest.approx(brute, rel=1e-12, abs=1e-18)
    assert value <= task_bound(phi, teacher.A, C, N)[0] * (1 + 1e-12)
    if teacher.I == 1:
        assert grid_sup(net, teacher, z)[0] <= value + net.rounding_floor()


@settings(max_examples=max(3, EXAMPLES // 2), deadline=None)
@given(case=tiny(max_io=2, max_M=2))
def test_the_instance_bounds_are_above_the_exact_sup_by_milp(case):
    """Against verify.exact_sup's MILP: on the family's tasks its sup is exact up to HiGHS's
    1e-10 tolerances (exact_sup.proven_upper: its upper end may sit that far above the true max,
    which MILP_TOL allows for in every comparison with it; hypothesis found an instance where it
    sat 1.0e-10 above a sound bound), and its lower end is an error the network has, which no
    sound bound is below, on the levels as over Z_K."""
    from verify.theorem.exact_sup import MILP_TOL, exact_sup, work_estimate

    teacher, net = case
    assume(work_estimate(net, teacher, grid=2, max_cells=4)["work"] <= 5_000)
    floor = net.rounding_floor()
    on_levels = exact_sup(net, teacher, task_set="levels", time_limit=5.0)
    assert on_levels["on_levels"] and on_levels["proven"]
    bound_levels = levels_bound(net, teacher, seconds=1.0, progress=False).bound
    assert on_levels["lower"] <= bound_levels + floor
    assert on_levels["upper"] <= bound_levels + floor + MILP_TOL
    over_zk = exact_sup(net, teacher, grid=2, max_cells=4, time_limit=5.0)
    assert over_zk["lower"] <= zk_bound(net, teacher, seconds=1.0, progress=False).bound + floor


# ─── the pieces of box_bound and rounding_margin, against brute force ──────────────────────────

def test_beta_range_is_the_min_and_max_of_beta_over_each_window():
    """_beta_range against a fine grid of each window (plus the window's own half-integers and
    integers, where β peaks at 1 and vanishes): its max is ≥ every value β takes there, and within
    β's Lipschitz constant 4 times the grid step of the grid's max; its min likewise."""
    from theory.instance import _beta_range

    rng = np.random.default_rng(0)
    lo = rng.uniform(-3.0, 3.0, 4000)
    lo[:40], lo[40:80] = 0.5 - 0.1 * rng.random(40), 1.5  # windows that end, or start, on a peak
    hi = lo + np.concatenate([rng.uniform(0.0, 0.02, 1000), rng.uniform(0.0, 1.2, 3000)])
    hi[:40] = 0.5
    got_min, got_max = _beta_range(lo, hi)
    steps = 2001
    for j in range(len(lo)):
        s = np.linspace(lo[j], hi[j], steps)
        special = np.concatenate([np.arange(np.ceil(lo[j] - 0.5), np.floor(hi[j] - 0.5) + 1) + 0.5,
                                  np.arange(np.ceil(lo[j]), np.floor(hi[j]) + 1)])
        values = beta(np.concatenate([s, special]))
        slack = 4.0 * (hi[j] - lo[j]) / (steps - 1) + 1e-12
        assert got_max[j] >= values.max() - 1e-15 and got_max[j] <= values.max() + slack
        assert got_min[j] <= values.min() + 1e-15 and got_min[j] >= values.min() - slack


def test_phase_slopes_are_the_phases_derivatives():
    """φ is linear in z: moving z_m by t moves φ by t·slope_m exactly (up to rounding)."""
    from theory.instance import phase_slopes

    rng = np.random.default_rng(3)
    M, I, H, K, C, N = 4, 2, 3, 2, 1.7, 37
    W = rng.normal(size=(M, I, H))
    z = rng.uniform(0, 1, (1, M))
    slopes = phase_slopes(W, K, C, N)
    for m in range(M):
        t = 0.37
        moved = z + t * np.eye(M)[m]
        diff = task_phases(W, K, C, N, moved)[0] - task_phases(W, K, C, N, z)[0]
        assert np.abs(diff - t * slopes[m]).max() <= 1e-12 * N


def test_phase_scale_is_the_largest_phase_range_over_Z_K():
    """Φ = max over supports S (|S| ≤ K) and (i, h) of Σ_{m ∈ S} |∂φ_ih/∂z_m|: the largest
    |φ| + box radius on Z_K, by enumerating the supports."""
    from theory.instance import phase_scale, phase_slopes

    rng = np.random.default_rng(4)
    for M, I, H, K in [(4, 2, 3, 2), (5, 3, 1, 3), (3, 1, 2, 1)]:
        W = rng.normal(size=(M, I, H)) * rng.uniform(0.1, 3.0, (M, 1, 1))
        C, N = 0.6 + rng.random(), int(rng.integers(5, 500))
        slopes = np.abs(phase_slopes(W, K, C, N))
        brute = max(slopes[list(S)].sum(axis=0).max()
                    for k in range(1, K + 1) for S in itertools.combinations(range(M), k))
        assert phase_scale(W, K, C, N) == pytest.approx(brute, rel=1e-14, abs=0.0)


def test_zk_bound_is_above_the_task_bound_of_random_tasks():
    """Each task of Z_K lies in a box, and box_bound is ≥ the task_bound of every task in it, so
    zk_bound with no time (the first boxes, [0, 1]^K per support) is above the task_bound of
    every task; a box radius that is too small (wrong phase slopes) falls below some task."""
    for seed in range(3):
        teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=3, O=2, M=3, K=2, weights="continuous",
                                                         seed=seed))
        net = build_shallow(teacher, 1e-3)  # N ≈ 100: the phases sweep many periods over a box
        z = random_tasks(teacher, 4000, seed)[0].numpy()
        tb = task_bound(task_phases(teacher.W, teacher.K, net.C, net.N, z), teacher.A, net.C, net.N)
        zk = zk_bound(net, teacher, seconds=0.0, grid=256, progress=False)
        assert tb.max() <= zk.bound


# ─── add_instance_bound: the report's fields are the bounds it calls, and its checks can fail ──

CERT_TEXT = "the certificate I·C·a/N² (its proof)"


def _report(sup_error: float, certificate_: float, floor: float, z_support, z_values) -> dict:
    """The part of verify.bound's report that add_instance_bound reads, with one earlier check."""
    return dict(measured=dict(sup_error=sup_error, z_support=list(z_support), z_values=list(z_values)),
                certificate=certificate_, seconds=1.5, rounding_floor_float64=floor,
                checks={"an earlier check": True}, passed=True)


def _instance(weights: str):
    teacher = sample_hyperteacher(HyperteacherConfig(I=1, H=2, O=2, M=3, K=2, weights=weights, seed=3))
    net = build_shallow(teacher, 2e-2, constants="instance")
    measured_z = np.array([1.0, 0.0, 1.0]) if weights != "continuous" else np.array([0.75, 0.0, 0.5])
    return teacher, net, measured_z


@pytest.mark.parametrize("weights", ["discrete", "continuous"])
def test_add_instance_bound_reports_the_bounds_it_calls(weights):
    """With no time (seconds = 0: zk_bound's first boxes, levels_bound's first pass, both
    deterministic), every field is the value of the function it comes from, recomputed here;
    a measured error above the bounds makes its check False and `passed` False."""
    from verify.theorem.instance import RESTS_ON, add_instance_bound

    teacher, net, mz = _instance(weights)
    support = np.flatnonzero(mz)
    zk = zk_bound(net, teacher, seconds=0.0, progress=False)
    has_levels = weights != "continuous"
    lv = levels_bound(net, teacher, seconds=0.0, progress=False) if has_levels else None
    on_levels = guided_search(net, teacher, lv.top_z[:4]) if has_levels else (-1.0, None, None)
    at_measured = guided_search(net, teacher, mz[None])
    guided = max(on_levels, at_measured, key=lambda r: r[0])
    assert 0.0 < guided[0] < zk.bound
    floor = net.rounding_floor()
    # Certificates above and below zk's bound: the upper end is the smaller, and says which.
    for cert in (2.0 * zk.bound, zk.bound, 0.5 * zk.bound):
        for sup_error in (0.0, guided[0], 0.25 * zk.bound):
            report = _report(sup_error, cert, floor, support, mz[support])
            add_instance_bound(report, net, teacher, 0.0, progress=False)
            ib = report["instance_bound"]
            assert set(ib) == ({"Z_K", "guided", "levels"} if has_levels else {"Z_K", "guided"})
            upper, lower = min(zk.bound, cert), max(sup_error, guided[0])
            Z = ib["Z_K"]
            assert Z["lower"] == lower and Z["upper"] == upper
            assert Z["upper_over_lower"] == upper / lower
            assert Z["lower_from"] == ("guided search" if guided[0] > sup_error else "measurer")
            assert Z["branch_and_bound"] == zk.bound and Z["boxes"] == zk.pieces
            assert Z["resolution"] == zk.resolution and Z["fp_margin"] == zk.fp_margin
            assert Z["over_certificate"] == upper / cert and 0.0 <= Z["seconds"] < 30.0
            assert Z["rests_on"] == (RESTS_ON if zk.bound < cert else CERT_TEXT)
            g = ib["guided"]
            assert g["error"] == guided[0] and np.array_equal(g["x"], guided[1])
            assert g["z_support"] == [int(k) for k in np.flatnonzero(guided[2])]
            assert g["z_values"] == [float(v) for v in guided[2][guided[2] > 0]]
            assert g["tasks"] == (min(4, len(lv.top_z)) + 1 if has_levels else 1)
            assert 0.0 <= g["seconds"] < 30.0
            checks = report["checks"]
            assert checks["an earlier check"]
            assert checks["lower end <= instance bound"] == (lower <= upper + floor)
            if has_levels:
                L = ib["levels"]
                assert L["lower"] == on_levels[0] and L["upper"] == lv.bound and L["tasks"] == lv.pieces
                assert L["upper_over_lower"] == lv.bound / on_levels[0]
                assert L["over_certificate"] == lv.bound / cert and L["fp_margin"] == lv.fp_margin
                assert L["first_pass"] == lv.settings["first_pass"] and L["refined"] == 0
                assert L["refined_exact"] == lv.settings["refined_exact"] and L["rests_on"] == RESTS_ON
                assert L["worst_support"] == [int(k) for k in np.flatnonzero(lv.z)]
                assert L["worst_values"] == [float(v) for v in lv.z[lv.z > 0]]
                assert checks["levels: lower end <= bound"] == (on_levels[0] <= lv.bound + floor)
                assert checks["levels: lower end <= bound"]
            else:
                assert "levels: lower end <= bound" not in checks
            assert report["passed"] == all(checks.values())
            assert report["seconds"] == 1.5 + sum(e["seconds"] for e in ib.values())
        # Upper ends below the lower ones: the checks fail, and `passed` with them.
        report = _report(2.0 * max(cert, zk.bound), cert, floor, support, mz[support])
        add_instance_bound(report, net, teacher, 0.0, progress=False)
        assert report["instance_bound"]["Z_K"]["lower_from"] == "measurer"
        assert not report["checks"]["lower end <= instance bound"] and not report["passed"]


def test_add_instance_bound_checks_at_their_boundaries(monkeypatch):
    """Each check is lower ≤ upper + floor: True at equality, False one step past it, with the
    floor on the upper side. zk_bound's and levels_bound's answers are replaced by bounds that
    put the lower ends exactly there."""
    import dataclasses

    import verify.theorem.instance as vi

    teacher, net, mz = _instance("discrete")
    support = np.flatnonzero(mz)
    lv = levels_bound(net, teacher, seconds=0.0, progress=False)
    zk = zk_bound(net, teacher, seconds=0.0, progress=False)
    x = guided_search(net, teacher, lv.top_z[:4])[0]
    floor = x / 2.0  # x − x/2 and x/2 + x/2 are exact
    cert = 4.0 * zk.bound
    for z_up, l_up, z_ok, l_ok in [(0.5 * zk.bound, x / 2.0, True, True),
                                   (0.5 * zk.bound, np.nextafter(np.nextafter(x / 2.0, 0), 0), True, False)]:
        monkeypatch.setattr(vi, "zk_bound", lambda *a, b=z_up, **k: dataclasses.replace(zk, bound=b))
        monkeypatch.setattr(vi, "levels_bound", lambda *a, b=l_up, **k: dataclasses.replace(lv, bound=b))
        assert (l_up + floor == x) == l_ok
        for sup_error, ok in [(z_up + floor, z_ok), (np.nextafter(z_up + floor, np.inf), False)]:
            report = _report(sup_error, cert, floor, support, mz[support])
            vi.add_instance_bound(report, net, teacher, 0.0, progress=False)
            assert report["instance_bound"]["Z_K"]["lower"] == sup_error
            assert report["instance_bound"]["levels"]["lower"] == x
            assert report["checks"]["lower end <= instance bound"] == ok
            assert report["checks"]["levels: lower end <= bound"] == l_ok
            assert report["passed"] == (ok and l_ok)


def test_add_instance_bound_with_no_error_found_has_an_infinite_ratio(monkeypatch):
    """lower = 0 (nothing measured, the guided search finding 0): upper/lower is inf, not a
    division by zero."""
    import verify.theorem.instance as vi

    teacher, net, mz = _instance("continuous")
    support = np.flatnonzero(mz)
    monkeypatch.setattr(vi, "guided_search", lambda net, teacher, z, **k: (0.0, np.zeros(teacher.I), z[0]))
    report = _report(0.0, 1.0, net.rounding_floor(), support, mz[support])
    vi.add_instance_bound(report, net, teacher, 0.0, progress=False)
    Z = report["instance_bound"]["Z_K"]
    assert Z["lower"] == 0.0 and Z["upper_over_lower"] == math.inf and Z["lower_from"] == "measurer"
