"""`verify.study run STUDY --until-decided`: a study's sequential plan adds seeds look by look,
only to the cells of its undecided claims (verify.studies.staged, verify.studies.sequential).

The runs are planted: the serial engine's run_one returns at once, and the effects table reads
each run's held-out R² from a function of its width, held-out fraction and seed, so that which
look decides each claim is known in advance. The test recomputes that look on its own, with
scipy's paired t-test and the O'Brien–Fleming spending written out, and holds the store's
seeds, the report's verdicts and the summary to it.
"""

import math

import numpy as np
import pytest
from scipy import stats

from verify.cli import UsageError
from verify.studies import budget, effects, engines, grids, provenance, sequential, staged, verdicts
from verify.studies import commands as study
from verify.studies.store import RunStore

LOOKS = (3, 6, 9)
DELTA = 0.05  # the claim's smallest effect
STUDY = f"""method: grid
name: planted
verdicts:
  test: paired
  sequential: {{looks: {list(LOOKS)}, spending: obrien_fleming}}
  claims:
    - factor: widths
      treatment: [8]
      control: [4]
      paper: helps
      delta: {DELTA}
      why: planted
parameters:
  M: {{value: 4}}
  K: {{value: 2}}
  I: {{value: 2}}
  H: {{value: 2}}
  O: {{value: 2}}
  width: {{values: [4, 8]}}
  depth: {{value: 1}}
  steps: {{value: 5}}
  tasks_per_batch: {{value: 4}}
  samples_per_task: {{value: 4}}
  eval_tasks: {{value: 16}}
  eval_samples: {{value: 4}}
  extra_modules: {{value: 0}}
  held_out: {{values: [0.25, 0.5]}}
  seed: {{values: [1, 2, 3]}}
"""
# At held-out 0.25 the wider arm gains 0.3 with a per-seed sd of 0.001: decided at look 1.
# At 0.5 it gains 0.1 with sd 0.02: open at look 1 (a paired t(2) needs t > 38 there).
EFFECT = {0.25: (0.3, 0.001), 0.5: (0.1, 0.02)}


def planted(width: int, held_out: float, seed: int) -> float:
    control = 0.5 + 0.05 * np.random.default_rng(seed).uniform()
    effect, sd = EFFECT[held_out]
    gain = effect + sd * np.random.default_rng(1000 + seed).standard_normal()
    return control + (gain if width == 8 else 0.0)


@pytest.fixture
def planted_study(tmp_path, monkeypatch):
    """The study file, and a serial engine whose runs only record their configuration."""
    def run_one(config, place, program):
        return dict(status="done", report=dict(config=config), seconds=0.01, behaviour=None,
                    version=provenance.code_version(), fingerprint=provenance.code_fingerprint(program))

    def student_rows(report):
        c = report["config"]
        held = planted(c["widths"][0], c["held_out"], c["seed"])
        return [dict(network="mlp", family="hyperteacher", train_r2=0.999, held_out_r2=held, sup_ratio=None,
                     hidden_units=None, parameters=None, probe_r2=None, n_train=10)]

    monkeypatch.setattr(engines, "run_one", run_one)
    monkeypatch.setattr(effects, "student_rows", student_rows)
    path = tmp_path / "planted.yaml"
    path.write_text(STUDY)
    return str(path), tmp_path / "out"


def obf_level(look: int, family: int, alpha: float = 0.05) -> float:
    """The level spent at look `look` (0-based): O'Brien–Fleming-type, written out."""
    def spent(t):
        return 2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t))
    before = spent(LOOKS[look - 1] / LOOKS[-1]) if look else 0.0
    return (spent(LOOKS[look] / LOOKS[-1]) - before) / family


def deciding_look(held_out: float) -> int:
    """The first look (1-based) at which the paired t-test on the planted values rejects."""
    for k, n in enumerate(LOOKS):
        t = [planted(8, held_out, s) for s in range(1, n + 1)]
        c = [planted(4, held_out, s) for s in range(1, n + 1)]
        if stats.ttest_rel(t, c).pvalue < obf_level(k, family=2):
            return k + 1
    raise AssertionError("the planted effect is decided by the last look")


def seeds_of(out) -> dict:
    with RunStore(out / "study.sqlite") as store:
        rows = store.rows()
    found: dict = {}
    for r in rows:
        found.setdefault((r["config"]["held_out"], r["config"]["widths"][0]), set()).add(r["config"]["seed"])
    return found


def test_seeds_are_added_only_to_the_undecided_claims_cells_up_to_the_look_that_decides(planted_study):
    path, out = planted_study
    assert deciding_look(0.25) == 1 and deciding_look(0.5) == 2  # the plant does what it says
    capped = study.run_study(path, "paper", out, engine="serial", progress=False, until_decided=True,
                             max_seeds=3)
    assert (capped["done"], capped["stages"]) == (12, 1)
    assert len(capped["open_claims"]) == 1 and "held_out 0.5" in capped["open_claims"][0]
    assert "1 claims still open at --max-seeds 3" in study.format_summary(capped)
    _, asked = staged.planned_runs(path, "paper", out)
    assert "the sequential plan asks for 6 runs not yet made" in staged.cost_note(path, "paper", out, asked)
    # `verify.study budget` counts them too: the grid's 12, done, and the plan's next look's 6 to run,
    # timed by their cells' stored runs (0.01 s each).
    cost = budget.study_budget(path, "paper", out)
    assert (cost.runs, cost.current, cost.measured, cost.matched) == (18, 12, 12, 6)
    assert cost.core_minutes(only_left=True) == pytest.approx(6 * 0.01 / 60)

    result = study.run_study(path, "paper", out, engine="serial", progress=False, until_decided=True)
    assert result["open_claims"] == [] and "every claim decided" in study.format_summary(result)
    assert result["done"] == 6  # seeds 4–6 in the two cells at held-out 0.5, none at 0.25
    assert seeds_of(out) == {(0.25, 4): {1, 2, 3}, (0.25, 8): {1, 2, 3},
                             (0.5, 4): {1, 2, 3, 4, 5, 6}, (0.5, 8): {1, 2, 3, 4, 5, 6}}
    again = study.run_study(path, "paper", out, engine="serial", progress=False, until_decided=True)
    assert (again["done"], again["stages"]) == (0, 0)
    assert staged.cost_note(path, "paper", out, staged.planned_runs(path, "paper", out)[1]) is None

    name, runs = staged.planned_runs(path, "paper", out)
    table = effects.effects_table(name, "paper", out, keys={r.key for r in runs}, plan=grids.study_plan(path))
    assert table["runs_done"] == 18
    tested = {r["held_out"]: r for r in table["rows"] if r.get("test")}
    assert tested[0.25]["effect"].endswith("(helps)") and "look 1 of 3 (3 seeds" in tested[0.25]["test"]
    assert tested[0.5]["effect"].endswith("(helps)") and "look 2 of 3 (6 seeds" in tested[0.5]["test"]
    assert tested[0.5]["agrees"] == "yes"
    level = f"level {obf_level(1, family=2):.2g}"
    assert level in tested[0.5]["test"], (level, tested[0.5]["test"])
    assert any("sequential plan: looks at 3, 6, 9" in n for n in table["notes"])


def test_a_seed_run_beyond_what_the_plan_asks_is_left_out_of_the_report(planted_study):
    """A store with seeds 4–6 at held-out 0.25 too (an earlier plan's) reports the claim decided at
    look 1 on seeds 1–3, and does not count the others."""
    path, out = planted_study
    study.run_study(path, "paper", out, engine="serial", progress=False, until_decided=True)
    # Every cell to 9 seeds, as a fixed grid of 9 would have run.
    wider = STUDY.replace("seed: {values: [1, 2, 3]}", "seed: {values: [1, 2, 3, 4, 5, 6, 7, 8, 9]}")
    full = out.parent / "full.yaml"
    full.write_text(wider.replace("sequential: {looks: [3, 6, 9], spending: obrien_fleming}\n  ", ""))
    study.run_study(str(full), "paper", out, engine="serial", progress=False)
    name, runs = staged.planned_runs(path, "paper", out)
    assert len(runs) == 18
    table = effects.effects_table(name, "paper", out, keys={r.key for r in runs}, plan=grids.study_plan(path))
    assert {r["held_out"]: r["runs"] for r in table["rows"]} == {0.25: 3, 0.5: 6}
    assert any("stored runs belong to an earlier version of the grid" in n for n in table["notes"])


def test_a_wrong_level_or_a_missing_look_is_caught(planted_study, monkeypatch):
    """Mutants: a plan that spends the whole α at every look decides held-out 0.5 at look 1,
    where the recomputed level does not; a plan that reads every stored seed at look 1 does too."""
    path, out = planted_study
    monkeypatch.setattr(sequential.SequentialPlan, "levels", lambda self, family=1: [self.alpha / family] * 3)
    study.run_study(path, "paper", out, engine="serial", progress=False, until_decided=True)
    assert seeds_of(out)[(0.5, 4)] == {1, 2, 3}  # decided at look 1: what deciding_look() rules out
    assert deciding_look(0.5) == 2


@pytest.mark.parametrize("block, says", [
    ("sequential: {looks: [3, 3]}", "increasing"),
    ("sequential: {looks: [1, 4]}", "≥ 2"),
    ("sequential: {looks: [3, 6], spending: linear}", "spending must be one of"),
    ("sequential: {spending: pocock}", "a mapping with looks"),
])
def test_a_bad_sequential_block_is_refused_before_any_run(tmp_path, block, says):
    path = tmp_path / "bad.yaml"
    path.write_text(STUDY.replace("sequential: {looks: [3, 6, 9], spending: obrien_fleming}", block))
    with pytest.raises(UsageError, match=says):
        study.parse_args(["run", str(path), "--scale", "paper", "--engine", "serial"])


def test_until_decided_needs_a_plan_and_max_seeds_needs_until_decided(planted_study, tmp_path):
    path, _ = planted_study
    plain = tmp_path / "plain.yaml"
    plain.write_text(STUDY.replace("  sequential: {looks: [3, 6, 9], spending: obrien_fleming}\n", ""))
    assert verdicts.plan_of(None).looks is None
    with pytest.raises(UsageError, match="has no sequential plan"):
        study.parse_args(["run", str(plain), "--until-decided"])
    with pytest.raises(UsageError, match="--max-seeds applies to --until-decided"):
        study.parse_args(["run", path, "--max-seeds", "4"])
    with pytest.raises(UsageError, match="one study"):
        study.parse_args(["run", "all", "--until-decided"])
