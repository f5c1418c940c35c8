"""Many runs of one shape trained as one batched model: a pack (for accelerators).

A paper-scale MLP step is too small to keep a GPU busy. Runs that share a student's shape
and every training setting but the seed (a study's seeds, encodings of one width, splits,
data) can be trained as one model whose parameters are the runs' parameters stacked along
a new first axis: torch.func.vmap runs every member's forward on its own batch at once, the
loss is the sum of the members' losses (so each member's gradient is its own), and one
AdamW steps the stacked tensors. AdamW acts element by element, so it is N optimizers at
the price of one launch. Each member keeps its own data stream, optimizer state,
checkpoint file (in the format a run alone writes and reads: a pack's member can be resumed
alone, and the other way round) and result. A packed run ends with the metrics of the same
run trained alone, up to float rounding (batched matrix products round differently):
tests/test_pack.py shows it.

On a CPU, packing does not pay (measured for issue 21: 0.78–2.2× of separate runs), so
studies pack only where asked (`--pack N`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from verify.learning import train
from verify.learning.families import Batch, TaskFamily
from verify.learning.metrics import apply_tasks
from verify.learning.train import RunProgress, Speed, TrainConfig, TrainResult


@dataclass
class Member:
    """One run of a pack: what train.train_student takes for it."""

    family: TaskFamily
    train_supports: np.ndarray
    net: nn.Module
    cfg: TrainConfig
    name: str = "student"
    widths: list[int] | None = None
    checkpoint: Path | None = None
    tracker: object = None  # verify.learning.tracking: the member's own curve


class PackMismatch(ValueError):
    """Runs that cannot share one batched model."""


def shape_of(member: Member) -> dict:
    """What every member of a pack must share: the kind of family and rows per task, the
    student's class and parameter shapes, and every training setting but the seed."""
    return dict(family=type(member.family).__name__,
                rows=member.family.rows_per_task(member.cfg.samples_per_task),
                student=type(member.net).__name__,
                parameters={k: tuple(v.shape) for k, v in member.net.named_parameters()},
                config={k: v for k, v in asdict(member.cfg).items() if k != "seed"})


def check_packable(members: list[Member]) -> None:
    """PackMismatch unless the members share shape_of and each has its own checkpoint file."""
    if not members:
        raise PackMismatch("a pack needs at least one run")
    first = shape_of(members[0])
    for m in members[1:]:
        other = shape_of(m)
        if other != first:
            differ = ", ".join(k for k in first if first[k] != other[k])
            raise PackMismatch(f"runs {members[0].name!r} and {m.name!r} differ in {differ}; only runs of "
                               "one shape and training settings (seeds, data and splits may differ) share a "
                               "pack")
    files = [m.checkpoint for m in members if m.checkpoint is not None]
    if len(set(files)) != len(files):
        raise PackMismatch("two runs of a pack share a checkpoint file")


class _TaskForward(nn.Module):
    """A student as a function of (e, x): the module functional_call runs for each member."""

    def __init__(self, student: nn.Module):
        super().__init__()
        self.student = student

    def forward(self, e, x):
        return apply_tasks(self.student, e, x)


def train_pack(members: list[Member], progress: bool | None = None, threads: int | None = None,
               checkpoint_seconds: float = train.CHECKPOINT_SECONDS, log_every: int | None = None,
               speed: Speed | None = None) -> list[TrainResult]:
    """train.train_student for every member at once, on one batched model; the members'
    results, in order. Members with checkpoints resume from them when all are at one step;
    runs that were not packed together the last time (some at another step) are refused:
    train them alone."""
    check_packable(members)
    cfg = members[0].cfg
    for m in members:
        train.check_config(m.cfg)
    speed = speed or Speed.default(cfg.device)
    P = members[0].family.rows_per_task(cfg.samples_per_task)
    macs = len(members) * train.step_macs(members[0].net, cfg.tasks_per_batch, P)
    with train.threads_for(macs, cfg.device, threads), train.matmul_precision(speed):
        return _train_pack(members, progress, checkpoint_seconds, log_every or max(1, cfg.steps // 100),
                           speed)


class _Stack:
    """The members' parameters stacked (N, …), their AdamW, and the moves between the
    stacked tensors and each member's own module and optimizer state."""

    def __init__(self, nets: list[nn.Module], cfg: TrainConfig, fused: bool):
        self.nets, self.names = nets, [name for name, _ in nets[0].named_parameters()]
        params, _ = stack_module_state(nets)
        self.params = {k: v.detach().requires_grad_() for k, v in params.items()}
        # The members' own grouping (train.optimizer_of: matrices decayed, vectors not), in the
        # same order, so that a member's slice of the state is the state it would have alone.
        ndim = {k: p.ndim for k, p in nets[0].named_parameters()}
        stacked = [self.params[k] for k in self.names]
        groups = ([{"params": [self.params[k] for k in self.names if ndim[k] != 1],
                    "weight_decay": cfg.weight_decay},
                   {"params": [self.params[k] for k in self.names if ndim[k] == 1], "weight_decay": 0.0}]
                  if cfg.decay == "matrices" else [{"params": stacked, "weight_decay": cfg.weight_decay}])
        self.opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, fused=fused or None)

    def load_member_states(self, opts: list[torch.optim.Optimizer]) -> None:
        """Stack the members' optimizer states (after a resume) into the pack's."""
        states = [o.state_dict() for o in opts]
        if not states[0]["state"]:
            return
        packed = self.opt.state_dict()
        # AdamW's step counter is one number for all members (they are at one step).
        packed["state"] = {
            i: {key: value if key == "step" else torch.stack([s["state"][i][key] for s in states])
                for key, value in entry.items()}
            for i, entry in states[0]["state"].items()}
        self.opt.load_state_dict(packed)

    def member_state(self, i: int) -> tuple[dict, dict]:
        """Member i's state_dict and optimizer state_dict, as its own run would save them."""
        with torch.no_grad():
            for (name, p) in self.nets[i].named_parameters():
                p.copy_(self.params[name][i])
        packed = self.opt.state_dict()
        state = {j: {key: value.clone() if key == "step" else value[i].clone()
                     for key, value in entry.items()}
                 for j, entry in packed["state"].items()}
        return self.nets[i].state_dict(), dict(state=state, param_groups=packed["param_groups"])


def packed_forward(template: nn.Module, compile: bool = False):
    """forward(params, e, x): every member's predictions (N, T, P, O) from the stacked
    parameters and the stacked batches, by vmap over the template student's own forward."""
    wrapped = _TaskForward(template)
    forward = vmap(lambda params, e, x: functional_call(
        wrapped, {f"student.{k}": v for k, v in params.items()}, (e, x)))
    return torch.compile(forward) if compile else forward


def _resume_all(members, nets, batches, generators, fingerprints, device) -> list[RunProgress]:
    """Each member's progress from its checkpoint, or a fresh start for all."""
    found = [m.checkpoint is not None and m.checkpoint.exists() for m in members]
    if not any(found):
        return [RunProgress() for _ in members], None
    if not all(found):
        raise PackMismatch("some runs of this pack have checkpoints and some do not; train them alone")
    opts = [train.optimizer_of(net, m.cfg) for net, m in zip(nets, members, strict=True)]
    done = [train.resume(m.checkpoint, fp, net, opt, b, g, device) for m, fp, net, opt, b, g
            in zip(members, fingerprints, nets, opts, batches, generators, strict=True)]
    if len({d.step for d in done}) > 1:
        raise PackMismatch(f"the runs' checkpoints are at steps {sorted({d.step for d in done})}; a pack "
                           "resumes only runs at one step: train them alone")
    return done, opts


def _train_pack(members, progress, checkpoint_seconds, log_every, speed) -> list[TrainResult]:
    cfg, device = members[0].cfg, torch.device(members[0].cfg.device)
    nets = [m.net.float().to(device) for m in members]
    batches = [m.family.batches(m.train_supports, cfg.tasks_per_batch, cfg.samples_per_task, m.cfg.seed,
                                device) for m in members]
    generators = [train.encoder_generator(m.family.encode, device) for m in members]
    fingerprints = [train.fingerprint_of(m.family, m.cfg, net, m.train_supports)
                    for m, net in zip(members, nets, strict=True)]
    saving = [m for m in members if m.checkpoint is not None]
    if saving:
        train.check_checkpoint_space(saving[0].checkpoint.parent, [m.net for m in saving])
    done, opts = _resume_all(members, nets, batches, generators, fingerprints, device)
    stack = _Stack(nets, cfg, speed.fused)
    if opts is not None:
        stack.load_member_states(opts)
    forward = packed_forward(nets[0], speed.compile)
    autocast = torch.bfloat16 if speed.precision == "bf16" else None
    loss_of = members[0].family.loss

    def save(step: int, running: torch.Tensor, seconds: float) -> None:
        _save_members(members, stack, fingerprints, batches, generators, done, running, step, seconds)

    def step_once() -> torch.Tensor:
        return _pack_step(forward, stack, [b() for b in batches], loss_of, autocast)

    seconds = train.run_loop(cfg, stack.opt, step_once, done, label=f"train pack of {len(members)}",
                             progress=progress, log_every=log_every, save=save if saving else None,
                             checkpoint_seconds=checkpoint_seconds, trackers=[m.tracker for m in members])
    results = []
    for i, m in enumerate(members):
        stack.member_state(i)  # the trained parameters back into the member's own module
        results.append(TrainResult(net=nets[i].to("cpu").double(), widths=list(m.widths or []),
                                   losses=done[i].losses, seconds=seconds,
                                   config={**asdict(m.cfg), "speed": asdict(speed),
                                           "packed_with": len(members)}))
    return results


def _pack_step(forward, stack: _Stack, batches: list[Batch], loss_of, autocast) -> torch.Tensor:
    """One AdamW step of every member; returns the members' losses (N,), detached."""
    e = torch.stack([b.e for b in batches])
    x = torch.stack([b.x for b in batches])
    with torch.autocast(x.device.type, dtype=autocast, enabled=autocast is not None):
        pred = forward(stack.params, e, x)
    losses = torch.stack([loss_of(p.float(), b) for p, b in zip(pred, batches, strict=True)])
    stack.opt.zero_grad(set_to_none=True)
    losses.sum().backward()  # the sum: each member's gradient is its own loss's
    stack.opt.step()
    return losses.detach()


def _save_members(members, stack, fingerprints, batches, generators, done, running, step, seconds) -> None:
    """Each member's checkpoint, in the format a run alone writes."""
    for i, m in enumerate(members):
        if m.checkpoint is None:
            continue
        done[i].step, done[i].seconds, done[i].running = step, seconds, running[i]
        net_state, opt_state = stack.member_state(i)
        train.save_checkpoint(m.checkpoint, fingerprints[i], net_state, opt_state, batches[i], generators[i],
                              done[i])
