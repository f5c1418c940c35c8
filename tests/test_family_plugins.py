"""Task families as plug-ins (issue 33): every registered family held to the interface by a
contract test generated from the registry, and a third, toy family (tests/toy_family.py)
added by its own module and one `register` call, trained end to end through verify.sgd and
a study, with no edit to the project."""

import contextlib
import dataclasses
import json

import pytest

from tests.toy_family import LinearFamily
from verify.learning import families
from verify.learning import sgd_program as sgd
from verify.learning.families import DEFAULT_FAMILY, FAMILIES, TaskFamily
from verify.learning.settings import shown
from verify.studies import commands as driver
from verify.theorem.presets import SHAPES


@pytest.fixture
def toy():
    """The toy family, registered for one test."""
    with _with(LinearFamily):
        yield LinearFamily


def _registered_and_toy():
    return [*FAMILIES.values(), LinearFamily]


def _flags(family: type[TaskFamily], **extra) -> list[str]:
    settings = {**family.smoke, **extra}
    argv = ["--family", family.name, "--no-progress"]
    for dest, value in settings.items():
        argv += [f"--{dest.replace('_', '-')}", str(value)]
    return argv


def _with(family):
    """A context in which `family` is registered (the toy one) or nothing changes."""

    @contextlib.contextmanager
    def registered():
        added = family.name not in FAMILIES
        if added:
            families.register(family)
        try:
            yield
        finally:
            if added:
                FAMILIES.pop(family.name, None)

    return registered()


@pytest.mark.parametrize("family", _registered_and_toy(), ids=lambda f: f.name)
def test_every_family_declares_its_command_line_and_reports_consistently(family):
    assert FAMILIES[DEFAULT_FAMILY].name == DEFAULT_FAMILY
    assert set(family.optimiser) == {"lr", "weight_decay"}
    assert set(family.default_shapes) <= set(family.shapes) <= set(SHAPES) and "custom" in family.shapes
    assert family.paper_widths and all(w > 0 for w in family.paper_widths)
    assert family.__doc__ and family.smoke
    with _with(family):
        parser = sgd.build_parser()
        actions = {a.dest: a for a in parser._actions}
        assert set(family.settings) <= set(actions), "a setting with no flag"
        assert set(family.paper_preset) <= set(actions) and set(family.smoke) <= set(actions)
        # Each flag a setting declares states the setting's own default (one source).
        for f in dataclasses.fields(family.Settings):
            if f.metadata.get("help") and f.default not in (None, False):
                assert f"(default {shown(f.default)})" in actions[f.name].help, f.name
        # Every other family's flags are refused for it (given a value they accept: their default).
        for other in FAMILIES.values():
            for dest in set(other.settings) - set(family.settings):
                action = actions[dest]
                default = getattr(other.Settings(), dest)
                given = [action.option_strings[-1]] + ([] if action.nargs == 0 else [str(default)])
                with pytest.raises(sgd.UsageError, match=f"{given[0]} applies to --family {other.name}"):
                    sgd.parse_args([*_flags(family), *given])


def _trained(family, capsys) -> tuple[dict, object, dict]:
    """(report, args, behaviour record) of a smoke run of `family` through verify.sgd."""
    with _with(family):
        argv = [*_flags(family), "--shapes", "custom", "--widths", "8", "--steps", "6",
                "--tasks-per-batch", "4", "--eval-tasks", "8", "--extra-modules", "0", "--json"]
        assert sgd.main(argv) == 0
        report = json.loads(capsys.readouterr().out)
        args = sgd.parse_args(argv)
        assert family.name in sgd.format_report(report).splitlines()[0]  # the report reads back through it
        return report, args, sgd.behaviour(args)  # what a study stores to tell behaviour from bytes


def _broken_promises(family, report: dict) -> list[str]:
    """What a family declares (convergence, headline, columns, effects metrics) but its
    scoring does not give."""
    scored = {(m["side"], m["metric"]) for m in report["metrics"] if m["network"] == "sgd custom"}
    declared = [("convergence", family.convergence_side_metric()), ("headline", family.effect_side_metric())]
    declared += [(f"column {head}", (side, metric)) for side, metric, head, _ in family.columns]
    declared += [(f"effects {name}", (side, metric)) for name, side, metric in family.effects_metrics]
    return [f"{what}: {side} {metric} is never scored" for what, (side, metric) in declared
            if (side, metric) not in scored]


@pytest.mark.parametrize("family", _registered_and_toy(), ids=lambda f: f.name)
def test_every_family_trains_and_scores_end_to_end_through_verify_sgd(family, capsys):
    report, args, record = _trained(family, capsys)
    assert report["family"] == family.name and args.lr == family.optimiser["lr"]
    assert _broken_promises(family, report) == []
    assert len(report["rows"][-1]["widths"]) == 1
    assert len(record["sgd custom losses"]) == sgd.BEHAVIOUR_STEPS and record["sgd custom scores"]
    # The family's own settings and no other family's are in the run's configuration.
    config = sgd.run_config(args)
    for other in FAMILIES.values():
        assert not (set(other.settings) - set(family.settings)) & set(config)


def test_the_contract_catches_a_family_that_reports_a_metric_it_never_scores(capsys):
    class Misdeclared(LinearFamily):
        """Linear regression, whose table promises an accuracy"""

        name = "misdeclared"
        columns = (*LinearFamily.columns, ("held_out", "acc", "acc held", ".4f"))

    report, _, _ = _trained(Misdeclared, capsys)
    assert _broken_promises(Misdeclared, report) == ["column acc held: held_out acc is never scored"]


@pytest.mark.parametrize("family", _registered_and_toy(), ids=lambda f: f.name)
def test_every_family_has_a_paper_default_and_its_preset(family):
    with _with(family):
        default = family.paper_default()
        assert isinstance(default, family) and default.E > 0 and default.I > 0 and default.O > 0
        args = sgd.parse_args(["--family", family.name, "--paper", "--no-progress"])
    settings = args.settings()
    for dest, value in family.paper_preset.items():
        got = list(args.runtime.seeds) if dest == "seed" else settings[dest]
        assert got == value, dest
    assert list(args.widths) == family.paper_widths


def test_the_toy_family_is_refused_until_registered_and_keeps_its_own_refusals(toy, capsys):
    assert sgd.main(["--family", "linear", "--encoding", "fewshot", "--no-progress"]) == 2
    assert "--encoding fewshot: the linear family shows no examples" in capsys.readouterr().err
    assert sgd.main(["--family", "linear", "--shapes", "matched", "--no-progress"]) == 2
    assert "the linear family offers --shapes custom" in capsys.readouterr().err
    del FAMILIES["linear"]
    assert sgd.main(["--family", "linear", "--no-progress"]) == 2
    assert "invalid choice: 'linear'" in capsys.readouterr().err


def test_the_toy_family_learns_its_task(toy):
    """Not a smoke run only: 600 steps of a 64-unit MLP fit the linear tasks (R² > 0.9 on
    held-out supports), so the loop really trains on the family's batches and loss."""
    args = sgd.parse_args(["--family", "linear", "--M", "4", "--K", "2", "--D", "2", "--widths", "64",
                           "--steps", "600", "--tasks-per-batch", "32", "--eval-tasks", "64",
                           "--extra-modules", "0", "--no-progress", "--seed", "1"])
    report = sgd.run(args)
    r2 = {m["side"]: m["value"] for m in report["metrics"] if m["metric"] == "r2"}
    assert r2["train"] > 0.9 and r2["held_out"] > 0.9, r2


TOY_STUDY = """method: grid
name: toy
parameters:
  family: {value: linear}
  M: {value: 4}
  K: {value: 2}
  D: {value: 2}
  width: {value: 8}
  depth: {value: 1}
  steps: {value: 5}
  tasks_per_batch: {value: 4}
  eval_tasks: {value: 8}
  extra_modules: {value: 0}
  split: {values: [random, non_compositional]}
  seed: {values: [1, 2]}
"""


def test_a_study_of_the_toy_family_runs_and_reports(toy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "toy.yaml"
    path.write_text(TOY_STUDY)
    out = tmp_path / "out"
    summary = driver.run_study(str(path), "paper", out, engine="serial", progress=False)
    assert summary["done"] == 4 and summary["failed"] == 0, summary
    assert driver.main(["report", str(path), "--scale", "paper", "--out", str(out), "--json"]) == 0
