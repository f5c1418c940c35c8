"""Live curves in TensorBoard and Weights & Biases (verify.learning.tracking, issue 34 part 1):
what a tracker holds, read back with the tracker's own reader (TensorBoard's
EventAccumulator; the offline wandb run's record log), is the run's own loss curve and scores.
Nothing reaches the network (WANDB_MODE=offline)."""

import json
import struct
from pathlib import Path

import pytest

from verify.learning import sgd_program as sgd
from verify.learning.records import lookup
from verify.learning.tracking import metric_name
from verify.studies import commands as driver

TINY = ["--M", "4", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--shapes", "custom", "--widths", "8",
        "--steps", "40", "--tasks-per-batch", "4", "--samples-per-task", "4", "--eval-tasks", "16",
        "--eval-samples", "4", "--extra-modules", "1", "--no-progress", "--log-every", "5"]


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def wandb_history(run_dir: Path) -> tuple[dict, list[dict]]:
    """(the run record's group and name, the history rows) of an offline wandb run, read from
    its .wandb file: a LevelDB-style log (a 7-byte header, then 32 KiB blocks of records, each
    a 7-byte header: CRC, length, type 1 full / 2 first / 3 middle / 4 last) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    pos, pending, run, history, which = 7, b"", {}, [], None
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            which = record.WhichOneof("record_type")
            if which == "run":
                run = dict(group=record.run.run_group, name=record.run.display_name,
                           project=record.run.project,
                           config={i.key: json.loads(i.value_json) for i in record.run.config.update})
            elif which == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
    assert which == "exit", f"the run's record log ends at a {which!r} record, not its exit: not closed"
    return run, history


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """wandb offline, writing under tmp_path. wandb reads WANDB_DIR into a process-wide
    setup once; teardown() drops it, so each test's folder is the one it writes to."""
    wandb = pytest.importorskip("wandb")
    for name, value in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(tmp_path)), ("WANDB_SILENT", "true")):
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    wandb.teardown()
    yield tmp_path / "wandb"
    wandb.teardown()


def test_metric_names_are_the_official_loaders():
    assert metric_name("train", "r2") == "test/r2" and metric_name("held_out", "r2") == "ood/r2"
    assert metric_name("k4", "sup") == "ood_k4/sup"


def test_tensorboard_holds_the_loss_curve_and_the_scores(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    assert sgd.main([*TINY, "--log", "tensorboard", str(tmp_path / "tb"), "--json", "--seed", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    folder = tmp_path / "tb" / "verify.sgd" / "seed2-custom"
    scalars = tensorboard_scalars(folder)
    # The curve the loop logged: every 5th step's running loss, as the run's own curve has it.
    losses = sgd_losses(tmp_path)
    assert [s for s, _ in scalars["train/loss"]] == [s for s, _ in losses] == list(range(5, 41, 5))
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([v for _, v in losses], rel=1e-6)
    for side in ("train", "held_out", "k3"):
        (step, value), = scalars[metric_name(side, "r2")]
        assert step == 40 and value == pytest.approx(lookup(report["metrics"], "sgd custom", side, "r2"),
                                                     rel=1e-6)


def sgd_losses(tmp_path: Path) -> list[tuple[int, float]]:
    """The same run's loss curve, from train_student's result (what the report's final loss ends)."""
    args = sgd.parse_args([*TINY, "--seed", "2"])
    prep = sgd.prepare(args, progress=False)
    (shape, (net, widths)), = prep.students.items()
    from verify.learning.train import train_student

    return train_student(prep.family, prep.split.train, net, prep.train, progress=False, threads=1,
                         widths=widths, log_every=5, speed=prep.speed).losses


def test_an_offline_wandb_run_holds_the_curve_the_scores_and_the_configuration(offline_wandb, capsys):
    argv = [*TINY, "--log", "wandb", "--log-group", "a-study", "--log-name", "key123", "--json"]
    assert sgd.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    # run.finish() returns before the wandb service has closed the run's record log, whose
    # writer holds a 32 KiB block until it closes: read at once, the file can be its 7-byte
    # header alone (CI at c94c7c8: KeyError 'config'). Shutting the service down closes it,
    # as a user's process does at exit.
    import wandb

    wandb.teardown()
    run_dir, = offline_wandb.glob("offline-run-*")
    run, history = wandb_history(run_dir)
    config = run.pop("config")
    assert run == dict(group="a-study", name="key123-custom", project="compgen-bound")
    # The run's configuration, as a study keys it.
    assert config["steps"] == 40 and config["widths"] == [8] and "log" not in config
    curve = [(h["_step"], h["train/loss"]) for h in history if "train/loss" in h]
    assert [s for s, _ in curve] == list(range(5, 41, 5))
    assert curve[-1][1] == pytest.approx(next(r for r in report["rows"] if r["network"] == "sgd custom")
                                         ["final_loss"], rel=1e-6)
    scores = {k: v for h in history for k, v in h.items() if "/" in k and not k.startswith("train/")}
    assert scores["ood/r2"] == pytest.approx(lookup(report["metrics"], "sgd custom", "held_out", "r2"))


@pytest.mark.parametrize("argv, message", [
    (["--log", "mlflow"], "the trackers are tensorboard, wandb"),
    (["--log", "tensorboard"], "takes one folder"),
    (["--log", "wandb", "DIR"], "takes no folder"),
    (["--log-name", "x"], "--log-name applies to --log"),
])
def test_a_wrong_log_flag_gets_one_line_and_exit_2(argv, message, capsys):
    assert sgd.main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_missing_tracker_package_gets_one_line_and_exit_2(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    assert sgd.main(["--log", "wandb", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs the wandb package: pip install 'compgen-bound[trackers]'" in err and err.count("\n") == 1
    assert driver.main(["run", "task-support", "--scale", "smoke", "--engine", "serial", "--log",
                        "wandb"]) == 2


def test_a_study_logs_each_run_under_its_key(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tests.test_study import tiny_study

    monkeypatch.chdir(tmp_path)
    path = tiny_study(tmp_path, held_out="[0.25]", seeds="[1, 2]", steps=10)
    out = tmp_path / "out"
    summary = driver.run_study(path, "paper", out, engine="serial", progress=False,
                               log=["tensorboard", str(tmp_path / "tb")])
    assert summary["done"] == 2
    runs = sorted(p.name for p in (tmp_path / "tb" / "tiny").iterdir())
    keys = sorted(f"{r.key[:16]}-custom" for r in driver.expand(path, "paper")[1])
    assert runs == keys
    for name in runs:
        assert "train/loss" in tensorboard_scalars(tmp_path / "tb" / "tiny" / name)


def test_an_offline_wandb_study_writes_one_run_per_study_run_grouped_by_the_study(offline_wandb, tmp_path):
    from tests.test_study import tiny_study

    path = tiny_study(tmp_path, held_out="[0.25, 0.5]", seeds="[1]", steps=10)
    summary = driver.run_study(path, "paper", tmp_path / "out", engine="serial", progress=False,
                               log=["wandb"])
    assert summary["done"] == 2
    runs = [wandb_history(d)[0] for d in sorted(offline_wandb.glob("offline-run-*"))]
    keys = {f"{r.key[:16]}-custom" for r in driver.expand(path, "paper")[1]}
    assert {r["group"] for r in runs} == {"tiny"} and {r["name"] for r in runs} == keys and len(runs) == 2


# --- the image program (verify.images.train): the denoiser's loop and the run's scores ----------

def test_an_image_run_logs_the_denoisers_curve_and_its_scores(tmp_path):
    """The windows' mean losses as the denoiser's own loss curve has them, and the judge's
    success and the best layer's probe F1 as the report has them."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("diffusers")
    from tests.test_images_train import TINY as IMAGE_TINY
    from verify.images import train

    args = train.parse_args([*IMAGE_TINY, "--steps", "4", "--seed", "3", "--out", str(tmp_path / "run"),
                             "--log", "tensorboard", str(tmp_path / "tb"), "--log-group", "g"])
    report = train.run(args)
    scalars = tensorboard_scalars(tmp_path / "tb" / "g" / "seed3")
    curve = report["training"]["loss_curve"]
    assert [s for s, _ in scalars["train/loss"]] == [p["step"] for p in curve] == [1, 2, 3, 4]
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([p["loss"] for p in curve], rel=1e-6)
    for side, name in (("train", "test/success"), ("test", "ood/success")):
        (step, value), = scalars[name]
        assert step == 4 and value == pytest.approx(report["success"][side]["rate"], rel=1e-6)
    (_, f1), = scalars["probe/test_f1"]
    assert f1 == pytest.approx(report["best_layer"]["test_f1"], rel=1e-6)
    assert "log" not in report["config"]  # a runtime flag: the run's key is the same with it


def test_a_wrong_log_flag_of_the_image_program_gets_one_line_and_exit_2(tmp_path, capsys):
    from verify.images import train

    assert train.main(["--log-group", "g", "--out", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err
    assert "--log-group applies to --log" in err and err.count("\n") == 1
    assert not (tmp_path / "never").exists()


def test_log_is_refused_for_a_study_whose_program_does_not_track(capsys):
    assert driver.main(["run", "kernel-vs-sgd", "--scale", "smoke", "--engine", "serial", "--log",
                        "wandb"]) == 2
    err = capsys.readouterr().err
    assert "--log applies to the studies of verify.sgd, verify.images.train; kernel-vs-sgd runs " \
           "verify.kernel" in err and err.count("\n") == 1
