"""python -m verify.kernel: the infinite-width kernel limit of an MLP student on the
hyperteacher, beside the network linearised at init and the trained network (issue 35).

Is compositional generalization on the hyperteacher a kernel property or a feature-learning
one? One run is one --method on one split, scored on the same held-out supports, with the
same compositional R², RMSE and sup error, through the family's own scoring code
(verify.learning.families) as a verify.sgd run:
  ntk         kernel regression with the student's NTK (gradient flow at infinite width)
  nngp        the NNGP posterior mean (Bayesian inference at infinite width)
  linearised  the student's first-order Taylor expansion at init, trained as the student is
  trained     the student itself (AdamW, the paper's settings), and how far its NTK moved
The kernel limits fit --tasks tasks × --samples-per-task x drawn from the training supports
(kernel_limit.py; --ladder doubles the samples per task until the held-out R² stops moving;
--max-tasks doubles the tasks from --tasks, nested, and settles or extrapolates the limit);
the networks train on fresh tasks every step, as verify.sgd's students do (--data online),
or, with --data finite --tasks T, in epochs over exactly the rows the kernel limit with the same
--tasks, --samples-per-task and --seed fits (finite_rows.py): "trained − kernel" at equal data.
Every method is also read for conjunction-wise additivity on the split's level tasks
(additivity.py, Lippl and Stachenfeld 2025); `--method trained --alpha A` trains the centred
α·(f − f₀) along the lazy-to-rich axis (lazy.py).
Exit codes: 0 done, 2 usage error, 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import time
from dataclasses import dataclass, field

from constructions.catalogue import ENCODING_NAMES, SPLITS
from constructions.tasks.task_names import WEIGHTS
from verify import cli
from verify.cli import UsageError
from verify.learning.families import HyperteacherFamily
from verify.learning.settings import (
    add_setting_flags,
    check_fields,
    checked,
    choice,
    flag,
    given_settings,
    runtime_of,
    setting,
    setting_fields,
    switch,
    typed_only,
)

METHODS = ("ntk", "nngp", "linearised", "trained")
KERNEL_METHODS = ("ntk", "nngp")
NETWORKS = ("linearised", "trained")
PARAMETRIZATIONS = ("standard", "ntk")  # kernels.PARAMETRIZATIONS, named here without torch (--help)
SUP_SEARCHES = ("full", "in_proportion")
SOLVERS = ("auto", "cholesky", "cg")  # kernel_limit.SOLVERS, named here without torch (--help)
DATA = ("online", "finite")  # finite_rows.DATA, named here without torch (--help)
# The settings that only some methods read: each is refused for the others (and a study's
# grid point passes it only to the methods that read it: own_parameters).
APPLIES = {"width": NETWORKS, "steps": NETWORKS, "tasks_per_batch": NETWORKS, "lr": NETWORKS,
           "weight_decay": NETWORKS, "probe_rows": ("trained",), "alpha": ("trained",),
           "parametrization": ("ntk",),
           "data": NETWORKS,
           "tasks": KERNEL_METHODS,  # and the networks under --data finite (reads_setting)
           "ladder": KERNEL_METHODS, "max_tasks": KERNEL_METHODS, "rungs_per_doubling": KERNEL_METHODS,
           "sup_search": KERNEL_METHODS,
           "jitter": KERNEL_METHODS, "sigma_b2": KERNEL_METHODS, "solver": KERNEL_METHODS}
LADDER_TOLERANCE = 0.005  # held-out R² that a doubling (of samples per task, or of tasks) may still move
MEMORY_SHARE = 0.8  # of the memory available now, what a kernel solve may take


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.kernel", __doc__)
    cli.add_teacher_flags(p, dict(M=8, K=2, I=4, H=4, O=4), encodings=ENCODING_NAMES,
                          encoding_help="task encoding the students read", strict_names=True)
    add_setting_flags(p, KernelRun, defaults=METHOD_DEFAULTS)
    p.add_argument("--device", default="cpu", help="where the networks train: cpu or cuda[:N] (default cpu)")
    p.add_argument("--save", metavar="DIR",
                   help="write report.json (and a trained network's state_dict) into DIR")
    cli.add_json(p)
    cli.add_common(p, threads_default="1")
    return p


# Settings that do not change a result, left out of a study's key.
RUNTIME = ("threads", "no_progress", "json", "save", "device")
# What a method that reads a setting of APPLIES takes when it is not given.
# max_tasks stays None (no ladder along tasks) unless given: a key without it is the key it was.
# sup_search too: unset, a run searches in full (as the committed runs did) unless it climbs a
# ladder along tasks, whose rungs outgrow the full search (SUP_SEARCHES).
# data too: unset (or online, the same run) a network trains online, as the committed runs did.
METHOD_DEFAULTS = dict(width=256, parametrization="standard", tasks=512, ladder=False, max_tasks=None,
                       rungs_per_doubling=None,  # None: 1, a key without it is the key it was
                       sup_search=None, data=None,
                       jitter=1e-10,
                       # None: σ_b² = 0 and the auto solver, so a key without them is the key it was
                       sigma_b2=None, solver=None,
                       steps=1500, tasks_per_batch=32, lr=HyperteacherFamily.optimiser["lr"],
                       weight_decay=HyperteacherFamily.optimiser["weight_decay"], probe_rows=256,
                       alpha=None)  # None: the plain network (a key without it is the key it was)


def reads_setting(name: str, method: str, data: str | None) -> bool:
    """Whether a run of `method` reads the setting `name` (APPLIES): --tasks is the kernel
    limits' data size, and the networks' too under --data finite (the set they train on)."""
    return method in APPLIES.get(name, METHODS) or (name == "tasks" and method in NETWORKS
                                                    and data == "finite")


def by_method(check, help: str):
    """A setting only some methods read (APPLIES): None until KernelRun gives a method that reads
    it METHOD_DEFAULTS's value; refused when set for another."""
    return setting(None, check, optional=True, help=help)


@dataclass(frozen=True)
class KernelRuntime:
    """How a run executes: the settings a study's key leaves out."""

    threads: int | None = None
    no_progress: bool = False
    json: bool = False
    save: str | None = None
    device: str = "cpu"


@dataclass(frozen=True)
class KernelRun:
    """The settings of one verify.kernel run that decide its numbers: what a study's key
    hashes (`key()`). A setting of APPLIES that the method reads takes METHOD_DEFAULTS's
    value when it is not set; one set for a method that does not read it is refused. Checked
    on construction (`__post_init__`: each value by its flag's validator, the rules between
    settings), so a `replace` is checked too; every refusal is one line (UsageError)."""

    M: int = setting(8, cli.positive_int)
    K: int = setting(2, cli.positive_int)
    I: int = setting(4, cli.positive_int)  # noqa: E741 (the paper's name)
    H: int = setting(4, cli.positive_int)
    O: int = setting(4, cli.positive_int)  # noqa: E741
    weights: str = setting("discrete", choice(WEIGHTS))
    encoding: str = setting("identity", choice(ENCODING_NAMES))
    seed: int = setting(0, cli.seed)
    method: str = setting("ntk", choice(METHODS), help="what is fitted or trained")
    split: str = setting("random", choice(SPLITS), help="which supports are held out")
    held_out: float = setting(0.25, cli.open_fraction, help="held-out fraction of supports, in (0, 1)")
    depth: int = setting(4, cli.positive_int,
                         help="hidden layers of the student, the kernels' and the networks'")
    samples_per_task: int = setting(16, cli.positive_int,
                                    help="x per task: the kernel regression's rows per task, or the "
                                         "networks' per task per step")
    eval_tasks: int = setting(1024, cli.positive_int, help="tasks on each side for RMSE and R²")
    eval_samples: int = setting(16, cli.positive_int, help="x per task for RMSE and R²")
    extra_modules: int = setting(0, cli.non_negative_int,
                                 help="also score tasks with K+1 … K+this many active modules")
    # read by some methods only (APPLIES; each help names them)
    width: int | None = by_method(cli.positive_int, "linearised and trained: hidden units per layer; the "
                                                    "kernel limits have none")
    parametrization: str | None = by_method(choice(PARAMETRIZATIONS), "ntk: the students' standard "
                                            "parametrization (Θ/width's limit) or NTK parametrization "
                                            "(Jacot's)")
    tasks: int | None = by_method(cli.positive_int, "ntk, nngp: training tasks the kernel regression fits; "
                                                   "linearised, trained with --data finite: the tasks of "
                                                   "the fixed set they train on (no default there: say "
                                                   "which kernel fit the set is)")
    ladder: bool | None = by_method(switch, "ntk, nngp: fit 1, 2, 4, … x per task up to --samples-per-task, "
                                            "stopping when the held-out R² moves by less than "
                                            f"{LADDER_TOLERANCE}")
    max_tasks: int | None = by_method(cli.positive_int, "ntk, nngp: a ladder along tasks: fit --tasks, "
                                                       "2·--tasks, 4·--tasks, … up to this many tasks (the "
                                                       "same tasks and more at each rung) at fixed "
                                                       "--samples-per-task, and say whether the held-out R² "
                                                       f"settled (last doubling < {LADDER_TOLERANCE}) or "
                                                       "extrapolate its asymptote (kernel_ladder.py)")
    rungs_per_doubling: int | None = by_method(cli.positive_int, "ntk, nngp with --max-tasks: rungs per "
                                               "doubling of tasks (2: --tasks·√2, 2·--tasks, …, each "
                                               "rounded), so the saturating model has more rungs to fit "
                                               "(4 residual degrees of freedom from 256 to 2,048 tasks, "
                                               "not 1); default 1")
    sup_search: str | None = by_method(choice(SUP_SEARCHES), "ntk, nngp: the sup-error search: full "
                                       "(verify.sgd's, as a network is searched) or in_proportion (cut "
                                       "so that it costs no more than the fit, in kernel entries); "
                                       "default full, in_proportion with --max-tasks")
    jitter: float | None = by_method(cli.non_negative_float,
                                     "ntk, nngp: λ/mean diag K added to K(X, X)'s diagonal")
    sigma_b2: float | None = by_method(cli.non_negative_float,
                                       "ntk, nngp: the bias variance σ_b² of the students' init that the "
                                       "kernel assumes (default 0, zero biases as the students start: then "
                                       "the kernels are homogeneous of degree 1 in the row)")
    solver: str | None = by_method(choice(SOLVERS), "ntk, nngp: how (K + λI)α = Y is solved: cholesky "
                                   "(dense, K held: 8n² bytes), cg (Jacobi-preconditioned conjugate "
                                   "gradients, K formed in row blocks at every iteration: O(1024·n) "
                                   "bytes), or auto (cholesky up to 32,768 rows, cg beyond); default auto")
    steps: int | None = by_method(cli.positive_int, "linearised, trained: training steps")
    tasks_per_batch: int | None = by_method(cli.positive_int, "linearised, trained: tasks per step")
    data: str | None = by_method(choice(DATA), "linearised, trained: online (fresh tasks every step, as "
                                 "verify.sgd's students) or finite (epochs over exactly the rows the "
                                 "kernel limit with the same --tasks, --samples-per-task and --seed "
                                 "fits, reshuffled each epoch, --tasks-per-batch whole tasks a step; "
                                 "needs --tasks); default online")
    lr: float | None = by_method(cli.positive_float, "linearised, trained: AdamW learning rate")
    weight_decay: float | None = by_method(cli.non_negative_float, "linearised, trained: AdamW weight decay")
    probe_rows: int | None = by_method(cli.positive_int, "trained: rows on which the NTK's movement is read")
    alpha: float | None = by_method(cli.positive_float, "trained: the lazy-to-rich axis: train α·(f − f at "
                                    "init) at learning rate --lr/α (AdamW's lazy scaling; large α lazy, "
                                    "small α rich) with no decay unless --weight-decay is given (lazy.py)")
    runtime: KernelRuntime = field(default_factory=KernelRuntime, compare=False, repr=False)

    def __post_init__(self):
        method = checked("method", self.method, choice(METHODS))
        if self.alpha is not None and self.weight_decay is None:  # decay pulls θ to 0, not θ₀
            object.__setattr__(self, "weight_decay", 0.0)
        data = None if self.data is None else checked("data", self.data, choice(DATA))
        for name in APPLIES:
            value, reads = getattr(self, name), reads_setting(name, method, data)
            if reads and value is None:
                if name == "tasks" and method in NETWORKS:
                    raise UsageError("--data finite trains on the rows of a kernel fit: give its --tasks")
                object.__setattr__(self, name, METHOD_DEFAULTS[name])
            elif not reads and value is not None:
                unless = " unless --data finite" if name == "tasks" and method in NETWORKS else ""
                raise UsageError(f"{flag(name)} does not apply to --method {method}{unless}")
        if data == "online":  # online is the unset default, the same run: its key is the key it was
            object.__setattr__(self, "data", None)
        # Likewise σ_b² = 0 and the auto solver are the unset defaults: the same runs, the same keys.
        if self.sigma_b2 is not None and checked("sigma_b2", self.sigma_b2, cli.non_negative_float) == 0.0:
            object.__setattr__(self, "sigma_b2", None)
        if self.solver == "auto":
            object.__setattr__(self, "solver", None)
        if self.rungs_per_doubling == 1:
            object.__setattr__(self, "rungs_per_doubling", None)
        check_fields(self)
        if self.K > self.M:
            raise UsageError(f"--K must be at most --M (got K={self.K}, M={self.M})")
        if self.encoding.startswith("fewshot"):
            raise UsageError(f"--encoding {self.encoding}: a kernel reads fixed rows [e(z), x], and "
                             "fewshot's e(z) is drawn anew at every call")
        if self.max_tasks is not None:
            if self.ladder:
                raise UsageError("--ladder (along samples per task) and --max-tasks (along tasks): one "
                                 "ladder a run")
            if self.max_tasks < self.tasks:
                raise UsageError(f"--max-tasks must be at least --tasks (got {self.max_tasks} < "
                                 f"{self.tasks})")
        elif self.rungs_per_doubling is not None:
            raise UsageError("--rungs-per-doubling sets the rungs of a ladder along tasks: give --max-tasks")
        if self.data == "finite" and self.tasks_per_batch > self.tasks:
            raise UsageError(f"--data finite: --tasks-per-batch must be at most --tasks (got "
                             f"{self.tasks_per_batch} > {self.tasks})")

    @classmethod
    def build(cls, given: dict, runtime: KernelRuntime | None = None) -> KernelRun:
        """The run of the settings `given` (by name, typed as a study file or the command line
        types them; None counts as not given), the rest at their defaults."""
        return cls(**given_settings(cls, given, "verify.kernel"), runtime=runtime or KernelRuntime())

    def key(self) -> dict:
        """The run's configuration as a study keys it: the settings its method reads, sorted."""
        return {k: getattr(self, k) for k in sorted(setting_fields(self)) if getattr(self, k) is not None}

    def replace(self, **changes) -> KernelRun:
        """A copy with `changes` (settings or `runtime`), checked as a new run is."""
        return dataclasses.replace(self, **changes)


@functools.cache
def _parser() -> cli.Parser:
    """The parser, with the settings' defaults left to KernelRun (what was typed is what is
    given: a flag of another method is refused only when typed)."""
    return typed_only(build_parser(), setting_fields(KernelRun))


def parse_args(argv=None) -> KernelRun:
    """The run the command line asks for; one line and exit 2 for bad input, before any work
    (and before --save is made)."""
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    ns = _parser().parse_args(argv)
    names = set(setting_fields(KernelRun))
    run = KernelRun.build({k: v for k, v in vars(ns).items() if k in names}, runtime_of(KernelRuntime, ns))
    check_runnable(run)
    if ns.save:
        run = run.replace(runtime=dataclasses.replace(
            run.runtime, save=str(cli.prepare_out_dir(ns.save, "--save", force=True))))
    return run


def check_runnable(run: KernelRun) -> None:
    """What the machine must offer the run: its device, and for a kernel limit the memory of
    its solve (estimated before any work)."""
    cli.check_device(run.runtime.device)
    if run.method in KERNEL_METHODS:
        _check_memory(_largest_fit_tasks(run), run.samples_per_task, run.depth,
                      "--max-tasks" if run.max_tasks else "--tasks", run.solver or "auto", run.O)


def _largest_fit_tasks(run: KernelRun) -> int:
    """The tasks of the largest kernel fit a run makes (a ladder along tasks: its top rung)."""
    return max(run.tasks, run.max_tasks or 0)


def memory_bytes(config: dict) -> int:
    """The peak memory a stored key's run needs, as far as it is estimated: a kernel limit's
    largest solve (kernel_limit.solve_bytes, what check_runnable holds it to), 0 for a network
    (small at these sizes, not estimated). The study engine's scheduler reads it
    (verify.studies.engines), so that runs which do not fit together do not run at once."""
    from verify.learning.kernel_limit import solve_bytes

    run = from_key(config)
    if run.method not in KERNEL_METHODS:
        return 0
    return solve_bytes(_largest_fit_tasks(run) * run.samples_per_task, run.depth, run.solver or "auto", run.O)


def available_bytes() -> int:
    """The memory available now (MemAvailable), or the physical memory where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_memory(tasks: int, samples_per_task: int, depth: int, name: str = "--tasks",
                  solver: str = "auto", outputs: int = 1) -> None:
    """Refuses (one line) a kernel solve of the largest fit the run makes that would not fit
    MEMORY_SHARE of the memory available (by the solver that fit would run)."""
    from verify.learning.kernel_limit import chosen_solver, solve_bytes

    rows = tasks * samples_per_task
    need, have = solve_bytes(rows, depth, solver, outputs), available_bytes()
    if need > MEMORY_SHARE * have:
        dense = chosen_solver(solver, rows) == "cholesky"
        raise UsageError(f"{name} × --samples-per-task = {rows:,} rows: the kernel solve needs "
                         f"{need / 2**30:.1f} GiB by {chosen_solver(solver, rows)}, more than "
                         f"{MEMORY_SHARE:.0%} of the {have / 2**30:.1f} GiB available; lower {name} or "
                         f"--samples-per-task" + (", or --solver cg" if dense else ""))


def run_config(run: KernelRun) -> dict:
    """A run's resolved configuration, as a study keys it (KernelRun.key)."""
    return run.key()


def own_parameters(params: dict) -> dict:
    """The grid point's parameters that its method reads (a study crossing methods and widths
    gives the kernel limits no width: they run once a seed, not once a width)."""
    method = params.get("method", "ntk")
    return {k: v for k, v in params.items() if reads_setting(k, method, params.get("data"))}


def config_of(params: dict) -> KernelRun:
    """The run of a study's grid point (its parameters by name, as the study file types them).
    Not checked against this machine (its device, the memory free now): `list`, `report` and
    `budget` expand the grid too, and what they print must not hang on the memory free when they
    run; a run is checked where it executes (from_key with a place), before any work."""
    return KernelRun.build(own_parameters(params))


def from_key(config: dict, place: cli.RunPlace | None = None) -> KernelRun:
    """The run a stored key stands for, to run at `place` (one thread, quiet, its files in the
    run's folder), or, with no place, to replay (quiet)."""
    if place is None:
        return KernelRun.build(config, KernelRuntime(no_progress=True))
    run = KernelRun.build(config, KernelRuntime(threads=1, no_progress=True, device=place.device))
    check_runnable(run)
    save = str(cli.prepare_out_dir(place.run_dir, "--save", force=True))
    return run.replace(runtime=dataclasses.replace(run.runtime, save=save))


def command_line(run: KernelRun) -> list[str]:
    """The flags that reproduce `run`."""
    return cli.argv_of(build_parser(), run.key())


# ----------------------------------------------------------------------------- one run

def _family_and_split(run: KernelRun):
    from verify.learning.sgd_program import split_of

    family = HyperteacherFamily.of(run.I, run.H, run.O, run.M, run.K, run.weights, run.encoding,
                                   run.seed)
    return family, split_of(run)


def _sides(run: KernelRun, family, split) -> dict:
    extra = list(range(run.K + 1, min(run.K + run.extra_modules, run.M) + 1))
    return family.eval_sides(split, extra, run.eval_tasks, run.eval_samples, run.seed)


def _kernel_config(run: KernelRun, samples_per_task: int):
    from verify.learning.kernel_limit import KernelConfig

    # The NNGP reads no parametrization (its run sets none): KernelConfig takes the default's.
    parametrization = run.parametrization or METHOD_DEFAULTS["parametrization"]
    return KernelConfig(kernel=run.method, depth=run.depth, parametrization=parametrization,
                        sigma_b2=run.sigma_b2 or 0.0, tasks=run.tasks, samples_per_task=samples_per_task,
                        jitter=run.jitter, solver=run.solver or "auto")


def _held_out_r2(family, predictor, sides, side: str = "held_out") -> float:
    from verify.learning.metrics import compositional_r2_paper, predict

    _, samples = sides[side]
    return compositional_r2_paper(predict(predictor, samples, family.encode), samples)


def peak_rss_bytes() -> int:
    """The process's peak resident memory so far (getrusage; Linux counts KiB). A ladder's
    rungs grow, so after rung k it is rung k's peak (or an earlier, larger allocation's)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def task_ladder(run: KernelRun) -> list[int]:
    """The rungs of a ladder along tasks: --tasks · 2^(k/r) (r = --rungs-per-doubling, each rounded)
    while below --max-tasks, then --max-tasks (r = 1: --tasks doubled)."""
    per, rungs, k = run.rungs_per_doubling or 1, [run.tasks], 1
    while (tasks := round(run.tasks * 2 ** (k / per))) < run.max_tasks:
        if tasks > rungs[-1]:  # a few tasks: rounding can repeat a rung
            rungs.append(tasks)
        k += 1
    return rungs + [run.max_tasks] if run.max_tasks > rungs[-1] else rungs


def fit_task_ladder(run: KernelRun, family, split, sides, progress) -> tuple[object, dict]:
    """The ladder along tasks (--max-tasks): one draw of --max-tasks tasks, whose first t tasks
    each rung fits (nested_training_rows), so every rung holds the tasks of the one below; each
    rung's rows, tasks, training supports covered, held-out and in-distribution R², kernel and
    solve seconds, estimated solve bytes and the process's peak memory; then what the rungs say
    of the limit (kernel_ladder.limit_of: settled, or the saturating model's asymptote with its
    profile-likelihood interval). The rungs are scored together, after the last fit
    (kernel_limit.RungPredictor): one pass of K(x*, X) over the top rung's rows scores them all,
    where scoring each rung alone cost the eval rows × its rows again (twice the top rung's Gram
    at the cpu scale, whose 2 × 16,384 eval rows equal its 32,768 training rows). Where the top
    rung is solved by Cholesky, every rung is fitted from its Gram and factor (`shared_factor`,
    kernel_limit.nested_fits: the top rung's seconds are the Gram's and the factor's, a lower
    rung's its triangular solve's; one λ, the top's); beyond that, each rung is a fit of its own."""
    import dataclasses as dc

    import numpy as np

    from verify.learning.kernel_ladder import limit_of
    from verify.learning.kernel_limit import (
        RungPredictor,
        chosen_solver,
        fit,
        nested_fits,
        nested_training_rows,
        solve_bytes,
    )

    top = dc.replace(_kernel_config(run, run.samples_per_task), tasks=run.max_tasks)
    x_all, y_all, which = nested_training_rows(family, split.train, top, run.seed)
    rungs = task_ladder(run)
    nested = chosen_solver(top.solver, top.rows) == "cholesky"
    if nested:  # every rung from the top rung's Gram and factor (kernel_limit.nested_fits)
        with cli.phase(f"{run.method} limit: {len(rungs)} rungs from one factor of {top.rows:,} rows",
                       progress):
            fits = nested_fits(top, x_all, y_all, rungs)
    steps, alphas, result = [], [], None
    for r, tasks in enumerate(rungs):
        cfg = dc.replace(top, tasks=tasks)
        rows = cfg.rows
        if nested:
            result = fits[r]
        else:
            with cli.phase(f"{run.method} limit: {tasks:,} tasks, {rows:,} rows", progress):
                result = None  # the rung below's K and predictor go before this rung's are made
                result = fit(cfg, x_all[:rows], y_all[:rows])
        alphas.append(result.predictor.alpha)
        steps.append(dict(tasks=tasks, samples_per_task=run.samples_per_task, rows=rows,
                          supports_covered=int(len(np.unique(which[:tasks]))),
                          training_supports=int(len(split.train)), held_out_r2=None,
                          in_distribution_r2=None,
                          solve_bytes=solve_bytes(rows, run.depth, cfg.solver, y_all.shape[1]),
                          shared_factor=nested,
                          peak_rss_bytes=peak_rss_bytes(), **result.summary()))
    with cli.phase(f"{run.method} limit: {len(steps)} rungs scored", progress):
        every = RungPredictor(top, x_all[:steps[-1]["rows"]], alphas)
        for side, name in (("held_out", "held_out_r2"), ("train", "in_distribution_r2")):
            for step, r2 in zip(steps, _rung_r2(family, every, sides, side), strict=True):
                step[name] = r2
    limit = limit_of([s["tasks"] for s in steps], [s["held_out_r2"] for s in steps], LADDER_TOLERANCE,
                     per_doubling=run.rungs_per_doubling or 1)
    return result.predictor, dict(fit=steps[-1], ladder=None, ladder_settled=None, task_ladder=steps,
                                  limit=limit)


def _rung_r2(family, every, sides, side: str) -> list[float]:
    """Each rung's compositional R² on a side, from one pass of a RungPredictor."""
    from verify.learning.metrics import compositional_r2_paper, predict

    _, samples = sides[side]
    pred = predict(every, samples, family.encode)
    return [compositional_r2_paper(pred[..., part], samples) for part in every.parts]


def fit_kernel(run: KernelRun, family, split, sides, progress) -> tuple[object, dict]:
    """The kernel limit's predictor, and what its fit (or ladder of fits) recorded."""
    from verify.learning.kernel_limit import fit, training_rows

    if run.max_tasks is not None:
        return fit_task_ladder(run, family, split, sides, progress)
    ladder = [1 << i for i in range(int(math.log2(run.samples_per_task)) + 1)] if run.ladder else []
    ladder = [p for p in ladder if p < run.samples_per_task] + [run.samples_per_task]
    steps, previous = [], None
    for P in ladder:
        cfg = _kernel_config(run, P)
        with cli.phase(f"{run.method} limit: {cfg.rows:,} rows", progress):
            x, y = training_rows(family, split.train, cfg, run.seed)
            result = fit(cfg, x, y)
            r2 = _held_out_r2(family, result.predictor, sides)
        steps.append(dict(samples_per_task=P, rows=cfg.rows, held_out_r2=r2, **result.summary()))
        if previous is not None and abs(r2 - previous) < LADDER_TOLERANCE:
            break
        previous = r2
    settled = len(steps) > 1 and abs(steps[-1]["held_out_r2"] - steps[-2]["held_out_r2"]) < LADDER_TOLERANCE
    return result.predictor, dict(fit=steps[-1], ladder=steps if run.ladder else None,
                                  ladder_settled=settled if run.ladder else None)


def search_in_proportion(run: KernelRun) -> bool:
    """Whether the kernel predictor's sup search is cut to the fit's cost: where asked, or, unset,
    under a ladder along tasks. Unset otherwise it is the full search, so that a stored run's key
    still names the search that scored it (the behaviour record replays the fit, not the scoring)."""
    return run.sup_search == "in_proportion" or (run.sup_search is None and run.max_tasks is not None)


def budget_search(family, predictor, sides) -> dict:
    """Sets the family's sup search for a kernel predictor so that scoring it costs no more
    than its fit (kernel_limit.search_budget: the family's search, SGD_MEASURE, scaled down
    where the full one would cost more), and returns what the report states: the fraction of
    the full search, the budget, and the two estimated costs in kernel entries."""
    from dataclasses import asdict

    from verify.learning.kernel_limit import search_budget
    from verify.theorem.measure import numbers_read
    from verify.theorem.presets import SGD_MEASURE

    rows = len(predictor.x_train)
    budget, fraction, full, cut, fit_entries = search_budget(
        family.sup_measure or SGD_MEASURE, rows, [len(supports) for supports, _ in sides.values()],
        family.I, numbers_read(predictor, family.teacher))
    family.sup_measure = budget
    return dict(fraction=fraction, full_search_entries=full, search_entries=cut, fit_entries=fit_entries,
                within_fit=cut <= fit_entries, **asdict(budget))


def _student(run: KernelRun, family):
    import torch

    from verify.learning.train import mlp

    torch.manual_seed(run.seed)  # as verify.sgd's students start
    return mlp(family.E + family.I, [run.width] * run.depth, family.O, "lecun_normal")


def _train_config(run: KernelRun):
    from verify.learning import lazy
    from verify.learning.train import TrainConfig

    return TrainConfig(steps=run.steps, tasks_per_batch=run.tasks_per_batch,
                       samples_per_task=run.samples_per_task,
                       lr=run.lr if run.alpha is None else lazy.learning_rate(run.lr, run.alpha),
                       weight_decay=run.weight_decay,
                       seed=run.seed, device=run.runtime.device)


def train_network(run: KernelRun, family, split, sides, progress, stop_after=None) -> tuple[object, dict]:
    """The linearised or the trained student after training, and its training record (and,
    trained, its NTK's movement on probe rows from the held-out tasks; with --alpha, the centred
    model α·(f − f₀) and how far its parameters moved)."""
    from verify.learning.lazy import Centred, parameter_movement
    from verify.learning.linearised import Linearised, kernel_movement
    from verify.learning.train import train_student

    student = _student(run, family)
    init = copy.deepcopy(student).double()
    if run.method == "linearised":
        net = Linearised(student)
    else:
        net = student if run.alpha is None else Centred(student, run.alpha)
    finite, trains_on = None, family
    if run.data == "finite":
        from verify.learning import finite_rows

        data = finite_rows.finite_set(family, split.train, run.tasks, run.samples_per_task, run.seed)
        trains_on = finite_rows.FiniteFamily(family, data)
        finite = dict(tasks=run.tasks, samples_per_task=run.samples_per_task, rows=len(data.rows),
                      supports_covered=data.supports_covered(), training_supports=int(len(split.train)),
                      batches_per_epoch=finite_rows.batches_per_epoch(run.tasks, run.tasks_per_batch),
                      epochs=finite_rows.epochs(stop_after or run.steps, run.tasks, run.tasks_per_batch))
    result = train_student(trains_on, split.train, net, _train_config(run), progress=progress,
                           threads=run.runtime.threads, name=f"{run.method} {run.depth}×{run.width}",
                           widths=[run.width] * run.depth, stop_after=stop_after,
                           log_every=1 if stop_after else None)
    record = dict(losses=result.losses, train_seconds=result.seconds, final_loss=result.losses[-1][1])
    if finite is not None:
        record["finite"] = finite
    if run.method == "trained" and stop_after is None:
        # The NTK of α·(f − f₀) is α² that of f: its relative movement is f's.
        trained = result.net if run.alpha is None else result.net.net
        with cli.phase("the NTK's movement", progress):
            record["kernel_movement"] = kernel_movement(init, trained, probe_rows(run, family, sides))
        if run.alpha is not None:
            record["parameter_movement"] = parameter_movement(result.net)
    return result.net, record


def probe_rows(run: KernelRun, family, sides):
    """The first --probe-rows rows [e(z), x] of the held-out side, float64."""
    from verify.learning.kernel_limit import student_rows

    return student_rows(family.encode, sides["held_out"][1])[:run.probe_rows]


def run(kernel_run: KernelRun) -> dict:
    """One run: the family, split and scoring sides; the method's predictor; its scores."""
    from verify.learning import additivity
    from verify.learning.records import as_dicts
    from verify.learning.sgd_program import threads_of_run

    progress = False if kernel_run.runtime.no_progress else None
    start = time.perf_counter()
    with threads_of_run(kernel_run.runtime.threads, 0):
        family, split = _family_and_split(kernel_run)
        sides = _sides(kernel_run, family, split)
        if kernel_run.method in KERNEL_METHODS:
            predictor, record = fit_kernel(kernel_run, family, split, sides, progress)
            if search_in_proportion(kernel_run):
                record["sup_search"] = budget_search(family, predictor, sides)
        else:
            predictor, record = train_network(kernel_run, family, split, sides, progress)
        with cli.phase(f"evaluate {kernel_run.method}", progress):
            metrics, _ = family.score(kernel_run.method, predictor, sides, kernel_run.seed)
        with cli.phase("additivity over the level tasks", progress):
            record["additivity"] = additivity.of_model(predictor, family, split, kernel_run.seed)
    report = dict(program="verify.kernel", method=kernel_run.method, family=family.name, task=family.config(),
                  encoding=kernel_run.encoding, split=split.summary(), depth=kernel_run.depth,
                  width=kernel_run.width, alpha=kernel_run.alpha, record=record, metrics=as_dicts(metrics),
                  evaluation=dict(tasks_per_side=kernel_run.eval_tasks,
                                  rows_per_task=kernel_run.eval_samples),
                  seconds=time.perf_counter() - start)
    if kernel_run.runtime.save:
        _save(kernel_run, report, predictor)
    return report


def _save(run: KernelRun, report: dict, predictor) -> None:
    from pathlib import Path

    import torch

    out = Path(run.runtime.save)
    if run.method not in KERNEL_METHODS:
        with cli.atomic_path(out / f"{run.method}.pt") as tmp:
            torch.save(predictor.state_dict(), tmp)
    cli.write_text_atomic(out / "report.json", cli.to_json(report))


# A run's behaviour record (verify.studies.behaviour): numbers any change to its fit,
# training or scoring moves.
BEHAVIOUR_ROWS = 8
BEHAVIOUR_STEPS = 4


def behaviour(run: KernelRun) -> dict[str, list[float]]:
    """The split's sizes; for a kernel limit, its kernel on the first BEHAVIOUR_ROWS training
    rows and a fit on them scored on the held-out side's first rows; for a network, its
    first BEHAVIOUR_STEPS training losses."""
    import numpy as np
    import torch

    from verify.learning.kernel_limit import fit, training_rows

    small = run.replace(eval_tasks=BEHAVIOUR_ROWS, runtime=KernelRuntime(no_progress=True))
    family, split = _family_and_split(small)
    out = {"split": [float(len(split.train)), float(len(split.test)),
                     float(np.asarray(split.train).sum()), float(np.asarray(split.test).sum())]}
    if run.method in KERNEL_METHODS:
        cfg = _kernel_config(small, 1)
        x, y = training_rows(family, split.train, cfg, run.seed)
        x, y = x[:BEHAVIOUR_ROWS], y[:BEHAVIOUR_ROWS]
        out["kernel"] = cfg.kernel_of(x, x).flatten().tolist()
        sides = _sides(small, family, split)
        with torch.no_grad():
            predictor = fit(cfg, x, y).predictor
            out["fit"] = predictor(probe_rows(small, family, sides)[:BEHAVIOUR_ROWS]).flatten().tolist()
    else:
        _, record = train_network(small, family, split, {}, False, stop_after=BEHAVIOUR_STEPS)
        out["losses"] = [v for _, v in record["losses"]]
    return out


# ----------------------------------------------------------------------------- the command line

def format_report(r: dict) -> str:
    from verify.learning.records import lookup

    task, s = r["task"], r["split"]
    size = "" if r["method"] in KERNEL_METHODS else f" {r['depth']}×{r['width']}"
    lines = [f"hyperteacher M={task['M']} K={task['K']} I={task['I']} H={task['H']} O={task['O']} "
             f"encoding={r['encoding']} seed={task['seed']}",
             f"split    {s['name']}: {s['n_train']} training supports, {s['n_test']} held out",
             f"method   {r['method']}{size} (depth {r['depth']})"]
    rec = r["record"]
    if r["method"] in KERNEL_METHODS:
        for step in [] if rec.get("task_ladder") else rec["ladder"] or [rec["fit"]]:
            lines.append(f"  fit on {step['rows']:,} rows ({step['samples_per_task']} x per task): "
                         f"held-out R² {step['held_out_r2']:.4f}, jitter λ = {step['jitter_absolute']:.2e}, "
                         f"kernel {step['seconds_kernel']:.1f} s, solve {step['seconds_solve']:.1f} s"
                         + format_solver(step))
        if rec.get("task_ladder"):
            lines += [f"  {s['tasks']:,} tasks: {format_solver(s).strip(' ,')}" for s in rec["task_ladder"]
                      if s.get("solver") == "cg"]
        if rec["ladder"] is not None:
            lines.append(f"  ladder {'settled' if rec['ladder_settled'] else 'NOT settled'} "
                         f"(|ΔR²| < {LADDER_TOLERANCE} between the last two fits)")
        if rec.get("task_ladder"):
            lines += format_task_ladder(rec)
        if rec.get("sup_search"):
            search = rec["sup_search"]
            lines.append(f"  sup search: {search['fraction']:.3g} of the full one ({search['max_tasks']} "
                         f"tasks, {search['refine_steps']} ascent steps), ≈ {search['search_entries']:.3g} "
                         f"kernel entries against the fit's {search['fit_entries']:.3g}"
                         + ("" if search["within_fit"] else " (its least search costs more)"))
    else:
        lines.append(f"  trained {rec['losses'][-1][0]} steps in {rec['train_seconds']:.1f} s, final loss "
                     f"{rec['final_loss']:.3e}")
        if rec.get("finite"):
            f = rec["finite"]
            lines.append(f"  finite: {f['tasks']:,} tasks × {f['samples_per_task']} rows, "
                         f"{format(round(f['epochs'], 2), 'g')} epochs ({f['rows']:,} rows, the kernel "
                         f"limit's with these --tasks, --samples-per-task and --seed; "
                         f"{f['supports_covered']}/{f['training_supports']} training supports)")
        if "kernel_movement" in rec:
            lines.append(f"  NTK movement ‖Θ_T − Θ_0‖/‖Θ_0‖ = {rec['kernel_movement']:.3f}")
        if "parameter_movement" in rec:
            lines.append(f"  centred α·(f − f₀), α = {r['alpha']:g} (lr ÷ α): parameters moved "
                         f"‖θ − θ₀‖/‖θ₀‖ = {rec['parameter_movement']:.3g}")
    if "additivity" in rec:
        a = rec["additivity"]
        lines.append(f"  additivity (Lippl & Stachenfeld) over {a['conjunctions']} seen conjunctions: "
                     f"R² {a['train']:.4f} training, {a['held_out']:.4f} held-out supports "
                     f"({a['residual_dof']} residual df, {a['probe_points']} probe x)")
    lines.append("")
    sides = list(dict.fromkeys(m["side"] for m in r["metrics"]))
    lines.append(f"{'side':<10} {'R²':>8} {'RMSE':>10} {'sup':>10}")
    for side in sides:
        lines.append(f"{side:<10} {lookup(r['metrics'], r['method'], side, 'r2'):>8.4f} "
                     f"{lookup(r['metrics'], r['method'], side, 'rmse'):>10.3e} "
                     f"{lookup(r['metrics'], r['method'], side, 'sup'):>10.3e}")
    lines.append(f"({r['seconds']:.0f} s)")
    return "\n".join(lines)


def format_solver(step: dict) -> str:
    """A fit's solver as its report line ends: nothing for Cholesky (the runs before cg had
    none); cg's iterations and final relative residual, and NOT converged where it stopped at
    its cap short of its tolerance."""
    if step.get("solver", "cholesky") == "cholesky":
        return ""
    verdict = "" if step["converged"] else (f", NOT converged (tolerance "
                                            f"{step['config']['cg_tolerance']:g}): not a fit to its rows")
    return (f", cg {step['cg_iterations']} iterations, relative residual "
            f"{step['cg_relative_residual']:.2e}{verdict}")


def format_task_ladder(rec: dict) -> list[str]:
    """The ladder along tasks, a rung a line, and what it says of the limit."""
    lines = [f"  {'tasks':>7} {'rows':>8} {'supports':>9} {'held-out R²':>11} {'in-dist R²':>10} "
             f"{'kernel s':>9} {'solve s':>8} {'solve GiB':>9} {'peak GiB':>9}"]
    for s in rec["task_ladder"]:
        lines.append(f"  {s['tasks']:>7,} {s['rows']:>8,} "
                     f"{s['supports_covered']:>4}/{s['training_supports']:<4} "
                     f"{s['held_out_r2']:>11.4f} {s['in_distribution_r2']:>10.4f} "
                     f"{s['seconds_kernel']:>9.1f} {s['seconds_solve']:>8.1f} "
                     f"{s['solve_bytes'] / 2**30:>9.2f} {s['peak_rss_bytes'] / 2**30:>9.2f}")
    limit = rec["limit"]
    change = "" if limit["last_change"] is None else f" (last doubling {limit['last_change']:+.4f})"
    if limit["kind"] == "settled":
        lines.append(f"  limit SETTLED at held-out R² {limit['value']:.4f}{change}")
    elif limit["kind"] == "unresolved":
        lines.append(f"  limit NOT settled{change}, not extrapolated: {limit['why']}")
    else:
        f = limit["fit"]
        where = ("no interval: 3 rungs fit 3 parameters exactly" if f["interval"] is None else
                 f"{f['level']:.0%} interval [{f['interval'][0]:.4f}, {f['interval'][1]:.4f}]"
                 + (" (its upper end is the bound R² = 1: the rungs do not bound it)"
                    if f["upper_at_bound"] else "") + f" by {f['interval_method']}")
        lines.append(f"  limit NOT settled{change}: EXTRAPOLATED R∞ = {f['r_inf']:.4f}, {where}; "
                     f"model {f['model']}, a = {f['a']:.3g}, b = {f['b']:.3g}")
    return lines


work = cli.report_work(run, format_report)


def main(argv=None) -> int:
    return cli.main_of("verify.kernel", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
