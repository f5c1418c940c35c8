"""The controlled experiment's program (verify.images.train) and its denoiser (verify.images.denoiser)
on the tiny preset: a run end to end, its determinism, its refusals, the saved folder read back
through pipeline.load and the activation recorder, and one cheap learning check.

The training target is held to what the sampler reads back: an oracle UNet recovers the clean
image under each prediction type, and a wrong target is caught.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

import torch  # noqa: E402

from constructions.tasks import images as scenes  # noqa: E402
from verify.images import denoiser, pipeline, results, train  # noqa: E402
from verify.images.activations import UNCOND, Recorder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "tiny", "--steps", "3", "--batch", "4", "--eval-prompts", "3", "--n-seeds", "2",
        "--sample-steps", "2", "--threads", "1", "--no-progress"]
# Parts of a report that are not results: wall-clock times, where it was written, when, by what code.
NOT_RESULTS = ("seconds", "provenance", "results_file", "model")


def _run(folder, extra=()):
    args = train.parse_args([*TINY, *extra, "--out", str(folder)])
    return args, train.run(args)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("train") / "run")


# --- the tokenizer --------------------------------------------------------------------------------

def test_every_word_of_the_family_is_one_token(tmp_path):
    scene = scenes.Scene(n_objects=2)
    words = denoiser.family_words(scene)
    assert {"a", "and", "triangle", "bottom", "yellow"} <= set(words)
    tok = denoiser.word_tokenizer(tmp_path / "tok", words)
    for w in words:
        assert tok.tokenize(w) == [w + "</w>"]
    text = scenes.prompt(scene, scenes.combinations(scene)[-1])
    ids = tok(text).input_ids
    assert len(ids) == len(text.split()) + 2 <= denoiser.MAX_TOKENS  # start, the words, end
    # Merges made for one word that would split another ("a n" of "and" in "triangle") are ranked
    # so that every word still ends whole.
    merges = denoiser.word_merges(["and", "triangle"])
    assert denoiser._bpe("triangle", {m: i for i, m in enumerate(merges)}) == ["triangle</w>"]
    assert denoiser._bpe("triangle", {m: i for i, m in enumerate(merges[:3])}) != ["triangle</w>"]


# --- the run end to end ---------------------------------------------------------------------------

def test_a_tiny_run_gives_a_loadable_pipeline_and_a_complete_report(tiny_run):
    args, r = tiny_run
    json.dumps(r, allow_nan=False)  # JSON-able as it is
    assert r["program"] == "verify.images.train" and r["config"] == train.run_config(args)
    s = r["split"]
    assert (s["n"], s["n_train"], s["n_test"]) == (64, 44, 20) and s["covers_all_constituents"]
    assert len(r["training"]["loss_curve"]) == 3 and r["training"]["first_loss"] > 0
    a = r["analysis"]
    assert len(a["train_prompts"]) == len(a["test_prompts"]) == 3
    assert set(a["train_prompts"]) <= set(range(64)) and not set(a["train_prompts"]) & set(a["test_prompts"])
    assert not a["cfg"] and a["guidance"] == 1.0 and a["steps_kept"] == [0, 1]  # no guidance by default
    assert "text_encoder" in r["decodability"] and "mid_block.attentions.0" in r["decodability"]
    for d in r["decodability"].values():
        assert 0 <= d["test_f1"] <= 1 and 0 <= d["test_exact"] <= 1
    assert r["best_layer"]["test_f1"] == max(d["test_f1"] for d in r["decodability"].values())
    for side in ("train", "test"):
        assert r["success"][side]["images"] == 6 and 0 <= r["success"][side]["rate"] <= 1
        assert list(r["success"][side]["per_slot"]) == ["shape", "colour", "position"]
    assert r["model"]["pipeline"] == "PixelTextToImagePipeline" and r["model"]["parameters"]["unet"] > 0
    assert {"train", "generate", "probe", "judge", "total"} <= set(r["seconds"])
    assert r["provenance"]["code_version"] and r["provenance"]["timestamp"]
    # The results file: the analysis record, with the training and the split.
    record = results.read(r["results_file"])
    assert record["model"]["config_sha256"] == r["model"]["config_sha256"]
    assert record["split"]["report"]["n_train"] == 44 and len(record["judge"]["success"]) == 12
    assert len(record["training"]["training_combinations"]) == 44 and record["config"] == r["config"]
    # The saved folder opens as any pipeline would.
    pipe = pipeline.load(r["model"]["folder"])
    assert type(pipe).__name__ == "PixelTextToImagePipeline"
    assert pipeline.config_hash(pipe) == r["model"]["config_sha256"]


def test_the_same_arguments_give_the_same_numbers(tiny_run, tmp_path):
    args, first = tiny_run
    _, again = _run(tmp_path / "again")
    drop = lambda r: {k: v for k, v in r.items() if k not in NOT_RESULTS}  # noqa: E731
    assert drop(again) == drop(first)
    assert again["model"]["config_sha256"] == first["model"]["config_sha256"]
    # And the seed matters: another one draws other weights and batches.
    scene = scenes.Scene()
    combos = scenes.combinations(scene)[:4]
    losses = [denoiser.train(denoiser.build(scene, denoiser.resolve_size("tiny"), seed, tmp_path / "tok"),
                             scenes.render(scene, combos), scenes.prompts(scene, combos), steps=2, batch=4,
                             lr=1e-3, seed=seed)["loss_curve"] for seed in (0, 0, 1)]
    assert losses[0] == losses[1] != losses[2]


def test_the_configuration_is_keyed_without_runtime_flags():
    base = train.run_config(train.parse_args(TINY + ["--out", "x"]))
    again = train.run_config(train.parse_args([*TINY[:-3], "--threads", "2", "--json", "--out", "y"]))
    assert base == again and "out" not in base and "threads" not in base
    # A share and a count that hold out the same combinations are the same run.
    share = train.run_config(train.parse_args([*TINY, "--held-out", "0.3", "--out", "x"]))
    count = train.run_config(train.parse_args([*TINY, "--train-combinations", "44", "--out", "x"]))
    assert share == count == base and base["train_combinations"] == 44
    assert base["channels"] == [8, 16] and base["text_hidden"] == 16
    wider = train.run_config(train.parse_args([*TINY, "--channels", "8", "24", "--out", "x"]))
    assert wider["channels"] == [8, 24] and wider != base


def test_the_split_by_count_is_the_family_split_by_share():
    scene = scenes.Scene(n_objects=1)
    for fraction, seed in ((0.3, 0), (0.75, 3)):
        by_share = scenes.split(scene, fraction, seed)
        by_count = train._split(scene, by_share.n - len(by_share.test), seed)
        np.testing.assert_array_equal(by_count.test, by_share.test)
        assert by_count.missing_constituents == by_share.missing_constituents


# --- refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--held-out", "0.999"], "leaves no training combination"),
    (["--train-combinations", "64"], "leaves no held-out combination"),
    (["--objects", "2", "--train-combinations", "1536"], "leaves no held-out combination"),
    (["--preset", "huge"], "invalid choice: 'huge'"),
    (["--channels", "6", "10"], "multiple of 4"),
    (["--channels", "8", "8", "8", "8", "8"], "1 to 4 resolutions"),
    (["--fractions", "0.5", "1.5"], "step fractions"),
    (["--layers", "("], "not a regular expression"),
    (["--p-uncond", "1"], "[0, 1)"),
    (["--held-out", "0.3", "--train-combinations", "10"], "not allowed with"),
    (["--objects", "3"], "invalid choice"),
])
def test_bad_flags_are_refused_in_one_line_before_any_work(flags, message, tmp_path, capsys):
    out = tmp_path / "never"
    assert train.main([*flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("verify.images.train: error:")
    assert not out.exists()  # nothing was created, let alone trained


def test_a_usage_error_answers_without_importing_torch(tmp_path):
    code = ("import sys; from verify.images import train; rc = train.main(['--held-out', '0.999']); "
            "print('torch' in sys.modules, 'diffusers' in sys.modules); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 2 and done.stdout.strip() == "False False"
    assert "leaves no training combination" in done.stderr and done.stderr.count("\n") == 1


def test_an_output_path_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert train.main([*TINY, "--out", str(tmp_path / "file")]) == 2
    assert "is an existing file" in capsys.readouterr().err


@pytest.mark.parametrize("earlier", ["pipeline", "results.json"])
def test_a_folder_holding_an_earlier_run_is_refused_unless_forced(tmp_path, capsys, earlier):
    """--out DIR deleted DIR/pipeline without a word; now it is refused as --save refuses a
    folder with files (one line naming it, exit 2, nothing touched), and --force replaces it."""
    out = tmp_path / "run"
    (out / "pipeline").mkdir(parents=True) if earlier == "pipeline" else out.mkdir()
    marker = out / "pipeline" / "weights" if earlier == "pipeline" else out / earlier
    marker.write_text("an earlier run")
    assert train.main([*TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {str(out)!r} already holds a trained run ({earlier})" in err
    assert "--force" in err and marker.read_text() == "an earlier run"
    assert train.parse_args([*TINY, "--out", str(out), "--force"]).runtime.out == str(out)
    assert "force" not in train.run_config(train.parse_args([*TINY, "--out", str(out), "--force"]))


def test_layers_that_match_no_module_are_refused_before_training(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main([*TINY, "--layers", r"no\.such\.block", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no module of the UNet matches" in err
    assert not (out / "pipeline").exists() and not (out / "results.json").exists()


# --- the saved folder, read back ------------------------------------------------------------------

def test_the_saved_folder_round_trips_and_the_recorder_follows_it(tiny_run):
    _, r = tiny_run
    pipe = pipeline.load(r["model"]["folder"])
    again = pipeline.load(r["model"]["folder"])
    for name in ("unet", "text_encoder"):
        a, b = getattr(pipe, name).state_dict(), getattr(again, name).state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert type(pipe.scheduler).__name__ == "DDIMScheduler"
    prompts = scenes.prompts(scenes.Scene())[:2]
    with Recorder(pipe, rows="both") as rec:
        g = pipeline.generate(pipe, prompts, n_seeds=1, steps=3, guidance=2.0, recorder=rec,
                              fractions=(0.0, 1.0))
        assert rec.layers and rec.text_layers == ["text_encoder"]
    assert g.n_steps == 3 and g.steps_kept == [0, 2] and g.cfg and g.guidance == 2.0
    assert g.images.shape == (2, 16, 16, 3) and g.images.dtype == np.uint8
    layer = "mid_block.attentions.0"
    assert {layer, layer + UNCOND, "text_encoder", "text_encoder" + UNCOND} <= set(g.features)
    assert g.features[layer].shape[0] == 2
    # The unconditional rows saw the empty prompt: one text encoding shared by both images.
    empty = g.features["text_encoder" + UNCOND]
    np.testing.assert_array_equal(empty[0], empty[1])
    assert not np.array_equal(g.features["text_encoder"][0], g.features["text_encoder"][1])
    # Without guidance there are no unconditional rows; the recorder follows that too.
    with Recorder(pipe) as rec:
        plain = pipeline.generate(pipe, prompts, n_seeds=1, steps=2, guidance=1.0, recorder=rec)
    assert not plain.cfg and set(plain.features) == {*rec.layers, "text_encoder"}
    # Seeded: an image depends on its seed, not on the batch it was made in.
    one_by_one = pipeline.generate(pipe, prompts, steps=3, guidance=2.0, batch_size=1)
    np.testing.assert_array_equal(one_by_one.images, g.images)


def test_a_cached_hub_copy_of_the_trained_pipeline_loads_offline(tiny_run, tmp_path):
    import shutil

    _, r = tiny_run
    repo = tmp_path / "hub" / "models--compgen-bound-tests--pixel"
    shutil.copytree(r["model"]["folder"], repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    pipe = pipeline.load("compgen-bound-tests/pixel", cache_dir=tmp_path / "hub")
    assert type(pipe).__name__ == "PixelTextToImagePipeline"
    assert pipeline.config_hash(pipe) == r["model"]["config_sha256"]


def test_other_pipelines_still_load_by_diffusers_own_rule(tmp_path, monkeypatch):
    import shutil

    from verify.cli import UsageError
    from verify.images import tiny

    folder = tiny.build_pipeline(tmp_path / "sd")
    assert type(pipeline.load(folder)).__name__ == "StableDiffusionPipeline"
    repo = tmp_path / "hub" / "models--compgen-bound-tests--tiny-sd"
    shutil.copytree(folder, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    cached = pipeline.load("compgen-bound-tests/tiny-sd", cache_dir=tmp_path / "hub")
    assert type(cached).__name__ == "StableDiffusionPipeline"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="not in the local Hugging Face cache"):
        pipeline.load("compgen-bound-tests/absent", cache_dir=tmp_path / "hub")


# --- learning -------------------------------------------------------------------------------------

def test_a_tiny_denoiser_learns_a_few_combinations(tmp_path):
    # 60 steps of 8 on 8 one-object combinations, lr 3e-3. Measured over seeds 0-2 (tiny preset,
    # one thread): the first 10 steps' mean loss 0.88-0.91, the last 10 steps' 0.27-0.33 (a
    # ratio of 0.30-0.37). The bound, half of the first window and below 0.5, leaves a margin of
    # about 0.15 on each; a denoiser that does not learn (a wrong target, frozen weights) stays
    # near 1.
    scene = scenes.Scene(n_objects=1)
    combos = scenes.combinations(scene)[:8]
    pipe = denoiser.build(scene, denoiser.resolve_size("tiny"), 0, tmp_path / "tok")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = denoiser.train(pipe, scenes.render(scene, combos), scenes.prompts(scene, combos), steps=60,
                           batch=8, lr=3e-3, seed=0, log_points=6)
    finally:
        torch.set_num_threads(threads)
    first, last = r["loss_curve"][0]["loss"], r["loss_curve"][-1]["loss"]
    assert r["first_loss"] > 0.8 and first > 0.7
    assert last < 0.5 * first and last < 0.5


@pytest.mark.parametrize("prediction", ["epsilon", "v_prediction", "sample"])
def test_the_training_target_is_what_the_sampler_reads_back_as_the_clean_image(prediction):
    """A UNet that outputs exactly the training target at (x0, noise, t) makes the sampler's DDIM
    step recover x0: training and sampling agree on what the output means. A target of another
    kind (the noise, where the scheduler expects the velocity) is caught."""
    import torch
    from diffusers import DDPMScheduler

    sched = denoiser.sampling_scheduler(prediction)
    assert sched.config.prediction_type == prediction
    train_sched = DDPMScheduler.from_config(sched.config)
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand((4, 3, 16, 16), generator=g, dtype=torch.float64) * 1.8 - 0.9  # inside the clip range
    noise = torch.randn((4, 3, 16, 16), generator=g, dtype=torch.float64)
    sched.set_timesteps(20)
    for t in sched.timesteps[[0, 5, 19]]:
        tt = torch.full((4,), int(t))
        x_t = train_sched.add_noise(x0, noise, tt)
        target = denoiser._target(train_sched, x0, noise, tt)
        step = sched.step(target, int(t), x_t)
        # The scheduler's constants are float32: sqrt(1 − ᾱ) and sqrt(ᾱ) carry a relative error up to
        # float32's eps, which recovering x0 from x_t divides by sqrt(ᾱ) (4.9e-5 at t = 999).
        alpha_bar = float(sched.alphas_cumprod[int(t)])
        tol = 1e-6 + 2 * torch.finfo(torch.float32).eps * float(x_t.abs().max()) / alpha_bar**0.5
        torch.testing.assert_close(step.pred_original_sample, x0, rtol=0, atol=tol)
        if prediction != "epsilon" and int(t) == int(sched.timesteps[0]):  # where the two differ most
            wrong = sched.step(noise, int(t), x_t).pred_original_sample
            assert (wrong - x0).abs().max() > 0.1


def test_the_prediction_flag_reaches_the_saved_scheduler(tmp_path):
    from verify.images import image_run, train

    assert image_run.PREDICTIONS == denoiser.PREDICTIONS
    args = train.parse_args([*TINY, "--prediction", "v_prediction", "--out", str(tmp_path / "o")])
    assert train.run_config(args)["prediction"] == "v_prediction"
    from verify.cli import UsageError

    with pytest.raises(UsageError, match="invalid choice: 'x0'"):
        train.parse_args([*TINY, "--prediction", "x0"])


def test_the_reports_samples_are_held_out_images_with_their_prompts_and_verdicts(tiny_run):
    from verify.images.analyse import sample_images

    args, report = tiny_run
    s = report["samples"]
    images = sample_images(s)
    scene = scenes.Scene(n_objects=args.objects)
    k = min(train.SAMPLES, len(report["analysis"]["test_prompts"]))
    assert images.shape == (k, 16, 16, 3) and s["side"] == "test"
    assert s["prompt_rows"] == report["analysis"]["test_prompts"][:k]  # held-out rows, in the analysed order
    combos = scenes.combinations(scene)[s["prompt_rows"]]
    assert s["prompts"] == scenes.prompts(scene, combos)
    # The exact judge's verdict on exactly these images.
    assert s["success"] == scenes.correct(scenes.read(scene, images), combos).tolist()
