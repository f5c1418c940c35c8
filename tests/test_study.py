"""python -m verify.study: study files, the SQLite store, engines, resumption and the effects table."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verify import study
from verify.effects import _support_effects, effects_table
from verify.store import RunStore, config_key

# The official grids (sweeps/*_hyperteacher.yaml): 6 K × 4 M × 8 fractions × 3 seeds, and so on.
PAPER_RUNS = {"scaling-data": 576, "scaling-model": 180, "task-support": 18, "scaling-law": 2700,
              "size-matched": 27}
TINY_GRID = """method: grid
name: tiny
parameters:
  M: {value: 4}
  K: {value: 2}
  I: {value: 2}
  H: {value: 2}
  O: {value: 2}
  width: {value: 4}
  depth: {value: 1}
  steps: {value: STEPS}
  tasks_per_batch: {value: 4}
  samples_per_task: {value: 4}
  eval_tasks: {value: 16}
  eval_samples: {value: 4}
  extra_modules: {value: 0}
  held_out: {values: HELD_OUT}
  seed: {values: SEEDS}
"""


def tiny_study(tmp_path, held_out="[0.25]", seeds="[1, 2]", steps=5, name="tiny.yaml") -> str:
    path = tmp_path / name
    text = TINY_GRID.replace("HELD_OUT", held_out).replace("SEEDS", seeds).replace("STEPS", str(steps))
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", sorted(PAPER_RUNS))
def test_every_study_has_the_official_grid_and_three_scales(name):
    assert len(study.expand(name, "paper")[1]) == PAPER_RUNS[name]
    for scale in ("cpu", "smoke"):
        _, runs = study.expand(name, scale)
        assert 0 < len(runs) < PAPER_RUNS[name]
        assert len({r.key for r in runs}) == len(runs)


def test_paper_scale_is_the_official_run():
    _, runs = study.expand("scaling-model", "paper")
    config = runs[0].config
    assert (config["steps"], config["tasks_per_batch"], config["samples_per_task"]) == (300_000, 128, 16)
    assert (config["I"], config["H"], config["O"], config["M"], config["K"]) == (16, 16, 16, 16, 3)
    assert {r.config["seed"] for r in runs} == {1, 2, 3}
    assert {tuple(r.config["widths"]) for r in runs} >= {(2048,) * 4, (128,) * 2}
    # The scaling-law grid crosses students: each run takes its own student's sizes.
    _, law = study.expand("scaling-law", "paper")
    students = {r.config["student"]: r.config for r in law}
    assert students["mlp"]["widths"] == [1024] * 4 and students["transformer"]["d_model"] == 256


def test_the_key_hashes_the_resolved_configuration():
    a = dict(M=4, K=2, widths=[8, 8])
    assert config_key(a) == config_key(dict(K=2, widths=[8, 8], M=4)) != config_key(dict(a, M=5))


def test_a_study_runs_once_and_a_second_invocation_trains_nothing(tmp_path):
    path = tiny_study(tmp_path)
    first = study.run_study(path, "paper", tmp_path / "out", engine="serial", progress=False)
    assert (first["runs"], first["done"], first["failed"]) == (2, 2, 0)
    again = study.run_study(path, "paper", tmp_path / "out", engine="serial", progress=False)
    assert (again["done"], again["already_done"]) == (0, 2)
    with RunStore(tmp_path / "out" / "study.sqlite") as store:
        rows = store.rows()
    assert [r["status"] for r in rows] == ["done", "done"] and all(r["attempts"] == 1 for r in rows)
    assert {r["config"]["seed"] for r in rows} == {1, 2}
    assert rows[0]["report"]["rows"][1]["network"] == "sgd custom"


def test_a_run_that_fails_is_stored_as_failed_and_the_others_finish(tmp_path):
    # held-out 0.95 of 10 supports leaves too few to connect the modules: verify.sgd refuses it.
    path = tiny_study(tmp_path, held_out="[0.25, 0.95]", seeds="[1]")
    s = study.run_study(path, "paper", tmp_path / "out", engine="serial", progress=False)
    assert (s["done"], s["failed"]) == (1, 1)
    with RunStore(tmp_path / "out" / "study.sqlite") as store:
        failed = store.rows(status="failed")
    assert len(failed) == 1 and "--held-out" in failed[0]["error"]
    again = study.run_study(path, "paper", tmp_path / "out", engine="serial", progress=False)
    assert (again["done"], again["failed"], again["skipped_failed"]) == (0, 0, 1)
    retried = study.run_study(path, "paper", tmp_path / "out", engine="serial", progress=False,
                              retry_failed=True)
    assert (retried["done"], retried["failed"]) == (0, 1)
    with RunStore(tmp_path / "out" / "study.sqlite") as store:
        assert store.rows(status="failed")[0]["attempts"] == 2


def test_a_driver_killed_mid_study_leaves_a_consistent_store_and_the_next_run_completes_it(tmp_path):
    """SIGKILL after the first run is stored: the file passes SQLite's integrity check, the
    finished run stays done, and the next invocation runs only the others."""
    path = tiny_study(tmp_path, seeds="[1, 2, 3, 4]", steps=400)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "verify.study", "run", path, "--scale", "paper",
                             "--engine", "serial", "--out", str(out), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    db = out / "study.sqlite"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        if db.is_file():
            with sqlite3.connect(db, timeout=30) as c:
                if c.execute("SELECT count(*) FROM runs WHERE status = 'done'").fetchone()[0] >= 1:
                    break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        statuses = dict(c.execute("SELECT key, status FROM runs"))
    n_done = list(statuses.values()).count("done")
    assert 1 <= n_done < 4
    s = study.run_study(path, "paper", out, engine="serial", progress=False)
    assert (s["already_done"], s["done"], s["failed"]) == (n_done, 4 - n_done, 0)


def test_a_smoke_study_through_a_local_ray_cluster_stores_every_row(tmp_path):
    pytest.importorskip("ray")
    s = study.run_study("task-support", "smoke", tmp_path / "out", engine="ray", workers=2, progress=False)
    assert (s["runs"], s["done"], s["failed"]) == (2, 2, 0)
    with RunStore(tmp_path / "out" / "study.sqlite") as store:
        rows = store.rows()
    assert sorted(r["config"]["split"] for r in rows) == ["non_compositional", "random"]
    assert all(r["status"] == "done" and r["report"]["rows"] for r in rows)


@pytest.mark.parametrize("grid,argv,message", [
    ("method: grid\nparameters:\n  colour: {value: red}\n", [], "unknown parameter 'colour'"),
    ("method: grid\nparameters:\n  M: {values: []}\n", [], "empty grid"),
    ("method: grid\nparameters: {}\n", [], "non-empty mapping"),
    ("method: random\nparameters:\n  M: {value: 4}\n", [], "grid file"),
    ("method: grid\nparameters:\n  M: {value: 4}\n", ["--scale", "cpu"], "has no 'cpu' scale"),
    ("method: grid\nparameters:\n  M: {value: 4}\n  K: {value: 5}\n", [], "at most"),
    ("method: grid\nparameters:\n  M: {value: 4}\n", ["--scale", "huge"], "invalid choice"),
    ("method: grid\nparameters: [\n", [], "not valid YAML"),
    (None, ["--engine", "ray", "--address", "ray://127.0.0.1:1"], "nothing answers at 127.0.0.1:1"),
    (None, ["--engine", "ray", "--address", "127.0.0.1:1"], "nothing answers at 127.0.0.1:1"),
    (None, ["--engine", "ray", "--address", "somewhere"], "expected auto, ray://HOST:PORT or HOST:PORT"),
])
def test_bad_studies_are_refused_with_one_line(tmp_path, capsys, grid, argv, message):
    if "--address" in argv:
        pytest.importorskip("ray")
    path = tmp_path / "s.yaml"
    if grid is None:
        path = Path(tiny_study(tmp_path))
    else:
        path.write_text(grid)
    out = tmp_path / "out"
    engine = [] if "--engine" in argv else ["--engine", "serial"]
    assert study.main(["run", str(path), "--scale", "paper", "--out", str(out), *engine, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and message in err, err
    assert not (out / "study.sqlite").exists()


def test_unknown_study_and_missing_results_are_usage_errors(tmp_path, capsys):
    assert study.main(["run", "no-such-study", "--engine", "serial"]) == 2
    assert "unknown study 'no-such-study'" in capsys.readouterr().err
    assert study.main(["report", "scaling-data", "--scale", "smoke", "--out", str(tmp_path / "empty")]) == 2
    assert "run `python -m verify.study run scaling-data --scale smoke` first" in capsys.readouterr().err


def test_report_and_export_read_the_store(tmp_path, capsys):
    path = tiny_study(tmp_path, held_out="[0.25, 0.5]", seeds="[1, 2]")
    out = tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)
    assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["group_by"] == ["held_out"] and [r["runs"] for r in table["rows"]] == [2, 2]
    with RunStore(out / "study.sqlite") as store:
        held = [r["report"]["rows"][1]["held_out_r2"] for r in store.rows()
                if r["config"]["held_out"] == 0.25]
    assert table["rows"][0]["held_out_r2_mean"] == pytest.approx(sum(held) / 2)
    assert (out / "effects.md").read_text().startswith("# tiny (paper): 4 runs done")
    assert study.main(["export", path, "--scale", "paper", "--out", str(out)]) == 0
    lines = (out / "runs.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("key,status,error")


def test_support_effects_are_called_against_random_and_a_disagreement_is_reported():
    def row(split, mean, sd=0.0, runs=3):
        return dict(split=split, network="custom", held_out_r2_mean=mean, held_out_r2_sd=sd, runs=runs)

    rows = [row("random", 0.95, 0.01), row("non_compositional", 0.80, 0.01),
            row("popular_modules", 0.949, 0.01), row("unpopular_modules", 0.96, 0.01)]
    _support_effects(rows, [])
    by = {r["split"]: r for r in rows}
    assert by["non_compositional"]["effect_vs_random"].endswith("(hurts)")
    assert by["non_compositional"]["agrees"] == "yes"
    assert by["popular_modules"]["agrees"] == "yes"  # −0.001: no clear effect, as the paper says
    assert by["unpopular_modules"]["agrees"] == "NO"  # the paper says rare modules hurt; here they do not
    assert "agrees" not in by["random"]


def test_effects_table_puts_the_papers_encoding_numbers_beside_the_measured_ones(tmp_path):
    out = tmp_path
    with RunStore(out / "study.sqlite") as store:
        for i, (encoding, r2) in enumerate((("identity", 0.99), ("tokens", 0.7))):
            report = dict(split=dict(n_train=27), construction_within_certificate=True,
                          rows=[dict(network="construction"), dict(network="sgd custom", train_r2=0.995,
                                                                    held_out_r2=r2, held_out_sup=1.0)])
            config = dict(encoding=encoding, seed=1)
            store.start(config_key(config), "scaling-model", "cpu", config)
            store.finish(config_key(config), report, 1.0 + i)
    table = effects_table("scaling-model", "cpu", out)
    assert [(r["encoding"], r["held_out_r2_mean"], r["paper_held_out_r2"]) for r in table["rows"]] == [
        ("identity", 0.99, 1.0), ("tokens", 0.7, 1.0)]


def test_ctrl_c_stops_a_study_with_one_line_and_leaves_the_store_intact(tmp_path):
    """Interrupted while its first run trains: exit 130 and one line; the store is intact,
    the interrupted run is not done (the next invocation starts it again, from its
    checkpoint: tests/test_sgd.py checks that a resumed run ends as an uninterrupted one)."""
    from tests.test_promises import interruptible

    path = tiny_study(tmp_path, seeds="[1, 2]", steps=200_000)
    out = tmp_path / "out"
    proc = interruptible(["verify.study", "run", path, "--scale", "paper", "--engine", "serial",
                          "--out", str(out), "--no-progress"])
    deadline = time.monotonic() + 120
    while not list(out.glob("runs/*/*.ckpt")):  # a checkpoint: training is well under way
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.count("\n") == 1 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    with sqlite3.connect(out / "study.sqlite") as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [s for (s,) in c.execute("SELECT status FROM runs")] == ["running"]


def test_the_report_shows_only_the_grid_as_it_is_now(tmp_path, capsys):
    """Runs of an earlier version of the grid stay in the store but are not averaged in."""
    out = tmp_path / "out"
    study.run_study(tiny_study(tmp_path, seeds="[1]"), "paper", out, engine="serial", progress=False)
    path = tiny_study(tmp_path, seeds="[1]", steps=6)  # a changed grid: a new key
    assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["runs_done"] == 0 and table["rows"] == []
    assert any("earlier version of the grid" in n for n in table["notes"])
    assert any("1 of the grid's 1 runs have no result yet" in n for n in table["notes"])
