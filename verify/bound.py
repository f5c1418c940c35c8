"""python -m verify.bound: build the theorem's ReLU MLP for a hyperteacher and check it.

Samples a hyperteacher, builds the explicit network for ε, and checks the theorem's
three claims: the certificate I·C·a/N² is ≤ ε, the measured sup error is ≤ the
certificate, and the network's hidden-unit count equals the formula. --construction picks
another network (exact, deep, optimal) and --layers a multi-layer teacher; each is held
to its own certificate and count formula the same way.
Exit codes: 0 every check holds, 1 a bound is violated, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from constructions.hyperteacher import ENCODINGS, WEIGHTS, HyperteacherConfig, sample_hyperteacher
from constructions.multilayer import sample_multilayer_hyperteacher
from constructions.registry import CONSTRUCTIONS, build, default_constants
from constructions.shallow import BYTES_PER_FLOAT64, ShallowConstruction, count_hidden_units
from theory.bounds import CONSTANTS, VARIANTS, apriori_C_W, hidden_units
from verify.exact_checks import every_level_task, off_task_set_errors
from verify.measure import measure_sup_error

GIB = 2**30
DENSE_CHECK_BYTES = 512 * 2**20  # build the dense net for the agreement check up to this size
AGREEMENT_TOL = 1e-9  # dense vs structured: both float64, same function, rounding only
EXACT_TOL = 1e-12  # the exact construction's error on its task set: float64 rounding only
MAX_LAYERS = 8


class UsageError(Exception):
    """Bad input: reported on one line with exit code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return value


def build_parser() -> Parser:
    p = Parser(prog="python -m verify.bound", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
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
                   help="shallow: the theorem's network; exact: gated units, zero error for khot/discrete; "
                        "deep: sawtooth squares, O(log 1/ε) units; optimal: a range and N per product "
                        "(default shallow)")
    p.add_argument("--layers", type=positive_int, default=1,
                   help=f"modular layers L of the teacher, 1..{MAX_LAYERS}; L > 1 is built from shallow "
                        "blocks (default 1)")
    p.add_argument("--variant", default="theorem", metavar="{" + ",".join(VARIANTS) + "}",
                   help="theorem: carry z (M units); lean: carry b(z̃) (H units) (default theorem)")
    p.add_argument("--constants", default=None, metavar="{" + ",".join(CONSTANTS) + "}",
                   help="apriori: C_W = 2σ for every draw; instance: this teacher's exact range "
                        "(default apriori; instance for --construction optimal)")
    p.add_argument("--seed", type=int, default=0, help="seed of the teacher and the measurement")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--save", metavar="DIR", help="write teacher.npz, network.pt, report.json")
    p.add_argument("--dense", action="store_true",
                   help="measure the dense nn.Sequential itself instead of the structured evaluator")
    p.add_argument("--max-tasks", type=positive_int, default=20_000,
                   help="enumerate every support up to this many, else sample this many (default 20000)")
    p.add_argument("--points", type=positive_int, default=16, help="random x per task (default 16)")
    p.add_argument("--refine-steps", type=int, default=100, help="gradient-ascent steps (default 100)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    return p


def _glue_negative_numbers(argv: list[str]) -> list[str]:
    """argparse reads '--eps -1e-3' as two options; glue it to '--eps=-1e-3' so the value
    reaches the validator and the user hears what is allowed."""
    out: list[str] = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and token.startswith("-"):
            try:
                float(token)
            except ValueError:
                pass
            else:
                out[-1] = f"{out[-1]}={token}"
                continue
        out.append(token)
    return out


def parse_args(argv):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(_glue_negative_numbers(argv))
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
    if args.refine_steps < 0:
        raise UsageError(f"--refine-steps must be ≥ 0, got {args.refine_steps}")
    return args


def _proc_kib_field(path: str, key: str) -> int | None:
    """A 'Key:  N kB' line of a /proc file, in bytes; None where /proc cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo; 8 GiB where it cannot be read."""
    return _proc_kib_field("/proc/meminfo", "MemAvailable") or 8 * GIB


def peak_memory_bytes() -> int | None:
    """This process's peak resident memory (VmHWM), or None where /proc is missing.
    VmHWM belongs to the address space, so unlike ru_maxrss it does not count what a
    parent process held before it started this one."""
    return _proc_kib_field("/proc/self/status", "VmHWM")


def structured_bytes(cfg: HyperteacherConfig, tasks: int) -> int:
    """Peak memory of the default path: the teacher (held ~3×: numpy, scaled copy,
    autograd), the task latents, and one chunk of per-row (I, H) temporaries."""
    teacher = cfg.M * cfg.I * cfg.H + cfg.M * cfg.H + cfg.H * cfg.O
    latents = 2 * tasks * cfg.M
    chunk = 8192 * (2 * cfg.M + 12 * cfg.I * cfg.H)
    return (3 * teacher + latents + chunk) * BYTES_PER_FLOAT64


def check_memory(need: int, what: str) -> None:
    have = available_bytes()
    if need > have:
        raise UsageError(f"{what} would need {need / GIB:.1f} GiB but {have / GIB:.1f} GiB is "
                         "available; use a larger --eps or a smaller --M/--I/--H")


def dense_agreement(net: ShallowConstruction, dense: torch.nn.Module, teacher, seed: int) -> float:
    """Max |dense − structured| on random inputs from the task set and off it."""
    rng = np.random.default_rng(seed + 1)
    z = rng.uniform(0.0, 1.0, size=(256, net.M)) * (rng.random((256, net.M)) < net.K / net.M)
    x = rng.uniform(-1.5, 1.5, size=(256, net.I))  # off the box too: the same function everywhere
    inputs = torch.cat([teacher.encode(torch.as_tensor(z)), torch.as_tensor(x)], dim=1)
    with torch.no_grad():
        return float((net(inputs) - dense(inputs)).abs().max())


def sample_teacher(cfg: HyperteacherConfig, layers: int = 1):
    """The single-layer hyperteacher, or for layers > 1 the multi-layer one (whose first
    layer is the same draw)."""
    return sample_hyperteacher(cfg) if layers == 1 else sample_multilayer_hyperteacher(cfg, layers)


def verify_point(cfg: HyperteacherConfig, eps: float, variant: str = "theorem",
                 constants: str | None = None, *, construction: str = "shallow", layers: int = 1,
                 dense: bool = False, build_dense: bool | None = None,
                 measure: dict | None = None, progress: bool | None = None):
    """Build a construction for (teacher, ε), measure it, and check its claims.

    Returns (report, teacher, construction, dense network or None). `dense` measures the
    nn.Sequential itself; `build_dense` (default: when it is small) builds it to count its
    widths and compare it with the structured evaluator. Raises UsageError for sizes that
    cannot fit in memory, for ε below float64 resolution and for combinations that a
    construction does not support.
    """
    start = time.perf_counter()
    measure = dict(measure or {})
    tasks = min(measure.get("max_tasks", 20_000), math.comb(cfg.M, cfg.K) * cfg.K)
    check_memory(layers * structured_bytes(cfg, tasks), "the teacher and the structured evaluator")
    teacher = sample_teacher(cfg, layers)
    try:
        net = build(construction, teacher, eps, variant=variant, constants=constants)
    except ValueError as e:
        raise UsageError(str(e)) from None
    units = net.hidden_units()
    if dense:
        check_memory(net.dense_bytes() + 3 * 8192 * max(units.widths) * BYTES_PER_FLOAT64,
                     "--dense (the dense network and a batch of its activations)")
    floor = net.rounding_floor(dense=dense)
    cert = net.certificate()
    exact = net.task_set == "levels"
    if not exact and cert <= 10 * floor:
        hint = " (or --constants instance, or fewer --layers)" if layers > 1 else ""
        raise UsageError(f"ε={eps:g} is below what float64 can verify here: the worst-case "
                         f"rounding error {floor:.1e} of this {units.total:,}-unit network exceeds a "
                         f"tenth of the certificate {cert:.1e}; use a larger --eps{hint}")
    if build_dense is None:
        build_dense = net.dense_bytes() <= DENSE_CHECK_BYTES
    elif build_dense:
        check_memory(2 * net.dense_bytes(), "the dense nn.Sequential (for --save)")
    dense_net = net.to_sequential() if (dense or build_dense) else None
    widths = count_hidden_units(dense_net) if dense_net is not None else net.counted_widths()
    agreement = dense_agreement(net, dense_net, teacher, cfg.seed) if dense_net is not None else None

    measure.setdefault("seed", cfg.seed)
    if exact:  # its guarantee covers the family's own weight levels, not all of [0, 1]
        measure["refine_z"] = False
    measured = measure_sup_error(dense_net if dense else net, teacher, progress=progress, **measure)
    if exact:
        level_tasks = every_level_task(net, dense_net if dense else net, teacher, measure, cfg.seed)
        worst = max(measured.sup_error, level_tasks["max_error"])
        checks = {"certificate <= eps": cert <= eps, f"measured <= {EXACT_TOL:g} (exact)": worst <= EXACT_TOL}
    else:
        checks = {
            "certificate <= eps": cert <= eps,
            # Rounding can push an exact-math tie a hair over: allow the float64 worst case.
            "measured <= certificate": measured.sup_error <= cert + floor,
        }
    checks["count = formula"] = sum(widths) == units.total and tuple(widths) == tuple(units.widths)
    if agreement is not None:
        checks["dense = structured"] = agreement <= AGREEMENT_TOL
    report = {
        "teacher": dict(I=cfg.I, H=cfg.H, O=cfg.O, M=cfg.M, K=cfg.K, L=layers, weights=cfg.weights,
                        encoding=cfg.encoding, seed=cfg.seed, n_supports=teacher.n_supports()),
        "construction": dict(name=net.name, task_set=net.task_set, **net.summary()),
        "eps": eps,
        "variant": variant,
        "hidden_units": dict(terms=units.terms, total=units.total, widths=widths,
                             formula=net.count_formula(),
                             counted_from="nn.Sequential" if dense_net is not None else "structured"),
        "certificate": cert,
        "rounding_floor_float64": floor,
        "measured": measured.to_dict() | dict(
            network="dense nn.Sequential" if dense else "structured evaluator"),
        "measured_over_certificate": measured.sup_error / cert if cert > 0 else None,
        "dense_vs_structured_max_abs": agreement,
        "checks": checks,
    }
    if isinstance(net, ShallowConstruction):
        other = "lean" if variant == "theorem" else "theorem"
        report |= {
            "constants": dict(kind=net.constants, C=net.C, a=net.a, C_W_apriori=apriori_C_W(cfg.I),
                              C_W_instance=float(np.abs(teacher.W).max())),
            "N": net.N,
            "N_sqrt_eps": net.N * math.sqrt(eps),
            "N_sqrt_eps_limit": math.sqrt(cfg.I * net.C * net.a),
            "hidden_units_" + other: hidden_units(cfg.I, cfg.H, cfg.M, net.N, other).total,
        }
        report["hidden_units"] |= dict(squares=units.squares, carry=units.carry, teacher=units.teacher)
    if exact:
        report["level_tasks"] = level_tasks
        report["off_task_set"] = off_task_set_errors(net, teacher, np.random.default_rng(cfg.seed + 2))
    report |= {"passed": all(checks.values()), "seconds": time.perf_counter() - start,
               "peak_memory_gib": (peak_memory_bytes() or 0) / GIB}
    return report, teacher, net, dense_net


def run(args) -> dict:
    cfg = HyperteacherConfig(I=args.I, H=args.H, O=args.O, M=args.M, K=args.K,
                             weights=args.weights, encoding=args.encoding, seed=args.seed)
    report, teacher, net, dense_net = verify_point(
        cfg, args.eps, args.variant, args.constants, construction=args.construction, layers=args.layers,
        dense=args.dense,
        build_dense=True if args.save else None,
        measure=dict(max_tasks=args.max_tasks, points_per_task=args.points, refine_steps=args.refine_steps),
        progress=False if args.no_progress else None)
    if args.save:
        out = Path(args.save)
        out.mkdir(parents=True, exist_ok=True)
        teacher.save_npz(out / "teacher.npz")
        torch.save(dense_net.state_dict(), out / "network.pt")
        (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


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


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        report = run(args)
    except UsageError as e:
        print(f"verify.bound: error: {e} (see --help)", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
