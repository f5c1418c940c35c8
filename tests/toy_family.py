"""A third task family, written as a plug-in (tests/test_family_plugins.py registers it):
linear regression y = W(z) x with W(z) = Σ_m z_m W_m, the hyperteacher with no hidden layer.
It touches no project file: this module and one `register` call are all it takes."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np
import torch

from verify.cli import UsageError, positive_int
from verify.learning.families import Batch, TaskFamily
from verify.learning.families.base import setting
from verify.learning.families.draw import TaskDraw, encode_on, eval_latents
from verify.learning.records import Metric


@dataclass(frozen=True)
class LinearSettings:
    D: int = setting(2, positive_int, help="input and output size")
    rows: int = setting(8, positive_int, help="samples per task")

    @property
    def samples_per_task(self) -> int:
        return self.rows

    eval_samples = samples_per_task  # scored on as many rows a task as it trains on


class LinearFamily(TaskFamily):
    """Linear regression: y = (Σ_m z_m W_m) x, scored by R² and MSE"""

    name = "linear"
    Settings = LinearSettings
    settings = tuple(f.name for f in fields(LinearSettings))
    optimiser: ClassVar[dict] = dict(lr=1e-2, weight_decay=0.0)
    paper_preset: ClassVar[dict] = dict(M=8, K=2, D=4, steps=2000)
    paper_widths: ClassVar[list[int]] = [64]
    default_widths: ClassVar[list[int]] = [16]
    smoke: ClassVar[dict] = dict(M=4, K=2, D=2, rows=4)
    convergence = ("r2", 0.9)
    headline, headline_label = "r2", "R²"
    columns = (("train", "r2", "R² train", ".4f"), ("held_out", "r2", "R² held", ".4f"),
               ("held_out", "mse", "MSE held", ".2e"))
    effects_metrics = (("train_r2", "train", "r2"), ("held_out_r2", "held_out", "r2"))
    scored_note = "R² and MSE on each side's tasks"

    def __init__(self, M: int, K: int, D: int, rows: int, encoding: str, weights: str, seed: int):
        from types import SimpleNamespace

        from constructions.tasks.encodings import make_encoder

        self.M, self.K, self.I, self.O, self.P = M, K, D, D, rows
        self.encoding, self.weights, self.seed = encoding, weights, seed
        self.W = torch.randn(M, D, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) / D
        self.encode = make_encoder(encoding, SimpleNamespace(M=M, K=K, Q=None), seed=seed)

    @classmethod
    def validate(cls, run):
        if run.encoding.startswith("fewshot"):
            raise UsageError(f"--encoding {run.encoding}: the linear family shows no examples")

    @classmethod
    def from_run(cls, run):
        return cls(run.M, run.K, run.task.D, run.task.rows, run.encoding, run.weights, run.seed)

    @classmethod
    def paper_default(cls):
        return cls(8, 2, 4, 8, "identity", "continuous", 0)

    def config(self):
        return dict(M=self.M, K=self.K, D=self.I, rows=self.P, weights=self.weights, seed=self.seed)

    @classmethod
    def rows_of(cls, samples_per_task, config):
        return config["rows"]

    def targets(self, z, x):
        """y (T, P, D) = W(z) x."""
        return torch.einsum("tm,mod,tpd->tpo", z, self.W.to(z.device), x)

    def batches(self, train_supports, tasks_per_batch, samples_per_task, seed, device):
        generator = torch.Generator(device=device).manual_seed(seed)
        draw = TaskDraw(train_supports, self.M, self.weights, generator, device)

        def batch():
            z = draw(tasks_per_batch)
            x = torch.rand((tasks_per_batch, self.P, self.I), generator=generator, dtype=torch.float64,
                           device=device) * 2 - 1
            return Batch(encode_on(self.encode, z).float(), x.float(), self.targets(z, x).float())

        batch.generator = generator
        return batch

    def loss(self, pred, batch):
        return torch.nn.functional.mse_loss(pred, batch.y)

    def eval_sides(self, split, extra_k, n_tasks, samples_per_task, seed):
        rng = np.random.default_rng(seed + 1)
        sides = {}
        for side, supports in (("train", split.train), ("held_out", split.test)):
            _, z = eval_latents(supports, n_tasks, self.weights, self.M, rng)
            z = torch.as_tensor(z)
            x = torch.as_tensor(rng.uniform(-1, 1, (n_tasks, self.P, self.I)))
            sides[side] = (supports, Batch(self.encode(z), x, self.targets(z, x), z=z))
        return sides

    def score(self, network, f, sides, seed, probe_net=None, encode=None, fast=None):
        from verify.learning.families.base import parameter_dtype
        from verify.learning.metrics import predict_tasks

        out, f = [], fast or f
        for side, (_, b) in sides.items():
            dtype = parameter_dtype(f)
            pred = predict_tasks(f, b.e.to(dtype), b.x.to(dtype)).double()
            mse = float(((pred - b.y) ** 2).mean())
            r2 = 1 - mse / float(((b.y - b.y.mean(dim=(0, 1))) ** 2).mean())
            out += [Metric(network, side, "r2", r2), Metric(network, side, "mse", mse)]
        return out, None
