"""Scoring in proportion to the run (issue 34 part 5): a short run's sequence student gets a
sup search cut in proportion to its training, which its report and its behaviour record
state; the default run's length and longer keep the full search, and an MLP always does."""

import pytest

from verify.learning import sgd_program as sgd
from verify.learning.families.hyperteacher import FULL_SEARCH_STEPS, HyperteacherFamily, search_fraction
from verify.learning.run_config import Runtime, SgdRun
from verify.theorem.presets import SGD_MEASURE, MeasureBudget

TINY_TRANSFORMER = dict(student="transformer", M=4, K=2, I=2, H=2, O=2, d_model=8, n_heads=2, n_layers=1,
                        d_ffw=16, samples_per_task=4, eval_samples=4, eval_tasks=16, extra_modules=0)


def test_a_budget_scales_its_random_stage_and_its_ascent_and_keeps_one_of_each():
    half = SGD_MEASURE.scaled(0.5)
    assert (half.max_tasks, half.refine_steps) == (SGD_MEASURE.max_tasks // 2, SGD_MEASURE.refine_steps // 2)
    assert (half.points_per_task, half.refine_tasks, half.refine_starts) == (
        SGD_MEASURE.points_per_task, SGD_MEASURE.refine_tasks, SGD_MEASURE.refine_starts)
    tiny = SGD_MEASURE.scaled(1e-6)
    assert (tiny.max_tasks, tiny.refine_steps) == (1, 1)
    assert SGD_MEASURE.scaled(1.0) is SGD_MEASURE
    off = MeasureBudget(refine_steps=0, line_evaluations=0).scaled(0.5)
    assert (off.refine_steps, off.line_evaluations) == (0, 0)  # a stage that is off stays off
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="fraction must be in"):
            SGD_MEASURE.scaled(bad)


def _student(run: SgdRun):
    family = HyperteacherFamily.from_run(run)
    (net, _), = sgd.build_students(run, family, []).values()
    return family, net


@pytest.mark.parametrize("steps", [20, 700])
def test_a_short_runs_sequence_student_gets_a_search_in_proportion(steps):
    family, net = _student(SgdRun.build({**TINY_TRANSFORMER, "steps": steps}))
    search = family.sup_search(net)
    assert search["fraction"] == pytest.approx(steps / FULL_SEARCH_STEPS)
    assert search["max_tasks"] == round(SGD_MEASURE.max_tasks * steps / FULL_SEARCH_STEPS)
    assert search["line_evaluations"] == 0  # no line search: one sweep of P·I coordinates is minutes


def test_the_default_length_and_longer_and_every_mlp_keep_the_full_search():
    for steps in (FULL_SEARCH_STEPS, 6000):
        family, net = _student(SgdRun.build({**TINY_TRANSFORMER, "steps": steps}))
        assert family.sup_search(net) is None and family.sequence_measure == SGD_MEASURE
    family, net = _student(SgdRun.build(dict(M=4, K=2, I=2, H=2, O=2, steps=20, shapes=["custom"],
                                             widths=[8])))
    assert family.sup_search(net) is None  # an MLP's search costs little: always the full one
    assert search_fraction(20) < 1


def test_the_report_and_the_behaviour_record_state_a_cut_search(capsys):
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in TINY_TRANSFORMER.items()] + ["--steps", "3", "--json"]
    run = sgd.parse_args(argv)
    report = sgd.run(run.replace(runtime=Runtime(no_progress=True)))
    row = next(r for r in report["rows"] if r["network"] == "sgd transformer")
    assert row["sup_search"]["fraction"] == pytest.approx(3 / FULL_SEARCH_STEPS)
    text = sgd.format_report(report)
    assert "sgd transformer: its sup error is searched with 0.2% of the full search" in text
    record = sgd.behaviour(run)
    assert record["sgd transformer sup search"] == [pytest.approx(3 / FULL_SEARCH_STEPS)]
    # A run with the full search records none: the records of runs made before stay as they were.
    assert "sgd transformer sup search" not in sgd.behaviour(run.replace(steps=FULL_SEARCH_STEPS))
