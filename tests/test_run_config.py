"""verify.sgd's typed run configuration (verify.learning.run_config, issue 33 part 2): every
way into a run (the command line, a study's grid point, a stored key) gives the same frozen
SgdRun, the instance refuses what the command line refuses, and a study's runs round-trip
through their keys and their command lines for every program."""

import argparse
import dataclasses

import pytest

from verify.cli import UsageError
from verify.learning import sgd_program as sgd
from verify.learning.families import FAMILIES
from verify.learning.families.hyperteacher import HyperteacherSettings
from verify.learning.families.preference import PreferenceSettings
from verify.learning.run_config import Runtime, SgdRun
from verify.studies import grids


def test_the_command_line_and_build_give_the_same_frozen_run():
    run = sgd.parse_args(["--M", "6", "--K", "3", "--eps", "0.05", "--shapes", "custom", "--widths", "8",
                          "8"])
    assert run == SgdRun.build(dict(M=6, K=3, eps=0.05, shapes=["custom"], widths=[8, 8]))
    assert run.task == HyperteacherSettings(eps=0.05) and run.widths == (8, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.M = 7
    # The defaults a direct construction leaves to the family are the family's.
    assert SgdRun().key() == sgd.parse_args([]).key() == SgdRun.build({}).key()
    preference = SgdRun(family="preference", shapes=("custom",), widths=(256, 256))
    assert preference.task == PreferenceSettings()
    assert (preference.lr, preference.weight_decay) == (1e-4, 1e-3)
    assert preference.key() == sgd.parse_args(["--family", "preference"]).key()


def test_a_study_file_types_its_values_as_the_command_line_reads_them():
    # PyYAML reads 1e-3 (no dot) as a string and `shapes: matched` as one name.
    run = SgdRun.build(dict(lr="1e-3", shapes="matched", held_out=0.5, M=4))
    assert (run.lr, run.shapes, run.held_out, run.M) == (1e-3, ("matched",), 0.5, 4)
    for given, message in ((dict(M=4.0), "--M: expected a positive integer, got '4.0'"),
                           (dict(M=True), "--M: expected a positive integer"),
                           (dict(held_out=1.5), "--held-out: expected a number strictly between 0 and 1"),
                           (dict(family="preference", allow_M_above_F="yes"), "a switch is true or false"),
                           (dict(shapes=["wide"]), "--shapes: invalid choice: 'wide'")):
        with pytest.raises(UsageError, match=message):
            SgdRun.build(given)


@pytest.mark.parametrize("change, message", [
    (dict(M=0), "--M: expected a positive integer, got '0'"),
    (dict(M="8"), "--M: expected int 8, got '8'"),
    (dict(K=9), "--K must be at most --M"),
    (dict(seed=-1), "--seed: expected a seed in"),
    (dict(schedule="cosine", warmup_steps=1000), "--schedule cosine needs --steps > 2 × --warmup-steps"),
    (dict(shapes=("custom",)), "--shapes custom needs --widths"),
    (dict(widths=(8,)), "--widths applies only to --shapes custom"),
    (dict(d_model=8), "apply to --student transformer or hypernetwork, not mlp"),
    (dict(student="transformer"), "--shapes and --widths apply to --student mlp"),
    (dict(task=PreferenceSettings()), "must be the hyperteacher family's settings"),
    (dict(family="nonesuch"), "--family: invalid choice: 'nonesuch'"),
])
def test_the_instance_refuses_what_the_command_line_refuses(change, message):
    """A replace() is checked as a new run is: the rules live on the dataclass."""
    with pytest.raises(UsageError, match=message):
        SgdRun().replace(**change)


def test_the_family_checks_its_own_settings_on_the_instance():
    with pytest.raises(UsageError, match="requires M ≤ F"):
        SgdRun(family="preference", M=32, shapes=("custom",), widths=(8,))
    with pytest.raises(UsageError, match="--objects 99: at most"):
        SgdRun(family="preference", task=PreferenceSettings(objects=99), shapes=("custom",), widths=(8,))
    with pytest.raises(UsageError, match="--eps: expected a positive finite number"):
        SgdRun(task=HyperteacherSettings(eps=0.0))


@pytest.mark.parametrize("given, message", [
    (dict(F=4), "--F applies to --family preference, not hyperteacher"),
    (dict(family="preference", eps=0.1), "--eps applies to --family hyperteacher, not preference"),
    (dict(warmup_steps=10), "--warmup-steps applies to --schedule cosine"),
    (dict(d_model=8), "--d-model applies to --student transformer, not mlp"),
    (dict(student="transformer", widths=[8]), "--widths applies to --student mlp, not transformer"),
    (dict(nonesuch=1), "verify.sgd has no setting 'nonesuch'"),
])
def test_build_refuses_a_setting_given_where_it_does_not_apply(given, message):
    with pytest.raises(UsageError, match=message):
        SgdRun.build(given)


def test_the_parsers_stated_defaults_are_the_runs():
    """build_parser still states each setting's default (its help says it); the parser that
    parses holds none (only what was typed), and SgdRun's are the ones that count: they agree."""
    settings = {**SgdRun.build({}).settings(), **dataclasses.asdict(PreferenceSettings())}
    stated = {a.dest: a.default for a in sgd.build_parser()._actions
              if a.dest in settings and a.default not in (None, argparse.SUPPRESS) and a.dest != "seed"}
    assert stated and {k: settings[k] for k in stated} == stated
    parsing = {a.dest: a.default for a in sgd._parser()._actions if a.dest in settings}
    assert set(parsing.values()) == {argparse.SUPPRESS}


def test_the_paper_preset_and_the_seeds_are_the_runtimes():
    run = sgd.parse_args(["--paper", "--seed", "4", "5", "--steps", "20"])
    with pytest.raises(UsageError, match="4 is given twice"):  # a repeated seed ran once, unsaid
        sgd.parse_args(["--paper", "--seed", "4", "4", "5"])
    assert run.runtime.seeds == (4, 5) and run.seed == 4 and run.steps == 20 and run.runtime.paper
    assert run.key() == SgdRun.build(dict(seed=4, steps=20), paper=True).key()
    # The runtime is not part of the run's identity.
    assert run == run.replace(runtime=Runtime(threads=3)) and "threads" not in run.key()


def _every_run(scales=("smoke", "cpu")):
    for name in grids.study_names():
        for scale in scales:
            try:
                _, runs = grids.expand(name, scale)
            except UsageError:
                continue  # a study without that scale
            yield from runs


def test_every_study_run_round_trips_through_its_key_and_its_command_line():
    """For every program: the configuration a stored key gives back (from_key, as a replay and
    a study's engine build it) has that key again, and so has the command line the run shows
    (for verify.sgd, parsed by verify.sgd's own parser: `python -m verify.sgd <argv>`). The
    free memory verify.kernel's parser checks is conftest's, not this machine's."""
    programs, n = set(), 0
    for run in _every_run():
        module = grids.PROGRAMS[run.program].load()
        assert module.run_config(module.from_key(run.config)) == run.config, run.params
        if run.program == grids.DEFAULT_PROGRAM:
            assert sgd.parse_args(list(run.argv)).key() == run.config, run.argv
        else:
            assert module.run_config(module.parse_args([*run.argv, "--no-progress"])) == run.config
        programs.add(run.program)
        n += 1
    assert programs == set(grids.PROGRAMS) and n > 100


def test_a_wrong_round_trip_is_caught():
    """The round trip above can fail: a key with a setting changed is another run."""
    config = sgd.config_of(dict(M=4, K=2, steps=5)).key()
    assert sgd.from_key({**config, "steps": 6}).key() != config
    with pytest.raises(TypeError):
        sgd.from_key({**config, "nonesuch": 1})


def test_a_run_at_a_place_makes_its_checkpoint_folder_and_runs_quietly(tmp_path):
    from verify.cli import RunPlace

    config = sgd.config_of(dict(M=4, K=2, steps=5)).key()
    run = sgd.from_key(config, RunPlace(str(tmp_path / "runs" / "abc"), checkpoint_minutes=2.0))
    assert (tmp_path / "runs" / "abc").is_dir() and run.key() == config
    assert (run.runtime.threads, run.runtime.no_progress, run.runtime.checkpoint_minutes) == (1, True, 2.0)
    assert sgd.from_key(config).runtime.checkpoint is None  # a replay writes nothing


def test_every_family_declares_its_settings_as_a_frozen_dataclass():
    for family in FAMILIES.values():
        settings = family.Settings()
        assert dataclasses.is_dataclass(settings) and family.Settings.__dataclass_params__.frozen
        assert tuple(f.name for f in dataclasses.fields(settings)) == family.settings
        assert all("check" in f.metadata for f in dataclasses.fields(settings))
        assert isinstance(settings.samples_per_task, int) and isinstance(settings.eval_samples, int)


@pytest.mark.parametrize("field", ["save", "checkpoint"])
def test_an_empty_output_path_is_refused_not_ignored(field):
    """Runtime(save='') named no folder and was skipped without a word (issue 44, 7.2)."""
    with pytest.raises(UsageError, match=f"--{field}: expected a file or folder name, got ''"):
        Runtime(**{field: ""})
