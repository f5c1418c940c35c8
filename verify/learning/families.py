"""Task families: what a student learns, behind one interface for training and scoring.

A family gives the learning side everything that differs between the paper's two task
families, so that the training loop, verify.sgd, the studies and the effects table hold no
`if family ==`:

- `batches(...)`: training batches made on the training device, each a `Batch` of task
  codes e (T, E), inputs x (T, P, I), targets y and a mask of the steps that count;
- `loss(pred, batch)`: the training loss (MSE; masked cross-entropy);
- `eval_sides(...)` and `score(...)`: the scoring sets and the named metrics, as typed
  records (verify.learning.records);
- `convergence`: the training-side metric and threshold a run must reach to count as
  converged, and `headline`: the held-out metric the paper's sweeps optimise;
- `reference(eps)`: a network the students are compared with, with its certificate (the
  theorem's construction for the hyperteacher; none for the preference grid).

Every student reads a task as the official policies do (compscale/model/policy.py): the
MLP runs on [e(z), x_t] for each of the task's P rows, the transformer on the sequence
[z, x_1 … x_P]. For the hyperteacher the rows are P samples x ∈ [−1, 1]^I, for the
preference grid the T = 8 observations of one demonstrated episode.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from constructions.tasks.hyperteacher import DISCRETE_LEVELS, dense_latents, support_weights
from verify.learning.metrics import predict_tasks, random_supports
from verify.learning.records import Metric
from verify.names import FAMILY_NAMES


@dataclass(frozen=True)
class Batch:
    e: torch.Tensor  # (T, E) the task codes the student reads
    x: torch.Tensor  # (T, P, I) the task's rows: samples, or an episode's observations
    y: torch.Tensor  # (T, P, O) regression targets, or (T, P) int64 action labels
    mask: torch.Tensor | None = None  # (T, P) bool, the rows that count; None: all
    z: torch.Tensor | None = None  # (T, M) the tasks' weights, for the probe


@dataclass(frozen=True)
class Reference:
    """A network the students are compared with, and the bound it is certified to meet."""

    name: str
    net: nn.Module
    encode: object  # the encoder it reads z through
    widths: list[int]
    certificate: float
    probe_net: nn.Module | None  # its dense form, when small enough to probe


class TaskDraw:
    """Tasks drawn on the training device from one generator: supports uniformly (with
    replacement) from the training ones, then their weights as the family's scheme draws
    them (support_weights, in torch), scattered into dense z (T, M) in float64."""

    def __init__(self, supports: np.ndarray, M: int, weights: str, generator: torch.Generator,
                 device: torch.device):
        self.M, self.scheme, self.generator, self.device = M, weights, generator, device
        # Copies: the arrays may be read-only (loaded from a file), and they move to the device.
        self.supports = torch.tensor(np.asarray(supports), dtype=torch.int64, device=device)
        self.levels = torch.tensor(DISCRETE_LEVELS, dtype=torch.float64, device=device)

    def weights(self, active: torch.Tensor) -> torch.Tensor:
        """Weights of the active entries (0 on padding), as support_weights draws them."""
        shape, g = active.shape, self.generator
        if self.scheme == "khot":
            w = torch.ones(shape, dtype=torch.float64, device=self.device)
        elif self.scheme == "discrete":
            w = self.levels[torch.randint(len(self.levels), shape, generator=g, device=self.device)]
        else:  # continuous: the official uniform-simplex draw, shifted into [0.5, 1]
            u = torch.rand(shape, generator=g, dtype=torch.float64, device=self.device)
            e = -torch.log1p(-u) * active
            w = 0.5 * e / (e.sum(dim=1, keepdim=True) + 1.0) + 0.5
        return w * active

    def __call__(self, T: int) -> torch.Tensor:
        rows = self.supports[torch.randint(len(self.supports), (T,), generator=self.generator,
                                           device=self.device)]
        active = rows >= 0
        # scatter_add: padding (−1 → column 0, weight 0) must not overwrite a real module 0.
        return torch.zeros(T, self.M, dtype=torch.float64, device=self.device).scatter_add_(
            1, rows.clamp(min=0), self.weights(active))


def encode_on(encode, z: torch.Tensor) -> torch.Tensor:
    """e(z) where z lives: every encoder runs on z's device (constructions.tasks.encodings),
    so nothing crosses to the host; `identity` needs no call at all."""
    if getattr(encode, "name", None) == "identity":
        return z
    return encode(z)


def eval_latents(supports: np.ndarray, n_tasks: int, weights: str, M: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(drawn supports, dense z) of n_tasks tasks whose supports are drawn uniformly, with
    replacement, from `supports` (jax.random.choice in the official reset_goal), each with
    its own weights."""
    drawn = supports[rng.integers(0, len(supports), n_tasks)]
    return drawn, dense_latents(drawn, support_weights(drawn, weights, rng), M)


class TaskFamily(ABC):
    """The interface; see the module docstring."""

    name: ClassVar[str]
    convergence: ClassVar[tuple[str, float]]  # (metric on the training side, threshold)
    headline: ClassVar[str]  # the held-out metric the paper's sweeps optimise
    headline_label: ClassVar[str]
    ratio_metrics: ClassVar[tuple[str, ...]]  # metrics whose held-out ÷ training (÷ reference) is reported
    columns: ClassVar[tuple]  # (side, metric, header, format) of the text report
    ratio_columns: ClassVar[tuple]
    scored_note: ClassVar[str]
    M: int
    K: int
    I: int  # noqa: E741 (the paper's name)
    O: int  # noqa: E741
    encode: object

    @property
    def E(self) -> int:
        from verify.learning.metrics import encoding_dim

        return encoding_dim(self.encode, self.M)

    @abstractmethod
    def config(self) -> dict:
        """The family's settings, as the report records them."""

    @classmethod
    @abstractmethod
    def rows_of(cls, samples_per_task: int, config: dict) -> int:
        """P, the rows a student reads per task, from the settings (a report's, say)."""

    def rows_per_task(self, samples_per_task: int) -> int:
        return self.rows_of(samples_per_task, self.config())

    @abstractmethod
    def batches(self, train_supports: np.ndarray, tasks_per_batch: int, samples_per_task: int, seed: int,
                device: torch.device):
        """A callable giving a training Batch (float32 on `device`) per call; its `generator`
        attribute is the one random stream it draws from (saved with a checkpoint)."""

    @abstractmethod
    def loss(self, pred: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The training loss of predictions (T, P, O) on a batch."""

    @abstractmethod
    def eval_sides(self, split, extra_k: list[int], n_tasks: int, samples_per_task: int, seed: int) -> dict:
        """{side: its scoring set}, the same for every network scored."""

    @abstractmethod
    def score(self, network: str, f, sides: dict, seed: int, probe_net=None,
              encode=None, fast=None) -> tuple[list[Metric], list | None]:
        """(metric records on every side, the paper's probe (layer, R²) or None). `fast`,
        when given, is the same network for the sampled metrics (R², RMSE, accuracy):
        metrics.on_device's copy on the training device; `f` (float64) serves the rest."""

    def reference(self, eps: float) -> Reference | None:
        """The network the students are compared with; None when the family has none."""
        return None

    @classmethod
    def converged(cls, train_value: float | None) -> bool:
        """Whether a run whose training-side convergence metric is `train_value` converged."""
        return train_value is not None and math.isfinite(train_value) and train_value >= cls.convergence[1]

    @classmethod
    def convergence_side_metric(cls) -> tuple[str, str]:
        return ("train", cls.convergence[0])

    @classmethod
    def effect_side_metric(cls) -> tuple[str, str]:
        """The held-out metric the effects table compares across supports: the headline."""
        return ("held_out", cls.headline)


# ----------------------------------------------------------------------------- hyperteacher

class HyperteacherBatches:
    """Training batches made where training runs, in torch, from one generator on that
    device: supports drawn uniformly (with replacement) from the training ones, their
    weights, x uniform on [-1, 1]^I, and the teacher's targets, in float64 (cast to float32
    for the step). Nothing crosses to the host: the encoder runs on the device (encode_on),
    and the teacher keeps its arrays there (Hyperteacher.tensors, made on the first batch)."""

    def __init__(self, teacher, encode, train_supports: np.ndarray, T: int, P: int, seed: int,
                 device: torch.device):
        self.teacher, self.encode, self.T, self.P, self.device = teacher, encode, T, P, device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.draw = TaskDraw(train_supports, teacher.M, teacher.weights, self.generator, device)

    def __call__(self) -> Batch:
        T, P, t, g = self.T, self.P, self.teacher, self.generator
        z = self.draw(T)
        x = torch.rand((T, P, t.I), generator=g, dtype=torch.float64, device=self.device) * 2 - 1
        with torch.no_grad():
            target = t.forward(z.repeat_interleave(P, dim=0), x.view(T * P, t.I)).view(T, P, t.O)
            e = encode_on(self.encode, z)
        return Batch(e.float(), x.float(), target.float())


class HyperteacherFamily(TaskFamily):
    """The paper's hyperteacher (spec §1): regression of g(x, z), scored by the paper's
    compositional R², RMSE and the sup error, beside the theorem's construction."""

    name = "hyperteacher"
    convergence = ("r2", 0.99)
    headline, headline_label = "r2", "R²"
    ratio_metrics = ("sup", "rmse")
    columns = (("train", "sup", "sup train", ".2e"), ("held_out", "sup", "sup held", ".2e"),
               ("held_out", "rmse", "RMSE held", ".2e"), ("train", "r2", "R² train", ".4f"),
               ("held_out", "r2", "R² held", ".4f"))
    ratio_columns = (("held_out", "sup_over_train", "held/train", ".2f"),
                     ("held_out", "sup_over_reference", "vs constr", ".0f"))
    # The effects table's columns (mean ± sd over seeds), and the ones shown as a mean only.
    effects_metrics = (("train_r2", "train", "r2"), ("held_out_r2", "held_out", "r2"))
    effects_extra = (("sup_ratio", "held_out", "sup_over_reference"),)
    scored_note = ("RMSE and R² (the paper's estimator) on each task's samples; sup error over each side's "
                   "supports")

    def __init__(self, teacher, encode, encoding: str, config: dict | None = None):
        self.teacher, self.encode, self.encoding, self._config = teacher, encode, encoding, config or {}
        self.M, self.K, self.I, self.O = teacher.M, teacher.K, teacher.I, teacher.O
        self.sup_measure = None  # the sup error's search budget (None: names.SGD_MEASURE)

    def config(self) -> dict:
        return dict(self._config)

    @classmethod
    def rows_of(cls, samples_per_task, config):
        return samples_per_task

    def batches(self, train_supports, tasks_per_batch, samples_per_task, seed, device):
        return HyperteacherBatches(self.teacher, self.encode, train_supports, tasks_per_batch,
                                   samples_per_task, seed, device)

    def loss(self, pred, batch):
        return nn.functional.mse_loss(pred, batch.y)

    def eval_sides(self, split, extra_k, n_tasks, samples_per_task, seed):
        """The paper's 'test' (fresh tasks on the training supports), 'ood' (held-out
        supports) and 'ood_k' (k active modules, k > K): (supports, TaskSamples) a side."""
        from verify.learning.metrics import sample_eval_tasks

        rng = np.random.default_rng(seed + 1)
        sides = {}
        for side, supports in (("train", split.train), ("held_out", split.test)):
            sides[side] = (supports,
                           sample_eval_tasks(self.teacher, supports, n_tasks, samples_per_task, rng))
        for k in extra_k:
            drawn = random_supports(self.M, k, n_tasks, rng)
            sides[f"k{k}"] = (np.unique(drawn, axis=0),
                              sample_eval_tasks(self.teacher, drawn, n_tasks, samples_per_task, rng))
        return sides

    def score(self, network, f, sides, seed, probe_net=None, encode=None, fast=None):
        """Sup error over the side's supports, RMSE and the paper's R² on its sampled
        tasks (and this project's R², which skips (task, output) pairs whose target is
        constant); then the paper's probe, fitted on the in-distribution tasks and scored
        on the held-out ones."""
        from verify.learning.metrics import (
            compositional_r2,
            compositional_r2_paper,
            predict,
            probe_r2,
            rmse,
            sup_error,
        )
        from verify.names import SGD_MEASURE

        encode = encode or self.encode
        out = []
        for side, (supports, samples) in sides.items():
            pred = predict(fast or f, samples, encode)
            r2, used = compositional_r2(pred, samples)
            # The sup error scores the function the R² scores (a transformer's every position),
            # over x for the family's own task weights (refine_z off): z values the training
            # never shows (weights below 0.5, say) would measure extrapolation, not composition.
            sup = sup_error(f, self.teacher, encode, supports, samples.x.shape[1], seed,
                            self.sup_measure or SGD_MEASURE, refine_z=False)
            values = (("sup", sup.sup_error), ("rmse", rmse(pred, samples)),
                      ("r2", compositional_r2_paper(pred, samples)), ("r2_nonconstant", r2),
                      ("r2_pairs_used", used))
            out += [Metric(network, side, name, value) for name, value in values]
        probe = (probe_r2(probe_net, sides["train"][1], sides["held_out"][1], encode)
                 if probe_net is not None else None)
        return out, probe

    def reference(self, eps):
        """The theorem's shallow construction at ε (verify.sgd compares every student with it)."""
        from constructions.names import LINEAR_ENCODINGS
        from constructions.shallow import build_shallow

        construction = build_shallow(self.teacher, eps)
        widths = construction.counted_widths()
        probe = construction.to_sequential() if construction.dense_bytes() <= PROBE_MAX_BYTES else None
        # The construction reads z through a linear encoding; for a nonlinear one it is shown on
        # the identity encoding, as the reference the trained networks are compared with.
        linear = self.encoding in LINEAR_ENCODINGS
        name = f"construction ε={eps:g}" + ("" if linear else " (identity input)")
        return Reference(name, construction, self.encode if linear else self.teacher.encode, list(widths),
                         construction.certificate(), probe)


PROBE_MAX_BYTES = 2**30  # probe the construction through its dense form only up to this size


# ----------------------------------------------------------------------------- preference grid

class PreferenceBatches:
    """Training batches of demonstrated episodes, made on the training device: tasks drawn
    as the hyperteacher's (TaskDraw), start states, then the demonstrator (value iteration
    and greedy rollout, constructions.tasks.preference), all in torch from one generator;
    the encoder, too, runs on the device (encode_on)."""

    def __init__(self, world, encode, train_supports: np.ndarray, T: int, seed: int, device: torch.device):
        self.world, self.encode, self.T, self.device = world, encode, T, device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.draw = TaskDraw(train_supports, world.M, world.weights, self.generator, device)

    def __call__(self) -> Batch:
        z = self.draw(self.T)
        starts = self.world.sample_starts(self.T, self.generator)
        demo = self.world.demonstrate(starts, z, dtype=torch.float32)
        with torch.no_grad():
            e = encode_on(self.encode, z)
        return Batch(e.float(), demo.observations, demo.actions, demo.mask)


def masked_cross_entropy(logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The official CrossEntropyMaskedLoss: Σ mask·CE / Σ mask over every (episode, step)."""
    ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), actions.reshape(-1),
                                     reduction="none")
    m = mask.reshape(-1).to(ce.dtype)
    return (ce * m).sum() / m.sum()


def action_accuracy(logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(acc, acc_all), as the official loss computes them: acc the masked per-step accuracy,
    acc_all the fraction of episodes whose every unmasked action is right (an episode with no
    unmasked step counts as right, as there)."""
    correct = (logits.argmax(dim=-1) == actions) & mask
    acc = float(correct.sum() / mask.sum()) if bool(mask.any()) else math.nan
    acc_all = float((correct.sum(dim=1) == mask.sum(dim=1)).double().mean())
    return acc, acc_all


class PreferenceFamily(TaskFamily):
    """The compositional preference grid (constructions.tasks.preference): imitation of a
    planner's actions, scored by per-step accuracy `acc` and whole-episode `acc_all`."""

    name = "preference"
    convergence = ("acc", 0.99)
    headline, headline_label = "acc_all", "all"
    ratio_metrics = ()
    columns = (("train", "acc", "acc train", ".4f"), ("held_out", "acc", "acc held", ".4f"),
               ("train", "acc_all", "all train", ".4f"), ("held_out", "acc_all", "all held", ".4f"),
               ("held_out", "loss", "CE held", ".3e"))
    ratio_columns = ()
    effects_metrics = (("train_acc", "train", "acc"), ("held_out_acc", "held_out", "acc"),
                       ("held_out_acc_all", "held_out", "acc_all"))
    effects_extra = ()
    scored_note = "acc: per-step accuracy on unmasked steps; all: episodes with every step right"

    def __init__(self, world, encode, encoding: str):
        self.world, self.encode, self.encoding = world, encode, encoding
        self.M, self.K, self.I, self.O = world.M, world.K, world.obs_dim, world.n_actions

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
                 generator: torch.Generator) -> tuple[np.ndarray, Batch]:
        """n_tasks demonstrated episodes on tasks drawn from `supports`, in float64 on the CPU."""
        drawn, z = eval_latents(supports, n_tasks, self.world.weights, self.M, rng)
        z = torch.as_tensor(z)
        demo = self.world.demonstrate(self.world.sample_starts(n_tasks, generator), z, dtype=torch.float64)
        return drawn, Batch(self.encode(z), demo.observations, demo.actions, demo.mask, z)

    def eval_sides(self, split, extra_k, n_tasks, samples_per_task, seed):
        """The official 'test', 'ood' and 'ood_k' sets: (supports, Batch) a side."""
        rng = np.random.default_rng(seed + 1)
        generator = torch.Generator().manual_seed(seed + 1)
        sides = {side: (supports, self.episodes(supports, n_tasks, rng, generator)[1])
                 for side, supports in (("train", split.train), ("held_out", split.test))}
        for k in extra_k:
            drawn = random_supports(self.M, k, n_tasks, rng)
            sides[f"k{k}"] = (np.unique(drawn, axis=0), self.episodes(drawn, n_tasks, rng, generator)[1])
        return sides

    def score(self, network, f, sides, seed, probe_net=None, encode=None, fast=None):
        from verify.learning.metrics import probe_r2_rows

        out, f = [], fast or f
        for side, (_, batch) in sides.items():
            logits = predict_tasks(f, batch.e.to(_dtype(f)), batch.x.to(_dtype(f))).double()
            acc, acc_all = action_accuracy(logits, batch.y, batch.mask)
            out += [Metric(network, side, "acc", acc), Metric(network, side, "acc_all", acc_all),
                    Metric(network, side, "loss", float(masked_cross_entropy(logits, batch.y, batch.mask)))]
        probe = None
        if probe_net is not None:
            fit, test = sides["train"][1], sides["held_out"][1]
            probe = probe_r2_rows(probe_net, fit.z, fit.e, fit.x, test.z, test.e, test.x)
        return out, probe


def _dtype(f) -> torch.dtype:
    p = next(iter(f.parameters()), None) if isinstance(f, nn.Module) else None
    return torch.float64 if p is None else p.dtype


FAMILIES: dict[str, type[TaskFamily]] = {c.name: c for c in (HyperteacherFamily, PreferenceFamily)}
assert tuple(FAMILIES) == FAMILY_NAMES
