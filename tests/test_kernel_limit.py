"""The kernel limit of training on the hyperteacher (verify.learning.kernel_limit), the
linearised network and the NTK's movement (verify.learning.linearised), and
`python -m verify.kernel` (issue 35, parts 3, 4 and 6)."""

import copy
import json

import pytest
import torch
from torch import nn

from verify.learning import kernel_limit, kernel_vs_sgd, kernels
from verify.learning import sgd_program as sgd
from verify.learning.kernel_limit import KernelConfig, fit
from verify.learning.linearised import Linearised, kernel_movement, output_ntk
from verify.learning.students import mlp_student

SMALL = ["--M", "5", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--eval-tasks", "32", "--eval-samples",
         "4", "--no-progress", "--seed", "3"]


def rows(n, d=5, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ----------------------------------------------------------------------------- kernel regression

def test_the_fit_is_the_closed_form_solve_and_interpolates_its_rows():
    """α = K⁻¹Y against torch.linalg.solve on the same kernel (another solver), and with no
    jitter the predictor goes through every training row."""
    x, y, x_new = rows(40), rows(40, 3, seed=1), rows(7, seed=2)
    cfg = KernelConfig(kernel="ntk", depth=3, jitter=0.0, tasks=40, samples_per_task=1)
    result = fit(cfg, x, y)
    k = kernels.ntk(x, depth=3)
    expected = kernels.ntk(x_new, x, depth=3) @ torch.linalg.solve(k, y)
    with torch.no_grad():
        assert torch.allclose(result.predictor(x_new), expected, rtol=1e-8, atol=1e-10)
        assert (result.predictor(x) - y).abs().max() < 1e-6
    assert result.jitter_absolute == 0.0


def test_the_mean_predictor_ignores_the_kernels_scale_but_not_its_depth():
    """ReLU without biases is homogeneous: σ_w² = 2 scales the NNGP by 2^depth, and the mean
    predictor does not move; one layer more gives another predictor (caught)."""
    x, y, x_new = rows(30), rows(30, 2, seed=1), rows(10, seed=2)

    def predict(**kw):
        cfg = KernelConfig(kernel="nngp", tasks=30, samples_per_task=1, jitter=1e-12, **kw)
        with torch.no_grad():
            return fit(cfg, x, y).predictor(x_new)

    base = predict(depth=3)
    assert torch.allclose(predict(depth=3, sigma_w2=2.0), base, rtol=1e-7, atol=1e-9)
    assert (predict(depth=4) - base).abs().max() > 1e-3


def test_a_duplicate_row_without_jitter_is_refused_and_jitter_mends_it():
    x = rows(10)
    x = torch.cat([x, x[:1]])
    y = rows(11, 1, seed=1)
    with pytest.raises(kernel_limit.NotPositiveDefinite, match="raise the jitter"):
        fit(KernelConfig(jitter=0.0, tasks=11, samples_per_task=1, depth=2), x, y)
    # With jitter it is a ridge fit: the other rows are met, the twice-seen row gets its targets' mean.
    predictor = fit(KernelConfig(jitter=1e-8, tasks=11, samples_per_task=1, depth=2), x, y).predictor
    with torch.no_grad():
        pred = predictor(x)
    assert torch.allclose(pred[1:10], y[1:10], atol=1e-4)
    assert torch.allclose(pred[[0, 10]], (y[0] + y[10]).expand(2, 1) / 2, atol=1e-4)
    # The reported residual of the fitted rows is λα (no second Gram): the direct one.
    result = fit(KernelConfig(jitter=1e-8, tasks=11, samples_per_task=1, depth=2), x, y)
    assert result.train_rmse == pytest.approx(float((pred - y).pow(2).mean().sqrt()), rel=1e-6)


def test_the_config_refuses_what_it_cannot_fit():
    for bad in (dict(kernel="rbf"), dict(depth=0), dict(parametrization="mup"), dict(tasks=0),
                dict(jitter=-1.0)):
        with pytest.raises(ValueError):
            KernelConfig(**bad)


def test_the_memory_estimate_counts_the_gram_and_the_blocks():
    assert kernel_limit.solve_bytes(10_000, 4) == 8 * 10_000**2 + 8 * 12 * 1024 * 10_000


def test_the_cholesky_factor_overwrites_the_gram_so_one_n_by_n_array_is_the_peak(monkeypatch):
    """solve_bytes counts one n × n array: LAPACK gets a Fortran-ordered K and factors it in
    place. scipy's cho_factor copies a C-ordered one (caught: the factor shares no memory with
    what it was given), and the solution is the same either way (K is symmetric)."""
    import numpy as np
    import scipy.linalg

    seen = []
    original = scipy.linalg.cho_factor

    def spy(a, *args, **kwargs):
        c, lower = original(a, *args, **kwargs)
        seen.append(np.shares_memory(c, a))
        return c, lower

    monkeypatch.setattr(scipy.linalg, "cho_factor", spy)
    x, y = rows(60), rows(60, 2, seed=1)
    cfg = KernelConfig(kernel="ntk", depth=2, jitter=1e-6, tasks=60, samples_per_task=1)
    in_place = fit(cfg, x, y).predictor.alpha
    assert seen == [True]
    k = kernel_limit.gram(cfg, x).numpy()
    k[np.diag_indices_from(k)] += 1e-6 * k.diagonal().mean()
    copied = original(k, lower=True, overwrite_a=True, check_finite=False)
    assert not np.shares_memory(copied[0], k)  # the C-ordered array the comment warns of
    assert torch.equal(in_place, torch.from_numpy(scipy.linalg.cho_solve(copied, y.numpy())))


# ----------------------------------------------------------------------------- the conjugate-gradient solve

def test_the_blocked_product_is_the_gram_times_p(monkeypatch):
    """gram_product's (K + λI)P, K made in blocks from the diagonal on (5 blocks of 64 rows, the
    last ragged), against the dense Gram's product; and gram_diagonal against its diagonal."""
    monkeypatch.setattr(kernel_limit, "BLOCK_ROWS", 64)
    x, p = rows(300), rows(300, 3, seed=1)
    cfg = KernelConfig(kernel="ntk", depth=3, tasks=300, samples_per_task=1)
    k = kernel_limit.gram(cfg, x)
    torch.testing.assert_close(kernel_limit.gram_product(cfg, x, p, 0.25), k @ p + 0.25 * p, rtol=1e-12,
                               atol=1e-12)
    torch.testing.assert_close(kernel_limit.gram_diagonal(cfg, x), k.diagonal(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("kernel", ["ntk", "nngp"])
def test_cg_gives_choleskys_alpha_and_predictions_within_the_condition_bound(kernel, monkeypatch):
    """On 300 rows in blocks of 64, jitter 1e-3, σ_b² = 0.1: for A = K + λI and any α with
    residual r = Y − Aα, ‖α − A⁻¹Y‖ ≤ ‖r‖/λ_min(A) and ‖A⁻¹Y‖ ≥ ‖Y‖/λ_max(A), so per output
    ‖α_cg − α_chol‖ / ‖α_chol‖ ≤ κ(A)·(ρ_cg + ρ_chol) / (1 − κ·ρ_chol), ρ each solve's relative
    residual (A and κ from the dense Gram, in float64); the predictions K(x*, X)α differ by at
    most ‖K(x*, X)‖₂ ‖Δα‖. Both bounds are checked with a factor 2 for the rounding of the
    residuals' own computation. The same λ (jitter × mean diag K) and the same train RMSE."""
    monkeypatch.setattr(kernel_limit, "BLOCK_ROWS", 64)
    x, y, x_new = rows(300), rows(300, 3, seed=1), rows(20, seed=2)
    settings = dict(kernel=kernel, depth=3, jitter=1e-3, sigma_b2=0.1, tasks=300, samples_per_task=1)
    chol = fit(KernelConfig(solver="cholesky", **settings), x, y)
    cg = fit(KernelConfig(solver="cg", **settings), x, y)
    assert (chol.solver, cg.solver, cg.converged) == ("cholesky", "cg", True)
    assert 0 < cg.iterations < 300 and cg.relative_residual <= kernel_limit.CG_TOLERANCE
    assert cg.jitter_absolute == pytest.approx(chol.jitter_absolute, rel=1e-14)
    cfg = chol.predictor.cfg
    a = kernel_limit.gram(cfg, x)
    a.diagonal().add_(chol.jitter_absolute)
    eigenvalues = torch.linalg.eigvalsh(a)
    kappa = float(eigenvalues[-1] / eigenvalues[0])
    a_chol, a_cg = chol.predictor.alpha, cg.predictor.alpha

    def rho(alpha):
        return (y - a @ alpha).norm(dim=0) / y.norm(dim=0)

    bound = kappa * (rho(a_cg) + rho(a_chol)) / (1 - kappa * rho(a_chol))
    assert ((a_cg - a_chol).norm(dim=0) / a_chol.norm(dim=0) <= 2 * bound).all(), (kappa, bound)
    with torch.no_grad():
        cross = cfg.kernel_of(x_new, x)
        gap = (cg.predictor(x_new) - chol.predictor(x_new)).norm(dim=0)
    assert (gap <= 2 * torch.linalg.matrix_norm(cross, 2) * (a_cg - a_chol).norm(dim=0) + 1e-300).all()
    assert (gap / chol.predictor(x_new).detach().norm(dim=0) < 1e-6).all()  # the bound is not vacuous here
    assert cg.train_rmse == pytest.approx(chol.train_rmse, rel=1e-5)


def test_cg_stopped_at_its_cap_is_reported_not_converged(capsys):
    """3 iterations on an ill-conditioned Gram (jitter 1e-10): the fit says cg, 3 iterations,
    its true relative residual (above the tolerance) and converged False; stderr warns; the
    report line says NOT converged."""
    x, y = rows(200), rows(200, 2, seed=1)
    result = fit(KernelConfig(depth=3, solver="cg", cg_max_iterations=3, tasks=200, samples_per_task=1), x, y)
    assert (result.solver, result.iterations, result.converged) == ("cg", 3, False)
    a = kernel_limit.gram(result.predictor.cfg, x)
    a.diagonal().add_(result.jitter_absolute)
    true = float(((y - a @ result.predictor.alpha).norm(dim=0) / y.norm(dim=0)).max())
    assert result.relative_residual == pytest.approx(true, rel=1e-8) and true > kernel_limit.CG_TOLERANCE
    assert "cg did NOT converge" in capsys.readouterr().err
    summary = result.summary() | dict(rows=200, samples_per_task=1, held_out_r2=0.5)
    assert summary["converged"] is False and summary["cg_iterations"] == 3
    assert "NOT converged" in kernel_vs_sgd.format_solver(summary)
    assert kernel_vs_sgd.format_solver(fit(KernelConfig(depth=3, tasks=200, samples_per_task=1), x, y)
                                       .summary()) == ""


def test_a_cg_run_reports_its_solver_and_auto_is_cholesky_up_to_the_budget(capsys, monkeypatch):
    """--solver cg end to end (its iterations and residual in the JSON and the text); auto
    picks cholesky up to 32,768 rows (8 GiB of K) and cg beyond, whose memory is blocks, not n²;
    a cap the run cannot reach is in its report."""
    assert kernel_limit.CHOLESKY_MAX_ROWS == 32_768
    assert kernel_limit.chosen_solver("auto", 32_768) == "cholesky"
    assert kernel_limit.chosen_solver("auto", 32_769) == "cg"
    assert kernel_limit.solve_bytes(65_536, 4, "cg", 4) == (8 * 13 * 1024 * 65_536 + 8 * 65_536 * 25)
    assert kernel_limit.solve_bytes(10_000, 4, "auto") == kernel_limit.solve_bytes(10_000, 4)
    monkeypatch.setattr(kernel_vs_sgd, "available_bytes", lambda: 10 * 2**30)
    kernel_vs_sgd.parse_args([*SMALL, "--tasks", "4096", "--samples-per-task", "16"])  # 65,536 rows: cg fits
    with pytest.raises(kernel_vs_sgd.UsageError, match="by cholesky.*or --solver cg"):
        kernel_vs_sgd.parse_args([*SMALL, "--tasks", "4096", "--samples-per-task", "16",
                                  "--solver", "cholesky"])
    argv = [*SMALL, "--method", "ntk", "--tasks", "16", "--samples-per-task", "4", "--solver", "cg"]
    assert kernel_vs_sgd.main([*argv, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["record"]["fit"]
    assert step["solver"] == "cg" and step["converged"] is True and step["cg_iterations"] > 0
    monkeypatch.setattr(kernel_limit, "cg_cap", lambda cfg, rows: 2)
    assert kernel_vs_sgd.main(argv) == 0
    out = capsys.readouterr()
    assert "cg 2 iterations" in out.out and "NOT converged" in out.out and "did NOT converge" in out.err


# ----------------------------------------------------------------------------- the linearised network

def test_the_linearised_network_is_the_first_order_expansion():
    """At θ₀ it is the network; at θ₀ + tδ it is f(θ₀) + t·J δ by torch.func.jvp (another
    computation of the same product), while the network itself differs at order t²."""
    torch.manual_seed(0)
    net = mlp_student(5, [16, 16], 3).double()
    lin = Linearised(copy.deepcopy(net)).double()
    x = rows(9)
    with torch.no_grad():
        assert torch.allclose(lin(x), net(x), atol=1e-12)
    delta = {n: torch.randn_like(p) for n, p in net.named_parameters()}
    theta0 = {n: p.detach().clone() for n, p in net.named_parameters()}
    f0, jd = torch.func.jvp(lambda params: torch.func.functional_call(net, params, (x,)), (theta0,), (delta,))
    t = 1e-2
    with torch.no_grad():
        for n, p in lin.net.named_parameters():
            p.add_(t * delta[n])
        moved = torch.func.functional_call(net, {n: theta0[n] + t * delta[n] for n in theta0}, (x,))
        assert torch.allclose(lin(x), f0 + t * jd, rtol=1e-10, atol=1e-12)
        assert (moved - lin(x)).abs().max() > 1e-9  # the network is not linear in its parameters


def test_gradient_descent_on_the_linearised_network_converges_to_its_empirical_kernels_predictor():
    """A linear model trained by full-batch gradient descent from θ₀ ends at
    f₀ + Θ(x*, X) Θ(X, X)⁻¹ (Y − f₀(X)) with its own (empirical) NTK: the linearisation's
    Jacobian is the one kernels.empirical_ntk contracts."""
    torch.manual_seed(1)
    net = mlp_student(4, [32], 1).double()
    x, y, x_new = rows(8, 4), rows(8, 1, seed=1), rows(5, 4, seed=2)
    lin = Linearised(copy.deepcopy(net)).double()
    theta_xx, _ = kernels.empirical_ntk(net, x)
    eigenvalues = torch.linalg.eigvalsh(theta_xx)
    opt = torch.optim.SGD(lin.parameters(), lr=1.0 / float(eigenvalues[-1]))  # a stable step
    steps = int(30 * eigenvalues[-1] / eigenvalues[0])  # the slowest mode decays by e^-30
    for _ in range(min(steps, 200_000)):
        opt.zero_grad()
        (0.5 * ((lin(x) - y) ** 2).sum()).backward()
        opt.step()
    theta_nx, _ = kernels.empirical_ntk(net, x_new, x)
    with torch.no_grad():
        expected = net(x_new) + theta_nx @ torch.linalg.solve(theta_xx, y - net(x))
        assert torch.allclose(lin(x_new), expected, atol=1e-6)


def test_kernel_movement_is_zero_without_training_and_grows_with_it():
    torch.manual_seed(2)
    net = mlp_student(4, [32, 32], 2).double()
    x = rows(12, 4)
    assert kernel_movement(net, copy.deepcopy(net), x) == 0.0
    moved = copy.deepcopy(net)
    with torch.no_grad():
        for p in moved.parameters():
            p.mul_(1.1)
    # Every weight × 1.1 in a bias-free ReLU stack at init (zero biases): each output's NTK
    # scales by a known factor, and the movement with it.
    assert kernel_movement(net, moved, x) > 0.1
    theta = output_ntk(net, x)
    assert torch.allclose(theta, theta.T) and bool((torch.linalg.eigvalsh(theta) > -1e-9).all())


# ----------------------------------------------------------------------------- python -m verify.kernel

def test_the_trained_method_is_the_sgd_student():
    """--method trained trains exactly verify.sgd's student (same init, data stream, loop
    and scoring): its held-out R² and RMSE are verify.sgd's for the same settings."""
    common = [*SMALL, "--steps", "30", "--tasks-per-batch", "8", "--samples-per-task", "4",
              "--extra-modules", "0"]
    ours = kernel_vs_sgd.run(kernel_vs_sgd.parse_args([*common, "--method", "trained", "--width", "8",
                                                       "--depth", "2", "--probe-rows", "16"]))
    theirs = sgd.run(sgd.parse_args([*common, "--shapes", "custom", "--widths", "8", "8", "--eps", "0.5"]))

    def metric(report, network, side, name):
        return next(m["value"] for m in report["metrics"]
                    if (m["network"], m["side"], m["metric"]) == (network, side, name))

    for name in ("r2", "rmse"):
        assert metric(ours, "trained", "held_out", name) == pytest.approx(
            metric(theirs, "sgd custom", "held_out", name), rel=1e-9)
    assert ours["record"]["kernel_movement"] > 0


@pytest.mark.parametrize("method", ["ntk", "nngp", "linearised"])
def test_each_method_runs_and_reports_json(method, capsys):
    extra = (["--tasks", "16", "--samples-per-task", "4"] if method in ("ntk", "nngp")
             else ["--width", "16", "--steps", "20", "--tasks-per-batch", "4", "--samples-per-task", "4"])
    assert kernel_vs_sgd.main([*SMALL, "--method", method, *extra, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == method
    assert {m["side"] for m in report["metrics"]} == {"train", "held_out"}
    assert {m["metric"] for m in report["metrics"]} >= {"r2", "rmse", "sup"}


def test_the_ladder_stops_when_settled_and_says_when_it_is_not(monkeypatch):
    base = [*SMALL, "--method", "ntk", "--tasks", "8", "--samples-per-task", "8", "--ladder"]
    monkeypatch.setattr(kernel_vs_sgd, "LADDER_TOLERANCE", 10.0)  # any change counts as settled
    early = kernel_vs_sgd.run(kernel_vs_sgd.parse_args(base))["record"]
    assert [s["samples_per_task"] for s in early["ladder"]] == [1, 2] and early["ladder_settled"] is True
    monkeypatch.setattr(kernel_vs_sgd, "LADDER_TOLERANCE", 0.0)  # nothing settles: the ladder's end
    full = kernel_vs_sgd.run(kernel_vs_sgd.parse_args(base))["record"]
    assert [s["samples_per_task"] for s in full["ladder"]] == [1, 2, 4, 8] and full["ladder_settled"] is False
    assert full["fit"]["rows"] == 64


@pytest.mark.parametrize("argv, message", [
    (["--encoding", "nope"], "invalid choice"),
    (["--depth", "0"], "--depth"),
    (["--method", "trained", "--width", "1.5"], "--width"),
    (["--method", "ntk", "--width", "64"], "--width does not apply to --method ntk"),
    (["--method", "trained", "--jitter", "0.1"], "--jitter does not apply to --method trained"),
    (["--method", "nngp", "--tasks", "100000", "--samples-per-task", "100000"], "the kernel solve needs"),
    (["--encoding", "fewshot"], "drawn anew at every call"),
    (["--solver", "lu"], "--solver: invalid choice"),
    (["--sigma-b2", "-0.1"], "--sigma-b2: expected a finite number ≥ 0"),
    (["--sigma-b2", "nan"], "--sigma-b2"),
    (["--method", "trained", "--sigma-b2", "0.1"], "--sigma-b2 does not apply to --method trained"),
    (["--method", "linearised", "--solver", "cg"], "--solver does not apply to --method linearised"),
])
def test_bad_input_gets_one_line_and_exit_2_before_any_work(argv, message, capsys):
    assert kernel_vs_sgd.main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_studys_key_holds_only_what_the_method_reads():
    kernel = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--method", "nngp"]))
    trained = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--method", "trained"]))
    assert {"width", "steps", "lr", "parametrization"}.isdisjoint(kernel) and kernel["tasks"] == 512
    assert {"tasks", "jitter", "ladder"}.isdisjoint(trained) and trained["width"] == 256
    # σ_b² = 0 and the auto solver are the unset defaults: the keys the stored runs have.
    same = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--method", "nngp", "--sigma-b2", "0",
                                                              "--solver", "auto"]))
    assert same == kernel, same
    biased = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--method", "nngp",
                                                                "--sigma-b2", "0.1", "--solver", "cg"]))
    assert biased == kernel | dict(sigma_b2=0.1, solver="cg")
    config = kernel_vs_sgd._kernel_config(kernel_vs_sgd.parse_args([*SMALL, "--sigma-b2", "0.1"]), 4)
    assert (config.sigma_b2, config.solver) == (0.1, "auto")


def test_the_behaviour_record_moves_with_the_kernel_and_the_training():
    ntk = kernel_vs_sgd.behaviour(kernel_vs_sgd.parse_args([*SMALL, "--method", "ntk"]))
    deeper = kernel_vs_sgd.behaviour(kernel_vs_sgd.parse_args([*SMALL, "--method", "ntk", "--depth", "5"]))
    assert ntk["split"] == deeper["split"] and ntk["kernel"] != deeper["kernel"]
    trained = kernel_vs_sgd.behaviour(kernel_vs_sgd.parse_args([*SMALL, "--method", "trained",
                                                                "--width", "8"]))
    assert len(trained["losses"]) == kernel_vs_sgd.BEHAVIOUR_STEPS


def test_an_mlp_of_other_layers_is_refused_by_the_linearisation():
    with pytest.raises(ValueError, match="Linear and ReLU"):
        Linearised(nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)))


# ----------------------------------------------------------------------------- the study

TINY_KERNEL_STUDY = """method: grid
name: tiny-kernel
program: verify.kernel
parameters:
  method: {values: [ntk, nngp, linearised, trained]}
  M: {value: 4}
  K: {value: 2}
  I: {value: 2}
  H: {value: 2}
  O: {value: 2}
  depth: {value: 2}
  width: {values: [8, 32]}
  tasks: {value: 16}
  samples_per_task: {value: 4}
  ladder: {value: true}
  steps: {value: 30}
  tasks_per_batch: {value: 4}
  eval_tasks: {value: 16}
  eval_samples: {value: 4}
  probe_rows: {value: 16}
  seed: {values: [1, 2, 3]}
"""


def test_a_study_crosses_methods_and_widths_and_reports_gaps_with_intervals(tmp_path, monkeypatch):
    """The kernel limits read no width, so they run once a seed (3 + 3), the networks once a
    width (12); the report pairs each network with the NTK limit of its seed."""
    from verify.studies import commands as driver
    from verify.studies import grids
    from verify.studies.kernel_report import effects_table, format_markdown

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tiny-kernel.yaml"
    path.write_text(TINY_KERNEL_STUDY)
    _, runs = grids.expand(str(path), "paper")
    assert sorted(r.config["method"] for r in runs) == ["linearised"] * 6 + ["nngp"] * 3 + ["ntk"] * 3 + [
        "trained"] * 6
    out = tmp_path / "out"
    summary = driver.run_study(str(path), "paper", out, engine="serial", progress=False)
    assert (summary["done"], summary["failed"]) == (18, 0), summary
    table = effects_table("tiny-kernel", "paper", out, keys={r.key for r in runs})
    cells = {(c["method"], c["width"]): c for c in table["cells"]}
    assert set(cells) == {("ntk", None), ("nngp", None), ("linearised", 8), ("linearised", 32),
                          ("trained", 8), ("trained", 32)}
    ntk = cells[("ntk", None)]["held_out_r2"]
    assert ntk["n"] == 3 and ntk["df"] == 2 and ntk["lo"] < ntk["mean"] < ntk["hi"]
    gap = table["gaps"][0]
    assert [w["width"] for w in gap["widths"]] == [8, 32]
    # The paired gap is the mean of the seeds' differences (the same seeds on both sides).
    by = {(r["method"], r["width"], r["seed"]): r["held_out_r2"] for r in table["runs"]}
    expected = sum(by[("trained", 8, s)] - by[("ntk", None, s)] for s in (1, 2, 3)) / 3
    assert gap["widths"][0]["trained_minus_ntk"]["mean"] == pytest.approx(expected)
    assert all(w["trained_minus_ntk"]["verdict"] in ("above the limit", "below the limit", "not resolved")
               for w in gap["widths"])
    assert "| trained − NTK | p_Holm | call |" in format_markdown(table) and "trend" not in gap
    # Each kernel limit climbed its ladder (1, 2, 4 x per task); the report says when one did not settle.
    from verify.studies.store import RunStore

    with RunStore(out / "study.sqlite", readonly=True) as store:
        records = [r["report"]["record"] for r in store.rows() if r["report"]["method"] in ("ntk", "nngp")]
    assert all([s["samples_per_task"] for s in rec["ladder"]][:2] == [1, 2] for rec in records)
    unsettled = sum(rec["ladder_settled"] is False for rec in records)
    assert any("ladders along x per task did not settle" in n for n in table["notes"]) == (unsettled > 0)


def _kernel_row(method, encoding, seed, held_out, *, train=None, width=None, ladder=None, stored=None):
    """A planted report row (kernel_report.run_row's fields)."""
    train = held_out + 0.02 if train is None else train
    return dict(key=f"{method}-{encoding}-{width}-{seed}", encoding=encoding, method=method, width=width,
                seed=seed, held_out_r2=held_out, train_r2=train, held_out_rmse=0.1, kernel_movement=None,
                code=None, rows=4096 if width is None else None,
                ladder=ladder if ladder is not None else [held_out - 0.03, held_out] if width is None else [],
                stored=stored if stored is not None else {"held_out r2": held_out, "train r2": train})


def _planted(gaps_by_width: dict, ntk=(0.80, 0.85, 0.82), encoding="identity") -> list[dict]:
    """NTK limits per seed and trained networks at NTK + the planted gap, width by width."""
    rows = [_kernel_row("ntk", encoding, s, v) for s, v in enumerate(ntk, 1)]
    for width, diffs in gaps_by_width.items():
        rows += [_kernel_row("trained", encoding, s, ntk[s - 1] + d, width=width)
                 for s, d in enumerate(diffs, 1)]
    return rows


def test_the_per_width_call_needs_its_test_to_reject_after_holm_over_the_widths():
    from verify.studies.kernel_report import analyse, t_interval

    # Alone, a paired gap of 0.034 ± 0.010 over 3 seeds rejects 0 (p ≈ 0.035): above the limit.
    alone = t_interval([0.024, 0.034, 0.044])
    assert alone["lo"] > 0 and 0.01 < alone["p"] < 0.05
    one = analyse(_planted({256: [0.024, 0.034, 0.044]}))["gaps"][0]["widths"]
    assert one[0]["trained_minus_ntk"]["verdict"] == "above the limit"
    assert one[0]["trained_minus_ntk"]["p_holm"] == pytest.approx(alone["p"])
    # Beside three widths with no gap it is one test of four: Holm multiplies its p by 4, no call.
    four = analyse(_planted({32: [0.0, 0.01, -0.01], 64: [0.01, -0.01, 0.0], 128: [0.0, 0.02, -0.01],
                             256: [0.024, 0.034, 0.044]}))["gaps"][0]["widths"]
    test = four[-1]["trained_minus_ntk"]
    assert test["p"] == pytest.approx(alone["p"]) and test["p_holm"] == pytest.approx(4 * alone["p"])
    assert test["verdict"] == "not resolved"
    # A large, steady gap survives the correction; a negative one is "below the limit".
    steady = analyse(_planted({32: [-0.30, -0.31, -0.29], 64: [0.10, 0.11, 0.12]}))["gaps"][0]["widths"]
    assert [w["trained_minus_ntk"]["verdict"] for w in steady] == ["below the limit", "above the limit"]
    # Fewer than 2 seeds: no test, no call.
    single = analyse(_planted({64: [0.2]}, ntk=(0.8,)))["gaps"][0]["widths"][0]["trained_minus_ntk"]
    assert single["p"] is None and single["verdict"].startswith("not resolved")
    # The interval is Student's t with df = n − 1: for n = 3 the half-width is 4.303 sd/√3.
    iv = t_interval([1.0, 2.0, 3.0])
    assert iv["hi"] - iv["mean"] == pytest.approx(4.302652729911275 * 1.0 / 3**0.5)


def _table(rows: list[dict]) -> dict:
    from verify.studies.kernel_report import LEVEL, analyse

    return dict(study="planted", scale="cpu", runs_done=len(rows), runs_failed=0, runs=rows, notes=[],
                level=LEVEL, **analyse(rows))


def test_no_trend_in_width_test_and_no_claim_that_feature_learning_is_needed():
    """The slope of trained − NTK on log width is the trained R²'s own slope (the limit is one
    number a seed), so the report has none; and the limit is the fit at its row budget, so even a
    network above it at every width does not make the report say feature learning is needed."""
    from verify.studies.kernel_report import format_compact, format_markdown

    table = _table(_planted({32: [0.10, 0.11, 0.12], 64: [0.13, 0.14, 0.15], 128: [0.16, 0.17, 0.18]}))
    assert all("trend" not in g for g in table["gaps"])
    assert all(w["trained_minus_ntk"]["verdict"] == "above the limit" for w in table["gaps"][0]["widths"])
    for text in (format_markdown(table), format_compact(table)):
        assert "per doubling" not in text and "widens" not in text and "narrows" not in text
        assert "Feature learning is not claimed needed" in text
        assert "feature learning is needed" not in text.lower()
        assert "stored fit at its row budget (4,096 rows)" in text and "--max-tasks" in text
        assert "within trained − NTK = +0.170 [" in text  # how close the lazy limit comes (widest)
    assert "No trend-in-width test" in format_markdown(table)
    # Each method's in-distribution − held-out gap stands beside its held-out R².
    assert "| identity | ntk | ∞ | 3 | 0.823 [" in format_markdown(table)
    assert "| +0.020 [+0.020, +0.020] |" in format_markdown(table)


def test_the_rotation_check_fails_when_identity_and_orthogonal_kernels_differ():
    from verify.studies.kernel_report import ROTATION_TOLERANCE, format_markdown, rotation_check

    def kernels(orthogonal_shift=0.0, rung_shift=0.0):
        rows = []
        for seed, v in ((1, 0.80), (2, 0.85), (3, 0.82)):
            for method in ("ntk", "nngp"):
                rows.append(_kernel_row(method, "identity", seed, v, ladder=[v - 0.03, v]))
                w = v + (orthogonal_shift if seed == 2 and method == "ntk" else 0.0)
                rows.append(_kernel_row(method, "orthogonal", seed, w,
                                        ladder=[v - 0.03 + (rung_shift if seed == 3 else 0.0), w]))
                rows.append(_kernel_row(method, "invertible_nn", seed, v - 0.01))
        return rows

    # Equal up to rounding (the committed store agrees to 9.4e-11 in held-out R²): holds.
    same = rotation_check(kernels(1e-10))
    assert same["holds"] is True and len(same["pairs"]) == 6
    assert same["largest"]["largest"] < ROTATION_TOLERANCE
    assert same["distinct"] == pytest.approx(0.01)  # identity against invertible_nn: what it tells apart
    text = format_markdown(_table(kernels(1e-10)))
    assert "**holds**" in text and "Kernel side: 2 replications across encodings (identity = orthogonal, " \
        "invertible_nn)." in text
    # One seed's NTK differs in held-out R² by 1e-4 (an invertible_nn-sized difference): fails there.
    differ = rotation_check(kernels(1e-4))
    assert differ["holds"] is False
    assert [(q["method"], q["seed"]) for q in differ["failures"]] == [("ntk", 2)]
    assert differ["failures"][0]["largest"] == pytest.approx(1e-4)
    text = format_markdown(_table(kernels(1e-4)))
    assert "**fails** at ntk seed 2" in text and "Kernel side: 3 replications" in text
    # A ladder rung differing alone fails it too; with no orthogonal partner there is no check.
    assert rotation_check(kernels(rung_shift=1e-3))["failures"][0]["where"] == "ladder rung 1"
    alone = [r for r in kernels() if r["encoding"] != "orthogonal"]
    assert rotation_check(alone)["holds"] is None
    assert "no identity and orthogonal kernel limits" in format_markdown(_table(alone))


def test_the_committed_kernel_vs_sgd_store_passes_the_rotation_check():
    """The committed store's identity and orthogonal limits are one kernel (to 2.7e-9 in any
    stored number, 9.4e-11 in held-out R²)."""
    from verify.studies import grids
    from verify.studies.kernel_report import ROTATION_TOLERANCE, effects_table

    table = effects_table("kernel-vs-sgd", "cpu", grids.PACKAGED_RESULTS_DIR / "kernel-vs-sgd" / "cpu")
    rot = table["rotation"]
    assert rot["holds"] is True and len(rot["pairs"]) == 6
    assert rot["largest"]["largest"] < ROTATION_TOLERANCE / 100
    assert rot["distinct"] > ROTATION_TOLERANCE * 100  # distinct kernels are far outside the tolerance
    held_out = max(abs(a["held_out_r2"] - b["held_out_r2"]) for a in table["runs"] for b in table["runs"]
                   if a["method"] in ("ntk", "nngp") and (a["method"], a["seed"]) == (b["method"], b["seed"])
                   and (a["encoding"], b["encoding"]) == ("identity", "orthogonal"))
    assert held_out < 1e-9


def test_the_kernel_report_states_the_scales_deviations_beside_its_results():
    """Every deviation of the cpu scale (its study file's list, the bias variance's included)
    is a note of the report, as the effects tables' are."""
    from verify.studies import grids
    from verify.studies.grids import study_deviations
    from verify.studies.kernel_report import effects_table

    table = effects_table("kernel-vs-sgd", "cpu", grids.PACKAGED_RESULTS_DIR / "kernel-vs-sgd" / "cpu")
    deviations = study_deviations("kernel-vs-sgd", "cpu")
    assert any("σ_b² = 0" in d for d in deviations)
    assert [n for n in table["notes"] if n.startswith("deviation")] == [
        f"deviation from the paper at this scale: {d}" for d in deviations]


def test_equivalence_to_the_limit_is_a_tost_on_the_unexplained_variance_holm_over_widths():
    """Within ×1.25 of 1 − R²: a trained network whose 1 − R² is the limit's to ±2% is
    equivalent; one with a third less (ratio 0.67) is not, however steady; and the TOST's p is
    Holm-corrected over the widths, so a lone borderline width loses its call beside others."""
    import math

    from verify.studies.kernel_report import EQUIVALENCE_DELTA, analyse

    ntk = (0.80, 0.85, 0.82)
    def trained(ratios):  # R² whose 1 − R² is the limit's times each seed's ratio
        return [(1 - n) - (1 - n) * r for n, r in zip(ntk, ratios, strict=True)]
    widths = analyse(_planted({32: trained((1.01, 0.99, 1.02)), 64: trained((0.67, 0.66, 0.68))}, ntk=ntk)
                     )["gaps"][0]["widths"]
    near, far = (w["trained_within_delta"] for w in widths)
    assert near["equivalent"] is True and near["ratio"] == pytest.approx(math.exp(
        -sum(-math.log(r) for r in (1.01, 0.99, 1.02)) / 3), rel=1e-9)
    assert far["equivalent"] is False and far["ratio"] == pytest.approx(0.67, abs=0.01)
    assert near["p_holm"] == pytest.approx(min(1.0, 2 * near["p"]))
    # Ratios 0.95, 0.70, 0.85: a mean inside ×1.25, but too spread for 3 seeds to show it.
    edge = analyse(_planted({32: trained((0.95, 0.70, 0.85)), 64: trained((1.0, 1.0, 1.001))}, ntk=ntk)
                   )["gaps"][0]["widths"][0]["trained_within_delta"]
    assert -math.log(edge["ratio"]) < EQUIVALENCE_DELTA and edge["equivalent"] is False
