"""Training standard MLPs on a hyperteacher's training tasks (spec §5).

Defaults follow the paper: AdamW, lr 3e-4, weight decay 3e-3, MSE, batches of
tasks × samples per task, input [e(z), x]. Training runs in float32 (the usual choice,
and 2–3× faster on a CPU); every metric evaluates a float64 copy.
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
from verify.names import SHAPES  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    tasks_per_batch: int = 32
    samples_per_task: int = 16
    lr: float = 3e-4
    weight_decay: float = 3e-3
    seed: int = 0
    device: str = "cpu"


@dataclass
class TrainResult:
    net: nn.Sequential  # float64 copy on the CPU, for measurement
    widths: list[int]
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, running MSE)
    seconds: float = 0.0
    config: dict = field(default_factory=dict)


def mlp(in_dim: int, widths: list[int], out_dim: int) -> nn.Sequential:
    """Linear/ReLU stack with torch's default initialisation."""
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


def train_mlp(teacher: Hyperteacher, encode, train_supports: np.ndarray, widths: list[int],
              cfg: TrainConfig, progress: bool | None = None, threads: int | None = None) -> TrainResult:
    """Fit an MLP by AdamW on MSE; each step draws fresh tasks from the training supports
    and fresh x, so the only thing held out is which module combinations are seen."""
    in_dim = encode(torch.zeros(1, teacher.M, dtype=torch.float64)).shape[1] + teacher.I
    sizes = [in_dim, *widths, teacher.O]
    per_sample = sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    macs = cfg.tasks_per_batch * cfg.samples_per_task * per_sample
    with threads_for(3 * macs, cfg.device, threads):  # forward + backward ≈ 3 forwards
        return _train(teacher, encode, train_supports, in_dim, widths, cfg, progress)


def _train(teacher, encode, train_supports, in_dim, widths, cfg, progress) -> TrainResult:
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    device = torch.device(cfg.device)
    net = mlp(in_dim, widths, teacher.O).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    T, P = cfg.tasks_per_batch, cfg.samples_per_task
    losses, running = [], None
    bar = progress_bar(cfg.steps, f"train {'×'.join(map(str, widths))}", progress, unit="step")
    start = time.perf_counter()
    for step in range(1, cfg.steps + 1):
        supports = train_supports[rng.integers(0, len(train_supports), T)]
        z = dense_latents(supports, support_weights(supports, teacher.weights, rng), teacher.M)
        z = torch.as_tensor(z).repeat_interleave(P, dim=0)
        x = torch.as_tensor(sample_inputs(T * P, teacher.I, rng))
        with torch.no_grad():
            inputs = torch.cat([encode(z), x], dim=1)
            target = teacher.forward(z, x)
        loss = nn.functional.mse_loss(net(inputs.float().to(device)), target.float().to(device))
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
    return TrainResult(net=net.to("cpu").double(), widths=list(widths), losses=losses,
                       seconds=time.perf_counter() - start, config=asdict(cfg))
