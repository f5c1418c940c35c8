"""python -m verify.images (train, analyse, report) on tiny models: a trained folder analysed as
any pipeline reproduces train's own analysis, an SD-like pipeline with the clip judge, the report
and its correlation, the refusals, and --help. Refused in one line with exit 2 before any work:
an unknown setup, a folder that is not a text-to-image pipeline, a hub id that is not in the
local cache while offline, `exact` on an anchor setup, a judge whose package, key or checkpoint
is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from verify.images import analyse, results, tiny  # noqa: E402
from verify.images.__main__ import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--threads", "1", "--no-progress"]  # one thread: the same floats in train and in analyse
TRAIN = ["--preset", "tiny", "--steps", "2", "--batch", "4", "--sample-steps", "2", "--n-seeds", "1",
         "--eval-prompts", "2", *FAST]


def _cli(*args, cwd, env=None, module="verify.images"):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    environ.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=environ, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-step tiny run through `python -m verify.images train`: its output folder."""
    work = tmp_path_factory.mktemp("cli")
    done = _cli("train", *TRAIN, "--out", work / "train", cwd=work)
    assert done.returncode == 0, done.stderr
    return work / "train"


@pytest.fixture(scope="module")
def sd(tmp_path_factory):
    """A tiny random StableDiffusionPipeline folder and a tiny CLIP folder."""
    work = tmp_path_factory.mktemp("sd")
    return tiny.build_pipeline(work / "sd"), tiny.build_clip(work / "clip")


# --- train, analyse, report end to end --------------------------------------------------------------

def test_analysing_the_trained_folder_reproduces_trains_own_analysis(trained):
    work = trained.parent
    # train's analysis settings: its split (seed 0, 30% held out), 2 prompts a side, 1 seed, 2
    # steps, train's guidance (1, its default; the saved pipeline's own default is 3); the default
    # --out under the cwd.
    done = _cli("analyse", trained / "pipeline", "--setup", "scene1", "--judge", "exact", "--steps", "2",
                "--prompts", "2", "--n-seeds", "1", "--guidance", "1", "--json", *FAST, cwd=work)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    path = work / "out" / "images-analyse" / "train-pipeline-scene1" / "results.json"
    assert report["results_file"] == str(Path("out/images-analyse/train-pipeline-scene1/results.json"))
    assert report["split"]["source"] == "pipeline"  # the split train recorded, not one drawn again
    ours, theirs = results.read(path), results.read(trained / "results.json")
    assert ours["program"] == "verify.images analyse" and theirs["program"] == "verify.images.train"
    # The same prompts with the same seeds: the same images, hence the same verdicts and probes.
    for key in ("prompts", "prompt_rows", "seeds", "n_seeds", "denoising", "activations", "probe"):
        assert ours[key] == theirs[key], key
    for key in ("train_prompts", "test_prompts"):
        assert ours["split"][key] == theirs["split"][key]
    for key in ("n", "n_train", "n_test", "covers_all_constituents", "missing_constituents"):
        assert ours["split"]["report"][key] == theirs["split"]["report"][key]
    for key in ("success", "slot_correct", "answers", "train_success_rate", "test_success_rate"):
        assert ours["judge"][key] == theirs["judge"][key], key
    assert ours["model"]["config_sha256"] == theirs["model"]["config_sha256"]
    assert report["success"]["train"]["rate"] == theirs["judge"]["train_success_rate"]
    assert report["success"]["test"]["rate"] == theirs["judge"]["test_success_rate"]
    assert not report["best_layer"]["layer"].startswith("text_encoder")

    # report: both files, then the same as JSON.
    text = _cli("report", path, trained / "results.json", cwd=work)
    assert text.returncode == 0, text.stderr
    assert str(path) in text.stdout and "family scene1" in text.stdout and "held out" in text.stdout
    js = _cli("report", path, trained / "results.json", "--json", cwd=work)
    assert js.returncode == 0, js.stderr
    summary = json.loads(js.stdout)
    assert summary["correlation"] is None and len(summary["files"]) == 2  # fewer than 3 files
    a, b = summary["files"]
    assert (a["program"], b["program"]) == ("verify.images analyse", "verify.images.train")
    assert a["best_layer"] == b["best_layer"] and not a["best_layer"].startswith("text_encoder")
    assert a["test_f1"] == theirs["probe"]["per_layer"][a["best_layer"]]["test_f1"]
    assert a["test_success"] == b["test_success"] == theirs["judge"]["test_success_rate"]


def test_report_correlates_the_best_denoiser_layer_with_success_over_three_or_more_files(trained, tmp_path,
                                                                                         capsys):
    from verify.images.study_report import correlation

    base = results.read(trained / "results.json")
    unet = [k for k in base["probe"]["per_layer"] if not k.startswith("text_encoder")]
    f1, success, paths = [0.2, 0.5, 0.4, 0.9], [0.1, 0.3, 0.35, 0.8], []
    for i, (x, y) in enumerate(zip(f1, success, strict=True)):
        rec = json.loads(json.dumps(base))
        for layer in unet:
            rec["probe"]["per_layer"][layer]["test_f1"] = x / (2 if layer != unet[-1] else 1)
        rec["probe"]["per_layer"]["text_encoder"]["test_f1"] = 1.0  # never the best layer here
        rec["judge"]["test_success_rate"] = y
        paths.append(results.write(tmp_path / f"r{i}.json", rec))
    assert main(["report", *map(str, paths), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [f["best_layer"] for f in summary["files"]] == [unet[-1]] * 4
    assert [f["test_f1"] for f in summary["files"]] == f1
    assert summary["correlation"] == json.loads(json.dumps(correlation(f1, success)))
    assert summary["correlation"]["status"] == "fitted" and summary["correlation"]["pearson"]["r"] > 0.9
    assert main(["report", *map(str, paths)]) == 0
    assert "Pearson r = " in capsys.readouterr().out


def test_an_sd_like_pipeline_on_an_anchor_setup_with_the_clip_judge(sd, tmp_path, capsys):
    folder, clip = sd
    out = tmp_path / "clip-run"
    assert main(["analyse", str(folder), "--setup", "animals_with_clothes", "--judge", "clip", "--clip-model",
                 str(clip), "--steps", "2", "--prompts", "2", "--n-seeds", "1", "--rows", "both", "--out",
                 str(out), "--json", *FAST]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"]["pipeline"] == "StableDiffusionPipeline"
    assert report["family"]["name"] == "animals_with_clothes"
    assert report["split"]["n"] == 100 and report["split"]["n_test"] == 30  # the anchor's split
    assert {"text_encoder", "text_encoder@uncond"} <= set(report["decodability"])  # the text encoder recorded
    assert report["analysis"]["cfg"] and report["analysis"]["rows_recorded"] == "both"
    assert not report["best_layer"]["layer"].startswith("text_encoder")
    assert list(report["success"]["test"]["per_slot"]) == ["animal", "clothing"]
    record = results.read(out / "results.json")
    assert record["judge"]["name"] == "clip" and record["judge"]["path"] == str(clip)
    assert len(record["judge"]["success"]) == 4 and np.array(record["judge"]["slot_correct"]).shape == (4, 2)
    assert record["seeds"] == [[42 + r] for r in record["prompt_rows"]]  # the anchor's seeds of those prompts
    assert record["config"]["setup"] == "animals_with_clothes" and record["config"]["split_seed"] == 42
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]


# --- refusals: one line, exit 2, nothing done ---------------------------------------------------------

def _not_a_pipeline(tmp_path, sd):
    folder = tmp_path / "just-a-folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("no model_index.json here")
    return [str(folder), "--setup", "scene1"]


@pytest.mark.parametrize("argv, message", [
    (lambda t, sd: [str(sd[0]), "--setup", "no_such_setup"], "unknown setup 'no_such_setup'; choose one of"),
    (_not_a_pipeline, "is not a diffusers pipeline folder"),
    (lambda t, sd: [str(sd[0]), "--setup", "animals_with_clothes", "--judge", "exact"],
     "--judge exact reads only the rendered families"),
    (lambda t, sd: [str(sd[0]), "--setup", "animals_with_clothes", "--judge", "clip"],
     "--judge clip needs --clip-model"),
    (lambda t, sd: [str(sd[0]), "--setup", "animals_short", "--test-fraction", "0.9", "--judge", "clip",
                    "--clip-model", str(sd[1])], "leaves no training or no test prompt"),
    (lambda t, sd: [str(sd[0]), "--setup", "scene1", "--layers", r"no\.such\.block"],
     "no module of the UNet2DConditionModel matches"),
], ids=["unknown-setup", "not-a-pipeline", "exact-on-a-setup", "clip-without-model", "empty-side",
        "no-layer"])
def test_bad_analyse_input_is_refused_in_one_line_before_any_work(argv, message, sd, tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["analyse", *argv(tmp_path, sd), "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("verify.images analyse: error:")
    assert not out.exists()


def test_the_llm_judge_without_the_llm_package_is_refused(sd, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "llm", None)  # `import llm` raises ImportError
    out = tmp_path / "never"
    assert main(["analyse", str(sd[0]), "--setup", "animals_with_clothes", "--judge", "llm", "--llm-model",
                 "gemini-2.0-flash", "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the llm judge needs the llm package" in err
    assert not out.exists()
    assert main(["analyse", str(sd[0]), "--setup", "animals_with_clothes", "--judge", "llm"]) == 2
    assert "--judge llm needs --llm-model" in capsys.readouterr().err


def test_a_hub_id_offline_and_not_cached_is_refused(tmp_path):
    (tmp_path / "hf").mkdir()
    done = _cli("analyse", "compgen-bound-tests/absent-7f3a", "--setup", "scene1", "--out",
                tmp_path / "never", *FAST, cwd=tmp_path,
                env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "not in the local Hugging Face cache" in done.stderr
    assert not (tmp_path / "never").exists()


def test_a_file_that_is_no_results_file_is_refused(tmp_path, capsys):
    for name, text in (("other.json", json.dumps({"format": "something else"})), ("broken.json", "{"),
                       ("list.json", "[1, 2]")):
        (tmp_path / name).write_text(text)
        assert main(["report", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a results file of verify.images" in err
    assert main(["report", str(tmp_path / "absent.json")]) == 2
    assert "cannot be read" in capsys.readouterr().err


# --- the command line itself ------------------------------------------------------------------------

def test_help_of_every_command_answers_without_importing_torch(tmp_path):
    code = """
import contextlib, io, sys
from verify.images.__main__ import main
for argv in (["--help"], ["train", "--help"], ["analyse", "--help"], ["report", "--help"]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            main(argv)
            rc = None
        except SystemExit as e:
            rc = e.code
    print(rc, len(text.getvalue()) > 300)
print("torch" in sys.modules, "diffusers" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:5] == ["0 True"] * 4 + ["False False"]


def test_train_is_verify_images_train(tmp_path):
    for argv in (["--help"], ["--held-out", "0.999"], ["--preset", "huge"]):
        ours = _cli("train", *argv, cwd=tmp_path)
        theirs = _cli(*argv, cwd=tmp_path, module="verify.images.train")
        assert ours.returncode == theirs.returncode
        assert (ours.stdout, ours.stderr) == (theirs.stdout, theirs.stderr)
    assert ours.returncode == 2


def test_the_default_split_seed_is_the_familys_own():
    assert analyse.default_split_seed(analyse.family("scene2")) == 0
    assert analyse.default_split_seed(analyse.family("animals")) == 42
    assert analyse.short_name("owner/model", "animals") == "owner-model-animals"
    assert set(analyse.family_names()) >= {"scene1", "scene2", "animals_short"}
    assert len(analyse.family_names()) == 33
