"""verify.certify --z hull: one joint box (z, x) per support, the teacher's z·x products relaxed.

- the hull net is student minus teacher at every real task (its forward, at levels);
- its layer 0 holds the teacher's bilinear pre-activation on random joint boxes (points and corners);
- the hull's upper end is at least every task's exact sup (MILP) and every enumerated lower end;
  its lower end is an error the network has at a real task (a tuple of levels), so it is at most
  the largest exact sup;
- mutants of the product relaxation (an expansion at a wrong corner, a dropped bilinear term)
  give bounds below an error the network has, and the point-sampling check catches each;
- the budgeted stops are sound; the command line takes --z hull and refuses a non-linear encoding.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from tests.test_certify import certify_main, edited_run, exact_sup_milp, saved_run, small_instance  # noqa: F401
from verify.certify import hull as hull_module
from verify.certify.bab import branch_and_bound
from verify.certify.bounds import Bounder
from verify.certify.graph import diff_net
from verify.certify.hull import hull_net
from verify.certify.saved import support_tasks
from verify.theorem.exact_sup import MILP_TOL

SUPPORTS = np.array([[0, 2], [1, -1]])


def joint_points(net, supports, z, rows, x):
    """The hull net's joint points u = (ζ, x) of the tasks z (T, M) of rows `rows`."""
    u = torch.zeros(len(z), net.I, dtype=torch.float64)
    for t, (zz, r) in enumerate(zip(z, rows, strict=True)):
        S = supports[r][supports[r] >= 0]
        u[t, : len(S)] = torch.as_tensor(zz[S])
        u[t, net.K :] = torch.as_tensor(x[t])
    return u


@pytest.fixture(scope="module")
def hull_instance():
    teacher, student, _ = small_instance()
    net = hull_net(student, teacher, SUPPORTS, np.eye(3))
    z, rows = support_tasks(SUPPORTS, teacher.weight_values, teacher.M)
    exact = [exact_sup_milp(student, teacher, zz) for zz in z]
    return teacher, student, net, z, rows, exact


def test_the_hull_net_is_student_minus_teacher_at_every_task(hull_instance):
    teacher, student, net, z, rows, _ = hull_instance
    x = np.random.default_rng(0).uniform(-1, 1, (len(z), teacher.I))
    u = joint_points(net, SUPPORTS, z, rows, x)
    zt, xt = torch.as_tensor(z), torch.as_tensor(x)
    with torch.no_grad():
        want = student(torch.cat([zt, xt], 1)) - teacher.forward(zt, xt)
        got = net.forward(torch.as_tensor(rows), u)
    assert torch.allclose(got, want, rtol=0, atol=1e-13)
    # and the projection rounds to the levels, leaving x alone
    off = u.clone()
    off[:, :2] += 0.03 * (off[:, :2] > 0)
    assert torch.equal(net.project(torch.as_tensor(rows), off), u)


def random_boxes(net, boxes: int, seed: int):
    """Random joint boxes inside each support's root box, and points in them (corners included)."""
    g = torch.Generator().manual_seed(seed)
    task = torch.arange(boxes) % net.T
    rlo, rhi = net.root(task)
    a = torch.rand(boxes, net.I, generator=g, dtype=torch.float64)
    b = torch.rand(boxes, net.I, generator=g, dtype=torch.float64)
    frac = 0.6 * torch.rand(boxes, 1, generator=g, dtype=torch.float64)  # boxes of up to 60 % per side
    lo_f = torch.minimum(a, b) * (1 - frac)
    lo = rlo + (rhi - rlo) * lo_f
    side = 0.3 + 0.7 * torch.rand(boxes, net.I, generator=g, dtype=torch.float64)
    hi = rlo + (rhi - rlo) * (lo_f + frac * side)
    return task, lo, hi, g


def points_in(lo, hi, g, points: int = 48):
    boxes, d = lo.shape
    inside = lo[:, None] + (hi - lo)[:, None] * torch.rand(boxes, points, d, generator=g, dtype=torch.float64)
    corners = torch.stack(
        [torch.where(torch.tensor(c, dtype=torch.bool), hi, lo) for c in itertools.product((0, 1), repeat=d)],
        dim=1,
    )
    return torch.cat([inside, corners], 1)


def layer0_violations(net, boxes: int = 300, seed: int = 0) -> int:
    """Points where a layer-0 unit leaves W₀u + b₀ ± d₀, its box's relaxation, by more than the
    rounding of this check's own float64 evaluation (1e-12; bounds.py adds that margin itself)."""
    task, lo, hi, g = random_boxes(net, boxes, seed)
    W0, b0, d0 = net.first(task, lo, hi)
    u = points_in(lo, hi, g)
    n = u.shape[1]
    flat = u.reshape(-1, net.I)
    tt = task.repeat_interleave(n)
    zeta, x = flat[:, : net.K], flat[:, net.K :]
    hs = x @ net.Ws.T + torch.einsum("bnk,bk->bn", net.Wz[tt], zeta) + net.b1
    a = torch.einsum("bkhi,bi->bkh", net.C[tt], x) + net.c[tt]
    ht = torch.einsum("bk,bkh->bh", zeta / np.sqrt(net.K), a)
    exact = torch.cat([hs, ht], 1).reshape(boxes, n, -1)
    mid = torch.einsum("bni,bpi->bpn", W0, u) + b0[:, None]
    return int(((exact - mid).abs() > d0[:, None] + 1e-12).sum())


def violations(net, boxes: int = 300, seed: int = 0) -> int:
    """Points of random joint boxes where |D| exceeds the box's certified bound."""
    task, lo, hi, g = random_boxes(net, boxes, seed)
    r = Bounder(net, intermediate="forward").bound(task, lo, hi)
    u = points_in(lo, hi, g)
    n = u.shape[1]
    values = net.forward(task.repeat_interleave(n), u.reshape(-1, net.I)).abs().max(1).values
    return int((values.reshape(boxes, n) > r.upper[:, None]).sum())


@pytest.fixture(scope="module")
def mutant_hull():
    teacher, student, _ = small_instance(seed=3, widths=(12, 12))
    return hull_net(student, teacher, np.array([[0, 1], [2, -1], [1, 2]]), np.eye(3))


def test_the_honest_relaxation_has_no_violation(mutant_hull):
    assert layer0_violations(mutant_hull) == 0
    assert violations(mutant_hull) == 0


PRODUCT = hull_module.product_relaxation


def _wrong_corner(wl, wu, al, au):
    """Expanded at the corner (w_l, a_l) instead of the centre, with the centre's radius."""
    _, _, r = PRODUCT(wl, wu, al, au)
    return wl, al, r


def _dropped_term(wl, wu, al, au):
    """The bilinear remainder (w − w_c)(a − a_c) dropped: the tangent plane at the centre alone."""
    wc, ac, r = PRODUCT(wl, wu, al, au)
    return wc, ac, torch.zeros_like(r)


MUTANTS = {"wrong corner": _wrong_corner, "dropped bilinear term": _dropped_term}


@pytest.mark.parametrize("name", MUTANTS)
def test_each_relaxation_mutant_is_caught(mutant_hull, monkeypatch, name):
    monkeypatch.setattr(hull_module, "product_relaxation", MUTANTS[name])
    assert layer0_violations(mutant_hull) > 0, name
    assert violations(mutant_hull) > 0, name


def test_the_hull_brackets_every_tasks_exact_sup(hull_instance):
    teacher, _, net, z, rows, exact = hull_instance
    br = branch_and_bound(net, torch.arange(net.T), ratio=1.02, seconds=30, goal="support", progress=False)
    assert br.stop == "ratio"
    for s in range(len(SUPPORTS)):
        mine = [t for t in range(len(z)) if rows[t] == s]
        best = max(exact[t][0] for t in mine)
        proven = max(exact[t][1] for t in mine)
        upper, lower = float(br.upper[s]), float(br.lower[s])
        assert best - MILP_TOL <= upper  # every task's exact sup is below the hull's upper end
        assert lower <= proven + MILP_TOL  # the lower end is an error at a real task
        assert lower <= upper <= 1.02 * lower
        # the lower end's point is a tuple of levels, where the network has that error
        k = int((SUPPORTS[s] >= 0).sum())
        zeta = br.x[s, :k].numpy()
        assert np.isin(zeta, teacher.weight_values).all()
        at = float(net.forward(torch.tensor([s]), br.x[s][None]).abs().max())
        assert at == pytest.approx(lower, rel=0, abs=1e-12)
    # and it agrees with enumeration: each bracket holds the other's lower end
    enum = branch_and_bound(
        diff_net(_student(hull_instance), teacher, z, z),
        torch.as_tensor(rows),
        ratio=1.02,
        seconds=30,
        goal="support",
        progress=False,
    )
    assert (enum.lower <= br.upper).all() and (br.lower <= enum.upper).all()


def _student(inst):
    return inst[1]


@pytest.mark.parametrize("kwargs", [dict(seconds=1e-9), dict(max_nodes=6), dict(ratio=1e6)])
def test_every_hull_stop_is_sound(hull_instance, kwargs):
    _, _, net, z, rows, exact = hull_instance
    br = branch_and_bound(
        net, torch.arange(net.T), **{"seconds": 15, "ratio": 1.001, **kwargs}, goal="support", progress=False
    )
    assert br.nodes >= net.T
    for t, (best, _, _) in enumerate(exact):
        assert best - MILP_TOL <= float(br.upper[rows[t]])
    assert (br.lower <= br.upper).all()


def test_an_orthogonal_encoding_is_linear_in_z():
    from constructions.tasks.encodings import make_encoder
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
    from verify.learning.train import mlp

    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=3, O=2, M=3, K=2, seed=2, encoding="orthogonal"))
    enc = make_encoder("orthogonal", teacher, seed=2)
    E = hull_module.linear_encoding(enc, 3)
    torch.manual_seed(0)
    student = mlp(3 + 2, [5, 5], 2).double()
    net = hull_net(student, teacher, SUPPORTS, E)
    z, rows = support_tasks(SUPPORTS, teacher.weight_values, 3)
    x = np.random.default_rng(1).uniform(-1, 1, (len(z), 2))
    zt, xt = torch.as_tensor(z), torch.as_tensor(x)
    with torch.no_grad():
        want = student(torch.cat([enc(zt), xt], 1)) - teacher.forward(zt, xt)
        got = net.forward(torch.as_tensor(rows), joint_points(net, SUPPORTS, z, rows, x))
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert layer0_violations(net) == 0 and violations(net) == 0
    with pytest.raises(ValueError, match="linear encoding"):
        hull_module.linear_encoding(make_encoder("interval_shuffle", teacher, seed=2), 3)


# ─── the command line ───────────────────────────────────────────────────────────────────


def test_the_cli_hull_brackets_every_support(saved_run, capsys):  # noqa: F811
    argv = [str(saved_run), "--json", "--seconds", "20", "--no-progress"]
    assert certify_main([*argv, "--z", "hull"]) == 0
    hull = json.loads(capsys.readouterr().out)
    assert certify_main([*argv, "--ratio", "1.01"]) == 0
    enum = json.loads(capsys.readouterr().out)
    h, e = hull["students"][0]["sides"]["held_out"], enum["students"][0]["sides"]["held_out"]
    assert hull["settings"]["z"] == "hull" and "McCormick" in hull["rests_on"]
    assert h["ratio"] <= 1.25 and h["tasks"] == e["tasks"]
    for ph, pe in zip(h["supports"], e["supports"], strict=True):
        assert ph["support"] == pe["support"]
        assert pe["lower"] <= ph["upper"] + 1e-12 and ph["lower"] <= pe["upper"] + 1e-12
        assert set(ph["z"]) <= {0.5, 0.6, 0.7, 0.8, 0.9, 1.0}  # the lower end is at a task


def test_a_non_linear_encoding_is_refused_for_the_hull(saved_run, tmp_path, capsys):  # noqa: F811
    shuffled = lambda r: r["task"].update(encoding="interval_shuffle")  # noqa: E731
    run = edited_run(saved_run, tmp_path / "shuffled", shuffled)
    assert certify_main([run, "--z", "hull", "--seconds", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "linear encoding" in err


def test_certify_supports_hull_reports_a_real_task_within_the_exact_sups(hull_instance):
    """certify_supports(z="hull"): per support, the lower end is the networks' own error at a tuple of
    levels (at most the support's largest exact sup), the upper end at least every task's."""
    from constructions.tasks.encodings import make_encoder
    from verify.certify.certify import certify_supports

    teacher, student, _, z, rows, exact = hull_instance
    enc = make_encoder("identity", teacher)
    out = certify_supports(
        student, teacher, enc, SUPPORTS, z="hull", ratio=1.02, seconds=30, goal="support", progress=False
    )
    assert out["tasks"] == len(z) and out["boxes_at_start"] == len(SUPPORTS)
    for s, p in enumerate(out["supports"]):
        mine = [t for t in range(len(z)) if rows[t] == s]
        assert max(exact[t][0] for t in mine) - MILP_TOL <= p["upper"]
        assert p["lower"] <= max(exact[t][1] for t in mine) + MILP_TOL
        assert np.isin(p["z"], teacher.weight_values).all()


def test_a_box_holds_only_the_levels_in_it(hull_instance):
    """tighten: each active weight's side shrinks to the levels it holds, and a box where one holds
    none goes (no task is in it; on M 16, K 3 such a box, [0.6901, 0.6902] × [0.9556, 0.9557] in the
    weights, held the upper end at 5.17 for minutes); split_at cuts the weights between levels."""
    _, _, net, _, _, _ = hull_instance
    task = torch.tensor([0, 0, 1])
    lo, hi = net.root(task)
    lo[0, :2], hi[0, :2] = torch.tensor([0.55, 0.5]), torch.tensor([0.83, 0.6])
    lo[1, 0], hi[1, 0] = 0.61, 0.69  # no level
    lo[2, 3], hi[2, 3] = -0.3, 0.2  # support [1]: slot 1 is empty ([0, 0]); x is left alone
    tlo, thi, keep = net.tighten(task, lo, hi)
    assert keep.tolist() == [True, False, True]
    assert tlo[0, :2].tolist() == [0.6, 0.5] and thi[0, :2].tolist() == [0.8, 0.6]
    assert torch.equal(tlo[2], lo[2]) and torch.equal(thi[2], hi[2])
    assert torch.equal(tlo[:, net.K :], lo[:, net.K :]) and torch.equal(thi[:, net.K :], hi[:, net.K :])
    # the root's weight [0.5, 1] is cut between 0.7 and 0.8; an x side at its midpoint
    rlo, rhi = net.root(task[:2])
    mid = torch.tensor([0.75, 0.0], dtype=torch.float64)
    cut = net.split_at(task[:2], rlo, rhi, torch.tensor([0, net.K]), mid)
    assert 0.7 < float(cut[0]) < 0.8 and float(cut[1]) == 0.0
    for a, b in ((rlo[0, 0], cut[0]), (cut[0], rhi[0, 0])):
        l, h = rlo[:1].clone(), rhi[:1].clone()
        l[0, 0], h[0, 0] = a, b
        tl, th, k = net.tighten(task[:1], l, h)
        assert bool(k[0]) and {float(tl[0, 0]), float(th[0, 0])} <= {0.5, 0.7, 0.8, 1.0}


def test_every_box_the_hull_search_bounds_holds_a_task(hull_instance, monkeypatch):
    """The boxes bounded in a search have levels at both ends of every active weight's side."""
    _, _, net, _, _, _ = hull_instance
    seen = []
    original = Bounder.bound

    def spy(self, task, lo, hi, method="crown", inherited=None):
        seen.append((task, lo[:, : net.K].clone(), hi[:, : net.K].clone()))
        return original(self, task, lo, hi, method, inherited)

    monkeypatch.setattr(Bounder, "bound", spy)
    branch_and_bound(net, torch.arange(net.T), ratio=1.0001, max_nodes=600, goal="support", progress=False)
    levels = set(net.levels.tolist())
    for task, lo, hi in seen:
        active = net.zhi[task] > 0
        assert set(lo[active].tolist()) <= levels and set(hi[active].tolist()) <= levels
