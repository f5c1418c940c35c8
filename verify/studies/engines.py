"""The engines that execute a study's pending runs: `serial` (in this process) and `ray` (one
Ray task per run, or per pack, on the cluster verify.studies.ray_cluster joined). Each yields
(run, result) as results arrive.

On Ray a run whose program estimates its peak memory (a program's optional `memory_bytes(config)`:
verify.kernel's kernel solves) holds that much of Ray's `memory` resource while it runs, so runs
that do not fit in a node's memory together wait for each other, and the others run beside them
(kernel-vs-sgd's 2,048-task ladders need 11 GiB each: on a 23 GiB machine two at once would not
fit, one beside the networks does). A request over the largest node's `memory` is cut to it: the
run then runs alone there rather than wait for ever, and its own check refuses it, in one line,
where the memory is not free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verify.cli import RunPlace
from verify.studies.execution import run_one, run_pack
from verify.studies.grids import PROGRAMS, Run
from verify.studies.store import config_key

# ----------------------------------------------------------------------------- engines

@dataclass(frozen=True)
class Execution:
    """How a study's runs execute: the device, accelerators per Ray task, the checkpoint
    interval (None: verify.sgd's), and runs per pack (1: each alone)."""

    device: str = "cpu"
    gpus_per_run: float = 0.0
    checkpoint_minutes: float | None = None
    pack: int = 1
    log: tuple[str, ...] = ()  # every run's tracker (--log's values; empty: none), named by its key
    log_group: str | None = None  # the tracker's group: the study


def pack_key(run: Run) -> str:
    """Runs with one key can share a pack: all of a run's settings but its seed, split and
    held-out fraction (which change its data, not its student's shape or training)."""
    return config_key({k: v for k, v in run.config.items() if k not in ("seed", "split", "held_out")})


def packs_of(pending: list[Run], pack: int) -> list[list[Run]]:
    """The pending runs in packs of at most `pack` runs of one pack_key (in grid order); a
    pack of one is a run alone."""
    groups: dict[str, list[Run]] = {}
    for run in pending:
        groups.setdefault(pack_key(run), []).append(run)
    return [g[i:i + pack] for g in groups.values() for i in range(0, len(g), pack)]


def place_of(run: Run, out: Path, execution: Execution) -> RunPlace:
    """Where a run runs: its folder out/runs/<its key's first 16 hex digits>, which also names
    it in a tracker."""
    return RunPlace(str(out / "runs" / run.key[:16]), execution.device, execution.checkpoint_minutes,
                    execution.log, execution.log_group)


def _execute_pack(pack: list[Run], out: Path, execution: Execution) -> list[dict]:
    """The results of a pack's runs (a run alone, or runs trained as one batched model)."""
    if len(pack) == 1:
        return [run_one(pack[0].config, place_of(pack[0], out, execution), pack[0].program)]
    return run_pack([r.config for r in pack], [place_of(r, out, execution) for r in pack])


def serial(pending: list[Run], out: Path, execution: Execution, on_start):
    for pack in packs_of(pending, execution.pack):
        for run in pack:
            on_start(run)
        yield from zip(pack, _execute_pack(pack, out, execution), strict=True)


def run_memory(run: Run) -> int:
    """The bytes a run needs at its peak, where its program estimates them (`memory_bytes`), else 0."""
    estimate = getattr(PROGRAMS[run.program].load(), "memory_bytes", None)
    return int(estimate(run.config)) if estimate is not None else 0


def task_options(pack: list[Run], execution: Execution, largest_memory: float) -> dict:
    """A pack's Ray task options: one CPU, its accelerators, no retry, and the memory its runs
    need (their sum), cut to `largest_memory` (the largest node's `memory` resource: a request
    above it would wait for ever); none where nothing is estimated or Ray counts no memory."""
    # Named for what it runs: Ray logs ":task_name:run_one" (or run_pack) as a task begins.
    options = dict(name="run_one" if len(pack) == 1 else "run_pack", num_cpus=1,
                   num_gpus=execution.gpus_per_run, max_retries=0)
    memory = min(sum(run_memory(run) for run in pack), int(largest_memory))
    return options | (dict(memory=memory) if memory > 0 else {})


def largest_node_memory() -> float:
    """The largest `memory` resource of the Ray cluster's live nodes (0 where none counts it)."""
    import ray

    return max((node["Resources"].get("memory", 0.0) for node in ray.nodes() if node["Alive"]), default=0.0)


def ray_engine(pending: list[Run], out: Path, execution: Execution, on_start):
    """One Ray task per run, or per pack, on the cluster connect_ray joined; results as they
    finish."""
    import ray

    task = ray.remote(_execute_pack)
    largest = largest_node_memory()
    in_flight = {}
    for pack in packs_of(pending, execution.pack):
        for run in pack:
            on_start(run)
        in_flight[task.options(**task_options(pack, execution, largest)).remote(pack, out, execution)] = pack
    while in_flight:
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        pack = in_flight.pop(ready[0])
        try:
            results = ray.get(ready[0])
        except ray.exceptions.RayError as e:  # the worker died (killed, out of memory)
            error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            results = [dict(status="failed", error=error, seconds=None, version=None,
                            fingerprint=None)] * len(pack)
        yield from zip(pack, results, strict=True)
