"""Training, metrics and python -m verify.sgd."""

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from constructions import HyperteacherConfig, enumerate_supports, sample_hyperteacher
from verify.learning import sgd_program as sgd
from verify.learning.families import HyperteacherFamily
from verify.learning.metrics import (
    PAPER_HELD_OUT_TASKS,
    PAPER_PROBE_FIT_TASKS,
    PAPER_PROBE_L2,
    PAPER_SAMPLES_PER_TASK,
    TaskSamples,
    compositional_r2,
    compositional_r2_paper,
    mean_dimension_r2,
    predict,
    probe_r2,
    probe_r2_pooled,
    r2_score,
    ridge_fit_predict,
    ridge_fit_predict_paper,
    rmse,
    sample_tasks,
)
from verify.learning.records import lookup
from verify.learning.train import TrainConfig, shape_widths, train_mlp


@pytest.fixture(scope="module")
def teacher():
    return sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, seed=3))


def teacher_as_network(teacher):
    return lambda inputs: teacher.forward(inputs[:, : teacher.M], inputs[:, teacher.M:])


def test_teacher_scores_perfectly_and_per_task_mean_scores_zero(teacher):
    samples = sample_tasks(teacher, enumerate_supports(5, 2), 32, np.random.default_rng(0))
    pred = predict(teacher_as_network(teacher), samples, teacher.encode)
    assert rmse(pred, samples) == 0.0
    r2, used = compositional_r2(pred, samples)
    assert r2 == 1.0 and used > 0.5
    # Predicting each task's own mean output: MSE_{t,o} = Var_{t,o}, so R² = 0 exactly.
    mean = samples.y.mean(dim=1, keepdim=True).expand_as(samples.y)
    assert compositional_r2(mean, samples)[0] == pytest.approx(0.0, abs=1e-12)


def test_r2_on_a_hand_example():
    y = torch.tensor([[[0.0], [2.0]], [[1.0], [3.0]]], dtype=torch.float64)  # 2 tasks, 2 samples, 1 output
    samples = TaskSamples(torch.zeros(2, 1), torch.zeros(2, 2, 1), y)
    pred = y + torch.tensor([[[1.0], [1.0]], [[0.0], [0.0]]], dtype=torch.float64)
    # Task 0: MSE 1, Var 1 → 0; task 1: MSE 0 → 1. Mean 0.5.
    assert compositional_r2(pred, samples) == (0.5, 1.0)


def regression_data(n: int, d: int, seed: int):
    """Features (n, d), targets (n, 3) and test features (7, d), standard normal."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((n, d), (n, 3), (7, d)))


@pytest.mark.parametrize("n,d", [(50, 8), (8, 50)])
def test_ridge_primal_and_dual_agree(n, d):
    X, Y, Xt = regression_data(n, d, seed=0)
    got = ridge_fit_predict(X, Y, Xt, alpha=1e-2)
    mu_x, mu_y = X.mean(0), Y.mean(0)
    Xc = X - mu_x
    lam = 1e-2 * float(Xc.pow(2).sum() / n) * n
    coef = torch.linalg.solve(Xc.T @ Xc + lam * torch.eye(d, dtype=X.dtype), Xc.T @ (Y - mu_y))
    torch.testing.assert_close(got, (Xt - mu_x) @ coef + mu_y, rtol=1e-9, atol=1e-10)


def test_probe_reads_z_off_a_layer_that_holds_it(teacher):
    """A hidden layer that copies z (z ≥ 0 passes a ReLU) is perfectly decodable; one that
    holds only x is not."""
    copy_z = torch.nn.Linear(teacher.M + teacher.I, teacher.M).double()
    copy_x = torch.nn.Linear(teacher.M, teacher.I).double()
    with torch.no_grad():
        copy_z.weight.copy_(torch.eye(teacher.M, teacher.M + teacher.I, dtype=torch.float64))
        copy_z.bias.zero_()
    net = torch.nn.Sequential(copy_z, torch.nn.ReLU(), copy_x, torch.nn.ReLU(),
                              torch.nn.Linear(teacher.I, teacher.O).double())
    rng = np.random.default_rng(1)
    supports = enumerate_supports(5, 2)
    train, test = sample_tasks(teacher, supports, 4, rng), sample_tasks(teacher, supports, 4, rng)
    r2 = probe_r2_pooled(net, train, test, teacher.encode, alpha=1e-8)
    assert r2[0] == pytest.approx(1.0, abs=1e-6) and r2[1] < 0.99


def test_probe_sample_size_does_not_grow_with_the_task_count(teacher, monkeypatch):
    """The probe's fit must see `rows` rows for 10 tasks and for 10× as many, or its R²
    would measure the task count instead of the network."""
    import verify.learning.metrics as metrics

    seen = []
    real = metrics.ridge_fit_predict
    monkeypatch.setattr(metrics, "ridge_fit_predict",
                        lambda a, z, b, alpha: seen.append((len(a), len(b))) or real(a, z, b, alpha))
    net = torch.nn.Sequential(torch.nn.Linear(teacher.M + teacher.I, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, teacher.O)).double()
    rng = np.random.default_rng(2)
    supports = enumerate_supports(teacher.M, 2)
    test = sample_tasks(teacher, supports[:10], 30, rng)
    for n_tasks in (10, 100):
        train = sample_tasks(teacher, supports[rng.integers(len(supports), size=n_tasks)], 30, rng)
        probe_r2_pooled(net, train, test, teacher.encode, rows=200)
    assert seen == [(200, 200), (200, 200)]


def paper_probe_data(teacher, n_fit, n_test, seed):
    """Tasks drawn with replacement from all supports, each with its own weights, so there are
    as many distinct z as tasks."""
    rng = np.random.default_rng(seed)
    supports = enumerate_supports(teacher.M, teacher.K)
    draw = lambda n: sample_tasks(teacher, supports[rng.integers(len(supports), size=n)], 4, rng)  # noqa: E731
    return draw(n_fit), draw(n_test)


def test_paper_constants():
    assert (PAPER_SAMPLES_PER_TASK, PAPER_HELD_OUT_TASKS, PAPER_PROBE_FIT_TASKS, PAPER_PROBE_L2) == (
        16, 1024, 512, 1.0)


def test_paper_probe_reads_z_off_the_pre_relu_first_layer_and_the_encoding(teacher):
    """The first Linear's output is affine in [z, x], so with one row per task a λ = 1 ridge
    recovers z from it; so it does from the identity encoding. A post-ReLU or pooled probe
    of the same layer need not."""
    assert teacher.Q is None  # identity encoding
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(teacher.M + teacher.I, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, teacher.O)).double()
    fit, test = paper_probe_data(teacher, 600, 1100, seed=4)
    r2 = probe_r2(net, fit, test, teacher.encode)
    assert [name for name, _ in r2] == ["encoding", "layer1", "layer2", "output"]
    scores = dict(r2)
    assert scores["encoding"] >= 0.99 and scores["layer1"] >= 0.99
    assert scores["output"] < 0.99  # O = 2 outputs cannot hold M = 5 coordinates linearly


def test_paper_probe_fits_one_row_per_task_with_lambda_one(teacher, monkeypatch):
    import verify.learning.metrics as metrics

    seen = []
    real = metrics.ridge_fit_predict_paper
    monkeypatch.setattr(metrics, "ridge_fit_predict_paper",
                        lambda a, z, b, l2: seen.append((a.shape, z.shape, b.shape, l2)) or real(a, z, b, l2))
    net = torch.nn.Sequential(torch.nn.Linear(teacher.M + teacher.I, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, teacher.O)).double()
    fit, test = paper_probe_data(teacher, 600, 1100, seed=5)
    probe_r2(net, fit, test, teacher.encode)
    widths = [teacher.M, 8, teacher.O]  # encoding, layer1, output
    assert seen == [((512, w), (512, teacher.M), (1024, w), 1.0) for w in widths]
    # With fewer tasks than that, every task is one row.
    seen.clear()
    probe_r2(net, *paper_probe_data(teacher, 30, 40, seed=6), teacher.encode)
    assert [(a[0], b[0]) for a, _, b, _ in seen] == [(30, 40)] * 3


def test_paper_probe_reads_each_task_at_its_last_sample(teacher, monkeypatch):
    import verify.learning.metrics as metrics

    seen = []
    real = metrics.probe_features
    monkeypatch.setattr(metrics, "probe_features", lambda net, e, x: seen.append(x) or real(net, e, x))
    net = torch.nn.Sequential(torch.nn.Linear(teacher.M + teacher.I, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, teacher.O)).double()
    fit, test = paper_probe_data(teacher, 20, 30, seed=7)
    probe_r2(net, fit, test, teacher.encode)
    assert torch.equal(seen[0], fit.x) and torch.equal(seen[1], test.x)
    # Of a task's samples, the MLP's features are those of the last one alone.
    e = teacher.encode(fit.z)
    layer1 = dict(real(net, e, fit.x))["layer1"]
    torch.testing.assert_close(layer1, net[0](torch.cat([e, fit.x[:, -1]], dim=1)), rtol=0, atol=0)
    changed = fit.x.clone()
    changed[:, :-1] = 0.0
    torch.testing.assert_close(dict(real(net, e, changed))["layer1"], layer1, rtol=0, atol=0)


def test_paper_ridge_is_lambda_one_with_a_penalised_masked_intercept():
    """One row x = 2, y = 3: A = [2, 1], w = Aᵀ(AAᵀ + 1)⁻¹ y = [1, 0.5], so the prediction at
    x = 2 is 2.5 (an unpenalised or λ → 0 fit would give 3). A row with a zero feature gets no
    intercept column in the fit: A = [0, 2, 0], w = [0, 1.2, 0], prediction 2.4."""
    one = lambda *v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    assert float(ridge_fit_predict_paper(one(2.0), one(3.0), one(2.0))) == pytest.approx(2.5, abs=1e-12)
    assert float(ridge_fit_predict_paper(one(0.0, 2.0), one(3.0), one(0.0, 2.0))) == pytest.approx(
        2.4, abs=1e-12)


@pytest.mark.parametrize("n,d", [(50, 8), (8, 50)])
def test_paper_ridge_primal_and_dual_agree(n, d):
    X, Y, Xt = regression_data(n, d, seed=1)
    A = torch.cat([X, torch.ones(n, 1, dtype=X.dtype)], 1)
    w = torch.linalg.solve(A.T @ A + torch.eye(d + 1, dtype=X.dtype), A.T @ Y)
    want = torch.cat([Xt, torch.ones(7, 1, dtype=X.dtype)], 1) @ w
    torch.testing.assert_close(ridge_fit_predict_paper(X, Y, Xt, 1.0), want, rtol=1e-9, atol=1e-10)


def test_mean_per_dimension_r2_is_not_the_pooled_r2():
    """z₁ varies 100× more than z₂; the prediction is exact on z₁ and constant on z₂. Per
    dimension: (1 + 0) / 2 = 0.5. Pooled: 1 − 1/(10⁴ + 1) ≈ 1."""
    t = torch.tensor([-1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    target = torch.stack([100 * t, t], dim=1)
    pred = torch.stack([100 * t, torch.zeros(4, dtype=torch.float64)], dim=1)
    assert mean_dimension_r2(pred, target) == pytest.approx(0.5, abs=1e-12)
    assert r2_score(pred, target) == pytest.approx(1 - 1 / 10001, abs=1e-12)


def test_paper_r2_is_the_mean_of_elementwise_errors_over_per_task_output_variance(teacher):
    rng = np.random.default_rng(8)
    samples = sample_tasks(teacher, enumerate_supports(5, 2), PAPER_SAMPLES_PER_TASK, rng)
    assert compositional_r2_paper(samples.y.clone(), samples) == 1.0
    mean = samples.y.mean(dim=1, keepdim=True).expand_as(samples.y)
    assert compositional_r2_paper(mean, samples) == pytest.approx(0.0, abs=1e-12)
    # As compscale/loss.py writes it: 1 − (pred − y)² / base_mse for every (task, sample,
    # output), base_mse the (task, output)'s variance over samples, then the mean of all.
    g = torch.Generator().manual_seed(0)
    pred = samples.y + 0.1 * torch.randn(samples.y.shape, generator=g, dtype=samples.y.dtype)
    base = ((samples.y - samples.y.mean(1, keepdim=True)) ** 2).mean(1, keepdim=True)
    want = float((1 - (pred - samples.y) ** 2 / base).mean())
    assert compositional_r2_paper(pred, samples) == pytest.approx(want, rel=1e-12)


def test_paper_r2_counts_every_pair_where_ours_skips_constant_ones():
    """Task 1's target is constant: the paper's estimator divides by its zero variance, this
    project's leaves the pair out."""
    y = torch.tensor([[[0.0], [2.0]], [[1.0], [1.0]]], dtype=torch.float64)
    samples = TaskSamples(torch.zeros(2, 1), torch.zeros(2, 2, 1), y)
    pred = y + torch.tensor([[[1.0], [1.0]], [[0.5], [0.5]]], dtype=torch.float64)
    assert compositional_r2(pred, samples) == (0.0, 0.5)
    assert compositional_r2_paper(pred, samples) == float("-inf")


def test_shapes():
    assert shape_widths("matched", [100, 4]) == [100, 4]
    assert shape_widths("balanced", [101, 4]) == [53, 52]
    assert shape_widths("balanced4", [101, 4]) == [27, 26, 26, 26]
    assert shape_widths("custom", [100, 4], [8, 8, 8]) == [8, 8, 8]
    with pytest.raises(ValueError, match="matched, balanced, balanced4, custom"):
        shape_widths("wide", [1])


def test_training_lowers_the_loss_and_is_reproducible(teacher):
    cfg = TrainConfig(steps=300, tasks_per_batch=8, samples_per_task=8, lr=1e-2, seed=5)
    supports = enumerate_supports(5, 2)
    a = train_mlp(teacher, teacher.encode, supports, [32, 16], cfg, progress=False)
    b = train_mlp(teacher, teacher.encode, supports, [32, 16], cfg, progress=False)
    assert a.losses[-1][1] < 0.5 * a.losses[0][1]
    for pa, pb in zip(a.net.parameters(), b.net.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert next(a.net.parameters()).dtype == torch.float64


TINY = ["--M", "4", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--steps", "60", "--eval-samples", "8",
        "--eval-tasks", "64", "--no-progress"]
# I = 3 skips the measurer's exhaustive grid over x (I ≤ 2), which dominates a tiny run.
FAST = ["--M", "4", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--steps", "5", "--eval-samples", "4",
        "--eval-tasks", "32", "--no-progress"]


def test_cli_reports_every_metric_for_the_construction_and_each_network(capsys, tmp_path, monkeypatch):
    phases = []

    @contextlib.contextmanager
    def phase(desc, enabled=None):
        phases.append(desc)
        yield

    monkeypatch.setattr(sgd.cli, "phase", phase)
    code = sgd.main([*TINY, "--json", "--save", str(tmp_path)])
    r = json.loads(capsys.readouterr().out)
    assert code == 0 and r["construction_within_certificate"]
    names = [row["network"] for row in r["rows"]]
    assert names[0].startswith("construction") and names[1:] == ["sgd matched", "sgd balanced"]
    for row in r["rows"]:
        for side in ("train", "held_out"):
            for metric in ("sup", "rmse", "r2"):
                assert np.isfinite(lookup(r["metrics"], row["network"], side, metric)), (side, metric)
            assert lookup(r["metrics"], row["network"], side, "sup") >= 0
    assert r["rows"][1]["hidden_units"] == r["rows"][0]["hidden_units"] == r["rows"][2]["hidden_units"]
    assert r["rows"][1]["widths"] == r["rows"][0]["widths"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "sgd_balanced.pt", "sgd_matched.pt"]
    assert json.loads((tmp_path / "report.json").read_text())["rows"][1]["network"] == "sgd matched"
    # Every network's evaluation shows as a phase (it is the long silent part of a run).
    assert [p for p in phases if p.startswith("evaluate")] == [f"evaluate {n}" for n in names]


@pytest.fixture
def places(tmp_path):
    """Output places that must be refused, a folder that already holds results, and one
    for a run that must leave nothing in it."""
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me\n")
    full = tmp_path / "full"
    full.mkdir()
    (full / "report.json").write_text("{}\n")
    return dict(OUT=str(tmp_path / "out"), FILE=str(a_file), UNDER_FILE=str(a_file / "sub"), FULL=str(full))


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("argv,message", [
    (["--M", "2", "--K", "3"], "at most"), (["--shapes", "custom"], "needs --widths"),
    (["--split", "odd"], "invalid choice"), (["--encoding", "words"], "invalid choice"),
    (["--eps", "0"], "positive"), (["--steps", "0"], "positive integer"),
    (["--seed", "-1"], "seed in [0, 4294967295]"), (["--seed", str(2**32)], "seed"),
    (["--device", "bogus"], "--device 'bogus'"), (["--device", "cuda:x"], "--device"),
    (["--device", "meta"], "only cpu and cuda"),
    (["--weight-decay", "-1"], "--weight-decay"), (["--weight-decay", "nan"], "--weight-decay"),
    (["--held-out", "2"], "--held-out"), (["--held-out", "0"], "--held-out"),
    (["--widths", "8", "8"], "--shapes custom"),
    (["--paper", "--shapes", "matched", "--widths", "8"], "--shapes custom"),
    (["--threads", "0"], "positive integer"),
    (["--student", "rnn"], "invalid choice"),
    (["--d-model", "32"], "--d-model applies to --student transformer"),
    (["--student", "hypernetwork", "--n-layers", "2"], "--n-layers applies to --student transformer"),
    (["--d-ffw", "32"], "--d-ffw applies to --student transformer or hypernetwork"),
    (["--student", "transformer", "--shapes", "matched"], "--shapes applies to --student mlp"),
    (["--student", "transformer", "--init", "torch_default"], "--init applies to --student mlp"),
    (["--student", "transformer", "--d-model", "10", "--n-heads", "3"], "multiple of --n-heads"),
    (["--init", "xavier"], "invalid choice"), (["--decay", "none"], "invalid choice"),
    (["--schedule", "linear"], "invalid choice"), (["--warmup-steps", "10"], "applies to --schedule cosine"),
    (["--schedule", "cosine", "--steps", "2000"], "--steps > 2 × --warmup-steps"),
    (["--checkpoint-minutes", "0"], "--checkpoint-minutes"), (["--precision", "tf32"], "CUDA matmul mode"),
    (["--precision", "fp16"], "invalid choice"), (["--log-every", "0"], "positive integer"),
    (["--eval-tasks", "0"], "positive integer"), (["--extra-modules", "-1"], "--extra-modules"),
    (["--save", "FILE"], "existing file"), (["--save", "UNDER_FILE"], "cannot be written"),
    (["--save", "FULL"], "--force"), (["--force"], "--save"),
    # Found only once the work starts, still one line and nothing left in --save.
    ([*FAST, "--held-out", "0.95", "--save", "OUT"], "lower --held-out"),
    ([*FAST, "--K", "1", "--save", "OUT"], "--split missing-module"),
    ([*FAST, "--eps", "1e-300", "--save", "OUT"], "2^40"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, places, argv, message):
    before = files_under(Path(places["OUT"]).parent)
    assert sgd.main([places.get(a, a) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    assert err.startswith("verify.sgd: error: ") and message in err, err
    assert "held_out_fraction" not in err and "max_tries" not in err  # the flags, not make_split's names
    assert files_under(Path(places["OUT"]).parent) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="only meaningful without a GPU")
def test_cuda_request_without_a_gpu_is_a_usage_error(capsys):
    assert sgd.main(["--device", "cuda"]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_force_replaces_a_previous_save(capsys, tmp_path):
    (tmp_path / "report.json").write_text("old\n")
    assert sgd.main([*FAST, "--shapes", "matched", "--save", str(tmp_path), "--force"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "sgd_matched.pt"]
    assert json.loads((tmp_path / "report.json").read_text())["rows"][1]["network"] == "sgd matched"


def test_paper_preset_sets_the_papers_sizes_and_explicit_flags_override_it():
    args = sgd.parse_args(["--paper"])
    assert (args.task.I, args.task.H, args.task.O, args.M, args.K) == (16, 16, 16, 16, 3)
    assert args.shapes == ("custom",) and args.widths == (1024,) * 4 and args.steps == 300_000
    assert (args.tasks_per_batch, args.task.samples_per_task, args.runtime.seeds) == (128, 16, (1, 2, 3))
    assert (args.eval_tasks, args.task.eval_samples) == (1024, 16)
    assert (args.init, args.decay) == ("lecun_normal", "matrices")
    args = sgd.parse_args(["--paper", "--steps", "20", "--M", "12"])
    assert args.steps == 20 and args.M == 12 and args.widths == (1024,) * 4
    assert sgd.parse_args(["--paper", "--widths", "8", "8"]).widths == (8, 8)
    assert sgd.parse_args(["--paper", "--shapes", "matched"]).widths is None  # preset widths unused
    assert sgd.parse_args([]).M == 8  # the preset does not leak into later parses
    assert sgd.parse_args([]).widths is None


def test_threads_pay_only_for_large_training_steps(monkeypatch):
    """The default is 1 for a small step and the free cores for a large one; --threads wins;
    torch's setting is restored after the run."""
    from verify.learning.train import SINGLE_THREAD_MACS

    monkeypatch.setattr(sgd.cli, "free_cores", lambda: 7)
    before = torch.get_num_threads()
    for n, macs, expected in ((None, SINGLE_THREAD_MACS - 1, 1), (None, SINGLE_THREAD_MACS, 7),
                              (3, SINGLE_THREAD_MACS - 1, 3)):
        with sgd.threads_of_run(n, macs):
            assert torch.get_num_threads() == expected
        assert torch.get_num_threads() == before
    from verify.learning.train import mlp, step_macs

    assert step_macs(mlp(16 + 16, [1024] * 4, 16), 128, 16) >= SINGLE_THREAD_MACS
    assert step_macs(mlp(4 + 4, [36, 36], 4), 32, 16) < SINGLE_THREAD_MACS


def test_probe_score_leaves_out_coordinates_that_do_not_vary():
    """A z coordinate constant on the scored tasks has no R² (SST = 0): it must not turn the
    mean into −inf (as it did for every network on the default split's 9 held-out tasks)."""
    import math

    from verify.learning.metrics import mean_dimension_r2

    target = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]], dtype=torch.float64)
    pred = torch.tensor([[0.1, 1.0], [0.0, 2.0], [0.0, 4.0]], dtype=torch.float64)
    assert mean_dimension_r2(pred, target) == pytest.approx(1 - 1 / 2)
    assert math.isnan(mean_dimension_r2(pred, torch.zeros_like(target)))


def test_each_student_goes_through_the_same_metrics(capsys):
    """The transformer and the hypernetwork are scored as the MLPs are: sup error, R² on
    every side (in-distribution, held out, k = K+1 … K+2 active modules); the transformer's
    probe reads its blocks at the last token, the hypernetwork has none (as in the paper)."""
    small = ["--d-ffw", "16"]
    for student, extra in (("transformer", ["--d-model", "8", "--n-heads", "2", "--n-layers", "1"]),
                           ("hypernetwork", [])):
        r = sgd.run(sgd.parse_args([*FAST, "--student", student, *small, *extra]))
        assert [row["network"] for row in r["rows"][1:]] == [f"sgd {student}"]
        row = r["rows"][1]
        assert row["hidden_units"] is None and row["parameters"] > 0
        for side in ("train", "held_out", "k3", "k4"):
            for metric in ("sup", "r2"):
                assert np.isfinite(lookup(r["metrics"], row["network"], side, metric)), side
        probe = row["probe_r2"]
        if student == "transformer":
            assert [name for name, _ in probe] == ["encoding", "block1", "final_norm"]
        else:
            assert probe is None
        assert f"sgd {student}" in sgd.format_report(r)


def test_extra_sides_are_k_plus_one_to_k_plus_extra_within_m():
    args = sgd.parse_args([*FAST])
    assert sgd.extra_sides(args) == [3, 4]
    assert sgd.extra_sides(sgd.parse_args([*FAST, "--M", "3"])) == [3]
    assert sgd.extra_sides(sgd.parse_args([*FAST, "--extra-modules", "0"])) == []
    assert sgd.extra_sides(sgd.parse_args([*FAST, "--extra-modules", "5", "--M", "9"])) == [3, 4, 5, 6, 7]


def test_tasks_beyond_k_have_exactly_k_distinct_modules_drawn_uniformly():
    from verify.learning.metrics import random_supports

    rng = np.random.default_rng(0)
    rows = random_supports(6, 4, 30_000, rng)
    assert rows.shape == (30_000, 4)
    assert all(len(set(r)) == 4 for r in rows[:500]) and (np.diff(rows, axis=1) > 0).all()
    # Each module is in a support with probability 4/6; 3 sd of a binomial frequency ≈ 0.008.
    freq = np.bincount(rows.ravel(), minlength=6) / len(rows)
    assert np.abs(freq - 4 / 6).max() < 0.01


def test_evaluation_tasks_are_drawn_uniformly_with_replacement_from_their_side(teacher):
    from verify.learning.metrics import sample_eval_tasks

    supports = enumerate_supports(5, 2)[[0, 10]]  # {0} and {1, 3}
    tasks = sample_eval_tasks(teacher, supports, 4000, 16, np.random.default_rng(1))
    assert tasks.x.shape == (4000, 16, teacher.I)
    active = (tasks.z != 0).numpy()
    first = active[:, 0] & ~active[:, 1:].any(1)
    second = active[:, 1] & active[:, 3] & ~active[:, [0, 2, 4]].any(1)
    assert (first | second).all()
    assert abs(first.mean() - 0.5) < 0.03  # 3 sd of a fair coin's frequency over 4,000 draws ≈ 0.024


def test_training_decays_only_matrices_and_starts_from_lecun_normal(teacher, monkeypatch):
    """The paper's mask (run.py: decay where ndim != 1): biases are not decayed; with
    decay='all' they are. The default MLP starts with zero biases (Flax's init)."""
    from verify.learning.train import mlp

    seen = []
    real = torch.optim.AdamW

    def spy(groups, **kw):
        seen.append([(g["weight_decay"], [p.ndim for p in g["params"]]) for g in groups])
        return real(groups, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    supports = enumerate_supports(5, 2)
    for decay in ("matrices", "all"):
        cfg = TrainConfig(steps=2, tasks_per_batch=4, samples_per_task=2, weight_decay=0.5, decay=decay)
        train_mlp(teacher, teacher.encode, supports, [8], cfg, progress=False)
    assert seen[0] == [(0.5, [2, 2]), (0.0, [1, 1])]
    assert seen[1] == [(0.5, [2, 1, 2, 1])]
    paper, torch_default = mlp(8, [64], 2), mlp(8, [64], 2, init="torch_default")
    assert not paper[0].bias.any() and torch_default[0].bias.any()
    assert float(paper[0].weight.detach().abs().max()) <= 2 * (1 / 8) ** 0.5 / 0.87962566103423978 + 1e-7


def test_several_seeds_run_in_turn_and_add_a_summary(capsys, tmp_path):
    # A seed given twice is a usage error (it ran once without a word), before any work.
    assert sgd.main([*FAST, "--shapes", "matched", "--seed", "0", "1", "0", "--save", str(tmp_path)]) == 2
    assert "argument --seed: 0 is given twice" in capsys.readouterr().err and not any(tmp_path.iterdir())
    assert sgd.main([*FAST, "--shapes", "matched", "--seed", "0", "1", "--json",
                     "--save", str(tmp_path)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [run["task"]["seed"] for run in r["runs"]] == [0, 1]
    held = [lookup(run["metrics"], "sgd matched", "held_out", "r2") for run in r["runs"]]
    s = r["summary"][1]
    assert s["network"] == "sgd matched" and s["metric"] == "r2"
    assert s["sides"]["held_out"]["mean"] == pytest.approx(np.mean(held))
    assert s["sides"]["held_out"]["sd"] == pytest.approx(np.std(held, ddof=1))
    assert sorted(files_under(tmp_path)) == ["seed0/report.json", "seed0/sgd_matched.pt", "seed1/report.json",
                                             "seed1/sgd_matched.pt", "summary.json"]


def test_a_run_resumed_from_its_checkpoint_ends_as_an_uninterrupted_one(teacher, tmp_path, monkeypatch):
    """Training is stopped during step 8 of 12 (the checkpoint every 3 steps holds step 6),
    then started again from a different init: same parameters, same loss curve, bit for
    bit. The fewshot encoder's own random stream is part of the checkpoint too."""
    from constructions.tasks.encodings import make_encoder
    from verify.learning import train

    supports = enumerate_supports(5, 2)
    cfg = TrainConfig(steps=12, tasks_per_batch=4, samples_per_task=3)
    real = train.apply_tasks
    for name in ("identity", "fewshot"):
        whole = train_mlp(teacher, make_encoder(name, teacher, seed=1), supports, [8], cfg, progress=False)
        ckpt = tmp_path / f"{name}.ckpt"
        calls = []

        def stop_at_eight(*a, calls=calls):
            calls.append(1)
            if len(calls) == 8:
                raise KeyboardInterrupt
            return real(*a)

        def student(seed, name=name):
            torch.manual_seed(seed)
            return train.mlp(make_encoder(name, teacher, seed=1).dim + teacher.I, [8], teacher.O)

        def resume(init_seed, name=name, ckpt=ckpt):
            family = HyperteacherFamily(teacher, make_encoder(name, teacher, seed=1), name)
            return train.train_student(family, supports, student(init_seed), cfg, progress=False,
                                       checkpoint=ckpt, checkpoint_seconds=3)

        # A wall clock that ticks 1 s a reading: the loop reads it once a step, and once more
        # after a save, so the saves fall after steps 3 and 6.
        ticks = iter(range(10**6))
        monkeypatch.setattr(train, "_clock", lambda ticks=ticks: next(ticks))
        monkeypatch.setattr(train, "apply_tasks", stop_at_eight)
        with pytest.raises(KeyboardInterrupt):
            resume(cfg.seed)
        monkeypatch.setattr(train, "apply_tasks", real)
        assert torch.load(ckpt, weights_only=False)["step"] == 6
        resumed = resume(123)
        assert resumed.losses == whole.losses, name
        for a, b in zip(resumed.net.parameters(), whole.net.parameters(), strict=True):
            assert torch.equal(a, b), name
    # A checkpoint of another run is refused, not silently resumed.
    other = TrainConfig(steps=12, tasks_per_batch=5, samples_per_task=3)
    with pytest.raises(train.CheckpointMismatch):
        net = train.mlp(teacher.M + teacher.I, [8], teacher.O)
        train.train_student(HyperteacherFamily(teacher, teacher.encode, "identity"), supports, net, other,
                            progress=False, checkpoint=tmp_path / "identity.ckpt")


def test_a_second_run_on_the_same_checkpoints_trains_nothing_and_reports_the_same(tmp_path, monkeypatch):
    first = sgd.run(sgd.parse_args([*FAST, "--shapes", "matched", "--checkpoint", str(tmp_path)]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed0_matched.ckpt"]
    import verify.learning.train as train

    monkeypatch.setattr(train, "apply_tasks", lambda *a: pytest.fail("trained again"))
    again = sgd.run(sgd.parse_args([*FAST, "--shapes", "matched", "--checkpoint", str(tmp_path)]))
    assert again["metrics"] == first["metrics"]
    assert again["rows"][1]["final_loss"] == first["rows"][1]["final_loss"]


@pytest.mark.parametrize("weights", ["khot", "discrete", "continuous"])
def test_training_batches_are_the_teachers_tasks_on_the_training_supports(weights):
    """The hyperteacher's batches are drawn, in torch on the training device, as the family
    defines them: supports
    uniformly from the training ones (module 0 beside padding included), weights from the
    family's levels or range, x on the box, and the teacher's own outputs as targets."""
    from verify.learning.families import HyperteacherBatches

    t = sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5, K=3, weights=weights, seed=1))
    supports = enumerate_supports(5, 3)[[0, 5, 15]]  # {0}, {0, 1}, {0, 1, 2}
    make = HyperteacherBatches(t, t.encode, supports, 3000, 4, seed=2, device=torch.device("cpu"))
    batch = make()
    e, x, target = batch.e, batch.x, batch.y
    assert batch.mask is None
    z = e.double()  # identity encoding: e is z
    active = z != 0
    assert active[:, 0].all() and not active[:, 3:].any()
    sizes = active.sum(1)
    assert set(sizes.tolist()) == {1, 2, 3} and all(abs((sizes == k).double().mean() - 1 / 3) < 0.04
                                                     for k in (1, 2, 3))
    values = z[active]
    if weights == "khot":
        assert (values == 1).all()
    elif weights == "discrete":
        assert set(torch.round(values * 10).tolist()) == {5.0, 6.0, 7.0, 8.0, 9.0, 10.0}
    else:
        assert values.min() >= 0.5 and values.max() <= 1.0 and len(torch.unique(values)) > 1000
    assert x.abs().max() <= 1 and x.shape == (3000, 4, 3)
    want = t.forward(z.repeat_interleave(4, dim=0), x.double().reshape(-1, 3)).view(3000, 4, 2)
    torch.testing.assert_close(target.double(), want, rtol=1e-6, atol=1e-6)
