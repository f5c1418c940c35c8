"""Provenance by behaviour (verify/studies/behaviour.py): a refactor that changes no number
leaves a store's runs current, a change of what a run computes marks them. Both directions
are tested on real edits of a copy of the project's code, run in a subprocess, as a user's
next checkout would be."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_study import tiny_study
from verify.learning import sgd_program as sgd
from verify.studies import behaviour, provenance
from verify.studies import commands as study
from verify.studies.store import RunStore

PACKAGES = ("theory", "constructions", "verify", "paper_figures")


def copy_of_code(root: Path, edits: dict[str, list[tuple[str, str]]]) -> Path:
    """The project's packages copied under `root`, with each file's (old, new) replacements
    made (each old text must be there)."""
    src = Path(study.__file__).resolve().parents[2]
    for package in PACKAGES:
        shutil.copytree(src / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__", "results"))
    for name, replacements in edits.items():
        path = root / name
        text = path.read_text()
        for old, new in replacements:
            assert old in text, (name, old)
            text = text.replace(old, new)
        path.write_text(text)
    return root


def report_with(code: Path | None, yaml: str, out: Path) -> dict:
    """`verify.study report` of the store in `out`, by the code in `code` (None: this checkout)."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    proc = subprocess.run([sys.executable, "-m", "verify.study", "report", yaml, "--scale", "paper", "--out",
                           str(out), "--json"], capture_output=True, text=True, env=env, cwd=out)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


RENAME = {"verify/learning/families/base.py": [("def parameter_dtype(", "def dtype_of_parameters(")],
          "verify/learning/families/preference.py": [("parameter_dtype", "dtype_of_parameters")],
          "verify/learning/train.py": [('"""Training students', '"""(A comment.) Training students')]}
LOSS = {"verify/learning/families/hyperteacher.py": [("return nn.functional.mse_loss(pred, batch.y)",
                                         "return 0.5 * nn.functional.mse_loss(pred, batch.y)")]}


def test_a_pure_refactor_keeps_the_runs_current_and_a_changed_loss_constant_marks_them(tmp_path):
    path, out = tiny_study(tmp_path, seeds="[1, 2]"), tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)
    with RunStore(out / "study.sqlite") as store:
        rows = store.rows()
    assert all(r["behaviour"] and r["code_fingerprint"] == provenance.code_fingerprint() for r in rows)
    here = report_with(None, path, out)
    assert (here["runs_other_code"], here["code_fingerprint"]) == (0, provenance.code_fingerprint())

    renamed = report_with(copy_of_code(tmp_path / "renamed", RENAME), path, out)
    assert renamed["code_fingerprint"] != provenance.code_fingerprint()  # other bytes ...
    assert (renamed["runs_other_code"], renamed["runs_unknown_code"]) == (0, 0)  # ... the same numbers

    halved = report_with(copy_of_code(tmp_path / "halved", LOSS), path, out)
    assert halved["code_fingerprint"] not in (provenance.code_fingerprint(), renamed["code_fingerprint"])
    assert halved["runs_other_code"] == len(rows) and "code" in halved["columns"]
    assert any("were not made by this code" in n for n in halved["notes"])


def test_difference_names_the_first_number_that_moved_and_tolerates_rounding():
    stored = {"lr": [1e-3, 2e-3], "sgd custom losses": [0.5, 0.49], "scores": [math.nan, 1.0]}
    assert behaviour.difference(stored, {**stored, "sgd custom losses": [0.5, 0.49 * (1 + 1e-9)]}) is None
    assert behaviour.difference(stored, {**stored, "scores": [None, 1.0]}) is None  # nan stored as null
    moved = behaviour.difference(stored, {**stored, "sgd custom losses": [0.5, 0.49 * (1 + 1e-4)]})
    assert moved.startswith("sgd custom losses[1]: 0.49 stored")
    assert "only now: ['extra']" in behaviour.difference(stored, {**stored, "extra": [1.0]})
    assert "2 numbers stored, 1 now" in behaviour.difference(stored, {**stored, "lr": [1e-3]})


def test_the_record_is_the_runs_own_first_steps_and_is_reproducible():
    """The record's losses are the run's: a full run's loss curve starts with them."""
    argv = ["--M", "4", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--shapes", "custom", "--widths", "8",
            "--steps", "40", "--log-every", "1", "--eval-tasks", "8", "--seed", "3"]
    config = sgd.parse_args(argv).key()
    record = behaviour.record("verify.sgd", config)
    assert record == behaviour.record("verify.sgd", config)
    assert set(record) == {"split", "lr", "construction ε=0.01 scores", "sgd custom scores",
                           "sgd custom losses"}
    from verify.learning.train import train_student

    prep = sgd.prepare(sgd.parse_args([*argv, "--no-progress"]), progress=False)
    (net, widths), = prep.students.values()
    full = train_student(prep.family, prep.split.train, net, prep.train, progress=False, widths=widths,
                         log_every=1, speed=prep.speed)
    first = [v for _, v in full.losses[:sgd.BEHAVIOUR_STEPS]]
    assert record["sgd custom losses"] == pytest.approx(first, rel=1e-12)
    assert len(full.losses) == 40  # stop_after cut only the record's run


def test_record_missing_records_only_runs_this_code_made(tmp_path, monkeypatch):
    path, out = tiny_study(tmp_path, seeds="[1, 2]"), tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)
    db = out / "study.sqlite"
    with RunStore(db) as store:
        first, second = store.rows()
        store.db.execute("UPDATE runs SET behaviour = NULL")
        store.db.execute("UPDATE runs SET code_fingerprint = ? WHERE key = ?", ("0" * 64, second["key"]))
    counts = behaviour.record_missing("verify.sgd", db, provenance.code_fingerprint(), progress=False)
    assert counts == dict(recorded=1, had=0, other_code=1, program_has_none=False)
    with RunStore(db, readonly=True) as store:
        by = {r["key"]: r for r in store.rows()}
    assert by[first["key"]]["behaviour"] == first["behaviour"]  # the same record the run made
    assert by[second["key"]]["behaviour"] is None  # other code: only a rerun can attest it
    assert study.main(["record-behaviour", path, "--scale", "paper", "--out", str(out)]) == 0


def test_the_image_program_records_its_behaviour_and_a_changed_loss_or_judge_moves_it(monkeypatch):
    """verify.images.train's record (a smoke run's configuration): reproducible; halving the
    training target moves its losses; a judge that passes every image moves its success."""
    pytest.importorskip("diffusers")
    from verify.images import denoiser, judges

    _, runs = study.expand("image-composition", "smoke")
    run = runs[0]
    first = behaviour.record(run.program, run.config)
    assert set(first) == {"split", "parameters", "losses", "features", "decodability", "success"}
    assert len(first["losses"]) == 4 and first["split"][:2] == [24.0, 40.0]
    assert behaviour.difference(first, behaviour.record(run.program, run.config)) is None

    target = denoiser._target
    monkeypatch.setattr(denoiser, "_target", lambda *a: 0.5 * target(*a))
    halved = behaviour.record(run.program, run.config)
    moved = behaviour.difference({"losses": first["losses"]}, {"losses": halved["losses"]})
    assert moved.startswith("losses[0]")
    monkeypatch.setattr(denoiser, "_target", target)

    evaluate = judges.ExactJudge.evaluate

    def lenient(self, images, fam, rows):
        verdict = evaluate(self, images, fam, rows)
        verdict.success[:] = True
        return verdict
    monkeypatch.setattr(judges.ExactJudge, "evaluate", lenient)
    passed = behaviour.record(run.program, run.config)
    # 4 training steps: not every image is right, until the judge passes them all.
    assert first["success"] != [1.0, 1.0] and passed["success"] == [1.0, 1.0]
    rest = {k: v for k, v in first.items() if k != "success"}
    assert behaviour.difference(rest, {k: passed[k] for k in rest}) is None
    assert behaviour.difference(first, passed).startswith("success[")


def test_attest_marks_the_runs_this_code_replays_and_a_reader_of_it_replays_none(tmp_path, monkeypatch):
    """`record-behaviour` also replays the runs of other code: each the installed code
    reproduces is attested in the store, so a reader of that same code (a fresh clone, CI)
    judges it current without replaying; a record this code does not reproduce is not
    attested, and a reader of other code still replays; a rerun clears the attestation."""
    path, out = tiny_study(tmp_path, seeds="[1, 2]"), tmp_path / "out"
    study.run_study(path, "paper", out, engine="serial", progress=False)
    db, fingerprint = out / "study.sqlite", provenance.code_fingerprint()
    with RunStore(db) as store:
        first, second = store.rows()
        store.db.execute("UPDATE runs SET code_fingerprint = ?", ("0" * 64,))
        doubled_lr = [2 * v for v in second["behaviour"]["lr"]]
        store.set_behaviour(second["key"], {**second["behaviour"], "lr": doubled_lr})
    counts = behaviour.attest("verify.sgd", db, fingerprint, progress=False)
    assert (counts["attested"], counts["already"], list(counts["differ"])) == (1, 0, [second["key"]])
    assert counts["differ"][second["key"]].startswith("lr[0]")
    again = behaviour.attest("verify.sgd", db, fingerprint, progress=False)
    assert (again["attested"], again["already"], list(again["differ"])) == (0, 1, [second["key"]])
    with RunStore(db, readonly=True) as store:
        by = {r["key"]: r for r in store.rows()}
    assert by[first["key"]]["attested"] == [fingerprint] and by[second["key"]]["attested"] == []

    def replayed(*args):
        raise AssertionError("replayed")

    monkeypatch.setattr(behaviour, "record", replayed)
    assert behaviour.Judge("verify.sgd", fingerprint)(by[first["key"]]) == behaviour.CURRENT
    with pytest.raises(AssertionError, match="replayed"):
        behaviour.Judge("verify.sgd", "f" * 64)(by[first["key"]])
    with RunStore(db) as store:
        store.start(first["key"], "s", "paper", first["config"])
        assert store.rows()[0]["attested"] == []
