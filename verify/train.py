"""Training students on a hyperteacher's training tasks (spec §5).

Defaults follow the paper's official code (configs/teacher.py, run.py): AdamW at a
constant lr 3e-4, weight decay 3e-3 on matrices only (biases and LayerNorm parameters are
masked out, `decay="matrices"`), MSE, batches of tasks × samples per task, Flax's default
init (LeCun-normal kernels, zero biases). `decay="all"` and `init="torch_default"` are
this project's earlier settings, kept under their own names. Training runs in float32 (as
the paper's, and 2–3× faster on a CPU); every metric evaluates a float64 copy.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from constructions.hyperteacher import Hyperteacher, dense_latents, sample_inputs, support_weights
from verify.cli import progress as progress_bar
from verify.metrics import apply_tasks, encoding_dim
from verify.names import DECAYS, INITS, SHAPES  # noqa: F401  (re-exported)
from verify.students import decay_parameter_groups, mlp_student


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
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, running MSE)
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
    """`matched`: the construction's widths; `balanced`: two equal layers with the same
    number of hidden units; `custom`: the widths given."""
    if shape == "matched":
        return list(construction_widths)
    if shape == "balanced":
        total = sum(construction_widths)
        return [math.ceil(total / 2), total // 2]
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
    """train_student on a Linear/ReLU stack of the given widths, initialised as cfg.init."""
    torch.manual_seed(cfg.seed)
    net = mlp(encoding_dim(encode, teacher.M) + teacher.I, widths, teacher.O, cfg.init)
    return train_student(teacher, encode, train_supports, net, cfg, progress, threads,
                         name="×".join(map(str, widths)), widths=widths)


def train_student(teacher: Hyperteacher, encode, train_supports: np.ndarray, net: nn.Module,
                  cfg: TrainConfig, progress: bool | None = None, threads: int | None = None,
                  name: str = "student", widths: list[int] | None = None) -> TrainResult:
    """Fit any student (an MLP, or one with forward_tasks: verify.students) by AdamW on MSE;
    each step draws fresh tasks from the training supports and fresh x, so the only thing
    held out is which module combinations are seen. `net` is trained in place, in float32."""
    if cfg.decay not in DECAYS:
        raise ValueError(f"decay must be one of {', '.join(DECAYS)}; got {cfg.decay!r}")
    with threads_for(step_macs(net, cfg.tasks_per_batch, cfg.samples_per_task), cfg.device, threads):
        return _train(teacher, encode, train_supports, net, cfg, progress, name, widths)


def _train(teacher, encode, train_supports, net, cfg, progress, name, widths) -> TrainResult:
    rng = np.random.default_rng(cfg.seed)
    device = torch.device(cfg.device)
    net = net.float().to(device)
    groups = (decay_parameter_groups(net, cfg.weight_decay) if cfg.decay == "matrices"
              else [{"params": list(net.parameters()), "weight_decay": cfg.weight_decay}])
    opt = torch.optim.AdamW(groups, lr=cfg.lr)
    T, P = cfg.tasks_per_batch, cfg.samples_per_task
    losses, running = [], None
    bar = progress_bar(cfg.steps, f"train {name}", progress, unit="step")
    start = time.perf_counter()
    for step in range(1, cfg.steps + 1):
        supports = train_supports[rng.integers(0, len(train_supports), T)]
        weights = support_weights(supports, teacher.weights, rng)
        z = torch.as_tensor(dense_latents(supports, weights, teacher.M))
        x = torch.as_tensor(sample_inputs(T * P, teacher.I, rng))
        with torch.no_grad():
            e = encode(z)
            target = teacher.forward(z.repeat_interleave(P, dim=0), x).view(T, P, -1)
        pred = apply_tasks(net, e.float().to(device), x.view(T, P, -1).float().to(device))
        loss = nn.functional.mse_loss(pred, target.float().to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        running = value if running is None else 0.98 * running + 0.02 * value
        if step % max(1, cfg.steps // 100) == 0 or step == cfg.steps:
            losses.append((step, running))
            bar.set_postfix_str(f"loss {running:.2e}", refresh=False)
            bar.update(step - bar.n)
    bar.close()
    return TrainResult(net=net.to("cpu").double(), widths=list(widths or []), losses=losses,
                       seconds=time.perf_counter() - start, config=asdict(cfg))
