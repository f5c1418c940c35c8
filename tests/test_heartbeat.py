"""Off a terminal a long command is not silent (issue 44, defect 6): a study and a training print
a plain line now and then (cli.heartbeat), a resumed training says where it resumed, and a
study's Ctrl-C line says how to resume. Each CLI is run as nohup or CI runs it: stderr a pipe,
with COMPGEN_HEARTBEAT_SECONDS=0 so that every update is due."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys

import pytest

from verify import cli

FAST_SGD = ["--M", "4", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--steps", "5", "--eval-samples", "4",
            "--eval-tasks", "32", "--shapes", "matched"]
SMOKE_STUDY = ["verify.study", "run", "scaling-data", "--scale", "smoke", "--engine", "serial"]
EVERY_UPDATE = {**os.environ, cli.HEARTBEAT_ENV: "0"}


def run(argv: list[str], env=EVERY_UPDATE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=300, env=env)


# --- the helper ---------------------------------------------------------------------------

def test_a_heartbeat_prints_count_elapsed_eta_and_note_once_an_interval_has_passed(capsys):
    beat = cli.Heartbeat(10, "train x", "step", start=2, every=0.0)
    beat.update(3, "loss 1.00e-01")
    line = capsys.readouterr().err
    assert re.fullmatch(r"train x: step 3 of 10, \d+:\d\d elapsed, ETA \d+:\d\d, loss 1.00e-01\n", line), line
    # A count past its total (certify's seconds over a budget) has no time left, never a negative one.
    over = cli.Heartbeat(10, "certify", "second", every=0.0)
    over.update(12)
    assert "ETA 0:00" in capsys.readouterr().err
    quiet = cli.Heartbeat(10, "train x", "step", every=3600.0)
    quiet.update(5)
    assert capsys.readouterr().err == ""  # not every update: only once the interval has passed


def test_a_heartbeat_speaks_only_where_no_bar_is_shown(capsys, monkeypatch):
    monkeypatch.setenv(cli.HEARTBEAT_ENV, "0")
    for enabled in (False, True):  # --no-progress; a bar forced on
        cli.heartbeat(4, "study", enabled, unit="run").update(1)
    assert capsys.readouterr().err == ""
    cli.heartbeat(4, "study", None, unit="run").update(1)  # capsys's stderr is no terminal
    assert "study: run 1 of 4" in capsys.readouterr().err


@pytest.mark.parametrize("value,seconds", [("0", 0.0), ("2.5", 2.5), ("-1", cli.HEARTBEAT_SECONDS),
                                           ("soon", cli.HEARTBEAT_SECONDS), ("nan", cli.HEARTBEAT_SECONDS)])
def test_the_interval_comes_from_the_environment_and_a_wrong_value_keeps_the_default(monkeypatch, value,
                                                                                     seconds):
    monkeypatch.setenv(cli.HEARTBEAT_ENV, value)
    assert cli.heartbeat_seconds() == seconds


def test_a_training_off_a_terminal_prints_its_steps_and_a_rerun_says_where_it_resumed(tmp_path):
    first = run(["verify.sgd", *FAST_SGD, "--checkpoint", str(tmp_path)])
    assert first.returncode == 0, first.stderr
    steps = re.findall(r"step (\d) of 5, \d+:\d\d elapsed, ETA \d+:\d\d, loss \S+", first.stderr)
    assert steps and steps[-1] == "5", first.stderr
    again = run(["verify.sgd", *FAST_SGD, "--checkpoint", str(tmp_path)])
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("resumed at step 5 of 5") == 1, again.stderr
    assert "step 1 of 5" not in again.stderr  # nothing left to train
    silent = run(["verify.sgd", *FAST_SGD, "--checkpoint", str(tmp_path), "--no-progress"])
    assert silent.returncode == 0 and silent.stderr == "", silent.stderr


def test_an_image_training_off_a_terminal_prints_its_steps_and_its_generation(tmp_path):
    tiny = ["--preset", "tiny", "--steps", "3", "--batch", "4", "--eval-prompts", "3", "--n-seeds", "2",
            "--sample-steps", "2", "--threads", "1"]
    proc = run(["verify.images", "train", *tiny, "--out", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stderr
    steps = re.findall(r"train: step (\d) of 3, \d+:\d\d elapsed, ETA", proc.stderr)
    assert steps and steps[-1] == "3", proc.stderr
    images = re.findall(r"generate: image (\d+) of (\d+), \d+:\d\d elapsed, ETA", proc.stderr)
    assert images and images[-1][0] == images[-1][1], proc.stderr
    quiet = run(["verify.images", "train", *tiny, "--no-progress", "--out", str(tmp_path / "quiet")])
    assert quiet.returncode == 0 and "step" not in quiet.stderr and "image" not in quiet.stderr, quiet.stderr


def test_a_study_off_a_terminal_prints_its_runs(tmp_path):
    proc = run([*SMOKE_STUDY, "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    counts = re.findall(r"scaling-data \(smoke\): run (\d) of 4, \d+:\d\d elapsed, ETA", proc.stderr)
    assert counts and counts[-1] == "4", proc.stderr
    quiet = run([*SMOKE_STUDY, "--out", str(tmp_path / "quiet"), "--no-progress"])
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_a_study_interrupted_says_in_its_one_line_how_to_resume(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", *SMOKE_STUDY, "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=EVERY_UPDATE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stderr:  # the heartbeat's lines: interrupted once a run is done
        if "run 1 of 4" in line:
            proc.send_signal(signal.SIGINT)
            break
    else:
        pytest.fail(f"ended before the interrupt: {proc.communicate()}")
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, rest
    last = rest.splitlines()[-1]
    said = re.fullmatch(r"verify\.study: interrupted; no output file was left half-written; "
                        r"rerun the same command to resume: (\d) of 4 done", last)
    assert said, rest
    with sqlite3.connect(tmp_path / "study.sqlite") as db:
        stored = db.execute("SELECT count(*) FROM runs WHERE status = 'done'").fetchone()[0]
    assert int(said[1]) == stored >= 1
