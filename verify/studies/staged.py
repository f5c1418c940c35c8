"""The runs a study's sequential plan asks for (issue 43): the grid's, and the seeds that
`python -m verify.study run STUDY --until-decided` adds to the cells of undecided claims.

A study whose `verdicts:` block has `sequential: {looks: [3, 6, 10], spending: ...}` is judged
look by look (verify.studies.sequential). Look k reads the first looks[k] seeds of each arm in
ascending order: the grid's seeds, then the integers above the largest of them. Which seeds a
cell (a grid point less its seed) needs follows from the store alone: replay the plan on the
stored runs, and each comparison asks, for both its arms, the seeds of the look it was decided
at, or of the look it awaits. Every command reads the same set: `report` and the README read
these runs, `run --until-decided` runs those still missing until every claim is decided (or
`--max-seeds` is reached), and a rerun resumes from the store. So the added seeds are fixed by
the plan and the data, never chosen by a look; a seed run beyond what the plan asks (by an
earlier plan) stays in the store and is left out.
"""

from __future__ import annotations

from pathlib import Path

from verify.studies import effects, provenance
from verify.studies.grids import DEFAULT_PROGRAM, PROGRAMS, Run, expand, run_of, study_plan
from verify.studies.store import RunStore, reading

SEED = "seed"
STEPS = "steps"  # a training run's length: its time scales with it (run_seconds)
_FIXED_POINT_ROUNDS = 5  # the replay's run set settles in 2 (a third confirms)


def planned_runs(name: str, scale: str, out: Path, *, max_seeds: int | None = None) -> tuple[str, list[Run]]:
    """(the study's name, its grid's runs and those its sequential plan asks for now, read from
    the store in `out`). A study without a sequential plan, or without a store, has its grid's.
    `max_seeds` caps the seeds an arm (the runner's budget); the report reads the whole plan."""
    study, runs, _ = _replay(name, scale, out, max_seeds=max_seeds)
    return study, runs


def open_claims(name: str, scale: str, out: Path) -> list[str]:
    """The comparisons a sequential plan has not decided yet, read from the store (what
    `run --until-decided` leaves open at its --max-seeds)."""
    _, _, table = _replay(name, scale, out)
    return [line["name"] for line in (table or {}).get("staged", []) if line["outcome"] == "open"]


def study_table(name: str, scale: str, out: Path) -> tuple[list[Run], dict]:
    """(the runs the plan asks for, the report's table of them, with the cost of those not yet
    made in its notes): what `report`, `compare` and the README read. `name` may be a .yaml
    path, whose `name:` need not be its file's: verify.sgd's report takes the plan from it."""
    study, runs = planned_runs(name, scale, out)
    program = runs[0].program
    plan = dict(plan=study_plan(name)) if program == DEFAULT_PROGRAM else {}
    with reading(out / "study.sqlite"):  # a report of another format: one line naming the store
        table = PROGRAMS[program].report_module().effects_table(
            study, scale, out, keys={r.key for r in runs},
            fingerprint=provenance.code_fingerprint(program), **plan)
    cost = cost_note(name, scale, out, runs)
    table["notes"] += [cost] if cost else []
    return runs, table


def cost_note(name: str, scale: str, out: Path, runs: list[Run]) -> str | None:
    """What the plan's runs not yet made cost (the next looks of its open claims), from the
    store's run times (`run_seconds`), else its mean: the note a report prints. None where
    nothing is missing or the study has no sequential plan."""
    if study_plan(name).looks is None or not (out / "study.sqlite").is_file():
        return None
    with RunStore(out / "study.sqlite", readonly=True) as store:
        done = [r for r in store.rows() if r["status"] == "done" and r["seconds"]]
    status = {r["key"] for r in done}
    missing = [r for r in runs if r.key not in status]
    if not missing or not done:
        return None
    timed = run_seconds(done)
    overall = sum(r["seconds"] for r in done) / len(done)
    seconds = sum(timed(r.config) or overall for r in missing)
    return (f"the sequential plan asks for {len(missing)} runs not yet made (the next looks of its open "
            f"claims): about {seconds / 3600:.1f} core-hours at this store's run times "
            f"(python -m verify.study run {Path(name).stem} --scale {scale} --until-decided)")


def run_seconds(done: list[dict], seeds: tuple[str, ...] = (SEED,)):
    """A run's time from the stored runs `done` (rows with config and seconds): config → seconds,
    or None. The mean over its cell (the runs whose configuration differs from it only in `seeds`:
    the same work on other random draws); else, over the runs that differ from it also in their
    steps, each time scaled by the ratio of the steps (a training run's time is about linear in
    its steps: a study that moves a cell to more steps is timed by the runs it had at fewer, not by
    the study's mean); else None."""
    by_cell: dict[str, list[float]] = {}
    per_step: dict[str, list[float]] = {}
    for r in done:
        by_cell.setdefault(_cell_key(r["config"], seeds), []).append(r["seconds"])
        if _steps(r["config"]):
            per_step.setdefault(_cell_key(r["config"], (*seeds, STEPS)), []).append(
                r["seconds"] / _steps(r["config"]))

    def seconds(config: dict) -> float | None:
        times = by_cell.get(_cell_key(config, seeds))
        if times:
            return sum(times) / len(times)
        rates = per_step.get(_cell_key(config, (*seeds, STEPS))) if _steps(config) else None
        return sum(rates) / len(rates) * _steps(config) if rates else None

    return seconds


def _steps(config: dict) -> float | None:
    steps = config.get(STEPS)
    numeric = isinstance(steps, int | float) and not isinstance(steps, bool)
    return float(steps) if numeric and steps > 0 else None


def _replay(name: str, scale: str, out: Path, *, max_seeds: int | None = None
            ) -> tuple[str, list[Run], dict | None]:
    """(the study's name, the runs its plan asks for, the effects table of those stored, read at
    the fixed point; None without a plan or a store). The plan is replayed on the stored runs:
    every stored seed it could ask for, then what its verdicts ask for, until the set settles."""
    study, runs = expand(name, scale)
    plan = study_plan(name)
    if plan.looks is None or not (out / "study.sqlite").is_file():
        return study, runs, None
    cells = _cells(runs)
    with RunStore(out / "study.sqlite", readonly=True) as store:
        stored = set(store.statuses())
    ask = {cell: plan.looks[-1] for cell in cells}
    keys = table = None
    for _ in range(_FIXED_POINT_ROUNDS):
        extension = _extension(study, cells, ask)
        new = {r.key for r in runs} | {r.key for r in extension if r.key in stored}
        if new == keys:  # the table was built from exactly these keys
            break
        keys = new
        with reading(out / "study.sqlite"):  # a report of another format: one line naming the store
            table = effects.effects_table(study, scale, out, keys=keys, plan=plan)
        ask = _asked(cells, table.get("staged", []))
    else:
        raise AssertionError("the sequential plan's run set did not settle")
    if max_seeds is not None:
        ask = {cell: min(n, max_seeds) for cell, n in ask.items()}
    return study, runs + _extension(study, cells, ask), table


class _Cell:
    """A grid point less its seed: the grid's seeds there, ascending, and one run to vary."""

    def __init__(self, run: Run):
        self.run, self.seeds = run, []

    def planned(self, n: int) -> list[int]:
        """The first n seeds of the plan's order: the grid's, then the integers above them."""
        top = max(self.seeds)
        return (self.seeds + list(range(top + 1, top + 1 + n)))[:n]


def _cells(runs: list[Run]) -> dict[str, _Cell]:
    cells: dict[str, _Cell] = {}
    for r in runs:
        if not isinstance(r.params.get(SEED), int):
            raise ValueError(f"a sequential plan adds seeds: grid point {r.params} has no whole seed")
        cell = cells.setdefault(_cell_key(r.params), _Cell(r))
        cell.seeds.append(r.params[SEED])
    for cell in cells.values():
        cell.seeds.sort()
    return cells


def _cell_key(params: dict, without: tuple[str, ...] = (SEED,)) -> str:
    return repr(sorted((k, effects.hashable(v)) for k, v in params.items() if k not in without))


def _extension(study: str, cells: dict[str, _Cell], ask: dict[str, int]) -> list[Run]:
    """The runs beyond the grid that give each cell its first ask[cell] seeds."""
    out = []
    for key, cell in cells.items():
        for seed in cell.planned(ask.get(key, 0)):
            if seed not in cell.seeds:
                out.append(run_of(study, cell.run.params | {SEED: seed}, cell.run.program))
    return out


def _asked(cells: dict[str, _Cell], staged: list[dict]) -> dict[str, int]:
    """Seeds an arm each cell needs: the most that any comparison of its rows asks (a row's
    settings are the table's varying ones: a cell belongs to the rows whose settings it has)."""
    ask: dict[str, int] = {}
    for line in staged:
        for side in ("treatment", "control"):
            for key, cell in cells.items():
                config = cell.run.config
                if all(effects.hashable(config.get(k)) == v for k, v in line[side].items()):
                    ask[key] = max(ask.get(key, 0), line["units"])
    return ask
