"""python -m verify.sgd: SGD-trained MLPs against the explicit construction, on held-out tasks.

The theorem exhibits a network of size O(1/√ε + M) that is right on every task; it does
not say that training finds it. This trains standard MLPs on a split's training supports
and reports, for the construction and for each trained network, on training and on
held-out tasks: the sup error (verify.measure), RMSE, the paper's compositional R², and
the held-out R² of a ridge probe for z on each hidden layer.
Exit codes: 0 done (the construction met its certificate), 1 the construction violated
it, 2 usage error, 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import asdict
from pathlib import Path

from constructions.names import ENCODING_NAMES, LINEAR_ENCODINGS, SPLITS, WEIGHTS
from verify import cli
from verify.cli import UsageError, non_negative_float, open_fraction, positive_float, positive_int
from verify.names import SHAPES

# The sup is taken over x for the family's own task weights (refine_z off): z values the
# training never shows (weights below 0.5, say) would measure extrapolation, not composition.
SUP_MEASURE = dict(max_tasks=2000, points_per_task=8, refine_tasks=16, refine_starts=8, refine_steps=60,
                   refine_z=False)
PROBE_MAX_BYTES = 2**30  # probe the construction through its dense form only up to this size
PAPER = dict(I=16, H=16, O=16, M=16, K=3, shapes=["custom"], steps=100_000, tasks_per_batch=128,
             samples_per_task=32)
# Filled in after parsing, when --widths was not given: kept out of the parser's defaults
# so that a --widths the user typed can be told from the preset's.
PAPER_WIDTHS = [1024] * 4
# What make_split's messages call its arguments, and the flags that set them here.
SPLIT_WORDS = (("lower the held-out fraction or raise max_tries", "lower --held-out"),
               ("held_out_fraction", "--held-out"), ("(use missing-module)", "(use --split missing-module)"))


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.sgd", __doc__)
    p.add_argument("--M", type=positive_int, default=8, help="number of modules (default 8)")
    p.add_argument("--K", type=positive_int, default=2, help="max active modules per task, K ≤ M (default 2)")
    p.add_argument("--I", type=positive_int, default=4, help="input size (default 4)")
    p.add_argument("--H", type=positive_int, default=4, help="teacher hidden size (default 4)")
    p.add_argument("--O", type=positive_int, default=4, help="output size (default 4)")
    p.add_argument("--eps", type=positive_float, default=1e-2,
                   help="ε of the construction, which also sets the matched size (default 1e-2)")
    p.add_argument("--weights", default="discrete", choices=WEIGHTS,
                   help="weights of active modules (default discrete)")
    p.add_argument("--encoding", default="identity", choices=ENCODING_NAMES,
                   help="task encoding the networks read (default identity)")
    p.add_argument("--split", default="random", choices=SPLITS,
                   help="which supports are held out (default random)")
    p.add_argument("--held-out", type=open_fraction, default=0.25,
                   help="held-out fraction of supports, in (0, 1), for every split except non_compositional "
                        "(missing-module) and popular-modules-half "
                        "(default 0.25)")
    p.add_argument("--shapes", nargs="+", default=["matched", "balanced"], choices=SHAPES,
                   help="MLP shapes to train: matched (the construction's widths), balanced (two equal "
                        "layers, as many units), custom (--widths) (default matched balanced)")
    p.add_argument("--widths", type=positive_int, nargs="+",
                   help="hidden widths for --shapes custom, e.g. 1024 1024 1024 1024")
    p.add_argument("--steps", type=positive_int, default=1500, help="training steps (default 1500)")
    p.add_argument("--tasks-per-batch", type=positive_int, default=32, help="tasks per step (default 32)")
    p.add_argument("--samples-per-task", type=positive_int, default=16,
                   help="x per task per step (default 16)")
    p.add_argument("--lr", type=positive_float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    p.add_argument("--weight-decay", type=non_negative_float, default=3e-3,
                   help="AdamW weight decay, ≥ 0 (default 3e-3)")
    p.add_argument("--eval-samples", type=positive_int, default=64,
                   help="x per task for RMSE and R² (default 64)")
    p.add_argument("--seed", type=cli.seed, default=0,
                   help="seed of the teacher, split, encoding and training, in [0, 2^32) (default 0)")
    p.add_argument("--device", default="cpu",
                   help="where training runs: cpu, or cuda / cuda:N where a GPU is present; metrics are "
                        "taken on the CPU in float64 (default cpu)")
    p.add_argument("--paper", action="store_true",
                   help="the paper's sizes, for a GPU: I=H=O=16, M=16, K=3, a 4×1024 MLP, 100k steps; "
                        "other flags given with it override the preset")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--save", metavar="DIR",
                   help="write each trained network's state_dict (sgd_<shape>.pt) and report.json into DIR "
                        "(a new or empty folder)")
    p.add_argument("--force", action="store_true", help="let --save replace the files of a non-empty DIR")
    cli.add_common(p, threads_default="1, or the cores left free when a training step is large "
                                      "(≥ 5e7 multiply-adds, verify.train); without --threads, smaller "
                                      "steps train on 1")
    return p


def parse_args(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if "--paper" in argv:  # the preset sets defaults; flags given explicitly still win
        parser.set_defaults(**PAPER)
    args = parser.parse_args(argv)
    if args.K > args.M:
        raise UsageError(f"--K must be at most --M (got K={args.K}, M={args.M})")
    if args.widths is not None and "custom" not in args.shapes:
        raise UsageError(f"--widths applies only to --shapes custom (got --shapes {' '.join(args.shapes)}); "
                         "add custom to --shapes or drop --widths")
    if args.paper and args.widths is None:
        args.widths = list(PAPER_WIDTHS)
    if "custom" in args.shapes and not args.widths:
        raise UsageError("--shapes custom needs --widths, e.g. --widths 1024 1024 1024 1024")
    check_device(args.device)
    if args.force and not args.save:
        raise UsageError("--force only applies to --save DIR")
    if args.save:
        args.save = cli.prepare_out_dir(args.save, "--save", force=args.force)
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


def evaluate(name, f, widths, teacher, encode, split, samples, seed, probe_net=None) -> dict:
    """The same metrics for any network: sup error, RMSE and R² on both sides of the split."""
    from verify.measure import measure_sup_error
    from verify.metrics import compositional_r2, predict, probe_r2, rmse

    row = dict(network=name, widths=list(widths), hidden_units=int(sum(widths)))
    for side, supports in (("train", split.train), ("held_out", split.test)):
        pred = predict(f, samples[side], encode)
        r2, used = compositional_r2(pred, samples[side])
        sup = measure_sup_error(f, teacher, encode=encode, supports=supports, seed=seed, progress=False,
                                **SUP_MEASURE)
        row |= {f"{side}_sup": sup.sup_error, f"{side}_rmse": rmse(pred, samples[side]),
                f"{side}_r2": r2, f"{side}_r2_pairs_used": used}
    row["held_out_over_train_sup"] = row["held_out_sup"] / row["train_sup"] if row["train_sup"] else None
    row["held_out_over_train_rmse"] = row["held_out_rmse"] / row["train_rmse"] if row["train_rmse"] else None
    row["probe_r2"] = (probe_r2(probe_net, samples["train"], samples["held_out"], encode)
                       if probe_net is not None else None)
    return row


def split_of(args):
    """The split, with any refusal of make_split worded in this CLI's flags."""
    from constructions.splits import make_split

    try:
        return make_split(args.split, args.M, args.K, seed=args.seed, held_out_fraction=args.held_out)
    except ValueError as e:
        message = str(e)
        for word, flag in SPLIT_WORDS:
            message = message.replace(word, flag)
        held_out = f" with --held-out {args.held_out:g}" if "--held-out" in message else ""
        raise UsageError(f"--split {args.split}{held_out}: {message}") from None


def step_macs(in_dim: int, widths: list[int], out_dim: int, args) -> int:
    """Multiply-adds of one training step, forward and backward (≈ 3 forwards), as
    verify.train.train_mlp counts them."""
    sizes = [in_dim, *widths, out_dim]
    per_sample = sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    return 3 * args.tasks_per_batch * args.samples_per_task * per_sample


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


def run(args) -> dict:
    import numpy as np
    import torch

    from constructions.encodings import make_encoder
    from constructions.hyperteacher import HyperteacherConfig, sample_hyperteacher
    from constructions.shallow import build_construction
    from verify.metrics import sample_tasks
    from verify.train import TrainConfig, shape_widths, train_mlp

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
            construction = build_construction(teacher, args.eps)
        except ValueError as e:  # an ε no network can reach (more than 2^40 knots)
            raise UsageError(str(e)) from None
        widths_c = construction.counted_widths()
        probe_c = construction.to_sequential() if construction.dense_bytes() <= PROBE_MAX_BYTES else None
    rng = np.random.default_rng(args.seed + 1)
    samples = {side: sample_tasks(teacher, s, args.eval_samples, rng)
               for side, s in (("train", split.train), ("held_out", split.test))}
    widths = {shape: shape_widths(shape, widths_c, args.widths) for shape in args.shapes}
    in_dim = encode(torch.zeros(1, teacher.M, dtype=torch.float64)).shape[1] + teacher.I
    largest = max(step_macs(in_dim, w, teacher.O, args) for w in widths.values())

    with threads_of_run(args.threads, largest):
        # The construction reads z through a linear encoding; for a nonlinear one it is shown on
        # the identity encoding, as the reference the trained networks are compared with.
        c_encode = encode if linear else teacher.encode
        name = f"construction ε={args.eps:g}" + ("" if linear else " (identity input)")
        with cli.phase(f"evaluate {name}", progress):
            rows = [evaluate(name, construction, widths_c, teacher, c_encode, split, samples, args.seed,
                             probe_c)]
        rows[0]["certificate"] = construction.certificate()

        tc = TrainConfig(steps=args.steps, tasks_per_batch=args.tasks_per_batch,
                         samples_per_task=args.samples_per_task, lr=args.lr, weight_decay=args.weight_decay,
                         seed=args.seed, device=args.device)
        trained = {}
        for shape in args.shapes:
            result = train_mlp(teacher, encode, split.train, widths[shape], tc, progress=progress,
                               threads=args.threads)
            with cli.phase(f"evaluate sgd {shape}", progress):
                row = evaluate(f"sgd {shape}", result.net, widths[shape], teacher, encode, split, samples,
                               args.seed, probe_net=result.net)
            row["train_seconds"], row["final_loss"] = result.seconds, result.losses[-1][1]
            row["sgd_over_construction_held_out_sup"] = row["held_out_sup"] / rows[0]["held_out_sup"]
            row["sgd_over_construction_held_out_rmse"] = row["held_out_rmse"] / rows[0]["held_out_rmse"]
            rows.append(row)
            trained[shape] = result

    report = dict(teacher=asdict(cfg), encoding=args.encoding, split=split.summary(), train=asdict(tc),
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

    for shape, result in trained.items():
        with cli.atomic_path(out / f"sgd_{shape}.pt") as tmp:
            torch.save(result.net.state_dict(), tmp)
    cli.write_text_atomic(out / "report.json", cli.to_json(report))


def _fmt(v, spec=".2e"):
    return "—" if v is None else format(v, spec)


def format_report(r: dict) -> str:
    t, s, tr = r["teacher"], r["split"], r["train"]
    lines = [f"teacher  I={t['I']} H={t['H']} O={t['O']} M={t['M']} K={t['K']} weights={t['weights']} "
             f"encoding={r['encoding']} seed={t['seed']}",
             f"split    {s['name']}: {s['n_train']} training supports, {s['n_test']} held out",
             f"training AdamW lr={tr['lr']:g} wd={tr['weight_decay']:g}, {tr['steps']} steps "
             f"of {tr['tasks_per_batch']} tasks × {tr['samples_per_task']} samples",
             "",
             f"{'network':<30} {'hidden':>8} {'sup train':>10} {'sup held':>10} {'RMSE train':>10} "
             f"{'RMSE held':>10} {'R² train':>9} {'R² held':>9} {'held/train':>10} {'vs constr':>9}"
             "  probe R² (encoding, each layer pre-ReLU, output)"]
    for row in r["rows"]:
        ratio = row.get("sgd_over_construction_held_out_sup")
        probe = "—" if row["probe_r2"] is None else " ".join(f"{v:.3f}" for _, v in row["probe_r2"])
        lines.append(f"{row['network']:<30} {row['hidden_units']:>8,} {_fmt(row['train_sup']):>10} "
                     f"{_fmt(row['held_out_sup']):>10} {_fmt(row['train_rmse']):>10} "
                     f"{_fmt(row['held_out_rmse']):>10} {_fmt(row['train_r2'], '.4f'):>9} "
                     f"{_fmt(row['held_out_r2'], '.4f'):>9} "
                     f"{_fmt(row['held_out_over_train_sup'], '.2f'):>10} "
                     f"{_fmt(ratio, '.0f') + ('×' if ratio else ''):>9}  {probe}")
    c = r["rows"][0]
    lines += ["", f"construction certificate {c['certificate']:.3e}: "
              f"{'met' if r['construction_within_certificate'] else 'VIOLATED'} on both sides; "
              f"'vs constr' = SGD held-out sup error / construction's ({r['seconds']:.0f} s)"]
    return "\n".join(lines)


def work(args) -> int:
    report = run(args)
    cli.emit(cli.to_json(report) if args.json else format_report(report))
    return cli.EXIT_OK if report["construction_within_certificate"] else cli.EXIT_VIOLATED


def main(argv=None) -> int:
    return cli.main_of("verify.sgd", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
