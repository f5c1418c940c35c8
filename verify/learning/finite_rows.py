"""SGD on the kernel limit's own rows (issue 45, part 3): `python -m verify.kernel --data finite`.

The kernel limits (kernel_limit.py) fit a fixed set of rows: --tasks tasks drawn from the
training supports, --samples-per-task x each (`training_rows`, from seed + 2). The networks of
verify.kernel train online, on fresh tasks every step, as verify.sgd's students do; so
"trained − kernel" mixes the learning rule with a data budget a thousand times larger. With
`--data finite` the linearised and the trained network fit exactly the rows the kernel limit
with the same --tasks, --samples-per-task and --seed fits, in epochs over that fixed set:

- the set is `nested_training_rows`'s draw, which is `training_rows`'s (the same numbers; it
  also names each task's support, so the report counts the supports covered);
- each step takes --tasks-per-batch of its tasks, all of a task's samples (a task's rows stay
  together, as the online batches hold tasks × rows per task);
- the order is a permutation of the tasks drawn anew each epoch from a torch generator on
  the training device, seeded with --seed (as the online batches' generator is); when
  --tasks-per-batch does not divide --tasks, an epoch's last step takes the tasks left (a
  smaller batch), so every epoch visits every task exactly once.

`FiniteFamily` is the family with its `batches` replaced: train.py's `train_student` takes it
as it takes the family (the loss, the encoder, the rows per task are the family's), and draws
its batches from `FiniteBatches`, whose calls yield `Batch(e, x, y)` in the shapes and dtypes
the family's own batches have ((T, E), (T, P, I), (T, P, O), float32, on the device).
Checkpoints are not supported: a resume would need the epoch's permutation and position, which
train.py's checkpoint (the data generator's state alone) does not carry; verify.kernel has no
checkpoint option, and `FiniteBatches.generator` refuses in one line rather than resume wrongly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from verify.learning.families import Batch

DATA = ("online", "finite")


@dataclass(frozen=True)
class FiniteSet:
    """The fixed training set: the rows [e(z), x] (T·P, E + I) and targets (T·P, O), float64,
    exactly as the kernel limit's fit receives them; T tasks of P rows, task-major; E, the
    encoding's width; and for each task the index of its support among the training supports."""

    rows: torch.Tensor
    targets: torch.Tensor
    tasks: int
    samples_per_task: int
    E: int  # noqa: N815 (the paper's name)
    which: np.ndarray

    def supports_covered(self) -> int:
        return int(len(np.unique(self.which)))


def finite_set(family, train_supports: np.ndarray, tasks: int, samples_per_task: int, seed: int) -> FiniteSet:
    """The rows the kernel limit with these --tasks, --samples-per-task and --seed fits
    (kernel_limit.nested_training_rows: training_rows's draw, and each task's support)."""
    from verify.learning.kernel_limit import KernelConfig, nested_training_rows

    cfg = KernelConfig(tasks=tasks, samples_per_task=samples_per_task)
    rows, targets, which = nested_training_rows(family, train_supports, cfg, seed)
    E = rows.shape[1] - family.I  # noqa: N806
    return FiniteSet(rows, targets, tasks, samples_per_task, E, which)


def batches_per_epoch(tasks: int, tasks_per_batch: int) -> int:
    return math.ceil(tasks / tasks_per_batch)


def epochs(steps: int, tasks: int, tasks_per_batch: int) -> float:
    """Passes over the set that `steps` steps make (the last may be partial)."""
    return steps / batches_per_epoch(tasks, tasks_per_batch)


class FiniteBatches:
    """The batches of a fixed set, called as the family's batches are: each call one step's
    Batch of --tasks-per-batch tasks (fewer at an epoch's end when they do not divide the
    tasks), in an order drawn anew each epoch (torch.randperm on the training device, from a
    generator seeded with `seed`). `last_tasks` holds the tasks of the last batch (indices
    into the set), `epoch` the epochs begun."""

    def __init__(self, data: FiniteSet, tasks_per_batch: int, seed: int, device):
        T, P, E = data.tasks, data.samples_per_task, data.E  # noqa: N806
        if tasks_per_batch > T:
            raise ValueError(f"tasks_per_batch ({tasks_per_batch}) exceeds the set's {T} tasks")
        rows = data.rows.reshape(T, P, -1)
        e = rows[:, 0, :E]
        if not torch.equal(rows[:, :, :E], e[:, None, :].expand(T, P, E)):
            raise ValueError("a task's rows do not share its encoding e(z): not task-major rows")
        self.device = torch.device(device)
        self.e = e.to(self.device, torch.float32)
        self.x = rows[:, :, E:].to(self.device, torch.float32)
        self.y = data.targets.reshape(T, P, -1).to(self.device, torch.float32)
        self.T, self.B = T, tasks_per_batch
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self._order: torch.Tensor | None = None
        self._at = T  # the next epoch begins at the first call
        self.epoch = 0
        self.last_tasks: torch.Tensor | None = None

    @property
    def generator(self):
        raise NotImplementedError("--data finite does not checkpoint: a resume needs the epoch's order and "
                                  "position, which train.py's checkpoint does not carry")

    def __call__(self) -> Batch:
        if self._at >= self.T:
            self._order = torch.randperm(self.T, generator=self._generator, device=self.device)
            self._at, self.epoch = 0, self.epoch + 1
        tasks = self._order[self._at:self._at + self.B]
        self._at += len(tasks)
        self.last_tasks = tasks
        return Batch(self.e[tasks], self.x[tasks], self.y[tasks])


class FiniteFamily:
    """`family` with its batches drawn from a fixed set (FiniteBatches): everything else (the
    loss, the encoder, the rows per task, its name and config) is the family's own."""

    def __init__(self, family, data: FiniteSet):
        self._family, self.data = family, data

    def __getattr__(self, name):
        if name.startswith("__") or name == "_family":  # copy and pickle ask before __init__ ran
            raise AttributeError(name)
        return getattr(self._family, name)

    def batches(self, train_supports, tasks_per_batch, samples_per_task, seed, device) -> FiniteBatches:
        if samples_per_task != self.data.samples_per_task:
            raise ValueError(f"samples_per_task {samples_per_task} is not the set's "
                             f"{self.data.samples_per_task}")
        return FiniteBatches(self.data, tasks_per_batch, seed, device)
