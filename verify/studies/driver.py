"""python -m verify.study: the paper's sweeps as studies, run on Ray or serially, stored in SQLite.

A study is a grid file in the official sweeps' YAML format (`method: grid`, `parameters:
name: {values: [...]}` or `{value: x}`) whose names are verify.sgd's flags (`held_out` for
--held-out; `width` and `depth` make an MLP of `depth` equal layers). Its `parameters`
are the paper's grid and length; `scales: cpu:` and `scales: smoke:` override some of them.
Each grid point is one verify.sgd run, keyed by a hash of its resolved configuration; its
stored result also records the code that made it (the project's version and a fingerprint
of the modules that train and score a run), so results made by other code are marked.

  run STUDY --scale cpu    run every grid point not yet done (one Ray task per run)
  report STUDY             the paper's effects table from the store, without training
  export STUDY             every run as CSV
  list                     the studies and what their stores hold

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
import functools
import hashlib
import itertools
import re
import socket
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from verify import cli
from verify.cli import UsageError, non_negative_float, positive_int

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
class Run:
    key: str
    params: dict  # the grid point, as the study names it
    config: dict  # the resolved verify.sgd configuration (what the key hashes)
    argv: tuple[str, ...]  # the verify.sgd arguments


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


def sgd_parameters() -> set[str]:
    """Every parameter a study may set: verify.sgd's destinations, and width/depth."""
    from verify.learning.sgd import RUNTIME

    return (set(_flags()) - set(RUNTIME) - {"help"}) | set(SHAPE_PARAMETERS)


def _grid_entries(where: str, parameters, known) -> dict[str, list]:
    if not isinstance(parameters, dict) or not parameters:
        raise UsageError(f"{where}: `parameters` must be a non-empty mapping of name: {{values: [...]}}")
    out = {}
    for name, entry in parameters.items():
        if name not in known:
            raise UsageError(f"{where}: unknown parameter {name!r}; a study sets verify.sgd's flags "
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


def load_study(name: str, scale: str) -> tuple[str, dict[str, list]]:
    """(the study's name, its grid at `scale`: parameter → values), checked."""
    import yaml

    path = study_file(name)
    try:
        study = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(study, dict) or study.get("method") != "grid":
        raise UsageError(f"{path}: a study is a grid file (`method: grid`, `parameters: ...`)")
    if scale not in SCALES:
        raise UsageError(f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
    known = sgd_parameters()
    grid = _grid_entries(str(path), study.get("parameters"), known)
    scales = study.get("scales") or {}
    unknown = set(scales) - set(SCALES[1:])
    if unknown:
        raise UsageError(f"{path}: unknown scale {sorted(unknown)[0]!r} under `scales` (allowed: cpu, smoke)")
    if scale != "paper":
        if scale not in scales:
            raise UsageError(f"{path}: the study has no {scale!r} scale")
        grid |= _grid_entries(f"{path} (scale {scale})", (scales[scale] or {}).get("parameters"), known)
    return str(study.get("name") or path.stem), grid


@functools.cache
def _flags() -> dict[str, str]:
    """verify.sgd's flag for each destination (--held-out for held_out)."""
    from verify.learning.sgd import build_parser

    return {a.dest: a.option_strings[-1] for a in build_parser()._actions if a.option_strings}


def own_parameters(params: dict) -> dict:
    """The grid point's parameters that apply to its run. A grid that crosses students (the
    scaling-law sweep: mlp and transformer) sets both students' sizes; each run takes its
    own student's. Likewise a grid that crosses task families sets each family's own
    settings; each run takes its own family's."""
    from verify.learning.sgd import DEFAULT_FAMILY, FAMILY_FLAGS

    student = params.get("student", "mlp")
    params = {k: v for k, v in params.items() if k not in STUDENT_ONLY or student in STUDENT_ONLY[k]}
    family = params.get("family", DEFAULT_FAMILY)
    return {k: v for k, v in params.items()
            if not any(k in own for f, own in FAMILY_FLAGS.items() if f != family)}


def sgd_argv(params: dict) -> list[str]:
    """verify.sgd's arguments for one grid point."""
    flags = _flags()
    params = own_parameters(params)
    argv: list[str] = []
    for name, value in params.items():
        if name in SHAPE_PARAMETERS:
            continue
        argv.append(flags[name])
        argv += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if "width" in params or "depth" in params:
        width, depth = params.get("width", 1024), params.get("depth", 4)
        argv += ["--shapes", "custom", "--widths", *[str(width)] * int(depth)]
    return argv


def expand(name: str, scale: str) -> tuple[str, list[Run]]:
    """Every run of the study at `scale`, resolved by verify.sgd's own parser (so a grid
    point it would refuse is refused here, before any work)."""
    from verify.learning import sgd
    from verify.studies.store import config_key

    study, grid = load_study(name, scale)
    runs, seen, used = [], set(), set()
    for values in itertools.product(*grid.values()):
        params = dict(zip(grid, values, strict=True))
        used |= set(own_parameters(params))
        argv = sgd_argv(params)
        try:
            args = sgd.parse_args([*argv, "--no-progress"])
        except UsageError as e:
            raise UsageError(f"study {study}, grid point {params}: {e}") from None
        config = sgd.run_config(args)
        key = config_key(config)
        if key not in seen:
            seen.add(key)
            runs.append(Run(key, params, config, tuple(argv)))
    # A parameter that no grid point's student or family takes would be silently ignored.
    unused = sorted(set(grid) - used)
    if unused:
        raise UsageError(f"study {study}: parameter {unused[0]!r} applies to no grid point (its task family "
                         "or student is never selected)")
    return study, runs


# ----------------------------------------------------------------------------- the code a run rests on

PROJECT_PACKAGES = ("theory", "constructions", "verify", "paper_figures")
RUN_MODULE = "verify.learning.sgd"  # a run is verify.sgd's run(), called by run_one below
# The modules that determine a run's result are derived, not listed by hand: every project
# module verify.sgd imports (at module level or inside a function), followed transitively
# through the imports written in each module's source, with the packages' __init__ files
# (code_modules() below), so a module a refactor adds or moves is covered without an edit
# here. Today that is verify.learning (sgd, train, metrics, students, families), verify.measure
# (the sup error) and names;
# constructions.shallow, base, names (the construction each run is compared with) and
# constructions.tasks.hyperteacher, encodings, splits, names (teacher, encodings, splits);
# theory.bounds (the certificate). tests/test_study.py checks that every project module a
# real run of each student loads is among them or below. These are left out, because they
# do not change a stored result once its configuration (what the key hashes) is fixed:
NOT_RESULT_CODE = {
    "verify.cli": "argument checks, output, atomic files, progress bars: what the parser "
                  "resolves is the configuration, and the key hashes it",
    "verify.studies.effects": "verify.sgd uses it only to average several seeds on its own command line",
    "verify.studies.driver": "the driver: what it passes a run is the configuration or a runtime setting",
    "verify.studies.store": "where results are kept, not how they are made",
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
def code_modules() -> dict[str, Path]:
    """The project modules a run's result depends on (see NOT_RESULT_CODE), name → source file."""
    found: dict[str, Path] = {}
    todo = [RUN_MODULE]
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
def code_fingerprint() -> str:
    """SHA-256 over each result-determining module's name and the SHA-256 of its source text."""
    digest = hashlib.sha256()
    for name, path in code_modules().items():
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

def run_one(argv: tuple[str, ...], run_dir: str, device: str = "cpu") -> dict:
    """One verify.sgd run, in whatever process executes it (a Ray worker, or this one),
    checkpointing into run_dir. Returns {"status": "done", "report": …} or {"status":
    "failed", "error": …}, with the version and fingerprint of the code in this process (a
    Ray worker's own: a cluster node with other code is recorded as such); only Ctrl-C
    escapes."""
    code = dict(version=code_version(), fingerprint=code_fingerprint())
    from verify.learning import sgd

    start = time.perf_counter()
    try:
        args = sgd.parse_args([*argv, "--no-progress", "--threads", "1", "--device", device,
                               "--checkpoint", run_dir])
        return dict(status="done", report=sgd.run(args), seconds=time.perf_counter() - start, **code)
    except KeyboardInterrupt:
        raise
    except UsageError as e:  # a grid point verify.sgd cannot run (a split it cannot build, say)
        return dict(status="failed", error=str(e), seconds=time.perf_counter() - start, **code)
    except Exception as e:  # noqa: BLE001 - any failure is stored, and the study goes on
        tail = "".join(traceback.format_exception(e)[-3:]).strip()
        return dict(status="failed", error=f"{type(e).__name__}: {e}\n{tail}",
                    seconds=time.perf_counter() - start, **code)


# ----------------------------------------------------------------------------- engines

def _serial(pending: list[Run], out: Path, device: str, gpus_per_run: float, on_start):
    for run in pending:
        on_start(run)
        yield run, run_one(run.argv, str(out / "runs" / run.key[:16]), device)


def check_address(address: str) -> None:
    """Refuse at once an --address nothing answers at: Ray itself waits 30 s for a Ray
    Client address and retries a GCS one for minutes, logging as it goes."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address!r}: expected auto, ray://HOST:PORT or HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UsageError(f"--address {address}: nothing answers at {host}:{port} "
                         f"({e.strerror or type(e).__name__})") from None


def connect_ray(address: str | None, workers: int | None) -> bool:
    """Join the cluster at `address`, or start a local one (one run per core, or
    `workers`); True when this call started Ray (and so must shut it down)."""
    import logging

    import ray

    if ray.is_initialized():
        return False
    try:
        with warnings.catch_warnings():  # Ray warns before it raises; the error says it in one line
            warnings.simplefilter("ignore")
            ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"--address {address}" if address else "a local Ray cluster"
        raise UsageError(f"{where}: cannot start or reach Ray ({str(e).splitlines()[0]})") from None
    return True


def _ray(pending: list[Run], out: Path, device: str, gpus_per_run: float, on_start):
    """One Ray task per run on the cluster connect_ray joined; results as they finish."""
    import ray

    task = ray.remote(run_one).options(num_cpus=1, num_gpus=gpus_per_run, max_retries=0)
    in_flight = {}
    for run in pending:
        on_start(run)
        in_flight[task.remote(run.argv, str(out / "runs" / run.key[:16]), device)] = run
    while in_flight:
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        run = in_flight.pop(ready[0])
        try:
            result = ray.get(ready[0])
        except ray.exceptions.RayError as e:  # the worker died (killed, out of memory)
            error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            result = dict(status="failed", error=error, seconds=None, version=None, fingerprint=None)
        yield run, result


def run_study(name: str, scale: str, out: Path, *, engine: str = "ray", address: str | None = None,
              gpus_per_run: float = 0.0, workers: int | None = None, retry_failed: bool = False,
              rerun_stale: bool = False, progress: bool | None = None) -> dict:
    """Run every run of the study not yet done (and the failed ones with `retry_failed`,
    those made by other or unknown code with `rerun_stale`); each result is committed as
    it arrives. Ray is started only when something is left to run."""
    from verify.studies.store import RunStore

    study, runs = expand(name, scale)
    current = code_fingerprint()
    status: dict[str, str] = {}
    made_by: dict[str, str | None] = {}
    if (out / "study.sqlite").is_file():
        with RunStore(out / "study.sqlite", readonly=True) as store:
            status, made_by = store.statuses(), store.fingerprints()

    def is_pending(key: str) -> bool:
        if status.get(key) not in ("done", "failed"):  # never run, or left running by a killed driver
            return True
        if rerun_stale and made_by.get(key) != current:
            return True
        return retry_failed and status[key] == "failed"

    pending = [r for r in runs if is_pending(r.key)]
    kept = [r for r in runs if not is_pending(r.key)]
    n_done = sum(status[r.key] == "done" for r in kept)
    stale = [made_by.get(r.key) for r in kept if status[r.key] == "done" and made_by.get(r.key) != current]
    counts = dict(runs=len(runs), already_done=n_done, skipped_failed=len(kept) - n_done,
                  done=0, failed=0, violated=0, stale=len(stale),
                  stale_unknown=stale.count(None), stale_fingerprints=sorted({f for f in stale if f}),
                  code_version=code_version(), code_fingerprint=current)
    started_ray = connect_ray(address, workers) if engine == "ray" and pending else False
    try:
        out.mkdir(parents=True, exist_ok=True)
        with RunStore(out / "study.sqlite") as store:
            bar = cli.progress(len(runs), f"{study} ({scale})", progress, unit="run")
            bar.update(len(runs) - len(pending))
            execute = _ray if engine == "ray" else _serial
            start = time.perf_counter()
            for run, result in execute(pending, out, "cuda" if gpus_per_run > 0 else "cpu", gpus_per_run,
                                       lambda run: store.start(run.key, study, scale, run.config)):
                code = dict(version=result["version"], fingerprint=result["fingerprint"])
                if result["status"] == "done":
                    store.finish(run.key, result["report"], result["seconds"], **code)
                    counts["done"] += 1
                    # None: the family has no construction to violate (the preference grid).
                    counts["violated"] += result["report"]["construction_within_certificate"] is False
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
    sub = p.add_subparsers(dest="command", required=True, metavar="{run,report,export,list}")

    def common(sp, scale_default="cpu"):
        sp.add_argument("study", help=f"a study name ({', '.join(study_names())}) or a .yaml path")
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
    r.add_argument("--address", help="an existing Ray cluster: auto, or ray://HOST:10001 (default: start a "
                                     "local one)")
    r.add_argument("--workers", type=positive_int,
                   help="runs at once on the local Ray cluster (default: one per core)")
    r.add_argument("--gpus-per-run", type=non_negative_float, default=0.0,
                   help="accelerators Ray gives each run (fractions share one); runs train on cuda when "
                        "> 0 (default 0)")
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
    return p


def parse_args(argv=None):
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command == "list":
        return args
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
    # report and export read `store` (the working folder's, else the committed one in the
    # package) and write into `out` (always the working folder's, or --out).
    args.store = Path(args.out) if args.out else stored_out(args.study, args.scale)
    if args.command in ("report", "export") and not (args.store / "study.sqlite").is_file():
        raise UsageError(f"no results for {args.study} ({args.scale}) in {args.store}: run "
                         f"`python -m verify.study run {args.study} --scale {args.scale}` first")
    args.out = cli.prepare_out_dir(args.out or default_out(args.study, args.scale), "--out")
    if args.command == "run":
        expand(args.study, args.scale)  # a bad grid is refused before any work
    return args


def work(args) -> int:
    if args.command == "list":
        cli.emit(format_list())
        return cli.EXIT_OK
    if args.command == "run":
        cli.set_threads(args.threads, 1)
        summary = run_study(args.study, args.scale, args.out, engine=args.engine, address=args.address,
                            gpus_per_run=args.gpus_per_run, workers=args.workers,
                            retry_failed=args.retry_failed, rerun_stale=args.rerun_stale,
                            progress=False if args.no_progress else None)
        cli.emit(cli.to_json(summary) if args.json else format_summary(summary))
        return cli.EXIT_VIOLATED if summary["violated"] else cli.EXIT_OK
    from verify.studies import effects

    if args.command == "report":
        name, runs = expand(args.study, args.scale)
        table = effects.effects_table(name, args.scale, args.store, keys={r.key for r in runs},
                                      fingerprint=code_fingerprint())
        effects.write_table(table, args.out)
        cli.emit(cli.to_json(table) if args.json else effects.format_markdown(table))
        return cli.EXIT_OK
    path = Path(args.csv) if args.csv else args.out / "runs.csv"
    n = effects.export_csv(args.store, path)
    cli.emit(f"{n} runs written to {path}")
    return cli.EXIT_OK


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
                current = code_fingerprint()
                stale = sum(r["status"] == "done" and r["code_fingerprint"] != current for r in rows)
                held = (f" ({st.count('done')} done, {st.count('failed')} failed"
                        + (f"; {stale} made by other or unknown code" if stale else "") + ")")
            parts.append(f"{scale} {len(runs)}{held}")
        lines.append(f"{name:<{width}} " + ", ".join(parts))
    return "\n".join(lines)


def main(argv=None) -> int:
    return cli.main_of("verify.study", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
