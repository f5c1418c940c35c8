"""Live training curves in the trackers researchers use (issue 34): TensorBoard event files
and Weights & Biases runs, optional (the `trackers` extra).

A Tracker takes `log(step, metrics)` at the training loop's log steps (train.run_loop: where
the loop reads its running loss to the host anyway, so tracking adds no device sync), then
once the run's scores at its last step, and `close()`.

Names follow the official code's loaders (compscale: `test`, `ood`): the running training
loss is `train/loss`; a score is `<side>/<metric>`, the side named as the official loaders
are: `test` (fresh tasks on the training supports, our `train` side), `ood` (held-out
supports, our `held_out`), `ood_k<k>` (k active modules).

  --log tensorboard DIR   event files under DIR/<group>/<name> (torch.utils.tensorboard)
  --log wandb             a wandb run: project `compgen-bound`, group and name as given (a
                          study: the study and the run's key), the run's configuration as
                          its config; WANDB_MODE=offline writes it under ./wandb, nothing
                          leaves the machine
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

TRACKERS = ("tensorboard", "wandb")
PROJECT = "compgen-bound"
SIDE_NAMES = {"train": "test", "held_out": "ood"}  # ours → the official loaders'
PACKAGE = {"tensorboard": "tensorboard", "wandb": "wandb"}


def metric_name(side: str, metric: str) -> str:
    """`<side>/<metric>` with the official loader's name for the side."""
    return f"{SIDE_NAMES.get(side, side.replace('k', 'ood_k', 1) if side.startswith('k') else side)}/{metric}"


@dataclass(frozen=True)
class TrackerSpec:
    """Where a run's curves go: the tracker, its folder (tensorboard), and the run's group
    and name."""

    kind: str
    folder: str | None = None
    group: str = "verify.sgd"
    name: str = "run"

    def named(self, name: str) -> TrackerSpec:
        return TrackerSpec(self.kind, self.folder, self.group, name)


def add_flags(p, *, what: str, group: str, name: str) -> None:
    """--log, --log-group and --log-name on parser `p` (what: what is logged; group, name: their
    defaults, as the help says them)."""
    p.add_argument("--log", nargs="+", metavar="SPEC",
                   help=f"also log {what} live: `tensorboard DIR` (event files under DIR/GROUP/NAME) or "
                        "`wandb` (WANDB_MODE=offline keeps it local); the `trackers` extra "
                        "(verify.learning.tracking)")
    p.add_argument("--log-group", help=f"--log: the run's group (default {group}; a study: its name)")
    p.add_argument("--log-name", help=f"--log: the run's name (default {name}; a study: the run's key)")


def spec_of(args, group: str, name: str) -> TrackerSpec | None:
    """The flags add_flags added, as one spec (None without --log); ValueError with a one-line
    reason for --log-group or --log-name without --log, or a wrong --log."""
    if not args.log and (args.log_group or args.log_name):
        raise ValueError(f"{'--log-group' if args.log_group else '--log-name'} applies to --log")
    return parse_log(args.log, args.log_group or group, args.log_name or name)


def parse_log(values: list[str] | None, group: str | None = None,
              name: str | None = None) -> TrackerSpec | None:
    """--log's values (`tensorboard DIR` or `wandb`) as a spec; ValueError with a one-line
    reason for a wrong form or a tracker whose package is not installed."""
    if not values:
        return None
    kind, rest = values[0], values[1:]
    if kind not in TRACKERS:
        raise ValueError(f"--log {kind}: the trackers are {', '.join(TRACKERS)}")
    if kind == "tensorboard" and len(rest) != 1:
        raise ValueError("--log tensorboard takes one folder: --log tensorboard DIR")
    if kind == "wandb" and rest:
        raise ValueError("--log wandb takes no folder (WANDB_DIR and WANDB_MODE say where it writes)")
    import importlib.util

    if importlib.util.find_spec(PACKAGE[kind]) is None:
        raise ValueError(f"--log {kind} needs the {PACKAGE[kind]} package: pip install "
                         f"'compgen-bound[trackers]' (or pip install {PACKAGE[kind]})")
    return TrackerSpec(kind, rest[0] if rest else None, group or "verify.sgd", name or "run")


class TensorBoardTracker:
    def __init__(self, spec: TrackerSpec, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.folder = Path(spec.folder) / spec.group / spec.name
        self.writer = SummaryWriter(log_dir=str(self.folder))
        text = json.dumps(config, indent=1, sort_keys=True, default=str)
        self.writer.add_text("config", f"```\n{text}\n```")

    def log(self, step: int, metrics: dict) -> None:
        for key, value in metrics.items():
            if value is not None and math.isfinite(value):
                self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, spec: TrackerSpec, config: dict):
        import wandb

        self.run = wandb.init(project=PROJECT, group=spec.group, name=spec.name, config=config,
                              reinit="create_new")

    def log(self, step: int, metrics: dict) -> None:
        self.run.log({k: v for k, v in metrics.items() if v is not None}, step=step)

    def close(self) -> None:
        self.run.finish()


def open_tracker(spec: TrackerSpec | None, config: dict):
    """The tracker of `spec` (None: none), started with the run's configuration."""
    if spec is None:
        return None
    return (TensorBoardTracker if spec.kind == "tensorboard" else WandbTracker)(spec, config)


def log_scores(tracker, step: int, network: str, metrics) -> None:
    """A trained network's scores (metric records) at its last step, then close the tracker."""
    if tracker is None:
        return
    tracker.log(step, {metric_name(m.side, m.metric): m.value for m in metrics
                       if m.network == network and isinstance(m.value, int | float)})
    tracker.close()
