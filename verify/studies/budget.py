"""What regenerating a scale's evidence costs, from the run times its stores measured.

`python -m verify.study budget --scale cpu` gives, per study and in all: the runs, how
many the store holds done by the installed code (current, `verify.studies.behaviour`), the
core-minutes of the whole grid and of what is left, and the wall time `run all` takes on W
workers (`--workers`, default 2: the CI machine's cores). A study's runs are its grid's and,
where it declares a sequential plan, the seeds the plan asks for now, read from its store
(verify.studies.staged: the next looks of its open claims, what `run --until-decided` runs),
so a plan's pending looks are in the cost; the looks after those depend on data not yet in.

A run's time is its own stored time when the store holds it (any code: a rerun costs about
what the run cost); otherwise the mean of the stored runs whose configuration differs from
it only in the seeds (`seed`, `split_seed`): the same work on other random draws; otherwise
that of the runs that differ from it also in their steps, scaled by the ratio of the steps
(staged.run_seconds); otherwise the time its `also:` block declares (`seconds:`, measured and
stated in the study file: runs unlike any stored one, kernel-vs-sgd's ladders along tasks);
otherwise the study's mean over its stored runs of this grid, marked as a guess; with none at
all, it is unknown and the totals say so. Stored times were measured on
whatever shared the machine then (another study on the second core, say): a budget, not a benchmark.

Wall time: `run all` runs the studies one after another, each on W workers that take the
runs in grid order as they free up (Ray's local scheduling); within a study that is the
list schedule below, whose length is at least the core time / W and at most that plus the
longest run. A run that holds memory on Ray (verify.studies.engines: a program's
`memory_bytes`, kernel-vs-sgd's ladders along tasks) starts only where it fits beside the runs
in flight, in a node of `--node-memory-gib` (default NODE_MEMORY_GIB, the local Ray cluster of
the 23 GiB CI machine), and the next run that fits takes the free worker, as Ray's per-class
queues do: so the 6 ladders run one at a time whatever W is.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

from verify.studies import behaviour, grids, provenance, staged
from verify.studies.engines import run_memory
from verify.studies.store import RunStore

SEED_SETTINGS = ("seed", "split_seed")  # a run's random draws: the same work, other numbers
# The `memory` resource of a local Ray cluster on the 23 GiB CI machine (measured: 16.8e9 bytes,
# ~70% of the memory available; the rest is Ray's object store). A fixed figure, so that the
# README's budget does not move with the memory free when it is generated.
NODE_MEMORY_GIB = 15.6


@dataclass(frozen=True)
class StudyBudget:
    study: str
    runs: int
    current: int  # done by the installed code (or code that behaves the same)
    seconds: tuple[float | None, ...]  # per run of the grid, in grid order (None: unknown)
    left: tuple[bool, ...]  # per run: still to run (not done by current code)
    measured: int  # runs whose own time is stored
    matched: int  # runs timed by their seed twins (or their twins at other steps, scaled)
    guessed: int  # runs timed by the study's mean
    declared: int = 0  # runs timed by the seconds their study file declares
    memory: tuple[int, ...] = ()  # per run: the bytes it holds on Ray (0: none; empty: none at all)

    def core_minutes(self, only_left: bool = False) -> float:
        return sum(s or 0.0 for s, todo in zip(self.seconds, self.left, strict=True)
                   if todo or not only_left) / 60

    def wall_minutes(self, workers: int, only_left: bool = False, node_memory: float | None = None) -> float:
        memory = self.memory or (0,) * len(self.seconds)
        runs = [(s or 0.0, m) for s, m, todo in zip(self.seconds, memory, self.left, strict=True)
                if todo or not only_left]
        return list_schedule([s for s, _ in runs], workers, [m for _, m in runs], node_memory) / 60

    @property
    def unknown(self) -> int:
        return sum(s is None for s in self.seconds)


def list_schedule(seconds: list[float], workers: int, memory: list[float] | None = None,
                  node_memory: float | None = None) -> float:
    """The makespan of jobs taken in order, each by the first worker to free up; with `memory`
    (bytes a job holds) and `node_memory`, a free worker takes the first job still waiting that
    fits beside the jobs in flight (a job's hold cut to node_memory, as the engine cuts it), and
    waits for a job to end where none fits."""
    if not memory or node_memory is None or not any(memory):
        free = [0.0] * workers
        for s in seconds:
            heapq.heapreplace(free, free[0] + s)
        return max(free, default=0.0)
    hold = [min(m, node_memory) for m in memory]
    waiting, running, now, end = list(range(len(seconds))), [], 0.0, 0.0
    while waiting:
        used = sum(hold[j] for _, j in running)
        fits = (next((i for i in waiting if used + hold[i] <= node_memory), None)
                if len(running) < workers else None)
        if fits is None:  # every worker busy, or nothing fits: the next job in flight ends
            now, _ = heapq.heappop(running)
            continue
        waiting.remove(fits)
        heapq.heappush(running, (now + seconds[fits], fits))
        end = max(end, now + seconds[fits])
    return end


def study_budget(name: str, scale: str, out: Path | None = None) -> StudyBudget:
    """The budget of one study at `scale`, read from its store (in `out`, else
    grids.stored_out): its grid's runs and those its sequential plan asks for now."""
    out = grids.stored_out(name, scale) if out is None else Path(out)
    _, runs = staged.planned_runs(name, scale, out)
    store = out / "study.sqlite"
    rows = []
    if store.is_file():
        with RunStore(store, readonly=True) as s:
            rows = [r for r in s.rows() if r["status"] == "done" and r["seconds"]]
    judge = behaviour.Judge(runs[0].program, provenance.code_fingerprint(runs[0].program))
    by_key = {r["key"]: r for r in rows}
    twin = staged.run_seconds(rows, SEED_SETTINGS)
    grid_keys = {run.key for run in runs}
    of_grid = [r["seconds"] for r in rows if r["key"] in grid_keys] or [r["seconds"] for r in rows]
    guess = sum(of_grid) / len(of_grid) if of_grid else None
    blocks = grids.declared_seconds(name, scale)
    seconds, left, counts = [], [], dict(measured=0, matched=0, declared=0, guessed=0)
    for run in runs:
        stored = by_key.get(run.key)
        matched = None if stored is not None else twin(run.config)
        declared = next((s for entries, s in blocks
                         if all(run.params.get(k) in values for k, values in entries.items())), None)
        if stored is not None:
            seconds.append(stored["seconds"])
            counts["measured"] += 1
        elif matched is not None:
            seconds.append(matched)
            counts["matched"] += 1
        elif declared is not None:
            seconds.append(declared)
            counts["declared"] += 1
        else:
            seconds.append(guess)
            counts["guessed"] += guess is not None
        left.append(stored is None or judge(stored) != behaviour.CURRENT)
    return StudyBudget(study=name, runs=len(runs), current=len(runs) - sum(left), seconds=tuple(seconds),
                       left=tuple(left), memory=tuple(run_memory(run) for run in runs), **counts)


def budget_table(scale: str, workers: int, node_memory_gib: float = NODE_MEMORY_GIB) -> dict:
    """Every study's budget at `scale`, and the totals for `run all` on `workers` workers, each
    node of `node_memory_gib` GiB of Ray memory."""
    studies = [study_budget(name, scale) for name in grids.study_names()]
    node = node_memory_gib * 2**30
    rows = [dict(study=b.study, runs=b.runs, current=b.current, measured=b.measured, matched=b.matched,
                 declared=b.declared, guessed=b.guessed, unknown=b.unknown, core_minutes=b.core_minutes(),
                 core_minutes_left=b.core_minutes(only_left=True),
                 wall_minutes=b.wall_minutes(workers, False, node),
                 wall_minutes_left=b.wall_minutes(workers, True, node)) for b in studies]
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k != "study"}
    return dict(scale=scale, workers=workers, node_memory_gib=node_memory_gib, rows=rows, total=total)


def format_budget(table: dict) -> str:
    w = table["workers"]
    lines = [f"| study | runs | current | timed: own / twin / declared / guess / unknown | core-min "
             f"| core-min left "
             f"| wall at {w} workers | wall left |", "|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in [*table["rows"], dict(study="all (run all)", **table["total"])]:
        lines.append(f"| {r['study']} | {r['runs']} | {r['current']} | {r['measured']} / {r['matched']} / "
                     f"{r['declared']} / {r['guessed']} / {r['unknown']} | {r['core_minutes']:.0f} | "
                     f"{r['core_minutes_left']:.0f} "
                     f"| {_hours(r['wall_minutes'])} | {_hours(r['wall_minutes_left'])} |")
    return "\n".join([*lines, "", summary_line(table)])


def summary_line(table: dict) -> str:
    """The totals in one line (the README's `budget` block)."""
    t, w = table["total"], table["workers"]
    return (f"{table['scale']} scale: {t['runs']} runs, {t['current']} current; all of it takes "
            f"{_hours(t['wall_minutes'])} wall on {w} workers, what is left {_hours(t['wall_minutes_left'])}"
            + (f"; {t['unknown']} runs have no time to go by (not counted)" if t["unknown"] else "")
            + " (verify/studies/budget.py: stored run times, measured under whatever shared the machine; "
              f"the runs that hold memory share {table.get('node_memory_gib', NODE_MEMORY_GIB):g} GiB of Ray "
              "memory)")


def _hours(minutes: float) -> str:
    return f"{minutes / 60:.1f} h" if minutes >= 90 else f"{minutes:.0f} min"


def cheapest_with_verdicts(scale: str = "cpu") -> tuple[str, int, float] | None:
    """(study, runs, stored core-minutes) of the study whose committed or working store at `scale`
    holds its whole grid in the least stored run time, among the studies whose grid draws more
    than one seed (or split seed): the ones whose verdicts can be tested (one draw an arm has no
    variance). Read from the stores' run times only (no code is judged, nothing is replayed);
    None where no store holds a whole grid."""
    best = None
    for name in grids.study_names():
        _, runs = grids.expand(name, scale)
        if len({tuple(r.config.get(k) for k in SEED_SETTINGS) for r in runs}) < 2:
            continue
        store = grids.stored_out(name, scale) / "study.sqlite"
        if not store.is_file():
            continue
        with RunStore(store, readonly=True) as s:
            seconds = {r["key"]: r["seconds"] for r in s.rows() if r["status"] == "done" and r["seconds"]}
        if not all(r.key in seconds for r in runs):
            continue
        minutes = sum(seconds[r.key] for r in runs) / 60
        if best is None or minutes < best[2]:
            best = (name, len(runs), minutes)
    return best


def smoke_note() -> str:
    """The line `run` and `report` add to a smoke-scale study: what the scale is for, and where
    real verdicts are (the cheapest study at the cpu scale, with its stored time)."""
    line = ("note: the smoke scale checks the machinery (one draw, a few steps), so its verdicts are not "
            "testable by design")
    best = cheapest_with_verdicts("cpu")
    if best is None:
        return line + "; the cpu scale gives real ones"
    name, runs, minutes = best
    return (line + f"; the cheapest study with real verdicts is {name} at --scale cpu ({runs} runs, "
            f"{_hours(minutes)} of stored run time; `python -m verify.study report {name} --scale cpu` "
            "reads its store)")
