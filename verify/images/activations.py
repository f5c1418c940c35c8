"""Pooled activations of a diffusers pipeline, filed under the denoising step that computed them.

What is recorded (the anchor's choice, `compositional_gen/models.py` of Florian-toll/compgen-vision,
rebuilt and with its two defects removed):

- The denoiser's modules whose names (in `denoiser.named_modules()`) fully match one of the
  regular expressions `patterns`: by default every resnet, attention, down- and upsampler of a
  UNet's blocks, and every (single) transformer block of an SD3 or FLUX transformer
  (`DEFAULT_PATTERNS`). Each output is pooled per image by `pool`: the spatial mean of a
  (B, C, H, W) tensor, the token mean of a (B, T, D) one, a (B, D) one as it is. A block that
  returns several tensors (SD3's and FLUX's joint blocks return the text stream and the image
  stream) gives the pooled tensors concatenated in the order returned.
- The text encoder(s)' outputs (`text_encoder`, `text_encoder_2`, ...: the last hidden state,
  token mean over all positions, padding included, as the denoiser sees them). They run once
  before denoising, so they are filed under their own key, with no step.

Steps. The pipeline says which step it is in: it calls `callback_on_step_end(pipe, i, t, ...)`
after step i. The recorder starts each pipeline call at step 0 and moves to step i + 1 when the
callback for step i arrives, so everything computed during step i is filed under i. (The anchor
set its counter to i in that callback, so step i's activations were filed under i - 1 and
step 0's under a stale number; its text encoder outputs were filed under whatever number the
previous image had left, a step that `_fractions_to_steps` never keeps.) As a check, a forward
pre-hook on the denoiser notes the timestep it is called with, and the callback's timestep
must be the same one, else `StepMismatch` is raised.

`features` turns one pipeline call's record into one vector per image and layer: the pooled
activation at each step of `steps_for(fractions, n_steps)`, concatenated, then the mean over all
steps (the anchor's "cat+allmean"). `steps_for` maps a fraction f to step floor(f·(S − 1)):
0 is the first step, 1.0 the last (the anchor capped at S − 2, because its S − 1 was never
filled), duplicates dropped.

The timestep check allows a fixed scale, set at the first step whose timestep is not 0 (FLUX
feeds its transformer t / 1000), and 1% rounding (timesteps in bfloat16): it catches a record
filed under another step of a schedule, not a last-bit difference.

Classifier-free guidance. With guidance, diffusers' pipelines (SD 1.x/2.x, SDXL, SD3, PixArt)
run the denoiser on a batch of 2n rows, the n unconditional (negative-prompt) rows first and
the n conditional ones after; pipelines that run two separate passes (FLUX's true CFG) call the
denoiser with the prompt first and the negative prompt second. The recorder keeps the
conditional rows (`rows="cond"`, the default); `rows="both"` also keeps the unconditional ones,
under the layer's name with "@uncond" appended. A text encoder is likewise called for the prompt
first and the negative prompt second; the second call goes under "name@uncond". (The anchor kept
both CFG rows, flattened into one vector per image, and, for SD's text encoder, kept the
negative prompt's encoding.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from verify.cli import UsageError

DEFAULT_FRACTIONS = (0.3, 0.5, 0.7, 1.0)
DEFAULT_PATTERNS = (
    r"(down_blocks\.\d+|mid_block|up_blocks\.\d+)\.(resnets|attentions|downsamplers|upsamplers)\.\d+",
    r"(single_)?transformer_blocks\.\d+",
)
UNCOND = "@uncond"  # suffix of the unconditional rows' layer names (rows="both")
ROWS = ("cond", "both")


class StepMismatch(RuntimeError):
    """The pipeline's steps and the denoiser's calls do not line up: activations could not be
    filed under the right step."""


def steps_for(fractions: Sequence[float], n_steps: int) -> list[int]:
    """The step indices that `fractions` of a run of n_steps pick: floor(f·(n_steps − 1)), sorted,
    duplicates dropped. 0.0 is the first step, 1.0 the last."""
    if n_steps < 1:
        raise ValueError(f"a run has at least one step, not {n_steps}")
    bad = [f for f in fractions if not (isinstance(f, (int, float)) and 0.0 <= f <= 1.0)]
    if bad or not fractions:
        raise UsageError(f"step fractions must be numbers in [0, 1], got {list(fractions)!r}")
    # The 1e-9 keeps 0.7·10 = 6.999999... on step 7 of a 11-step run.
    return sorted({math.floor(f * (n_steps - 1) + 1e-9) for f in fractions})


def pool(t):
    """(B, ...) tensor to (B, D) float32 on the CPU: the mean over H and W of (B, C, H, W), over
    tokens of (B, T, D), over every axis after the second of higher ranks; (B, D) unchanged."""
    import torch

    t = t.detach()
    if t.ndim == 1:
        t = t[:, None]
    elif t.ndim == 3:
        t = t.mean(dim=1)
    elif t.ndim >= 4:
        t = t.mean(dim=tuple(range(2, t.ndim)))
    return t.to(device="cpu", dtype=torch.float32)


def pool_output(out, batch: int):
    """A module's output pooled per row: a tensor, or the tensors (first dimension `batch`) of a
    tuple, list or ModelOutput, pooled and concatenated in order."""
    import torch

    if torch.is_tensor(out):
        return pool(out)
    if hasattr(out, "to_tuple"):  # diffusers' BaseOutput, transformers' ModelOutput
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        parts = [pool(o) for o in out if torch.is_tensor(o) and o.ndim >= 1 and o.shape[0] == batch]
        if parts:
            return torch.cat(parts, dim=1)
    raise StepMismatch(f"cannot pool an output of type {type(out).__name__} with {batch} rows")


def text_output(out):
    """The last hidden state of a text encoder's output, pooled over tokens."""
    import torch

    if torch.is_tensor(out):
        return pool(out)
    hidden = getattr(out, "last_hidden_state", None)
    return pool(hidden if hidden is not None else out[0])


def denoiser_of(pipe):
    """The pipeline's denoiser: its `unet`, else its `transformer`."""
    for name in ("unet", "transformer"):
        module = getattr(pipe, name, None)
        if module is not None:
            return name, module
    raise UsageError(f"{type(pipe).__name__} has no denoiser (neither 'unet' nor 'transformer')")


def text_encoders_of(pipe) -> dict:
    """The pipeline's text encoders by component name (text_encoder, text_encoder_2, ...)."""
    import torch

    components = getattr(pipe, "components", {}) or {}
    return {name: m for name, m in sorted(components.items())
            if re.fullmatch(r"text_encoder(_\d+)?", name) and isinstance(m, torch.nn.Module)}


def _timestep(args, kwargs) -> float | None:
    import torch

    t = args[1] if len(args) > 1 else kwargs.get("timestep")
    if t is None:
        return None
    if torch.is_tensor(t):
        t = t.flatten()[0]
    return float(t)


class Recorder:
    """Forward hooks on a pipeline's denoiser modules and text encoders (see the module docstring).

    Use it around pipeline calls that pass `callback_on_step_end=recorder.callback`:

        with Recorder(pipe) as rec:
            rec.begin(n_images)
            pipe(prompts, ..., callback_on_step_end=rec.callback)
            feats = rec.features()  # {layer: (n_images, d)}
            rec.clear()

    `pipeline.generate` does exactly this per batch.
    """

    def __init__(self, pipe, patterns: Sequence[str] = DEFAULT_PATTERNS, text_encoders: bool = True,
                 rows: str = "cond"):
        if rows not in ROWS:
            raise UsageError(f"rows must be one of {', '.join(ROWS)}, got {rows!r}")
        try:
            compiled = [re.compile(p) for p in patterns]
        except re.error as e:
            raise UsageError(f"bad layer pattern: {e}") from None
        self.rows = rows
        self.denoiser_name, denoiser = denoiser_of(pipe)
        modules = [(name, m) for name, m in denoiser.named_modules()
                   if name and any(p.fullmatch(name) for p in compiled)]
        if not modules:
            raise UsageError(f"no module of the {type(denoiser).__name__} matches the layer patterns "
                             f"{list(patterns)!r}")
        self.layers = [name for name, _ in modules]
        self.text_layers = list(text_encoders_of(pipe)) if text_encoders else []
        self._handles = [denoiser.register_forward_pre_hook(self._on_denoiser, with_kwargs=True)]
        self._handles += [m.register_forward_hook(self._block_hook(name)) for name, m in modules]
        encoders = text_encoders_of(pipe)
        self._handles += [encoders[name].register_forward_hook(self._text_hook(name))
                          for name in self.text_layers]
        self._n = None  # images in the current pipeline call; None: not recording
        self.clear()

    # --- state of one pipeline call ---------------------------------------------------------

    def begin(self, n_images: int) -> None:
        """Start recording a pipeline call that makes n_images images (one prompt each)."""
        self.clear()
        self._n = int(n_images)

    def clear(self) -> None:
        """Forget the current record and stop recording until the next `begin`."""
        self._n = None
        self.step = 0  # the step the pipeline is in: the next callback must report it
        self.n_steps = 0  # steps finished (callbacks received)
        self.timesteps: dict[int, float] = {}  # step -> the timestep the denoiser saw first in it
        self._scale = None  # the denoiser's timestep over the pipeline's (1, or 1/1000 for FLUX)
        self._calls = 0  # denoiser calls in the current step
        self._rows = None  # (cond, uncond) row selections of the current denoiser call
        self._batch = 0  # its batch size
        self._seen: set[str] = set()
        self.raw: dict[str, dict[int, object]] = {}  # layer -> step -> (n, D) tensor
        self.text: dict[str, object] = {}  # text layer -> (n, D) tensor
        self._text_calls: dict[str, int] = {}

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- hooks ------------------------------------------------------------------------------

    def _on_denoiser(self, module, args, kwargs):
        if self._n is None:
            return
        x = args[0] if args else kwargs.get("sample", kwargs.get("hidden_states"))
        batch, n = int(x.shape[0]), self._n
        if batch == 2 * n:  # batched CFG: [unconditional; conditional]
            self._rows = (slice(n, 2 * n), slice(0, n))
        elif batch == n:  # one stream: the prompt's first, a separate negative pass after
            self._rows = (slice(0, n), None) if self._calls == 0 else (None, slice(0, n))
        else:
            raise StepMismatch(f"the denoiser got a batch of {batch} rows for {n} images (expected {n} "
                               f"or {2 * n})")
        if self._calls == 0:
            self.timesteps[self.step] = _timestep(args, kwargs)
        self._batch = batch
        self._calls += 1
        self._seen = set()

    def _block_hook(self, name: str):
        def hook(module, args, out):
            if self._n is None or self._rows is None:
                return
            if name in self._seen:
                raise StepMismatch(f"{name} ran twice in one denoiser call; its rows cannot be told apart")
            self._seen.add(name)
            pooled = pool_output(out, self._batch)
            cond, uncond = self._rows
            if cond is not None:
                self._file(name, pooled[cond])
            if uncond is not None and self.rows == "both":
                self._file(name + UNCOND, pooled[uncond])
        return hook

    def _file(self, layer: str, rows) -> None:
        per_step = self.raw.setdefault(layer, {})
        if self.step in per_step:
            raise StepMismatch(f"{layer} was recorded twice in step {self.step}")
        per_step[self.step] = rows

    def _text_hook(self, name: str):
        def hook(module, args, out):
            if self._n is None:
                return
            calls = self._text_calls.get(name, 0)
            self._text_calls[name] = calls + 1
            pooled = text_output(out)
            if pooled.shape[0] != self._n:
                raise StepMismatch(f"{name} encoded {pooled.shape[0]} prompts for {self._n} images")
            if calls == 0:
                self.text[name] = pooled
            elif calls == 1:
                if self.rows == "both":
                    self.text[name + UNCOND] = pooled
            else:
                raise StepMismatch(f"{name} ran {calls + 1} times in one pipeline call (prompt, negative "
                                   "prompt, and what else?)")
        return hook

    def callback(self, pipe, i, t, callback_kwargs):
        """The pipeline's `callback_on_step_end`: step i has finished."""
        if self._n is None:
            return {}
        i = int(i)
        if i != self.step:
            raise StepMismatch(f"the pipeline finished step {i} while the recorder was in step {self.step}")
        seen = self.timesteps.get(i)
        t = _timestep((None, t), {})
        if seen is not None and t is not None:
            if self._scale is None and t != 0:
                self._scale = seen / t
            scale = 1.0 if self._scale is None else self._scale
            if not math.isclose(seen, scale * t, rel_tol=1e-2, abs_tol=1e-6 * (1 + abs(scale * t))):
                raise StepMismatch(f"step {i}: the denoiser saw timestep {seen:g}, the pipeline reports "
                                   f"{t:g} (× {scale:g})")
        self.step, self.n_steps = i + 1, i + 1
        self._calls, self._rows = 0, None
        return {}

    # --- results ----------------------------------------------------------------------------

    def per_step(self, layer: str):
        """(n_steps, n, D) tensor: the layer's pooled rows at every step of the call."""
        import torch

        per_step = self.raw.get(layer, {})
        missing = [s for s in range(self.n_steps) if s not in per_step]
        if missing or not self.n_steps:
            raise StepMismatch(f"{layer} has no activation at steps {missing or 'any'}")
        return torch.stack([per_step[s] for s in range(self.n_steps)])

    def steps_kept(self, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> list[int]:
        return steps_for(fractions, self.n_steps)

    def features(self, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> dict[str, np.ndarray]:
        """{layer: (n, d) float32}: for denoiser layers the kept steps' activations concatenated,
        then their mean over all steps; for text encoders the pooled output."""
        import torch

        if not self.n_steps:
            raise StepMismatch("no denoising step was recorded (was callback_on_step_end passed?)")
        keep = self.steps_kept(fractions)
        out = {}
        for layer in sorted(self.raw, key=self._order):
            stack = self.per_step(layer)
            out[layer] = torch.cat([stack[s] for s in keep] + [stack.mean(dim=0)], dim=1).numpy()
        for layer in sorted(self.text, key=self._order):
            out[layer] = self.text[layer].numpy()
        return out

    def _order(self, layer: str):
        base, uncond = (layer[: -len(UNCOND)], 1) if layer.endswith(UNCOND) else (layer, 0)
        names = self.layers + self.text_layers
        return (names.index(base) if base in names else len(names), uncond)
