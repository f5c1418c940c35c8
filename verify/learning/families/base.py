"""The task-family interface: everything that differs between task families, so that the
training loop, verify.sgd, the studies and the effects table hold no `if family ==`.

A family is a plug-in, as a construction is (constructions/): one module that subclasses
TaskFamily, and one line in the registry (verify/learning/families/__init__.py). It owns

- its settings: `Settings`, a frozen dataclass of its own settings of a run (each field a
  `setting(default, validator)`; `settings` their names), which a run holds as `run.task`
  (verify.learning.run_config.SgdRun). Besides its fields, Settings gives `samples_per_task`
  and `eval_samples`: the value a run's training and scoring pass to `rows_per_task`,
  `batches` and `eval_sides` (a field, or a property where the family has no such choice);
- its command line: its own flags of verify.sgd, one per field of Settings, declared on the
  field (`setting(default, validator, help=...)`; `add_flags` makes them, with no default:
  Settings holds it; another family's run refuses them), `paper_preset` (what
  --paper sets), `optimiser` (AdamW's defaults), the MLP shapes and widths it offers, and
  `validate(run)` (its refusals, one line and exit 2 before any work);
- its task: `from_run` builds it, with its encoder, from a run (an SgdRun), `paper_default`
  at the paper's default (verify.bench), and `config()` records it;
- training: `batches(...)` gives batches made on the training device, each a `Batch` of task
  codes e (T, E), rows x (T, P, I), targets y and a mask of the rows that count; `loss(pred,
  batch)` the training loss;
- scoring: `eval_sides(...)` and `score(...)`, the scoring sets and the named metrics as typed
  records (verify.learning.records); `convergence`, the training-side metric and threshold a
  run must reach to count as converged, and `headline`, the held-out metric the paper's sweeps
  optimise; `reference_for(args)`, a network the students are compared with, with its
  certificate (the theorem's construction for the hyperteacher), or None.

Every student reads a task as the official policies do (compscale/model/policy.py): the MLP
runs on [e(z), x_t] for each of the task's P rows, the transformer on the sequence
[z, x_1 … x_P].

This module, the registry and the family modules import no torch at module level: verify.sgd
builds its parser from them, and `--help` answers without torch (tests/test_promises.py).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from verify.learning.settings import add_setting_flags, choice, setting, switch  # noqa: F401 (the families' API)

if TYPE_CHECKING:
    import torch


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
    net: object  # an nn.Module
    encode: object  # the encoder it reads z through
    widths: list[int]
    certificate: float
    probe_net: object | None  # its dense form (an nn.Module), when small enough to probe


class TaskFamily(ABC):
    """The interface; see the module docstring."""

    name: ClassVar[str]
    Settings: ClassVar[type]  # its own settings of a run (a frozen dataclass; see the module docstring)
    # --- its command line (verify.sgd)
    settings: ClassVar[tuple[str, ...]] = ()  # Settings' field names: its own flags' destinations
    optimiser: ClassVar[dict]  # AdamW's defaults: lr, weight_decay
    paper_preset: ClassVar[dict]  # the settings --paper sets
    paper_widths: ClassVar[list[int]]  # the MLP's widths under --paper
    shapes: ClassVar[tuple[str, ...]] = ("custom",)  # the MLP shapes it offers (verify.presets.SHAPES)
    default_shapes: ClassVar[tuple[str, ...]] = ("custom",)
    default_widths: ClassVar[list[int] | None] = None  # --widths when not given (None: none)
    shapes_note: ClassVar[str] = ""  # why it offers only `shapes`, for the refusal
    # A task small enough to train and score in seconds (the family contract test): settings
    # of verify.sgd, by destination.
    smoke: ClassVar[dict] = {}
    # --- what it reports
    convergence: ClassVar[tuple[str, float]]  # (metric on the training side, threshold)
    headline: ClassVar[str]  # the held-out metric the paper's sweeps optimise
    headline_label: ClassVar[str]
    # Metrics whose held-out ÷ training (÷ the reference's) is reported.
    ratio_metrics: ClassVar[tuple[str, ...]] = ()
    columns: ClassVar[tuple]  # (side, metric, header, format) of the text report
    ratio_columns: ClassVar[tuple] = ()
    scored_note: ClassVar[str]
    # The effects table's columns (name, side, metric; mean ± sd over seeds), and those shown
    # as a mean only.
    effects_metrics: ClassVar[tuple]
    effects_extra: ClassVar[tuple] = ()
    # The paper's held-out headline metric per encoding, where the paper states it.
    paper_by_encoding: ClassVar[dict[str, float]] = {}
    paper_by_encoding_setting: ClassVar[str] = ""  # the run those numbers come from
    M: int
    K: int
    I: int  # noqa: E741 (the paper's name)
    O: int  # noqa: E741
    encode: object
    encoding: str

    # ------------------------------------------------------------------ command line

    @classmethod
    def add_flags(cls, parser) -> None:
        """Add this family's own flags to verify.sgd's parser (their destinations: `settings`):
        one for each field of Settings that declares its help (setting(..., help=)), its
        default stated from the field."""
        add_setting_flags(parser, cls.Settings, cls.name)

    @classmethod
    def validate(cls, run) -> None:
        """Refuse a run (an SgdRun) this family cannot do (verify.cli.UsageError, one line);
        nothing by default."""
        return None

    @classmethod
    @abstractmethod
    def from_run(cls, run) -> TaskFamily:
        """The family's task, with its encoder, from a run (an SgdRun: run.task its own settings)."""

    @classmethod
    @abstractmethod
    def paper_default(cls) -> TaskFamily:
        """The paper's default task of this family, read through the identity encoding."""

    # ------------------------------------------------------------------ the task

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

    # ------------------------------------------------------------------ training and scoring

    @abstractmethod
    def batches(self, train_supports, tasks_per_batch: int, samples_per_task: int, seed: int, device):
        """A callable giving a training Batch (float32 on `device`) per call; its `generator`
        attribute is the one random stream it draws from (saved with a checkpoint)."""

    @abstractmethod
    def loss(self, pred, batch: Batch):
        """The training loss of predictions (T, P, O) on a batch."""

    @abstractmethod
    def eval_sides(self, split, extra_k: list[int], n_tasks: int, samples_per_task: int, seed: int) -> dict:
        """{side: (its supports, its scoring set)}, the same for every network scored: the
        training supports ('train'), the held-out ones ('held_out'), and k active modules for
        each k in extra_k ('k<k>'). A run's behaviour record scores each side on its first
        few supports (verify.learning.sgd_program.behaviour)."""

    @abstractmethod
    def score(self, network: str, f, sides: dict, seed: int, probe_net=None,
              encode=None, fast=None) -> tuple[list, list | None]:
        """(metric records on every side, the paper's probe (layer, R²) or None). `fast`,
        when given, is the same network for the sampled metrics (R², RMSE, accuracy):
        metrics.on_device's copy on the training device; `f` (float64) serves the rest."""

    def sup_search(self, f) -> dict | None:
        """How the network f's sup error was searched, where its report should say so (a
        search cut below the full one); None by default."""
        return None

    def reference_for(self, run) -> Reference | None:
        """The network a run's students are compared with; None when the family has none."""
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


def parameter_dtype(f):
    """The dtype of a network's parameters (float64 for a function without any)."""
    import torch
    from torch import nn

    p = next(iter(f.parameters()), None) if isinstance(f, nn.Module) else None
    return torch.float64 if p is None else p.dtype
