"""python -m verify.sgd: SGD-trained students on held-out tasks, beside the explicit construction.

The theorem exhibits a network of size O(1/√ε + M) that is right on every task; it does
not say that training finds it. This trains students (MLPs of several shapes, or the
paper's transformer or hypernetwork) on a split's training supports, as the paper's
official code does, and scores each, on fresh in-distribution tasks, on held-out tasks,
and on tasks with K+1, K+2, … active modules, with the paper's ridge probe for z on each
layer. Two task families (--family):
  hyperteacher  regression; sup error, RMSE and the paper's R² (16 samples per task), and
                the theorem's construction at --eps beside the students
  preference    the compositional preference grid: imitation of a planner's actions;
                per-step accuracy acc and whole-episode accuracy acc_all
Scored on 1,024 tasks a side (the paper's). The sup error is searched: a lower bound. With
--certify, each MLP student's is also bracketed as python -m verify.certify does (hyperteacher,
weights khot or discrete): [lower, upper] over the held-out supports, upper proven, printed beside
the searched one; a runtime setting, which changes no number of the run.
Exit codes: 0 done (and the construction, if any, met its certificate), 1 the construction
violated it, 2 usage error, 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from constructions.catalogue import ENCODING_NAMES
from verify import cli
from verify.cli import (
    UsageError,
    positive_float,
    positive_int,
)
from verify.learning import tracking
from verify.learning.families import DEFAULT_FAMILY, FAMILIES
from verify.learning.run_config import TRANSFORMER_DEFAULTS, Runtime, SgdRun, setting_names
from verify.learning.settings import add_setting_flags, typed_only
from verify.theorem.presets import (
    CHECKPOINT_SECONDS,
    PRECISIONS,
    SHAPES,
)

# What make_split's messages call its arguments, and the flags that set them here.
SPLIT_WORDS = (("lower the held-out fraction or raise max_tries", "lower --held-out"),
               ("held_out_fraction", "--held-out"), ("(use missing-module)", "(use --split missing-module)"))


def build_parser() -> cli.Parser:
    """verify.sgd's parser: the flags every run takes, and each registered family's own."""
    p = cli.Parser("python -m verify.sgd", __doc__)
    # --seed takes several seeds here: it is this CLI's own flag, below.
    cli.add_teacher_flags(p, dict(M=8, K=2, I=4, H=4, O=4), encodings=ENCODING_NAMES,
                          encoding_help="task encoding the students read", strict_names=True, with_seed=False)
    p.add_argument("--family", default=DEFAULT_FAMILY, choices=tuple(FAMILIES),
                   help="the task family (verify.learning.families): " + "; ".join(
                       f"{name}: {family.__doc__.split(':')[0].strip()}" for name, family in FAMILIES.items())
                   + f" (default {DEFAULT_FAMILY})")
    for family in FAMILIES.values():
        family.add_flags(p)
    p.add_argument("--shapes", nargs="+", choices=SHAPES,
                   help="MLP shapes to train: matched (the construction's widths), balanced (two equal "
                        "layers, as many units), balanced4 (four), custom (--widths) "
                        "(default matched balanced)")
    add_setting_flags(p, SgdRun, defaults=TRANSFORMER_DEFAULTS)
    _add_runtime_flags(p)
    return p


def _add_runtime_flags(p) -> None:
    """Seeds, device and speed, the preset, output, checkpoints, trackers: settings a study's key
    leaves out (RUNTIME), but for the seed and --paper's preset."""
    p.add_argument("--seed", type=cli.seed, nargs="+", default=[0], action=cli.Distinct,
                   help="seed of the teacher, split, encoding and training, in [0, 2^32); several "
                        "seeds run one after another and add a mean ± sd summary (default 0)")
    p.add_argument("--device", default="cpu",
                   help="where training runs: cpu, or cuda / cuda:N where a GPU is present; metrics are "
                        "taken on the CPU in float64 (default cpu)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="float32 matmuls: fp32, tf32 (CUDA's TensorFloat-32, JAX's default on such GPUs, "
                        "so the paper's) or bf16 (autocast of the forward pass) (default tf32 on cuda, fp32 "
                        "on cpu)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the student's forward pass (a minute or so of compiling first)")
    p.add_argument("--fused-adamw", action=argparse.BooleanOptionalAction,
                   help="AdamW's fused kernel, one launch a step (default on for cuda, off for cpu)")
    p.add_argument("--paper", action="store_true",
                   help="the paper's run, for a GPU: I=H=O=16, M=16, K=3, a 4×1024 MLP, 300k steps of "
                        "128 tasks × 16 samples, seeds 1 2 3, 1,024 tasks a side; other flags given "
                        "with it override the preset")
    cli.add_json(p)
    p.add_argument("--save", metavar="DIR",
                   help="write each trained network's state_dict (sgd_<shape>.pt, or sgd_<student>.pt; "
                        "seed<N>/ per seed when there are several) and report.json into DIR "
                        "(a new or empty folder)")
    p.add_argument("--force", action="store_true", help="let --save replace the files of a non-empty DIR")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="save each student's model, optimizer and random streams into DIR every "
                        "--checkpoint-minutes of wall-clock time and at the end, and resume from what DIR "
                        "holds (a run killed and started again ends as an uninterrupted one would)")
    p.add_argument("--checkpoint-minutes", type=positive_float, default=CHECKPOINT_SECONDS / 60,
                   help=f"wall-clock minutes between checkpoints (default {CHECKPOINT_SECONDS / 60:g})")
    _add_certify_flags(p)
    tracking.add_flags(p, what="each student's loss curve and scores", group="verify.sgd",
                       name="seed<N>, then -<shape>")
    p.add_argument("--log-every", type=positive_int,
                   help="steps between readings of the running loss, the training loop's only host sync "
                        "(default steps/100)")
    cli.add_common(p, threads_default="1, or the cores left free when a training step is large "
                                      "(≥ 5e7 multiply-adds, verify.train); without --threads, smaller "
                                      "steps train on 1")


def _add_certify_flags(p) -> None:
    """--certify and its settings (runtime: a study's key leaves them out)."""
    from verify.learning.run_config import CERTIFY_DEFAULTS, CERTIFY_TASKS, CERTIFY_Z

    d = CERTIFY_DEFAULTS
    p.add_argument("--certify", action="store_true",
                   help="after each MLP student is trained and scored, bracket its sup error as "
                        "python -m verify.certify does (hyperteacher, --student mlp, --weights khot or "
                        "discrete): per held-out support a proven upper end (CROWN bounds, branch and "
                        "bound over x, a rounding margin) and a lower end at a point the search found; "
                        "the row gains `certified`, printed beside the searched sup error (a lower "
                        "bound). A runtime setting: it changes no number of the run, nor its key")
    p.add_argument("--certify-seconds", type=cli.non_negative_float, default=None,
                   help=f"--certify's budget per student, shared by the sides; the bracket is sound "
                        f"when it runs out (stop: seconds) (default {d['seconds']:g})")
    p.add_argument("--certify-ratio", type=_ratio, default=None,
                   help=f"--certify stops once upper ≤ this × lower over the set (default {d['ratio']:g})")
    p.add_argument("--certify-tasks", choices=CERTIFY_TASKS, default=None,
                   help="--certify's supports: held_out, or all (the training supports too) "
                        f"(default {d['tasks']})")
    p.add_argument("--certify-z", choices=CERTIFY_Z, default=None,
                   help="--certify's tasks of a support: enumerate every tuple of levels, or hull: one "
                        "joint box of weights and x per support (identity and orthogonal encodings; "
                        f"faster at M 16, K 3) (default {d['z']})")


def _ratio(text: str) -> float:
    value = positive_float(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a ratio ≥ 1 (upper ÷ lower), got {text!r}")
    return value


# What --certify covers: verify.certify's scope (verify/certify/saved.py, certify.py).
CERTIFY_WEIGHTS = ("khot", "discrete")


def check_certify(run: SgdRun) -> None:
    """UsageError (one line) for --certify on a run verify.certify cannot certify; before any work."""
    from constructions.tasks.task_names import LINEAR_ENCODINGS

    if not run.runtime.certify:
        return
    why = None
    if run.family != "hyperteacher":
        why = f"--family {run.family}: only hyperteacher runs can be certified"
    elif run.student != "mlp":
        why = f"--student {run.student}: only MLP students can be certified"
    elif run.weights not in CERTIFY_WEIGHTS:
        why = (f"--weights {run.weights}: only {' and '.join(CERTIFY_WEIGHTS)} weights are covered (a lower "
               "end needs a task of the set; continuous weights have no levels to enumerate)")
    elif run.encoding in STOCHASTIC_ENCODINGS:
        why = (f"--encoding {run.encoding} shows a task through random samples: e(z) is not a function "
               "of z, and there is nothing fixed to certify")
    elif run.runtime.certify_settings()["z"] == "hull" and run.encoding not in LINEAR_ENCODINGS:
        why = f"--certify-z hull needs a linear encoding ({', '.join(LINEAR_ENCODINGS)}), not {run.encoding}"
    if why:
        raise UsageError(f"--certify: {why}")


STOCHASTIC_ENCODINGS = ("fewshot",)  # TaskEncoder.stochastic (constructions/tasks/encodings.py)


def certify_student(prep: Prepared, name: str, net, progress) -> dict:
    """verify.certify's bracket on a trained MLP student's sup error (certify.certify_supports on
    the run's own teacher, encoder and split, the network in float64 as saved.py reads it back):
    per side (held_out; with --certify-tasks all, train too) the bracket over its supports, the
    stop, boxes and seconds, and each support's bracket."""
    import copy

    from verify.certify.certify import certify_supports

    settings = prep.run.runtime.certify_settings()
    family = prep.family
    if family.encode.stochastic:  # check_certify refused it by name; an encoder can say so itself
        raise UsageError(f"--certify: the {family.encoding} encoding is stochastic: nothing fixed to certify")
    student = copy.deepcopy(net).to("cpu").double().eval()
    sides = {"held_out": prep.split.test}
    if settings["tasks"] == "all":
        sides["train"] = prep.split.train
    sides = {side: supports for side, supports in sides.items() if len(supports)}
    out = dict(settings=dict(settings, goal="set", intermediate="auto", device=prep.run.runtime.device))
    device = prep.run.runtime.device
    for side, supports in sides.items():
        with cli.phase(f"certify {name} ({side})", progress):
            c = certify_supports(student, family.teacher, family.encode, supports, device=device,
                                 z=settings["z"], ratio=settings["ratio"], goal="set",
                                 seconds=settings["seconds"] / len(sides), intermediate="auto",
                                 progress=progress)
        out[side] = dict(lower=c["lower"], upper=c["upper"], ratio=c["ratio"], stop=c["stop"],
                         nodes=c["nodes"], open_boxes=c["open_boxes"], seconds=c["seconds"],
                         supports=len(c["supports"]), tasks=c["tasks"], max_margin=c["max_margin"],
                         worst=c["worst"], per_support=c["supports"])
    return out


def certified_note(row: dict, searched: dict) -> list[str]:
    """The lines of a row's `certified` brackets, beside its searched sup error on each side."""
    lines = []
    for side, c in row["certified"].items():
        if side == "settings":
            continue
        ratio = "∞" if c["ratio"] == math.inf else f"{c['ratio']:.2f}×"
        found = searched.get(side)
        lines.append(f"{row['network']}: {side} sup error certified in [{c['lower']:.3e}, {c['upper']:.3e}] "
                     f"({ratio}; searched {_fmt(found, '.3e')}), {c['supports']:,} supports, {c['tasks']:,} "
                     f"tasks, {c['nodes']:,} boxes, {c['seconds']:.1f} s, stopped by {c['stop']}"
                     + ("" if c["open_boxes"] == 0 else f" ({c['open_boxes']:,} boxes open)"))
    return lines


def _parser() -> cli.Parser:
    """One parser for every parse without --paper (a study resolves thousands of runs), per
    set of registered families (a family registered later gets a parser that offers it)."""
    return _parser_of(tuple(FAMILIES))


@functools.cache
def _parser_of(families: tuple[str, ...]) -> cli.Parser:
    """build_parser's, with no default for a setting: what it holds is only what was typed
    (SgdRun.build gives the rest its default, one source; tests hold the help's defaults to
    those)."""
    return typed_only(build_parser(), setting_names())


def parse_args(argv=None) -> SgdRun:
    """The run the command line asks for: the settings it gives (SgdRun.build fills the rest
    and checks them) and how it runs (Runtime). One line and exit 2 for bad input, before any
    work (and before --save or --checkpoint is made)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = _parser().parse_args(argv)
    given = {k: v for k, v in vars(ns).items() if k in setting_names()}  # only what was typed
    family = FAMILIES[given.get("family", DEFAULT_FAMILY)]
    seeds = given.pop("seed", None) or (family.paper_preset.get("seed", [0]) if ns.paper else [0])
    seeds = tuple(seeds)  # distinct: a seed given twice is refused (cli.Distinct)
    cli.check_device(ns.device)
    names = {f.name for f in dataclasses.fields(Runtime)} - {"seeds", "log"}
    runtime = Runtime(seeds=seeds, log=_tracker_spec(ns), **{k: getattr(ns, k) for k in names})
    run = SgdRun.build({**given, "seed": seeds[0]}, paper=ns.paper, runtime=runtime)
    check_certify(run)
    # Only now, when nothing else is wrong, are the folders made.
    made = {}
    if ns.save:
        made["save"] = str(cli.prepare_out_dir(ns.save, "--save", force=ns.force))
    if ns.checkpoint:
        made["checkpoint"] = str(cli.prepare_out_dir(ns.checkpoint, "--checkpoint", force=True))
    return run.replace(runtime=dataclasses.replace(runtime, **made))


def _tracker_spec(ns):
    """--log, --log-group and --log-name as one tracker spec (None without --log)."""
    try:
        return tracking.spec_of(ns, "verify.sgd", "run")
    except ValueError as e:
        raise UsageError(str(e)) from None


# --- a study's run (verify.studies.interfaces.StudyProgram) ---------------------------------

# Besides verify.sgd's settings, a study's grid point may give an MLP as `width` and `depth`
# (depth equal layers of width).
STUDY_PARAMETERS = ("width", "depth")
# Parameters that only some students take.
STUDENT_ONLY = {**dict.fromkeys(("width", "depth", "shapes", "widths", "init"), ("mlp",)),
                **dict.fromkeys(("d_model", "n_heads", "n_layers"), ("transformer",)),
                "d_ffw": ("transformer", "hypernetwork")}


def own_parameters(params: dict) -> dict:
    """The grid point's parameters that apply to its run. A grid that crosses students (the
    scaling-law sweep: mlp and transformer) sets both students' sizes; each run takes its own
    student's. Likewise a grid that crosses task families sets each family's own settings;
    each run takes its own family's."""
    student = params.get("student", "mlp")
    params = {k: v for k, v in params.items() if k not in STUDENT_ONLY or student in STUDENT_ONLY[k]}
    own = set(FAMILIES[params.get("family", DEFAULT_FAMILY)].settings)
    return {k: v for k, v in params.items()
            if not any(k in other.settings and k not in own for other in FAMILIES.values())}


def check_pack_grid(configs: list[dict]) -> None:
    """A study's --pack takes runs of one student each: refuse a grid (its runs' keys) whose
    runs train several."""
    for c in configs:
        shapes = c.get("shapes") or []
        if c.get("student", "mlp") == "mlp" and len(shapes) != 1:
            raise UsageError(f"--pack: a run of this grid trains {len(shapes)} students of different shapes "
                             f"(--shapes {' '.join(shapes)}); a pack takes runs of one student each (give "
                             "the grid one shape, or width and depth)")


def config_of(params: dict) -> SgdRun:
    """The run of a study's grid point (its parameters by name, as the study file types them)."""
    own = own_parameters(params)
    settings = {k: v for k, v in own.items() if k not in STUDY_PARAMETERS}
    if "width" in own or "depth" in own:
        width, depth = own.get("width", 1024), own.get("depth", 4)
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise UsageError(f"parameter 'depth' is a number of layers, not {depth!r}")
        settings |= {"shapes": ["custom"], "widths": [width] * depth}
    return SgdRun.build(settings)


def from_key(config: dict, place: cli.RunPlace | None = None) -> SgdRun:
    """The run a stored key stands for, to run at `place` (one thread, quiet, its checkpoints
    in the run's folder, its tracker if any), or, with no place, to replay (quiet)."""
    if place is None:
        return SgdRun.from_key(config, Runtime(no_progress=True))
    cli.check_device(place.device)
    try:
        log = tracking.parse_log(list(place.log), place.log_group, place.log_name) if place.log else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    minutes = CHECKPOINT_SECONDS / 60 if place.checkpoint_minutes is None else place.checkpoint_minutes
    run = SgdRun.from_key(config)
    folder = str(cli.prepare_out_dir(place.run_dir, "--checkpoint", force=True))
    return run.replace(runtime=Runtime(threads=1, no_progress=True, device=place.device, checkpoint=folder,
                                       checkpoint_minutes=minutes, seeds=(run.seed,), log=log,
                                       log_name=place.log_name if log else None))


def command_line(run: SgdRun) -> list[str]:
    """verify.sgd's flags that reproduce `run`."""
    return run.command_line()


# Settings that do not change a run's result, left out of its configuration's key.
RUNTIME = ("threads", "no_progress", "json", "save", "force", "checkpoint", "checkpoint_minutes", "log_every",
           "precision", "compile", "fused_adamw", "device", "paper", "seeds", "log", "log_group", "log_name",
           "certify", "certify_seconds", "certify_ratio", "certify_tasks", "certify_z")


def speed_of(run: SgdRun):
    """The run's Speed: the device's defaults, with what the flags set."""
    from verify.learning.train import Speed

    default = Speed.default(run.runtime.device)
    return Speed(precision=run.runtime.precision or default.precision, compile=run.runtime.compile,
                 fused=default.fused if run.runtime.fused_adamw is None else run.runtime.fused_adamw)


def speed_note(train: dict) -> str:
    """'' for today's CPU defaults; else how the steps ran (precision, compiled, fused)."""
    speed = train.get("speed", {})
    notes = [speed.get("precision", "fp32")] * (speed.get("precision", "fp32") != "fp32")
    notes += ["compiled"] * bool(speed.get("compile")) + ["fused AdamW"] * bool(speed.get("fused"))
    return "".join(f", {n}" for n in notes)


def schedule_note(train: dict) -> str:
    """'' for the constant schedule; else the cosine schedule in a few words."""
    if train.get("schedule", "constant") == "constant":
        return ""
    return f" (cosine: {train['warmup_steps']} warmup steps, decay to {train['lr'] / 10:g})"


def run_config(run: SgdRun) -> dict:
    """A run's configuration, as a study keys it (SgdRun.key)."""
    return run.key()


def extra_sides(run: SgdRun) -> list[int]:
    """The numbers of active modules beyond K that are scored: K+1 … K+extra, at most M."""
    return list(range(run.K + 1, min(run.K + run.extra_modules, run.M) + 1))


def split_of(run: SgdRun):
    """The split, with any refusal of make_split worded in this CLI's flags."""
    from constructions.tasks.splits import make_split

    try:
        return make_split(run.split, run.M, run.K, seed=run.seed, held_out_fraction=run.held_out)
    except ValueError as e:
        message = str(e)
        for word, flag in SPLIT_WORDS:
            message = message.replace(word, flag)
        held_out = f" with --held-out {run.held_out:g}" if "--held-out" in message else ""
        raise UsageError(f"--split {run.split}{held_out}: {message}") from None


@contextlib.contextmanager
def threads_of_run(n: int | None, largest_step_macs: int):
    """--threads, else 1 unless a training step is large enough for threads to pay off
    (verify.train.SINGLE_THREAD_MACS); torch's setting is restored afterwards, for callers
    that run several reports in one process."""
    import torch

    from verify.learning.train import SINGLE_THREAD_MACS

    previous = torch.get_num_threads()
    cli.set_threads(n, cli.default_threads(threads_pay=largest_step_macs >= SINGLE_THREAD_MACS))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def make_family(run: SgdRun):
    """The task family of a run, with its encoder."""
    return FAMILIES[run.family].from_run(run)


def build_students(run: SgdRun, family, widths_c) -> dict:
    """{name: (untrained student, hidden widths or None)}, each initialised from the seed."""
    import torch

    from verify.learning.students import HypernetworkStudent, TransformerStudent
    from verify.learning.train import mlp, shape_widths

    torch.manual_seed(run.seed)
    E, I, O = family.E, family.I, family.O
    if run.student == "transformer":
        return {"transformer": (TransformerStudent(E, I, O, d_model=run.d_model, n_heads=run.n_heads,
                                                   n_layers=run.n_layers, d_ffw=run.d_ffw), None)}
    if run.student == "hypernetwork":
        return {"hypernetwork": (HypernetworkStudent(E, I, O, d_ffw=run.d_ffw), None)}
    out = {}
    for shape in run.shapes:
        torch.manual_seed(run.seed)  # each shape starts from the same seed, whatever came before
        w = shape_widths(shape, widths_c, run.widths)
        out[shape] = (mlp(E + I, w, O, run.init), w)
    return out


def ratio_records(network: str, metrics: list, reference: list | None, names) -> list:
    """Held-out over training, and over the reference network's held-out, for each metric
    in `names` (the hyperteacher's sup error and RMSE): how much composing costs."""
    from verify.learning.records import Metric

    def value(records, net, side, name):
        return next((m.value for m in records if (m.network, m.side, m.metric) == (net, side, name)), None)

    out = []
    for name in names:
        held, train = value(metrics, network, "held_out", name), value(metrics, network, "train", name)
        out.append(Metric(network, "held_out", f"{name}_over_train",
                          held / train if held and train else None))
        if reference is not None:
            ref = value(reference, reference[0].network, "held_out", name)
            out.append(Metric(network, "held_out", f"{name}_over_reference",
                              held / ref if held and ref else None))
    return out


@dataclass
class Prepared:
    """A run up to its training: its family, split, scoring sides, untrained students, and
    the reference network's rows and metrics (scored already)."""

    run: SgdRun
    family: object
    split: object
    sides: dict
    students: dict
    reference: object
    rows: list
    metrics: list
    ref_metrics: list | None
    train: object  # TrainConfig
    speed: object  # Speed
    start: float
    trackers: dict = field(default_factory=dict)  # {shape: its tracker (verify.learning.tracking)}


def prepare(run: SgdRun, progress) -> Prepared:
    """Everything of a run before training: family, split, reference, sides, students, and
    the checkpoint folder's room."""
    from verify.learning.train import CheckpointSpace, TrainConfig, check_checkpoint_space

    start = time.perf_counter()
    with cli.phase("task family, split and reference", progress):
        split = split_of(run)
        family = make_family(run)
        try:
            reference = family.reference_for(run)
        except ValueError as e:  # an ε no network can reach (more than 2^40 knots)
            raise UsageError(str(e)) from None
    # Every network is scored on the same tasks: the paper's 'test' (fresh tasks on the
    # training supports), 'ood' (held-out supports) and 'ood_k' (k active modules, k > K).
    sides = family.eval_sides(split, extra_sides(run), run.eval_tasks, run.task.eval_samples,
                              run.seed)
    students = build_students(run, family, reference.widths if reference else [])
    if run.runtime.checkpoint:
        try:
            check_checkpoint_space(Path(run.runtime.checkpoint), [net for net, _ in students.values()])
        except CheckpointSpace as e:
            raise UsageError(f"--checkpoint: {e}") from None
    tc = TrainConfig(steps=run.steps, tasks_per_batch=run.tasks_per_batch,
                     samples_per_task=run.task.samples_per_task, lr=run.lr,
                     weight_decay=run.weight_decay, seed=run.seed, device=run.runtime.device,
                     init=run.init, decay=run.decay, schedule=run.schedule, warmup_steps=run.warmup_steps)
    return Prepared(run, family, split, sides, students, reference, [], [], None, tc, speed_of(run), start)


def score_reference(prep: Prepared, progress) -> None:
    """The reference network's row and metrics (the construction's), into prep."""
    reference, family, run = prep.reference, prep.family, prep.run
    if reference is None:
        return
    with cli.phase(f"evaluate {reference.name}", progress):
        prep.ref_metrics, probe = family.score(reference.name, reference.net, prep.sides, run.seed,
                                               reference.probe_net, encode=reference.encode)
    sup = {m.side: m.value for m in prep.ref_metrics if m.metric == "sup"}
    prep.rows.append(dict(network=reference.name, widths=reference.widths,
                          hidden_units=int(sum(reference.widths)), parameters=None,
                          certificate=reference.certificate, probe_r2=probe,
                          within_certificate={side: bool(v <= reference.certificate)
                                              for side, v in sup.items()}))
    prep.metrics += prep.ref_metrics + ratio_records(reference.name, prep.ref_metrics, None,
                                                     family.ratio_metrics)


def checkpoint_of(run: SgdRun, shape: str) -> Path | None:
    folder = run.runtime.checkpoint
    return Path(folder) / f"seed{run.seed}_{shape}.ckpt" if folder else None


def train_students(prep: Prepared, progress) -> dict:
    """{shape: TrainResult}, each student trained alone."""
    from verify.learning.train import CheckpointMismatch, train_student

    run, runtime, trained = prep.run, prep.run.runtime, {}
    for shape, (net, widths) in prep.students.items():
        label = "×".join(map(str, widths)) if widths else shape
        tracker = open_tracker_of(prep, shape)
        try:
            trained[shape] = train_student(prep.family, prep.split.train, net, prep.train, progress=progress,
                                           threads=runtime.threads, name=label, widths=widths,
                                           checkpoint=checkpoint_of(run, shape),
                                           checkpoint_seconds=60 * runtime.checkpoint_minutes,
                                           log_every=runtime.log_every, speed=prep.speed, tracker=tracker)
        except CheckpointMismatch as e:
            raise UsageError(f"--checkpoint: {e}") from None
    return trained


def open_tracker_of(prep: Prepared, shape: str):
    """The tracker of one student of the run (--log), kept in prep for its scores; None without."""
    from verify.learning.tracking import open_tracker

    run = prep.run
    if run.runtime.log is None:
        return None
    name = run.runtime.log_name or f"seed{run.seed}"
    prep.trackers[shape] = open_tracker(run.runtime.log.named(f"{name}-{shape}"), run_config(run))
    return prep.trackers[shape]


def finish(prep: Prepared, trained: dict, progress) -> dict:
    """Score each trained student and assemble the run's report (and --save its files)."""
    from verify.learning.records import as_dicts
    from verify.learning.students import parameter_count
    from verify.learning.tracking import log_scores

    run, family, rows, metrics = prep.run, prep.family, list(prep.rows), list(prep.metrics)
    for shape, (_, widths) in prep.students.items():
        result = trained[shape]
        # The paper probes MLPs and transformers, not hypernetworks (run.py).
        probe_net = None if run.student == "hypernetwork" else result.net
        name = f"sgd {shape}"
        with cli.phase(f"evaluate {name}", progress):
            scored, probe = family.score(name, result.net, prep.sides, run.seed, probe_net,
                                         fast=scoring_copy(result.net, run.runtime.device))
        metrics += scored + ratio_records(name, scored, prep.ref_metrics, family.ratio_metrics)
        log_scores(prep.trackers.get(shape), run.steps, name, scored)
        rows.append(dict(network=name, widths=list(widths) if widths else None,
                         hidden_units=int(sum(widths)) if widths else None,
                         parameters=parameter_count(result.net), probe_r2=probe,
                         train_seconds=result.seconds, final_loss=result.losses[-1][1],
                         **({"sup_search": search} if (search := family.sup_search(result.net)) else {}),
                         **({"packed_with": result.config["packed_with"]} if "packed_with" in result.config
                            else {})))
        if run.runtime.certify:  # after the scores, which it does not touch
            rows[-1]["certified"] = certify_student(prep, name, result.net, progress)
    within = (None if prep.reference is None else
              bool(rows[0]["within_certificate"]["train"] and rows[0]["within_certificate"]["held_out"]))
    report = dict(family=family.name, task=family.config(), encoding=run.encoding, student=run.student,
                  split=prep.split.summary(), train={**asdict(prep.train), "speed": asdict(prep.speed)},
                  evaluation=dict(tasks_per_side=run.eval_tasks, rows_per_task=family.rows_per_task(
                      run.task.eval_samples), extra_active_modules=extra_sides(run)),
                  rows=rows, metrics=as_dicts(metrics), construction_within_certificate=within,
                  seconds=time.perf_counter() - prep.start)
    if run.runtime.save:
        save(Path(run.runtime.save), report, trained)
    return report


def scoring_copy(net, device: str):
    """Where a run's sampled metrics are scored: None (the float64 network itself) for a CPU
    run, whose numbers stay as they were; a float32 copy on the training device otherwise."""
    if device == "cpu":
        return None
    from verify.learning.metrics import on_device

    return on_device(net, device)


def _largest_step(prep: Prepared) -> int:
    from verify.learning.train import step_macs

    P = prep.family.rows_per_task(prep.run.task.samples_per_task)
    return max(step_macs(net, prep.run.tasks_per_batch, P) for net, _ in prep.students.values())


# A run's behaviour record (verify.studies.behaviour): its first steps, the schedule at these
# fractions of the run, and every network's metrics before training on this many tasks a side.
BEHAVIOUR_STEPS = 4
BEHAVIOUR_SCHEDULE = (0.0, 0.05, 0.25, 0.5, 1.0)
BEHAVIOUR_TASKS = 8
BEHAVIOUR_SUPPORTS = 2  # the sup error's supports a side
# The sup error's search cut to a few points and ascent steps, and no line search (its one
# sweep of every coordinate costs a transformer a minute): the random and ascent stages run.
BEHAVIOUR_MEASURE = dict(max_tasks=2, points_per_task=4, refine_tasks=1, refine_starts=1, refine_steps=2,
                         line_evaluations=0)


def behaviour(run: SgdRun) -> dict[str, list[float]]:
    """What a run computes, in a few numbers that any change to its training or scoring code
    moves (verify.studies.behaviour compares them with the ones a stored run recorded):

    - `split`: how many supports train and how many are held out, and a checksum of both;
    - `lr`: the learning rate at BEHAVIOUR_SCHEDULE fractions of the run's steps;
    - per network, `<name> scores`: every metric (and probe R²) of the untrained network,
      and the construction's certificate, on BEHAVIOUR_TASKS tasks a side (the sup error
      over the side's first BEHAVIOUR_SUPPORTS supports, with BEHAVIOUR_MEASURE's search);
    - per student, `<name> losses`: the training loss of its first BEHAVIOUR_STEPS steps, as
      the run trains them (the full run's schedule and data stream; the running mean the
      loop logs, which is a fixed function of them).

    One thread, on the CPU, whatever the run used: the record is the same wherever it is made
    (up to a few ulps of BLAS)."""
    import copy

    import numpy as np
    import torch

    from verify.learning.train import learning_rate, train_student

    # No checkpoint, no --save, no tracker (a replay logs nowhere), the CPU's default speed.
    small = run.replace(eval_tasks=BEHAVIOUR_TASKS, runtime=Runtime())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        prep = prepare(small, progress=False)
        prep.sides = {side: (supports[:BEHAVIOUR_SUPPORTS], sampled) for side, (supports, sampled) in
                      prep.sides.items()}
        if hasattr(prep.family, "sup_measure"):
            from verify.theorem.presets import MeasureBudget

            prep.family.sup_measure = MeasureBudget(**BEHAVIOUR_MEASURE)
        supports = [np.asarray(prep.split.train, dtype=np.int64), np.asarray(prep.split.test, dtype=np.int64)]
        # Each side's size and a position-weighted checksum of its supports (which, in which order).
        out = {"split": [float(len(s)) for s in supports]
               + [float((s.ravel() * np.arange(1, s.size + 1)).sum()) for s in supports]}
        steps = prep.train.steps
        out["lr"] = [float(learning_rate(prep.train, max(1, round(f * steps)))) for f in BEHAVIOUR_SCHEDULE]
        score_reference(prep, progress=False)
        if prep.reference is not None:
            out[f"{prep.reference.name} scores"] = [prep.reference.certificate, *_values(prep.ref_metrics)]
        for shape, (net, widths) in prep.students.items():
            untrained = copy.deepcopy(net).double()
            probe_net = None if run.student == "hypernetwork" else untrained
            scored, probe = prep.family.score(f"sgd {shape}", untrained, prep.sides, run.seed, probe_net)
            out[f"sgd {shape} scores"] = _values(scored) + [v for _, v in (probe or [])]
            search = prep.family.sup_search(net)  # a search cut below the full one (a short run's)
            if search is not None:
                out[f"sgd {shape} sup search"] = [search["fraction"]]
            result = train_student(prep.family, prep.split.train, net, prep.train, progress=False, threads=1,
                                   widths=widths, log_every=1, speed=prep.speed, stop_after=BEHAVIOUR_STEPS)
            out[f"sgd {shape} losses"] = [v for _, v in result.losses]  # the running loss after each step
    finally:
        torch.set_num_threads(threads)
    return out


def _values(records) -> list[float]:
    """Metric records' values in their order, None as nan (a metric a side could not take)."""
    return [math.nan if m.value is None else float(m.value) for m in records]


def run(sgd_run: SgdRun) -> dict:
    """One verify.sgd run (one seed): prepare, train each student, score, report."""
    progress = False if sgd_run.runtime.no_progress else None
    prep = prepare(sgd_run, progress)
    with threads_of_run(sgd_run.runtime.threads, _largest_step(prep)):
        score_reference(prep, progress)
        return finish(prep, train_students(prep, progress), progress)


def run_packed(runs: list[SgdRun]) -> list[dict]:
    """Runs of one student's shape each (a study's seeds, splits or data), trained as one
    pack (verify.learning.pack) and then scored one by one: the reports `run` gives, each
    row marked `packed_with`. PackMismatch for runs that cannot share a pack."""
    from verify.learning.pack import Member, PackMismatch, train_pack
    from verify.learning.train import CheckpointMismatch

    progress = False if runs[0].runtime.no_progress else None
    preps = [prepare(run, progress) for run in runs]
    if any(len(p.students) != 1 for p in preps):
        raise PackMismatch("a pack takes runs of one student each (one --shapes, or a transformer or "
                           "hypernetwork)")
    members = []
    for p in preps:
        (shape, (net, widths)), = p.students.items()
        members.append(Member(p.family, p.split.train, net, p.train, name=f"seed {p.run.seed} {shape}",
                              widths=widths, checkpoint=checkpoint_of(p.run, shape),
                              tracker=open_tracker_of(p, shape)))
    first = runs[0].runtime
    with threads_of_run(first.threads, len(preps) * _largest_step(preps[0])):
        for p in preps:
            score_reference(p, progress)
        try:
            results = train_pack(members, progress=progress, threads=first.threads,
                                 checkpoint_seconds=60 * first.checkpoint_minutes, log_every=first.log_every,
                                 speed=preps[0].speed)
        except CheckpointMismatch as e:
            raise UsageError(f"--checkpoint: {e}") from None
        return [finish(p, {next(iter(p.students)): r}, progress) for p, r in zip(preps, results, strict=True)]


def save(out: Path, report: dict, trained: dict) -> None:
    """Each file is written under a temporary name and renamed when complete; report.json
    comes last, so a folder that holds it holds every network."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    for shape, result in trained.items():
        with cli.atomic_path(out / f"sgd_{shape}.pt") as tmp:
            torch.save(result.net.state_dict(), tmp)
    cli.write_text_atomic(out / "report.json", cli.to_json(report))


def _fmt(v, spec=".2e"):
    return "—" if v is None else format(v, spec)


def format_report(r: dict) -> str:
    from verify.learning.families import family_named
    from verify.learning.records import lookup

    family = family_named(r.get("family"))
    task, s, tr, ev = r["task"], r["split"], r["train"], r["evaluation"]
    extra = [f"k{k}" for k in ev["extra_active_modules"]]
    beyond = [(k, family.headline, f"{family.headline_label} k={k[1:]}", ".4f") for k in extra]
    columns = [*family.columns, *beyond, *family.ratio_columns]
    settings = " ".join(f"{k}={v}" for k, v in task.items() if k not in ("seed", "encoding"))
    lines = [f"{family.name} {settings} encoding={r['encoding']} seed={task['seed']}",
             f"split    {s['name']}: {s['n_train']} training supports, {s['n_test']} held out",
             f"training {r['student']}, AdamW lr={tr['lr']:g}{schedule_note(tr)} wd={tr['weight_decay']:g} "
             f"({tr['decay']}), init {tr['init']}{speed_note(tr)}, {tr['steps']} steps "
             f"of {tr['tasks_per_batch']} tasks × {family.rows_of(tr['samples_per_task'], task)} rows",
             f"scored   {ev['tasks_per_side']} tasks a side; {family.scored_note}"
             + ("; k=j: tasks with j active modules, more than any training task has" if extra else ""),
             "",
             f"{'network':<30} {'hidden':>8}" + "".join(f" {head:>10}" for _, _, head, _ in columns)
             + "  probe R² (encoding, each layer, output)"]
    for row in r["rows"]:
        probe = "—" if row["probe_r2"] is None else " ".join(f"{v:.3f}" for _, v in row["probe_r2"])
        size = f"{row['hidden_units']:,}" if row["hidden_units"] is not None else f"{row['parameters']:,}p"
        cells = [_fmt(lookup(r["metrics"], row["network"], side, metric, None), spec)
                 for side, metric, _, spec in columns]
        lines.append(f"{row['network']:<30} {size:>8}" + "".join(f" {c:>10}" for c in cells) + f"  {probe}")
    if r["construction_within_certificate"] is not None:
        c = r["rows"][0]
        lines += ["", f"construction certificate {c['certificate']:.3e}: "
                  f"{'met' if r['construction_within_certificate'] else 'VIOLATED'} on training and held-out "
                  f"supports; 'vs constr' = SGD held-out sup error / construction's ({r['seconds']:.0f} s)"]
        for k in extra:
            lines.append(f"k={k[1:]} active modules (beyond the theorem's Z_K, K={task['K']}): "
                         "the construction's sup error "
                         f"{lookup(r['metrics'], c['network'], k, 'sup'):.3e} is "
                         f"{'within' if c['within_certificate'][k] else 'ABOVE'} "
                         "its certificate (not a claim of the theorem)")
    else:
        lines += ["", f"no reference construction for the {family.name} family ({r['seconds']:.0f} s)"]
    lines += [search_note(row) for row in r["rows"] if row.get("sup_search")]
    for row in r["rows"]:
        if row.get("certified"):
            searched = {side: lookup(r["metrics"], row["network"], side, "sup", None)
                        for side in ("held_out", "train")}
            lines += certified_note(row, searched)
    return "\n".join(lines)


def search_note(row: dict) -> str:
    """A line on a network's sup search cut below the full one (a short run's sequence student)."""
    s = row["sup_search"]
    return (f"{row['network']}: its sup error is searched with {s['fraction']:.1%} of the full search, in "
            f"proportion to its training ({s['max_tasks']:,} tasks × {s['points_per_task']} points, then "
            f"{s['refine_tasks']} × {s['refine_starts']} ascent paths of {s['refine_steps']} steps"
            f"{', no line searches' if s['line_evaluations'] == 0 else ''}): a lower bound on its sup error, "
            "as every search's is")


def summary(reports: list[dict]) -> list[dict]:
    """Mean ± sd over seeds of each network's headline metric on every side."""
    from verify.learning.families import family_named
    from verify.learning.records import lookup, mean_sd, sides_of

    family = family_named(reports[0].get("family"))
    out = []
    for row in reports[0]["rows"]:
        entry = dict(network=row["network"], metric=family.headline,
                     seeds=[r["task"]["seed"] for r in reports], sides={})
        for side in sides_of(reports[0]["metrics"], row["network"]):
            values = [lookup(r["metrics"], row["network"], side, family.headline, None) for r in reports]
            if any(v is not None for v in values):
                mean, sd = mean_sd(values)
                entry["sides"][side] = dict(mean=mean, sd=sd)
        out.append(entry)
    return out


def format_summary(rows: list[dict]) -> str:
    lines = [f"over seeds {' '.join(map(str, rows[0]['seeds']))} (mean ± sd of {rows[0]['metric']})"]
    for row in rows:
        parts = [f"{side} {v['mean']:.4f} ± {v['sd']:.4f}" for side, v in row["sides"].items()]
        lines.append(f"  {row['network']:<30} " + ", ".join(parts))
    return "\n".join(lines)


def work(sgd_run: SgdRun) -> int:
    reports = []
    for seed in sgd_run.runtime.seeds:
        runtime = sgd_run.runtime
        if runtime.save and len(runtime.seeds) > 1:
            runtime = dataclasses.replace(runtime, save=str(Path(runtime.save) / f"seed{seed}"))
        reports.append(run(sgd_run.replace(seed=seed, runtime=runtime)))
        if not sgd_run.runtime.json:
            cli.emit(format_report(reports[-1]) + ("\n" if len(sgd_run.runtime.seeds) > 1 else ""))
    if len(reports) > 1:
        rows = summary(reports)
        if sgd_run.runtime.json:
            cli.emit(cli.to_json(dict(runs=reports, summary=rows)))
        else:
            cli.emit(format_summary(rows))
        if sgd_run.runtime.save:
            cli.write_text_atomic(Path(sgd_run.runtime.save) / "summary.json", cli.to_json(rows))
    elif sgd_run.runtime.json:
        cli.emit(cli.to_json(reports[0]))
    ok = all(r["construction_within_certificate"] is not False for r in reports)
    return cli.EXIT_OK if ok else cli.EXIT_VIOLATED


def main(argv=None) -> int:
    return cli.main_of("verify.sgd", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
