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
                           a scale's whole evidence; with --until-decided, a study with a
                           sequential plan then adds seeds, look by look, to the cells of its
                           undecided claims only (verify.studies.staged)
  report STUDY             the paper's effects table from the store, without training (the
                           program's own report: verify.images.train's gives the correlation)
  export STUDY             every run as CSV
  compare STUDY --out DIR  your rerun's table beside the committed one: row by row, the means
                           (within verify.studies.compare.TOLERANCE) and the verdicts
  list                     the studies and what their stores hold (--out ROOT: your stores,
                           ROOT/STUDY/SCALE)
  budget                   what a scale costs, grids and plans' next looks (verify.studies.budget)
  readme                   rewrite the README's result blocks (verify.studies.summary)
  record-behaviour STUDY   record the behaviour of runs this code made before runs did, and
                           replay the records of runs made by other code: each this code
                           reproduces is attested in the store (a fresh clone then reads it
                           current without replaying)

Exit codes: 0 done, 1 a construction violated its certificate in some run, 2 usage
error, 3 internal error, 130 interrupted. A run that fails is stored as failed (with its
error) and the others go on; --retry-failed runs it again, and --rerun-stale reruns the
runs made by other (or unknown) code. One `run` at a time holds a study's folder
(verify.studies.folder_lock): a second refuses with exit 2, naming the first, or with --wait
waits for it. A damaged store (empty, truncated, not SQLite, another schema, a report this code
cannot read) is a usage error too: one line naming the file, which is left as it was.

This module runs a study (run_study) and holds the command line; the study side's other jobs
have modules of their own: grids (study files, runs), provenance (the code behind a result),
behaviour (whether other code behaves the same), execution (one run or pack), engines (serial
and Ray), ray_cluster (joining a cluster, and its checks), store (SQLite), and the reports.

`run` writes under the current working folder (verify/studies/results/STUDY/SCALE, or
--out); `report`, `export`, `list` and figure 9 read that store when it exists, and
otherwise the committed cpu-scale store shipped with the package.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from pathlib import Path

from verify import cli
from verify.cli import UsageError, non_negative_float, positive_float, positive_int
from verify.studies import behaviour, budget, compare, folder_lock, provenance, staged, summary
from verify.studies.engines import Execution, ray_engine, serial
from verify.studies.grids import (  # noqa: F401 - the study side's names, as verify.study's users know them
    DEFAULT_PROGRAM,
    PROGRAMS,
    RESULTS_DIR,
    SCALES,
    STUDIES_DIR,
    Program,
    Run,
    default_out,
    expand,
    is_committed_store,
    load_study,
    own_parameters,
    program_parameters,
    stored_out,
    study_deviations,
    study_file,
    study_names,
    study_plan,
    study_program,
)
from verify.studies.ray_cluster import check_address, check_gpus, connect_ray
from verify.studies.status import n_done, stale_line, store_counts  # noqa: F401 - as verify.study's users know them
from verify.studies.store import RunStore, reading

ENGINES = ("ray", "serial")


def run_study(name: str, scale: str, out: Path, *, wait: bool = False, command: str | None = None,
              **options) -> dict:
    """Run every run of the study not yet done (_run_study: its `options`), holding the study
    folder's lock (verify.studies.folder_lock: FolderBusy if another driver holds it, unless
    `wait`; `command` names this driver to the others, by default this process's argv)."""
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock.holding(out, command or shlex.join(sys.argv), wait=wait):
        return _run_study(name, scale, out, **options)


def _run_study(name: str, scale: str, out: Path, *, until_decided: bool = False,
               max_seeds: int | None = None, **options) -> dict:
    """Run every run of the study not yet done (_run_runs, with `options`). With
    `until_decided`, then stage by stage the runs the study's sequential plan asks for
    (verify.studies.staged: the seeds of the next look, in the cells of undecided claims only,
    at most `max_seeds` an arm), until a stage asks for nothing new."""
    if not until_decided:
        return _run_runs(name, scale, out, *expand(name, scale), **options)
    stages: list[dict] = []
    while True:
        counts = _run_runs(name, scale, out, *staged.planned_runs(name, scale, out, max_seeds=max_seeds),
                           **options)
        stages.append(counts)
        if counts["done"] + counts["failed"] == 0:
            break
    ran = sum(c["done"] + c["failed"] > 0 for c in stages)
    for k in ("done", "failed", "violated", "seconds"):
        counts[k] = sum(c[k] for c in stages)
    counts["already_done"] = stages[0]["already_done"]  # before this command: the runs it did not make
    counts |= dict(stages=ran, max_seeds=max_seeds, open_claims=staged.open_claims(name, scale, out))
    return counts


def _run_runs(name: str, scale: str, out: Path, study: str, runs: list[Run], *, engine: str = "ray",
              address: str | None = None, gpus_per_run: float = 0.0, workers: int | None = None,
              retry_failed: bool = False, rerun_stale: bool = False, progress: bool | None = None,
              pack: int = 1, checkpoint_minutes: float | None = None, log: list[str] | None = None) -> dict:
    """Run every one of `runs` not yet done (and the failed ones with `retry_failed`,
    those made by other or unknown code with `rerun_stale`); each result is committed as
    it arrives. Ray is started only when something is left to run."""
    program = runs[0].program  # a grid has at least one point
    current = provenance.code_fingerprint(program)
    stored: dict[str, dict] = {}
    if (out / "study.sqlite").is_file():
        # Opened for writing (this driver holds the folder): a write left half-done by a killed
        # driver is rolled back here, where a read-only open could not read past it.
        with RunStore(out / "study.sqlite") as store:
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
                  code_version=provenance.code_version(), code_fingerprint=current, program=program)
    started_ray = connect_ray(address, workers) if engine == "ray" and pending else False
    try:
        if engine == "ray" and pending and gpus_per_run > 0:
            check_gpus(gpus_per_run, address)
        with RunStore(out / "study.sqlite") as store:
            bar = cli.progress(len(runs), f"{study} ({scale})", progress, unit="run")
            bar.update(len(runs) - len(pending))
            # Off a terminal, a line now and then; the ticker speaks during a long run too.
            beat = cli.heartbeat(len(runs), f"{study} ({scale})", progress, unit="run",
                                 start=len(runs) - len(pending), tick=True)
            execute = ray_engine if engine == "ray" else serial
            execution = Execution("cuda" if gpus_per_run > 0 else "cpu", gpus_per_run, checkpoint_minutes,
                                  pack, tuple(log or ()), study)
            start = time.perf_counter()
            with cli.interrupt_note(lambda: f"rerun the same command to resume: "
                                            f"{n_done + counts['done']} of {len(runs)} done"), \
                    contextlib.closing(beat):
                _collect(execute(pending, out, execution,
                                 lambda run: store.start(run.key, study, scale, run.config)),
                         store, counts, bar, beat)
            bar.close()
            counts["seconds"] = time.perf_counter() - start
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    return dict(study=study, scale=scale, store=str(out / "study.sqlite"), engine=engine,
                committed=is_committed_store(out, name, scale), **counts)


def _collect(results, store, counts: dict, bar, beat) -> None:
    """Commit each run's result as the engine yields it, count it, and show the count."""
    for run, result in results:
        code = dict(version=result["version"], fingerprint=result["fingerprint"])
        if result["status"] == "done":
            store.finish(run.key, result["report"], result["seconds"], behaviour=result["behaviour"], **code)
            counts["done"] += 1
            # None: the family has no construction to violate (the preference grid).
            # (A program with no construction reports none.)
            counts["violated"] += result["report"].get("construction_within_certificate") is False
        else:
            store.fail(run.key, result["error"], result["seconds"], **code)
            counts["failed"] += 1
        bar.set_postfix_str(f"{counts['failed']} failed", refresh=False)
        bar.update(1)
        # A disabled bar counts nothing: the heartbeat counts from where it started.
        beat.update(beat.k + 1, f"{counts['failed']} failed" if counts["failed"] else "")



# ----------------------------------------------------------------------------- CLI


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.study", __doc__)
    sub = p.add_subparsers(dest="command", required=True,
                           metavar="{run,report,export,compare,list,budget,readme,record-behaviour}")

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
    r.add_argument("--log", nargs="+", metavar="SPEC",
                   help="verify.sgd's and verify.images.train's studies: log each run live, `tensorboard "
                        "DIR` or `wandb`, grouped by the study and named by the run's key "
                        "(verify.learning.tracking)")
    r.add_argument("--retry-failed", action="store_true", help="run the failed runs again too")
    r.add_argument("--until-decided", action="store_true",
                   help="a study with a sequential plan (verdicts: sequential): after the grid, add seeds "
                        "look by look to the cells of the claims still undecided, until each is decided "
                        "(efficacy, equivalence or futility) or the plan's last look")
    r.add_argument("--max-seeds", type=positive_int, metavar="N",
                   help="with --until-decided: at most N seeds an arm (a budget; the claims it leaves "
                        "undecided are named)")
    r.add_argument("--wait", action="store_true",
                   help="when another `run` is using the study's folder, wait for it to end (default: "
                        "refuse, naming it; one driver a folder, or both would train every run)")
    r.add_argument("--rerun-stale", action="store_true",
                   help="run again the runs whose stored result was made by other code (another "
                        "code fingerprint) or unknown code (stored before runs recorded it)")
    cli.add_json(r, "the summary")
    cli.add_common(r, threads_default="1 per run (each run is one process)")
    rep = sub.add_parser("report", help="the paper's effects table, from the store")
    common(rep)
    cli.add_json(rep, "the table")
    ex = sub.add_parser("export", help="write every run as CSV")
    common(ex)
    ex.add_argument("--csv", metavar="FILE",
                    help="where to write: a file, a FIFO or a device (written in place), or - for stdout "
                         "(default DIR/runs.csv)")
    cmp = sub.add_parser("compare", help="your store's table beside the committed one, row by row")
    common(cmp)
    cli.add_json(cmp, "the comparison")
    ls = sub.add_parser("list", help="the studies, their runs per scale, and what the stores hold")
    ls.add_argument("--out", metavar="ROOT", type=Path,
                    help="read the stores under ROOT/STUDY/SCALE (as `run STUDY --out ROOT/STUDY/SCALE` "
                         "writes them) instead of the working folder's or the committed ones")
    b = sub.add_parser("budget", help="what regenerating a scale costs: core and wall time per study, in "
                                      "all and left (its grids and its sequential plans' next looks), "
                                      "from the stored run times")
    b.add_argument("--scale", default="cpu", choices=SCALES, help="the scale (default cpu)")
    b.add_argument("--workers", type=positive_int, default=2,
                   help="runs at once, as `run --workers` (default 2: the CI machine's cores)")
    b.add_argument("--node-memory-gib", type=positive_float, default=budget.NODE_MEMORY_GIB,
                   help="Ray's memory a node counts, which runs that hold memory share (kernel-vs-sgd's "
                        f"ladders; default {budget.NODE_MEMORY_GIB}: the CI machine's local cluster)")
    cli.add_json(b, "the table")
    md = sub.add_parser("readme", help="regenerate the README's result blocks from the committed stores")
    md.add_argument("--file", metavar="README", help="the file whose `<!-- results: NAME -->` blocks to "
                                                   "rewrite (default: the checkout's README.md)")
    rec = sub.add_parser("record-behaviour",
                         help="record the behaviour of the runs this code made before runs recorded it, "
                              "and attest in the store the runs of other code whose record it replays")
    common(rec)
    cli.add_common(rec, threads_default="1")
    return p


ALL = "all"  # `run all`: every study in turn, each into its own default folder


def parse_args(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.invocation = shlex.join(["python", "-m", "verify.study", *argv])  # names a lock's holder
    if args.command == "list":
        if args.out is not None and not args.out.is_dir():
            raise UsageError(f"--out {args.out}: no such folder (it holds STUDY/SCALE/study.sqlite)")
        return args
    if args.command == "budget":
        return args
    if args.command == "readme":
        args.file = Path(args.file) if args.file else summary.readme_path()
        if not args.file.is_file():
            raise UsageError(f"no {args.file}: `readme` rewrites a checkout's README (give --file)")
        return args
    every = args.command == "run" and args.study == ALL
    if not every:
        study_file(args.study)
    if args.command == "run":
        if args.max_seeds is not None and not args.until_decided:
            raise UsageError("--max-seeds applies to --until-decided")
        if args.until_decided and every:
            raise UsageError("--until-decided applies to one study (its sequential plan)")
        if args.until_decided and study_plan(args.study).looks is None:
            raise UsageError(f"{args.study} has no sequential plan (`verdicts: sequential: "
                             "{looks, spending}` in its study file), so --until-decided has nothing to add")
        if args.address and args.engine != "ray":
            raise UsageError("--address applies to --engine ray")
        if args.address and args.workers:
            raise UsageError("--workers sizes a local Ray cluster; an existing one (--address) has its own")
        if args.gpus_per_run > 0 and args.engine == "serial":
            raise UsageError("--gpus-per-run applies to --engine ray")
        if args.log:
            from verify.learning.tracking import parse_log

            try:
                parse_log(args.log)
            except ValueError as e:
                raise UsageError(str(e)) from None
        if args.engine == "ray" and not ray_installed():
            # The README's first install has no Ray: the default engine falls back to the serial
            # one, saying so; Ray asked for by name (--engine ray, --address, --gpus-per-run) is refused.
            asked = [f for f in ("--engine", "--address", "--gpus-per-run")
                     if any(a == f or a.startswith(f + "=") for a in argv)]
            if asked:
                raise UsageError(f"{asked[0]} needs Ray: pip install -e '.[studies]' (or use --engine "
                                 "serial)")
            args.engine = "serial"
            print("verify.study: Ray is not installed, so the runs go one at a time in this process "
                  "(--engine serial); pip install -e '.[studies]' runs them in parallel", file=sys.stderr)
        if args.address:
            check_address(args.address)
    if every:
        if args.out or args.pack > 1:
            raise UsageError(f"{'--out' if args.out else '--pack'} applies to one study; `run all` runs "
                             "each study alone into its own folder (verify/studies/results/STUDY/SCALE)")
        args.studies = study_names()
        for name in args.studies:  # every grid is checked before any run
            _, runs = expand(name, args.scale)
            _refuse_flags(args, PROGRAMS[runs[0].program], name)
        return args
    # report and export read `store` (the working folder's, else the committed one in the
    # package) and write into `out` (always the working folder's, or --out).
    args.store = Path(args.out) if args.out else stored_out(args.study, args.scale)
    if args.command == "compare":
        if not args.out:
            raise UsageError("compare needs --out DIR: the folder of your own run of the study")
        if is_committed_store(args.store, args.study, args.scale):
            raise UsageError(f"--out {args.out} is the committed store itself: nothing to compare")
    reads = ("report", "export", "record-behaviour", "compare")
    if args.command in reads and not (args.store / "study.sqlite").is_file():
        raise UsageError(f"no results for {args.study} ({args.scale}) in {args.store}: run "
                         f"`python -m verify.study run {args.study} --scale {args.scale}` first")
    if args.command == "run":  # a bad grid is refused before any work, and before --out is made
        _, runs = expand(args.study, args.scale)
        program = PROGRAMS[runs[0].program]
        _refuse_flags(args, program, args.study)
        if args.pack > 1:
            program.load().check_pack_grid([r.config for r in runs])
    args.out = cli.prepare_out_dir(args.out or default_out(args.study, args.scale), "--out")
    return args


def ray_installed() -> bool:
    """Whether Ray can be imported (the `studies` extra), without importing it."""
    import importlib.util

    if "ray" in sys.modules:  # imported already, or blocked (None: import fails)
        return sys.modules["ray"] is not None
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def _refuse_flags(args, program, study: str) -> None:
    """UsageError for a run flag that `program` does not take: --pack and --checkpoint-minutes
    (verify.sgd's), --log (the programs that track)."""
    if not program.packs and (args.pack > 1 or args.checkpoint_minutes is not None):
        flag = "--pack" if args.pack > 1 else "--checkpoint-minutes"
        raise UsageError(f"{flag} applies to verify.sgd's studies; {study} runs {program.name}")
    if args.log and not program.tracks:
        tracked = ", ".join(p.name for p in PROGRAMS.values() if p.tracks)
        raise UsageError(f"--log applies to the studies of {tracked}; {study} runs {program.name}")


def work(args) -> int:
    if args.command == "list":
        cli.emit(format_list(args.out))
        return cli.EXIT_OK
    if args.command == "readme":
        changed = summary.regenerate(args.file)
        cli.emit(f"{args.file}: {len(changed)} result blocks changed" + (f" ({', '.join(changed)})" if changed
                                                                          else ""))
        return cli.EXIT_OK
    if args.command == "budget":
        table = budget.budget_table(args.scale, args.workers, args.node_memory_gib)
        cli.emit(cli.to_json(table) if args.json else budget.format_budget(table))
        return cli.EXIT_OK
    if args.command == "run":
        cli.set_threads(args.threads, 1)
        violated = False
        for name in getattr(args, "studies", None) or [args.study]:
            out = args.out if args.study != ALL else cli.prepare_out_dir(default_out(name, args.scale),
                                                                         "--out")
            counts = run_study(name, args.scale, out, engine=args.engine, address=args.address,
                               gpus_per_run=args.gpus_per_run, workers=args.workers,
                               retry_failed=args.retry_failed, rerun_stale=args.rerun_stale,
                               progress=False if args.no_progress else None, pack=args.pack,
                               checkpoint_minutes=args.checkpoint_minutes, log=args.log, wait=args.wait,
                               command=args.invocation, until_decided=args.until_decided,
                               max_seeds=args.max_seeds)
            cli.emit(cli.to_json(counts) if args.json else format_summary(counts))
            violated |= bool(counts["violated"])
        if args.scale == "smoke" and not args.json:
            cli.emit(budget.smoke_note())
        return cli.EXIT_VIOLATED if violated else cli.EXIT_OK
    program = study_program(args.study)
    if args.command == "record-behaviour":
        counts = behaviour.record_missing(program, args.store / "study.sqlite",
                                          provenance.code_fingerprint(program),
                                          progress=False if args.no_progress else None)
        cli.emit(f"{counts['recorded']} behaviour records written to {args.store / 'study.sqlite'}; "
                 f"{counts['had']} runs had one; {counts['other_code']} runs by other or unknown code have "
                 "none (only a rerun records theirs)" if not counts["program_has_none"] else
                 f"{program} records no behaviour: its runs are judged by their code fingerprint alone")
        replayed = behaviour.attest(program, args.store / "study.sqlite",
                                    provenance.code_fingerprint(program),
                                    progress=False if args.no_progress else None)
        cli.emit(f"{replayed['attested']} runs of other code replayed by this code: attested in the store; "
                 f"{replayed['already']} current already; {len(replayed['differ'])} differ"
                 + "".join(f"\n  {key[:12]}: {why}" for key, why in replayed["differ"].items()))
        return cli.EXIT_OK
    if args.command == "compare":
        c = compare.compare(args.study, args.scale, args.store)
        cli.emit(cli.to_json(c) if args.json else compare.format_comparison(c))
        return cli.EXIT_OK
    report = PROGRAMS[program].report_module()
    if args.command == "report":
        _, table = staged.study_table(args.study, args.scale, args.store)
        report.write_table(table, args.out)
        cli.emit(cli.to_json(table) if args.json else report.format_markdown(table))
        if args.scale == "smoke" and not args.json:
            cli.emit(budget.smoke_note())
        return cli.EXIT_OK
    # The flag's own string: `-` is stdout, where the count would spoil the CSV (it goes to
    # stderr then), while `./-` is a file of that name.
    path = args.csv if args.csv else args.out / "runs.csv"
    with reading(args.store / "study.sqlite"):
        n = report.export_csv(args.store, path)
    if cli.is_stdout(path):
        print(f"{n} runs written to stdout", file=sys.stderr)
    else:
        cli.emit(f"{n} runs written to {path}")
    return cli.EXIT_OK



def format_summary(s: dict) -> str:
    if s.get("committed") and s["done"] == s["failed"] == 0 and s["already_done"] == s["runs"]:
        # The checkout's default folder is the committed store: "0 done now" there read as a run
        # that did nothing.
        return (f"{s['study']} ({s['scale']}): the committed store {s['store']} is complete "
                f"({s['runs']} of {s['runs']} runs), so nothing ran; to run the study yourself, give it "
                f"a folder of your own: python -m verify.study run {s['study']} --scale {s['scale']} "
                "--out DIR")
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
    if "stages" in s:  # --until-decided
        left, cap = s["open_claims"], f" at --max-seeds {s['max_seeds']}" if s["max_seeds"] else ""
        state = f"{len(left)} claims still open{cap}: " + "; ".join(left) if left else "every claim decided"
        lines.append(f"sequential plan: {s['stages']} stages ran; {state} "
                     f"(python -m verify.study report {s['study']})")
    return "\n".join(lines)


def format_list(root: Path | None = None) -> str:
    """Per study and scale, its runs and what its store holds: the working folder's (else the
    committed one), or with `root` ROOT/STUDY/SCALE."""
    lines, width = [], max(map(len, study_names()))
    for name in study_names():
        parts = []
        for scale in SCALES:
            folder = root / name / scale if root is not None else stored_out(name, scale)
            _, runs = staged.planned_runs(name, scale, folder)
            store = folder / "study.sqlite"
            held = ""
            if store.is_file():
                c = store_counts(runs, store)
                held = (f" ({c['done']} done, {c['failed']} failed"
                        + (f"; {c['stale']} made by other or unknown code" if c["stale"] else "")
                        + (f"; {c['earlier']} of an earlier grid" if c["earlier"] else "") + ")")
            parts.append(f"{scale} {len(runs)}{held}")
        lines.append(f"{name:<{width}} " + ", ".join(parts))
    return "\n".join(lines)


def main(argv=None) -> int:
    return cli.main_of("verify.study", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
