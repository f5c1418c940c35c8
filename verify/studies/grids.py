"""Study files and the runs they stand for.

A study is a grid file in the official sweeps' YAML format (`method: grid`, `parameters:
name: {values: [...]}` or `{value: x}`) whose names are its program's flags (`held_out` for
--held-out). The program is verify.sgd unless the file names another (`program:`; PROGRAMS
lists them: verify.images.train runs the controlled image experiment); for verify.sgd, `width`
and `depth` make an MLP of `depth` equal layers. Its `parameters` are the paper's grid and
length; `scales: cpu:` and `scales: smoke:` override some of them. An optional `also:` (top
level for the paper scale, under a scale for that scale) adds grids beside the main one; the
runs are the union (load_study). A `verdicts:` block states the paper's claims and how they
are tested (verify.studies.verdicts), a scale's `deviations:` what it changes from the paper,
and `analysis:` a module that adds its own section to the report (verify.studies.interfaces).

`expand` resolves every grid point with its program's own parser (a point the program would
refuse is refused here, before any work) into a Run: its key (a hash of the resolved
configuration), its configuration and its command line. `default_out` and `stored_out` say
where a study's store lives.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path

from verify.cli import UsageError
from verify.studies.store import config_key

STUDIES_DIR = Path(__file__).parent
# Where `run` writes by default: relative to the working folder, so that inside the checkout
# it is the committed stores' folder and anywhere else a new folder of the same path.
RESULTS_DIR = Path("verify") / "studies" / "results"
# The committed stores, shipped with the package: read when the working folder has none.
PACKAGED_RESULTS_DIR = STUDIES_DIR / "results"
SCALES = ("paper", "cpu", "smoke")

@dataclass(frozen=True)
class Program:
    """A program a study runs once per grid point: its module follows
    verify.studies.interfaces.StudyProgram (config_of, from_key, run_config, run, …);
    `report` names the module that reads a study of it back (effects_table, write_table,
    format_markdown, export_csv). Both are imported by name, when a study of that program is
    run or read: the driver sits below the programs it runs (verify.images imports
    verify.studies, never the reverse)."""

    name: str  # as a user runs it, and as a study file names it
    module: str
    report: str
    # Runs in packs (--pack; the module's check_pack_grid refuses a grid it cannot pack) with a
    # checkpoint interval (--checkpoint-minutes): verify.sgd's.
    packs: bool = False
    tracks: bool = False  # takes --log, --log-group, --log-name (verify.learning.tracking)

    def load(self):
        import importlib

        return importlib.import_module(self.module)

    def report_module(self):
        import importlib

        return importlib.import_module(self.report)


DEFAULT_PROGRAM = "verify.sgd"
PROGRAMS = {p.name: p for p in (
    Program("verify.sgd", "verify.learning.sgd_program", "verify.studies.effects", packs=True,
            tracks=True),
    Program("verify.images.train", "verify.images.train", "verify.images.study_report", tracks=True),
    Program("verify.kernel", "verify.learning.kernel_vs_sgd", "verify.studies.kernel_report"),
)}


@dataclass(frozen=True)
class Run:
    key: str
    params: dict  # the grid point, as the study names it
    config: dict  # the resolved configuration (what the key hashes)
    argv: tuple[str, ...]  # the program's flags that reproduce the run (for people; runs go by config)
    program: str = DEFAULT_PROGRAM


# ----------------------------------------------------------------------------- study files

def study_names() -> list[str]:
    return sorted(p.stem for p in STUDIES_DIR.glob("*.yaml"))


def study_file(name: str) -> Path:
    """A study by name (verify/studies/NAME.yaml) or by path."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise UsageError(f"study file {name!r} does not exist")
        return path
    path = STUDIES_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"unknown study {name!r}; the studies are {', '.join(study_names())} "
                         "(or give a .yaml path)")
    return path


def program_parameters(program: str = DEFAULT_PROGRAM) -> set[str]:
    """Every parameter a study of `program` may set: its flags' destinations but the runtime
    ones, and the program's own study parameters (verify.sgd's width and depth)."""
    module = PROGRAMS[program].load()
    extra = set(getattr(module, "STUDY_PARAMETERS", ()))
    return (set(_flags(program)) - set(module.RUNTIME) - {"help"}) | extra


def _grid_entries(where: str, parameters, known) -> dict[str, list]:
    if not isinstance(parameters, dict) or not parameters:
        raise UsageError(f"{where}: `parameters` must be a non-empty mapping of name: {{values: [...]}}")
    out = {}
    for name, entry in parameters.items():
        if name not in known:
            raise UsageError(f"{where}: unknown parameter {name!r}; a study sets its program's flags "
                             f"({', '.join(sorted(known))})")
        if not isinstance(entry, dict) or len(set(entry) & {"value", "values"}) != 1 or len(entry) != 1:
            raise UsageError(f"{where}: parameter {name!r} needs exactly one of `value: x` or "
                             "`values: [...]`")
        values = [entry["value"]] if "value" in entry else entry["values"]
        if not isinstance(values, list) or not values:
            raise UsageError(f"{where}: parameter {name!r} has an empty grid "
                             "(`values` must be a non-empty list)")
        out[name] = values
    return out


def study_program(name: str) -> str:
    """The program a study runs (its file's `program:`, verify.sgd when it names none)."""
    return load_study(name, "paper")[2]


def _study_yaml(path: Path) -> dict:
    import yaml

    try:
        study = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(study, dict) or study.get("method") != "grid":
        raise UsageError(f"{path}: a study is a grid file (`method: grid`, `parameters: ...`)")
    return study


def study_plan(name: str, *, missing_ok: bool = False):
    """The verdicts plan a study file states (its `verdicts:` block: the test its design calls
    for, the paper's claims and margins; verify.studies.verdicts.plan_of), checked. With
    missing_ok, a study with no file (a store read under another name) has the default plan."""
    try:
        path = study_file(name)
    except UsageError:
        if missing_ok:
            from verify.studies.verdicts import Plan

            return Plan()
        raise
    return _plan_of(_study_yaml(path), path)


def study_analysis(name: str):
    """The analysis module a study file names (`analysis: MODULE`, e.g. verify.studies.width),
    imported; None for a study without one or with no file. It must follow
    verify.studies.interfaces.StudyAnalysis."""
    import importlib

    try:
        study = _study_yaml(study_file(name))
    except UsageError:
        return None
    module = study.get("analysis")
    if module is None:
        return None
    from verify.studies.interfaces import StudyAnalysis

    if not isinstance(module, str) or not module.startswith("verify."):
        raise UsageError(f"{name}: `analysis` names a module of this project (verify.…), got {module!r}")
    try:
        found = importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{name}: `analysis` names {module!r}, which does not import") from None
    if not isinstance(found, StudyAnalysis):
        raise UsageError(f"{name}: `analysis` module {module} lacks analyse_runs or format_analysis")
    return found


def study_deviations(name: str, scale: str) -> list[str]:
    """What a study's scale changes from the paper's setup (its `deviations:` list under the
    scale), stated beside every result it touches: the effects table's notes, the figures'
    titles. [] for the paper scale, or a study with no file."""
    try:
        study = _study_yaml(study_file(name))
    except UsageError:
        return []
    block = (study.get("scales") or {}).get(scale) or {}
    found = block.get("deviations") or []
    if not isinstance(found, list) or not all(isinstance(d, str) for d in found):
        raise UsageError(f"{name}: `deviations` under scale {scale} must be a list of sentences")
    return found


def _plan_of(study: dict, path: Path):
    from verify.studies import verdicts

    try:
        return verdicts.plan_of(study.get("verdicts"), f"{path}: verdicts")
    except ValueError as e:
        raise UsageError(str(e)) from None


def load_study(name: str, scale: str) -> tuple[str, list[dict[str, list]], str]:
    """(the study's name, its grids at `scale`: each a mapping parameter → values, the program
    it runs), checked.

    A scale's `also:` (a list of `parameters:` blocks) adds grids beside the scale's own: each
    is the scale's grid with that block's parameters replacing or adding to it. The runs are
    the union of the grids' products (a run in two of them is run once). This lets a study
    add a ladder along one parameter at a few points of another without multiplying every
    run (width-vs-M: a held-out-fraction ladder at the widest rung only)."""
    path = study_file(name)
    study = _study_yaml(path)
    plan = _plan_of(study, path)  # a bad `verdicts:` block is refused before any run
    study_analysis(name)  # and a bad `analysis:`
    if scale not in SCALES:
        raise UsageError(f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
    program = study.get("program", DEFAULT_PROGRAM)
    if program not in PROGRAMS:
        raise UsageError(f"{path}: unknown program {program!r}; a study runs one of {', '.join(PROGRAMS)}")
    if plan.looks is not None and program != DEFAULT_PROGRAM:
        raise UsageError(f"{path}: a sequential plan (verdicts: sequential) is read by {DEFAULT_PROGRAM}'s "
                         f"report; {program}'s has none")
    known = program_parameters(program)
    grid = _grid_entries(str(path), study.get("parameters"), known)
    scales = study.get("scales") or {}
    unknown = set(scales) - set(SCALES[1:])
    if unknown:
        raise UsageError(f"{path}: unknown scale {sorted(unknown)[0]!r} under `scales` (allowed: cpu, smoke)")
    also = study.get("also") or []
    if scale != "paper":
        if scale not in scales:
            raise UsageError(f"{path}: the study has no {scale!r} scale")
        where = f"{path} (scale {scale})"
        block = scales[scale] or {}
        grid |= _grid_entries(where, block.get("parameters"), known)
        also = block.get("also") or []
    else:
        where = str(path)
    if not isinstance(also, list) or not all(isinstance(a, dict) and "parameters" in a
                                             and set(a) <= {"parameters", "seconds"} for a in also):
        raise UsageError(f"{where}: `also` must be a list of `parameters:` blocks (each with an optional "
                         "`seconds:`)")
    for i, a in enumerate(also):
        _declared(f"{where}, also[{i}]", a)
    extra = [grid | _grid_entries(f"{where}, also[{i}]", a["parameters"], known) for i, a in enumerate(also)]
    return str(study.get("name") or path.stem), [grid, *extra], program


def _declared(where: str, block: dict) -> float | None:
    """An `also:` block's `seconds:`, checked: a positive number, or None where it declares none."""
    seconds = block.get("seconds")
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
        raise UsageError(f"{where}: `seconds` must be a positive number (a run's estimated time), "
                         f"got {seconds!r}")
    return float(seconds)


def declared_seconds(name: str, scale: str) -> list[tuple[dict[str, list], float]]:
    """The run times a study's `also:` blocks at `scale` declare (`seconds:`, measured and stated
    in the study file, for runs no stored run can time yet: verify.studies.budget): each block's
    own parameters (name → values) and its seconds a run."""
    load_study(name, scale)  # checked
    study = _study_yaml(study_file(name))
    block = study if scale == "paper" else (study.get("scales") or {}).get(scale) or {}
    also = block.get("also")
    known = program_parameters(study.get("program", DEFAULT_PROGRAM))
    return [(_grid_entries(f"also[{i}]", a["parameters"], known), _declared(f"also[{i}]", a))
            for i, a in enumerate(also or []) if a.get("seconds") is not None]


def _flags(program: str = DEFAULT_PROGRAM) -> dict[str, str]:
    """The program's flag for each destination (--held-out for held_out)."""
    return {a.dest: a.option_strings[-1] for a in _options(program, _registered())}


def _registered() -> tuple[str, ...]:
    """The task families registered now: verify.sgd's flags include each one's own."""
    from verify.learning.families import FAMILIES

    return tuple(FAMILIES)


@functools.cache
def _options(program: str, families: tuple[str, ...]) -> tuple:
    """The program's optional arguments (argparse actions), per set of registered families."""
    parser = PROGRAMS[program].load().build_parser()
    return tuple(a for a in parser._actions if a.option_strings)


def own_parameters(params: dict, program: str = DEFAULT_PROGRAM) -> dict:
    """The grid point's parameters that apply to its run: the program's own_parameters say
    (verify.sgd: its student's and family's), else all of them."""
    module = PROGRAMS[program].load()
    return module.own_parameters(params) if hasattr(module, "own_parameters") else dict(params)


def expand(name: str, scale: str) -> tuple[str, list[Run]]:
    """Every run of the study at `scale`, resolved by its program (config_of: a grid point it
    would refuse is refused here, before any work)."""
    study, grids, program = load_study(name, scale)
    runs, seen, used = [], set(), set()
    points = (dict(zip(grid, values, strict=True))
              for grid in grids for values in itertools.product(*grid.values()))
    for params in points:
        used |= set(own_parameters(params, program))
        run = run_of(study, params, program)
        if run.key not in seen:
            seen.add(run.key)
            runs.append(run)
    # A parameter that no grid point's student or family takes would be silently ignored.
    unused = sorted(set().union(*grids) - used)
    if unused:
        raise UsageError(f"study {study}: parameter {unused[0]!r} applies to no grid point (its task family "
                         "or student is never selected)")
    return study, runs




def run_of(study: str, params: dict, program: str = DEFAULT_PROGRAM) -> Run:
    """The run of one grid point, resolved by its program (a point it refuses is refused)."""
    module = PROGRAMS[program].load()
    try:
        config = module.config_of(params)
    except UsageError as e:
        raise UsageError(f"study {study}, grid point {params}: {e}") from None
    resolved = module.run_config(config)
    return Run(config_key(resolved), params, resolved, tuple(module.command_line(config)), program)


def default_out(name: str, scale: str) -> Path:
    """Where `run` writes by default: verify/studies/results/STUDY/SCALE under the working folder."""
    return RESULTS_DIR / Path(name).stem / scale


def is_committed_store(out: str | os.PathLike, name: str, scale: str) -> bool:
    """Whether `out` is the study's committed store, shipped with the package (in the checkout,
    where `run` writes by default)."""
    return Path(out).resolve() == (PACKAGED_RESULTS_DIR / Path(name).stem / scale).resolve()


def stored_out(name: str, scale: str) -> Path:
    """Where `report`, `export`, `list` and figure 9 read by default: the working folder's
    store when it has one, else the committed store shipped with the package (when that has
    one), else the working folder's (which then holds nothing: the caller says so)."""
    here = default_out(name, scale)
    if (here / "study.sqlite").is_file():
        return here
    shipped = PACKAGED_RESULTS_DIR / Path(name).stem / scale
    return shipped if (shipped / "study.sqlite").is_file() else here
