"""The image pipeline on a tiny StableDiffusionPipeline built from configs (no network, no weights
downloaded): loading, seeds, activations filed under their step, CFG rows, the text encoder's
entry, the refusals, and the results file.

Seeds reproduce images bit for bit; each activation is filed under the step that computed it
(the pipeline's step, cross-checked against the denoiser's timestep); guidance's conditional
rows are the ones kept; a folder that is not a pipeline, or an uncached hub id offline, is
refused in one line. The anchor's code, as read, filed each activation one denoising step late
and its text encoders' outputs under a step that is never kept.
"""

import json

import numpy as np
import pytest

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

import torch  # noqa: E402

from constructions.tasks import images as scenes  # noqa: E402
from verify.cli import UsageError  # noqa: E402
from verify.images import activations, judges, pipeline, probes, results, tiny  # noqa: E402
from verify.images.activations import UNCOND, Recorder, steps_for  # noqa: E402

PROMPTS = ["a red square top left", "a blue circle bottom right", "a green cross top right"]
ATTN = "down_blocks.0.attentions.0"  # after the first cross-attention: CFG rows differ here


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny.build_pipeline(tmp_path_factory.mktemp("tiny") / "pipe")


@pytest.fixture(scope="module")
def pipe(folder):
    return pipeline.load(folder)


def _pooled(out):
    return activations.pool_output(out, out[0].shape[0] if isinstance(out, tuple) else out.shape[0])


# --- loading -----------------------------------------------------------------------------------

def test_load_gives_the_saved_pipeline_with_a_stable_config_hash(folder, pipe):
    assert type(pipe).__name__ == "StableDiffusionPipeline"
    n_params = sum(p.numel() for m in (pipe.unet, pipe.vae, pipe.text_encoder) for p in m.parameters())
    assert n_params < 30_000
    again = pipeline.load(str(folder))
    assert pipeline.config_hash(again) == pipeline.config_hash(pipe)
    from diffusers import DDIMScheduler

    again.scheduler = DDIMScheduler.from_config(again.scheduler.config, steps_offset=0)
    assert pipeline.config_hash(again) != pipeline.config_hash(pipe)


def test_an_uncached_hub_id_offline_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(UsageError) as e:
        pipeline.load("compgen-bound-tests/no-such-model-7f3a")
    message = str(e.value)
    assert "\n" not in message
    assert "not in the local Hugging Face cache" in message and "no-such-model-7f3a" in message


def test_a_cached_hub_id_loads_offline(folder, pipe, tmp_path):
    import shutil

    repo = tmp_path / "hub" / "models--compgen-bound-tests--tiny-sd"
    shutil.copytree(folder, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    cached = pipeline.load("compgen-bound-tests/tiny-sd", cache_dir=tmp_path / "hub")
    assert pipeline.config_hash(cached) == pipeline.config_hash(pipe)
    with pytest.raises(UsageError, match="not in the local Hugging Face cache"):
        pipeline.load("compgen-bound-tests/other", cache_dir=tmp_path / "hub")


def test_a_folder_that_is_no_text_to_image_pipeline_is_refused(tmp_path):
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    with pytest.raises(UsageError, match="no model_index.json"):
        pipeline.load(tmp_path)
    with pytest.raises(UsageError, match="no such folder"):
        pipeline.load(str(tmp_path / "missing" / "deeper" / "still"))
    unet = UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(4, 4), down_block_types=("DownBlock2D",) * 2,
                       up_block_types=("UpBlock2D",) * 2, norm_num_groups=2, add_attention=False)
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(tmp_path / "ddpm")
    with pytest.raises(UsageError, match="not a text-to-image pipeline") as e:
        pipeline.load(tmp_path / "ddpm")
    assert "\n" not in str(e.value)


# --- seeds ---------------------------------------------------------------------------------------

def test_seeds_follow_the_anchor_rule_and_reproduce_images_bit_for_bit(pipe):
    np.testing.assert_array_equal(pipeline.seeds_for([3, 5], 2), [[48, 49], [52, 53]])
    seeds = pipeline.seeds_for([0, 1, 2], 2)
    a = pipeline.generate(pipe, PROMPTS, seeds=seeds, steps=2, guidance=3.0, batch_size=6)
    b = pipeline.generate(pipe, PROMPTS, seeds=seeds, steps=2, guidance=3.0, batch_size=4)
    c = pipeline.generate(pipe, PROMPTS, n_seeds=2, steps=2, guidance=3.0, batch_size=1)
    np.testing.assert_array_equal(a.seeds, seeds)
    np.testing.assert_array_equal(c.seeds, seeds)  # the default is the anchor's rule
    assert a.images.shape == (6, 16, 16, 3) and a.images.dtype == np.uint8
    # Each image depends on its seed alone, not on the batch it was made in.
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.images, c.images)
    # Another seed, another image (the same prompt, rows 0 and 1).
    assert not np.array_equal(a.images[0], a.images[1])
    shifted = pipeline.generate(pipe, PROMPTS[:1], seeds=[[43]], steps=2, guidance=3.0)
    np.testing.assert_array_equal(shifted.images[0], a.images[1])
    # A family's rows get the prompts and the seeds they have in the whole family.
    scene = scenes.Scene()
    g = pipeline.generate_family(pipe, scene, [5, 2], n_seeds=2, steps=2, guidance=3.0)
    assert g.prompts == [scenes.prompts(scene)[5], scenes.prompts(scene)[2]]
    np.testing.assert_array_equal(g.seeds, [[52, 53], [46, 47]])
    np.testing.assert_array_equal(g.prompt_of_image, [0, 0, 1, 1])


# --- activations -------------------------------------------------------------------------------

class Reference:
    """What a plain hook sees: the timestep of each denoiser call, and a module's inputs and
    pooled output at each call."""

    def __init__(self, pipe, module_name):
        module = dict(pipe.unet.named_modules())[module_name]
        self.t, self.inputs, self.outputs = [], [], []
        self.handles = [
            pipe.unet.register_forward_pre_hook(self._t, with_kwargs=True),
            module.register_forward_pre_hook(self._inputs, with_kwargs=True),
            module.register_forward_hook(lambda m, a, out: self.outputs.append(_pooled(out))),
        ]

    def _t(self, module, args, kwargs):
        self.t.append(float(args[1]))

    def _inputs(self, module, args, kwargs):
        clone = lambda v: v.clone() if torch.is_tensor(v) else v  # noqa: E731
        self.inputs.append(([clone(a) for a in args], {k: clone(v) for k, v in kwargs.items()}))

    def close(self):
        for h in self.handles:
            h.remove()


def test_fractions_pick_floor_f_times_last_step():
    assert steps_for((0.3, 0.5, 0.7, 1.0), 30) == [8, 14, 20, 29]  # the anchor capped 1.0 at 28
    assert steps_for((0.3, 0.5, 0.7, 1.0), 11) == [3, 5, 7, 10]
    assert steps_for((0.3, 0.5, 0.7, 1.0), 2) == [0, 1]
    assert steps_for((0.0, 0.5, 1.0), 4) == [0, 1, 3]
    with pytest.raises(UsageError):
        steps_for((0.5, 1.5), 10)


@pytest.mark.parametrize("module_name", [ATTN, "up_blocks.1.resnets.1"])
def test_each_activation_is_filed_under_the_step_that_computed_it(pipe, module_name):
    ref = Reference(pipe, module_name)
    try:
        with Recorder(pipe) as rec:
            g = pipeline.generate(pipe, PROMPTS[:2], n_seeds=1, steps=4, guidance=3.0, recorder=rec,
                                  fractions=(0.0, 0.5, 1.0))
    finally:
        ref.close()
    timesteps = [float(t) for t in pipe.scheduler.timesteps]
    assert ref.t == timesteps and len(ref.outputs) == 4  # one denoiser call per step (batched CFG)
    assert g.n_steps == 4 and g.steps_kept == [0, 1, 3]
    cond = [out[2:] for out in ref.outputs]  # rows [unconditional; conditional], n = 2 images
    feats = g.features[module_name]
    d = cond[0].shape[1]
    blocks = [feats[:, k * d:(k + 1) * d] for k in range(feats.shape[1] // d)]
    assert len(blocks) == 4  # steps 0, 1, 3, then the mean over all steps
    for block, step in zip(blocks[:3], [0, 1, 3], strict=True):
        np.testing.assert_array_equal(block, cond[step].numpy())
    np.testing.assert_allclose(blocks[3], torch.stack(cond).mean(0).numpy(), rtol=1e-6, atol=1e-7)
    # The steps differ, so a record one step late (the anchor's) would fail the comparison above.
    assert not np.allclose(cond[0], cond[1]) and not np.allclose(cond[1], cond[3])


def test_the_step_index_comes_from_the_pipeline_and_is_checked(pipe):
    with Recorder(pipe, patterns=[ATTN]) as rec:
        assert rec.layers == [ATTN]
        rec.begin(1)
        with torch.no_grad():
            pipe(prompt=PROMPTS[:1], num_inference_steps=3, guidance_scale=3.0, output_type="np",
                 callback_on_step_end=rec.callback)
        assert rec.n_steps == 3 and sorted(rec.raw[ATTN]) == [0, 1, 2]
        assert rec.timesteps == {i: float(t) for i, t in enumerate(pipe.scheduler.timesteps)}
        assert rec.per_step(ATTN).shape == (3, 1, 4)
        rec.begin(1)  # a callback for another step than the recorder's is refused
        with pytest.raises(activations.StepMismatch, match="finished step 1 while the recorder was in step"):
            rec.callback(pipe, 1, pipe.scheduler.timesteps[1], {})
        rec.begin(1)  # and so is one whose timestep is not the one the denoiser saw in that step
        rec.timesteps[0], rec._scale = 500.0, 1.0
        with pytest.raises(activations.StepMismatch, match="timestep"):
            rec.callback(pipe, 0, torch.tensor(800.0), {})
        rec.begin(1)  # without the callback the steps cannot be told apart
        with torch.no_grad(), pytest.raises(activations.StepMismatch, match="twice in step 0"):
            pipe(prompt=PROMPTS[:1], num_inference_steps=2, guidance_scale=3.0, output_type="np")
        rec.begin(1)
        with pytest.raises(activations.StepMismatch, match="no denoising step"):
            rec.features()
    with pytest.raises(UsageError, match="matches"):
        Recorder(pipe, patterns=[r"no\.such\.block"])


def test_with_guidance_the_conditional_rows_are_recorded(pipe):
    ref = Reference(pipe, ATTN)
    try:
        with Recorder(pipe, patterns=[ATTN], rows="both") as rec:
            g = pipeline.generate(pipe, PROMPTS[:2], n_seeds=1, steps=2, guidance=3.0, recorder=rec,
                                  fractions=(0.0, 1.0))
        with Recorder(pipe, patterns=[ATTN]) as rec:
            plain = pipeline.generate(pipe, PROMPTS[:2], n_seeds=1, steps=2, guidance=3.0, recorder=rec,
                                      fractions=(0.0, 1.0))
    finally:
        ref.close()
    assert g.cfg and g.guidance == 3.0
    assert set(g.features) == {ATTN, ATTN + UNCOND, "text_encoder", "text_encoder" + UNCOND}
    assert set(plain.features) == {ATTN, "text_encoder"}  # the default keeps the conditional rows only
    np.testing.assert_array_equal(plain.features[ATTN], g.features[ATTN])
    module = dict(pipe.unet.named_modules())[ATTN]
    n, d = 2, 4
    for step in (0, 1):
        args, kwargs = ref.inputs[step]
        cond, uncond = (_direct(module, args, kwargs, rows, 2 * n) for rows in (slice(n, 2 * n), slice(0, n)))
        np.testing.assert_allclose(g.features[ATTN][:, step * d:(step + 1) * d], cond, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g.features[ATTN + UNCOND][:, step * d:(step + 1) * d], uncond, rtol=1e-5,
                                   atol=1e-6)
        assert not np.allclose(cond, uncond, atol=1e-4)  # the rows differ: the test can tell them apart


def _direct(module, args, kwargs, rows, batch):
    """The module called on the rows `rows` of its inputs' batch, pooled."""
    take = lambda v: v[rows] if torch.is_tensor(v) and v.ndim and v.shape[0] == batch else v  # noqa: E731
    with torch.no_grad():
        out = module(*[take(a) for a in args], **{k: take(v) for k, v in kwargs.items()})
    return _pooled(out).numpy()


def test_without_guidance_every_row_is_conditional(pipe):
    with Recorder(pipe, patterns=[ATTN], rows="both") as rec:
        g = pipeline.generate(pipe, PROMPTS[:2], n_seeds=1, steps=2, guidance=1.0, recorder=rec)
    assert not g.cfg
    assert set(g.features) == {ATTN, "text_encoder"}
    assert g.features[ATTN].shape == (2, 4 * 3)  # steps 0 and 1, then the mean


def test_the_text_encoder_output_has_its_own_entry(pipe):
    with Recorder(pipe, patterns=[ATTN], rows="both") as rec:
        g = pipeline.generate(pipe, PROMPTS[:2], n_seeds=2, steps=2, guidance=3.0, recorder=rec)

    def encode(texts):
        ids = pipe.tokenizer(texts, padding="max_length", max_length=pipe.tokenizer.model_max_length,
                             truncation=True, return_tensors="pt").input_ids
        with torch.no_grad():
            return pipe.text_encoder(ids).last_hidden_state.mean(dim=1).numpy()

    want = np.repeat(encode(PROMPTS[:2]), 2, axis=0)  # rows: prompt·n_seeds + k
    np.testing.assert_allclose(g.features["text_encoder"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.features["text_encoder" + UNCOND], encode(["", "", "", ""]), rtol=1e-5,
                               atol=1e-6)
    assert g.features["text_encoder"].shape == (4, pipe.text_encoder.config.hidden_size)  # no steps


def test_a_transformer_pipeline_with_two_text_encoders(tmp_path):
    sd3 = tiny.sd3_pipeline(tmp_path / "tok")
    pipeline.check_text_to_image(sd3)
    ref = {"t": []}
    handle = sd3.transformer.register_forward_pre_hook(
        lambda m, a, kw: ref["t"].append(float(kw["timestep"][0])), with_kwargs=True)
    try:
        with Recorder(sd3, rows="both") as rec:
            assert rec.layers == ["transformer_blocks.0", "transformer_blocks.1"]
            assert rec.text_layers == ["text_encoder", "text_encoder_2"]
            g = pipeline.generate(sd3, PROMPTS[:2], steps=3, guidance=4.0, recorder=rec)
    finally:
        handle.remove()
    assert g.cfg and g.n_steps == 3 and ref["t"] == [float(t) for t in sd3.scheduler.timesteps]
    # A joint block returns the text stream and the image stream: both pooled, side by side, at
    # steps 0, 1, 2 and their mean; the last block returns the image stream only.
    assert g.features["transformer_blocks.0"].shape == (2, 4 * (8 + 8))
    assert g.features["transformer_blocks.1"].shape == (2, 4 * 8)
    ids = sd3.tokenizer_2(PROMPTS[:2], padding="max_length", max_length=sd3.tokenizer_2.model_max_length,
                          truncation=True, return_tensors="pt").input_ids
    with torch.no_grad():
        want = sd3.text_encoder_2(ids, output_hidden_states=True).last_hidden_state.mean(dim=1).numpy()
    np.testing.assert_allclose(g.features["text_encoder_2"], want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(g.features["text_encoder_2"], g.features["text_encoder_2" + UNCOND])


# --- end to end: generate, probe, judge, write -------------------------------------------------

def test_an_analysis_on_the_rendered_family_writes_a_results_file(folder, pipe, tmp_path):
    scene = scenes.Scene()
    rows = np.arange(0, 64, 4)  # 16 prompts
    prompts = scenes.prompts(scene, scenes.combinations(scene)[rows])
    with Recorder(pipe) as rec:
        g = pipeline.generate(pipe, prompts, seeds=pipeline.seeds_for(rows, 2), steps=2, guidance=3.0,
                              recorder=rec, batch_size=16)
        layers = rec.layers + rec.text_layers
    train_p, test_p = np.arange(11), np.arange(11, 16)
    labels = np.repeat(scenes.labels(scene, scenes.combinations(scene)[rows]), 2, axis=0)
    train_rows = (train_p[:, None] * 2 + np.arange(2)).ravel()
    test_rows = (test_p[:, None] * 2 + np.arange(2)).ravel()
    scores = probes.probe_layers(g.features, labels, train_rows, test_rows)
    judge = judges.ExactJudge()
    verdict = judge.evaluate(g.images, scene, np.repeat(rows, 2))
    record = results.build(model=str(folder), pipeline_class=type(pipe).__name__,
                           config_sha256=pipeline.config_hash(pipe), family=scene, prompt_rows=rows,
                           generation=g, train_prompts=train_p, test_prompts=test_p, layers=layers,
                           probe=scores, judge=judge, verdict=verdict)
    path = results.write(tmp_path / "out.json", record)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary file left
    back = results.read(path)
    assert json.loads(path.read_text()) == back
    assert back["model"] == {"id": str(folder), "pipeline": "StableDiffusionPipeline",
                             "config_sha256": pipeline.config_hash(pipe)}
    assert back["family"]["kind"] == "scene" and back["prompt_rows"] == rows.tolist()
    assert back["seeds"] == pipeline.seeds_for(rows, 2).tolist() and back["prompts"] == prompts
    assert back["denoising"] == {"steps": 2, "steps_run": 2, "guidance": 3.0, "cfg": True,
                                 "rows_recorded": "cond"}
    assert back["activations"]["step_fractions"] == [0.3, 0.5, 0.7, 1.0]
    assert back["activations"]["steps_kept"] == [0, 1] and back["activations"]["layers"] == layers
    assert set(back["probe"]["per_layer"]) == set(layers) and back["probe"]["best_layer"] in layers
    for s in back["probe"]["per_layer"].values():
        assert 0.0 <= s["test_f1"] <= 1.0 and s["n_train"] == 22 and s["n_test"] == 10
    assert back["judge"]["name"] == "exact" and len(back["judge"]["success"]) == 32
    assert np.array(back["judge"]["slot_correct"]).shape == (32, 3)
    assert back["code_version"] and back["timestamp"].endswith("+00:00")
    with pytest.raises(UsageError):
        results.read(_write(tmp_path / "x.json", {"a": 1}))


def _write(path, obj):
    path.write_text(json.dumps(obj))
    return path


def test_the_commit_recorded_is_this_checkouts_never_an_enclosing_repository(tmp_path):
    """A wheel installed into a venv inside a user's own repository lies in a checkout that is
    not this project's: its HEAD must not be recorded as the code's."""
    import shutil
    import subprocess

    from verify.images.results import git_commit

    if shutil.which("git") is None:
        pytest.skip("no git")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f").write_text("x")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "m"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    site = tmp_path / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    assert git_commit(tmp_path) == head
    assert git_commit(site) is None
