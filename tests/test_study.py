"""python -m verify.study: study files, the SQLite store, engines, resumption and the effects table.

Studies run serially and through a local Ray cluster; a driver killed with SIGKILL mid-study
leaves a store that passes SQLite's integrity check, and the next invocation runs only the
missing runs; a failing run is stored as failed; Ctrl-C interrupts a run; bad grid files are
refused.
"""

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_pack import same_metrics
from verify.learning.families import HyperteacherFamily
from verify.learning.records import lookup
from verify.studies import commands as study
from verify.studies import grids, provenance, staged
from verify.studies.effects import _claim_effects, effects_table
from verify.studies.store import RunStore, config_key

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
    """The cpu and smoke scales are reductions of the paper's grid in training steps summed
    over runs; a scale may run more seeds than the paper's 3 where its power calculation asks
    for them (task-support's cpu scale: 5)."""
    paper = study.expand(name, "paper")[1]
    assert len(paper) == PAPER_RUNS[name]
    for scale in ("cpu", "smoke"):
        _, runs = study.expand(name, scale)
        assert 0 < len(runs) and sum(r.config["steps"] for r in runs) < sum(r.config["steps"] for r in paper)
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


def test_run_on_a_complete_committed_store_says_so_and_how_to_run_into_a_folder_of_ones_own(
        tmp_path, monkeypatch, capsys):
    """In the checkout `run` writes by default into the committed store; on a complete one it
    printed "0 done now". Now one line says the store is complete and names --out DIR."""
    path = tiny_study(tmp_path)
    monkeypatch.setattr(grids, "PACKAGED_RESULTS_DIR", tmp_path / "shipped")
    store = tmp_path / "shipped" / "tiny" / "paper"
    argv = ["run", path, "--scale", "paper", "--engine", "serial", "--no-progress", "--out", str(store)]
    assert study.main(argv) == 0
    assert "2 done now" in capsys.readouterr().out  # a run that runs something says what it did
    assert study.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "0 done now" not in out, out
    assert f"the committed store {store / 'study.sqlite'} is complete (2 of 2 runs)" in out
    assert "python -m verify.study run tiny --scale paper --out DIR" in out
    # Another folder, complete too, keeps the counts.
    other = tmp_path / "mine"
    assert study.main([*argv[:-1], str(other)]) == 0 and study.main([*argv[:-1], str(other)]) == 0
    assert "0 done now, 2 already done" in capsys.readouterr().out


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
    # Each worker records the code it ran (here the same as the driver's).
    assert {(r["code_version"], r["code_fingerprint"]) for r in rows} == {
        (provenance.code_version(), provenance.code_fingerprint())}


def test_a_pack_is_one_ray_task_whose_runs_are_stored_one_by_one(tmp_path):
    """The task-support smoke study's two runs (two splits) as one pack on Ray."""
    pytest.importorskip("ray")
    s = study.run_study("task-support", "smoke", tmp_path / "out", engine="ray", workers=1, progress=False,
                        pack=2)
    assert (s["runs"], s["done"], s["failed"]) == (2, 2, 0)
    with RunStore(tmp_path / "out" / "study.sqlite") as store:
        rows = store.rows()
    assert [r["report"]["rows"][-1]["packed_with"] for r in rows] == [2, 2]
    assert len({json.dumps(r["report"]["split"]) for r in rows}) == 2


@pytest.mark.parametrize("grid,argv,message", [
    ("method: grid\nparameters:\n  colour: {value: red}\n", [], "unknown parameter 'colour'"),
    ("method: grid\nparameters:\n  M: {values: []}\n", [], "empty grid"),
    ("method: grid\nparameters: {}\n", [], "non-empty mapping"),
    ("method: random\nparameters:\n  M: {value: 4}\n", [], "grid file"),
    ("method: grid\nparameters:\n  M: {value: 4}\n", ["--scale", "cpu"], "has no 'cpu' scale"),
    ("method: grid\nparameters:\n  M: {value: 4}\n  K: {value: 5}\n", [], "at most"),
    ("method: grid\nparameters:\n  M: {value: 4}\n", ["--scale", "huge"], "invalid choice"),
    ("method: grid\nparameters: [\n", [], "not valid YAML"),
    ("method: grid\nparameters:\n  M: {value: 4}\nalso: {M: 5}\n", [], "list of `parameters:` blocks"),
    ("method: grid\nparameters:\n  M: {value: 4}\nalso:\n  - parameters: {colour: {value: red}}\n", [],
     "also[0]: unknown parameter 'colour'"),
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


def test_also_adds_grids_beside_the_main_one_without_multiplying_it(tmp_path):
    """A ladder along width at every M, and one along the held-out fraction at the widest rung
    only: 2 × 2 + 2 × 2 runs, one of each extra ladder's points already in the main grid."""
    path = tmp_path / "also.yaml"
    path.write_text(TINY_GRID.replace("HELD_OUT", "[0.25]").replace("SEEDS", "[1]").replace("STEPS", "5")
                    .replace("  M: {value: 4}", "  M: {values: [4, 5]}")
                    .replace("  width: {value: 4}", "  width: {values: [2, 4]}")
                    + "scales:\n  smoke:\n    parameters: {steps: {value: 3}}\n    also:\n"
                    "      - parameters: {width: {value: 4}, held_out: {values: [0.25, 0.5]}}\n")
    _, runs = study.expand(str(path), "smoke")
    points = sorted((r.params["M"], r.params["width"], r.params["held_out"]) for r in runs)
    assert points == [(4, 2, 0.25), (4, 4, 0.25), (4, 4, 0.5), (5, 2, 0.25), (5, 4, 0.25), (5, 4, 0.5)]
    assert {r.params["steps"] for r in runs} == {3}  # the scale's own parameters hold in its `also` too
    # The paper scale has no `also` here: the main grid alone.
    assert len(study.expand(str(path), "paper")[1]) == 4


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
        held = [lookup(r["report"]["metrics"], r["report"]["rows"][1]["network"], "held_out", "r2")
                for r in store.rows() if r["config"]["held_out"] == 0.25]
    assert table["rows"][0]["held_out_r2_mean"] == pytest.approx(sum(held) / 2)
    assert (out / "effects.md").read_text().startswith("# tiny (paper): 4 runs done")
    assert study.main(["export", path, "--scale", "paper", "--out", str(out)]) == 0
    lines = (out / "runs.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("key,status,error")


# Both arms fit their training tasks (issue 43: a held-out claim is tested only then).
FIT = dict(converged=True, train_metric="train_r2", train_r2_mean=0.995)


def test_support_effects_are_called_against_random_and_a_disagreement_is_reported():
    """Three seeds a support, paired by seed (the task-support study's plan): a clear drop
    hurts, a difference of −0.001 is within δ (×1.25 of the unexplained variance: ×1.02 here),
    and rare modules that help (half the unexplained variance) contradict the paper."""
    values = {"random": (0.94, 0.95, 0.96), "non_compositional": (0.79, 0.80, 0.81),
              "popular_modules": (0.939, 0.949, 0.959), "unpopular_modules": (0.97, 0.975, 0.98)}
    rows = [dict(split=split, network="custom", held_out_r2_mean=sum(v) / 3, held_out_r2_sd=0.01, runs=3,
                 family="hyperteacher", effect_metric="held_out_r2", **FIT) for split, v in values.items()]
    seed_values = {id(r): dict(enumerate(values[r["split"]], 1)) for r in rows}
    seed_values |= {(id(r), side): dict(enumerate((0.995, 0.995, 0.995), 1)) for r in rows
                    for side in ("train", "train_headline")}
    notes = []
    # The study's claims in a fixed design (its file adds a sequential plan: tests/test_staged.py).
    fixed = dataclasses.replace(study.study_plan("task-support"), looks=None)
    _claim_effects(rows, ["split"], notes, fixed, seed_values)
    by = {r["split"]: r for r in rows}
    assert by["non_compositional"]["effect_vs_random"] == "-0.150 (hurts)"
    assert by["non_compositional"]["agrees"] == "yes"
    # ×1.02 of the unexplained variance, seed after seed: a real difference, and inside δ.
    assert by["popular_modules"]["effect_vs_random"] == "-0.001 (trivial)"
    assert by["popular_modules"]["agrees"] == "yes"
    assert by["unpopular_modules"]["agrees"] == "NO"  # the paper says rare modules hurt; here they help
    assert "agrees" not in by["random"]
    assert by["unpopular_modules"]["effect_vs_random"] == "+0.025 (helps)"
    # Every claim has its δ on both sides: a difference test and a TOST each, 6 in the family.
    assert any("paired t-test" in n and "Holm-corrected over the study's 6 tests" in n for n in notes)


def test_a_claim_on_another_setting_compares_its_treatment_with_its_control_in_each_cell():
    """scaling-data's claim (a quarter held out beats three quarters, paired by seed) within
    each M: the middle fraction is not compared, a cell that lacks its control is skipped, and
    a drop where the paper claims help is a disagreement."""
    values = {(8, 0.25): (0.90, 0.91, 0.92), (8, 0.5): (0.85, 0.86, 0.87), (8, 0.75): (0.80, 0.815, 0.83),
              (16, 0.25): (0.70, 0.71, 0.72), (16, 0.75): (0.80, 0.81, 0.82), (24, 0.25): (0.9, 0.9, 0.9)}
    rows = [dict(M=M, held_out=h, network="custom", held_out_r2_mean=sum(v) / 3, family="hyperteacher",
                 effect_metric="held_out_r2", **FIT) for (M, h), v in values.items()]
    seed_values = {id(r): dict(enumerate(values[r["M"], r["held_out"]], 1)) for r in rows}
    seed_values |= {(id(r), side): dict(enumerate((0.995, 0.995, 0.995), 1)) for r in rows
                    for side in ("train", "train_headline")}
    notes = []
    # The study's claim in a fixed design (its file adds a sequential plan: tests/test_staged.py).
    fixed = dataclasses.replace(study.study_plan("scaling-data"), looks=None)
    _claim_effects(rows, ["M", "held_out"], notes, fixed, seed_values)
    by = {(r["M"], r["held_out"]): r for r in rows}
    assert by[8, 0.25]["compared_with"] == "held_out 0.75" and by[8, 0.25]["effect"] == "+0.095 (helps)"
    assert (by[8, 0.25]["paper_effect"], by[8, 0.25]["agrees"]) == ("helps", "yes")
    assert by[16, 0.25]["effect"] == "-0.100 (hurts)" and by[16, 0.25]["agrees"] == "NO"
    for cell in ((8, 0.5), (8, 0.75), (16, 0.75), (24, 0.25)):
        assert "effect" not in by[cell] and "agrees" not in by[cell]
    assert any("Holm-corrected over the study's 4 tests" in n for n in notes)
    assert any(n.startswith("seeds for 80% power at α = 0.05/4: hyperteacher custom, M 8: held_out 0.25 vs "
                            "0.75") for n in notes)


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
    # A checkpoint every 60 ms of wall-clock time, so that one is written well before the Ctrl-C.
    proc = interruptible(["verify.study", "run", path, "--scale", "paper", "--engine", "serial",
                          "--out", str(out), "--no-progress", "--checkpoint-minutes", "0.001"])
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


# ----------------------------------------------------------------------------- the code behind a result

OLD_SCHEMA = """CREATE TABLE runs (key TEXT PRIMARY KEY, study TEXT NOT NULL, scale TEXT NOT NULL,
    config TEXT NOT NULL, status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    report TEXT, error TEXT, seconds REAL, attempts INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL)"""
OLD_COLUMNS = "key, study, scale, config, status, report, error, seconds, attempts, updated"


def columns(db: Path) -> list[str]:
    with sqlite3.connect(db) as c:
        return [row[1] for row in c.execute("PRAGMA table_info(runs)")]


def as_old_store(db: Path) -> None:
    """Rewrite a store as one written before runs recorded their code (no code columns)."""
    with sqlite3.connect(db) as c:
        c.execute(f"CREATE TABLE old AS SELECT {OLD_COLUMNS} FROM runs")
        c.execute("DROP TABLE runs")
        c.execute(OLD_SCHEMA)
        c.execute(f"INSERT INTO runs ({OLD_COLUMNS}) SELECT {OLD_COLUMNS} FROM old")
        c.execute("DROP TABLE old")
    assert "code_fingerprint" not in columns(db)


def test_a_run_records_its_code_and_one_made_by_other_code_is_marked_and_rerun(tmp_path, monkeypatch,
                                                                              capsys):
    path, out = tiny_study(tmp_path), tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)
    made_by = provenance.code_fingerprint()
    with RunStore(out / "study.sqlite") as store:
        rows = store.rows()
    version = provenance.code_version()
    assert {(r["code_fingerprint"], r["code_version"]) for r in rows} == {(made_by, version)}
    assert len(made_by) == 64 and provenance.code_version() not in ("", "unknown")
    assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert (table["runs_other_code"], table["runs_unknown_code"]) == (0, 0)
    assert "code" not in table["columns"] and not any("--rerun-stale" in n for n in table["notes"])

    # The code's text changes, its behaviour does not (a refactor): the runs stay current.
    monkeypatch.setattr(provenance, "code_fingerprint", lambda *program: "e" * 64)
    same = study.run_study(path, "paper", out, engine="serial", progress=False)
    assert (same["done"], same["already_done"], same["stale"]) == (0, 2, 0)
    assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs_other_code"] == 0

    # The code changes what it computes (the loss): the stored runs were made by other code.
    loss = HyperteacherFamily.loss
    monkeypatch.setattr(HyperteacherFamily, "loss", lambda self, pred, batch: 1.5 * loss(self, pred, batch))
    monkeypatch.setattr(provenance, "code_fingerprint", lambda *program: "f" * 64)
    kept = study.run_study(path, "paper", out, engine="serial", progress=False)
    assert (kept["done"], kept["already_done"], kept["stale"], kept["stale_unknown"]) == (0, 2, 2, 0)
    assert kept["stale_fingerprints"] == [made_by] and kept["code_fingerprint"] == "f" * 64
    line = study.format_summary(kept).splitlines()[-1]
    assert line.startswith("2 of 2 done runs were not made by this code (fingerprint ffffffffffff)")
    assert f"2 by other code (fingerprint {made_by[:12]})" in line and "--rerun-stale" in line
    assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert (table["runs_other_code"], table["runs_unknown_code"]) == (2, 0)
    assert table["columns"][-1] == "code" and [r["code"] for r in table["rows"]] == ["other (2 of 2)"]
    assert any(n.startswith("2 of 2 done runs were not made by this code") and "--rerun-stale" in n
               for n in table["notes"])
    assert "| other (2 of 2) |" in (out / "effects.md").read_text()

    rerun = study.run_study(path, "paper", out, engine="serial", progress=False, rerun_stale=True)
    assert (rerun["done"], rerun["already_done"], rerun["stale"]) == (2, 0, 0)
    with RunStore(out / "study.sqlite") as store:
        rows = store.rows()
    assert [(r["code_fingerprint"], r["attempts"]) for r in rows] == [("f" * 64, 2)] * 2
    assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert (table["runs_other_code"], "code" in table["columns"]) == (0, False)


def test_rerun_stale_reruns_failed_runs_made_by_other_code_and_leaves_current_ones(tmp_path, monkeypatch):
    path, out = tiny_study(tmp_path, held_out="[0.25, 0.95]", seeds="[1]"), tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)  # one done, one failed
    same = study.run_study(path, "paper", out, engine="serial", progress=False, rerun_stale=True)
    assert (same["done"], same["failed"], same["skipped_failed"], same["stale"]) == (0, 0, 1, 0)
    monkeypatch.setattr(provenance, "code_fingerprint", lambda *program: "e" * 64)
    refactored = study.run_study(path, "paper", out, engine="serial", progress=False, rerun_stale=True)
    assert (refactored["done"], refactored["failed"], refactored["skipped_failed"]) == (0, 1, 0)
    loss = HyperteacherFamily.loss
    monkeypatch.setattr(HyperteacherFamily, "loss", lambda self, pred, batch: 2 * loss(self, pred, batch))
    monkeypatch.setattr(provenance, "code_fingerprint", lambda *program: "d" * 64)
    again = study.run_study(path, "paper", out, engine="serial", progress=False, rerun_stale=True)
    assert (again["done"], again["failed"], again["skipped_failed"]) == (1, 1, 0)


def test_an_old_store_reads_as_unknown_code_is_migrated_on_write_and_rerun_stale_recomputes_it(
        tmp_path, capsys):
    path, out = tiny_study(tmp_path), tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)
    db = out / "study.sqlite"
    as_old_store(db)
    before = db.read_bytes()
    # Read-only (report, list, figures): the file is not touched; the code reads as unknown.
    with RunStore(db, readonly=True) as store:
        assert [r["code_fingerprint"] for r in store.rows()] == [None, None]
        assert set(store.fingerprints().values()) == {None}
    assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert (table["runs_done"], table["runs_unknown_code"], table["runs_other_code"]) == (2, 2, 0)
    assert [r["code"] for r in table["rows"]] == ["unknown (2 of 2)"]
    assert any(n.startswith("2 of 2 done runs were not made by this code: 2 by unknown code (stored before "
                            "runs recorded their code)") for n in table["notes"])
    assert db.read_bytes() == before and "code_fingerprint" not in columns(db)
    # run opens it for writing: the columns are added, old rows stay, with no code.
    kept = study.run_study(path, "paper", out, engine="serial", progress=False)
    assert (kept["done"], kept["already_done"], kept["stale"], kept["stale_unknown"]) == (0, 2, 2, 2)
    assert columns(db)[-4:] == ["code_version", "code_fingerprint", "behaviour", "attested"]
    with RunStore(db) as store:
        assert [(r["status"], r["code_version"], r["code_fingerprint"]) for r in store.rows()] == [
            ("done", None, None)] * 2
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rerun = study.run_study(path, "paper", out, engine="serial", progress=False, rerun_stale=True)
    assert (rerun["done"], rerun["stale"]) == (2, 0)
    with RunStore(db) as store:
        assert {r["code_fingerprint"] for r in store.rows()} == {provenance.code_fingerprint()}


FINGERPRINT = "from verify.studies import provenance; print(provenance.code_fingerprint())"


def test_the_fingerprint_hashes_the_modules_a_result_depends_on_wherever_they_are_installed(tmp_path):
    """A copy of the packages elsewhere (as a wheel installs them) has the same fingerprint;
    an edit to a module that trains or scores changes it, one to the CLI plumbing does not."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    for package in ("theory", "constructions", "verify"):
        shutil.copytree(root / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "results"))

    def fingerprint(where: Path = tmp_path) -> str:
        proc = subprocess.run([sys.executable, "-c", FINGERPRINT], cwd=where, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(where)})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    copied = fingerprint()
    assert copied == fingerprint(root) and len(copied) == 64
    for plumbing in ("verify/cli.py", "verify/studies/effects.py", "verify/studies/store.py",
                     "verify/studies/commands.py", "verify/study.py"):
        with open(tmp_path / plumbing, "a") as f:
            f.write("\n# an edit that changes no result\n")
    assert fingerprint() == copied
    seen = {copied}
    changed = ("verify/learning/train.py", "verify/learning/metrics.py",
               "verify/learning/families/hyperteacher.py", "verify/learning/families/base.py",
               "constructions/tasks/hyperteacher.py", "constructions/tasks/preference.py", "theory/bounds.py")
    for module in changed:
        with open(tmp_path / module, "a") as f:
            f.write("\n# changed\n")
        seen.add(fingerprint())
    assert len(seen) == len(changed) + 1


STUDENT_MODULES = """
import sys
from verify.learning import sgd_program as sgd
FAST = ["--M", "4", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--steps", "2", "--eval-samples", "4",
        "--eval-tasks", "16", "--no-progress"]
for extra in (["--widths", "4"], ["--student", "transformer", "--d-model", "8", "--n-heads", "2",
              "--n-layers", "1", "--d-ffw", "8"], ["--student", "hypernetwork", "--d-ffw", "8"],
              ["--encoding", "invertible_nn", "--split", "non_compositional"]):
    sgd.run(sgd.parse_args([*FAST, "--shapes", "custom", *extra] if "--widths" in extra else [*FAST, *extra]))
sgd.run(sgd.parse_args(["--family", "preference", "--M", "4", "--K", "2", "--F", "4", "--steps", "2",
                        "--eval-tasks", "16", "--widths", "4", "--no-progress"]))
print(" ".join(m for m in sys.modules if m.split(".")[0] in ("theory", "constructions", "verify")))
"""


def test_every_project_module_a_run_loads_is_fingerprinted_or_named_as_changing_no_result():
    proc = subprocess.run([sys.executable, "-c", STUDENT_MODULES], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert {"verify.learning.train", "verify.learning.metrics", "verify.learning.students",
            "verify.learning.families", "verify.theorem.measure", "constructions.tasks.hyperteacher",
            "constructions.tasks.preference", "constructions.tasks.encodings"} <= loaded
    assert loaded - set(provenance.code_modules()) <= set(provenance.NOT_RESULT_CODE), \
        loaded - set(provenance.code_modules()) - set(provenance.NOT_RESULT_CODE)
    assert not set(provenance.code_modules()) & set(provenance.NOT_RESULT_CODE)


def test_the_fingerprint_names_the_theorem_modules_where_they_live():
    """A run rests on verify.theorem.measure and presets (issue 44, part 11 moved them); the old
    names, verify.measure and verify.presets, are aliases no run imports, so they are not in it."""
    for program in ("verify.sgd", "verify.kernel"):
        modules = set(provenance.code_modules(program))
        assert {"verify.theorem", "verify.theorem.measure", "verify.theorem.presets"} <= modules, program
        assert not modules & {"verify.measure", "verify.presets", "verify.bound", "verify.check"}, program


# ----------------------------------------------------------------------------- where stores live

def test_run_writes_under_the_working_folder_and_report_reads_the_committed_store_otherwise(
        tmp_path, monkeypatch, capsys):
    import hashlib

    monkeypatch.chdir(tmp_path)
    shipped = grids.PACKAGED_RESULTS_DIR / "task-support" / "cpu"
    digest = hashlib.sha256((shipped / "study.sqlite").read_bytes()).hexdigest()
    shipped_md = (shipped / "effects.md").read_text()
    here = Path("verify/studies/results/task-support")
    args = study.parse_args(["run", "task-support", "--scale", "smoke", "--engine", "serial"])
    assert args.out == here / "smoke" and (tmp_path / here / "smoke").is_dir()
    assert study.stored_out("task-support", "cpu") == shipped  # nothing here: the committed store
    grid = {r.key for r in staged.planned_runs("task-support", "cpu", shipped)[1]}  # with the plan's seeds
    with RunStore(shipped / "study.sqlite", readonly=True) as store:
        stored = [(r["key"], r["status"], r["code_fingerprint"]) for r in store.rows()]
    done = [(k, f) for k, status, f in stored if status == "done" and k in grid]
    assert study.main(["report", "task-support", "--scale", "cpu", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert (table["runs_done"], table["runs_unknown_code"]) == (len(done), sum(f is None for _, f in done))
    assert (tmp_path / here / "cpu" / "effects.md").read_text().startswith(
        f"# task-support (cpu): {len(done)} runs")
    assert not (tmp_path / here / "cpu" / "study.sqlite").exists()
    assert hashlib.sha256((shipped / "study.sqlite").read_bytes()).hexdigest() == digest
    assert (shipped / "effects.md").read_text() == shipped_md
    assert study.main(["list"]) == 0
    in_grid = [status for key, status, _ in stored if key in grid]
    assert f"cpu {len(grid)} ({in_grid.count('done')} done, {in_grid.count('failed')} failed" \
        in capsys.readouterr().out
    # A store in the working folder wins over the committed one.
    run = study.expand("task-support", "cpu")[1][0]
    report = dict(split=dict(n_train=27), construction_within_certificate=True,
                  rows=[dict(network="construction"), dict(network="sgd custom", train_r2=0.995,
                                                            held_out_r2=0.5, held_out_sup=1.0)])
    with RunStore(tmp_path / here / "cpu" / "study.sqlite") as store:
        store.start(run.key, "task-support", "cpu", run.config)
        store.finish(run.key, report, 1.0, version="0", fingerprint=provenance.code_fingerprint())
    assert study.stored_out("task-support", "cpu") == here / "cpu"
    assert study.main(["report", "task-support", "--scale", "cpu", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert (table["runs_done"], table["runs_unknown_code"], table["rows"][0]["code"]) == (1, 0, "current")


def test_packed_runs_store_what_the_runs_alone_store(tmp_path):
    """--pack 3 on four runs of one shape (two seeds × two held-out fractions): a pack of three
    and one run alone, each stored with the metrics its run alone gives, marked packed_with."""
    path = tiny_study(tmp_path, held_out="[0.25, 0.5]", seeds="[1, 2]", steps=8)
    alone = study.run_study(path, "paper", tmp_path / "alone", engine="serial", progress=False)
    packed = study.run_study(path, "paper", tmp_path / "packed", engine="serial", progress=False, pack=3)
    assert alone["done"] == packed["done"] == 4
    with RunStore(tmp_path / "alone" / "study.sqlite", readonly=True) as a, \
            RunStore(tmp_path / "packed" / "study.sqlite", readonly=True) as b:
        reports = {r["key"]: r["report"] for r in a.rows()}
        packs = sorted(r["report"]["rows"][-1].get("packed_with", 1) for r in b.rows())
        assert packs == [1, 3, 3, 3]
        for r in b.rows():  # equal up to float32 training's rounding (tests/test_pack.py)
            assert same_metrics(r["report"]["metrics"], reports[r["key"]]["metrics"])


def test_pack_refuses_a_grid_whose_runs_train_several_students(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text(TINY_GRID.replace("  width: {value: 4}\n  depth: {value: 1}\n", "")
                    .replace("HELD_OUT", "[0.25]").replace("SEEDS", "[1]").replace("STEPS", "5"))
    assert study.main(["run", str(path), "--scale", "paper", "--engine", "serial", "--pack", "2",
                       "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a pack takes runs of one student each" in err, err
    assert not (tmp_path / "out" / "study.sqlite").exists()


def test_the_folders_a_run_makes_in_a_working_folder_do_not_hide_the_installed_packages(tmp_path):
    """Outside the checkout, `run` makes verify/studies/results/… and the figures make
    paper_figures/…: with python -m, the working folder comes first on sys.path, and an
    editable install whose packages are found after the path search (setuptools' finder)
    would import those empty folders as the packages. pyproject's package-dir makes it a path."""
    for folder in ("verify/studies/results/task-support/smoke", "paper_figures/output", "theory"):
        (tmp_path / folder).mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "verify.study", "list"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "task-support" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "paper_figures", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python -m paper_figures"), proc.stderr


def test_run_all_runs_every_study_in_turn_and_resumes_where_each_store_stopped(tmp_path, monkeypatch, capsys):
    """One command for a scale's whole evidence: each study into its own folder under the
    working folder; a second invocation runs nothing that is done."""
    monkeypatch.chdir(tmp_path)
    names = [tiny_study(tmp_path, seeds="[1]", name="one.yaml"), tiny_study(tmp_path, seeds="[1, 2]",
                                                                            name="two.yaml")]
    monkeypatch.setattr(study, "study_names", lambda: names)
    argv = ["run", "all", "--scale", "paper", "--engine", "serial", "--no-progress", "--json"]
    def summaries(text: str) -> list[dict]:  # one JSON summary per study, one after another
        out, at, decoder = [], 0, json.JSONDecoder()
        while text[at:].strip():
            value, at = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
            out.append(value)
        return out

    assert study.main(argv) == 0
    first = summaries(capsys.readouterr().out)
    assert [(s["done"], s["already_done"]) for s in first] == [(1, 0), (2, 0)]
    for name in ("one", "two"):
        assert (tmp_path / "verify/studies/results" / name / "paper" / "study.sqlite").is_file()
    assert study.main(argv) == 0
    assert [(s["done"], s["already_done"]) for s in summaries(capsys.readouterr().out)] == [(0, 1), (0, 2)]
    with pytest.raises(study.UsageError, match="--out applies to one study"):
        study.parse_args(["run", "all", "--out", str(tmp_path / "x"), "--engine", "serial"])


# ----------------------------------------------------------------------------- damaged stores

ROOT = Path(__file__).resolve().parents[1]
SMOKE_FOLDER = Path("verify/studies/results/task-support/smoke")  # where list and budget look, under cwd
RUN_SMOKE = ["run", "task-support", "--scale", "smoke", "--engine", "serial", "--no-progress"]
READERS = {"report": ["report", "task-support", "--scale", "smoke"],
           "export": ["export", "task-support", "--scale", "smoke"], "list": ["list"],
           "budget": ["budget", "--scale", "smoke"], "run": RUN_SMOKE}


def verify_study(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """python -m verify.study as a user runs it, from `cwd`, with this checkout's code."""
    return subprocess.run([sys.executable, "-m", "verify.study", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def smoke_store(tmp_path_factory) -> bytes:
    """The bytes of a sound task-support smoke store (2 runs)."""
    out = tmp_path_factory.mktemp("sound") / SMOKE_FOLDER
    study.run_study("task-support", "smoke", out, engine="serial", progress=False)
    return (out / "study.sqlite").read_bytes()


def _sql(statement: str):
    def damage(db: Path) -> None:
        with sqlite3.connect(db) as c:
            c.execute(statement)
        c.close()
    return damage


DAMAGES = {
    "truncated": lambda db: db.write_bytes(db.read_bytes()[:db.stat().st_size // 2]),
    "random bytes": lambda db: db.write_bytes(bytes(range(256)) * 32),
    "empty": lambda db: db.write_bytes(b""),
    "renamed column": _sql("ALTER TABLE runs RENAME COLUMN status TO state"),
    "report not JSON": _sql("""UPDATE runs SET report = '{"rows": [' WHERE status = 'done'"""),
    # A report of an unknown format: only the commands that read reports (report, export) refuse.
    "report of another format": _sql("""UPDATE runs SET report = '{"format": 2}' WHERE status = 'done'"""),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_store_is_refused_in_one_line_naming_it_and_left_as_it_was(tmp_path, smoke_store, damage):
    """Each command that reads the store: exit 2, one stderr line naming the file, no traceback;
    the file's bytes and mtime unchanged, nothing written beside it (no journal; `run` leaves
    only its lock file)."""
    db = tmp_path / SMOKE_FOLDER / "study.sqlite"
    db.parent.mkdir(parents=True)
    db.write_bytes(smoke_store)
    DAMAGES[damage](db)
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(p.name for p in db.parent.iterdir()))
    for command, argv in READERS.items():
        proc = verify_study(argv, tmp_path)
        # Only the commands that read reports refuse one of another format: report and export,
        # and, for a study with a sequential plan (task-support's), every command that replays
        # the plan on its reports (list, and budget, which counts the plan's runs; run without
        # --until-decided runs the grid).
        sequential = study.study_plan("task-support").looks is not None
        refuses = (damage != "report of another format" or command in ("report", "export")
                   or (sequential and command in ("list", "budget")))
        assert proc.returncode == (2 if refuses else 0), (command, proc.stderr)
        if refuses:
            err = proc.stderr
            assert err.count("\n") == 1 and str(SMOKE_FOLDER / "study.sqlite") in err, (command, err)
            assert "Traceback" not in err and "a bug" not in err, (command, err)
        files = sorted(p.name for p in db.parent.iterdir() if p.name != "study.lock")
        assert (db.read_bytes(), db.stat().st_mtime_ns, files) == before, (command, "altered the store")


def test_a_write_left_half_done_by_a_killed_driver_is_named_by_readers_and_rolled_back_by_run(
        tmp_path, smoke_store):
    """A hot journal (a driver killed mid-transaction): a read-only reader cannot read past
    it and says so in one line; the next `run` rolls it back and finds the store as it was."""
    db = tmp_path / SMOKE_FOLDER / "study.sqlite"
    db.parent.mkdir(parents=True)
    db.write_bytes(smoke_store)
    writer = ("import sqlite3, sys, time\n"
              "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
              "db.execute('PRAGMA cache_size = 1')  # spill the transaction's pages to the file\n"
              "db.execute('BEGIN IMMEDIATE')\n"
              "for i in range(2000):\n"
              "    db.execute(\"INSERT INTO runs (key, study, scale, config, status, updated) VALUES \"\n"
              "               \"(?, 's', 'smoke', '{}', 'running', 0)\", (f'{i:0300d}',))\n"
              "print('written', flush=True)\n"
              "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", writer, str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "written\n"
    proc.kill()
    proc.wait(timeout=30)
    assert (db.parent / "study.sqlite-journal").is_file()
    report = verify_study(READERS["report"], tmp_path)
    assert report.returncode == 2 and report.stderr.count("\n") == 1, report.stderr
    assert "a driver was killed while writing it" in report.stderr
    run = verify_study(RUN_SMOKE, tmp_path)
    assert run.returncode == 0 and "0 done now, 2 already done" in run.stdout, run.stderr
    assert not (db.parent / "study.sqlite-journal").exists()
    with RunStore(db, readonly=True) as store:
        assert len(store.rows()) == 2


# ----------------------------------------------------------------------------- one driver a folder

HOLDER = """import sys, time
from pathlib import Path
from verify.studies.folder_lock import holding
with holding(Path(sys.argv[1]), "python -m verify.study run the-first-driver"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_driver_refuses_a_held_folder_and_a_killed_holder_frees_it(tmp_path):
    """Another process holds the study folder: `run` refuses in one line naming it (exit 2,
    nothing stored); `run --wait` waits; SIGKILL to the holder frees the folder (the kernel
    drops its flock), and the waiting driver runs every run once."""
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    waiting = None
    try:
        assert holder.stdout.readline() == "held\n"
        refused = verify_study([*RUN_SMOKE, "--out", str(out)], tmp_path)
        assert refused.returncode == 2, refused.stderr
        err = refused.stderr
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert f"pid {holder.pid} on " in err and "the-first-driver" in err and str(out / "study.lock") in err
        assert not (out / "study.sqlite").exists()
        waiting = subprocess.Popen([sys.executable, "-m", "verify.study", *RUN_SMOKE, "--out", str(out),
                                    "--wait"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert "waiting for" in waiting.stderr.readline()
        assert waiting.poll() is None and not (out / "study.sqlite").exists()
        holder.kill()  # SIGKILL: the holder cannot release anything itself
        stdout, stderr = waiting.communicate(timeout=300)
        assert waiting.returncode == 0 and "2 done now" in stdout, stderr
    finally:
        for proc in (holder, waiting):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    with RunStore(out / "study.sqlite", readonly=True) as store:
        assert [r["attempts"] for r in store.rows()] == [1, 1]
    assert (out / "study.lock").read_text() == ""  # released: no holder named


def test_reading_commands_need_no_lock_and_the_lock_is_per_folder(tmp_path, capsys):
    """While a driver holds the folder, report and export read it; `run` into it refuses, and
    the same study into another folder runs."""
    from verify.studies import folder_lock

    path, out = tiny_study(tmp_path, seeds="[1]"), tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)
    with folder_lock.holding(out, "a driver in this test"):
        assert study.main(["report", path, "--scale", "paper", "--out", str(out), "--json"]) == 0
        assert study.main(["export", path, "--scale", "paper", "--out", str(out)]) == 0
        capsys.readouterr()
        assert study.main(["run", path, "--scale", "paper", "--engine", "serial", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "a driver in this test" in err, err
        other = study.run_study(path, "paper", tmp_path / "other", engine="serial", progress=False)
        assert other["done"] == 1
    again = study.run_study(path, "paper", out, engine="serial", progress=False)
    assert (again["done"], again["already_done"]) == (0, 1)


WITHOUT_RAY = ("import sys; sys.modules['ray'] = None  # as if Ray were not installed\n"
               "from verify.studies import commands; sys.exit(commands.main(sys.argv[1:]))")


def test_without_ray_the_default_engine_falls_back_to_serial_in_one_line(tmp_path):
    """The README's first install has no Ray, and `run` defaults to the Ray engine: it runs
    serially, saying so in one line; Ray asked for by name is refused (exit 2, one line)."""
    path = tiny_study(tmp_path)
    argv = ["run", path, "--scale", "paper", "--no-progress", "--out", str(tmp_path / "out")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", WITHOUT_RAY, *argv], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Ray is not installed" in done.stderr, done.stderr
    assert "(paper, serial): 2 runs; 2 done now" in done.stdout
    asked = subprocess.run([sys.executable, "-c", WITHOUT_RAY, *argv, "--engine", "ray"], capture_output=True,
                           text=True, timeout=60, env=env)
    assert asked.returncode == 2 and asked.stderr.count("\n") == 1 and "--engine needs Ray" in asked.stderr


def test_a_smoke_study_says_its_verdicts_are_not_testable_and_where_real_ones_are(tmp_path, capsys):
    """The smoke scale gives only "not testable": `run` and `report` say that is by design and
    name the cheapest cpu-scale study with real verdicts, with its stored time (from the stores)."""
    from verify.studies import budget

    name, runs, minutes = budget.cheapest_with_verdicts("cpu")
    assert runs > 1 and minutes > 0
    out = str(tmp_path / "smoke")
    assert study.main(["run", "task-support", "--scale", "smoke", "--engine", "serial", "--no-progress",
                       "--out", out]) == 0
    assert study.main(["report", "task-support", "--scale", "smoke", "--out", out]) == 0
    text = capsys.readouterr().out
    notes = [line for line in text.splitlines() if line.startswith("note: the smoke scale")]
    assert len(notes) == 2 and "not testable by design" in notes[0], text
    assert f"the cheapest study with real verdicts is {name} at --scale cpu ({runs} runs" in notes[0]
    assert study.main(["report", "task-support", "--scale", "smoke", "--out", out, "--json"]) == 0
    json.loads(capsys.readouterr().out)  # JSON stays one document
