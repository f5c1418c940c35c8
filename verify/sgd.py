"""python -m verify.sgd: SGD-trained students against the explicit construction, on held-out tasks.

The theorem exhibits a network of size O(1/√ε + M) that is right on every task; it does
not say that training finds it. This trains students (MLPs of several shapes, or the
paper's transformer or hypernetwork) on a split's training supports, as the paper's
official code does, and reports for the construction and each student, on fresh
in-distribution tasks, on held-out tasks, and on tasks with K+1, K+2, … active modules:
the sup error (verify.measure), RMSE, the paper's compositional R² (16 samples per task,
1,024 tasks a side), and the paper's ridge probe for z on each layer.
Exit codes: 0 done (the construction met its certificate), 1 the construction violated
it, 2 usage error, 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from dataclasses import asdict
from pathlib import Path

from constructions.names import ENCODING_NAMES, LINEAR_ENCODINGS, SPLITS
from verify import cli
from verify.cli import (
    UsageError,
    non_negative_float,
    non_negative_int,
    open_fraction,
    positive_float,
    positive_int,
)
from verify.names import DECAYS, INITS, SGD_MEASURE, SHAPES, STUDENTS

PROBE_MAX_BYTES = 2**30  # probe the construction through its dense form only up to this size
# The official sweeps' run (configs/teacher.py, sweeps/*_hyperteacher.yaml): 300k steps of
# 128 tasks × 16 samples, seeds 1–3, scored on 1,024 tasks a side with 16 samples each.
PAPER = dict(I=16, H=16, O=16, M=16, K=3, steps=300_000, tasks_per_batch=128,
             samples_per_task=16, seed=[1, 2, 3], eval_tasks=1024, eval_samples=16)
DEFAULT_SHAPES = ["matched", "balanced"]
# The official transformer (configs/teacher.py ModelConfig) and hypernetwork (d_ffw hidden units).
TRANSFORMER_DEFAULTS = dict(d_model=256, n_heads=4, n_layers=4, d_ffw=1024)
# Filled in after parsing, when --widths was not given: kept out of the parser's defaults
# so that a --widths the user typed can be told from the preset's.
PAPER_WIDTHS = [1024] * 4
# What make_split's messages call its arguments, and the flags that set them here.
SPLIT_WORDS = (("lower the held-out fraction or raise max_tries", "lower --held-out"),
               ("held_out_fraction", "--held-out"), ("(use missing-module)", "(use --split missing-module)"))


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.sgd", __doc__)
    # --seed takes several seeds here: it is this CLI's own flag, below.
    cli.add_teacher_flags(p, dict(M=8, K=2, I=4, H=4, O=4), encodings=ENCODING_NAMES,
                          encoding_help="task encoding the students read", strict_names=True, with_seed=False)
    p.add_argument("--eps", type=positive_float, default=1e-2,
                   help="ε of the construction, which also sets the matched size (default 1e-2)")
    p.add_argument("--split", default="random", choices=SPLITS,
                   help="which supports are held out (default random)")
    p.add_argument("--held-out", type=open_fraction, default=0.25,
                   help="held-out fraction of supports, in (0, 1), for every split except non_compositional "
                        "(missing-module) and popular-modules-half "
                        "(default 0.25)")
    p.add_argument("--student", default="mlp", choices=STUDENTS,
                   help="what is trained: MLPs (one per --shapes), or the paper's transformer or "
                        "hypernetwork (default mlp)")
    p.add_argument("--shapes", nargs="+", choices=SHAPES,
                   help="MLP shapes to train: matched (the construction's widths), balanced (two equal "
                        "layers, as many units), balanced4 (four), custom (--widths) "
                        "(default matched balanced)")
    p.add_argument("--widths", type=positive_int, nargs="+",
                   help="hidden widths for --shapes custom, e.g. 1024 1024 1024 1024")
    p.add_argument("--init", choices=INITS,
                   help="MLP initialisation: lecun_normal (the paper's, Flax's default: truncated "
                        "LeCun-normal kernels, zero biases) or torch_default (default lecun_normal)")
    p.add_argument("--d-model", type=positive_int, help="transformer width (default 256, the paper's)")
    p.add_argument("--n-heads", type=positive_int, help="transformer attention heads (default 4)")
    p.add_argument("--n-layers", type=positive_int, help="transformer blocks (default 4)")
    p.add_argument("--d-ffw", type=positive_int,
                   help="hidden units of the transformer's MLPs and of the hypernetwork's generated "
                        "network (default 1024)")
    p.add_argument("--steps", type=positive_int, default=1500, help="training steps (default 1500)")
    p.add_argument("--tasks-per-batch", type=positive_int, default=32, help="tasks per step (default 32)")
    p.add_argument("--samples-per-task", type=positive_int, default=16,
                   help="x per task per step (default 16)")
    p.add_argument("--lr", type=positive_float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    p.add_argument("--weight-decay", type=non_negative_float, default=3e-3,
                   help="AdamW weight decay, ≥ 0 (default 3e-3)")
    p.add_argument("--decay", choices=DECAYS, default="matrices",
                   help="which parameters are decayed: matrices (the paper's mask: no biases, no norms) "
                        "or all (default matrices)")
    p.add_argument("--eval-tasks", type=positive_int, default=1024,
                   help="tasks on each side (in-distribution, held out, each K+j) for RMSE, R² and the "
                        "probe, drawn uniformly from that side's supports (default 1024, the paper's)")
    p.add_argument("--eval-samples", type=positive_int, default=16,
                   help="x per task for RMSE and R² (default 16, the paper's)")
    p.add_argument("--extra-modules", type=non_negative_int, default=2,
                   help="also score tasks with K+1 … K+this many active modules (at most M), which "
                        "no training task has; 0 to skip (default 2)")
    p.add_argument("--seed", type=cli.seed, nargs="+", default=[0],
                   help="seed of the teacher, split, encoding and training, in [0, 2^32); several "
                        "seeds run one after another and add a mean ± sd summary (default 0)")
    p.add_argument("--device", default="cpu",
                   help="where training runs: cpu, or cuda / cuda:N where a GPU is present; metrics are "
                        "taken on the CPU in float64 (default cpu)")
    p.add_argument("--paper", action="store_true",
                   help="the paper's run, for a GPU: I=H=O=16, M=16, K=3, a 4×1024 MLP, 300k steps of "
                        "128 tasks × 16 samples, seeds 1 2 3, 1,024 tasks a side; other flags given "
                        "with it override the preset")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--save", metavar="DIR",
                   help="write each trained network's state_dict (sgd_<shape>.pt, or sgd_<student>.pt; "
                        "seed<N>/ per seed when there are several) and report.json into DIR "
                        "(a new or empty folder)")
    p.add_argument("--force", action="store_true", help="let --save replace the files of a non-empty DIR")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="save each student's model, optimizer and random streams into DIR every "
                        "--checkpoint-every steps, and resume from what DIR holds (a run killed and "
                        "started again ends as an uninterrupted one would)")
    p.add_argument("--checkpoint-every", type=positive_int, default=1000,
                   help="steps between checkpoints (default 1000)")
    cli.add_common(p, threads_default="1, or the cores left free when a training step is large "
                                      "(≥ 5e7 multiply-adds, verify.train); without --threads, smaller "
                                      "steps train on 1")
    return p


@functools.cache
def _parser() -> cli.Parser:
    """One parser for every parse without --paper (a study resolves thousands of runs)."""
    return build_parser()


def parse_args(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    if "--paper" in argv:  # the preset sets defaults; flags given explicitly still win
        parser = build_parser()  # a fresh one: set_defaults would change the shared parser
        parser.set_defaults(**PAPER)
    args = parser.parse_args(argv)
    if args.K > args.M:
        raise UsageError(f"--K must be at most --M (got K={args.K}, M={args.M})")
    mlp_flags = {"--shapes": args.shapes is not None, "--widths": args.widths is not None,
                 "--init": args.init is not None}
    for flag, students in (("--d-model", ("transformer",)), ("--n-heads", ("transformer",)),
                           ("--n-layers", ("transformer",)), ("--d-ffw", ("transformer", "hypernetwork"))):
        if getattr(args, flag[2:].replace("-", "_")) is not None and args.student not in students:
            raise UsageError(f"{flag} applies to --student {' or '.join(students)}, not {args.student}")
    if args.student != "mlp":
        given = [flag for flag, on in mlp_flags.items() if on]
        if given:
            raise UsageError(f"{given[0]} applies to --student mlp, not {args.student}")
        args.shapes, args.widths = [args.student], None
        for name, value in TRANSFORMER_DEFAULTS.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
        if args.student == "transformer" and args.d_model % args.n_heads:
            raise UsageError(f"--d-model {args.d_model} must be a multiple of --n-heads {args.n_heads}")
    else:
        if args.shapes is None:
            args.shapes = ["custom"] if args.paper else list(DEFAULT_SHAPES)
        if args.widths is not None and "custom" not in args.shapes:
            raise UsageError("--widths applies only to --shapes custom "
                             f"(got --shapes {' '.join(args.shapes)}); "
                             "add custom to --shapes or drop --widths")
        if args.paper and args.widths is None:
            args.widths = list(PAPER_WIDTHS)
        if "custom" in args.shapes and not args.widths:
            raise UsageError("--shapes custom needs --widths, e.g. --widths 1024 1024 1024 1024")
    args.init = args.init or "lecun_normal"
    args.seeds = list(dict.fromkeys(args.seed))  # a seed given twice runs once
    args.seed = args.seeds[0]
    check_device(args.device)
    if args.force and not args.save:
        raise UsageError("--force only applies to --save DIR")
    if args.save:
        args.save = cli.prepare_out_dir(args.save, "--save", force=args.force)
    if args.checkpoint:
        args.checkpoint = cli.prepare_out_dir(args.checkpoint, "--checkpoint", force=True)
    return args


def check_device(text: str) -> None:
    """UsageError unless training can run on `text` here (torch is imported only for a
    device other than the default cpu)."""
    if text == "cpu":
        return
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise UsageError(f"--device {text!r} is not a device name; use cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {text!r}: only cpu and cuda are supported")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {text}: no CUDA device is available here; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device {text}: there are only {torch.cuda.device_count()} CUDA devices here")


def extra_sides(args) -> list[int]:
    """The numbers of active modules beyond K that are scored: K+1 … K+extra, at most M."""
    return list(range(args.K + 1, min(args.K + args.extra_modules, args.M) + 1))


def evaluate(name, f, teacher, encode, sides, seed, probe_net=None) -> dict:
    """The same metrics for any network on every side: sup error over the side's supports,
    RMSE and the paper's R² on its sampled tasks (and this project's R², which skips
    (task, output) pairs whose target is constant); then the paper's probe, fitted on the
    in-distribution tasks and scored on the held-out ones."""
    from verify.metrics import compositional_r2, compositional_r2_paper, predict, probe_r2, rmse, sup_error

    row = dict(network=name)
    for side, (supports, samples) in sides.items():
        pred = predict(f, samples, encode)
        r2, used = compositional_r2(pred, samples)
        # The sup error scores the function the R² scores (a transformer's every position),
        # over x for the family's own task weights (refine_z off): z values the training
        # never shows (weights below 0.5, say) would measure extrapolation, not composition.
        sup = sup_error(f, teacher, encode, supports, samples.x.shape[1], seed, SGD_MEASURE, refine_z=False)
        row |= {f"{side}_sup": sup.sup_error, f"{side}_rmse": rmse(pred, samples),
                f"{side}_r2": compositional_r2_paper(pred, samples), f"{side}_r2_nonconstant": r2,
                f"{side}_r2_pairs_used": used}
    row["held_out_over_train_sup"] = row["held_out_sup"] / row["train_sup"] if row["train_sup"] else None
    row["held_out_over_train_rmse"] = row["held_out_rmse"] / row["train_rmse"] if row["train_rmse"] else None
    row["probe_r2"] = (probe_r2(probe_net, sides["train"][1], sides["held_out"][1], encode)
                       if probe_net is not None else None)
    return row


def split_of(args):
    """The split, with any refusal of make_split worded in this CLI's flags."""
    from constructions.tasks.splits import make_split

    try:
        return make_split(args.split, args.M, args.K, seed=args.seed, held_out_fraction=args.held_out)
    except ValueError as e:
        message = str(e)
        for word, flag in SPLIT_WORDS:
            message = message.replace(word, flag)
        held_out = f" with --held-out {args.held_out:g}" if "--held-out" in message else ""
        raise UsageError(f"--split {args.split}{held_out}: {message}") from None


@contextlib.contextmanager
def threads_of_run(n: int | None, largest_step_macs: int):
    """--threads, else 1 unless a training step is large enough for threads to pay off
    (verify.train.SINGLE_THREAD_MACS); torch's setting is restored afterwards, for callers
    that run several reports in one process."""
    import torch

    from verify.train import SINGLE_THREAD_MACS

    previous = torch.get_num_threads()
    cli.set_threads(n, cli.default_threads(threads_pay=largest_step_macs >= SINGLE_THREAD_MACS))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def build_students(args, in_dim: int, E: int, teacher, widths_c) -> dict:
    """{name: (untrained student, hidden widths or None)}, each initialised from the seed."""
    import torch

    from verify.students import HypernetworkStudent, TransformerStudent
    from verify.train import mlp, shape_widths

    torch.manual_seed(args.seed)
    if args.student == "transformer":
        return {"transformer": (TransformerStudent(E, teacher.I, teacher.O, d_model=args.d_model,
                                                   n_heads=args.n_heads, n_layers=args.n_layers,
                                                   d_ffw=args.d_ffw), None)}
    if args.student == "hypernetwork":
        return {"hypernetwork": (HypernetworkStudent(E, teacher.I, teacher.O, d_ffw=args.d_ffw), None)}
    out = {}
    for shape in args.shapes:
        torch.manual_seed(args.seed)  # each shape starts from the same seed, whatever came before
        w = shape_widths(shape, widths_c, args.widths)
        out[shape] = (mlp(in_dim, w, teacher.O, args.init), w)
    return out


def run(args) -> dict:
    import numpy as np

    from constructions.shallow import build_shallow
    from constructions.tasks.encodings import make_encoder
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
    from verify.metrics import encoding_dim, random_supports, sample_eval_tasks
    from verify.students import parameter_count
    from verify.train import CheckpointMismatch, TrainConfig, step_macs, train_student

    start = time.perf_counter()
    progress = False if args.no_progress else None
    linear = args.encoding in LINEAR_ENCODINGS
    cfg = HyperteacherConfig(I=args.I, H=args.H, O=args.O, M=args.M, K=args.K, weights=args.weights,
                             encoding="orthogonal" if args.encoding == "orthogonal" else "identity",
                             seed=args.seed)
    with cli.phase("teacher, split and construction", progress):
        split = split_of(args)
        teacher = sample_hyperteacher(cfg)
        encode = make_encoder(args.encoding, teacher, seed=args.seed)
        try:
            construction = build_shallow(teacher, args.eps)
        except ValueError as e:  # an ε no network can reach (more than 2^40 knots)
            raise UsageError(str(e)) from None
        widths_c = construction.counted_widths()
        probe_c = construction.to_sequential() if construction.dense_bytes() <= PROBE_MAX_BYTES else None
    # Every network is scored on the same tasks: the paper's 'test' (fresh tasks on the
    # training supports), 'ood' (held-out supports) and 'ood_k' (k active modules, k > K).
    rng = np.random.default_rng(args.seed + 1)
    sides = {}
    for side, supports in (("train", split.train), ("held_out", split.test)):
        tasks = sample_eval_tasks(teacher, supports, args.eval_tasks, args.eval_samples, rng)
        sides[side] = (supports, tasks)
    for k in extra_sides(args):
        drawn = random_supports(args.M, k, args.eval_tasks, rng)
        sides[f"k{k}"] = (np.unique(drawn, axis=0), sample_eval_tasks(teacher, drawn, args.eval_tasks,
                                                                      args.eval_samples, rng))
    E = encoding_dim(encode, teacher.M)
    students = build_students(args, E + teacher.I, E, teacher, widths_c)
    largest = max(step_macs(net, args.tasks_per_batch, args.samples_per_task) for net, _ in students.values())

    with threads_of_run(args.threads, largest):
        # The construction reads z through a linear encoding; for a nonlinear one it is shown on
        # the identity encoding, as the reference the trained networks are compared with.
        c_encode = encode if linear else teacher.encode
        name = f"construction ε={args.eps:g}" + ("" if linear else " (identity input)")
        with cli.phase(f"evaluate {name}", progress):
            c_row = evaluate(name, construction, teacher, c_encode, sides, args.seed, probe_c)
        rows = [dict(c_row, widths=list(widths_c), hidden_units=int(sum(widths_c)), parameters=None,
                     certificate=construction.certificate())]
        for k in extra_sides(args):
            rows[0][f"k{k}_within_certificate"] = bool(rows[0][f"k{k}_sup"] <= rows[0]["certificate"])

        tc = TrainConfig(steps=args.steps, tasks_per_batch=args.tasks_per_batch,
                         samples_per_task=args.samples_per_task, lr=args.lr, weight_decay=args.weight_decay,
                         seed=args.seed, device=args.device, init=args.init, decay=args.decay)
        trained = {}
        for shape, (net, widths) in students.items():
            label = "×".join(map(str, widths)) if widths else shape
            ckpt = Path(args.checkpoint) / f"seed{args.seed}_{shape}.ckpt" if args.checkpoint else None
            try:
                result = train_student(teacher, encode, split.train, net, tc, progress=progress,
                                       threads=args.threads, name=label, widths=widths, checkpoint=ckpt,
                                       checkpoint_every=args.checkpoint_every)
            except CheckpointMismatch as e:
                raise UsageError(f"--checkpoint: {e}") from None
            # The paper probes MLPs and transformers, not hypernetworks (run.py).
            probe_net = None if args.student == "hypernetwork" else result.net
            with cli.phase(f"evaluate sgd {shape}", progress):
                row = evaluate(f"sgd {shape}", result.net, teacher, encode, sides, args.seed, probe_net)
            row |= dict(widths=list(widths) if widths else None,
                        hidden_units=int(sum(widths)) if widths else None,
                        parameters=parameter_count(result.net), train_seconds=result.seconds,
                        final_loss=result.losses[-1][1])
            row["sgd_over_construction_held_out_sup"] = row["held_out_sup"] / rows[0]["held_out_sup"]
            row["sgd_over_construction_held_out_rmse"] = row["held_out_rmse"] / rows[0]["held_out_rmse"]
            rows.append(row)
            trained[shape] = result

    report = dict(teacher=asdict(cfg), encoding=args.encoding, student=args.student, split=split.summary(),
                  train=asdict(tc), evaluation=dict(tasks_per_side=args.eval_tasks,
                                                    samples_per_task=args.eval_samples,
                                                    extra_active_modules=extra_sides(args)),
                  rows=rows, construction_within_certificate=bool(
                      max(rows[0]["train_sup"], rows[0]["held_out_sup"]) <= rows[0]["certificate"]),
                  seconds=time.perf_counter() - start)
    if args.save:
        save(Path(args.save), report, trained)
    return report


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
    t, s, tr = r["teacher"], r["split"], r["train"]
    ev = r["evaluation"]
    extra = [f"k{k}" for k in ev["extra_active_modules"]]
    lines = [f"teacher  I={t['I']} H={t['H']} O={t['O']} M={t['M']} K={t['K']} weights={t['weights']} "
             f"encoding={r['encoding']} seed={t['seed']}",
             f"split    {s['name']}: {s['n_train']} training supports, {s['n_test']} held out",
             f"training {r['student']}, AdamW lr={tr['lr']:g} wd={tr['weight_decay']:g} "
             f"({tr['decay']}), init {tr['init']}, {tr['steps']} steps "
             f"of {tr['tasks_per_batch']} tasks × {tr['samples_per_task']} samples",
             f"scored   {ev['tasks_per_side']} tasks a side × {ev['samples_per_task']} samples "
             "(R²: the paper's estimator); sup error over each side's supports"
             + ("; R² k=j: tasks with j active modules, more than any training task has" if extra else ""),
             "",
             f"{'network':<30} {'hidden':>8} {'sup train':>10} {'sup held':>10} {'RMSE held':>10} "
             f"{'R² train':>9} {'R² held':>9}" + "".join(f" {'R² k=' + k[1:]:>9}" for k in extra)
             + f" {'held/train':>10} {'vs constr':>9}  probe R² (encoding, each layer, output)"]
    for row in r["rows"]:
        ratio = row.get("sgd_over_construction_held_out_sup")
        probe = "—" if row["probe_r2"] is None else " ".join(f"{v:.3f}" for _, v in row["probe_r2"])
        size = f"{row['hidden_units']:,}" if row["hidden_units"] is not None else f"{row['parameters']:,}p"
        lines.append(f"{row['network']:<30} {size:>8} {_fmt(row['train_sup']):>10} "
                     f"{_fmt(row['held_out_sup']):>10} {_fmt(row['held_out_rmse']):>10} "
                     f"{_fmt(row['train_r2'], '.4f'):>9} {_fmt(row['held_out_r2'], '.4f'):>9}"
                     + "".join(f" {_fmt(row[f'{k}_r2'], '.4f'):>9}" for k in extra)
                     + f" {_fmt(row['held_out_over_train_sup'], '.2f'):>10} "
                     f"{_fmt(ratio, '.0f') + ('×' if ratio else ''):>9}  {probe}")
    c = r["rows"][0]
    lines += ["", f"construction certificate {c['certificate']:.3e}: "
              f"{'met' if r['construction_within_certificate'] else 'VIOLATED'} on training and held-out "
              f"supports; 'vs constr' = SGD held-out sup error / construction's ({r['seconds']:.0f} s)"]
    for k in extra:
        lines.append(f"k={k[1:]} active modules (beyond the theorem's Z_K, K={t['K']}): "
                     "the construction's sup error "
                     f"{c[f'{k}_sup']:.3e} is {'within' if c[f'{k}_within_certificate'] else 'ABOVE'} "
                     "its certificate (not a claim of the theorem)")
    return "\n".join(lines)


def summary(reports: list[dict]) -> list[dict]:
    """Mean ± sd over seeds of each network's R² on every side (verify.effects.mean_sd)."""
    from verify.effects import mean_sd

    out = []
    for i, row in enumerate(reports[0]["rows"]):
        entry = dict(network=row["network"], seeds=[r["teacher"]["seed"] for r in reports])
        for key in ("train_r2", "held_out_r2", *(k for k in row if k.startswith("k") and k.endswith("_r2"))):
            mean, sd = mean_sd([r["rows"][i][key] for r in reports])
            entry[key] = dict(mean=mean, sd=sd)
        out.append(entry)
    return out


def format_summary(rows: list[dict]) -> str:
    lines = [f"over seeds {' '.join(map(str, rows[0]['seeds']))} (mean ± sd)"]
    for row in rows:
        parts = [f"{key.removesuffix('_r2')} R² {v['mean']:.4f} ± {v['sd']:.4f}"
                 for key, v in row.items() if key.endswith("_r2")]
        lines.append(f"  {row['network']:<30} " + ", ".join(parts))
    return "\n".join(lines)


def work(args) -> int:
    import copy

    reports = []
    for seed in args.seeds:
        one = copy.copy(args)
        one.seed = seed
        if args.save and len(args.seeds) > 1:
            one.save = str(Path(args.save) / f"seed{seed}")
        reports.append(run(one))
        if not args.json:
            cli.emit(format_report(reports[-1]) + ("\n" if len(args.seeds) > 1 else ""))
    if len(reports) > 1:
        rows = summary(reports)
        if args.json:
            cli.emit(cli.to_json(dict(runs=reports, summary=rows)))
        else:
            cli.emit(format_summary(rows))
        if args.save:
            cli.write_text_atomic(Path(args.save) / "summary.json", cli.to_json(rows))
    elif args.json:
        cli.emit(cli.to_json(reports[0]))
    ok = all(r["construction_within_certificate"] for r in reports)
    return cli.EXIT_OK if ok else cli.EXIT_VIOLATED


def main(argv=None) -> int:
    return cli.main_of("verify.sgd", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
