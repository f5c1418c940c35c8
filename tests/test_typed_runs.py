"""verify.kernel's and verify.images.train's typed run configurations (KernelRun, ImageRun;
issue 33 part 2), as tests/test_run_config.py holds verify.sgd's: the command line and a
study's grid point give the same frozen run, built directly (no argv), checked on
construction, so a `replace` is checked too; each flag a setting declares states its default."""

import argparse
import dataclasses

import pytest

from verify.cli import UsageError
from verify.images import train
from verify.images.image_run import ImageRun, ImageRuntime
from verify.learning import kernel_vs_sgd, sgd_program
from verify.learning.kernel_vs_sgd import METHOD_DEFAULTS, KernelRun, KernelRuntime
from verify.learning.run_config import TRANSFORMER_DEFAULTS, SgdRun
from verify.learning.settings import shown

SMALL_KERNEL = dict(M=5, K=2, I=2, H=2, O=2, tasks=16, samples_per_task=4)


def test_the_kernel_command_line_and_a_grid_point_give_the_same_frozen_run():
    argv = ["--M", "5", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--method", "trained", "--width", "8"]
    run = kernel_vs_sgd.parse_args(argv)
    assert run == kernel_vs_sgd.config_of(dict(M=5, K=2, I=2, H=2, O=2, method="trained", width=8))
    assert isinstance(run, KernelRun) and run.runtime == KernelRuntime()
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.M = 6
    # What the method reads and was not given is its default; what it does not read is unset.
    assert (run.steps, run.probe_rows, run.lr) == (METHOD_DEFAULTS["steps"], 256, METHOD_DEFAULTS["lr"])
    assert run.tasks is None and run.parametrization is None and "tasks" not in run.key()
    nngp = KernelRun(method="nngp")
    assert nngp.parametrization is None and nngp.tasks == 512 and nngp.key()["ladder"] is False


@pytest.mark.parametrize("given, message", [
    (dict(method="ntk", width=8), "--width does not apply to --method ntk"),
    (dict(method="trained", jitter=1e-6), "--jitter does not apply to --method trained"),
    (dict(method="nngp", parametrization="ntk"), "--parametrization does not apply to --method nngp"),
    (dict(K=9, M=4), "--K must be at most --M"),
    (dict(M=4.0), "--M: expected a positive integer"),
    (dict(encoding="fewshot"), "fewshot's e(z) is drawn anew"),
    (dict(nonesuch=1), "verify.kernel has no setting 'nonesuch'"),
])
def test_the_kernel_run_refuses_in_one_line(given, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        KernelRun.build(given)


def test_a_kernel_replace_is_checked_as_a_new_run():
    run = KernelRun.build(dict(SMALL_KERNEL, method="ntk"))
    assert run.replace(seed=3).key() == {**run.key(), "seed": 3}
    with pytest.raises(UsageError, match="--K must be at most --M"):
        run.replace(K=6)
    with pytest.raises(UsageError, match="--steps does not apply"):
        run.replace(steps=10)


def test_an_image_grid_point_is_typed_and_resolved_as_the_command_line_is():
    run = train.config_of(dict(preset="tiny", held_out=0.3, steps="20", fractions=[0.5, 1]))
    assert isinstance(run, ImageRun) and run.steps == 20 and run.fractions == (0.5, 1.0)
    # --held-out is resolved into the count of training combinations (64 − ceil(0.3 · 64)), then dropped.
    assert run.train_combinations == 44 and run.held_out is None and "held_out" not in run.key()
    assert run.channels == (8, 16) and run.key()["channels"] == [8, 16]  # the preset's sizes
    parsed = train.parse_args(["--preset", "tiny", "--steps", "20", "--fractions", "0.5", "1", "--out", "x"])
    assert parsed == run and parsed.runtime.out == "x" and run.runtime == ImageRuntime()
    assert train.parse_args(["--preset", "tiny", "--steps", "20", "--fractions", "0.5", "1",
                             "--train-combinations", "44", "--out", "x"]).key() == run.key()


@pytest.mark.parametrize("given, message", [
    (dict(held_out=0.3, train_combinations=10), "give one"),
    (dict(train_combinations=64), "leaves no held-out combination"),
    (dict(objects=3), "--objects: invalid choice: 3"),
    (dict(channels=[6]), "multiple of 4"),
    (dict(layers=["("]), "is not a regular expression"),
    (dict(fractions=[1.5]), "1.5"),
    (dict(steps=4.0), "--steps: expected a positive integer"),
])
def test_the_image_run_refuses_in_one_line(given, message):
    with pytest.raises(UsageError, match=message):
        ImageRun.build(given)


def test_an_image_replace_is_checked_as_a_new_run():
    run = ImageRun.build(dict(preset="tiny"))
    assert run.replace(steps=7).steps == 7
    with pytest.raises(UsageError, match="leaves no held-out combination"):
        run.replace(train_combinations=64)


@pytest.mark.parametrize("module, run_class", [(kernel_vs_sgd, KernelRun), (train, ImageRun),
                                               (sgd_program, SgdRun)])
def test_each_flag_states_its_settings_own_default(module, run_class):
    """A setting declares its flag (setting(..., help=)); the flag's help states the field's
    default (a kernel method's: METHOD_DEFAULTS; a student's size: TRANSFORMER_DEFAULTS), one
    source; the parser that parses holds no default (only what was typed)."""
    actions = {a.dest: a for a in module.build_parser()._actions}
    generated = [f for f in dataclasses.fields(run_class) if f.metadata.get("help")]
    assert len(generated) >= 10
    extra = {KernelRun: METHOD_DEFAULTS, SgdRun: TRANSFORMER_DEFAULTS}.get(run_class, {})
    for f in generated:
        default = f.default if f.default is not None else extra.get(f.name)
        if default not in (None, False):
            assert f"(default {shown(default)})" in actions[f.name].help, f.name
    fields = {f.name for f in dataclasses.fields(run_class)}
    parsing = {a.dest: a.default for a in module._parser()._actions if a.dest in fields}
    assert set(parsing.values()) == {argparse.SUPPRESS}
