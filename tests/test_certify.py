"""verify.certify: a certified upper end on a student's sup error (issue 46).

- the bracket holds the exact sup, found by MILP (verify.exact_sup's encoding), on small instances,
  for every bounding method: upper ≥ exact ≥ lower;
- a planted network (the teacher itself plus a bump of known height) is certified within the ratio;
- mutants of the relaxation (a dropped intercept, a wrong chord slope, a bias added with the wrong
  sign) give bounds below an error the network has, and the check here catches each;
- the budgeted stops (seconds, nodes) and the early one (ratio) are sound, not only full runs;
- the command line: a bracket per support for a saved run, --eps's exit codes, bad input exit 2.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
from verify.certify import bounds as bounds_module
from verify.certify.bab import branch_and_bound
from verify.certify.bounds import Bounder
from verify.certify.graph import diff_net, linear_layers
from verify.learning.train import mlp
from verify.theorem.exact_sup import MILP_TOL, Milp, g_at

METHODS = [
    ("ibp", "ibp", 0),
    ("crown", "ibp", 0),
    ("crown", "forward", 0),
    ("crown", "crown", 0),
    ("crown", "auto", 0),
    ("crown", "inherit", 0),
    ("crown", "forward", 4),
]


def small_instance(seed: int = 1, widths=(6, 6), T: int = 4):
    """A teacher (I = 2, H = 3, O = 2, M = 3, K = 2), a random student with nonzero biases, and T
    tasks of discrete levels."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=3, O=2, M=3, K=2, seed=seed))
    torch.manual_seed(seed)
    student = mlp(3 + 2, list(widths), 2).double()
    with torch.no_grad():
        for p in student.parameters():
            p.add_(0.3 * torch.randn_like(p))
    rng = np.random.default_rng(seed)
    z = np.zeros((T, 3))
    for t in range(T):
        S = rng.choice(3, size=1 + t % 2, replace=False)
        z[t, S] = rng.choice([0.5, 0.6, 0.7, 0.8, 0.9, 1.0], size=len(S))
    return teacher, student, z


def exact_sup_milp(student, teacher, z: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(the best objective, HiGHS's proven upper end, the maximiser x) of max_x ‖f − g‖_∞ at task z."""
    layers = [(W.numpy(), b.numpy()) for W, b in linear_layers(student)]
    (W1, b1), rest = layers[0], layers[1:]
    M = teacher.M
    f = [(W1[:, M:], b1 + W1[:, :M] @ z), *rest]
    milp = Milp([f, g_at(teacher, z)], [1.0, -1.0], -np.ones(teacher.I), np.ones(teacher.I))
    best, upper, where = -np.inf, -np.inf, None
    for o, sign in itertools.product(range(teacher.O), (1.0, -1.0)):
        v, obj, up, proven = milp.solve(o, sign, 10.0)
        assert proven
        if obj > best:
            best, where = obj, v[: teacher.I]
        upper = max(upper, up)
    return best, upper, where


@pytest.fixture(scope="module")
def instance():
    teacher, student, z = small_instance()
    net = diff_net(student, teacher, z, z)
    exact = [exact_sup_milp(student, teacher, zt) for zt in z]
    return teacher, student, z, net, exact


def test_the_graph_is_student_minus_teacher(instance):
    teacher, student, z, net, _ = instance
    x = torch.rand(len(z), 2, dtype=torch.float64) * 2 - 1
    zt = torch.as_tensor(z)
    with torch.no_grad():
        want = student(torch.cat([zt, x], 1)) - teacher.forward(zt, x)
        got = net.forward(torch.arange(len(z)), x)
    assert torch.allclose(got, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("method, intermediate, alpha", METHODS, ids=[f"{m}-{i}-a{a}" for m, i, a in METHODS])
def test_upper_is_at_least_the_exact_sup_which_is_at_least_lower(instance, method, intermediate, alpha):
    _, _, z, net, exact = instance
    br = branch_and_bound(
        net,
        torch.arange(len(z)),
        ratio=1.02,
        seconds=15,
        method=method,
        intermediate=intermediate,
        alpha_steps=alpha,
        goal="support",
        progress=False,
    )
    for t, (best, milp_upper, x) in enumerate(exact):
        # An error the network has, at the MILP's maximiser, never exceeds the certified end …
        at_x = float(net.forward(torch.tensor([t]), torch.as_tensor(x[None])).abs().max())
        assert at_x <= float(br.upper[t]), (t, at_x, float(br.upper[t]))
        assert best - MILP_TOL <= float(br.upper[t])
        # … and the lower end is an error the network has, so it never exceeds the exact sup.
        assert float(br.lower[t]) <= milp_upper + MILP_TOL
        assert float(br.lower[t]) <= float(br.upper[t])
    assert br.stop == "ratio"
    assert (br.upper <= 1.02 * br.lower).all()


def test_the_rounding_margin_is_there_and_small(instance):
    _, _, z, net, _ = instance
    r = Bounder(net).bound(
        torch.arange(len(z)),
        -torch.ones(len(z), 2, dtype=torch.float64),
        torch.ones(len(z), 2, dtype=torch.float64),
    )
    assert (r.slack > 0).all() and (r.slack < 1e-10 * r.upper).all()


def planted(a: float = 0.8, v=(0.7, -0.4), beta: float = 0.3):
    """A student equal to the teacher at one task z₀, plus a unit a·ReLU(v·x − β) on output 0: its
    sup error at z₀ is a·(‖v‖₁ − β) exactly."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=3, O=2, M=3, K=2, seed=4))
    z0 = np.array([0.7, 0.0, 0.9])
    H, M, K = teacher.H, teacher.M, teacher.K
    student = mlp(M + 2, [H + 1], 2).double()
    W_z = np.einsum("m,mih->hi", z0 / np.sqrt(K), teacher.W)  # (H, I)
    with torch.no_grad():
        W1 = torch.zeros(H + 1, M + 2, dtype=torch.float64)
        W1[:H, :M] = torch.as_tensor(teacher.b.T / np.sqrt(K))  # b(z̃) = Σ z_m b_m / √K, linear in z
        W1[:H, M:] = torch.as_tensor(W_z)
        W1[H, M:] = torch.as_tensor(v, dtype=torch.float64)
        b1 = torch.zeros(H + 1, dtype=torch.float64)
        b1[H] = -beta
        W2 = torch.zeros(2, H + 1, dtype=torch.float64)
        W2[:, :H] = torch.as_tensor(teacher.A.T)
        W2[0, H] = a
        student[0].weight.copy_(W1)
        student[0].bias.copy_(b1)
        student[2].weight.copy_(W2)
        student[2].bias.zero_()
    return teacher, student, z0, a * (np.abs(v).sum() - beta)


@pytest.mark.parametrize("intermediate", ["forward", "crown", "inherit"])
def test_a_planted_bump_is_certified_within_the_ratio(intermediate):
    teacher, student, z0, known = planted()
    net = diff_net(student, teacher, z0[None], z0[None])
    br = branch_and_bound(
        net,
        torch.zeros(1, dtype=torch.long),
        ratio=1.05,
        seconds=15,
        intermediate=intermediate,
        progress=False,
    )
    lower, upper = float(br.lower[0]), float(br.upper[0])
    assert br.stop == "ratio"
    assert lower <= known + 1e-12 <= upper + 2e-12
    assert upper <= 1.05 * lower
    assert lower >= known - 1e-9  # the ascent finds the bump's vertex


# ─── mutants: each wrong relaxation must give a bound below an error the network has ─────────


def violations(net, seed: int = 0, boxes: int = 400, points: int = 64) -> int:
    """Points of random boxes where |D| exceeds the box's bound (a sound bound has none)."""
    g = torch.Generator().manual_seed(seed)
    T = net.T
    task = torch.arange(boxes) % T
    centre = torch.rand(boxes, net.I, generator=g, dtype=torch.float64) * 1.2 - 0.6
    radius = torch.rand(boxes, net.I, generator=g, dtype=torch.float64) * 0.4
    lo, hi = (centre - radius).clamp(-1, 1), (centre + radius).clamp(-1, 1)
    r = Bounder(net, intermediate="forward").bound(task, lo, hi)
    xs = lo[:, None] + (hi - lo)[:, None] * torch.rand(boxes, points, net.I, generator=g, dtype=torch.float64)
    corners = torch.stack(
        [
            torch.where(torch.tensor(c, dtype=torch.bool), hi, lo)
            for c in itertools.product((0, 1), repeat=net.I)
        ],
        dim=1,
    )
    xs = torch.cat([xs, corners], dim=1)
    n = xs.shape[1]
    values = net.forward(task.repeat_interleave(n), xs.reshape(-1, net.I)).abs().max(1).values
    return int((values.reshape(boxes, n) > r.upper[:, None]).sum())


def _no_intercept(l, u):
    s, t = UPPER_LINE(l, u)
    return s, torch.zeros_like(t)


def _wrong_slope(l, u):
    s, t = UPPER_LINE(l, u)
    unstable = (l < 0) & (u > 0)
    s = torch.where(unstable, 1 - s, s)  # −l/(u − l): the other end's weight
    return s, torch.where(unstable, -s * l, t)


def _bias_sign(Lam, b):
    return -(Lam @ b)


UPPER_LINE = bounds_module.upper_line
MUTANTS = {
    "dropped intercept": ("upper_line", _no_intercept),
    "wrong slope": ("upper_line", _wrong_slope),
    "bias sign": ("bias_term", _bias_sign),
}


@pytest.fixture(scope="module")
def mutant_net():
    teacher, student, z = small_instance(seed=3, widths=(12, 12), T=6)
    return diff_net(student, teacher, z, z)


def test_the_honest_bounds_have_no_violation(mutant_net):
    assert violations(mutant_net) == 0


@pytest.mark.parametrize("name", MUTANTS)
def test_each_mutant_is_caught(mutant_net, monkeypatch, name):
    attr, wrong = MUTANTS[name]
    monkeypatch.setattr(bounds_module, attr, wrong)
    assert violations(mutant_net) > 0, name


# ─── budgets and stops ───────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "stop, kwargs",
    [
        ("seconds", dict(seconds=1e-9)),
        ("seconds", dict(seconds=1e-9, intermediate="auto")),  # CROWN's tier gets no time at all
        ("seconds", dict(seconds=1e-9, intermediate="inherit")),
        ("nodes", dict(max_nodes=14, intermediate="inherit")),
        ("nodes", dict(max_nodes=14)),
        ("ratio", dict(ratio=1e6)),
    ],
)
def test_every_stop_is_sound(instance, stop, kwargs):
    _, _, z, net, exact = instance
    br = branch_and_bound(
        net, torch.arange(len(z)), **{"seconds": 15, "ratio": 1.001, **kwargs}, goal="support", progress=False
    )
    assert br.stop == stop
    assert br.nodes >= len(z)  # every task's root box, whatever the budget
    if stop == "nodes":
        assert br.nodes <= 14 and br.splits > 0
    if stop in ("seconds", "ratio"):
        assert br.nodes == len(z) and br.splits == 0
    if kwargs.get("intermediate") in ("auto", "inherit") and stop == "seconds":
        assert br.tier_boxes == [0]
    for t, (best, _, _) in enumerate(exact):
        assert best - MILP_TOL <= float(br.upper[t])
        assert float(br.lower[t]) <= float(br.upper[t])


def test_the_set_goal_stops_on_the_set_bracket(instance):
    _, _, z, net, _ = instance
    br = branch_and_bound(net, torch.zeros(len(z), dtype=torch.long), ratio=1.02, seconds=15, progress=False)
    assert br.stop == "ratio" and br.upper[0] <= 1.02 * br.lower[0]
    supports = branch_and_bound(
        net, torch.arange(len(z)), ratio=1.02, seconds=15, goal="support", progress=False
    )
    assert br.upper[0] >= supports.lower.max() and supports.upper.max() >= br.lower[0]


# ─── the command line ───────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    from verify.learning.sgd_program import main

    out = tmp_path_factory.mktemp("certify") / "run"
    sizes = "--M 4 --K 2 --I 2 --H 2 --O 2 --steps 20 --eval-tasks 16 --eval-samples 4"
    argv = [*sizes.split(), "--shapes", "custom", "--widths", "6", "6", "--save", str(out), "--no-progress"]
    assert main(argv) == 0
    return out


def certify_main(argv):
    from verify.certify.command import main

    return main(argv)


def test_the_cli_brackets_every_support(saved_run, capsys):
    assert certify_main([str(saved_run), "--json", "--seconds", "10", "--tasks", "all", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    (entry,) = report["students"]
    run = json.loads((saved_run / "report.json").read_text())
    for side, recorded in (("held_out", "held_out"), ("train", "train")):
        s = entry["sides"][side]
        assert s["lower"] <= s["upper"] and s["ratio"] <= 1.25
        assert all(p["lower"] <= p["upper"] for p in s["supports"])
        # The run's own searched sup error is an error the student has on these tasks.
        searched = next(
            m["value"]
            for m in run["metrics"]
            if m["network"] == entry["network"] and m["side"] == recorded and m["metric"] == "sup"
        )
        assert searched <= s["upper"] + 1e-9
    assert len(entry["sides"]["held_out"]["supports"]) == run["split"]["n_test"]


def test_eps_exit_codes(saved_run, capsys):
    assert certify_main([str(saved_run), "--eps", "1e-9", "--seconds", "5", "--no-progress"]) == 1
    assert "VIOLATED" in capsys.readouterr().out
    assert certify_main([str(saved_run), "--eps", "1e3", "--seconds", "5", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["certified"] is True


def edited_run(saved_run, folder, edit):
    import shutil

    shutil.copytree(saved_run, folder)
    report = json.loads((folder / "report.json").read_text())
    edit(report)
    (folder / "report.json").write_text(json.dumps(report))
    return str(folder)


def test_continuous_weights_are_refused_for_now(saved_run, tmp_path, capsys):
    """A continuous run is a usage error, not a bound: the hull would hold it, but a lower end at a
    point of its set is not built."""
    run = edited_run(saved_run, tmp_path / "continuous", lambda r: r["task"].update(weights="continuous"))
    assert certify_main([run, "--seconds", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "box hull" in err


def test_a_split_that_does_not_rebuild_is_refused(saved_run, tmp_path, capsys):
    """The held-out supports are rebuilt from the run's settings and checked against its counts."""
    run = edited_run(
        saved_run, tmp_path / "other", lambda r: r["split"].update(n_test=r["split"]["n_test"] + 1)
    )
    assert certify_main([run, "--seconds", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rebuilt" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["NOPE"],
        ["RUN", "--ratio", "0.5"],
        ["RUN", "--seconds", "-1"],
        ["EMPTY"],
        ["RUN", "--student", "sgd nope"],
        ["RUN", "--device", "tpu"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(saved_run, tmp_path, capsys, argv):
    folders = {"RUN": str(saved_run), "NOPE": str(tmp_path / "nope"), "EMPTY": str(tmp_path)}
    code = certify_main([folders.get(a, a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err


# ─── the split rule: every side of a box shrinks ───────────────────────────────────────────


def flat_slope_net():
    """D(x) = ReLU(x₂) + ReLU(−x₂) − ReLU(x₂) − ReLU(−x₂) + 0.1·x₁ = 0.1·x₁, sup |D| = 0.1 at x₁ = ±1,
    as one ReLU network of x ∈ [-1, 1]² (the pairs are separate units). On a box symmetric in x₂,
    CROWN's bound is 0.1·x₁'s plus x₂'s half-width (the two chords against the two lower lines), and
    its linear function has slope 0 along x₂: so |slope| × width never picks x₂, and a split rule by
    that score alone halves x₁ forever at a bound ≥ 1 (the M 16, K 3 hull's stall, in small)."""
    from verify.certify.graph import DiffNet

    Ws = torch.tensor([[0.0, 1], [0, -1], [0, 1], [0, -1], [1, 0]], dtype=torch.float64)
    b0 = torch.tensor([[0.0, 0, 0, 0, 1]], dtype=torch.float64)  # the last unit, x₁ + 1 ≥ 0, is active
    W_out = torch.tensor([[1.0, 1, -1, -1, 0.1]], dtype=torch.float64)
    return DiffNet(
        Ws,
        torch.zeros(1, 0, 2, dtype=torch.float64),
        b0,
        torch.zeros_like(b0),
        [],
        W_out,
        torch.tensor([-0.1], dtype=torch.float64),
    )


def test_a_side_with_a_flat_bound_is_still_split():
    net = flat_slope_net()
    x = torch.tensor([[1.0, 0.3], [-1.0, -0.7], [0.2, 0.9]], dtype=torch.float64)
    assert torch.allclose(net.forward(torch.zeros(3, dtype=torch.long), x)[:, 0], 0.1 * x[:, 0], atol=1e-15)
    br = branch_and_bound(
        net, torch.zeros(1, dtype=torch.long), ratio=1.25, seconds=30, max_nodes=2000, progress=False
    )
    assert float(br.lower[0]) == pytest.approx(0.1, abs=1e-12)
    assert br.stop == "ratio" and float(br.upper[0]) <= 1.25 * float(
        br.lower[0]
    )  # the old rule: ≥ 1, "nodes"


def test_split_axis_caps_the_aspect():
    from verify.certify.bab import ASPECT, split_axis

    net = flat_slope_net()
    task = torch.zeros(3, dtype=torch.long)
    lo = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-1.0, 0.0]], dtype=torch.float64)
    hi = torch.tensor([[-1 + 2 / (2 * ASPECT), 1.0], [-0.5, 1.0], [1.0, 0.0]], dtype=torch.float64)
    score = torch.tensor([[1.0, 1e-9], [1.0, 1e-9], [0.0, 5.0]], dtype=torch.float64)
    # over ASPECT× wider: the wide side; within it: the score's; a side of width 0: never
    assert split_axis(net, task, lo, hi, score).tolist() == [1, 0, 0]


def test_a_heartbeat_off_a_terminal(capsys, monkeypatch):
    """Off a terminal (stderr captured) the search prints plain lines with its boxes and bracket;
    with progress off (False, --no-progress) it prints nothing."""
    monkeypatch.setenv("COMPGEN_HEARTBEAT_SECONDS", "0")  # a line per round
    net = flat_slope_net()
    branch_and_bound(net, torch.zeros(1, dtype=torch.long), ratio=1.25, seconds=30, max_nodes=40)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("certify: second")]
    assert lines and all("of 30" in line and "boxes" in line and "bracket [" in line for line in lines)
    branch_and_bound(net, torch.zeros(1, dtype=torch.long), seconds=30, max_nodes=40, progress=False)
    assert "certify:" not in capsys.readouterr().err
