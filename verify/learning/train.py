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
import functools
import hashlib
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from constructions.tasks.hyperteacher import Hyperteacher
from verify.cli import atomic_path, heartbeat, note
from verify.cli import progress as progress_bar
from verify.learning.families import Batch, HyperteacherFamily, TaskFamily
from verify.learning.metrics import apply_tasks, encoding_dim
from verify.learning.students import decay_parameter_groups, mlp_student
from verify.theorem.presets import CHECKPOINT_SECONDS, DECAYS, INITS, PRECISIONS, SCHEDULES, SHAPES  # noqa: F401  (re-exported)


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
    schedule: str = "constant"  # the paper's configs; "cosine" is the official run.py's other schedule
    warmup_steps: int = 1000  # cosine only, as in run.py (its constant schedule has no warmup)


@dataclass(frozen=True)
class Speed:
    """How a step runs, not what it computes (up to rounding): the float32 matmuls' precision
    (`fp32`; `tf32`, CUDA's TensorFloat-32, which is also JAX's default for float32 matmuls on
    such GPUs and so the paper's; `bf16`, autocast of the forward pass to bfloat16),
    torch.compile of the student, and AdamW's fused CUDA kernel. The defaults keep every
    number on the CPU as before; on CUDA they follow what the paper's JAX runs did (TF32),
    with one fused optimizer kernel instead of one launch per tensor."""

    precision: str = "fp32"
    compile: bool = False
    fused: bool = False

    @classmethod
    def default(cls, device: str) -> Speed:
        cuda = torch.device(device).type == "cuda"
        return cls(precision="tf32" if cuda else "fp32", fused=cuda)


@contextlib.contextmanager
def matmul_precision(speed: Speed):
    """TF32 matmuls for the block under `tf32` ('high' lets CUDA use TensorFloat-32), and
    the previous setting restored afterwards."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if speed.precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


@dataclass
class TrainResult:
    net: nn.Module  # float64 copy on the CPU, for measurement
    widths: list[int]
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, running loss)
    seconds: float = 0.0
    config: dict = field(default_factory=dict)


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """The learning rate of 1-based `step`. `constant`: cfg.lr throughout. `cosine`: optax's
    warmup_cosine_decay_schedule as the official run.py calls it: linear from 0 over
    warmup_steps, then a cosine to lr/10 whose length run.py sets to steps − warmup_steps
    *including* the warmup (optax counts it in), so the decay ends warmup_steps before the
    last step and lr/10 holds from there. optax evaluates the schedule at the update count,
    which is step − 1 here: the first update of a cosine run has lr 0."""
    if cfg.schedule == "constant":
        return cfg.lr
    t, warmup = step - 1, cfg.warmup_steps
    if t < warmup:
        return cfg.lr * t / warmup
    decay = cfg.steps - 2 * warmup
    progress = min(t - warmup, decay) / decay
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress)))


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
                  checkpoint: Path | None = None, checkpoint_seconds: float = CHECKPOINT_SECONDS,
                  log_every: int | None = None, speed: Speed | None = None,
                  stop_after: int | None = None, tracker=None) -> TrainResult:
    """Fit any student (an MLP, or one with forward_tasks: verify.learning.students) by AdamW
    on the family's loss; each step draws fresh tasks from the training supports (and fresh
    x, or fresh episodes), so the only thing held out is which module combinations are seen.
    `net` is trained in place, in float32.

    The loss stays on the device: its running mean is read, a host sync, only every
    `log_every` steps (default steps/100) to extend the loss curve.

    With `checkpoint` (a file), the model, the optimizer, every random stream and the loss
    curve are saved there (fsynced, then renamed into place) once `checkpoint_seconds` of
    wall-clock time have passed since the last save, and at the end; a run that finds one
    resumes from it, and the result is the one an uninterrupted run gives. A checkpoint
    written on another kind of device is refused: the data generator's state is not
    portable between CPU and CUDA.

    `speed` (default Speed.default(cfg.device)) sets the matmul precision, autocast,
    torch.compile and fused AdamW; it is recorded in the result's config.

    `stop_after` ends the run after that many of its cfg.steps steps (the schedule is still
    the full run's): the first steps of a run exactly, for its behaviour record
    (verify.studies.behaviour). `tracker` (verify.learning.tracking) gets the loss curve as it
    is logged."""
    check_config(cfg)
    speed = speed or Speed.default(cfg.device)
    P = family.rows_per_task(cfg.samples_per_task)
    log_every = log_every or max(1, cfg.steps // 100)
    with threads_for(step_macs(net, cfg.tasks_per_batch, P), cfg.device, threads), matmul_precision(speed):
        return _train(family, train_supports, net, cfg, progress, name, widths,
                      None if checkpoint is None else Path(checkpoint), checkpoint_seconds, log_every, speed,
                      stop_after, tracker)


def check_config(cfg: TrainConfig) -> None:
    """ValueError for settings no run can train with."""
    if cfg.decay not in DECAYS:
        raise ValueError(f"decay must be one of {', '.join(DECAYS)}; got {cfg.decay!r}")
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {cfg.schedule!r}")
    if cfg.schedule == "cosine" and cfg.steps <= 2 * cfg.warmup_steps:
        raise ValueError(f"a cosine schedule needs steps > 2 × warmup_steps (its decay lasts steps − 2 × "
                         f"warmup_steps, as run.py sets it); got {cfg.steps} and {cfg.warmup_steps}")


class CheckpointMismatch(ValueError):
    """A checkpoint file that another run (other settings, student, supports or kind of
    device) wrote."""


class CheckpointSpace(OSError):
    """Too little free disk for a run's checkpoints."""


def checkpoint_bytes(net: nn.Module) -> int:
    """A checkpoint's size, about: the float32 parameters and AdamW's two moments."""
    return 3 * 4 * sum(p.numel() for p in net.parameters())


def check_checkpoint_space(folder: Path, nets: list[nn.Module]) -> None:
    """CheckpointSpace unless `folder`'s disk holds every student's checkpoint twice (the
    new file is written beside the old one before it replaces it), with 10% to spare."""
    need = int(1.1 * 2 * sum(checkpoint_bytes(net) for net in nets))
    free = shutil.disk_usage(folder).free
    if free < need:
        raise CheckpointSpace(f"{folder} has {free / 2**30:.2f} GiB free; its checkpoints need "
                              f"{need / 2**30:.2f} GiB (model and AdamW state, twice while one replaces "
                              "the other)")


def device_kind(device: str) -> str:
    """cpu or cuda: what a checkpoint's random-generator states are tied to."""
    return torch.device(device).type


def fingerprint_of(family: TaskFamily, cfg: TrainConfig, net: nn.Module, train_supports: np.ndarray) -> dict:
    """What a checkpoint must match to be resumed: the family and its settings, the training
    settings, the kind of device, the student's parameter shapes and the training supports."""
    return dict(family=family.name, task=family.config(),
                config={k: v for k, v in asdict(cfg).items() if k != "device"},
                device=device_kind(cfg.device),
                shapes={k: list(v.shape) for k, v in net.state_dict().items()},
                supports=hashlib.sha256(np.ascontiguousarray(train_supports, dtype=np.int64)).hexdigest())


def train_step(forward, opt: torch.optim.Optimizer, batch: Batch, loss_of,
               autocast: torch.dtype | None = None) -> torch.Tensor:
    """One AdamW step on the family's loss of a batch, for a student's `forward(e, x)` (see
    forward_of); returns the loss, detached, where it was computed (reading it would sync
    with the device). With `autocast` the forward pass runs in that dtype where torch allows
    it; the loss is taken in float32."""
    with torch.autocast(batch.x.device.type, dtype=autocast, enabled=autocast is not None):
        pred = forward(batch.e, batch.x)
    loss = loss_of(pred.float(), batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def forward_of(net: nn.Module, compile: bool = False):
    """The student's predictions (T, P, O) from (e, x), compiled with torch.compile if asked
    (the function, not the module: the module and its state_dict stay as they are)."""
    forward = functools.partial(apply_tasks, net)
    return torch.compile(forward) if compile else forward


def optimizer_of(net: nn.Module, cfg: TrainConfig, fused: bool = False) -> torch.optim.Optimizer:
    groups = (decay_parameter_groups(net, cfg.weight_decay) if cfg.decay == "matrices"
              else [{"params": list(net.parameters()), "weight_decay": cfg.weight_decay}])
    # fused=None leaves torch its own choice (foreach, or one tensor at a time): today's numbers.
    return torch.optim.AdamW(groups, lr=cfg.lr, fused=fused or None)


@dataclass
class RunProgress:
    """Where a run is: the last step done, its loss curve and running loss (a float64
    tensor on the device; None before the first step) and the seconds spent so far."""
    step: int = 0
    losses: list = field(default_factory=list)
    running: torch.Tensor | None = None
    seconds: float = 0.0


def resume(checkpoint: Path, fingerprint: dict, net, opt, batches, generator, device) -> RunProgress:
    """Load a run's checkpoint into its student, optimizer and random streams; CheckpointMismatch
    if another run (or another kind of device) wrote it."""
    saved = torch.load(checkpoint, map_location=device, weights_only=False)
    if saved["fingerprint"].get("device", "cpu") != fingerprint["device"]:
        raise CheckpointMismatch(f"{checkpoint} was written on {saved['fingerprint'].get('device', 'cpu')}; "
                                 f"resume it there (its random streams do not carry over to "
                                 f"{fingerprint['device']}) or remove it to start afresh")
    if saved["fingerprint"] != fingerprint:
        raise CheckpointMismatch(f"{checkpoint} belongs to another run (other settings, student or "
                                 "supports); remove it to start afresh")
    net.load_state_dict(saved["net"])
    opt.load_state_dict(saved["optimizer"])
    batches.generator.set_state(saved["data_generator"].cpu())
    if generator is not None:
        generator.set_state(saved["encoder_generator"])
    running = None if saved["running"] is None else torch.tensor(saved["running"], dtype=torch.float64,
                                                                 device=device)
    return RunProgress(saved["step"], saved["losses"], running, saved["seconds"])


def save_checkpoint(checkpoint: Path, fingerprint: dict, net_state: dict, optimizer_state: dict, batches,
                    generator, done: RunProgress) -> None:
    """A run's state as `resume` reads it, written atomically (fsynced, then renamed)."""
    state = dict(fingerprint=fingerprint, step=done.step, net=net_state, optimizer=optimizer_state,
                 data_generator=batches.generator.get_state(), losses=done.losses,
                 running=None if done.running is None else done.running.item(),
                 encoder_generator=None if generator is None else generator.get_state(),
                 seconds=done.seconds)
    with atomic_path(checkpoint) as tmp:
        torch.save(state, tmp)


def encoder_generator(encode, device: torch.device) -> torch.Generator | None:
    """The random stream a stochastic encoder (fewshot) draws from on `device`, which a
    checkpoint must carry; None for the fixed maps."""
    on = getattr(encode, "generator_on", None)
    return on(device) if on is not None else None


_clock = time.monotonic  # the checkpoints' wall clock (tests replace it)


def run_loop(cfg: TrainConfig, optimizer: torch.optim.Optimizer, step_once, done: list[RunProgress], *,
             label: str, progress: bool | None, log_every: int, save=None,
             checkpoint_seconds: float = CHECKPOINT_SECONDS, stop_after: int | None = None,
             trackers: list | None = None) -> float:
    """The one training loop, for a run alone (N = 1) and for a pack of N (verify.learning.pack).

    From the members' progress `done` (all at one step), each step sets the schedule's
    learning rate, takes `step_once()` (the members' losses (N,), detached, where they were
    computed) and updates the 0.98 running mean in float64 on the device. Every `log_every`
    steps and at the last it reads the running losses to the host, the loop's one sync, into
    each member's loss curve; every `checkpoint_seconds` of wall-clock time and at the last
    step it calls `save(step, running, seconds)`. `stop_after` ends it early (a behaviour
    record's first steps). `trackers` (one per member, or None) get each logged running loss
    as `train/loss` (verify.learning.tracking): what the sync read, no sync of their own.
    Off a terminal the bar is a heartbeat (cli.heartbeat): a line now and then with the loss the
    last log step read, again no sync of its own. A resumed run says where it resumed.
    Returns the seconds trained, earlier sessions' included."""
    first = done[0].step
    if first:
        note(f"{label}: resumed at step {first} of {cfg.steps}", progress)
    running = None if done[0].running is None else torch.stack([d.running for d in done])
    bar = progress_bar(cfg.steps, label, progress, unit="step")
    bar.update(first)
    beat, loss_note = heartbeat(cfg.steps, label, progress, start=first), ""
    start, saved_at = time.perf_counter() - max(d.seconds for d in done), _clock()
    for step in range(first + 1, min(cfg.steps, stop_after or cfg.steps) + 1):
        if cfg.schedule != "constant":
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(cfg, step)
        losses = step_once().double()
        running = losses if running is None else 0.98 * running + 0.02 * losses
        if step % log_every == 0 or step == cfg.steps:
            values = running.tolist()  # the one host sync of the loop, for every member at once
            for d, value in zip(done, values, strict=True):
                d.losses.append((step, value))
            for tracker, value in zip(trackers or [], values, strict=False):
                if tracker is not None:
                    tracker.log(step, {"train/loss": value})
            loss_note = (f"loss {values[0]:.2e}" if len(values) == 1
                         else f"loss {min(values):.2e}–{max(values):.2e}")
            bar.set_postfix_str(loss_note, refresh=False)
            bar.update(step - bar.n)
        beat.update(step, loss_note)
        if save is not None and (step == cfg.steps or _clock() - saved_at >= checkpoint_seconds):
            save(step, running, time.perf_counter() - start)
            saved_at = _clock()
    bar.close()
    beat.close()
    return time.perf_counter() - start


def _train(family, train_supports, net, cfg, progress, name, widths, checkpoint,
           checkpoint_seconds, log_every, speed, stop_after=None, tracker=None) -> TrainResult:
    device = torch.device(cfg.device)
    batches = family.batches(train_supports, cfg.tasks_per_batch, cfg.samples_per_task, cfg.seed, device)
    net = net.float().to(device)
    opt = optimizer_of(net, cfg, speed.fused)
    forward = forward_of(net, speed.compile)
    autocast = torch.bfloat16 if speed.precision == "bf16" else None
    generator = encoder_generator(family.encode, device)
    fingerprint = fingerprint_of(family, cfg, net, train_supports) if checkpoint is not None else None
    done = RunProgress()
    if checkpoint is not None:
        check_checkpoint_space(checkpoint.parent, [net])
        if checkpoint.exists():
            done = resume(checkpoint, fingerprint, net, opt, batches, generator, device)

    def step_once() -> torch.Tensor:
        return train_step(forward, opt, batches(), family.loss, autocast).reshape(1)

    def save(step: int, running: torch.Tensor, seconds: float) -> None:
        done.step, done.seconds, done.running = step, seconds, running[0]
        save_checkpoint(checkpoint, fingerprint, net.state_dict(), opt.state_dict(), batches, generator, done)

    seconds = run_loop(cfg, opt, step_once, [done], label=f"train {name}", progress=progress,
                       log_every=log_every, save=save if checkpoint is not None else None,
                       checkpoint_seconds=checkpoint_seconds, stop_after=stop_after, trackers=[tracker])
    return TrainResult(net=net.to("cpu").double(), widths=list(widths or []), losses=done.losses,
                       seconds=seconds, config={**asdict(cfg), "speed": asdict(speed)})
