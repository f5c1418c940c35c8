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

from constructions.names import CONSTRUCTION_HELP, CONSTRUCTIONS, ENCODINGS, WEIGHTS, default_constants
from theory.bounds import CONSTANTS, VARIANTS
from verify import cli
from verify.cli import UsageError, positive_float, positive_int, seed

MAX_LAYERS = 8
MAX_TASKS = 20_000
# Threads pay off once each input row carries I·H ≥ 64 products (the default I = H = 16:
# 1.5× faster on two idle cores); below that, and on busy cores, one thread is faster
# (README, "Threads").
THREADS_PAY_PRODUCTS = 64


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.bound", __doc__)
    p.add_argument("--M", type=positive_int, default=32, help="number of modules (default 32)")
    p.add_argument("--eps", type=positive_float, default=1e-3, help="target sup error ε > 0 (default 1e-3)")
    p.add_argument("--K", type=positive_int, default=3, help="max active modules per task, K ≤ M (default 3)")
    p.add_argument("--I", type=positive_int, default=16, help="input size (default 16)")
    p.add_argument("--H", type=positive_int, default=16, help="teacher hidden size (default 16)")
    p.add_argument("--O", type=positive_int, default=16, help="output size (default 16)")
    p.add_argument("--weights", default="discrete", metavar="{" + ",".join(WEIGHTS) + "}",
                   help="weights of active modules (default discrete)")
    p.add_argument("--encoding", default="identity", metavar="{" + ",".join(ENCODINGS) + "}",
                   help="task encoding e(z) (default identity)")
    p.add_argument("--construction", default="shallow", metavar="{" + ",".join(CONSTRUCTIONS) + "}",
                   help="; ".join(f"{k}: {v}" for k, v in CONSTRUCTION_HELP.items()) + " (default shallow)")
    p.add_argument("--layers", type=positive_int, default=1,
                   help=f"modular layers L of the teacher, 1..{MAX_LAYERS}; L > 1 is built from shallow "
                        "blocks (default 1)")
    p.add_argument("--variant", default="theorem", metavar="{" + ",".join(VARIANTS) + "}",
                   help="theorem: carry z (M units); lean: carry b(z̃) (H units) (default theorem)")
    p.add_argument("--constants", default=None, metavar="{" + ",".join(CONSTANTS) + "}",
                   help="apriori: C_W = 2σ for every draw; instance: this teacher's exact range "
                        "(default apriori; instance for --construction optimal)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the teacher and the measurement (default 0)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--save", metavar="DIR",
                   help="write teacher.npz, network.pt, report.json into DIR (a new or empty folder)")
    p.add_argument("--force", action="store_true", help="let --save replace the files of a non-empty DIR")
    p.add_argument("--dense", action="store_true",
                   help="measure the dense nn.Sequential itself instead of the structured evaluator")
    p.add_argument("--max-tasks", type=positive_int, default=MAX_TASKS,
                   help=f"enumerate every support up to this many, else sample this many "
                        f"(default {MAX_TASKS})")
    p.add_argument("--points", type=positive_int, default=16, help="random x per task (default 16)")
    p.add_argument("--refine-steps", type=cli.non_negative_int, default=100,
                   help="gradient-ascent steps (default 100)")
    cli.add_common(p, threads_default=f"the cores left free by other work when I·H ≥ {THREADS_PAY_PRODUCTS}, "
                                      "else 1")
    return p


def parse_args(argv) -> object:
    args = build_parser().parse_args(argv)
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
    if args.force and not args.save:
        raise UsageError("--force only applies to --save DIR")
    if args.save:
        args.save = cli.prepare_out_dir(args.save, "--save", force=args.force)
    return args


def run(args) -> dict:
    from constructions.hyperteacher import HyperteacherConfig
    from verify.check import verify_point

    cfg = HyperteacherConfig(I=args.I, H=args.H, O=args.O, M=args.M, K=args.K,
                             weights=args.weights, encoding=args.encoding, seed=args.seed)
    report, teacher, net, dense_net = verify_point(
        cfg, args.eps, args.variant, args.constants, construction=args.construction, layers=args.layers,
        dense=args.dense,
        build_dense=True if args.save else None,
        measure=dict(max_tasks=args.max_tasks, points_per_task=args.points, refine_steps=args.refine_steps),
        progress=False if args.no_progress else None)
    if args.save:
        save(Path(args.save), report, teacher, dense_net)
    return report


def save(out: Path, report: dict, teacher, dense_net) -> None:
    """Each file is written under a temporary name and renamed when complete; report.json
    comes last, so a folder that holds it holds all three."""
    import torch

    with cli.atomic_path(out / "teacher.npz") as tmp:
        teacher.save_npz(tmp)
    with cli.atomic_path(out / "network.pt") as tmp:
        torch.save(dense_net.state_dict(), tmp)
    cli.write_text_atomic(out / "report.json", cli.to_json(report))


def _teacher_line(t: dict) -> str:
    layers = f" L={t['L']}" if t["L"] > 1 else ""
    return (f"hyperteacher  I={t['I']} H={t['H']} O={t['O']} M={t['M']} K={t['K']}{layers}  "
            f"weights={t['weights']} encoding={t['encoding']} seed={t['seed']}  "
            f"({t['n_supports']:,} supports)")


def _shallow_lines(r: dict) -> list[str]:
    c, u = r["constants"], r["hidden_units"]
    carry = "M" if r["variant"] == "theorem" else "H"
    other = "lean" if r["variant"] == "theorem" else "theorem"
    C_how = "√K·2σ, a-priori" if c["kind"] == "apriori" else "exact sup over Z_K"
    return [
        f"constants     C = {c['C']:.4f} ({C_how})   a = max_o Σ_h|A_ho| = {c['a']:.4f}",
        f"ε             {r['eps']:.3e}",
        f"N             {r['N']:,} = ⌈√(I·C·a/ε)⌉     N·√ε = {r['N_sqrt_eps']:.3f} "
        f"(→ √(I·C·a) = {r['N_sqrt_eps_limit']:.3f})",
        f"hidden units  squares 2·I·H·N = {u['squares']:,}",
        f"              carry {carry:<9} = {u['carry']:,}",
        f"              layer 2 H       = {u['teacher']:,}",
        f"              total           = {u['total']:,}   formula {u['formula']} = O(1/√ε + M)",
        f"              widths          = {tuple(u['widths'])} counted on the {u['counted_from']}",
        f"              ({other} variant: {r['hidden_units_' + other]:,})",
        f"certificate   I·C·a/N² = {r['certificate']:.3e}   (float64 rounding ≤ "
        f"{r['rounding_floor_float64']:.1e})",
    ]


def _summary_value(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        shown = ", ".join(_summary_value(x) for x in v[:8])
        return f"[{shown}, … {len(v)} values]" if len(v) > 8 else f"[{shown}]"
    return str(v)


def run_length(widths) -> str:
    """(2064, 1040×12, 16): a deep network's widths on one line."""
    runs: list[list[int]] = []
    for w in widths:
        if runs and runs[-1][0] == w:
            runs[-1][1] += 1
        else:
            runs.append([w, 1])
    return "(" + ", ".join(f"{w}×{n}" if n > 1 else str(w) for w, n in runs) + ")"


def _generic_lines(r: dict) -> list[str]:
    c, u = r["construction"], r["hidden_units"]
    params = [f"{k}={_summary_value(v)}" for k, v in c.items() if k not in ("name", "task_set")]
    lines = [f"construction  {c['name']}   certificate holds on: {c['task_set']}"]
    for s in range(0, len(params), 4):
        lines.append("              " + "  ".join(params[s:s + 4]))
    lines.append(f"ε             {r['eps']:.3e}")
    width = max(len(k) for k in u["terms"])
    for n, (k, v) in enumerate(u["terms"].items()):
        lines.append(f"{'hidden units' if n == 0 else '':<14}{k:<{width}} = {v:,}")
    lines += [f"{'':<14}{'total':<{width}} = {u['total']:,}   formula {u['formula']}",
              f"{'':<14}{'widths':<{width}} = {run_length(u['widths'])} ({len(u['widths'])} hidden layers) "
              f"counted on the {u['counted_from']}",
              f"certificate   {r['certificate']:.3e}   "
              f"(float64 rounding ≤ {r['rounding_floor_float64']:.1e})"]
    return lines


def _error_stats(s: dict) -> str:
    return (f"max error {s['max_error']:.2e} (teacher max |g| {s['teacher_max']:.2f}), "
            f"{100 * s['fraction_above_1e_12']:.3g}% of points off by > 1e-12")


def _off_task_set_lines(off: dict | None) -> list[str]:
    """Where the exact construction stops being exact, one line per probe."""
    if not off:
        return []
    lines = []
    for name, value in off.items():
        if isinstance(value, dict) and "max_error" in value:
            lines.append(f"{name}: {_error_stats(value)}")
        elif name == "x_off_box":
            lines += [f"x in [-{radius}, {radius}]^I: {_error_stats(s)}" for radius, s in value.items()]
        elif isinstance(value, dict) and "sup_error" in value:
            lines.append(f"{name}: sup error {value['sup_error']:.2e} (ascent over z on a support)")
        else:
            lines.append(f"{name}: {_summary_value(value)}")
    return [f"{'off task set' if n == 0 else '':<14}{line}" for n, line in enumerate(lines)]


def format_report(r: dict) -> str:
    t, m = r["teacher"], r["measured"]
    task_line = (f"all {m['n_tasks']:,} supports" if m["tasks_enumerated"]
                 else f"{m['n_tasks']:,} sampled of {t['n_supports']:,} supports")
    z_where = ", ".join(f"z{k}={v:.3g}" for k, v in zip(m["z_support"], m["z_values"], strict=True))
    ratio = r["measured_over_certificate"]
    ratio = f"= {ratio:.3f} × certificate" if ratio is not None else "(certificate 0: exact)"
    lines = [_teacher_line(t)]
    lines += _shallow_lines(r) if "N" in r else _generic_lines(r)
    lines += [
        f"measured      sup‖f−g‖∞ = {m['sup_error']:.3e}  {ratio}   ({task_line}, "
        f"{m['n_evaluations']:,} evaluations, {m['seconds']:.1f} s)",
        f"              worst at {z_where}; stages "
        + ", ".join(f"{k} {v:.2e}" for k, v in m["by_stage"].items()),
    ]
    if "level_tasks" in r:
        lt = r["level_tasks"]
        which = f"all {lt['of']:,}" if lt["enumerated"] else f"{lt['n_tasks']:,} sampled of {lt['of']:,}"
        lines.append(f"level tasks   max error {lt['max_error']:.3e} over {which} tasks (supports × weight "
                     f"levels, {lt['seconds']:.1f} s)")
    lines += _off_task_set_lines(r.get("off_task_set"))
    if r["dense_vs_structured_max_abs"] is not None:
        lines.append(f"dense check   max|dense − structured| = {r['dense_vs_structured_max_abs']:.1e}")
    lines += [f"{'PASS' if ok else 'FAIL'}          {name}" for name, ok in r["checks"].items()]
    lines.append(f"verdict       {'PASS' if r['passed'] else 'FAIL'}  ({r['seconds']:.1f} s, "
                 f"peak memory {r['peak_memory_gib']:.2f} GiB)")
    return "\n".join(lines)


def work(args) -> int:
    cli.set_threads(args.threads, cli.default_threads(args.I * args.H >= THREADS_PAY_PRODUCTS))
    report = run(args)
    cli.emit(cli.to_json(report) if args.json else format_report(report))
    return cli.EXIT_OK if report["passed"] else cli.EXIT_VIOLATED


def main(argv=None) -> int:
    return cli.main_of("verify.bound", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
