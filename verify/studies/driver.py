"""python -m verify.study: the paper's sweeps as studies, run on Ray or serially, stored in SQLite.

A study is a grid file in the official sweeps' YAML format (`method: grid`, `parameters:
name: {values: [...]}` or `{value: x}`) whose names are its program's flags (`held_out` for
--held-out). The program is verify.sgd unless the file names another (`program:`; PROGRAMS
lists them: verify.images.train runs the controlled image experiment); for verify.sgd, `width`
and `depth` make an MLP of `depth` equal layers. Its `parameters`
are the paper's grid and length; `scales: cpu:` and `scales: smoke:` override some of them.
An optional `also:` (top level for the paper scale, under a scale for that scale) adds
grids beside the main one; the runs are the union (load_study).
Each grid point is one run of the program, keyed by a hash of its resolved configuration; its
stored result also records the code that made it (the project's version and a fingerprint
of the modules that train and score a run) and its behaviour (a few numbers of its first
steps and scoring: verify.studies.behaviour). A result made by other code counts as current
when its behaviour replays the same with the installed code (a refactor); otherwise it is
marked as made by other code.

  run STUDY --scale cpu    run every grid point not yet done (one Ray task per run); `run all`
                           runs every study in turn, so one command regenerates (and resumes)
                           a scale's whole evidence
  report STUDY             the paper's effects table from the store, without training (the
                           program's own report: verify.images.train's gives the correlation)
  export STUDY             every run as CSV
  list                     the studies and what their stores hold
  record-behaviour STUDY   record the behaviour of runs this code made before runs did

Exit codes: 0 done, 1 a construction violated its certificate in some run, 2 usage
error, 3 internal error, 130 interrupted. A run that fails is stored as failed (with its
error) and the others go on; --retry-failed runs it again, and --rerun-stale reruns the
runs made by other (or unknown) code.

`run` writes under the current working folder (verify/studies/results/STUDY/SCALE, or
--out); `report`, `export`, `list` and figure 9 read that store when it exists, and
otherwise the committed cpu-scale store shipped with the package.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import itertools
import os
import re
import socket
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from verify import cli
from verify.cli import UsageError, non_negative_float, positive_float, positive_int
from verify.studies import behaviour

STUDIES_DIR = Path(__file__).parent
# Where `run` writes by default: relative to the working folder, so that inside the checkout
# it is the committed stores' folder and anywhere else a new folder of the same path.
RESULTS_DIR = Path("verify") / "studies" / "results"
# The committed stores, shipped with the package: read when the working folder has none.
PACKAGED_RESULTS_DIR = STUDIES_DIR / "results"
SCALES = ("paper", "cpu", "smoke")
ENGINES = ("ray", "serial")
# Study parameters that are not verify.sgd flags: an MLP of `depth` layers of `width`.
SHAPE_PARAMETERS = ("width", "depth")
# Parameters that only some students take.
STUDENT_ONLY = {**dict.fromkeys(("width", "depth", "shapes", "widths", "init"), ("mlp",)),
                **dict.fromkeys(("d_model", "n_heads", "n_layers"), ("transformer",)),
                "d_ffw": ("transformer", "hypernetwork")}


@dataclass(frozen=True)
class Program:
    """A program a study runs once per grid point. Its module has build_parser, parse_args,
    run_config (the resolved configuration a run's key hashes), run (the report) and RUNTIME
    (the flags that do not change a result); `report` names the module that reads a study of
    it back (effects_table, write_table, format_markdown, export_csv). Both are imported by
    name, when a study of that program is run or read: the driver sits below the programs
    it runs (verify.images imports verify.studies, never the reverse)."""

    name: str  # as a user runs it, and as a study file names it
    module: str
    report: str
    run_dir_flag: str  # the flag that gives a run its folder (checkpoints, saved models)
    # verify.sgd's grid conventions: `width`/`depth` as an MLP's shape, parameters that only
    # some students or families take, packs of runs and a checkpoint interval.
    sgd_grid: bool = False

    def load(self):
        import importlib

        return importlib.import_module(self.module)

    def report_module(self):
        import importlib

        return importlib.import_module(self.report)


DEFAULT_PROGRAM = "verify.sgd"
PROGRAMS = {p.name: p for p in (
    Program("verify.sgd", "verify.learning.sgd", "verify.studies.effects", "--checkpoint", sgd_grid=True),
    Program("verify.images.train", "verify.images.train", "verify.images.study", "--out"),
)}


@dataclass(frozen=True)
class Run:
    key: str
    params: dict  # the grid point, as the study names it
    config: dict  # the resolved configuration (what the key hashes)
    argv: tuple[str, ...]  # the program's arguments
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
    ones (and, for verify.sgd, width/depth)."""
    p = PROGRAMS[program]
    shape = set(SHAPE_PARAMETERS) if p.sgd_grid else set()
    return (set(_flags(program)) - set(p.load().RUNTIME) - {"help"}) | shape


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
    _plan_of(study, path)  # a bad `verdicts:` block is refused before any run
    if scale not in SCALES:
        raise UsageError(f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
    program = study.get("program", DEFAULT_PROGRAM)
    if program not in PROGRAMS:
        raise UsageError(f"{path}: unknown program {program!r}; a study runs one of {', '.join(PROGRAMS)}")
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
    if not isinstance(also, list) or not all(isinstance(a, dict) and set(a) == {"parameters"} for a in also):
        raise UsageError(f"{where}: `also` must be a list of `parameters:` blocks")
    extra = [grid | _grid_entries(f"{where}, also[{i}]", a["parameters"], known) for i, a in enumerate(also)]
    return str(study.get("name") or path.stem), [grid, *extra], program


@functools.cache
def _flags(program: str = DEFAULT_PROGRAM) -> dict[str, str]:
    """The program's flag for each destination (--held-out for held_out)."""
    parser = PROGRAMS[program].load().build_parser()
    return {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings}


@functools.cache
def _switches(program: str = DEFAULT_PROGRAM) -> frozenset[str]:
    """The destinations of the program's flags that take no value (store_true)."""
    parser = PROGRAMS[program].load().build_parser()
    return frozenset(a.dest for a in parser._actions if a.option_strings and a.nargs == 0)


def own_parameters(params: dict, program: str = DEFAULT_PROGRAM) -> dict:
    """The grid point's parameters that apply to its run. A verify.sgd grid that crosses
    students (the scaling-law sweep: mlp and transformer) sets both students' sizes; each run
    takes its own student's. Likewise a grid that crosses task families sets each family's own
    settings; each run takes its own family's. Another program's runs take every parameter."""
    if not PROGRAMS[program].sgd_grid:
        return dict(params)
    from verify.learning.sgd import DEFAULT_FAMILY, FAMILY_FLAGS

    student = params.get("student", "mlp")
    params = {k: v for k, v in params.items() if k not in STUDENT_ONLY or student in STUDENT_ONLY[k]}
    family = params.get("family", DEFAULT_FAMILY)
    return {k: v for k, v in params.items()
            if not any(k in own for f, own in FAMILY_FLAGS.items() if f != family)}


def program_argv(params: dict, program: str = DEFAULT_PROGRAM) -> list[str]:
    """The program's arguments for one grid point (a list value: a flag of several values)."""
    flags = _flags(program)
    params = own_parameters(params, program)
    sgd_grid = PROGRAMS[program].sgd_grid
    argv: list[str] = []
    for name, value in params.items():
        if sgd_grid and name in SHAPE_PARAMETERS:
            continue
        if name in _switches(program):  # a switch: its flag when true, nothing when false
            if not isinstance(value, bool):
                raise UsageError(f"parameter {name!r} is a switch: its value is true or false, not {value!r}")
            argv += [flags[name]] * value
            continue
        argv.append(flags[name])
        argv += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if sgd_grid and ("width" in params or "depth" in params):
        width, depth = params.get("width", 1024), params.get("depth", 4)
        argv += ["--shapes", "custom", "--widths", *[str(width)] * int(depth)]
    return argv


def expand(name: str, scale: str) -> tuple[str, list[Run]]:
    """Every run of the study at `scale`, resolved by its program's own parser (so a grid
    point it would refuse is refused here, before any work)."""
    from verify.studies.store import config_key

    study, grids, program = load_study(name, scale)
    module = PROGRAMS[program].load()
    runs, seen, used = [], set(), set()
    points = (dict(zip(grid, values, strict=True))
              for grid in grids for values in itertools.product(*grid.values()))
    for params in points:
        used |= set(own_parameters(params, program))
        argv = program_argv(params, program)
        try:
            args = module.parse_args([*argv, "--no-progress"])
        except UsageError as e:
            raise UsageError(f"study {study}, grid point {params}: {e}") from None
        config = module.run_config(args)
        key = config_key(config)
        if key not in seen:
            seen.add(key)
            runs.append(Run(key, params, config, tuple(argv), program))
    # A parameter that no grid point's student or family takes would be silently ignored.
    unused = sorted(set().union(*grids) - used)
    if unused:
        raise UsageError(f"study {study}: parameter {unused[0]!r} applies to no grid point (its task family "
                         "or student is never selected)")
    return study, runs


# ----------------------------------------------------------------------------- the code a run rests on

PROJECT_PACKAGES = ("theory", "constructions", "verify", "paper_figures")
# The modules that determine a run's result are derived, not listed by hand: every project
# module the program's module (verify.learning.sgd for verify.sgd) imports (at module level
# or inside a function), followed transitively
# through the imports written in each module's source, with the packages' __init__ files
# (code_modules() below), so a module a refactor adds or moves is covered without an edit
# here. Today that is verify.learning (sgd, train, metrics, students, families), verify.measure
# (the sup error) and names;
# constructions.shallow, base, names (the construction each run is compared with) and
# constructions.tasks.hyperteacher, encodings, splits, names (teacher, encodings, splits);
# theory.bounds (the certificate). For verify.images.train it is verify.images (the denoiser,
# pipeline, recorder, probes, judge) with constructions.tasks.images and image_setups.
# tests/test_study.py checks that every project module a real run of each student loads is
# among them or below. These are left out, because they do not change a stored result once
# its configuration (what the key hashes) is fixed:
NOT_RESULT_CODE = {
    "verify.cli": "argument checks, output, atomic files, progress bars: what the parser "
                  "resolves is the configuration, and the key hashes it",
    "verify.studies.effects": "verify.sgd uses it only to average several seeds on its own command line",
    "verify.studies.driver": "the driver: what it passes a run is the configuration or a runtime setting",
    "verify.studies.store": "where results are kept, not how they are made",
    "verify.studies.behaviour": "judges whether the installed code reproduces a stored run's behaviour "
                                "record; it makes no result",
    "verify.images.results": "the analysis record's layout and provenance, not its numbers",
    "verify.images.study": "the image study's report (analyse's `report` command uses its statistics): it "
                           "reads results, it makes none",
    "verify.studies": "the package's __init__, a docstring (verify.images.train keys its folder with "
                      "verify.studies.store)",
}
# The fingerprint hashes each module's source text, comments and docstrings included: an edit
# to a comment marks rows as made by other code though their numbers would not change. That
# errs on the side of rerunning, and is simpler and steadier than hashing a normalised syntax
# tree (whose form changes with the Python version).


def _source_file(name: str) -> Path | None:
    """The source file of project module `name` (a package's __init__.py), found from the
    top-level package's own location (the installed one, from a wheel) without importing it;
    None for a name that is not a project module (an attribute `from x import y` named)."""
    import importlib.util

    top, *rest = name.split(".")
    if top not in PROJECT_PACKAGES:
        return None
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return None
    base = Path(spec.origin).parent.joinpath(*rest)
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imported_names(source: str, name: str, is_package: bool) -> set[str]:
    """Every module name the source of module `name` imports, anywhere in it (a name from
    `from a import b` is given as both a and a.b: b may be a module)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = ".".join(package[:len(package) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


@functools.cache
def code_modules(program: str = DEFAULT_PROGRAM) -> dict[str, Path]:
    """The project modules a run of `program` depends on (see NOT_RESULT_CODE), name → source file."""
    found: dict[str, Path] = {}
    todo = [PROGRAMS[program].module]
    while todo:
        name = todo.pop()
        if name in found or name in NOT_RESULT_CODE:
            continue
        path = _source_file(name)
        if path is None:
            continue
        found[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b runs a/__init__
        todo += sorted(_imported_names(path.read_text(encoding="utf-8"), name, path.name == "__init__.py"))
    return dict(sorted(found.items()))


@functools.cache
def code_fingerprint(program: str = DEFAULT_PROGRAM) -> str:
    """SHA-256 over each module's name and the SHA-256 of its source text, for the modules a
    run of `program` depends on."""
    digest = hashlib.sha256()
    for name, path in code_modules(program).items():
        digest.update(f"{name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


@functools.cache
def code_version() -> str:
    """The project's version: the installed distribution's, else pyproject.toml's beside the package."""
    from importlib import metadata

    try:
        return metadata.version("compgen-bound")
    except metadata.PackageNotFoundError:
        pass
    try:
        text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    found = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
    return found.group(1) if found else "unknown"


def short(fingerprint: str | None) -> str:
    return "unknown" if fingerprint is None else fingerprint[:12]


# ----------------------------------------------------------------------------- one run

def _run_argv(argv: tuple[str, ...], run_dir: str, device: str, checkpoint_minutes: float | None,
              program: str = DEFAULT_PROGRAM) -> list[str]:
    """A run's command line as the driver runs it: quiet, one thread, on `device`, writing
    into run_dir (verify.sgd's checkpoints, verify.images.train's saved pipeline)."""
    every = [] if checkpoint_minutes is None else ["--checkpoint-minutes", str(checkpoint_minutes)]
    return [*argv, "--no-progress", "--threads", "1", "--device", device,
            PROGRAMS[program].run_dir_flag, run_dir, *every]


def _failure(e: BaseException, start: float, code: dict) -> dict:
    if isinstance(e, UsageError):  # a grid point the program cannot run (a split it cannot build, say)
        return dict(status="failed", error=str(e), seconds=time.perf_counter() - start, **code)
    tail = "".join(traceback.format_exception(e)[-3:]).strip()
    return dict(status="failed", error=f"{type(e).__name__}: {e}\n{tail}",
                seconds=time.perf_counter() - start, **code)


def run_pack(argvs: list[tuple[str, ...]], run_dirs: list[str], device: str = "cpu",
             checkpoint_minutes: float | None = None) -> list[dict]:
    """Runs of one student's shape trained as one pack (verify.sgd.run_packed), in whatever
    process executes it: run_one's result for each, in order. A pack fails as a whole (each
    of its runs stored as failed with the error); only Ctrl-C escapes."""
    code = dict(version=code_version(), fingerprint=code_fingerprint())
    from verify.learning import sgd

    start = time.perf_counter()
    try:
        args = [sgd.parse_args(_run_argv(a, d, device, checkpoint_minutes)) for a, d in zip(argvs, run_dirs,
                                                                                           strict=True)]
        reports = sgd.run_packed(args)
        # Each run's record as a run of its own computes it: the code's behaviour, not the pack's.
        records = [behaviour.record(DEFAULT_PROGRAM, a) for a in argvs]
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any failure is stored, and the study goes on
        return [_failure(e, start, code)] * len(argvs)
    seconds = time.perf_counter() - start
    return [dict(status="done", report=r, seconds=seconds, behaviour=b, **code)
            for r, b in zip(reports, records, strict=True)]


def run_one(argv: tuple[str, ...], run_dir: str, device: str = "cpu",
            checkpoint_minutes: float | None = None, program: str = DEFAULT_PROGRAM) -> dict:
    """One run of `program`, in whatever process executes it (a Ray worker, or this one),
    writing into run_dir. Returns {"status": "done", "report": …} or {"status":
    "failed", "error": …}, with the version and fingerprint of the code in this process (a
    Ray worker's own: a cluster node with other code is recorded as such) and the run's
    behaviour record (verify.studies.behaviour); only Ctrl-C escapes."""
    code = dict(version=code_version(), fingerprint=code_fingerprint(program))
    module = PROGRAMS[program].load()

    start = time.perf_counter()
    try:
        args = module.parse_args(_run_argv(argv, run_dir, device, checkpoint_minutes, program))
        report = module.run(args)
        seconds = time.perf_counter() - start  # the run's own time, without its behaviour record's
        return dict(status="done", report=report, seconds=seconds, behaviour=behaviour.record(program, argv),
                    **code)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any failure is stored, and the study goes on
        return _failure(e, start, code)


# ----------------------------------------------------------------------------- engines

@dataclass(frozen=True)
class Execution:
    """How a study's runs execute: the device, accelerators per Ray task, the checkpoint
    interval (None: verify.sgd's), and runs per pack (1: each alone)."""

    device: str = "cpu"
    gpus_per_run: float = 0.0
    checkpoint_minutes: float | None = None
    pack: int = 1


def pack_key(run: Run) -> str:
    """Runs with one key can share a pack: all of a run's settings but its seed, split and
    held-out fraction (which change its data, not its student's shape or training)."""
    from verify.studies.store import config_key

    return config_key({k: v for k, v in run.config.items() if k not in ("seed", "split", "held_out")})


def units(pending: list[Run], pack: int) -> list[list[Run]]:
    """The pending runs in packs of at most `pack` runs of one pack_key (in grid order)."""
    groups: dict[str, list[Run]] = {}
    for run in pending:
        groups.setdefault(pack_key(run), []).append(run)
    return [g[i:i + pack] for g in groups.values() for i in range(0, len(g), pack)]


def _run_dir(out: Path, run: Run) -> str:
    return str(out / "runs" / run.key[:16])


def _execute_unit(unit: list[Run], out: Path, how: Execution) -> list[dict]:
    if len(unit) == 1:
        return [run_one(unit[0].argv, _run_dir(out, unit[0]), how.device, how.checkpoint_minutes,
                        unit[0].program)]
    return run_pack([r.argv for r in unit], [_run_dir(out, r) for r in unit], how.device,
                    how.checkpoint_minutes)


def _serial(pending: list[Run], out: Path, how: Execution, on_start):
    for unit in units(pending, how.pack):
        for run in unit:
            on_start(run)
        yield from zip(unit, _execute_unit(unit, out, how), strict=True)


def check_address(address: str) -> None:
    """Refuse at once an --address nothing answers at (Ray itself waits 30 s for a Ray
    Client address and retries a GCS one for minutes, logging as it goes), and one whose
    cluster wants a Ray token this process would not send, or a token other than the one it
    would send (Ray would retry for 20 s, logging a warning a second)."""
    target = _resolve_address(address)
    if target is None:  # `auto` with no cluster to find: ray.init says so itself
        return
    client, host, port = target
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as e:
        raise UsageError(f"--address {address}: nothing answers at {host}:{port} "
                         f"({e.strerror or type(e).__name__})") from None
    check_token(address, client, host, port)


def _resolve_address(address: str) -> tuple[bool, str, int] | None:
    """(a Ray Client address?, host, port) of `address`; `auto` is the cluster Ray would
    join (RAY_ADDRESS, else the last one `ray start` recorded on this machine), None when
    there is none."""
    if address == "auto":
        from ray._private import services

        try:
            address = services.get_ray_address_from_environment("auto", None)
        except Exception:  # noqa: BLE001 - no cluster found: ray.init reports it in its own words
            return None
        if not address or address == "auto":
            return None
    elif "://" in address and not address.startswith("ray://"):
        raise UsageError(f"--address {address!r}: expected auto, ray://HOST:PORT or HOST:PORT")
    client = address.startswith("ray://")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address!r}: expected auto, ray://HOST:PORT or HOST:PORT")
    return client, host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine's loopback interface (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


# Ray's token authentication (Ray 2.60). A cluster wants a token when its head was started
# with RAY_AUTH_MODE=token, or with RAY_AUTH_MODE unset and a token file present
# (~/.ray/auth_token: `ray.init()`'s own local clusters, verify.study's included, write
# one when there is none). A process that joins it by an explicit address sends the token
# only with RAY_AUTH_MODE=token; with `auto`, also when RAY_AUTH_MODE is unset and it finds
# a token. The token is RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else
# ~/.ray/auth_token (ray_token below reads them in Ray's order).
AUTH_MODE, AUTH_TOKEN, AUTH_TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
GIVE_TOKEN = (f"the cluster's token (`ray get-auth-token` on its head prints it) in {AUTH_TOKEN}, or in a "
              f"file named by {AUTH_TOKEN_PATH}, or in ~/.ray/auth_token")
PROBE_TIMEOUT = 5.0  # seconds: one call, answered in milliseconds on a network that works


def ray_token() -> tuple[str | None, str]:
    """(the token Ray would send, or None; where it is from), in Ray 2.60's order:
    RAY_AUTH_TOKEN when set and not empty (stripped), else the file RAY_AUTH_TOKEN_PATH
    names when set and not empty, else ~/.ray/auth_token (each file's text stripped)."""
    if os.environ.get(AUTH_TOKEN):
        return os.environ[AUTH_TOKEN].strip() or None, AUTH_TOKEN
    if os.environ.get(AUTH_TOKEN_PATH):
        path = Path(os.environ[AUTH_TOKEN_PATH])
        where = f"{path} (named by {AUTH_TOKEN_PATH})"
    else:
        path = Path.home() / ".ray" / "auth_token"
        where = str(path)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    return token or None, where


def _rejected(client: bool, host: str, port: int, token: str | None) -> bool:
    """Whether the cluster at host:port (its GCS, or its Ray Client server) refuses one call
    carrying `token` (None: none) as unauthenticated. Plain gRPC, not Ray's client: one
    call, no retries, no log lines; False when it cannot tell (Ray's own connection then
    reports whatever else is wrong)."""
    import grpc

    if client:
        from ray.core.generated import ray_client_pb2

        method = "/ray.rpc.RayletDriver/ClusterInfo"
        ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
        request = ping.SerializeToString()
    else:
        method, request = "/ray.rpc.NodeInfoGcsService/GetClusterId", b""  # an empty GetClusterIdRequest
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(target) as channel:
        try:
            channel.unary_unary(method)(request, timeout=PROBE_TIMEOUT, metadata=metadata)
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


def check_token(address: str, client: bool, host: str, port: int) -> None:
    """Refuse, in one line that says what to set, a cluster that wants a Ray token this
    process would not send, or that rejects the one it would send."""
    mode = os.environ.get(AUTH_MODE)
    token, where = ray_token()
    if mode is not None and mode.lower() == "token" and token is None:
        raise UsageError(f"--address {address}: {AUTH_MODE}=token but there is no Ray token in {where}: "
                         f"give {GIVE_TOKEN}")
    # `auto` sends a token it finds unless RAY_AUTH_MODE is set, or RAY_ADDRESS names the cluster.
    sends = (mode is not None and mode.lower() == "token") or (
        address == "auto" and mode is None and not os.environ.get("RAY_ADDRESS"))
    sent = token if sends else None
    if not _rejected(client, host, port, sent):
        return
    if sent:
        raise UsageError(f"--address {address}: the cluster rejects the Ray token in {where}: "
                         f"give {GIVE_TOKEN}")
    raise UsageError(f"--address {address}: the cluster requires Ray token authentication: "
                     f"set {AUTH_MODE}=token"
                     + (f" (Ray then sends the token in {where}; the cluster's own is what "
                        "`ray get-auth-token` prints on its head)" if token else f" and give {GIVE_TOKEN}"))


@contextlib.contextmanager
def _loopback_only():
    """Ray on this machine's loopback interface alone, for what starts or joins Ray inside:
    its node address is 127.0.0.1 and every process it starts listens there. On Linux Ray
    otherwise replaces 127.0.0.1 (in --node-ip-address, _node_ip_address and a cluster's
    address alike) by the machine's network address and listens on every interface; its
    single-machine mode (the default on macOS and Windows) is the one switch that keeps it
    on 127.0.0.1, read from the environment by the processes it starts and from
    ray_constants in this one."""
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    saved = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved[0]
        ray_constants.ENABLE_RAY_CLUSTER = saved[1]


def connect_ray(address: str | None, workers: int | None) -> bool:
    """Join the cluster at `address`, or start a local one (one run per core, or
    `workers`) on 127.0.0.1 alone; True when this call started Ray (and so must shut it
    down). A cluster on this machine's loopback address is joined over loopback."""
    import logging

    import ray

    if ray.is_initialized():
        return False
    target = _resolve_address(address) if address else None
    local = address is None or (target is not None and not target[0] and is_loopback(target[1]))
    where = f"--address {address}" if address else "a local Ray cluster"
    try:
        with warnings.catch_warnings(), _loopback_only() if local else contextlib.nullcontext():
            warnings.simplefilter("ignore")  # Ray warns before it raises; the error says it in one line
            # "local": start a cluster even when RAY_ADDRESS names one, or `ray start` ran here.
            ray.init(address=address or "local", num_cpus=None if address else workers,
                     include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except ray.exceptions.AuthenticationError as e:  # what check_token could not foresee
        raise UsageError(f"{where}: Ray token authentication failed ({e.message}); give {GIVE_TOKEN}, "
                         f"with {AUTH_MODE}=token") from None
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UsageError(f"{where}: cannot start or reach Ray ({str(e).splitlines()[0]})") from None
    return True


def check_gpus(gpus_per_run: float, address: str | None) -> None:
    """Refuse, before any run is submitted, --gpus-per-run G on a cluster none of whose
    nodes has G GPUs (Ray would hold every run pending for ever: a run's GPUs are on one node)."""
    import ray

    gpus = [node["Resources"].get("GPU", 0.0) for node in ray.nodes() if node["Alive"]]
    if max(gpus, default=0.0) >= gpus_per_run:
        return
    where = f"the cluster at {address}" if address else "the local Ray cluster"
    most = f" (at most {max(gpus):g} on one node)" if len(gpus) > 1 and sum(gpus) else ""
    raise UsageError(f"--gpus-per-run {gpus_per_run:g}: {where} has {sum(gpus):g} GPUs{most}; "
                     f"a run needs {gpus_per_run:g} on one node")


def _ray(pending: list[Run], out: Path, how: Execution, on_start):
    """One Ray task per run, or per pack, on the cluster connect_ray joined; results as they
    finish."""
    import ray

    # Named for what it runs: Ray logs ":task_name:run_one" (or run_pack) as a task begins.
    task = ray.remote(_execute_unit)
    one, pack = (task.options(name=name, num_cpus=1, num_gpus=how.gpus_per_run, max_retries=0)
                 for name in ("run_one", "run_pack"))
    in_flight = {}
    for unit in units(pending, how.pack):
        for run in unit:
            on_start(run)
        in_flight[(one if len(unit) == 1 else pack).remote(unit, out, how)] = unit
    while in_flight:
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        unit = in_flight.pop(ready[0])
        try:
            results = ray.get(ready[0])
        except ray.exceptions.RayError as e:  # the worker died (killed, out of memory)
            error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            results = [dict(status="failed", error=error, seconds=None, version=None,
                            fingerprint=None)] * len(unit)
        yield from zip(unit, results, strict=True)


def run_study(name: str, scale: str, out: Path, *, engine: str = "ray", address: str | None = None,
              gpus_per_run: float = 0.0, workers: int | None = None, retry_failed: bool = False,
              rerun_stale: bool = False, progress: bool | None = None, pack: int = 1,
              checkpoint_minutes: float | None = None) -> dict:
    """Run every run of the study not yet done (and the failed ones with `retry_failed`,
    those made by other or unknown code with `rerun_stale`); each result is committed as
    it arrives. Ray is started only when something is left to run."""
    from verify.studies.store import RunStore

    study, runs = expand(name, scale)
    program = runs[0].program  # a grid has at least one point
    current = code_fingerprint(program)
    stored: dict[str, dict] = {}
    if (out / "study.sqlite").is_file():
        with RunStore(out / "study.sqlite", readonly=True) as store:
            stored = {r["key"]: r for r in store.rows()}
    status = {k: r["status"] for k, r in stored.items()}
    # A run made by other code is stale unless its behaviour record replays the same now (a
    # failed run has none: its fingerprint decides).
    judge = behaviour.Judge(program, current)
    made_here = {k: (judge(r) == behaviour.CURRENT if r["status"] == "done"
                     else r["code_fingerprint"] == current) for k, r in stored.items()}

    def is_pending(key: str) -> bool:
        if status.get(key) not in ("done", "failed"):  # never run, or left running by a killed driver
            return True
        if rerun_stale and not made_here[key]:
            return True
        return retry_failed and status[key] == "failed"

    pending = [r for r in runs if is_pending(r.key)]
    kept = [r for r in runs if not is_pending(r.key)]
    n_done = sum(status[r.key] == "done" for r in kept)
    stale = [stored[r.key]["code_fingerprint"] for r in kept
             if status[r.key] == "done" and not made_here[r.key]]
    counts = dict(runs=len(runs), already_done=n_done, skipped_failed=len(kept) - n_done,
                  done=0, failed=0, violated=0, stale=len(stale),
                  stale_unknown=stale.count(None), stale_fingerprints=sorted({f for f in stale if f}),
                  code_version=code_version(), code_fingerprint=current, program=program)
    started_ray = connect_ray(address, workers) if engine == "ray" and pending else False
    try:
        if engine == "ray" and pending and gpus_per_run > 0:
            check_gpus(gpus_per_run, address)
        out.mkdir(parents=True, exist_ok=True)
        with RunStore(out / "study.sqlite") as store:
            bar = cli.progress(len(runs), f"{study} ({scale})", progress, unit="run")
            bar.update(len(runs) - len(pending))
            execute = _ray if engine == "ray" else _serial
            how = Execution("cuda" if gpus_per_run > 0 else "cpu", gpus_per_run, checkpoint_minutes, pack)
            start = time.perf_counter()
            for run, result in execute(pending, out, how,
                                       lambda run: store.start(run.key, study, scale, run.config)):
                code = dict(version=result["version"], fingerprint=result["fingerprint"])
                if result["status"] == "done":
                    store.finish(run.key, result["report"], result["seconds"], behaviour=result["behaviour"],
                                 **code)
                    counts["done"] += 1
                    # None: the family has no construction to violate (the preference grid).
                    # (A program with no construction reports none.)
                    counts["violated"] += result["report"].get("construction_within_certificate") is False
                else:
                    store.fail(run.key, result["error"], result["seconds"], **code)
                    counts["failed"] += 1
                bar.set_postfix_str(f"{counts['failed']} failed", refresh=False)
                bar.update(1)
            bar.close()
            counts["seconds"] = time.perf_counter() - start
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    return dict(study=study, scale=scale, store=str(out / "study.sqlite"), engine=engine, **counts)


# ----------------------------------------------------------------------------- CLI

def default_out(name: str, scale: str) -> Path:
    """Where `run` writes by default: verify/studies/results/STUDY/SCALE under the working folder."""
    return RESULTS_DIR / Path(name).stem / scale


def stored_out(name: str, scale: str) -> Path:
    """Where `report`, `export`, `list` and figure 9 read by default: the working folder's
    store when it has one, else the committed store shipped with the package (when that has
    one), else the working folder's (which then holds nothing: the caller says so)."""
    here = default_out(name, scale)
    if (here / "study.sqlite").is_file():
        return here
    shipped = PACKAGED_RESULTS_DIR / Path(name).stem / scale
    return shipped if (shipped / "study.sqlite").is_file() else here


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.study", __doc__)
    sub = p.add_subparsers(dest="command", required=True,
                           metavar="{run,report,export,list,budget,readme,record-behaviour}")

    def common(sp, scale_default="cpu"):
        sp.add_argument("study", help=f"a study name ({', '.join(study_names())}) or a .yaml path"
                                      + ("; `all` runs every study in turn (each resumes where its store "
                                         "stopped)" if sp.prog.endswith(" run") else ""))
        sp.add_argument("--scale", default=scale_default, choices=SCALES,
                        help=f"paper (the official grid and length), cpu (reduced, converges on 2 cores) "
                             f"or smoke (seconds) (default {scale_default})")
        sp.add_argument("--out", metavar="DIR",
                        help="the study's folder: study.sqlite and runs/ (default "
                             "verify/studies/results/STUDY/SCALE under the working folder; report "
                             "and export read the committed store shipped with the package when "
                             "that folder has none)")

    r = sub.add_parser("run", help="run every grid point not yet done")
    common(r)
    r.add_argument("--engine", default="ray", choices=ENGINES,
                   help="ray (one task per run; a local cluster unless --address) or serial (in this "
                        "process) (default ray)")
    r.add_argument("--address",
                   help="an existing Ray cluster: HOST:PORT (its head, as `ray start --head` names it), "
                        "ray://HOST:10001, or auto (default: start a local one, on 127.0.0.1). A cluster "
                        "with token authentication needs RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN, "
                        "a file named by RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token)")
    r.add_argument("--workers", type=positive_int,
                   help="runs at once on the local Ray cluster (default: one per core)")
    r.add_argument("--gpus-per-run", type=non_negative_float, default=0.0,
                   help="accelerators Ray gives each run (fractions share one); runs train on cuda when "
                        "> 0 (default 0)")
    r.add_argument("--pack", type=positive_int, default=1,
                   help="train up to N runs that differ only in seed, split or held-out fraction as one "
                        "batched model (one Ray task, one accelerator slot; for GPUs, where small runs "
                        "leave the device idle; on a CPU it does not pay) (default 1: each run alone)")
    r.add_argument("--checkpoint-minutes", type=positive_float,
                   help="wall-clock minutes between a run's checkpoints (default verify.sgd's, 10)")
    r.add_argument("--retry-failed", action="store_true", help="run the failed runs again too")
    r.add_argument("--rerun-stale", action="store_true",
                   help="run again the runs whose stored result was made by other code (another "
                        "code fingerprint) or unknown code (stored before runs recorded it)")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    cli.add_common(r, threads_default="1 per run (each run is one process)")
    rep = sub.add_parser("report", help="the paper's effects table, from the store")
    common(rep)
    rep.add_argument("--json", action="store_true", help="print the table as JSON")
    ex = sub.add_parser("export", help="write every run as CSV")
    common(ex)
    ex.add_argument("--csv", metavar="FILE", help="where to write (default DIR/runs.csv)")
    sub.add_parser("list", help="the studies, their runs per scale, and what the stores hold")
    b = sub.add_parser("budget", help="what regenerating a scale costs: core and wall time per study, in "
                                      "all and left, from the stored run times")
    b.add_argument("--scale", default="cpu", choices=SCALES, help="the scale (default cpu)")
    b.add_argument("--workers", type=positive_int, default=2,
                   help="runs at once, as `run --workers` (default 2: the CI machine's cores)")
    b.add_argument("--json", action="store_true", help="print the table as JSON")
    md = sub.add_parser("readme", help="regenerate the README's result blocks from the committed stores")
    md.add_argument("--file", metavar="README", help="the file whose `<!-- results: NAME -->` blocks to "
                                                   "rewrite (default: the checkout's README.md)")
    rec = sub.add_parser("record-behaviour",
                         help="record the behaviour of the runs this code made before runs recorded it")
    common(rec)
    cli.add_common(rec, threads_default="1")
    return p


ALL = "all"  # `run all`: every study in turn, each into its own default folder


def parse_args(argv=None):
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command in ("list", "budget"):
        return args
    if args.command == "readme":
        from verify.studies import summary

        args.file = Path(args.file) if args.file else summary.readme_path()
        if not args.file.is_file():
            raise UsageError(f"no {args.file}: `readme` rewrites a checkout's README (give --file)")
        return args
    every = args.command == "run" and args.study == ALL
    if not every:
        study_file(args.study)
    if args.command == "run":
        if args.address and args.engine != "ray":
            raise UsageError("--address applies to --engine ray")
        if args.address and args.workers:
            raise UsageError("--workers sizes a local Ray cluster; an existing one (--address) has its own")
        if args.gpus_per_run > 0 and args.engine == "serial":
            raise UsageError("--gpus-per-run applies to --engine ray")
        if args.engine == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                raise UsageError("--engine ray needs Ray: pip install -e '.[studies]' (or use --engine "
                                 "serial)") from None
        if args.address:
            check_address(args.address)
    if every:
        if args.out or args.pack > 1:
            raise UsageError(f"{'--out' if args.out else '--pack'} applies to one study; `run all` runs "
                             "each study alone into its own folder (verify/studies/results/STUDY/SCALE)")
        args.studies = study_names()
        for name in args.studies:  # every grid is checked before any run
            _, runs = expand(name, args.scale)
            if not PROGRAMS[runs[0].program].sgd_grid and args.checkpoint_minutes is not None:
                raise UsageError(f"--checkpoint-minutes applies to verify.sgd's studies; {name} runs "
                                 f"{runs[0].program}")
        return args
    # report and export read `store` (the working folder's, else the committed one in the
    # package) and write into `out` (always the working folder's, or --out).
    args.store = Path(args.out) if args.out else stored_out(args.study, args.scale)
    reads = ("report", "export", "record-behaviour")
    if args.command in reads and not (args.store / "study.sqlite").is_file():
        raise UsageError(f"no results for {args.study} ({args.scale}) in {args.store}: run "
                         f"`python -m verify.study run {args.study} --scale {args.scale}` first")
    if args.command == "run":  # a bad grid is refused before any work, and before --out is made
        _, runs = expand(args.study, args.scale)
        program = PROGRAMS[runs[0].program]
        if not program.sgd_grid and (args.pack > 1 or args.checkpoint_minutes is not None):
            flag = "--pack" if args.pack > 1 else "--checkpoint-minutes"
            raise UsageError(f"{flag} applies to verify.sgd's studies; {args.study} runs {program.name}")
        if args.pack > 1:
            check_packable_grid(runs)
    args.out = cli.prepare_out_dir(args.out or default_out(args.study, args.scale), "--out")
    return args


def work(args) -> int:
    if args.command == "list":
        cli.emit(format_list())
        return cli.EXIT_OK
    if args.command == "readme":
        from verify.studies import summary

        changed = summary.regenerate(args.file)
        cli.emit(f"{args.file}: {len(changed)} result blocks changed" + (f" ({', '.join(changed)})" if changed
                                                                          else ""))
        return cli.EXIT_OK
    if args.command == "budget":
        from verify.studies import budget

        table = budget.budget_table(args.scale, args.workers)
        cli.emit(cli.to_json(table) if args.json else budget.format_budget(table))
        return cli.EXIT_OK
    if args.command == "run":
        cli.set_threads(args.threads, 1)
        violated = False
        for name in getattr(args, "studies", None) or [args.study]:
            out = args.out if args.study != ALL else cli.prepare_out_dir(default_out(name, args.scale),
                                                                         "--out")
            summary = run_study(name, args.scale, out, engine=args.engine, address=args.address,
                                gpus_per_run=args.gpus_per_run, workers=args.workers,
                                retry_failed=args.retry_failed, rerun_stale=args.rerun_stale,
                                progress=False if args.no_progress else None, pack=args.pack,
                                checkpoint_minutes=args.checkpoint_minutes)
            cli.emit(cli.to_json(summary) if args.json else format_summary(summary))
            violated |= bool(summary["violated"])
        return cli.EXIT_VIOLATED if violated else cli.EXIT_OK
    program = study_program(args.study)
    if args.command == "record-behaviour":
        counts = behaviour.record_missing(program, args.store / "study.sqlite", code_fingerprint(program),
                                          progress=False if args.no_progress else None)
        cli.emit(f"{counts['recorded']} behaviour records written to {args.store / 'study.sqlite'}; "
                 f"{counts['had']} runs had one; {counts['other_code']} runs by other or unknown code have "
                 "none (only a rerun records theirs)" if not counts["program_has_none"] else
                 f"{program} records no behaviour: its runs are judged by their code fingerprint alone")
        return cli.EXIT_OK
    report = PROGRAMS[program].report_module()
    if args.command == "report":
        name, runs = expand(args.study, args.scale)
        table = report.effects_table(name, args.scale, args.store, keys={r.key for r in runs},
                                     fingerprint=code_fingerprint(program))
        report.write_table(table, args.out)
        cli.emit(cli.to_json(table) if args.json else report.format_markdown(table))
        return cli.EXIT_OK
    path = Path(args.csv) if args.csv else args.out / "runs.csv"
    n = report.export_csv(args.store, path)
    cli.emit(f"{n} runs written to {path}")
    return cli.EXIT_OK


def check_packable_grid(runs: list[Run]) -> None:
    """--pack takes runs of one student each: refuse a grid whose runs train several."""
    for run in runs:
        c = run.config
        if c.get("student", "mlp") == "mlp" and len(c.get("shapes") or []) != 1:
            raise UsageError(f"--pack: a run of this grid trains {len(c.get('shapes') or [])} students of "
                             f"different shapes (--shapes {' '.join(c.get('shapes') or [])}); a pack takes "
                             "runs of one student each (give the grid one shape, or width and depth)")


def format_summary(s: dict) -> str:
    lines = [f"{s['study']} ({s['scale']}, {s['engine']}): {s['runs']} runs; {s['done']} done now, "
             f"{s['already_done']} already done, {s['failed']} failed"
             + (f", {s['skipped_failed']} failed before (--retry-failed runs them)"
                if s["skipped_failed"] else "")
             + f" ({s['seconds']:.0f} s)",
             f"store: {s['store']}"]
    if s["violated"]:
        lines.append(f"{s['violated']} runs: the construction VIOLATED its certificate")
    if s["stale"]:
        lines.append(stale_line(s["stale"], n_done(s), s["stale_unknown"], s["stale_fingerprints"],
                                s["code_fingerprint"]))
    return "\n".join(lines)


def n_done(s: dict) -> int:
    return s["done"] + s["already_done"]


def stale_line(n_stale: int, n_all: int, n_unknown: int, others: list[str], current: str,
               rerun: str = "--rerun-stale") -> str:
    """The line `run` and `report` print when stored results were made by other or unknown code."""
    parts = []
    if n_stale - n_unknown:
        parts.append(f"{n_stale - n_unknown} by other code (fingerprint "
                     f"{', '.join(short(f) for f in others)})")
    if n_unknown:
        parts.append(f"{n_unknown} by unknown code (stored before runs recorded their code)")
    # This code's fingerprint is named only beside other fingerprints: a table of unknown
    # code alone (the committed stores) then reads the same whatever code writes it.
    this = f" (fingerprint {short(current)})" if n_stale - n_unknown else ""
    return (f"{n_stale} of {n_all} done runs were not made by this code{this}: "
            f"{' and '.join(parts)}; rerun them with {rerun}")


def format_list() -> str:
    from verify.studies.store import RunStore

    lines, width = [], max(map(len, study_names()))
    for name in study_names():
        parts = []
        for scale in SCALES:
            _, runs = expand(name, scale)
            store = stored_out(name, scale) / "study.sqlite"
            held = ""
            if store.is_file():
                with RunStore(store, readonly=True) as s:
                    rows = s.rows()
                st = [r["status"] for r in rows]
                judge = behaviour.Judge(runs[0].program, code_fingerprint(runs[0].program))
                stale = sum(r["status"] == "done" and judge(r) != behaviour.CURRENT for r in rows)
                held = (f" ({st.count('done')} done, {st.count('failed')} failed"
                        + (f"; {stale} made by other or unknown code" if stale else "") + ")")
            parts.append(f"{scale} {len(runs)}{held}")
        lines.append(f"{name:<{width}} " + ", ".join(parts))
    return "\n".join(lines)


def main(argv=None) -> int:
    return cli.main_of("verify.study", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
