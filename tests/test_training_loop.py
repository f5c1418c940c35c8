"""The training loop's schedule, host syncs and checkpoints (verify.learning.train).

The learning-rate schedule is checked against optax's own values, the loop's host syncs are
counted, and the checkpoints' wall-clock, end-of-run, device-kind and disk-space branches
are each driven by a fake clock, device or disk.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from verify.learning import sgd_program as sgd
from verify.learning import train
from verify.learning.train import TrainConfig, learning_rate

# optax.warmup_cosine_decay_schedule(init_value=0, peak_value=1e-3, warmup_steps=3,
# decay_steps=20 - 3, end_value=1e-4) at counts 0 … 19, as the official run.py calls it for
# 20 steps (optax 0.2, float32; printed by a scratch venv, not a dependency).
OPTAX_COSINE = [0.0, 0.0003333333879709244, 0.0006666667177341878, 0.0010000000474974513,
                0.000988717656582594, 0.0009554359712637961, 0.0009018242126330733, 0.0008305705268867314,
                0.0007452477002516389, 0.000650134461466223, 0.0005499999970197678, 0.000449865561677143,
                0.0003547522646840662, 0.00026942952536046505, 0.00019817575230263174, 0.00014456402277573943,
                0.00011128245387226343, 0.00010000000474974513, 0.00010000000474974513,
                0.00010000000474974513]
# The project's packages (not its root: a virtual environment may live there).
ROOT = Path(train.__file__).parents[2]
PROJECT = tuple(str(ROOT / package) for package in ("verify", "constructions", "theory"))
COSINE = TrainConfig(steps=20, tasks_per_batch=4, samples_per_task=3, lr=1e-3, schedule="cosine",
                     warmup_steps=3)
FAMILY_FLAGS = {"hyperteacher": ["--M", "5", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--widths", "8"],
                "preference": ["--family", "preference", "--M", "4", "--K", "2", "--F", "4"]}


def family_and_student(name="hyperteacher"):
    """A small family, its training supports and a fresh one-layer student, from verify.sgd's flags."""
    args = sgd.parse_args([*FAMILY_FLAGS[name], "--shapes", "custom"])
    family = sgd.make_family(args)
    torch.manual_seed(0)
    (net, _), = sgd.build_students(args, family, []).values()
    return family, sgd.split_of(args).train, net


@pytest.fixture
def teacher():
    return "hyperteacher"


def hyperteacher_run(_teacher, cfg=COSINE, **kwargs):
    family, supports, net = family_and_student()
    return train.train_student(family, supports, net, cfg, progress=False, **kwargs)


def test_the_cosine_schedule_is_optaxs_as_run_py_calls_it():
    ours = [learning_rate(COSINE, step) for step in range(1, 21)]
    assert ours == pytest.approx(OPTAX_COSINE, rel=1e-6, abs=1e-12)  # optax rounds to float32
    constant = TrainConfig(steps=20, lr=1e-3)
    assert {learning_rate(constant, step) for step in range(1, 21)} == {1e-3}


def test_the_optimiser_steps_with_the_scheduled_rate(teacher, monkeypatch):
    """Each step's AdamW rate is the schedule's, the first one 0 (no update at all)."""
    seen, real = [], train.train_step

    def spy(forward, opt, batch, loss_of, autocast=None):
        seen.append(opt.param_groups[0]["lr"])
        return real(forward, opt, batch, loss_of, autocast)

    monkeypatch.setattr(train, "train_step", spy)
    hyperteacher_run(teacher)
    assert seen == pytest.approx(OPTAX_COSINE, rel=1e-6, abs=1e-12)
    seen.clear()
    hyperteacher_run(teacher, TrainConfig(steps=5, tasks_per_batch=4, samples_per_task=3, lr=2e-3))
    assert seen == [2e-3] * 5


def test_a_cosine_run_differs_from_a_constant_one(teacher):
    constant = TrainConfig(**{**COSINE.__dict__, "schedule": "constant"})
    a, b = hyperteacher_run(teacher), hyperteacher_run(teacher, constant)
    assert not torch.equal(next(a.net.parameters()), next(b.net.parameters()))


def test_a_schedule_the_loop_cannot_run_is_refused(teacher):
    with pytest.raises(ValueError, match="steps > 2 × warmup_steps"):
        hyperteacher_run(teacher, TrainConfig(steps=6, schedule="cosine", warmup_steps=3))
    with pytest.raises(ValueError, match="schedule must be one of"):
        hyperteacher_run(teacher, TrainConfig(steps=6, schedule="linear"))


class SyncCounter:
    """Counts this project's tensor reads that would make a CUDA host wait for the device.
    torch's AdamW reads its step counters too, but those live on the host by design (unless
    `capturable`), so only reads made directly by the project's own code count."""

    READS = ("item", "tolist", "__bool__", "__float__", "__int__", "numpy")

    def __init__(self, monkeypatch):
        self.count = 0
        for name in self.READS:
            real = getattr(torch.Tensor, name)

            def counted(self_, *a, real=real, **k):
                caller = sys._getframe(1).f_code.co_filename
                self.count += caller.startswith(PROJECT)
                return real(self_, *a, **k)

            monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.mark.parametrize("family_name", ["hyperteacher", "preference"])
def test_the_loop_reads_the_loss_only_when_it_logs(teacher, monkeypatch, family_name):
    """40 steps logged every 10: four reads of the running loss, and no other host sync in
    the steps (batch making included), so a GPU is never made to wait inside the loop."""
    cfg = TrainConfig(steps=40, tasks_per_batch=4, samples_per_task=3)
    family, supports, net = family_and_student(family_name)
    batches = family.batches(supports, 4, 3, 0, torch.device("cpu"))
    batches()  # the first call may build caches; the loop's steady state is what is counted
    counter = SyncCounter(monkeypatch)
    result = train.train_student(family, supports, net, cfg, progress=False, log_every=10)
    assert [step for step, _ in result.losses] == [10, 20, 30, 40]
    assert counter.count == 4, f"{counter.count} host reads in 40 steps"


def test_the_loss_curve_is_the_same_whatever_the_logging(teacher):
    """Reading the running loss less often changes what is recorded, not what is computed."""
    cfg = TrainConfig(steps=12, tasks_per_batch=4, samples_per_task=3)
    every = dict(hyperteacher_run(teacher, cfg, log_every=1).losses)
    sparse = hyperteacher_run(teacher, cfg, log_every=4).losses
    assert [s for s, _ in sparse] == [4, 8, 12]
    assert all(every[s] == v for s, v in sparse)


def saves_of(teacher, monkeypatch, tmp_path, seconds, steps=12):
    """The steps after which a run saves its checkpoint, under a clock that ticks 1 s a reading."""
    ticks, saved, real = iter(range(10**6)), [], train.save_checkpoint
    monkeypatch.setattr(train, "_clock", lambda: next(ticks))
    monkeypatch.setattr(train, "save_checkpoint", lambda *a: (saved.append(a[-1].step), real(*a)))
    cfg = TrainConfig(steps=steps, tasks_per_batch=4, samples_per_task=3)
    hyperteacher_run(teacher, cfg, checkpoint=tmp_path / f"{seconds}.ckpt", checkpoint_seconds=seconds)
    return saved


def test_checkpoints_follow_the_wall_clock_and_end_the_run(teacher, monkeypatch, tmp_path):
    # The clock reads 1 … 5 in steps 1 … 5: 5 s since the start, a save (whose reading makes
    # it 6), then 7 … 11 in steps 6 … 10, a save; and one at the end whatever the clock.
    assert saves_of(teacher, monkeypatch, tmp_path, seconds=5) == [5, 10, 12]
    assert saves_of(teacher, monkeypatch, tmp_path, seconds=600) == [12]
    ckpt = torch.load(tmp_path / "600.ckpt", weights_only=False)
    assert ckpt["step"] == 12 and ckpt["fingerprint"]["device"] == "cpu"


def test_a_checkpoint_from_another_kind_of_device_is_refused(teacher, monkeypatch, tmp_path):
    cfg = TrainConfig(steps=4, tasks_per_batch=4, samples_per_task=3)
    hyperteacher_run(teacher, cfg, checkpoint=tmp_path / "a.ckpt")
    monkeypatch.setattr(train, "device_kind", lambda device: "cuda")  # as if resumed on a GPU
    with pytest.raises(train.CheckpointMismatch, match="was written on cpu; resume it there"):
        hyperteacher_run(teacher, cfg, checkpoint=tmp_path / "a.ckpt")
    monkeypatch.undo()
    resumed = hyperteacher_run(teacher, cfg, checkpoint=tmp_path / "a.ckpt")  # on its own kind: resumes
    assert resumed.losses[-1][0] == 4


def test_too_little_disk_for_the_checkpoints_is_refused_before_any_training(monkeypatch, tmp_path, capsys):
    class Full:
        free = 100  # bytes: less than even a one-layer student's checkpoint

    monkeypatch.setattr(train.shutil, "disk_usage", lambda path: Full)
    monkeypatch.setattr(train, "apply_tasks", lambda *a: pytest.fail("trained"))
    argv = ["--M", "4", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--steps", "5", "--eval-samples", "4",
            "--eval-tasks", "32", "--no-progress", "--checkpoint", str(tmp_path / "ckpt")]
    assert sgd.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GiB free; its checkpoints need" in err, err
    # …and on the library path too, before the first step.
    with pytest.raises(train.CheckpointSpace):
        hyperteacher_run(None, checkpoint=tmp_path / "b.ckpt")


def test_the_speed_defaults_keep_the_cpu_as_it_was_and_use_tf32_and_fused_adamw_on_cuda():
    assert train.Speed.default("cpu") == train.Speed("fp32", compile=False, fused=False)
    assert train.Speed.default("cuda:1") == train.Speed("tf32", compile=False, fused=True)
    args = sgd.parse_args([*FAMILY_FLAGS["hyperteacher"], "--shapes", "custom", "--precision", "bf16",
                           "--fused-adamw"])
    assert sgd.speed_of(args) == train.Speed("bf16", compile=False, fused=True)


def speed_run(speed, steps=6):
    cfg = TrainConfig(steps=steps, tasks_per_batch=4, samples_per_task=3)
    family, supports, net = family_and_student()
    return train.train_student(family, supports, net, cfg, progress=False, log_every=1, speed=speed)


def test_bf16_autocast_and_fused_adamw_change_the_rounding_not_the_run():
    """bf16 carries 8 significant bits: the first loss (before any update) moves by a few
    parts in 2^8 of itself, not more; fused AdamW only reorders float32 arithmetic."""
    base = speed_run(train.Speed())
    bf16 = speed_run(train.Speed(precision="bf16"))
    fused = speed_run(train.Speed(fused=True))
    first = base.losses[0][1]
    assert bf16.losses[0][1] != first and abs(bf16.losses[0][1] - first) <= 4 * 2**-8 * first
    for a, b in zip(fused.net.parameters(), base.net.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert fused.config["speed"] == {"precision": "fp32", "compile": False, "fused": True}


def test_a_compiled_step_trains_as_the_eager_one():
    from torch._dynamo.utils import counters

    counters.clear()
    eager, compiled = speed_run(train.Speed(), steps=4), speed_run(train.Speed(compile=True), steps=4)
    assert counters["stats"]["unique_graphs"] >= 1  # dynamo really captured the forward
    assert [s for s, _ in compiled.losses] == [1, 2, 3, 4]
    assert [v for _, v in compiled.losses] == pytest.approx([v for _, v in eager.losses], rel=1e-5)
    for a, b in zip(compiled.net.parameters(), eager.net.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("family_name", ["hyperteacher", "preference"])
def test_scoring_a_float32_copy_on_the_device_moves_the_metrics_by_rounding_only(family_name):
    """What a GPU run does (scoring.on_device), done on the CPU: the sampled metrics from a
    float32 copy differ from the float64 network's by float32 rounding, not more (R²,
    RMSE, loss: 1e-5 relative; accuracy: at most one step in a thousand flips on a near
    tie), and the sup error, which certifies, is the float64 network's."""
    from verify.learning.metrics import on_device

    extra = ["--eval-samples", "8"] if family_name == "hyperteacher" else []
    args = sgd.parse_args([*FAMILY_FLAGS[family_name], "--shapes", "custom", "--steps", "40",
                           "--eval-tasks", "64", *extra, "--no-progress"])
    prep = sgd.prepare(args, False)
    net = sgd.train_students(prep, False)["custom"].net
    exact, _ = prep.family.score("sgd", net, prep.sides, args.seed)
    fast, _ = prep.family.score("sgd", net, prep.sides, args.seed, fast=on_device(net, "cpu"))
    assert [(m.side, m.metric) for m in fast] == [(m.side, m.metric) for m in exact]
    moved = 0
    for a, b in zip(exact, fast, strict=True):
        if a.metric == "sup":
            assert b.value == a.value
        elif a.metric.startswith("acc"):
            assert abs(b.value - a.value) <= 1e-3
        elif a.metric != "r2_pairs_used":
            assert b.value == pytest.approx(a.value, rel=1e-5, abs=1e-7), (a.side, a.metric)
            moved += b.value != a.value
    assert moved  # the float32 copy really scored
