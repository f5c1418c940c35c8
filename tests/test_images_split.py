"""Issue 44: `python -m verify.images analyse` holds out what training held out.

train records its split beside the saved weights (pipeline/split.json); analyse reads it by
default, so the prompts it scores as held out are exactly the ones the model never saw. A split
asked for by --test-fraction / --split-seed that holds out a trained combination is refused in one
line (exit 2, before any work) unless --allow-train-overlap, and then the report says it overlaps.
A pipeline of an older train, which records no split, needs both split flags. The report names
the split it used. The README's own case: train on 48 of scene1's 64 combinations (16 held out);
analyse's default share 0.3 would hold out 20, four of them (10, 35, 46, 52) trained on."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from verify.cli import UsageError  # noqa: E402
from verify.images import analyse, results, split_record  # noqa: E402
from verify.images.__main__ import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--threads", "1", "--no-progress"]
TRAIN = ["--preset", "tiny", "--steps", "2", "--batch", "4", "--sample-steps", "2", "--n-seeds", "1",
         "--eval-prompts", "2", "--train-combinations", "48", *FAST]
ANALYSE = ["--setup", "scene1", "--judge", "exact", "--steps", "2", "--prompts", "2", "--n-seeds", "1",
           "--guidance", "1", "--layers", r"mid_block\.resnets\.0", *FAST]  # one layer: a quicker probe
TRAINED_ON_BY_A_FRESH_SPLIT = [10, 35, 46, 52]  # issue 44's four, for the README's --train-combinations 48


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-step tiny run on 48 of scene1's 64 combinations: its output folder."""
    work = tmp_path_factory.mktemp("split")
    argv = [sys.executable, "-m", "verify.images", "train", *TRAIN, "--out", str(work / "train")]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=work, env={"PYTHONPATH": str(ROOT)},
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return work / "train"


def _trains_held_out(trained: Path) -> list[int]:
    """The combinations train held out, from its own results file."""
    rec = results.read(trained / "results.json")
    held = set(range(rec["split"]["report"]["n"])) - set(rec["training"]["training_combinations"])
    return sorted(held)


def _analyse(argv, capsys):
    """`analyse` in this process: its exit code, stdout, stderr."""
    rc = main(["analyse", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _split_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("split    ")]


def test_train_records_the_split_it_trained_on_beside_the_weights(trained):
    rec = json.loads((trained / "pipeline" / split_record.FILE).read_text())
    assert rec["family"] == "scene1" and rec["n"] == 64 and rec["seed"] == 0
    assert rec["test"] == _trains_held_out(trained) and len(rec["test"]) == 16
    assert rec["train"] == results.read(trained / "results.json")["training"]["training_combinations"]


def test_analyse_holds_out_exactly_what_training_held_out_by_default(trained, tmp_path, capsys):
    out = tmp_path / "a"
    rc, text, err = _analyse([trained / "pipeline", *ANALYSE, "--out", out], capsys)
    assert rc == 0, err
    choice = results.read(out / "results.json")["split_choice"]
    assert choice["source"] == "pipeline" and choice["held_out"] == _trains_held_out(trained)
    assert choice["held_out_trained_on"] == []
    # The analysed held-out prompts are among training's held-out ones, none trained on.
    rec = results.read(out / "results.json")
    tested = [rec["prompt_rows"][i] for i in rec["split"]["test_prompts"]]
    assert set(tested) <= set(_trains_held_out(trained))
    [line] = _split_lines(text)
    assert "the split it was trained on" in line and "16 of 64 combinations held out" in line
    assert ", ".join(map(str, _trains_held_out(trained))) in line and "none of them trained on" in line


def test_a_split_that_holds_out_trained_combinations_is_refused_in_one_line(trained, tmp_path, capsys):
    out = tmp_path / "never"
    rc, text, err = _analyse([trained / "pipeline", *ANALYSE, "--test-fraction", "0.3", "--out", out], capsys)
    assert rc == 2 and text == "" and err.count("\n") == 1
    assert err.startswith("verify.images analyse: error:") and "--allow-train-overlap" in err
    assert "holds out 4 prompt(s)" in err and "(10, 35, 46, 52)" in err
    assert not out.exists()


def test_allow_train_overlap_runs_the_split_asked_for_and_says_it_overlaps(trained, tmp_path, capsys):
    out = tmp_path / "a"
    argv = [trained / "pipeline", *ANALYSE, "--test-fraction", "0.3", "--allow-train-overlap", "--out", out]
    rc, text, err = _analyse(argv, capsys)
    assert rc == 0, err
    choice = results.read(out / "results.json")["split_choice"]
    fresh = analyse.split(analyse.family("scene1"), 0.3, 0).test.tolist()
    assert choice["source"] == "flags" and choice["held_out"] == fresh and len(fresh) == 20
    assert choice["held_out_trained_on"] == TRAINED_ON_BY_A_FRESH_SPLIT
    assert sorted(set(fresh) - set(_trains_held_out(trained))) == TRAINED_ON_BY_A_FRESH_SPLIT
    [line] = _split_lines(text)
    assert "--test-fraction 0.3 --split-seed 0" in line and "20 of 64 combinations held out" in line
    assert "OVERLAPS TRAINING: 4 of them were trained on (10, 35, 46, 52)" in line


def test_a_split_asked_for_that_holds_out_only_held_out_combinations_runs_unflagged(trained):
    # train's own share and seed (16/64, 0) give its split: asked for, and nothing overlaps.
    chosen = analyse.choose_split(trained / "pipeline", analyse.family("scene1"), 0.25, 0)
    assert chosen.source == "flags" and chosen.split.test.tolist() == _trains_held_out(trained)
    assert chosen.overlap.size == 0


def _old_pipeline(trained: Path, tmp_path: Path) -> Path:
    """The trained folder as an older train saved it: no split.json."""
    old = tmp_path / "old"
    shutil.copytree(trained / "pipeline", old)
    (old / split_record.FILE).unlink()
    return old


def test_a_pipeline_that_records_no_split_needs_both_split_flags(trained, tmp_path, capsys):
    old = _old_pipeline(trained, tmp_path)
    for flags in ([], ["--split-seed", "0"], ["--test-fraction", "0.25"]):
        rc, _, err = _analyse([old, *ANALYSE, "--out", tmp_path / "never", *flags], capsys)
        assert rc == 2 and err.count("\n") == 1 and "records no training split" in err, flags
    assert not (tmp_path / "never").exists()
    chosen = analyse.choose_split(old, analyse.family("scene1"), 0.25, 0)
    assert chosen.source == "flags" and chosen.trained is None and chosen.overlap is None
    assert "records no training split" in analyse.split_line(chosen.summary())


def test_a_pipeline_of_another_program_gets_the_familys_own_split(tmp_path):
    folder = tmp_path / "sd"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    for model in (folder, "owner/some-model"):
        chosen = analyse.choose_split(model, analyse.family("scene1"))
        assert chosen.source == "family" and chosen.trained is None
        assert chosen.split.test.tolist() == analyse.split(analyse.family("scene1"), 0.3, 0).test.tolist()


@pytest.mark.parametrize("flags, edit, message", [
    (["--allow-train-overlap"], None, "--allow-train-overlap is read only with a split asked for"),
    (["--setup", "scene2"], None, "records training on scene1, not --setup scene2"),
    ([], lambda rec: {**rec, "test": rec["test"][1:]}, "do not split the 64 prompt rows"),
    ([], lambda rec: {**rec, "n": 65}, "do not split the 65 prompt rows"),
    ([], lambda rec: {**rec, "format": "other"}, "is not a split record of verify.images.train"),
], ids=["overlap-flag-alone", "other-family", "a-row-missing", "wrong-n", "not-a-record"])
def test_bad_split_input_is_refused_in_one_line_before_any_work(flags, edit, message, trained, tmp_path,
                                                                capsys):
    model = trained / "pipeline"
    if edit is not None:
        model = tmp_path / "edited"
        shutil.copytree(trained / "pipeline", model)
        path = model / split_record.FILE
        path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    rc, _, err = _analyse([model, *ANALYSE, *flags, "--out", tmp_path / "never"], capsys)
    assert rc == 2 and err.count("\n") == 1 and message in err
    assert not (tmp_path / "never").exists()


def test_a_recorded_split_of_another_size_of_family_is_refused():
    rec = split_record.Recorded(family="scene1", n=10, train=np.arange(5), test=np.arange(5, 10), seed=0,
                                path=Path("x/split.json"))
    with pytest.raises(UsageError, match="records 10 prompts of scene1, which has 64"):
        analyse._check_recorded_family(rec, analyse.family("scene1"))
