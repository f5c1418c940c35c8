"""Issue 45: the kernel limit along tasks (python -m verify.kernel --max-tasks), what a ladder
says of the limit (verify.learning.kernel_ladder: settled, or extrapolated with an interval),
the predictor's blocked scoring and the solve's BLAS threads."""

import numpy as np
import pytest
import torch

from verify.learning import kernel_ladder, kernel_limit, kernel_vs_sgd
from verify.learning.kernel_limit import KernelConfig

SMALL = [
    "--M",
    "5",
    "--K",
    "2",
    "--I",
    "2",
    "--H",
    "2",
    "--O",
    "2",
    "--eval-tasks",
    "16",
    "--eval-samples",
    "4",
    "--no-progress",
    "--seed",
    "3",
    "--method",
    "ntk",
]


def _ladder(monkeypatch, *argv):
    """fit_task_ladder on a small run, with the rows each rung's fit was given."""
    run = kernel_vs_sgd.parse_args([*SMALL, *argv])
    family, split = kernel_vs_sgd._family_and_split(run)
    sides = kernel_vs_sgd._sides(run, family, split)
    given, original, original_nested = [], kernel_limit.fit, kernel_limit.nested_fits

    def spy(cfg, x, y):
        given.append((cfg.tasks, x.clone()))
        return original(cfg, x, y)

    def spy_nested(cfg, x, y, tasks):  # each rung is fitted on the first t · samples_per_task rows
        given.extend((t, x[:t * cfg.samples_per_task].clone()) for t in tasks)
        return original_nested(cfg, x, y, tasks)

    monkeypatch.setattr(kernel_limit, "fit", spy)
    monkeypatch.setattr(kernel_limit, "nested_fits", spy_nested)
    _, record = kernel_vs_sgd.fit_kernel(run, family, split, sides, False)
    return run, family, split, record, given


# ----------------------------------------------------------------------------- the ladder along tasks


def test_the_task_ladder_is_nested_and_counts_the_supports_it_covers(monkeypatch):
    run, family, split, record, given = _ladder(
        monkeypatch, "--tasks", "2", "--max-tasks", "24", "--samples-per-task", "3"
    )
    rungs = record["task_ladder"]
    assert [s["tasks"] for s in rungs] == [2, 4, 8, 16, 24] == [t for t, _ in given]
    assert [s["rows"] for s in rungs] == [6, 12, 24, 48, 72]
    # Nested: every rung's rows are rows of the rung above (as sets of rows, not by slicing).
    for (_, low), (_, high) in zip(given, given[1:], strict=False):
        assert {tuple(r) for r in low.tolist()} <= {tuple(r) for r in high.tolist()}
    # The supports covered, counted from the rows themselves: identity encoding, so e(z) = z and
    # a task's support is where its z is non-zero (the discrete weights are ≥ 0.5).
    for s, (_, x) in zip(rungs, given, strict=True):
        z = x[:, : family.M].numpy()
        assert s["supports_covered"] == len({tuple(np.flatnonzero(row)) for row in z})
        assert s["training_supports"] == len(split.train)
    assert rungs[-1]["supports_covered"] > rungs[0]["supports_covered"]
    # The top rung is the fit of --tasks 24: the same draw as training_rows.
    x_top, _ = kernel_limit.training_rows(
        family, split.train, KernelConfig(tasks=24, samples_per_task=3), run.seed
    )
    assert torch.equal(given[-1][1], x_top)
    for s in rungs:
        assert {
            "held_out_r2",
            "in_distribution_r2",
            "seconds_kernel",
            "seconds_solve",
            "solve_bytes",
            "peak_rss_bytes",
        } <= set(s)
        assert s["solve_bytes"] == kernel_limit.solve_bytes(s["rows"], run.depth) and s["peak_rss_bytes"] > 0
    assert record["fit"] == rungs[-1] and record["ladder"] is None


def test_the_task_ladder_settles_or_extrapolates_and_says_which(monkeypatch):
    monkeypatch.setattr(kernel_vs_sgd, "LADDER_TOLERANCE", 10.0)  # any last doubling counts as settled
    *_, settled, _ = _ladder(monkeypatch, "--tasks", "2", "--max-tasks", "16", "--samples-per-task", "2")
    assert settled["limit"]["kind"] == "settled"
    assert settled["limit"]["value"] == settled["task_ladder"][-1]["held_out_r2"]
    monkeypatch.setattr(kernel_vs_sgd, "LADDER_TOLERANCE", 0.0)  # nothing settles: extrapolate
    *_, moving, _ = _ladder(monkeypatch, "--tasks", "2", "--max-tasks", "16", "--samples-per-task", "2")
    limit = moving["limit"]
    assert limit["kind"] == "extrapolated" and limit["fit"]["rungs"] == 4
    lo, hi = limit["fit"]["interval"]
    assert lo <= limit["value"] <= hi <= 1.0
    text = "\n".join(kernel_vs_sgd.format_task_ladder(moving))
    assert "EXTRAPOLATED" in text and "profile likelihood" in text
    assert "SETTLED" in "\n".join(kernel_vs_sgd.format_task_ladder(settled))


def test_the_rungs_double_from_tasks_and_end_at_max_tasks():
    def rungs(*argv):
        return kernel_vs_sgd.task_ladder(kernel_vs_sgd.parse_args([*SMALL, *argv]))

    assert rungs("--tasks", "256", "--max-tasks", "2048") == [256, 512, 1024, 2048]
    assert rungs("--tasks", "3", "--max-tasks", "20") == [3, 6, 12, 20]
    assert rungs("--tasks", "8", "--max-tasks", "8") == [8]


def test_rungs_per_doubling_puts_rungs_between_the_doublings():
    def rungs(*argv):
        return kernel_vs_sgd.task_ladder(kernel_vs_sgd.parse_args([*SMALL, *argv]))

    assert rungs("--tasks", "256", "--max-tasks", "2048", "--rungs-per-doubling", "2") == [
        256, 362, 512, 724, 1024, 1448, 2048]
    assert rungs("--tasks", "3", "--max-tasks", "20", "--rungs-per-doubling", "2") == [3, 4, 6, 8, 12, 17, 20]
    # A few tasks: 2·2^(1/3) and 2·2^(2/3) both round to 3, which is one rung.
    assert rungs("--tasks", "2", "--max-tasks", "8", "--rungs-per-doubling", "3") == [2, 3, 4, 5, 6, 8]
    doubling = [256, 512, 1024, 2048]
    assert rungs("--tasks", "256", "--max-tasks", "2048", "--rungs-per-doubling", "1") == doubling


def test_rungs_per_doubling_keys_only_when_it_is_not_1():
    base = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--max-tasks", "1024"]))
    one = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--max-tasks", "1024",
                                                             "--rungs-per-doubling", "1"]))
    two = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--max-tasks", "1024",
                                                             "--rungs-per-doubling", "2"]))
    assert base == one and "rungs_per_doubling" not in base and two == base | {"rungs_per_doubling": 2}


def test_a_ladders_last_doubling_spans_its_rungs_per_doubling():
    r2 = [0.80, 0.85, 0.90, 0.9045, 0.908]  # the last rung moved 0.0035, the last doubling 0.008
    n = [1, 1.41, 2, 2.83, 4]
    assert kernel_ladder.limit_of(n, r2, 0.005)["kind"] == "settled"
    two = kernel_ladder.limit_of(n, r2, 0.005, per_doubling=2)
    assert two["kind"] == "extrapolated" and two["last_change"] == pytest.approx(0.008)
    assert kernel_ladder.last_change([0.5], 1) is None and kernel_ladder.last_change([0.5, 0.6], 2) is None


def test_every_rung_scored_in_one_pass_equals_each_rung_scored_alone():
    """RungPredictor: each rung's outputs are its own predictor's (to rounding), and its α must fit."""
    cfg = KernelConfig(tasks=8, samples_per_task=4)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 5, generator=gen, dtype=torch.float64), torch.randn(40, 2, generator=gen,
                                                                               dtype=torch.float64)
    points = torch.randn(30, 5, generator=gen, dtype=torch.float64)
    fits = [kernel_limit.fit(cfg, x[:n], y[:n]).predictor for n in (10, 20, 40)]
    every = kernel_limit.RungPredictor(cfg, x, [f.alpha for f in fits])
    out = every(points)
    assert out.shape == (30, 6)
    for f, part in zip(fits, every.parts, strict=True):
        assert torch.allclose(out[:, part], f(points), rtol=0, atol=1e-10 * float(f(points).abs().max()))
    # A rung's α in the wrong column would be another rung's predictions: caught above; and one
    # larger than the rows, or of other outputs, is refused.
    with pytest.raises(ValueError):
        kernel_limit.RungPredictor(cfg, x[:20], [f.alpha for f in fits])
    with pytest.raises(ValueError):
        kernel_limit.RungPredictor(cfg, x, [fits[0].alpha, fits[1].alpha[:, :1]])


def test_the_ladders_rung_r2_are_each_rungs_own_predictors(monkeypatch):
    """fit_task_ladder scores its rungs in one pass: the same R² as each rung's fit scored alone."""
    run, family, split, record, _ = _ladder(monkeypatch, "--tasks", "2", "--max-tasks", "16",
                                            "--samples-per-task", "3", "--rungs-per-doubling", "2")
    sides = kernel_vs_sgd._sides(run, family, split)
    top = KernelConfig(tasks=16, samples_per_task=3)
    x, y, _ = kernel_limit.nested_training_rows(family, split.train, top, run.seed)
    rungs = record["task_ladder"]
    assert [s["tasks"] for s in rungs] == [2, 3, 4, 6, 8, 11, 16]
    # Its last doubling is 8 → 16 tasks, two rungs back.
    assert record["limit"]["last_change"] == rungs[-1]["held_out_r2"] - rungs[-3]["held_out_r2"]
    # Every rung is fitted from the top rung's factor (nested_fits), with its one λ: the top's.
    assert all(s["shared_factor"] and s["jitter_absolute"] == rungs[-1]["jitter_absolute"] for s in rungs)
    for s in rungs:
        # The rung's own fit at that λ (fit's λ is jitter × the mean diagonal of the K it solves).
        diagonal = float(kernel_limit.gram_diagonal(KernelConfig(), x[:s["rows"]]).mean())
        cfg = KernelConfig(tasks=s["tasks"], samples_per_task=3, jitter=s["jitter_absolute"] / diagonal)
        alone = kernel_limit.fit(cfg, x[:s["rows"]], y[:s["rows"]]).predictor
        assert s["held_out_r2"] == pytest.approx(kernel_vs_sgd._held_out_r2(family, alone, sides), abs=1e-12)
        assert s["in_distribution_r2"] == pytest.approx(
            kernel_vs_sgd._held_out_r2(family, alone, sides, "train"), abs=1e-12)


def test_a_key_without_max_tasks_is_the_key_it_was():
    key = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--ladder"]))
    assert "max_tasks" not in key and key["ladder"] is True
    with_it = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--max-tasks", "1024"]))
    assert with_it["max_tasks"] == 1024


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--tasks", "16", "--max-tasks", "100000", "--samples-per-task", "1000"],
            "--max-tasks × --samples-per-task = 100,000,000 rows: the kernel solve needs",
        ),
        (["--tasks", "64", "--max-tasks", "32"], "--max-tasks must be at least --tasks"),
        (["--ladder", "--max-tasks", "1024"], "one ladder a run"),
        (["--method", "trained", "--max-tasks", "1024"], "--max-tasks does not apply to --method trained"),
        (["--rungs-per-doubling", "2"], "--rungs-per-doubling sets the rungs of a ladder along tasks: give "
                                        "--max-tasks"),
        (["--max-tasks", "64", "--rungs-per-doubling", "0"], "--rungs-per-doubling"),
    ],
)
def test_a_ladder_it_cannot_run_gets_one_line_and_exit_2_before_any_work(argv, message, capsys, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("work began")

    monkeypatch.setattr(kernel_vs_sgd, "_family_and_split", no_work)
    monkeypatch.setattr(kernel_limit, "gram", no_work)
    assert kernel_vs_sgd.main([*SMALL, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_memory_refusal_counts_the_largest_rung_against_the_memory_available(monkeypatch):
    """32,768 rows at depth 4 need 8 GiB for K and 3 GiB of blocks: refused where 10 GiB are
    available, and the rung below (16,384 rows) is not."""
    monkeypatch.setattr(kernel_vs_sgd, "available_bytes", lambda: 10 * 2**30)
    need = kernel_limit.solve_bytes(32_768, 4)
    assert need == 8 * 32_768**2 + 8 * 12 * 1024 * 32_768
    with pytest.raises(kernel_vs_sgd.UsageError, match="--max-tasks × --samples-per-task = 32,768 rows"):
        kernel_vs_sgd.parse_args(
            [*SMALL, "--tasks", "256", "--max-tasks", "2048", "--samples-per-task", "16"]
        )
    kernel_vs_sgd.parse_args([*SMALL, "--tasks", "256", "--max-tasks", "1024", "--samples-per-task", "16"])


# ----------------------------------------------------------------------------- settled or extrapolated

N = 256 * 2.0 ** np.arange(6)


def test_the_settle_rule_reads_the_last_doubling_only():
    assert kernel_ladder.is_settled([0.2, 0.8, 0.803], 0.005)
    assert not kernel_ladder.is_settled([0.8, 0.801, 0.81], 0.005)
    assert not kernel_ladder.is_settled([0.8], 0.005)
    limit = kernel_ladder.limit_of([1, 2, 4], [0.2, 0.8, 0.803], 0.005)
    assert limit["kind"] == "settled" and limit["value"] == 0.803
    assert kernel_ladder.limit_of([1, 2], [0.2, 0.8], 0.005)["kind"] == "unresolved"


@pytest.mark.parametrize("r_inf, b", [(0.9, 0.7), (0.97, 0.4)])
def test_a_planted_asymptote_is_inside_the_interval_and_a_wrong_one_outside(r_inf, b):
    rng = np.random.default_rng(1)
    r2 = r_inf - 0.6 * (N / N[0]) ** -b + rng.normal(0, 1e-3, len(N))
    limit = kernel_ladder.limit_of(N, r2, 0.005)
    assert limit["kind"] == "extrapolated"
    fit = limit["fit"]
    lo, hi = fit["interval"]
    assert lo < r_inf < hi and not fit["upper_at_bound"]
    assert abs(fit["b"] - b) < 0.15
    # A wrong constant is caught: 0.02 off the planted asymptote is outside the interval.
    assert not lo < r_inf - 0.02 < hi and not lo < r_inf + 0.02 < hi


def test_a_curve_that_does_not_bend_gets_no_upper_end():
    """R² linear in log n (no ceiling below 1, the wrong model for a saturating fit): the
    profile reaches the bound R² = 1, which the record says, rather than a made-up asymptote."""
    r2 = 0.3 + 0.08 * np.log2(N / N[0]) + np.random.default_rng(2).normal(0, 1e-3, len(N))
    fit = kernel_ladder.limit_of(N, r2, 0.005)["fit"]
    assert fit["upper_at_bound"] and fit["interval"][1] == 1.0


def test_three_rungs_fit_three_parameters_with_no_interval():
    fit = kernel_ladder.saturating_fit(N[:3], 0.9 - 0.5 * (N[:3] / N[0]) ** -0.5)
    assert fit["interval"] is None and fit["residual_dof"] == 0
    assert fit["r_inf"] == pytest.approx(0.9, abs=1e-4)


# ----------------------------------------------------------------------------- scoring in proportion


def _fitted(n=100, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randn(n, 3, generator=g, dtype=torch.float64)
    cfg = KernelConfig(kernel="ntk", depth=3, jitter=1e-8, tasks=n, samples_per_task=1)
    return cfg, kernel_limit.fit(cfg, x, y).predictor


def test_the_blocked_predictor_is_the_unblocked_product_and_so_is_its_gradient(monkeypatch):
    """Blocks of 16 rows × 16 training rows (7 blocks of X for n = 100): the values and the
    gradient in the query rows (through the checkpointed blocks) equal K(x*, X) α made whole,
    to float64 rounding; peak: no block holds more than 16 × 16 kernel entries."""
    cfg, predictor = _fitted()
    x_new = torch.randn(37, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    whole = x_new.clone().requires_grad_(True)
    expected = cfg.kernel_of(whole, predictor.x_train) @ predictor.alpha
    expected.pow(2).sum().backward()
    shapes = []
    original = cfg.kernel_of

    def spy(self, a, b):
        shapes.append((len(a), len(b)))
        return original(a, b)

    monkeypatch.setattr(kernel_limit, "BLOCK_ROWS", 16)
    monkeypatch.setattr(KernelConfig, "kernel_of", spy)
    blocked = x_new.clone().requires_grad_(True)
    got = predictor(blocked)
    got.pow(2).sum().backward()
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-13)
    assert torch.allclose(blocked.grad, whole.grad, rtol=1e-11, atol=1e-12)
    assert max(a * b for a, b in shapes) <= 16 * 16 and len(shapes) > 3 * 7
    with torch.no_grad():
        assert torch.allclose(predictor(x_new), expected.detach(), rtol=1e-12, atol=1e-13)


def test_the_search_is_cut_so_that_scoring_costs_no_more_than_the_fit():
    from verify.theorem.presets import SGD_MEASURE

    sides = [522, 174]  # the cpu scale's training and held-out supports
    # 4,096 rows: the full search costs more than the fit; cut, its estimate is within the fit.
    budget, fraction, full, cut, fit_entries = kernel_limit.search_budget(SGD_MEASURE, 4096, sides, 4, 10**5)
    assert fraction < 1 and full > fit_entries >= cut
    assert budget.max_tasks < SGD_MEASURE.max_tasks and budget.line_evaluations == 0
    assert cut == 4096 * sum(sum(kernel_limit.search_rows(budget, s, 4, 10**5)) for s in sides)
    # 64 rows: the least search (one task, one ascent step) still costs more, which is said.
    *_, cut, fit_entries = kernel_limit.search_budget(SGD_MEASURE, 64, sides, 4, 10**3)
    assert cut > fit_entries
    # 65,536 rows: the full search already costs less than the fit, and keeps its budget.
    budget, fraction, full, cut, fit_entries = kernel_limit.search_budget(
        SGD_MEASURE, 65_536, sides, 4, 10**6
    )
    assert budget == SGD_MEASURE and fraction == 1.0 and full == cut <= fit_entries


def test_the_search_estimate_bounds_what_the_search_evaluates():
    """search_rows against the evaluations the real search counts, stage by stage, on a kernel
    predictor of the hyperteacher (the ascent's rows at GRAD_ROW_COST)."""
    from verify.learning.metrics import sup_error
    from verify.theorem.measure import numbers_read
    from verify.theorem.presets import TEST_MEASURE

    run = kernel_vs_sgd.parse_args([*SMALL, "--tasks", "16", "--samples-per-task", "4"])
    family, split = kernel_vs_sgd._family_and_split(run)
    x, y = kernel_limit.training_rows(family, split.train, kernel_vs_sgd._kernel_config(run, 4), run.seed)
    predictor = kernel_limit.fit(kernel_vs_sgd._kernel_config(run, 4), x, y).predictor
    budget = TEST_MEASURE.scaled(0.25)
    est = sup_error(predictor, family.teacher, family.encode, split.test, 4, run.seed, budget, refine_z=False)
    by = est.evaluations_by_stage
    weighted = sum(by.values()) + (kernel_limit.GRAD_ROW_COST - 1) * by.get("ascent", 0)
    bound = sum(
        kernel_limit.search_rows(budget, len(split.test), family.I, numbers_read(predictor, family.teacher))
    )
    assert weighted <= bound


def test_a_kernel_run_states_its_search():
    argv = [*SMALL, "--tasks", "8", "--samples-per-task", "2"]
    report = kernel_vs_sgd.run(kernel_vs_sgd.parse_args([*argv, "--sup-search", "in_proportion"]))
    search = report["record"]["sup_search"]
    assert 0 < search["fraction"] < 1 and search["max_tasks"] >= 1 and search["line_evaluations"] == 0
    assert "of the full one" in kernel_vs_sgd.format_report(report)
    # Unset, the search is the full one a stored run's key names (its scores are not replayed).
    full = kernel_vs_sgd.run(kernel_vs_sgd.parse_args(argv))
    assert "sup_search" not in full["record"] and "of the full one" not in kernel_vs_sgd.format_report(full)


def test_the_search_is_full_unless_asked_or_climbing_a_ladder_along_tasks():
    def cut(*argv):
        return kernel_vs_sgd.search_in_proportion(kernel_vs_sgd.parse_args([*SMALL, *argv]))

    assert not cut() and not cut("--ladder") and not cut("--sup-search", "full", "--max-tasks", "1024")
    assert cut("--sup-search", "in_proportion") and cut("--max-tasks", "1024")
    key = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args(SMALL))
    assert "sup_search" not in key  # the committed runs' keys are unchanged
    asked = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--sup-search", "in_proportion"]))
    assert asked["sup_search"] == "in_proportion"


# ----------------------------------------------------------------------------- BLAS threads


def test_the_solve_runs_on_the_runs_threads_and_never_openblas_on_two_at_scale(monkeypatch):
    from threadpoolctl import threadpool_info

    assert kernel_limit.solve_threads(1, 32_768, openblas=True) == 1
    assert kernel_limit.solve_threads(2, 32_768, openblas=True) == 1  # OpenBLAS issue 2562
    assert kernel_limit.solve_threads(2, 32_768, openblas=False) == 2
    assert kernel_limit.solve_threads(2, 1_000, openblas=True) == 2
    assert kernel_limit.solve_threads(4, 32_768, openblas=True) == 4
    seen = []
    import scipy.linalg

    original = scipy.linalg.cho_factor

    def spy(*a, **k):
        seen.append({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})
        return original(*a, **k)

    monkeypatch.setattr(scipy.linalg, "cho_factor", spy)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    _fitted(40)
    assert seen == [{1}]


def test_a_study_lists_a_run_needing_more_memory_than_is_free_and_refuses_it_where_it_runs(
        monkeypatch, tmp_path):
    """The grid's expansion (what `list`, `report` and `budget` read) does not hang on the memory
    free now; the run itself is refused, in one line, where it executes, before any work."""
    from verify.cli import RunPlace

    monkeypatch.setattr(kernel_vs_sgd, "available_bytes", lambda: 10 * 2**30)
    params = dict(method="ntk", M=4, K=2, I=2, H=2, O=2, tasks=256, max_tasks=2048, samples_per_task=16)
    run = kernel_vs_sgd.config_of(params)  # 32,768 rows: 11 GiB, more than 80% of 10 GiB
    assert run.max_tasks == 2048
    place = RunPlace(run_dir=str(tmp_path / "run"), device="cpu")
    with pytest.raises(kernel_vs_sgd.UsageError, match="32,768 rows"):
        kernel_vs_sgd.from_key(run.key(), place)
    assert not (tmp_path / "run").exists()


def test_the_benchmarks_ladder_scoring_row_scores_the_same_rungs_both_ways():
    """verify.bench's ladder row, small: the same R² from one pass as from a pass a rung."""
    from verify.bench import ladder_scoring

    got = ladder_scoring(top_tasks=16, first_tasks=4, rungs_per_doubling=2, eval_tasks=16)
    assert got["rungs"] == [4, 6, 8, 11, 16] and got["eval_rows"] == 16 * 16
    assert got["max_r2_difference"] < 1e-12 and got["seconds_each"] > 0 and got["seconds_together"] > 0


# ----------------------------------------------------------------------------- nested fits from one factor

original_fit = kernel_limit.fit  # the tests below replace kernel_limit.fit's spies, never this


@pytest.mark.parametrize("n, block", [(23, 5), (20, 5), (4, 8), (1, 3)])
def test_the_blocked_back_substitution_solves_the_leading_block_and_reads_only_the_upper_triangle(n, block):
    gen = torch.Generator().manual_seed(n)
    u = torch.randn(30, 30, generator=gen, dtype=torch.float64)
    u.diagonal().add_(8.0)
    w = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    junk = u.clone()
    junk.tril_(-1).mul_(1e6)  # what the lower triangle holds is never read
    alpha = kernel_limit.upper_solve(u.triu() + junk, w, n, block=block)
    expected = torch.linalg.solve_triangular(u[:n, :n].triu(), w[:n], upper=True)
    assert alpha.shape == (n, 3)
    assert torch.allclose(alpha, expected, rtol=1e-12, atol=1e-14)


def test_nested_fits_are_each_rungs_own_fit_at_the_top_rungs_lambda_from_one_gram(monkeypatch):
    cfg = KernelConfig(tasks=10, samples_per_task=4)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 5, generator=gen, dtype=torch.float64)
    x[:8] *= 3.0  # the lower rungs' rows are longer: their own mean diagonal is not the top's
    y = torch.randn(40, 2, generator=gen, dtype=torch.float64)
    grams, original = [], kernel_limit.gram
    monkeypatch.setattr(kernel_limit, "gram", lambda c, rows: grams.append(len(rows)) or original(c, rows))
    fits = kernel_limit.nested_fits(cfg, x, y, [2, 5, 10])
    assert grams == [40]  # one Gram, of the top rung's rows
    top_lambda = fits[-1].jitter_absolute
    diagonal = float(kernel_limit.gram_diagonal(cfg, x).mean())
    assert top_lambda == pytest.approx(cfg.jitter * diagonal, rel=1e-14)
    for f, tasks in zip(fits, [2, 5, 10], strict=True):
        n = tasks * 4
        assert f.jitter_absolute == top_lambda and f.predictor.cfg.tasks == tasks
        assert len(f.predictor.x_train) == n
        diagonal = float(kernel_limit.gram_diagonal(cfg, x[:n]).mean())
        alone = original_fit(KernelConfig(tasks=tasks, samples_per_task=4, jitter=top_lambda / diagonal),
                             x[:n], y[:n])
        scale = float(alone.predictor.alpha.abs().max())
        assert torch.allclose(f.predictor.alpha, alone.predictor.alpha, rtol=0, atol=1e-9 * scale)
        assert f.train_rmse == pytest.approx(alone.train_rmse, rel=1e-6)
    # The lower rungs' own λ would differ (their rows are longer), so the shared λ is a choice
    # the ladder states (shared_factor), not a no-op: a rung's fit at its own λ moves its α.
    own = original_fit(KernelConfig(tasks=2, samples_per_task=4, jitter=1e-3), x[:8], y[:8])
    wide = KernelConfig(tasks=10, samples_per_task=4, jitter=1e-3)
    shared = kernel_limit.nested_fits(wide, x, y, [2, 10])[0]
    assert not torch.allclose(own.predictor.alpha, shared.predictor.alpha, rtol=1e-6)


@pytest.mark.parametrize("tasks", [[], [5, 2, 10], [2, 5], [0, 10], [2, 2, 10]])
def test_nested_fits_refuse_rungs_that_do_not_rise_to_the_rows(tasks):
    x = torch.randn(40, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="tasks must increase"):
        kernel_limit.nested_fits(KernelConfig(tasks=10, samples_per_task=4), x, x[:, :2], tasks)


def test_nested_fits_refuse_a_top_rung_that_cg_would_solve():
    x = torch.randn(40, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="cg"):
        cfg = KernelConfig(tasks=10, samples_per_task=4, solver="cg")
        kernel_limit.nested_fits(cfg, x, x[:, :2], [5, 10])


def test_the_benchmarks_ladder_fits_row_fits_the_same_rungs_both_ways():
    """verify.bench's ladder-fits row, small: the same α from one factor as from a factor a rung."""
    from verify.bench import ladder_fits

    got = ladder_fits(top_tasks=16, first_tasks=4, rungs_per_doubling=2)
    assert got["rungs"] == [4, 6, 8, 11, 16] and got["rows"] == 16 * 16
    assert got["max_alpha_difference"] < 1e-11 and got["seconds_each"] > 0 and got["seconds_shared"] > 0
