"""Load a text-to-image diffusers pipeline from local files, and generate seeded images with it.

- `load` takes a folder written by `save_pretrained` (it holds model_index.json) or a hub id
  ("owner/name") that is already in the local Hugging Face cache. A folder whose
  model_index.json names one of this project's pipeline classes (`LOCAL_PIPELINES`: the
  pixel-space denoiser trained by verify.images.train) is loaded with that class; any other
  with diffusers'. Nothing is downloaded (`local_files_only=True`): with no such folder and
  nothing cached, it raises UsageError with one line that says so. A folder or model that is
  not a text-to-image pipeline (no `unet` or `transformer`, no text encoder, no
  `callback_on_step_end`, which the activation recorder needs to index steps) is refused the
  same way.
- `generate` makes n_seeds images per prompt, each from its own `torch.Generator` on the CPU
  seeded with its recorded seed (so an image depends on its seed, not on its place in a batch or
  on the device's random stream). Seeds follow the anchor's rule (`image_setups.seeds`): prompt
  i's k-th image has seed 42 + i·n_seeds + k, i being the prompt's index in its whole setup
  (`seeds_for(rows, n_seeds)`), so a subset of a setup's prompts gets the seeds it has in the
  whole. Image rows are prompt·n_seeds + k, the layout of `PromptSplit.seed_rows`.
- With a `Recorder` (activations.py), each batch's pooled activations are turned into features
  right after its pipeline call, so memory holds features, not every step of every layer.
- `config_hash` fingerprints a pipeline's class and its components' configs (not their weights),
  with the keys that name a path or a library version left out.

The anchor (Florian-toll/compgen-vision, `models.py`) ran 30 steps, with guidance 7.5 for SDXL
and SD3, 3.5 for FLUX and the pipeline's own default (7.5) for SD 1.5; `guidance=None` here
keeps the pipeline's default.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from constructions.tasks import image_setups
from verify.cli import UsageError
from verify.images.activations import DEFAULT_FRACTIONS, denoiser_of, text_encoders_of
from verify.images.judges import as_uint8, combinations, prompt_text

# Config keys that name where or with which library version a component was saved, not what it is.
_VOLATILE = {"_name_or_path", "_diffusers_version", "transformers_version", "_commit_hash", "architectures",
             "_use_default_values", "name_or_path"}
# Pipeline classes of this project, by the name model_index.json gives them: the module that defines each.
LOCAL_PIPELINES = {"PixelTextToImagePipeline": "verify.images.denoiser"}


def _diffusers():
    try:
        import diffusers
    except ImportError:
        raise UsageError("the image pipeline needs diffusers and transformers: pip install -e '.[images]'") \
            from None
    return diffusers


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _looks_like_hub_id(model: str) -> bool:
    """"name" or "owner/name" in the hub's alphabet; a path is anything else."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", model) is not None


def _pipeline_class(diffusers, index: str | os.PathLike | None):
    """The class that loads the pipeline whose model_index.json is `index`: the project's own
    where it names one of `LOCAL_PIPELINES`, else DiffusionPipeline (which picks the class from
    model_index.json)."""
    name = None
    if isinstance(index, (str, os.PathLike)):
        try:
            name = json.loads(Path(index).read_text()).get("_class_name")
        except (OSError, ValueError, AttributeError):
            name = None
    if name in LOCAL_PIPELINES:
        return getattr(importlib.import_module(LOCAL_PIPELINES[name]), name)
    return diffusers.DiffusionPipeline


def _cached_index(repo_id: str, cache_dir) -> str | None:
    """The cached model_index.json of hub id `repo_id`, if there is one."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "model_index.json", cache_dir=cache_dir)
    except Exception:  # noqa: BLE001 - a malformed id or cache: diffusers' own load reports it
        return None
    return found if isinstance(found, str) else None


def load(model: str | os.PathLike, device: str = "cpu", dtype=None,
         cache_dir: str | os.PathLike | None = None):
    """The pipeline in folder `model`, or cached under hub id `model` (in `cache_dir`, default the
    Hugging Face cache: HF_HUB_CACHE or HF_HOME/hub), on `device`."""
    diffusers = _diffusers()
    text = os.fspath(model)
    path = Path(text).expanduser()
    hub = not path.exists()
    if not hub:
        if not (path.is_dir() and (path / "model_index.json").is_file()):
            raise UsageError(f"{text} is not a diffusers pipeline folder (it has no model_index.json)")
        source = str(path)
    elif _looks_like_hub_id(text):
        source = text
    else:
        raise UsageError(f"{text}: no such folder")
    kwargs = {"local_files_only": True}
    if cache_dir is not None:
        kwargs["cache_dir"] = os.fspath(cache_dir)
    if dtype is not None:
        kwargs["torch_dtype"] = dtype
    try:
        index = _cached_index(text, kwargs.get("cache_dir")) if hub else path / "model_index.json"
        pipe = _pipeline_class(diffusers, index).from_pretrained(source, **kwargs)
    except OSError as e:
        if hub:
            raise UsageError(f"{text} is not a local folder and not in the local Hugging Face cache, and "
                             "nothing is downloaded here: fetch it where the hub is reachable "
                             "(huggingface-cli download) or pass its folder") from None
        raise UsageError(f"{text} cannot be loaded as a diffusers pipeline: {_first_line(e)}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{text} cannot be loaded as a diffusers pipeline: {_first_line(e)}") from None
    check_text_to_image(pipe, text)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def check_text_to_image(pipe, name: str = "the pipeline") -> None:
    """UsageError unless `pipe` is a text-to-image pipeline the recorder can follow."""
    kind = type(pipe).__name__
    try:
        denoiser_of(pipe)
    except UsageError:
        raise UsageError(f"{name} holds a {kind}, not a text-to-image pipeline (no unet or transformer)") \
            from None
    if not text_encoders_of(pipe):
        raise UsageError(f"{name} holds a {kind}, not a text-to-image pipeline (no text encoder)")
    params = inspect.signature(pipe.__call__).parameters
    missing = [p for p in ("prompt", "callback_on_step_end", "generator") if p not in params]
    if missing:
        raise UsageError(f"{name} holds a {kind}, whose call takes no {', '.join(missing)}: not a "
                         "text-to-image pipeline whose steps can be followed")


def _config_dict(component) -> dict:
    cfg = getattr(component, "config", None)
    if hasattr(cfg, "to_dict"):  # transformers' PretrainedConfig
        cfg = cfg.to_dict()
    elif hasattr(component, "init_kwargs") and cfg is None:  # a tokenizer
        cfg = {k: v for k, v in component.init_kwargs.items() if isinstance(v, (str, int, float, bool))}
        cfg["vocab_size"] = len(component)
    if not isinstance(cfg, dict):
        cfg = dict(cfg) if cfg is not None else {}
    return {k: v for k, v in cfg.items() if k not in _VOLATILE and "file" not in k and "path" not in k}


def config_hash(pipe) -> str:
    """sha256 of the pipeline's class and its components' classes and configs."""
    parts = {"pipeline": type(pipe).__name__}
    for name, component in sorted(pipe.components.items()):
        parts[name] = None if component is None else {"class": type(component).__name__,
                                                      "config": _config_dict(component)}
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def seeds_for(rows: Sequence[int], n_seeds: int, base_seed: int = image_setups.ANCHOR_SEED) -> np.ndarray:
    """(len(rows), n_seeds): the anchor's seeds of prompts `rows` of a setup (their indices in it)."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and rows.min() < 0:
        raise ValueError("prompt rows are indices, ≥ 0")
    if n_seeds < 1:
        raise UsageError(f"n_seeds must be at least 1, got {n_seeds}")
    top = int(rows.max()) + 1 if rows.size else 0
    return image_setups.seeds(top, n_seeds, base_seed)[rows]


def family_prompts(family, rows: Sequence[int]) -> list[str]:
    """The prompts of rows `rows` of a family's prompt table (an ImageSetup or a rendered Scene)."""
    table = combinations(family)
    return [prompt_text(family, table[int(r)]) for r in rows]


def generate_family(pipe, family, rows: Sequence[int], n_seeds: int = 1,
                    base_seed: int = image_setups.ANCHOR_SEED, **kwargs) -> Generation:
    """`generate` for prompts `rows` of a family, with the anchor's seeds of those rows."""
    return generate(pipe, family_prompts(family, rows), seeds=seeds_for(rows, n_seeds, base_seed), **kwargs)


@dataclass
class Generation:
    """The images of `generate` and what made them. Row r of `images` (and of every feature
    matrix) is prompt r // n_seeds, seed seeds[r // n_seeds, r % n_seeds]."""

    prompts: list[str]
    seeds: np.ndarray  # (n_prompts, n_seeds) int64
    images: np.ndarray  # (n_prompts·n_seeds, H, W, 3) uint8
    steps: int  # denoising steps asked for
    guidance: float | None  # the guidance scale in effect (None: the pipeline has none)
    cfg: bool  # whether the denoiser saw [unconditional; conditional] rows
    features: dict[str, np.ndarray] = field(default_factory=dict)  # layer -> (n_images, d)
    n_steps: int | None = None  # denoising steps the pipeline ran (recorded)
    steps_kept: list[int] = field(default_factory=list)  # their indices behind the features
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS

    @property
    def n_seeds(self) -> int:
        return self.seeds.shape[1]

    @property
    def prompt_of_image(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.prompts)), self.n_seeds)


def generate(pipe, prompts: Sequence[str], n_seeds: int = 1, seeds=None, *, steps: int = 30,
             guidance: float | None = None, recorder=None, fractions: Sequence[float] = DEFAULT_FRACTIONS,
             batch_size: int = 8, progress=None, **call_kwargs) -> Generation:
    """n_seeds images per prompt (seeds (n_prompts, n_seeds), default `seeds_for(range(n_prompts))`),
    batch_size images per pipeline call; with a `Recorder`, their features too. `progress`, if
    given, is called with the number of images finished after each batch."""
    import torch

    prompts = list(prompts)
    if seeds is None:
        seeds = seeds_for(range(len(prompts)), n_seeds)
    seeds = np.asarray(seeds, dtype=np.int64).reshape(len(prompts), -1)
    if steps < 1 or batch_size < 1:
        raise UsageError(f"steps and batch size must be at least 1, got {steps} and {batch_size}")
    if ((seeds < 0) | (seeds >= 2**63)).any():
        raise UsageError("seeds must be non-negative 64-bit integers")
    flat_prompts = [p for p in prompts for _ in range(seeds.shape[1])]
    flat_seeds = seeds.ravel()
    if guidance is not None:
        call_kwargs["guidance_scale"] = float(guidance)
    images, features, n_steps, kept, cfg = [], {}, None, [], False
    for start in range(0, len(flat_prompts), batch_size):
        batch = flat_prompts[start:start + batch_size]
        generators = [torch.Generator(device="cpu").manual_seed(int(s))
                      for s in flat_seeds[start:start + len(batch)]]
        kwargs = dict(call_kwargs)
        if recorder is not None:
            recorder.begin(len(batch))
            kwargs["callback_on_step_end"] = recorder.callback
        try:
            with torch.no_grad():
                out = pipe(prompt=batch, num_inference_steps=steps, generator=generators, output_type="np",
                           **kwargs)
            cfg = bool(getattr(pipe, "do_classifier_free_guidance", False))
            if recorder is not None:
                for layer, rows in recorder.features(fractions).items():
                    features.setdefault(layer, []).append(rows)
                n_steps, kept = recorder.n_steps, recorder.steps_kept(fractions)
        finally:
            if recorder is not None:
                recorder.clear()
        images.append(as_uint8(out.images))  # diffusers' "np" output: floats in [0, 1]
        if progress is not None:
            progress(start + len(batch))
    scale = getattr(pipe, "guidance_scale", None)
    return Generation(prompts=prompts, seeds=seeds, images=np.concatenate(images), steps=steps,
                      guidance=None if scale is None else float(scale), cfg=cfg,
                      features={k: np.concatenate(v) for k, v in features.items()}, n_steps=n_steps,
                      steps_kept=kept, fractions=tuple(fractions))
