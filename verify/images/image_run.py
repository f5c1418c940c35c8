"""One verify.images.train run as a typed, frozen configuration (issue 33 part 2), as
verify.learning.run_config.SgdRun is verify.sgd's.

    ImageRun      the settings that decide a run's numbers: what a study's key hashes (`key()`)
    ImageRuntime  how it runs (threads, device, output folder, tracker): left out of the key

`ImageRun.build(given)` is the one way in, from the command line (train.parse_args), a study's
grid point or a stored key. The instance resolves and checks itself (`__post_init__`):

- the split is held by its number of training combinations: --held-out's share (0.3 when
  neither is given) becomes ceil(share · n) held out, by the anchor's rule, and the share is
  then dropped (the key holds the count, whichever setting gave it);
- the model's sizes are the preset's, with the ones given in their place, checked as the UNet
  needs them (without importing torch);
- --layers defaults to every block of the UNet (verify.images.activations.DEFAULT_PATTERNS),
  each a regular expression; --fractions lie in [0, 1].

Every refusal is one line (UsageError) worded in verify.images.train's flags, before any work.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass, field

from verify import cli
from verify.cli import UsageError, non_negative_float, non_negative_int, positive_float, positive_int
from verify.learning.settings import check_fields, choice, given_settings, setting, setting_fields

PROGRAM = "verify.images.train"
PRESET_NAMES = ("tiny", "small", "base", "large")  # verify.images.denoiser.PRESETS, without importing it
DEFAULT_FRACTIONS = (0.3, 0.5, 0.7, 1.0)  # verify.images.activations.DEFAULT_FRACTIONS
PREDICTIONS = ("epsilon", "v_prediction", "sample")  # verify.images.denoiser.PREDICTIONS
DEFAULT_HELD_OUT = 0.3  # the anchor's share of held-out combinations
SIZES = ("channels", "layers_per_block", "text_hidden", "text_layers")


def objects_per_image(text: str) -> int:
    value = int(text)
    if value not in (1, 2):
        raise argparse.ArgumentTypeError(f"invalid choice: {value} (choose from 1, 2)")
    return value


def fraction_below_one(text: str) -> float:
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def pattern(text: str) -> str:
    """A regular expression, as --layers takes one."""
    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {e}") from None
    return text


def n_combinations(objects: int) -> int:
    """The family's combinations with `objects` objects per image."""
    from constructions.tasks.images import COLOURS, POSITIONS, SHAPES

    looks = len(SHAPES) * len(COLOURS)
    return math.comb(len(POSITIONS), objects) * looks**objects


@dataclass(frozen=True)
class ImageRuntime:
    """How a run executes: the settings a study's key leaves out."""

    threads: int | None = None
    no_progress: bool = False
    json: bool = False
    out: str | None = None  # the run's folder (parse_args fills the default)
    device: str = "cpu"
    log: object = None  # verify.learning.tracking.TrackerSpec, or None


@dataclass(frozen=True)
class ImageRun:
    """The settings of one verify.images.train run that decide its numbers; see the module
    docstring."""

    objects: int = setting(1, objects_per_image, help="objects per image: 1 (64 combinations) or 2 (1,536)")
    # The split, by a share or a count: one flag or the other (train.build_parser declares both).
    held_out: float | None = setting(None, cli.open_fraction, optional=True)  # resolved into:
    train_combinations: int | None = setting(None, positive_int, optional=True)
    split_seed: int = setting(0, cli.seed, help="seed of the split and of the analysed prompts' subsets")
    preset: str = setting("small", choice(PRESET_NAMES),
                          help="model size: tiny (70k parameters), small (1.0M), base (1.8M), large (10.7M); "
                               "the flags below override its parts")
    channels: tuple[int, ...] | None = setting(None, positive_int, many=True, optional=True,
                                               help="UNet channels per resolution (16, 8, 4, 2 pixels), "
                                                    "multiples of 4, e.g. 32 64")
    layers_per_block: int | None = setting(None, positive_int, optional=True, help="UNet resnets per block")
    text_hidden: int | None = setting(None, positive_int, optional=True, help="text encoder width (even)")
    text_layers: int | None = setting(None, positive_int, optional=True, help="text encoder layers")
    prediction: str = setting("sample", choice(PREDICTIONS),
                              help="what the UNet is trained to output: the noise (epsilon), the velocity "
                                   "(v_prediction) or the clean image (sample). Each prompt of this family "
                                   "has one image, and predicting it directly learns it fastest: measured, "
                                   "tiny at 3000 steps: sample 1.00 of training images right, epsilon at "
                                   "2000 steps 0.01")
    steps: int = setting(3000, positive_int, help="training steps")
    batch: int = setting(64, positive_int, help="images per training step")
    lr: float = setting(1e-3, positive_float, help="AdamW learning rate")
    weight_decay: float = setting(0.01, non_negative_float, help="AdamW weight decay")
    p_uncond: float = setting(0.1, fraction_below_one,
                              help="probability of training on the empty prompt, for classifier-free "
                                   "guidance, in [0, 1)")
    seed: int = setting(0, cli.seed, help="seed of the initialisation and of every training draw")
    sample_steps: int = setting(20, positive_int, help="DDIM steps per image")
    guidance: float = setting(1.0, non_negative_float,
                              help="classifier-free guidance scale; ≤ 1 runs no unconditional rows. Guidance "
                                   "overshoots a model that predicts the one image of a prompt: measured, "
                                   "tiny at 3000 steps, training images right at guidance 1, 2, 3: 1.00, "
                                   "0.65, 0.28")
    n_seeds: int = setting(4, positive_int, help="images per analysed prompt, seeds by the anchor's rule")
    eval_prompts: int = setting(32, non_negative_int,
                                help="training and held-out prompts analysed, each side, drawn at random "
                                     "when a side has more; 0: all")
    layers: tuple[str, ...] | None = setting(None, pattern, many=True, optional=True,
                                             help="regular expressions for the UNet modules to record, "
                                                  "matched against the full module name (default: every "
                                                  "resnet, attention, down- and upsampler of the blocks); "
                                                  "the text encoder is always recorded")
    fractions: tuple[float, ...] = setting(DEFAULT_FRACTIONS, float, many=True,
                                           help="fractions of the denoising steps whose activations are "
                                                "kept, in [0, 1]")
    runtime: ImageRuntime = field(default_factory=ImageRuntime, compare=False, repr=False)

    def __post_init__(self):
        from verify.images.activations import DEFAULT_PATTERNS, steps_for

        check_fields(self)
        self._resolve_split()
        self._resolve_size()
        if self.layers is None:
            object.__setattr__(self, "layers", tuple(DEFAULT_PATTERNS))
        steps_for(self.fractions, self.sample_steps)  # UsageError for fractions outside [0, 1]

    def _resolve_split(self) -> None:
        n = n_combinations(self.objects)
        if self.train_combinations is None:
            share = DEFAULT_HELD_OUT if self.held_out is None else self.held_out
            n_test = math.ceil(share * n)
            if n_test >= n:
                raise UsageError(f"--held-out {share:g} of {n} combinations leaves no training combination")
            object.__setattr__(self, "train_combinations", n - n_test)
            object.__setattr__(self, "held_out", None)
        elif self.held_out is not None:
            raise UsageError("--held-out and --train-combinations each give the split: give one")
        elif self.train_combinations >= n:
            raise UsageError(f"--train-combinations {self.train_combinations} leaves no held-out "
                             f"combination: the {self.objects}-object family has {n}")

    def _resolve_size(self) -> None:
        """The preset's sizes, with the ones given in their place; UsageError for sizes the UNet
        cannot take (checked without importing torch)."""
        from verify.images.denoiser import check_size, resolve_size

        size = resolve_size(self.preset, **{k: getattr(self, k) for k in SIZES})
        try:
            check_size(size)
        except ValueError as e:
            raise UsageError(f"--preset {self.preset} with the size flags given: {e}") from None
        for name, value in size.items():
            object.__setattr__(self, name, value)

    @classmethod
    def build(cls, given: dict, runtime: ImageRuntime | None = None) -> ImageRun:
        """The run of the settings `given` (by name, as a study file or the command line types
        them; None counts as not given; a key's `program` is no setting), the rest resolved."""
        given = {k: v for k, v in given.items() if k != "program"}
        return cls(**given_settings(cls, given, PROGRAM), runtime=runtime or ImageRuntime())

    def size(self) -> dict:
        """The model's resolved sizes."""
        return {k: getattr(self, k) for k in SIZES}

    def key(self) -> dict:
        """The run's configuration as a study keys it: every resolved setting (lists for
        tuples) and the program."""
        values = {k: getattr(self, k) for k in sorted(setting_fields(self))}
        return {"program": PROGRAM, **{k: list(v) if isinstance(v, tuple) else v
                                       for k, v in values.items() if v is not None}}

    def replace(self, **changes) -> ImageRun:
        """A copy with `changes` (settings or `runtime`), checked as a new run is."""
        return dataclasses.replace(self, **changes)
