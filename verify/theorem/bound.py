"""python -m verify.bound: build the theorem's ReLU MLP for a hyperteacher and check it.

Samples a hyperteacher, builds the explicit network for ε, and checks the theorem's
three claims: the certificate I·C·a/N² is ≤ ε, the measured sup error is ≤ the
certificate, and the network's hidden-unit count equals the formula. --construction picks
another network (exact, deep, optimal) and --layers a multi-layer teacher; each is held
to its own certificate and count formula the same way.
Exit codes: 0 every check holds, 1 a bound is violated, 2 usage error, 3 internal error,
130 interrupted.
"""

from __future__ import annotations

from pathlib import Path

from constructions.catalogue import (
    CONSTRUCTION_HELP,
    CONSTRUCTIONS,
    ENCODINGS,
    WEIGHTS,
    default_constants,
    multi_layer_blocks,
)
from theory.bounds import CONSTANTS, VARIANTS
from verify import cli
from verify.cli import UsageError, positive_float, positive_int
from verify.theorem.presets import INSTANCE_BOUND_CONSTRUCTIONS, MAX_TASKS

MAX_LAYERS = 8
# Threads pay off once each input row carries I·H ≥ 64 products (the default I = H = 16:
# 1.5× faster on two idle cores); below that, and on busy cores, one thread is faster
# (verify/cli.py's docstring, "Threads").
THREADS_PAY_PRODUCTS = 64


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.bound", __doc__)
    cli.add_teacher_flags(p, dict(M=32, K=3, I=16, H=16, O=16))
    p.add_argument("--eps", type=positive_float, default=1e-3, help="target sup error ε > 0 (default 1e-3)")
    add_construction_flags(
        p, layers_help=f"modular layers L of the teacher, 1..{MAX_LAYERS}; L > 1 is built from shallow "
                       "blocks",
        constants_help="apriori: C_W = 2σ for every draw; instance: this teacher's exact range")
    cli.add_json(p)
    p.add_argument("--save", metavar="DIR",
                   help="write teacher.npz, network.pt, report.json into DIR (a new or empty folder)")
    p.add_argument("--force", action="store_true", help="let --save replace the files of a non-empty DIR")
    p.add_argument("--dense", action="store_true",
                   help="measure the dense nn.Sequential itself instead of the structured evaluator")
    p.add_argument("--bound", default="certificate", choices=("certificate", "instance"),
                   help="instance: also bound this teacher's true sup error from above (shallow and deep "
                        "constructions), over Z_K by branch and bound and over the family's own tasks, and "
                        "print the bracket measured ≤ sup ≤ instance bound ≤ certificate "
                        "(default certificate)")
    p.add_argument("--bound-seconds", type=positive_float, default=30.0,
                   help="time for the branch and bound over Z_K; it stays sound when stopped (default 30)")
    p.add_argument("--max-tasks", type=positive_int, default=MAX_TASKS,
                   help=f"enumerate every support up to this many, else sample this many "
                        f"(default {MAX_TASKS})")
    p.add_argument("--points", type=positive_int, default=16, help="random x per task (default 16)")
    p.add_argument("--refine-steps", type=cli.non_negative_int, default=100,
                   help="gradient-ascent steps (default 100)")
    cli.add_common(p, threads_default=f"the cores left free by other work when I·H ≥ {THREADS_PAY_PRODUCTS}, "
                                      "else 1")
    return p


def add_construction_flags(p: cli.Parser, *, layers_help: str, constants_help: str) -> None:
    """--construction, --layers, --variant and --constants, with this CLI's help for --layers
    and --constants: the flags `check_teacher_and_construction` checks (here and in
    verify.exact_sup)."""
    p.add_argument("--construction", default="shallow", metavar="{" + ",".join(CONSTRUCTIONS) + "}",
                   help="; ".join(f"{k}: {v}" for k, v in CONSTRUCTION_HELP.items()) + " (default shallow)")
    p.add_argument("--layers", type=positive_int, default=1, help=f"{layers_help} (default 1)")
    p.add_argument("--variant", default="theorem", metavar="{" + ",".join(VARIANTS) + "}",
                   help="theorem: carry z (M units); lean: carry b(z̃) (H units) (default theorem)")
    p.add_argument("--constants", default=None, metavar="{" + ",".join(CONSTANTS) + "}",
                   help=f"{constants_help} (default apriori; instance for --construction optimal)")


def check_teacher_and_construction(args) -> None:
    """Fill in --constants and refuse a teacher or construction that cannot be built (the
    checks every CLI that builds a construction from these flags shares: this one and
    verify.exact_sup)."""
    if args.constants is None:
        args.constants = default_constants(args.construction)
    for name, allowed in (("construction", CONSTRUCTIONS), ("weights", WEIGHTS), ("encoding", ENCODINGS),
                          ("variant", VARIANTS), ("constants", CONSTANTS)):
        if getattr(args, name) not in allowed:
            raise UsageError(f"--{name} must be one of {', '.join(allowed)}; got {getattr(args, name)!r}")
    if args.K > args.M:
        raise UsageError(f"--K must be at most --M (got K={args.K}, M={args.M})")
    if args.layers > MAX_LAYERS:
        raise UsageError(f"--layers must be at most {MAX_LAYERS}, got {args.layers}")
    blocks = multi_layer_blocks()
    if args.layers > 1 and args.construction not in blocks:
        raise UsageError(f"multi-layer teachers are built with {' or '.join(blocks)} blocks only; "
                         f"--construction {args.construction} needs --layers 1")


def parse_args(argv) -> object:
    args = build_parser().parse_args(argv)
    check_teacher_and_construction(args)
    covered = INSTANCE_BOUND_CONSTRUCTIONS
    if args.bound == "instance" and (args.construction not in covered or args.layers > 1):
        raise UsageError(f"--bound instance covers --construction {' or '.join(covered)} with --layers 1; "
                         f"got --construction {args.construction} --layers {args.layers}")
    if args.force and not args.save:
        raise UsageError("--force only applies to --save DIR")
    if args.save:
        args.save = cli.prepare_out_dir(args.save, "--save", force=args.force)
    return args


def run(args) -> tuple[dict, object]:
    """(the report, the construction it is about)."""
    from constructions.tasks.hyperteacher import HyperteacherConfig
    from verify.theorem.check import verify_point

    cfg = HyperteacherConfig(I=args.I, H=args.H, O=args.O, M=args.M, K=args.K,
                             weights=args.weights, encoding=args.encoding, seed=args.seed)
    report, teacher, net, dense_net = verify_point(
        cfg, args.eps, args.variant, args.constants, construction=args.construction, layers=args.layers,
        dense=args.dense,
        build_dense=True if args.save else None,
        measure=dict(max_tasks=args.max_tasks, points_per_task=args.points, refine_steps=args.refine_steps),
        progress=False if args.no_progress else None)
    if args.bound == "instance":
        from verify.theorem.instance import add_instance_bound

        add_instance_bound(report, net, teacher, args.bound_seconds,
                           progress=False if args.no_progress else None)
    if args.save:
        save(Path(args.save), report, teacher, dense_net)
    return report, net


def save(out: Path, report: dict, teacher, dense_net) -> None:
    """`--save DIR`: three files, each written under a temporary name and renamed when
    complete; report.json comes last, so a folder that holds it holds all three.

    - teacher.npz: arrays W (M,I,H), b (M,H), A (H,O), scalar K, `weights` (the weight scheme's
      name), `weight_values` (the levels a weight takes), `encoding` (its name), and Q (M,M) for
      the orthogonal encoding. A multi-layer teacher (--layers L) stores W1, b1, …, WL, bL
      instead of W, b, and L;
    - network.pt: the state_dict of the nn.Sequential Linear, ReLU, Linear, ReLU, Linear (more
      blocks for the deeper constructions; report.json's hidden_units.widths rebuild it), whose
      layers compute y = x @ weight.T + bias on the input [e(z), x];
    - report.json: the --json report."""
    import torch

    with cli.atomic_path(out / "teacher.npz") as tmp:
        teacher.save_npz(tmp)
    with cli.atomic_path(out / "network.pt") as tmp:
        torch.save(dense_net.state_dict(), tmp)
    cli.write_text_atomic(out / "report.json", cli.to_json(report))


def work(args) -> int:
    cli.set_threads(args.threads, cli.default_threads(args.I * args.H >= THREADS_PAY_PRODUCTS))
    report, net = run(args)
    if args.json:
        cli.emit(cli.to_json(report))
    else:
        from verify.theorem.report import format_report

        cli.emit(format_report(report, net.report_lines(report)))
    return cli.EXIT_OK if report["passed"] else cli.EXIT_VIOLATED


def main(argv=None) -> int:
    return cli.main_of("verify.bound", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
