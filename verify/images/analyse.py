"""The analysis of a text-to-image pipeline on a prompt family (issue 25, part 5): the library behind
`python -m verify.images analyse` and `report`, and the analysis half of verify.images.train.

An analysis asks of any diffusers text-to-image pipeline what the paper asks (the anchor's
`analysis.py`, Florian-toll/compgen-vision, rebuilt with this package's fixes):

1. `family`: the prompts, one of the anchor's 31 setups (`image_setups.SETUPS`) or the rendered
   family with one or two objects (`scene1`, `scene2`: `images.Scene`);
2. `choose_split`: the prompts held out. By default the ones a pipeline of verify.images.train
   was not trained on (the split it records, verify.images.split_record); for any other pipeline
   the family's own split (`split`: ceil(0.3·n) prompts held out at random by the anchor's rule).
   A split asked for by share and seed is refused where it holds out a prompt the pipeline was
   trained on, unless explicitly allowed (issue 44). Each with its coverage report (does every
   constituent occur in training?);
3. `subset`: up to N training and N held-out prompts, drawn at random (0: all of them);
4. `generate`: n_seeds images per prompt with the anchor's seeds (`pipeline.seeds_for`, the seeds
   each prompt has in its whole family), the pooled activations of the chosen layers and of the
   text encoders recorded (`activations.Recorder`);
5. `probe`: the linear probe per layer, fitted on the training prompts' images and scored on the
   held-out prompts' images (`probes.probe_layers`);
6. the judge's verdict on every image (`judges`), and `success` per side and slot;
7. `record`: the results file (`results.build`): provenance, model, family, seeds, code version.

`analyse` runs 4 to 6 on a loaded pipeline; verify.images.train calls it on the folder it has just
trained and saved, so the controlled experiment and a real model go through one path. `run` is the
whole `analyse` command (load, check, analyse, write, report); `summarise` and `report` read
results files of either program back, for `report`.

Nothing here imports torch, diffusers or scipy at import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from constructions.tasks import image_setups
from constructions.tasks import images as scenes
from verify import cli
from verify.cli import UsageError
from verify.images.activations import DEFAULT_FRACTIONS, DEFAULT_PATTERNS, ROWS, steps_for
from verify.images.judges import JUDGES

PROGRAM = "verify.images analyse"
SCENES = {"scene1": 1, "scene2": 2}  # the rendered family's names here: its number of objects
SCENE_SPLIT_SEED = 0  # images.split's default seed, and verify.images.train's --split-seed default
DEFAULT_OUT = Path("out") / "images-analyse"  # relative to the working folder
DEFAULT_STEPS = 30  # the anchor's denoising steps for every model (models.py)
DEFAULT_BATCH = 8
DEFAULT_TEST_FRACTION = 0.3  # the anchor's share, where a split is drawn rather than read


# --- the family and its split ------------------------------------------------------------------

def family_names() -> tuple[str, ...]:
    """Every name `family` accepts: the anchor's setups, then the rendered families."""
    return (*image_setups.SETUPS, *SCENES)


def family(name: str):
    """The prompt family called `name`: an `ImageSetup` or a rendered `Scene`."""
    if name in SCENES:
        return scenes.Scene(n_objects=SCENES[name])
    if name in image_setups.SETUPS:
        return image_setups.SETUPS[name]
    raise UsageError(f"unknown setup {name!r}; choose one of {', '.join(family_names())}")


def is_scene(fam) -> bool:
    return isinstance(fam, scenes.Scene)


def family_name(fam) -> str:
    return f"scene{fam.n_objects}" if is_scene(fam) else fam.name


def default_split_seed(fam) -> int:
    """The seed of the family's own split: the anchor's 42 for its setups, 0 for the rendered
    family (as verify.images.train draws it)."""
    return SCENE_SPLIT_SEED if is_scene(fam) else image_setups.ANCHOR_SEED


def split(fam, test_fraction: float = 0.3, seed: int | None = None) -> image_setups.PromptSplit:
    """The family's own split by prompt (`image_setups.split`, `images.split`) with its coverage
    report; UsageError where the share leaves a side empty (a 4-prompt setup at 0.9)."""
    seed = default_split_seed(fam) if seed is None else seed
    try:
        if is_scene(fam):
            return scenes.split(fam, test_fraction, seed)
        return image_setups.split(fam, test_fraction, seed)
    except ValueError as e:
        raise UsageError(f"{family_name(fam)}: {e}") from None


# --- which split: the one the pipeline was trained on, or one asked for ---------------------------

def n_prompts(fam) -> int:
    return len(scenes.combinations(fam)) if is_scene(fam) else fam.n_prompts


def unit(fam) -> str:
    """What a family's prompt rows are called in a report."""
    return "combinations" if is_scene(fam) else "prompts"


def split_holding_out(fam, test, **params) -> image_setups.PromptSplit:
    """The family's split that holds out prompt rows `test`, with its coverage report."""
    if is_scene(fam):
        present, names = scenes.constituents(fam)
    else:
        present, names = image_setups.labels(fam), fam.constituents
    return image_setups.split_by_test(present, names, test, **params)


@dataclass(frozen=True, eq=False)  # eq=False: field-wise == on arrays has no truth value
class ChosenSplit:
    """The split an analysis holds out by and where it came from. `source` is "pipeline" (the
    split the pipeline records it was trained on), "flags" (--test-fraction / --split-seed) or
    "family" (the family's own, for a pipeline that records no training split); `trained` the
    prompt rows the pipeline was trained on where it records them (None: not recorded)."""

    split: image_setups.PromptSplit
    source: str
    origin: str  # for people: the record's file, the flags, or the family's rule
    trained: np.ndarray | None = None
    unit: str = "prompts"  # what the family's prompt rows are called: "combinations" for a scene

    @property
    def seed(self) -> int:
        return int(self.split.params["seed"])

    @property
    def overlap(self) -> np.ndarray | None:
        """The held-out prompt rows the pipeline was trained on (None: not recorded)."""
        return None if self.trained is None else np.intersect1d(self.split.test, self.trained)

    def summary(self) -> dict:
        """The split's summary (counts, coverage) with where it came from and what it holds out."""
        overlap = self.overlap
        return {**self.split.summary(), "source": self.source, "origin": self.origin, "unit": self.unit,
                "held_out": [int(r) for r in self.split.test], "trained_recorded": self.trained is not None,
                "held_out_trained_on": None if overlap is None else [int(r) for r in overlap]}


def _rows_text(rows, limit: int = 12) -> str:
    rows = [int(r) for r in rows]
    return ", ".join(map(str, rows[:limit])) + (f", … ({len(rows)} in all)" if len(rows) > limit else "")


def choose_split(model, fam, test_fraction: float | None = None, split_seed: int | None = None,
                 allow_overlap: bool = False) -> ChosenSplit:
    """The split `analyse` holds out by. With no split flag, the one the pipeline records it was
    trained on (verify.images.split_record), or the family's own for a pipeline of another
    program. A split asked for by --test-fraction / --split-seed is refused where it holds out
    prompts the pipeline was trained on, unless `allow_overlap`: scoring them as held out would
    report memory as composition. A pipeline of verify.images.train saved before splits were
    recorded needs both flags. Every refusal is a UsageError (one line); nothing is loaded."""
    from verify.images import split_record

    recorded = split_record.read(model)
    asked = test_fraction is not None or split_seed is not None
    if allow_overlap and not asked:
        raise UsageError("--allow-train-overlap is read only with a split asked for by --test-fraction or "
                         "--split-seed")
    if recorded is not None:
        _check_recorded_family(recorded, fam)
        if not asked:
            return _recorded_split(fam, recorded)
    elif split_record.trained_here(model) and (test_fraction is None or split_seed is None):
        raise UsageError(f"{model} records no training split (no {split_record.FILE}: saved by an older "
                         "verify.images.train): give both --test-fraction and --split-seed, its training's "
                         "(its results.json's split.report.params)")
    chosen = _asked_split(fam, test_fraction, split_seed, asked, recorded)
    overlap = chosen.overlap
    if overlap is not None and overlap.size and not allow_overlap:
        raise UsageError(f"{chosen.origin} holds out {overlap.size} prompt(s) that {model} was trained on "
                         f"({_rows_text(overlap)}): leave out --test-fraction and --split-seed to hold out "
                         "what its training held out, or pass --allow-train-overlap")
    return chosen


def _check_recorded_family(recorded, fam) -> None:
    """The record must be of the family analysed: its rows index that family's prompts only."""
    if recorded.family != family_name(fam):
        raise UsageError(f"{recorded.path} records training on {recorded.family}, not --setup "
                         f"{family_name(fam)}: analyse it with --setup {recorded.family}")
    if recorded.n != n_prompts(fam):
        raise UsageError(f"{recorded.path} records {recorded.n} prompts of {recorded.family}, which has "
                         f"{n_prompts(fam)}: it is not a split of this family")


def _recorded_split(fam, recorded) -> ChosenSplit:
    the_split = split_holding_out(fam, recorded.test, family=family_name(fam),
                                  test_fraction=recorded.test.size / recorded.n, seed=recorded.seed,
                                  source="pipeline")
    return ChosenSplit(the_split, "pipeline", f"the split it was trained on ({recorded.path})",
                       trained=recorded.train, unit=unit(fam))


def _asked_split(fam, test_fraction, split_seed, asked: bool, recorded) -> ChosenSplit:
    """The family's split by the anchor's rule at this share and seed (defaults: 0.3, the
    family's own seed), checked against the training split where one is recorded."""
    fraction = DEFAULT_TEST_FRACTION if test_fraction is None else test_fraction
    seed = default_split_seed(fam) if split_seed is None else split_seed
    the_split = split(fam, fraction, seed)  # UsageError where a side would be empty
    if asked:
        origin = f"asked for by --test-fraction {fraction:g} --split-seed {seed}"
    else:
        origin = f"the family's own ({fraction:g} held out at random, seed {seed})"
    return ChosenSplit(the_split, "flags" if asked else "family", origin,
                       trained=None if recorded is None else recorded.train, unit=unit(fam))


def split_line(s: dict) -> str:
    """The report's line on the split: where it came from, which prompts it holds out, and
    whether the pipeline was trained on any of them."""
    text = (f"split    {s['origin']}: {len(s['held_out'])} of {s['n']} {s['unit']} held out "
            f"({_rows_text(s['held_out'], 64)})")
    overlap = s["held_out_trained_on"]
    if overlap is None:
        return text + "; the pipeline records no training split to check them against"
    if overlap:
        return text + (f"; OVERLAPS TRAINING: {len(overlap)} of them were trained on "
                       f"({_rows_text(overlap)}), scored as held out by --allow-train-overlap")
    return text + "; none of them trained on"


def subset(rows, k: int, seed: int, side: int) -> np.ndarray:
    """k of `rows` at random (all of them when k is 0 or at least their number), sorted; side 0
    draws the training prompts, side 1 the held-out ones, each from its own stream."""
    if k == 0 or k >= len(rows):
        return np.asarray(rows, dtype=np.int64)
    rng = np.random.default_rng([seed, 25, side])
    return np.sort(rng.choice(rows, size=k, replace=False)).astype(np.int64)


def image_rows(prompts, n_seeds: int) -> np.ndarray:
    """The images of these prompts (positions in the analysed rows): n_seeds consecutive each."""
    prompts = np.asarray(prompts, dtype=np.int64)
    return (prompts[:, None] * n_seeds + np.arange(n_seeds)).ravel()


def labels(fam, prompt_rows) -> np.ndarray:
    """(n_prompts, n_bits) uint8: the probe's targets, one-hot per slot (3-hot items for pick)."""
    rows = np.asarray(prompt_rows, dtype=np.int64)
    if is_scene(fam):
        return scenes.labels(fam, scenes.combinations(fam)[rows])
    return image_setups.labels(fam)[rows]


# --- the analysis ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """How images are made and recorded: the anchor's defaults (1 seed per prompt, 30 steps, the
    pipeline's own guidance) where a flag does not say otherwise."""

    n_seeds: int = 1
    steps: int = DEFAULT_STEPS
    guidance: float | None = None  # None: the pipeline's default, not passed
    layers: tuple[str, ...] = DEFAULT_PATTERNS
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    rows: str = "cond"  # the CFG rows recorded: "cond", or "both" (with "@uncond" layers)
    batch: int = DEFAULT_BATCH  # images per pipeline call; an image does not depend on it
    base_seed: int = image_setups.ANCHOR_SEED


@dataclass
class Analysis:
    """What `analyse` found. `prompt_rows` index the family's prompt table; `train_prompts` and
    `test_prompts` are positions in them (and in `generation.prompts`)."""

    family: object
    prompt_rows: np.ndarray
    train_prompts: np.ndarray
    test_prompts: np.ndarray
    generation: object  # pipeline.Generation
    layers: list[str]  # the denoiser's recorded modules, then the text encoders
    rows: str
    probe: dict
    judge: object
    verdict: object
    seconds: dict = field(default_factory=dict)

    @property
    def n_seeds(self) -> int:
        return self.generation.n_seeds

    def success(self, side: str) -> dict:
        prompts = self.train_prompts if side == "train" else self.test_prompts
        return success(self.verdict, self.family, prompts, self.n_seeds)


def check_layers(pipe, settings: Settings) -> None:
    """UsageError unless the layer patterns match a module of the pipeline's denoiser (before any
    image is made)."""
    from verify.images.activations import Recorder

    Recorder(pipe, patterns=settings.layers, rows=settings.rows).close()


def generate(pipe, fam, rows, settings: Settings, progress=None):
    """Images of `rows`' prompts, n_seeds each with the anchor's seeds, with the recorded
    activations: (generation, the layers recorded, the CFG rows recorded)."""
    from verify.images import pipeline
    from verify.images.activations import Recorder

    with Recorder(pipe, patterns=settings.layers, rows=settings.rows) as recorder, \
            cli.counting(len(rows) * settings.n_seeds, "generate", progress, unit="image") as count:
        generation = pipeline.generate_family(
            pipe, fam, rows, n_seeds=settings.n_seeds, base_seed=settings.base_seed, steps=settings.steps,
            guidance=settings.guidance, recorder=recorder, fractions=settings.fractions,
            batch_size=settings.batch, progress=count)
        return generation, recorder.layers + recorder.text_layers, recorder.rows


def probe(fam, rows, generation, train_prompts, test_prompts) -> dict:
    """The decodability probe per layer, fitted on the training prompts' images only."""
    from verify.images import probes

    n_seeds = generation.n_seeds
    targets = np.repeat(labels(fam, rows), n_seeds, axis=0)
    return probes.probe_layers(generation.features, targets, image_rows(train_prompts, n_seeds),
                               image_rows(test_prompts, n_seeds))


def _rate(x: np.ndarray) -> float | None:
    return float(np.mean(x)) if x.size else None


def success(verdict, fam, prompts, n_seeds: int) -> dict:
    """The judge's success rate on these prompts' images, overall and per slot."""
    from verify.images.judges import slot_names

    ok, slots = np.asarray(verdict.success), np.asarray(verdict.slot_correct)
    r = image_rows(prompts, n_seeds)
    return dict(rate=_rate(ok[r]), images=int(r.size),
                per_slot={name: _rate(slots[r, j]) for j, name in enumerate(slot_names(fam))})


def samples(a: Analysis, side: str = "test", k: int = 8) -> dict:
    """The first seed's image of up to k of a side's prompts, for a figure: their prompts, prompt
    rows and verdicts, and the images (k, H, W, 3) uint8 as base64 of their raw bytes (8 16×16
    images: 8 kB of JSON)."""
    import base64

    prompts = (a.train_prompts if side == "train" else a.test_prompts)[:k]
    rows = image_rows(prompts, a.n_seeds)[:: a.n_seeds]  # seed 0 of each prompt
    images = np.ascontiguousarray(a.generation.images[rows], dtype=np.uint8)
    return dict(side=side, prompts=[a.generation.prompts[i] for i in prompts],
                prompt_rows=[int(a.prompt_rows[i]) for i in prompts],
                success=[bool(v) for v in np.asarray(a.verdict.success)[rows]], shape=list(images.shape),
                uint8_base64=base64.b64encode(images.tobytes()).decode("ascii"))


def sample_images(samples: dict) -> np.ndarray:
    """The images `samples` holds, (k, H, W, 3) uint8."""
    import base64

    raw = base64.b64decode(samples["uint8_base64"])
    return np.frombuffer(raw, dtype=np.uint8).reshape(samples["shape"])


def decodability(scores: dict) -> dict:
    """The probe's scores per layer as a report shows them."""
    keys = ("test_f1", "test_exact", "train_f1", "train_exact", "dim", "converged", "bits_converged")
    return {layer: {k: s[k] for k in keys} for layer, s in scores.items()}


def analyse(pipe, fam, seen, unseen, judge, settings: Settings, progress=None) -> Analysis:
    """Generate, probe and judge: `seen` training and `unseen` held-out prompts (rows of the
    family's prompt table), `settings.n_seeds` images each. Timings in `seconds`."""
    rows = np.concatenate([np.asarray(seen, dtype=np.int64), np.asarray(unseen, dtype=np.int64)])
    train_prompts, test_prompts = np.arange(len(seen)), np.arange(len(seen), len(rows))
    seconds = {}

    def timed(name, stage, *a):
        t = time.perf_counter()
        value = stage(*a)
        seconds[name] = time.perf_counter() - t
        return value

    generation, layers, recorded = timed("generate", generate, pipe, fam, rows, settings, progress)
    scores = timed("probe", probe, fam, rows, generation, train_prompts, test_prompts)
    verdict = timed("judge", judge.evaluate, generation.images, fam, np.repeat(rows, settings.n_seeds))
    return Analysis(family=fam, prompt_rows=rows, train_prompts=train_prompts, test_prompts=test_prompts,
                    generation=generation, layers=layers, rows=recorded, probe=scores, judge=judge,
                    verdict=verdict, seconds=seconds)


def record(a: Analysis, *, model, pipe, split, extra: dict | None = None) -> dict:
    """The results record of an analysis (verify.images.results), `extra` added."""
    from verify.images import pipeline, results

    return results.build(
        model=str(model), pipeline_class=type(pipe).__name__, config_sha256=pipeline.config_hash(pipe),
        family=a.family, prompt_rows=a.prompt_rows, generation=a.generation, split=split,
        train_prompts=a.train_prompts, test_prompts=a.test_prompts, layers=a.layers, rows=a.rows,
        probe=a.probe, judge=a.judge, verdict=a.verdict, extra=extra)


@contextlib.contextmanager
def quiet_libraries():
    """diffusers' and transformers' own progress bars and notices (loading, writing shards, a
    missing accelerate) off for the block: these programs have their own bars. torch's thread
    count is restored after it, for callers that run several analyses in one process."""
    import torch
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog

    threads = torch.get_num_threads()
    before = [(lib, lib.get_verbosity(), lib.is_progress_bar_enabled()) for lib in (dlog, tlog)]
    for lib, _, _ in before:
        lib.set_verbosity_error()
        lib.disable_progress_bar()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        for lib, verbosity, bars in before:
            lib.set_verbosity(verbosity)
            if bars:
                lib.enable_progress_bar()


# --- the analyse command -----------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """One `analyse` command: what to analyse, how, and where the results go. `checked()` refuses
    bad input before anything is loaded."""

    model: str
    setup: str
    judge: str = "exact"
    clip_model: str | None = None
    llm_model: str | None = None
    llm_per_slot: bool = False
    # The split: None for both reads the one the pipeline was trained on (choose_split);
    # either given asks for the family's split at that share and seed instead.
    test_fraction: float | None = None  # None: DEFAULT_TEST_FRACTION where a split is drawn
    split_seed: int | None = None  # None: the family's own (default_split_seed) where one is drawn
    allow_train_overlap: bool = False  # score trained-on prompts as held out, where the flags ask so
    prompts: int = 0  # per side; 0: all
    settings: Settings = Settings()
    out: str | None = None  # None: DEFAULT_OUT / short_name
    device: str = "cpu"
    threads: int | None = None
    progress: bool | None = None  # None: bars where stderr is a terminal
    chosen: ChosenSplit | None = field(default=None, compare=False, repr=False)  # set by checked()

    def checked(self) -> Request:
        """This request with its defaults resolved; UsageError (one line) for bad input, before
        any model is loaded or any folder created."""
        from verify.cli import check_device

        fam = family(self.setup)
        if self.judge not in JUDGES:
            raise UsageError(f"unknown judge {self.judge!r}; choose one of {', '.join(JUDGES)}")
        if self.judge == "exact" and not is_scene(fam):
            raise UsageError(f"--judge exact reads only the rendered families ({', '.join(SCENES)}), not the "
                             f"setup {self.setup!r}: use --judge clip or --judge llm")
        if self.judge == "clip" and not self.clip_model:
            raise UsageError("--judge clip needs --clip-model FOLDER, a local CLIP checkpoint")
        if self.judge == "llm" and not self.llm_model:
            raise UsageError("--judge llm needs --llm-model NAME, a model of the llm package (llm models "
                             "lists them)")
        if self.clip_model and not Path(self.clip_model).expanduser().exists() \
                and not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", self.clip_model):
            raise UsageError(f"--clip-model {self.clip_model}: no such folder (and not a hub id)")
        if self.clip_model and self.judge != "clip":
            raise UsageError(f"--clip-model is read only by --judge clip, not --judge {self.judge}")
        if (self.llm_model or self.llm_per_slot) and self.judge != "llm":
            raise UsageError(f"--llm-model and --llm-per-slot are read only by --judge llm, not --judge "
                             f"{self.judge}")
        s = self.settings
        if s.rows not in ROWS:
            raise UsageError(f"--rows must be one of {', '.join(ROWS)}, got {s.rows!r}")
        for pattern in s.layers:
            try:
                re.compile(pattern)
            except re.error as e:
                raise UsageError(f"--layers {pattern!r} is not a regular expression: {e}") from None
        steps_for(s.fractions, s.steps)  # UsageError for fractions outside [0, 1]
        chosen = choose_split(self.model, fam, self.test_fraction, self.split_seed, self.allow_train_overlap)
        check_device(self.device)
        out = self.out if self.out is not None else str(DEFAULT_OUT / short_name(self.model, self.setup))
        cli.check_out_dir(out, "--out")  # nothing is created while checking
        settings = dataclasses.replace(s, layers=tuple(s.layers),
                                       fractions=tuple(float(f) for f in s.fractions))
        return dataclasses.replace(self, out=out, settings=settings, chosen=chosen)

    def config(self) -> dict:
        """The settings that make the results (not where they go, nor threads or bars): the split
        as it was chosen (`checked()`), its share and seed whichever source gave them."""
        s = dataclasses.asdict(self.settings)
        chosen = self.chosen
        return cli.plain({"model": self.model, "setup": self.setup, "judge": self.judge,
                          "clip_model": self.clip_model, "llm_model": self.llm_model,
                          "llm_per_slot": self.llm_per_slot,
                          "split_from": None if chosen is None else chosen.source,
                          "test_fraction": self.test_fraction if chosen is None else
                          chosen.split.summary()["test_fraction"],
                          "split_seed": self.split_seed if chosen is None else chosen.seed,
                          "allow_train_overlap": self.allow_train_overlap, "prompts": self.prompts, **s,
                          "device": self.device})


def short_name(model: str, setup: str) -> str:
    """A folder name for an analysis: the model's last name (with its parent's when that is the
    generic "pipeline" of verify.images.train), a hub id's owner-name, then the setup."""
    text = str(model).rstrip("/")
    path = Path(text).expanduser()
    if path.exists():
        parts = path.resolve().parts
        name = "-".join(parts[-2:]) if parts[-1] == "pipeline" and len(parts) > 1 else parts[-1]
    else:
        name = text.replace("/", "-")
    name = re.sub(r"[^\w.-]+", "-", name).strip("-.") or "model"
    return f"{name}-{setup}"


def make_judge(request: Request, device: str = "cpu"):
    """The request's judge, ready to judge: a CLIP checkpoint loaded, an llm model found and its
    key present (else UsageError, before any image is made)."""
    from verify.images import judges

    judge = judges.make(request.judge, path=request.clip_model, device=device, model=request.llm_model,
                        per_slot=request.llm_per_slot)
    model = getattr(judge, "model", None) if request.judge == "llm" else None
    if model is not None and getattr(model, "needs_key", None) and hasattr(model, "get_key"):
        # llm asks for the key only when the first image is sent: ask now, before generating.
        try:
            model.get_key()
        except Exception as e:  # noqa: BLE001 - llm's NeedsKeyException, or a plugin's own
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UsageError(f"the llm judge's model {request.llm_model} has no API key: {first}") from None
    return judge


def run(request: Request) -> dict:
    """The `analyse` command: load the pipeline, analyse it on the family, write OUT/results.json;
    the report (JSON-able). `request` as `Request.checked()` returns it."""
    with quiet_libraries():
        return _run(request)


def _run(request: Request) -> dict:
    from verify.images import pipeline, results
    from verify.images.study_report import best_unet_layer

    start, seconds = time.perf_counter(), {}
    threads = cli.set_threads(request.threads, cli.default_threads(True))
    s = request.settings
    fam = family(request.setup)
    if request.chosen is None:  # a Request that skipped checked(): its config() records the split too
        request = dataclasses.replace(request, chosen=choose_split(
            request.model, fam, request.test_fraction, request.split_seed, request.allow_train_overlap))
    chosen = request.chosen
    the_split = chosen.split
    t = time.perf_counter()
    judge = make_judge(request, request.device)
    seconds["judge_load"] = time.perf_counter() - t
    t = time.perf_counter()
    pipe = pipeline.load(request.model, request.device)
    seconds["load"] = time.perf_counter() - t
    check_layers(pipe, s)
    out = cli.prepare_out_dir(request.out, "--out", force=None)
    # The subsets' seed is the split's, as verify.images.train draws its --eval-prompts.
    seen = subset(the_split.train, request.prompts, chosen.seed, 0)
    unseen = subset(the_split.test, request.prompts, chosen.seed, 1)
    a = analyse(pipe, fam, seen, unseen, judge, s, progress=request.progress)
    seconds.update(a.seconds)
    config = request.config()
    summary = chosen.summary()
    rec = record(a, model=request.model, pipe=pipe, split=the_split,
                 extra={"program": PROGRAM, "config": config,
                        "split_choice": {k: summary[k] for k in ("source", "origin", "held_out",
                                                                 "trained_recorded", "held_out_trained_on")}})
    seconds["total"] = time.perf_counter() - start
    path = results.write(Path(out) / "results.json", {**rec, "seconds": seconds})
    scores = decodability(a.probe)
    best = best_unet_layer(scores)
    g = a.generation
    return cli.plain({
        "program": PROGRAM,
        "config": config,
        "family": results.family_summary(fam),
        "split": summary,
        "model": rec["model"],
        "analysis": {"train_prompts": seen, "test_prompts": unseen, "n_seeds": s.n_seeds, "steps": s.steps,
                     "steps_run": g.n_steps, "guidance": g.guidance, "cfg": g.cfg, "rows_recorded": a.rows,
                     "layers": a.layers, "fractions": list(s.fractions), "steps_kept": g.steps_kept},
        "decodability": scores,
        "best_layer": None if best is None else {"layer": best, **scores[best]},
        "judge": {k: v for k, v in rec["judge"].items() if k not in ("success", "slot_correct", "answers")},
        "success": {"train": a.success("train"), "test": a.success("test")},
        "seconds": seconds, "threads": threads,
        "provenance": {k: rec[k] for k in ("code_version", "git_commit", "timestamp")},
        "results_file": str(path),
    })


def _f(v, spec=".3f") -> str:
    return "—" if v is None else format(v, spec)


def format_report(r: dict) -> str:
    """The `analyse` report for people."""
    fam, s, a, su = r["family"], r["split"], r["analysis"], r["success"]
    what = (f"scene, {fam['n_objects']} object(s)" if fam["kind"] == "scene"
            else f"{fam['name']} ({fam['setup_kind']}: {', '.join(fam['slots'])})")
    best = r["best_layer"]
    lines = [
        f"model    {r['model']['id']} ({r['model']['pipeline']}, config {r['model']['config_sha256'][:12]})",
        f"family   {what}: {s['n_train']} training prompts, {s['n_test']} held out (split seed "
        f"{r['config']['split_seed']}); every constituent in training: "
        f"{'yes' if s['covers_all_constituents'] else 'no, missing ' + ', '.join(s['missing_constituents'])}",
        split_line(s),
        f"analysis {len(a['train_prompts'])} training + {len(a['test_prompts'])} held-out prompts × "
        f"{a['n_seeds']} seeds, {a['steps']} steps, guidance {a['guidance']}"
        f"{' (CFG, ' + a['rows_recorded'] + ' rows recorded)' if a['cfg'] else ''}",
        f"success  ({r['config']['judge']} judge) training {_f(su['train']['rate'])}, held out "
        f"{_f(su['test']['rate'])}",
        "         per slot, held out: " + ", ".join(f"{k} {_f(v, '.2f')}"
                                                    for k, v in su["test"]["per_slot"].items()),
        "probe    " + ("no denoiser layer" if best is None else
                       f"best denoiser layer {best['layer']}: held-out F1 {best['test_f1']:.3f}, exact "
                       f"{best['test_exact']:.3f}"),
    ]
    for layer, d in r["decodability"].items():
        lines.append(f"  {layer:<36} F1 {d['test_f1']:.3f}  exact {d['test_exact']:.3f}  (training F1 "
                     f"{d['train_f1']:.3f})")
    lines.append(f"results  {r['results_file']} ({r['seconds']['total']:.0f} s)")
    return "\n".join(lines)


# --- the report command ------------------------------------------------------------------------

def read_results(path: str | Path) -> dict:
    """A results file of `analyse` or verify.images.train; UsageError (one line) for anything else."""
    from verify.images import results

    try:
        return results.read(path)
    except UsageError:
        raise UsageError(f"{path} is not a results file of verify.images (no \"format\": "
                         f"\"{results.FORMAT}\")") from None
    except OSError as e:
        raise UsageError(f"{path} cannot be read: {e.strerror or type(e).__name__}") from None
    except (ValueError, AttributeError, TypeError) as e:
        reason = "not JSON" if isinstance(e, ValueError) else "not a JSON object"
        raise UsageError(f"{path} is not a results file of verify.images ({reason})") from None


def summarise(path: str | Path, rec: dict) -> dict:
    """One results file as `report` shows it: the model, the family, success on both sides and the
    denoiser's best layer by held-out F1 (never the text encoder's)."""
    from verify.images.study_report import best_unet_layer

    fam = rec.get("family") or {}
    name = f"scene{fam.get('n_objects')}" if fam.get("kind") == "scene" else fam.get("name")
    judge = rec.get("judge") or {}
    per_layer = (rec.get("probe") or {}).get("per_layer") or {}
    best = best_unet_layer(per_layer)
    model = rec.get("model") or {}
    return {"file": str(path), "program": rec.get("program"), "model": model.get("id"),
            "pipeline": model.get("pipeline"), "family": name, "judge": judge.get("name"),
            "n_prompts": len(rec.get("prompts") or []), "n_seeds": rec.get("n_seeds"),
            "train_success": judge.get("train_success_rate"), "test_success": judge.get("test_success_rate"),
            "best_layer": best, "test_f1": per_layer[best]["test_f1"] if best else None,
            "test_exact": per_layer[best]["test_exact"] if best else None}


def report(paths: Sequence[str | Path], records: Sequence[dict] | None = None) -> dict:
    """Per file its summary; with ≥ 3 files that have both numbers, the correlation across files of
    the best denoiser layer's held-out F1 with held-out success (verify.images.study_report.correlation:
    Pearson and Spearman with percentile bootstrap intervals)."""
    from verify.images.study_report import correlation

    records = [read_results(p) for p in paths] if records is None else records
    files = [summarise(p, r) for p, r in zip(paths, records, strict=True)]
    pairs = [(f["test_f1"], f["test_success"]) for f in files
             if f["test_f1"] is not None and f["test_success"] is not None]
    fit = None
    if len(files) >= 3:
        fit = (correlation([x for x, _ in pairs], [y for _, y in pairs]) if len(pairs) >= 3 else
               dict(n=len(pairs), status="fewer than 3 files hold both numbers", pearson=None, spearman=None))
    return cli.plain({"files": files, "correlation": fit})


def format_summary(r: dict) -> str:
    """The `report` report for people."""
    lines = []
    for f in r["files"]:
        lines += [f"{f['file']}",
                  f"  model    {f['model']} ({f['pipeline']}); family {f['family']}; {f['n_prompts']} "
                  f"prompts × {f['n_seeds']} seeds",
                  f"  success  ({f['judge']} judge) training {_f(f['train_success'])}, held out "
                  f"{_f(f['test_success'])}",
                  "  probe    " + ("no denoiser layer" if f["best_layer"] is None else
                                   f"best denoiser layer {f['best_layer']}: held-out F1 {f['test_f1']:.3f}, "
                                   f"exact {f['test_exact']:.3f}")]
    fit = r["correlation"]
    if fit is not None:
        if fit["status"] != "fitted":
            lines.append(f"decodability against held-out success: {fit['status']} (n = {fit['n']})")
        else:
            p, s = fit["pearson"], fit["spearman"]
            lines.append(f"decodability against held-out success (n = {fit['n']} files): Pearson r = "
                         f"{p['r']:.3f} [{p['lo']:.3f}, {p['hi']:.3f}], Spearman ρ = {s['r']:.3f} "
                         f"[{s['lo']:.3f}, {s['hi']:.3f}]; {round(100 * fit['level'])}% percentile bootstrap "
                         f"intervals, "
                         f"{fit['bootstrap']:,} resamples of files")
    return "\n".join(lines)
