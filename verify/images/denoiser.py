"""A small text-conditioned denoiser for the rendered family, trained from scratch (issue 25, part 3).

What it is:

- **Pixel space.** The denoiser works on the images themselves, (3, 16, 16) scaled to [-1, 1],
  with no VAE: at 16×16 there is nothing to compress, a VAE would be a second network to train
  (or a random fixed one that distorts the palette the exact judge reads), and its decoder would
  sit between the denoiser and the pixels the judge scores.
- **Denoiser.** A diffusers `UNet2DConditionModel` (cross-attention to the text at the levels of
  8×8 pixels and below, `unet_config`) of a named size (`PRESETS`) or explicit channels.
- **Text encoder.** A `CLIPTextModel` from a small `CLIPTextConfig`; its last hidden state is
  what the UNet attends to, as in Stable Diffusion.
- **Tokenizer.** A `CLIPTokenizer` whose vocabulary is `tiny.tokenizer_files`' characters plus
  every word of the family's prompts as one token (`word_tokenizer`): BPE merges that build each
  word, checked to give one token per word. Prompts are padded to `MAX_TOKENS`.
- **Noise.** Training draws DDPM noise (`DDPMScheduler.add_noise`, 1,000 steps, the cosine
  schedule "squaredcos_cap_v2", which suits small images) and regresses the noise (epsilon) with
  MSE; the pipeline samples with a `DDIMScheduler` of the same betas ("trailing" spacing, so that
  a few steps start from pure noise; predicted images clipped to [-1, 1]).
- **Classifier-free guidance.** Training replaces a prompt by "" with probability `p_uncond`;
  sampling runs [unconditional; conditional] rows, as SD's pipelines do, so the activation
  recorder's row convention holds.
- **Pipeline.** `PixelTextToImagePipeline`, a `DiffusionPipeline` with components unet,
  text_encoder, tokenizer and scheduler, saved with `save_pretrained`; `pipeline.load` opens its
  folder as it opens SD's (model_index.json names the class, which `pipeline.LOCAL_PIPELINES`
  maps to this module). Its call takes SD's arguments (prompt, num_inference_steps,
  guidance_scale, negative_prompt, generator, output_type, callback_on_step_end) and returns
  `ImagePipelineOutput`.

`train` fits the unet and text encoder together with AdamW on a fixed set of (image, prompt)
pairs; every random draw (initialisation, batches, timesteps, noise, dropped prompts) comes from
the seed, so a run is reproducible on one machine with one thread count.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from verify.images import tiny

MAX_TOKENS = 16  # 2 + the longest prompt's words (a two-object prompt has 11)
TRAIN_TIMESTEPS = 1000
BETA_SCHEDULE = "squaredcos_cap_v2"
PREDICTIONS = ("epsilon", "v_prediction", "sample")  # what the UNet may be trained to output
ATTENTION_PIXELS = 8  # the UNet's levels of at most this many pixels attend to the text (unet_config)
# Named sizes: UNet channels per resolution (16, 8, 4 pixels), resnets per block, and the text
# encoder's width and layers. Parameters (unet + text encoder, vocabulary of the 2-object family):
# tiny 64,651 + 5,200; small 984,867 + 29,248; base 1,687,075 + 107,648; large 10,068,867 + 610,176.
PRESETS = {
    "tiny": dict(channels=(8, 16), layers_per_block=1, text_hidden=16, text_layers=1),
    "small": dict(channels=(32, 64), layers_per_block=1, text_hidden=32, text_layers=2),
    "base": dict(channels=(32, 64, 64), layers_per_block=1, text_hidden=64, text_layers=2),
    "large": dict(channels=(64, 128, 128), layers_per_block=2, text_hidden=128, text_layers=3),
}


# --- tokenizer -----------------------------------------------------------------------------

def family_words(scene) -> list[str]:
    """Every word the family's prompts use, in a fixed order: "a", "and", then the colours,
    shapes and the position words."""
    from constructions.tasks.images import POSITIONS

    words = ["a", "and", *scene.colours, *scene.shapes, *(w for p in POSITIONS for w in p.split())]
    return list(dict.fromkeys(w.lower() for w in words))


def _bpe(word: str, ranks: dict) -> list[str]:
    """What byte-pair encoding with merge ranks `ranks` makes of one lower-case word (CLIP's rule:
    the last character carries "</w>"; the lowest-ranked adjacent pair is merged, everywhere,
    until no pair has a rank)."""
    symbols = [*word[:-1], word[-1] + "</w>"]
    while len(symbols) > 1:
        pairs = {(a, b) for a, b in zip(symbols, symbols[1:], strict=False)}
        best = min(pairs, key=lambda p: ranks.get(p, math.inf))
        if best not in ranks:
            break
        out, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                out.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    return symbols


def word_merges(words: Sequence[str]) -> list[tuple[str, str]]:
    """BPE merges under which each word is one token. A word's merges join its pieces left to
    right; a merge made for one word can split another ("a n" of "and" inside "triangle"), so
    each word is merged on from whatever pieces the merges so far leave it, with new merges
    ranked after all earlier ones (which therefore change no word already whole), until every
    word is whole."""
    merges: list[tuple[str, str]] = []
    ranks: dict[tuple[str, str], int] = {}
    for _ in range(len(words) + 1):
        pending = False
        for w in words:
            pieces = _bpe(w, ranks)
            if len(pieces) == 1:
                continue
            pending = True
            cur = pieces[0]
            for piece in pieces[1:]:
                if (cur, piece) not in ranks:
                    ranks[(cur, piece)] = len(merges)
                    merges.append((cur, piece))
                cur += piece
        if not pending:
            return merges
    raise RuntimeError("could not build merges that keep every word whole")  # pragma: no cover


def word_tokenizer(folder: str | os.PathLike, words: Sequence[str], max_tokens: int = MAX_TOKENS):
    """A CLIPTokenizer with `tiny.tokenizer_files`' single characters plus each of `words` as one
    token, its files written into `folder`."""
    import json

    from transformers import CLIPTokenizer

    folder = tiny.tokenizer_files(folder)
    vocab = json.loads((folder / "vocab.json").read_text())
    merges = word_merges([w.lower() for w in words])
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    tok = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=max_tokens)
    for w in words:
        if len(tok.tokenize(w)) != 1:  # pragma: no cover - word_merges guarantees it
            raise RuntimeError(f"the word {w!r} is not one token: {tok.tokenize(w)}")
    return tok


# --- models --------------------------------------------------------------------------------

def resolve_size(preset: str, channels: Sequence[int] | None = None, layers_per_block: int | None = None,
                 text_hidden: int | None = None, text_layers: int | None = None) -> dict:
    """A preset's sizes with the explicit ones given in place of its own."""
    size = dict(PRESETS[preset])
    for key, value in (("channels", channels), ("layers_per_block", layers_per_block),
                       ("text_hidden", text_hidden), ("text_layers", text_layers)):
        if value is not None:
            size[key] = tuple(value) if key == "channels" else int(value)
    size["channels"] = tuple(int(c) for c in size["channels"])
    return size


def check_size(size: dict, image_size: int = 16) -> None:
    """ValueError for sizes the UNet cannot take: channels of 1 to 4 resolutions (each halving
    the image, down to at least 2 pixels), each a multiple of 4 (its group norm's groups); a
    text width that is a multiple of 2 (two attention heads)."""
    channels = size["channels"]
    if not 1 <= len(channels) <= 4 or image_size >> (len(channels) - 1) < 2:
        raise ValueError(f"channels takes 1 to 4 resolutions with {image_size}-pixel images down to 2 "
                         f"pixels, got {len(channels)}")
    if any(c < 4 or c % 4 for c in channels):
        raise ValueError(f"every channel count must be a positive multiple of 4, got {list(channels)}")
    if size["text_hidden"] < 2 or size["text_hidden"] % 2:
        raise ValueError(f"the text width must be an even number ≥ 2, got {size['text_hidden']}")


def _heads(c: int) -> int:
    """Attention heads of a block of c channels: the most of 1, 2, 4, 8 with ≥ 16 channels each."""
    return max([d for d in (1, 2, 4, 8) if c % d == 0 and c // d >= 16] or [1])


def unet_config(size: dict, image_size: int = 16) -> dict:
    """The UNet: one level per channel count, halving the image each; cross-attention to the text
    at the levels of at most ATTENTION_PIXELS pixels and in the middle block. Self-attention over
    the 16×16 level's 256 positions would take 40% of a step on a CPU (measured: 0.83 against
    0.49 s a step for the small preset at batch 64), and an object there spans a quadrant of 8×8."""
    channels = size["channels"]
    attends = [image_size >> i <= ATTENTION_PIXELS for i in range(len(channels))]
    down = tuple("CrossAttnDownBlock2D" if a else "DownBlock2D" for a in attends)
    up = tuple("CrossAttnUpBlock2D" if a else "UpBlock2D" for a in reversed(attends))
    return dict(sample_size=image_size, in_channels=3, out_channels=3,
                layers_per_block=size["layers_per_block"], block_out_channels=channels,
                down_block_types=down, up_block_types=up, cross_attention_dim=size["text_hidden"],
                attention_head_dim=tuple(_heads(c) for c in channels),
                norm_num_groups=math.gcd(8, *channels))


def text_config(vocab_size: int, size: dict):
    from transformers import CLIPTextConfig

    hidden = size["text_hidden"]
    return CLIPTextConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=4 * hidden,
                          num_hidden_layers=size["text_layers"], num_attention_heads=2,
                          max_position_embeddings=MAX_TOKENS, bos_token_id=0, eos_token_id=1, pad_token_id=1,
                          projection_dim=hidden)


def sampling_scheduler(prediction: str = "epsilon"):
    """DDIM over the training schedule; `prediction` is what the UNet outputs (diffusers'
    prediction_type: epsilon, v_prediction or sample), which training reads from this config too."""
    from diffusers import DDIMScheduler

    if prediction not in PREDICTIONS:
        raise ValueError(f"prediction must be one of {', '.join(PREDICTIONS)}, got {prediction!r}")
    return DDIMScheduler(num_train_timesteps=TRAIN_TIMESTEPS, beta_schedule=BETA_SCHEDULE, clip_sample=True,
                         clip_sample_range=1.0, set_alpha_to_one=True, timestep_spacing="trailing",
                         prediction_type=prediction)


def build(scene, size: dict, seed: int, tokenizer_folder: str | os.PathLike, prediction: str = "epsilon"):
    """A freshly initialised `PixelTextToImagePipeline` for `scene`, on the CPU (weights from
    torch.manual_seed(seed)), whose UNet predicts `prediction` (see sampling_scheduler)."""
    import torch
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel

    check_size(size, scene.size)
    tok = word_tokenizer(tokenizer_folder, family_words(scene))
    torch.manual_seed(seed)
    text_encoder = CLIPTextModel(text_config(len(tok), size))
    unet = UNet2DConditionModel(**unet_config(size, scene.size))
    return pipeline_class()(unet=unet, text_encoder=text_encoder, tokenizer=tok,
                                    scheduler=sampling_scheduler(prediction))


def pipeline_class():
    """`PixelTextToImagePipeline` (which imports diffusers)."""
    return globals().get("PixelTextToImagePipeline") or __getattr__("PixelTextToImagePipeline")


def parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())


# --- the pipeline --------------------------------------------------------------------------

def _define_pipeline():
    """The pipeline class, defined on first use: diffusers is imported only then."""
    from diffusers import DiffusionPipeline

    class PixelTextToImagePipeline(DiffusionPipeline):
        """Text to image in pixel space: a UNet2DConditionModel denoises (3, H, W) images in [-1, 1],
        conditioned on a CLIPTextModel's last hidden state (see the module docstring)."""

        model_cpu_offload_seq = "text_encoder->unet"
        _callback_tensor_inputs = ["latents"]

        def __init__(self, unet, text_encoder, tokenizer, scheduler):
            super().__init__()
            self.register_modules(unet=unet, text_encoder=text_encoder, tokenizer=tokenizer,
                                  scheduler=scheduler)
            self._guidance_scale = 1.0

        @property
        def guidance_scale(self) -> float:
            return self._guidance_scale

        @property
        def do_classifier_free_guidance(self) -> bool:
            return self._guidance_scale > 1.0

        def tokenize(self, prompts: Sequence[str]):
            length = self.tokenizer.model_max_length
            return self.tokenizer(list(prompts), padding="max_length", max_length=length, truncation=True,
                                  return_tensors="pt").input_ids

        def encode_prompt(self, prompts: Sequence[str]):
            """(n, tokens, hidden): the text encoder's last hidden state."""
            ids = self.tokenize(prompts).to(self.text_encoder.device)
            return self.text_encoder(ids).last_hidden_state

        __call__ = _generate  # module-level, so that the class holds the pipeline's state only

    PixelTextToImagePipeline.__module__ = __name__
    PixelTextToImagePipeline.__qualname__ = "PixelTextToImagePipeline"
    return PixelTextToImagePipeline


def _generate(self, prompt: str | list[str], num_inference_steps: int = 20,
              guidance_scale: float = 3.0, negative_prompt: str | list[str] | None = None,
              generator=None, latents=None,
              output_type: str = "pil", return_dict: bool = True,
              callback_on_step_end: Callable | None = None,
              callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",)):
    """Images for `prompt` (one per prompt): noise from `generator` (one per image, or one),
    `num_inference_steps` DDIM steps, guidance_scale > 1 for classifier-free guidance against
    `negative_prompt` (default ""). output_type "np" (floats in [0, 1], (n, H, W, 3)), "pt"
    ((n, 3, H, W)) or "pil"."""
    import torch
    from diffusers.pipelines.pipeline_utils import ImagePipelineOutput

    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    negative = _negative_prompts(negative_prompt, len(prompts))
    _check_tensor_inputs(callback_on_step_end_tensor_inputs, self._callback_tensor_inputs)
    self._guidance_scale = float(guidance_scale)
    with torch.no_grad():
        text = _conditioning(self, prompts, negative)
        latents = _denoise(self, text, len(prompts), num_inference_steps, generator, latents,
                           callback_on_step_end, callback_on_step_end_tensor_inputs)
        images = (latents / 2 + 0.5).clamp(0, 1)
    self.maybe_free_model_hooks()
    out = _as_output(self, images, output_type)
    return ImagePipelineOutput(images=out) if return_dict else (out,)


def _negative_prompts(negative_prompt, n: int) -> list[str]:
    """One negative prompt per prompt ("" by default, a string repeated)."""
    if negative_prompt is None:
        return [""] * n
    negative = [negative_prompt] * n if isinstance(negative_prompt, str) else list(negative_prompt)
    if len(negative) != n:
        raise ValueError(f"{len(negative)} negative prompts for {n} prompts")
    return negative


def _check_tensor_inputs(asked: Sequence[str], known: Sequence[str]) -> None:
    unknown = set(asked) - set(known)
    if unknown:
        raise ValueError(f"callback tensor inputs must be among {list(known)}, got {sorted(unknown)}")


def _conditioning(pipe, prompts: list[str], negative: list[str]):
    """The text encoder's states for the prompts; under guidance [negative; prompts], SD's order
    (the prompts are encoded first, then the negative prompts, as before)."""
    import torch

    text = pipe.encode_prompt(prompts)
    if pipe.do_classifier_free_guidance:
        text = torch.cat([pipe.encode_prompt(negative), text])
    return text


def _denoise(pipe, text, n: int, steps: int, generator, latents, callback, callback_inputs):
    """The DDIM loop from noise (`latents`, or drawn from `generator`) to the clean latents."""
    import torch
    from diffusers.utils.torch_utils import randn_tensor

    device, dtype = pipe.unet.device, pipe.unet.dtype
    size = pipe.unet.config.sample_size
    shape = (n, pipe.unet.config.in_channels, size, size)
    if latents is None:
        latents = randn_tensor(shape, generator=generator, device=device, dtype=dtype)
    latents = latents.to(device=device, dtype=dtype) * pipe.scheduler.init_noise_sigma
    pipe.scheduler.set_timesteps(steps, device=device)
    guided = pipe.do_classifier_free_guidance
    for i, t in enumerate(pipe.progress_bar(pipe.scheduler.timesteps)):
        x = torch.cat([latents] * 2) if guided else latents
        x = pipe.scheduler.scale_model_input(x, t)
        eps = pipe.unet(x, t, encoder_hidden_states=text).sample
        if guided:
            uncond, cond = eps.chunk(2)
            eps = uncond + pipe.guidance_scale * (cond - uncond)
        latents = pipe.scheduler.step(eps, t, latents).prev_sample
        if callback is not None:
            out = callback(pipe, i, t, {k: {"latents": latents}[k] for k in callback_inputs})
            latents = (out or {}).get("latents", latents)
    return latents


def _as_output(pipe, images, output_type: str):
    """(n, 3, H, W) images in [0, 1] as output_type asks: "pt" as they are, "np" (n, H, W, 3)
    floats, "pil" images."""
    if output_type == "pt":
        return images
    out = images.permute(0, 2, 3, 1).float().cpu().numpy()
    if output_type == "pil":
        return pipe.numpy_to_pil(out)
    if output_type != "np":
        raise ValueError(f"output_type must be np, pt or pil, got {output_type!r}")
    return out


def __getattr__(name: str):
    """`PixelTextToImagePipeline`, built on first access (so that importing this module, for its
    sizes, imports no diffusers); pipeline.load finds it here by name."""
    if name == "PixelTextToImagePipeline":
        cls = globals()[name] = _define_pipeline()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- training ------------------------------------------------------------------------------

def to_model_space(images) -> np.ndarray:
    """(n, H, W, 3) uint8 images to (n, 3, H, W) float32 in [-1, 1]."""
    x = np.asarray(images, dtype=np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def train(pipe, images, prompts: Sequence[str], *, steps: int, batch: int, lr: float,
          weight_decay: float = 0.01, p_uncond: float = 0.1, seed: int = 0, device: str = "cpu",
          grad_clip: float = 1.0, log_points: int = 10, progress=None, tracker=None) -> dict:
    """Train `pipe`'s unet and text encoder on (images[i], prompts[i]) pairs: per step `batch`
    pairs drawn uniformly with replacement, a uniform DDPM timestep and Gaussian noise each, the
    prompt replaced by "" with probability p_uncond; MSE between the UNet's output and its target
    (the noise, the velocity or the clean image: the scheduler's prediction_type); AdamW (lr,
    weight_decay), gradients clipped to norm grad_clip. Returns the loss curve (the mean loss
    over each of log_points equal windows of steps, at the window's last step) and the first
    and last steps' losses. `progress`, if given, is called with each finished step and its
    loss (read to the host already: calling it costs no sync); `tracker`
    (verify.learning.tracking), if given, gets each window's mean loss as `train/loss` at the
    window's last step, as it ends (the losses are on the host already: no sync of its own)."""
    import torch
    import torch.nn.functional as F
    from diffusers import DDPMScheduler

    if len(images) != len(prompts) or not len(prompts):
        raise ValueError(f"need one prompt per image and at least one, got {len(images)} and {len(prompts)}")
    noise_scheduler = DDPMScheduler.from_config(pipe.scheduler.config)
    x0_all = torch.from_numpy(to_model_space(images))
    ids_all = pipe.tokenize(list(prompts))
    empty = pipe.tokenize([""])[0]
    gen = torch.Generator(device="cpu").manual_seed(int(seed) + 1)
    unet, text_encoder = pipe.unet.to(device), pipe.text_encoder.to(device)
    unet.train()
    text_encoder.train()
    params = [*unet.parameters(), *text_encoder.parameters()]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    losses = np.zeros(steps)
    edges = np.linspace(0, steps, max(1, min(log_points, steps)) + 1).round().astype(int)
    window_ends = dict(zip(edges[1:].tolist(), edges[:-1].tolist(), strict=True))  # last step → first
    try:
        for step in range(steps):
            idx = torch.randint(len(x0_all), (batch,), generator=gen)
            t = torch.randint(noise_scheduler.config.num_train_timesteps, (batch,), generator=gen)
            noise = torch.randn((batch, *x0_all.shape[1:]), generator=gen)
            drop = torch.rand(batch, generator=gen) < p_uncond
            ids = torch.where(drop[:, None], empty[None, :], ids_all[idx])
            x_t = noise_scheduler.add_noise(x0_all[idx], noise, t).to(device)
            hidden = text_encoder(ids.to(device)).last_hidden_state
            pred = unet(x_t, t.to(device), encoder_hidden_states=hidden).sample
            loss = F.mse_loss(pred, _target(noise_scheduler, x0_all[idx], noise, t).to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            losses[step] = float(loss.detach())
            if tracker is not None and step + 1 in window_ends:
                tracker.log(step + 1, {"train/loss": float(losses[window_ends[step + 1]:step + 1].mean())})
            if progress is not None:
                progress(step + 1, losses[step])
    finally:
        unet.eval()
        text_encoder.eval()
    curve = [dict(step=int(hi), loss=float(losses[lo:hi].mean()))
             for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return dict(loss_curve=curve, first_loss=float(losses[0]), last_loss=float(losses[-1]))


def _target(scheduler, x0, noise, t):
    """What the UNet is trained to output at (x0, noise, t) under the scheduler's prediction_type."""
    kind = scheduler.config.prediction_type
    if kind == "epsilon":
        return noise
    if kind == "v_prediction":
        return scheduler.get_velocity(x0, noise, t)
    return x0


def save(pipe, folder: str | os.PathLike) -> Path:
    """`save_pretrained` into `folder` (weights as safetensors)."""
    folder = Path(folder)
    pipe.save_pretrained(folder)
    return folder
