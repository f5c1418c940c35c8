"""The compositional preference grid (constructions.tasks.preference) as a task family:
imitation of a planner's actions on one demonstrated episode a task (the T = 8 observations
of the episode are the task's rows), scored by per-step accuracy `acc` and whole-episode
accuracy `acc_all`. It has no construction to compare with."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import numpy as np

from verify import cli
from verify.learning.families.base import Batch, TaskFamily, parameter_dtype, setting, switch
from verify.learning.records import Metric

# Encodings that need the hyperteacher's examples, refused here: the official code has no
# generator of examples for the grid either (its fewshot raises).
HYPERTEACHER_ONLY_ENCODINGS = {
    name: "it shows a task by examples of the teacher's outputs, and the preference grid has none (the "
          "official code raises there too)" for name in ("fewshot", "fewshot_fixed_x")}
MAX_OBJECTS = 18  # the grid's 19 free cells beside the agent


class PreferenceBatches:
    """Training batches of demonstrated episodes, made on the training device: tasks drawn
    as the hyperteacher's (TaskDraw), start states, then the demonstrator (value iteration
    and greedy rollout, constructions.tasks.preference), all in torch from one generator;
    the encoder, too, runs on the device (encode_on)."""

    def __init__(self, world, encode, train_supports: np.ndarray, T: int, seed: int, device):
        import torch

        from verify.learning.families.draw import TaskDraw

        self.world, self.encode, self.T, self.device = world, encode, T, device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.draw = TaskDraw(train_supports, world.M, world.weights, self.generator, device)

    def __call__(self) -> Batch:
        import torch

        from verify.learning.families.draw import encode_on

        z = self.draw(self.T)
        starts = self.world.sample_starts(self.T, self.generator)
        demo = self.world.demonstrate(starts, z, dtype=torch.float32)
        with torch.no_grad():
            e = encode_on(self.encode, z)
        return Batch(e.float(), demo.observations, demo.actions, demo.mask)


def masked_cross_entropy(logits, actions, mask):
    """The official CrossEntropyMaskedLoss: Σ mask·CE / Σ mask over every (episode, step)."""
    from torch import nn

    ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), actions.reshape(-1),
                                     reduction="none")
    m = mask.reshape(-1).to(ce.dtype)
    return (ce * m).sum() / m.sum()


def action_accuracy(logits, actions, mask) -> tuple[float, float]:
    """(acc, acc_all), as the official loss computes them: acc the masked per-step accuracy,
    acc_all the fraction of episodes whose every unmasked action is right (an episode with no
    unmasked step counts as right, as there)."""
    correct = (logits.argmax(dim=-1) == actions) & mask
    acc = float(correct.sum() / mask.sum()) if bool(mask.any()) else math.nan
    acc_all = float((correct.sum(dim=1) == mask.sum(dim=1)).double().mean())
    return acc, acc_all


@dataclass(frozen=True)
class PreferenceSettings:
    """The preference grid's own settings of a verify.sgd run, each its own flag (--F --objects
    --timelimit --discount --allow-M-above-F); the defaults are the paper's."""

    F: int = setting(16, cli.positive_int,
                     help="feature types of the objects (num_features; the paper's sweeps use 16 and 32)")
    objects: int = setting(4, cli.positive_int, help=f"objects in the grid, at most {MAX_OBJECTS}")
    timelimit: int = setting(8, cli.positive_int, help="value-iteration backups and steps per episode")
    discount: float = setting(0.9, cli.open_fraction, help="the demonstrator's discount, in (0, 1)")
    allow_M_above_F: bool = setting(
        False, switch, help="allow more modules than feature types (M > F), a deviation from the official "
                            "run.py, which requires num_preferences ≤ num_features: a task's rewards are "
                            "basisᵀz, a projection of its M weights onto F dimensions, in which distinct "
                            "tasks can coincide when F < M")

    @property
    def samples_per_task(self) -> int:
        """A task is one episode: its rows are its steps (rows_of), whatever a run passes."""
        return self.timelimit

    @property
    def eval_samples(self) -> int:
        return self.timelimit


class PreferenceFamily(TaskFamily):
    """The compositional preference grid (constructions.tasks.preference): imitation of a
    planner's actions, scored by per-step accuracy `acc` and whole-episode `acc_all`."""

    name = "preference"
    Settings = PreferenceSettings
    settings = tuple(f.name for f in fields(PreferenceSettings))
    optimiser: ClassVar[dict] = dict(lr=1e-4, weight_decay=1e-3)
    # The preference grid's run (configs/preference.py; the sweeps' seeds 1–3 rather than its
    # default 42): M = 16, K = 3, F = 32, 3M steps of 128 episodes, AdamW lr 1e-4, wd 1e-3, 2×1024.
    paper_preset: ClassVar[dict] = dict(M=16, K=3, F=32, steps=3_000_000, tasks_per_batch=128,
                                        seed=[1, 2, 3], eval_tasks=1024, lr=1e-4, weight_decay=1e-3)
    paper_widths: ClassVar[list[int]] = [1024] * 2
    # No construction to match: its MLP is `custom`, 2×256 by default.
    shapes = default_shapes = ("custom",)
    default_widths: ClassVar[list[int]] = [256, 256]
    smoke: ClassVar[dict] = dict(M=4, K=2, F=4, objects=2, timelimit=4)
    shapes_note = "the preference grid has no construction to match; use --shapes custom --widths …"
    convergence = ("acc", 0.99)
    headline, headline_label = "acc_all", "all"
    columns = (("train", "acc", "acc train", ".4f"), ("held_out", "acc", "acc held", ".4f"),
               ("train", "acc_all", "all train", ".4f"), ("held_out", "acc_all", "all held", ".4f"),
               ("held_out", "loss", "CE held", ".3e"))
    effects_metrics = (("train_acc", "train", "acc"), ("held_out_acc", "held_out", "acc"),
                       ("held_out_acc_all", "held_out", "acc_all"))
    scored_note = "acc: per-step accuracy on unmasked steps; all: episodes with every step right"

    def __init__(self, world, encode, encoding: str):
        self.world, self.encode, self.encoding = world, encode, encoding
        self.M, self.K, self.I, self.O = world.M, world.K, world.obs_dim, world.n_actions

    # ------------------------------------------------------------------ command line

    @classmethod
    def validate(cls, run) -> None:
        from verify.cli import UsageError

        task = run.task
        if run.encoding in HYPERTEACHER_ONLY_ENCODINGS:
            raise UsageError(f"--encoding {run.encoding} is defined for the hyperteacher only: "
                             f"{HYPERTEACHER_ONLY_ENCODINGS[run.encoding]}")
        if task.objects > MAX_OBJECTS:
            raise UsageError(f"--objects {task.objects}: at most {MAX_OBJECTS} objects fit the grid's "
                             "19 free cells beside the agent")
        if run.M > task.F and not task.allow_M_above_F:
            raise UsageError(f"--M {run.M} > --F {task.F}: the official run.py requires M ≤ F (with fewer "
                             "feature types than modules, distinct tasks' rewards can coincide); raise --F, "
                             "or pass --allow-M-above-F to deviate")

    @classmethod
    def from_run(cls, run) -> PreferenceFamily:
        from constructions.tasks.preference import PreferenceConfig

        task = run.task
        cfg = PreferenceConfig(M=run.M, F=task.F, n_objects=task.objects, K=run.K, weights=run.weights,
                               timelimit=task.timelimit, discount=task.discount, seed=run.seed)
        return cls._of(cfg, run.encoding)

    @classmethod
    def paper_default(cls) -> PreferenceFamily:
        """M = 16, K = 3, F = 32, identity encoding."""
        from constructions.tasks.preference import PreferenceConfig

        return cls._of(PreferenceConfig(M=16, K=3, F=32), "identity")

    @classmethod
    def _of(cls, cfg, encoding: str) -> PreferenceFamily:
        from types import SimpleNamespace

        from constructions.tasks.encodings import make_encoder
        from constructions.tasks.preference import PreferenceGrid

        # The encoders read only M and K of a family (and a Q the grid does not have).
        encode = make_encoder(encoding, SimpleNamespace(M=cfg.M, K=cfg.K, Q=None), seed=cfg.seed)
        return cls(PreferenceGrid(cfg), encode, encoding)

    # ------------------------------------------------------------------ the task

    def config(self) -> dict:
        return asdict(self.world.cfg)

    @classmethod
    def rows_of(cls, samples_per_task, config):
        return config["timelimit"]  # one episode: an observation before each of its actions

    def batches(self, train_supports, tasks_per_batch, samples_per_task, seed, device):
        return PreferenceBatches(self.world, self.encode, train_supports, tasks_per_batch, seed, device)

    def loss(self, pred, batch):
        return masked_cross_entropy(pred, batch.y, batch.mask)

    def episodes(self, supports: np.ndarray, n_tasks: int, rng: np.random.Generator,
                 generator) -> tuple[np.ndarray, Batch]:
        """n_tasks demonstrated episodes on tasks drawn from `supports`, in float64 on the CPU."""
        import torch

        from verify.learning.families.draw import eval_latents

        drawn, z = eval_latents(supports, n_tasks, self.world.weights, self.M, rng)
        z = torch.as_tensor(z)
        demo = self.world.demonstrate(self.world.sample_starts(n_tasks, generator), z, dtype=torch.float64)
        return drawn, Batch(self.encode(z), demo.observations, demo.actions, demo.mask, z)

    def eval_sides(self, split, extra_k, n_tasks, samples_per_task, seed):
        """The official 'test', 'ood' and 'ood_k' sets: (supports, Batch) a side."""
        import torch

        from verify.learning.metrics import random_supports

        rng = np.random.default_rng(seed + 1)
        generator = torch.Generator().manual_seed(seed + 1)
        sides = {side: (supports, self.episodes(supports, n_tasks, rng, generator)[1])
                 for side, supports in (("train", split.train), ("held_out", split.test))}
        for k in extra_k:
            drawn = random_supports(self.M, k, n_tasks, rng)
            sides[f"k{k}"] = (np.unique(drawn, axis=0), self.episodes(drawn, n_tasks, rng, generator)[1])
        return sides

    def score(self, network, f, sides, seed, probe_net=None, encode=None, fast=None):
        from verify.learning.metrics import predict_tasks, probe_r2_rows

        out, f = [], fast or f
        for side, (_, batch) in sides.items():
            dtype = parameter_dtype(f)
            logits = predict_tasks(f, batch.e.to(dtype), batch.x.to(dtype)).double()
            acc, acc_all = action_accuracy(logits, batch.y, batch.mask)
            out += [Metric(network, side, "acc", acc), Metric(network, side, "acc_all", acc_all),
                    Metric(network, side, "loss", float(masked_cross_entropy(logits, batch.y, batch.mask)))]
        probe = None
        if probe_net is not None:
            fit, test = sides["train"][1], sides["held_out"][1]
            probe = probe_r2_rows(probe_net, fit.z, fit.e, fit.x, test.z, test.e, test.x)
        return out, probe
