"""verify.exact_sup: the MILP's exact sup error against the measurer, the certificate, a brute-force
grid over x, and against deliberately broken versions of itself; the Lipschitz bounds of
theory/lipschitz.py on random pairs of points; the command line.

Instances are tiny (I, H, O, M, K ∈ {1, 2}, ε ∈ [1e-2, 1e-1]) and drawn for every registered
construction; the size guard's own estimate (unstable² × MILPs) keeps each example near a second.
"""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

import verify.theorem.exact_sup as es
from constructions.base import EXACT_TOL
from constructions.catalogue import ENCODINGS, REGISTRY, WEIGHTS
from constructions.registry import build
from constructions.tasks.hyperteacher import HyperteacherConfig
from tests.strategies import FAST
from theory.bounds import CONSTANTS, VARIANTS
from theory.lipschitz import affine_interval, network_lipschitz, teacher_z_lipschitz
from verify.theorem.check import sample_teacher
from verify.theorem.measure import measure_sup_error

TEST_WORK, TEST_MILPS = 2000, 32  # unstable² × MILPs, and MILPs: about a second an example
X_POINTS = 200_001  # the brute-force grid over x ∈ [-1, 1] (I = 1): spacing 1e-5


@st.composite
def tiny(draw, name: str, I=None):
    """(teacher, ε, network) for `name`; multilayer gets a 2-layer teacher with I = H = 1 (its
    blocks are large). Instances the builder refuses or the test budget cannot afford are redrawn."""
    multi = REGISTRY[name].multi_layer
    two = st.integers(1, 2)
    M = draw(two)
    cfg = HyperteacherConfig(I=I or (1 if multi else draw(two)), H=1 if multi else draw(two), O=draw(two),
                             M=M, K=draw(st.integers(1, M)), weights=draw(st.sampled_from(WEIGHTS)),
                             encoding=draw(st.sampled_from(ENCODINGS)), seed=draw(st.integers(0, 2**16)))
    eps = 10.0 ** draw(st.floats(-1.3 if multi else -2.0, -1.0))
    teacher = sample_teacher(cfg, 2 if multi else 1)
    try:
        net = build(name, teacher, eps, variant=draw(st.sampled_from(VARIANTS)),
                    constants=draw(st.sampled_from(CONSTANTS)))
    except ValueError:
        reject()
    size = es.work_estimate(net, teacher, 1, 1)
    assume(net.claim(eps).resolvable and size["work"] <= TEST_WORK and size["milps"] <= TEST_MILPS)
    return teacher, eps, net


def floor_of(net) -> float:
    return max(net.rounding_floor(dense=False), net.rounding_floor(dense=True))


@pytest.mark.parametrize("name", list(REGISTRY))
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_the_exact_sup_brackets_the_measurer_and_keeps_the_claim(name, data):
    """upper ≥ the measurer's sup (it searches the same task set); lower, an error the network
    has, ≤ the certificate; an exact construction's upper end is its rounding only."""
    teacher, eps, net = data.draw(tiny(name))
    claim = net.claim(eps)
    exact = es.exact_sup(net, teacher, grid=1, max_cells=1)
    measured = measure_sup_error(net, teacher, refine_z=claim.refine_z, progress=False, **FAST).sup_error
    floor = floor_of(net)
    assert exact["proven"] and exact["lower"] <= exact["upper"]
    assert measured <= exact["upper"] + floor
    if claim.exact:
        assert exact["on_levels"] and exact["upper"] <= EXACT_TOL + es.MILP_TOL
    else:
        assert exact["lower"] <= claim.certificate + floor


# ─── the MILP against a brute-force grid over x (I = 1) ───────────────────────────────────────

def a_task(net, teacher, rng):
    """(support, weights) of a random task of the construction's task set."""
    boxes, _ = es.task_boxes(net, teacher)
    S, lo, hi = boxes[rng.integers(len(boxes))]
    return S, rng.uniform(lo, hi)


def x_lipschitz(prob, S, w) -> np.ndarray:
    """Per output, L_x with |Δ(f − g)_o| ≤ L_x·‖Δx‖_∞ at the task (S, w) (theory/lipschitz.py)."""
    k, I = len(S), prob.I
    D = np.vstack([np.zeros((k, I)), np.eye(I)])  # x moves, z_S stays at w
    f = es.f_on(prob.layers, prob.cols(S))
    box = -np.ones(I), np.ones(I)
    return (network_lipschitz(f, D, np.concatenate([w, box[0]]), np.concatenate([w, box[1]]))
            + network_lipschitz(es.g_at(prob.teacher, prob.z_of(S, w)), np.eye(I), *box))


def grid_disagreement(net, teacher, S, w) -> float:
    """How far the MILP's max of ±(f − g)_o at the task (S, w) leaves [grid max, grid max +
    L_x·h/2], the most over o and sign (≤ 0: they agree). The grid uses the structured network
    and the teacher's own forward, not the MILP's layers; no x between two grid points is more
    than L_x·h/2 above the grid max."""
    prob = es.Problem(net, teacher)
    milp = prob.milp_at(S, w, w)
    x = torch.linspace(-1.0, 1.0, X_POINTS, dtype=torch.float64)[:, None]
    zt = torch.as_tensor(prob.z_of(S, w)).expand(X_POINTS, -1)
    with torch.no_grad():
        diff = (net(torch.cat([teacher.encode(zt), x], dim=1)) - teacher.forward(zt, x)).numpy()
    gap = x_lipschitz(prob, S, w) * (2.0 / (X_POINTS - 1)) / 2
    tol = es.MILP_TOL + floor_of(net)
    worst = -np.inf
    for o, sign in [(o, s) for o in range(teacher.O) for s in (1.0, -1.0)]:
        _, _, upper, proven = milp.solve(o, sign, time_limit=20.0)
        assert proven
        grid_max = float((sign * diff[:, o]).max())
        worst = max(worst, grid_max - upper - tol, upper - grid_max - gap[o] - tol)
    return worst


@pytest.mark.parametrize("name", list(REGISTRY))
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_the_milp_agrees_with_a_dense_grid_over_x(name, data):
    teacher, _, net = data.draw(tiny(name, I=1))
    S, w = a_task(net, teacher, np.random.default_rng(data.draw(st.integers(0, 2**16))))
    assert grid_disagreement(net, teacher, S, w) <= 0


def without_upper(relu_rows):
    """The big-M encoding less both upper constraints: y may then exceed ReLU(pre)."""
    def rows(*args):
        r, rhs = relu_rows(*args)
        return r[:1], rhs[:1]
    return rows


def shrunk(pre_bounds):
    """Upper pre-activation bounds halved: they cut off every x where a unit is above half of
    its range, the worst point among them."""
    def bounds(*args):
        lo, hi = pre_bounds(*args)
        return lo, hi / 2
    return bounds


def one_module():
    teacher = sample_teacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="continuous", seed=0))
    return teacher, build("shallow", teacher, 1e-1)


@pytest.mark.parametrize("name, breaking", [("relu_rows", without_upper), ("pre_bounds", shrunk)])
def test_a_broken_encoding_is_caught_by_the_grid(monkeypatch, name, breaking):
    teacher, net = one_module()
    task = np.array([0]), np.array([0.7])
    assert grid_disagreement(net, teacher, *task) <= 0
    monkeypatch.setattr(es, name, breaking(getattr(es, name)))
    assert grid_disagreement(net, teacher, *task) > 1e-3


# ─── the Lipschitz remainder over z ───────────────────────────────────────────────────────────

def test_the_z_remainder_is_needed_and_enough(monkeypatch):
    """The MILP over a z-cell takes g at the cell's centre, so the upper end needs g's remainder.
    On this instance (found by trying: the optimal construction with continuous weights, at a
    coarse ε where f hardly follows g in z) one cell without it ends below what eight cells find."""
    teacher = sample_teacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="continuous", seed=3))
    net = build("optimal", teacher, 0.3)
    fine = es.exact_sup(net, teacher, grid=8, max_cells=8)
    assert es.exact_sup(net, teacher, grid=1, max_cells=1)["upper"] >= fine["lower"]
    monkeypatch.setattr(es.Problem, "remainder", lambda self, S, lo, hi: np.zeros(self.O))
    assert es.exact_sup(net, teacher, grid=1, max_cells=1)["upper"] < 0.5 * fine["lower"]


@pytest.mark.parametrize("name", [n for n in REGISTRY if n != "exact"])
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_the_lipschitz_bounds_hold_on_random_pairs(name, data):
    """Inside a random cell of a support's weight box, |Δg_o| ≤ Lg_o·‖Δz‖_∞ (the remainder) and
    |Δf_o| ≤ Lf_o·‖Δz‖_∞; at a fixed task, |Δ(f − g)_o| ≤ L_x,o·‖Δx‖_∞ (the grid test's gap).
    On random pairs, evaluated by the structured network and the teacher's forward."""
    teacher, _, net = data.draw(tiny(name))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    prob = es.Problem(net, teacher)
    boxes, _ = es.task_boxes(net, teacher)
    S, box_lo, box_hi = boxes[rng.integers(len(boxes))]
    lo = rng.uniform(box_lo, box_hi)
    hi = np.minimum(lo + rng.uniform(0, 0.5, len(S)), box_hi)
    Ws, bs = es.teacher_arrays(teacher)
    Lg = teacher_z_lipschitz(Ws, bs, teacher.A, teacher.K, S, lo, hi)
    assert np.allclose(prob.remainder(S, lo, hi), Lg * float(np.max(hi - lo)) / 2)
    cols, I = prob.cols(S), teacher.I
    e_lo, e_hi = affine_interval(cols, np.zeros(teacher.M), lo, hi)
    Lf = network_lipschitz(prob.layers, np.vstack([cols, np.zeros((I, len(S)))]),
                           np.concatenate([e_lo, -np.ones(I)]), np.concatenate([e_hi, np.ones(I)]))

    n = 512
    z1, z2 = np.zeros((n, teacher.M)), np.zeros((n, teacher.M))
    z1[:, S], z2[:, S] = rng.uniform(lo, hi, (n, len(S))), rng.uniform(lo, hi, (n, len(S)))
    z1, z2 = torch.as_tensor(z1), torch.as_tensor(z2)
    x, x2 = (torch.as_tensor(rng.uniform(-1, 1, (n, I))) for _ in range(2))
    f = lambda z, x: net(torch.cat([teacher.encode(z), x], 1)).numpy()  # noqa: E731
    g = lambda z, x: teacher.forward(z, x).numpy()  # noqa: E731
    dz = (z1 - z2).abs().amax(dim=1, keepdim=True).numpy()
    dx = (x - x2).abs().amax(dim=1, keepdim=True).numpy()
    z = z1[:1].expand(n, -1)
    L_x = x_lipschitz(prob, S, z1[0, S].numpy())
    tol = 2 * floor_of(net)
    with torch.no_grad():
        assert np.all(np.abs(g(z1, x) - g(z2, x)) <= Lg * dz + 1e-12)
        assert np.all(np.abs(f(z1, x) - f(z2, x)) <= Lf * dz + tol)
        assert np.all(np.abs((f(z, x) - g(z, x)) - (f(z, x2) - g(z, x2))) <= L_x * dx + tol)


# ─── the command line ─────────────────────────────────────────────────────────────────────────

def test_help_answers_without_importing_torch_or_scipy():
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "verify.exact_sup", "--help"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0 and "--construction" in out.stdout and "--max-cells" in out.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "scipy", "scipy.optimize"}


def test_an_oversize_instance_is_refused_with_one_line(capsys):
    code = es.main(["--construction", "deep", "--I", "2", "--H", "2", "--eps", "1e-2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "too large to solve" in err


def test_json_has_the_documented_keys(capsys):
    code = es.main(["--construction", "exact", "--weights", "khot", "--M", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    documented = " ".join(es.__doc__.split("JSON report keys:")[1].split(".")[0].split())
    nested = dict(re.findall(r"(\w+) \(([^)]*)\)", documented))
    top = set(re.findall(r"\w+", re.sub(r"\([^)]*\)", "", documented))) - {"and"}
    assert code == 0 and report["passed"]
    assert set(report) == top
    for key, keys in nested.items():
        assert set(report[key]) == {k.strip() for k in keys.split(",")}
    assert math.isclose(report["exact"]["lower"], report["exact"]["upper"], abs_tol=es.MILP_TOL)


def test_the_checks_fail_when_the_ends_contradict():
    """Exit 1 is for a measurer that finds more than the MILP proves possible, or an error the
    network has above its certificate; an upper end above the certificate is only not `certified`."""
    from constructions.base import Claim

    claim = Claim(eps=0.1, certificate=0.05, floor=1e-13)
    assert all(es.judge(claim, dict(lower=0.04, upper=0.2), 0.045, 1e-13).values())
    assert not all(es.judge(claim, dict(lower=0.04, upper=0.2), 0.21, 1e-13).values())
    assert not all(es.judge(claim, dict(lower=0.06, upper=0.2), 0.045, 1e-13).values())
    exact = Claim(eps=0.1, certificate=0.0, floor=1e-13, exact=True)
    assert not all(es.judge(exact, dict(lower=0.0, upper=1e-6), 0.0, 1e-13).values())


# ─── Milp's encoding of stable units, and exact_sup's branch and bound with a tiny budget ──────

def test_a_unit_stable_at_an_exact_zero_and_the_readout_bias_are_encoded():
    """f(u) = ReLU(u) + 0.5 on u ∈ [0, 1] and ReLU(−u) − 0.25 (pre-activation bounds exactly
    0: stable, no binary, no rows): max f = 1.5 at u = 1, max −f = −0.5, max g = −0.25, by hand."""
    relu = [(np.array([[1.0]]), np.array([0.0])), (np.array([[1.0]]), np.array([0.5]))]
    milp = es.Milp([relu], [1.0], np.array([0.0]), np.array([1.0]))
    assert milp.binaries == 0 and milp.A.shape == (0, milp.n)
    for sign, best in ((1.0, 1.5), (-1.0, -0.5)):
        _, value, upper, proven = milp.solve(0, sign, 5.0)
        assert proven and value == pytest.approx(best, abs=1e-12) and upper >= best
    dead = [(np.array([[-1.0]]), np.array([0.0])), (np.array([[1.0]]), np.array([-0.25]))]
    _, value, upper, proven = es.Milp([dead], [1.0], np.array([0.0]), np.array([1.0])).solve(0, 1.0, 5.0)
    assert proven and value == pytest.approx(-0.25, abs=1e-12) and upper >= -0.25


def test_branch_and_bound_with_a_tiny_budget_reports_what_it_did():
    """Z_K, one cell per support, then halving within max_cells: the upper end stays above an
    exhaustive grid's sup and above the finer run's lower end, the loop stops on its budget or
    its target, and the report's counts, remainder and point are those of the cells solved."""
    teacher = sample_teacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="continuous", seed=4))
    net = build("shallow", teacher, 0.1)
    coarse = es.exact_sup(net, teacher, grid=1, max_cells=1)
    assert coarse["n_cells"] == 1 and not coarse["on_levels"]
    r = es.exact_sup(net, teacher, grid=1, max_cells=7, rel_tol=0.0, abs_tol=0.0)
    assert r["n_cells"] == 7  # 1 cell, then three halvings of 2 cells each
    assert r["upper"] <= coarse["upper"] and r["upper"] >= max(r["lower"], coarse["lower"])
    prob = es.Problem(net, teacher)
    assert r["max_remainder"] == float(prob.remainder(np.array([0]), np.zeros(1), np.ones(1)).max()) > 0
    assert r["proven"] and 0.0 <= r["seconds"] < 60.0 and r["n_milps"] <= 2 * teacher.O * r["n_cells"]
    assert r["lower"] == pytest.approx(prob.error_at(r["z"], r["x"]), rel=1e-12)
    z = np.linspace(0.0, 1.0, 201)
    x = np.linspace(-1.0, 1.0, 201)
    grid = max(prob.error_at(np.array([w]), np.array([v])) for w in z for v in x)
    assert grid <= r["upper"] + floor_of(net)


def test_the_task_set_asked_for_is_the_one_searched():
    """The shallow construction's own task set is Z_K, whose cells carry a z-remainder;
    task_set="levels" searches the khot family's single tasks, which carry none."""
    teacher = sample_teacher(HyperteacherConfig(I=1, H=1, O=1, M=2, K=1, weights="khot", seed=4))
    net = build("shallow", teacher, 0.1)
    levels = es.exact_sup(net, teacher, grid=1, max_cells=1, task_set="levels")
    assert levels["on_levels"] and levels["max_remainder"] == 0.0 and levels["n_cells"] == 2
    zk = es.exact_sup(net, teacher, grid=1, max_cells=1)
    assert not zk["on_levels"] and zk["max_remainder"] > 0 and zk["upper"] >= levels["lower"]
