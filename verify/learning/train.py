"""Training students on a task family's training tasks (spec §5; verify.learning.families).

Defaults follow the paper's official code (configs/teacher.py, run.py): AdamW at a
constant lr 3e-4, weight decay 3e-3 on matrices only (biases and LayerNorm parameters are
masked out, `decay="matrices"`), the family's loss (MSE; masked cross-entropy for the
preference grid), batches of tasks × rows per task, Flax's default init (LeCun-normal
kernels, zero biases). `decay="all"` and `init="torch_default"` are
this project's earlier settings, kept under their own names. Training runs in float32 (as
the paper's, and 2–3× faster on a CPU); every metric evaluates a float64 copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from constructions.tasks.hyperteacher import Hyperteacher
from verify.cli import atomic_path
from verify.cli import progress as progress_bar
from verify.learning.families import Batch, HyperteacherFamily, TaskFamily
from verify.learning.metrics import apply_tasks, encoding_dim
from verify.learning.students import decay_parameter_groups, mlp_student
from verify.names import DECAYS, INITS, SHAPES  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    tasks_per_batch: int = 32
    samples_per_task: int = 16
    lr: float = 3e-4
    weight_decay: float = 3e-3
    seed: int = 0
    device: str = "cpu"
    init: str = "lecun_normal"  # the paper's (Flax default); "torch_default" is torch's own
    decay: str = "matrices"  # the paper's mask; "all" decays biases and norms too


@dataclass
class TrainResult:
    net: nn.Module  # float64 copy on the CPU, for measurement
    widths: list[int]
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, running loss)
    seconds: float = 0.0
    config: dict = field(default_factory=dict)


def mlp(in_dim: int, widths: list[int], out_dim: int, init: str = "lecun_normal") -> nn.Sequential:
    """Linear/ReLU stack: the paper's init (LeCun-normal, zero biases), or torch's default."""
    if init == "lecun_normal":
        return mlp_student(in_dim, widths, out_dim)
    if init != "torch_default":
        raise ValueError(f"init must be one of {', '.join(INITS)}; got {init!r}")
    layers: list[nn.Module] = []
    for w in widths:
        layers += [nn.Linear(in_dim, w), nn.ReLU()]
        in_dim = w
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def shape_widths(shape: str, construction_widths: list[int], custom: list[int] | None = None) -> list[int]:
    """`matched`: the construction's widths; `balanced` (`balanced4`): two (four) equal
    layers with the same number of hidden units; `custom`: the widths given."""
    if shape == "matched":
        return list(construction_widths)
    if shape in ("balanced", "balanced4"):
        total, n = sum(construction_widths), 2 if shape == "balanced" else 4
        return [total // n + (i < total % n) for i in range(n)]
    if shape == "custom":
        if not custom:
            raise ValueError("shape 'custom' needs widths, e.g. --widths 1024 1024 1024 1024")
        return list(custom)
    raise ValueError(f"shape must be one of {', '.join(SHAPES)}; got {shape!r}")


# Below this many multiply-adds per step, torch's intra-op threads cost more than they
# save, and on a busy machine their spin-waiting made a tiny run 13× slower (2.2 s on one
# thread against 30 s on two, measured here).
SINGLE_THREAD_MACS = 50_000_000


@contextlib.contextmanager
def threads_for(macs_per_step: int, device: str, threads: int | None = None):
    """`threads` torch threads if given (the user's --threads), else 1 for a small step on
    the CPU, else the current setting; restored afterwards."""
    previous = torch.get_num_threads()
    small = device == "cpu" and macs_per_step < SINGLE_THREAD_MACS
    if threads is not None:
        torch.set_num_threads(threads)
    elif small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def step_macs(net: nn.Module, tasks_per_batch: int, samples_per_task: int) -> int:
    """Multiply-adds of one training step, forward and backward (≈ 3 forwards): every
    matrix parameter is used once per row the student runs it on."""
    per_task = net.macs_per_task(samples_per_task) if hasattr(net, "macs_per_task") else \
        samples_per_task * sum(p.numel() for p in net.parameters() if p.ndim > 1)
    return 3 * tasks_per_batch * per_task


def train_mlp(teacher: Hyperteacher, encode, train_supports: np.ndarray, widths: list[int],
              cfg: TrainConfig, progress: bool | None = None, threads: int | None = None) -> TrainResult:
    """train_student on a Linear/ReLU stack of the given widths, initialised as cfg.init,
    on the hyperteacher's tasks."""
    torch.manual_seed(cfg.seed)
    net = mlp(encoding_dim(encode, teacher.M) + teacher.I, widths, teacher.O, cfg.init)
    family = HyperteacherFamily(teacher, encode, getattr(encode, "name", "identity"))
    return train_student(family, train_supports, net, cfg, progress, threads,
                         name="×".join(map(str, widths)), widths=widths)


def train_student(family: TaskFamily, train_supports: np.ndarray, net: nn.Module,
                  cfg: TrainConfig, progress: bool | None = None, threads: int | None = None,
                  name: str = "student", widths: list[int] | None = None,
                  checkpoint: Path | None = None, checkpoint_every: int = 1000) -> TrainResult:
    """Fit any student (an MLP, or one with forward_tasks: verify.learning.students) by AdamW
    on the family's loss; each step draws fresh tasks from the training supports (and fresh
    x, or fresh episodes), so the only thing held out is which module combinations are seen.
    `net` is trained in place, in float32.

    With `checkpoint` (a file), the model, the optimizer, every random stream and the loss
    curve are saved there every `checkpoint_every` steps (atomically), and a run that
    finds one resumes from it: the result is the one an uninterrupted run gives."""
    if cfg.decay not in DECAYS:
        raise ValueError(f"decay must be one of {', '.join(DECAYS)}; got {cfg.decay!r}")
    P = family.rows_per_task(cfg.samples_per_task)
    with threads_for(step_macs(net, cfg.tasks_per_batch, P), cfg.device, threads):
        return _train(family, train_supports, net, cfg, progress, name, widths,
                      None if checkpoint is None else Path(checkpoint), checkpoint_every)


class CheckpointMismatch(ValueError):
    """A checkpoint file that another run (other settings, student or supports) wrote."""


def _fingerprint(family: TaskFamily, cfg: TrainConfig, net: nn.Module, train_supports: np.ndarray) -> dict:
    """What a checkpoint must match to be resumed: the family and its settings, the training
    settings, the student's parameter shapes and the training supports."""
    return dict(family=family.name, task=family.config(),
                config={k: v for k, v in asdict(cfg).items() if k != "device"},
                shapes={k: list(v.shape) for k, v in net.state_dict().items()},
                supports=hashlib.sha256(np.ascontiguousarray(train_supports, dtype=np.int64)).hexdigest())


def _save_checkpoint(path: Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def train_step(net: nn.Module, opt: torch.optim.Optimizer, batch: Batch, loss_of) -> float:
    """One AdamW step on the family's loss of a batch; returns its loss."""
    loss = loss_of(apply_tasks(net, batch.e, batch.x), batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def _train(family, train_supports, net, cfg, progress, name, widths, checkpoint,
           checkpoint_every) -> TrainResult:
    device = torch.device(cfg.device)
    batches = family.batches(train_supports, cfg.tasks_per_batch, cfg.samples_per_task, cfg.seed, device)
    encode = family.encode
    net = net.float().to(device)
    groups = (decay_parameter_groups(net, cfg.weight_decay) if cfg.decay == "matrices"
              else [{"params": list(net.parameters()), "weight_decay": cfg.weight_decay}])
    opt = torch.optim.AdamW(groups, lr=cfg.lr)
    losses, running, first, spent = [], None, 1, 0.0
    generator = getattr(encode, "state", {}).get("generator")  # a stochastic encoder's own stream
    fingerprint = _fingerprint(family, cfg, net, train_supports) if checkpoint is not None else None
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, map_location=device, weights_only=False)
        if saved["fingerprint"] != fingerprint:
            raise CheckpointMismatch(f"{checkpoint} belongs to another run (other settings, student or "
                                     "supports); remove it to start afresh")
        net.load_state_dict(saved["net"])
        opt.load_state_dict(saved["optimizer"])
        batches.generator.set_state(saved["data_generator"].cpu())
        if generator is not None:
            generator.set_state(saved["encoder_generator"])
        losses, running, first, spent = saved["losses"], saved["running"], saved["step"] + 1, saved["seconds"]
    bar = progress_bar(cfg.steps, f"train {name}", progress, unit="step")
    bar.update(first - 1)
    start = time.perf_counter() - spent
    for step in range(first, cfg.steps + 1):
        value = train_step(net, opt, batches(), family.loss)
        running = value if running is None else 0.98 * running + 0.02 * value
        if step % max(1, cfg.steps // 100) == 0 or step == cfg.steps:
            losses.append((step, running))
            bar.set_postfix_str(f"loss {running:.2e}", refresh=False)
            bar.update(step - bar.n)
        if checkpoint is not None and (step % checkpoint_every == 0 or step == cfg.steps):
            _save_checkpoint(checkpoint, dict(
                fingerprint=fingerprint, step=step, net=net.state_dict(), optimizer=opt.state_dict(),
                data_generator=batches.generator.get_state(), losses=losses, running=running,
                encoder_generator=None if generator is None else generator.get_state(),
                seconds=time.perf_counter() - start))
    bar.close()
    return TrainResult(net=net.to("cpu").double(), widths=list(widths or []), losses=losses,
                       seconds=time.perf_counter() - start, config=asdict(cfg))
