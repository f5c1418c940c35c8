"""The measurer's stages and their budgets: each stage spends what its budget says, a zero
budget skips that stage and no other, and `refine_steps=0` turns off the ascent only."""

import math
from dataclasses import replace

import pytest
import torch

from constructions import HyperteacherConfig, sample_hyperteacher
from tests.test_measure import TeacherPlus
from verify.theorem import measure
from verify.theorem.measure import BestPoint, measure_sup_error
from verify.theorem.presets import DEFAULT_LINE_EVALUATIONS, MeasureBudget

SMALL = MeasureBudget(points_per_task=4, refine_tasks=4, refine_starts=4, refine_steps=10, grid_points=33)
DELTA = 1e-3


def corner_bump(I: int = 2, M: int = 4, K: int = 2):
    """(teacher, f): f = g + δ(x0 − x1)²/4, whose error peaks at δ on the corners x0 = −x1 = ±1
    of every task, which random points rarely come near."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=I, H=3, O=2, M=M, K=K))
    return teacher, TeacherPlus(teacher, lambda z, x: DELTA * (x[:, 0] - x[:, 1]) ** 2 / 4)


def test_without_the_ascent_the_line_searches_still_run_and_find_the_corner():
    """Before, `refine_steps=0` skipped the line searches too, leaving the random stage's
    estimate (below δ)."""
    teacher, f = corner_bump(I=5)
    result = measure_sup_error(f, teacher, points_per_task=2, refine_steps=0)
    assert "ascent" not in result.evaluations_by_stage
    assert result.evaluations_by_stage["line search"] > 0
    assert result.found_by == "line search"
    assert result.by_stage["random"] < DELTA
    assert result.sup_error == pytest.approx(DELTA, rel=1e-9)


@pytest.mark.parametrize("off", [dict(refine_steps=0), dict(refine_starts=0), dict(line_evaluations=0),
                                 dict(grid_points=0)])
def test_a_zero_budget_skips_that_stage_only(off):
    teacher, f = corner_bump()  # I = 2: every stage runs
    result = measure_sup_error(f, teacher, budget=replace(SMALL, **off))
    skipped = {"refine_steps": "ascent", "refine_starts": "ascent", "line_evaluations": "line search",
               "grid_points": "grid"}[next(iter(off))]
    assert set(result.evaluations_by_stage) == {"random", "ascent", "line search", "grid"} - {skipped}
    assert all(n > 0 for n in result.evaluations_by_stage.values())
    assert sum(result.evaluations_by_stage.values()) == result.n_evaluations


def test_refine_tasks_zero_leaves_only_the_random_points_and_the_grid():
    teacher, f = corner_bump()
    result = measure_sup_error(f, teacher, budget=replace(SMALL, refine_tasks=0))
    assert set(result.evaluations_by_stage) == {"random", "grid"}


def test_the_random_ascent_and_grid_stages_spend_exactly_their_budgets():
    teacher, f = corner_bump(M=5, K=2)  # 5 + 10 = 15 tasks, all enumerated
    b = SMALL
    result = measure_sup_error(f, teacher, budget=b)
    spent = result.evaluations_by_stage
    assert result.n_tasks == 15
    assert spent["random"] == 15 * b.points_per_task
    assert spent["ascent"] == b.refine_tasks * b.refine_starts * (b.refine_steps + 1)
    # Every distinct z of the grid's candidates (at most GRID_TASKS + 1) on a 33 × 33 grid.
    assert spent["grid"] % 33**2 == 0 and 1 <= spent["grid"] // 33**2 <= measure.GRID_TASKS + 1


@pytest.mark.parametrize("line_evaluations", [20_000, 80_000])
def test_the_line_searches_spend_about_their_budget(line_evaluations):
    """Within the budget times LINE_BOOST's factor, up to what the pool's rounding adds: the
    first evaluation of each start in each round and the one start with every weight at 1."""
    teacher, f = corner_bump(I=3)
    result = measure_sup_error(f, teacher, budget=replace(SMALL, line_evaluations=line_evaluations))
    boost = min(measure.LINE_BOOST, measure.LINE_NUMBERS / measure.numbers_read(f, teacher))
    d = teacher.I + teacher.K
    allowed = line_evaluations * boost
    spent = result.evaluations_by_stage["line search"]
    pool = allowed / (d * measure.LINE_COST + measure.LINE_OVERSAMPLE)
    slack = 4 / 3 * pool + 1 + d * sum(measure.LINE_ROUNDS[0][1:])
    assert 0.5 * allowed <= spent <= allowed + slack


def test_the_line_searches_default_to_what_the_ascent_spent_or_the_default_ascent():
    teacher, f = corner_bump(I=3)
    short = measure_sup_error(f, teacher, budget=SMALL).evaluations_by_stage
    longer = measure_sup_error(f, teacher, budget=replace(SMALL, refine_steps=40)).evaluations_by_stage
    assert longer["line search"] > 2 * short["line search"]  # the ascent spent ~3.7× as much
    no_ascent = measure_sup_error(f, teacher, budget=replace(SMALL, refine_steps=0)).evaluations_by_stage
    as_given = measure_sup_error(f, teacher, budget=replace(SMALL, refine_steps=0,
                                                             line_evaluations=DEFAULT_LINE_EVALUATIONS))
    assert no_ascent["line search"] == as_given.evaluations_by_stage["line search"]


def test_keyword_fields_replace_the_budgets_own():
    teacher, f = corner_bump()
    by_kwargs = measure_sup_error(f, teacher, points_per_task=3, refine_steps=7, grid_points=17)
    by_budget = measure_sup_error(f, teacher, budget=MeasureBudget(points_per_task=3, refine_steps=7,
                                                                   grid_points=17))
    assert by_kwargs.sup_error == by_budget.sup_error
    assert by_kwargs.evaluations_by_stage == by_budget.evaluations_by_stage
    assert by_kwargs.settings["refine_steps"] == 7 and by_kwargs.settings["grid_points"] == 17
    with pytest.raises(TypeError):
        measure_sup_error(f, teacher, refine_stepz=7)


@pytest.mark.parametrize("bad", [dict(points_per_task=0), dict(max_tasks=0), dict(refine_steps=-1),
                                 dict(line_evaluations=-5), dict(grid_points=-1)])
def test_a_budget_that_cannot_measure_is_refused(bad):
    with pytest.raises(ValueError):
        MeasureBudget(**bad)


def test_the_tracker_keeps_the_first_of_equal_errors_and_each_stages_largest():
    best = BestPoint()
    x, z = torch.zeros(3, 2), torch.eye(3)
    best.offer(torch.tensor([0.1, 0.3, 0.2], dtype=torch.float64), x, z, "random")
    best.offer(torch.tensor([0.3, 0.05], dtype=torch.float64), x[:2] + 1, z[:2], "ascent")
    best.offer(torch.tensor([0.25], dtype=torch.float64), x[:1], z[:1], "line search")
    assert best.value == 0.3 and best.stage == "random" and best.z.tolist() == [0.0, 1.0, 0.0]
    # The ascent and the line searches report under one key, "refine", as reports always have.
    assert best.by_stage == {"random": 0.3, "refine": 0.3}
    best.count("grid", 5)
    best.count("grid", 2)
    assert best.n_evaluations == 7 and best.value > -math.inf
