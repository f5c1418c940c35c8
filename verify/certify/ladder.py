"""python -m verify.certify.ladder: the certified held-out sup error of SGD students against width,
beside the construction's certificate at the same number of hidden units (issue 46; figure 14).

For each width w of --widths and each seed of --seeds, one `verify.sgd` run (the same functions:
verify.learning.sgd_program.run, its --save files in OUT/runs/w<W>-s<SEED>/) trains a depth-d MLP
student (--depth layers of w units) on a random split of a hyperteacher's supports; the student is
then certified as `python -m verify.certify RUN --ratio R --seconds S` does (certify_supports over
the held-out supports, --goal set): a bracket [lower, upper] on its sup error over every held-out
task, upper proven, lower an error found. A bracket that is not within the ratio when the per-network
budget (--seconds) ends is reported open ("stop": "seconds"), and is still sound.

The construction's side, at the student's hidden units u = d·w: the theorem's shallow network
(theorem variant, a-priori constants, as `verify.bound` and `verify.sgd --eps` build it) has
2·I·H·N + M + H hidden units and certifies I·C·a/N² on every task (theory/bounds.py); at u units it
can have N = ⌊(u − M − H) / (2·I·H)⌋ knots, so the ε it certifies at that size is I·C·a/N². Where
N < 1 (u < 2·I·H + M + H) no construction is that small, and the row says so (eps None). The
construction is drawn at its own units (≤ u), its certificate computed for the run's teacher (each
seed is its own teacher).

Checks (a row failing one makes the exit code 1): the certified upper end ≥ both lower bounds
(the lower end found, and the run's own searched held-out sup error); the construction's N is the
largest whose units fit the student's, and its ε is I·C·a/N² for the run's teacher (`check_rows`).

Files (OUT, the tool's own folder, replaced): ladder.json (the settings, one row per network, the
checks), and runs/ (each run's report.json and sgd_custom.pt: `python -m verify.certify
OUT/runs/w32-s1` certifies one again). Every file is written under a temporary name and renamed
when complete. Exit codes: 0 done, every check holds; 1 a check failed; 2 usage error (one line);
3 internal error; 130 interrupted.

Measured: the committed ladder (paper_figures/output/fig14_ladder/, figure 14's data), `python -m
verify.certify.ladder --seconds 180 --out paper_figures/output/fig14_ladder`: 727 s in all, nice 5,
one thread on the shared 2-core machine (load 4–5). Teacher I = H = O = 4, M 8, K 2, discrete
weights, random split (9 of 36 supports held out: 204 tasks for seed 1, 234 for seed 2); depth-4
students, 10,000 steps of 32 tasks at lr 1e-3 (20–40 s each); --ratio 1.25, --z enumerate.
"construction": the theorem's network with at most the student's units (N, its units, its ε);
"ahead" (compare): student where the student's proven upper end < ε, construction where ε < the
student's lower end, undecided between:

    w   seed R²     searched [lower, upper]   ratio  time   boxes  stop    construction: N, units, ε  ahead
     8  1   0.556  2.203    [2.356, 2.945]  1.25×    2 s   5,382  ratio   none (needs ≥ 44 units)
     8  2   0.608  4.216    [4.216, 5.210]  1.24×    0 s   1,210  ratio   none
    16  1   0.868  1.717    [1.893, 2.366]  1.25×   17 s  29,330  ratio   1, 44, 24.2    student
    16  2   0.911  2.079    [2.079, 2.599]  1.25×    4 s  13,650  ratio   1, 44, 18.5    student
    32  1   0.966  1.342    [1.801, 2.227]  1.24×   87 s  71,032  ratio   3, 108, 2.69   student
    32  2   0.982  1.478    [1.730, 2.162]  1.25×   36 s  43,248  ratio   3, 108, 2.06   undecided
    64  1   0.990  1.019    [1.422, 6.110]  4.30×  181 s  62,452  budget  7, 236, 0.493  constr.
    64  2   0.993  1.230    [1.491, 3.383]  2.27×  181 s  58,806  budget  7, 236, 0.378  constr.

(w: width; R²: on training tasks; searched: the run's held-out sup error; the bracket: certified;
constr.: construction.)
(held-out R² 0.33/0.32 at width 16, 0.63/0.53 at 32, 0.73/0.87 at 64; the width-8 students do not
fit, R² 0.56/0.61 on training tasks, and no construction is that small.) The two width-64 brackets
stayed open at 180 s (30,125 and 21,660 boxes open); the construction's certificate is below their
lower ends anyway, so the comparison at 256 units is decided. The largest rounding margin added to
a box was 1.3e-10.

What limits the width-64 students, measured on w64-s1 afterwards (`python -m verify.certify
paper_figures/output/fig14_ladder/runs/w64-s1 --seconds 300 --threads 1`, the machine busier, load
5–6): --z enumerate [1.422, 6.407] 4.50×, 58,356 boxes (28,628 open), every support's upper end
still 6.3–6.4: more time did not help, best first spreads the splits over all 204 tasks; --z hull
(one joint box of weights and x per support) [1.457, 3.537] 2.43×, 90,359 boxes (26,869 open),
every support's upper end 3.5. So the hull halves the bracket at equal time here too, and neither
closes to 1.25× in 5 minutes at 256 hidden units; the 4×32 students close in 36–87 s either way.
A ladder past width 64 wants --z hull and a longer budget, or a GPU (no device was used here).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from verify import cli
from verify.cli import UsageError, positive_float, positive_int

STUDENT = "sgd custom"


@dataclass(frozen=True)
class Ladder:
    """The settings of one ladder: the teacher, the students and their training, the search."""

    I: int = 4
    H: int = 4
    O: int = 4
    M: int = 8
    K: int = 2
    depth: int = 4
    widths: tuple[int, ...] = (8, 16, 32, 64)
    seeds: tuple[int, ...] = (1, 2)
    steps: int = 10000
    lr: float = 1e-3
    held_out: float = 0.25
    ratio: float = 1.25
    seconds: float = 150.0
    z: str = "enumerate"


DEFAULT = Ladder()
# Seconds in all: a 2-2-2 teacher over 4 modules, depth-2 students of widths 4 and 8, 300 steps,
# one second of search each (the bracket may stay open: that is the budgeted branch).
SMOKE = Ladder(I=2, H=2, O=2, M=4, K=2, depth=2, widths=(4, 8), seeds=(1,), steps=300, held_out=0.3,
               seconds=1.0)


# --- the construction's side -----------------------------------------------------------------

def construction_at(teacher, units: int) -> dict:
    """The theorem's shallow network (theorem variant, a-priori constants) with at most `units`
    hidden units for `teacher`: its knots N, its units and the ε it certifies, I·C·a/N². N = 0
    (eps None) where even N = 1 has more units."""
    from constructions.base import construction_constants
    from theory.bounds import certificate, hidden_units

    C, a = construction_constants(teacher, "apriori")
    per_knot = 2 * teacher.I * teacher.H
    fixed = hidden_units(teacher.I, teacher.H, teacher.M, 0).total  # M + H: carry and layer 2
    N = max(0, (units - fixed) // per_knot)
    return dict(N=N, hidden_units=hidden_units(teacher.I, teacher.H, teacher.M, N).total if N else None,
                eps=certificate(teacher.I, C, a, N) if N else None, C=C, a=a, I=teacher.I, H=teacher.H,
                M=teacher.M, min_units=fixed + per_knot, formula="2·I·H·N + M + H; ε = I·C·a/N²")


def check_rows(rows: list[dict]) -> dict[str, bool]:
    """What the ladder's data must meet: the certified upper end above every lower bound, and the
    construction's side recomputed from its constants (the largest N that fits the student's units,
    its ε = I·C·a/N²). A wrong construction number (its ε at another unit count, say) fails here."""
    from theory.bounds import certificate, hidden_units

    def upper_above(r):
        return r["upper"] >= max(r["lower"], r["searched_sup"])

    def construction_fits(r):
        c = r["construction"]
        units = r["hidden_units"]
        if c["N"] == 0:
            return hidden_units(c["I"], c["H"], c["M"], 1).total > units and c["eps"] is None
        fits = hidden_units(c["I"], c["H"], c["M"], c["N"]).total
        more = hidden_units(c["I"], c["H"], c["M"], c["N"] + 1).total
        return fits == c["hidden_units"] <= units < more and math.isclose(
            c["eps"], certificate(c["I"], c["C"], c["a"], c["N"]), rel_tol=1e-12)

    return {
        "every certified upper end >= the lower end found and the run's searched sup error":
            all(upper_above(r) for r in rows),
        "the construction's eps is I*C*a/N^2 at the largest N whose units fit the student's":
            all(construction_fits(r) for r in rows),
    }


COMPARISONS = {
    "student": "the student's proven sup error is below the construction's certificate",
    "construction": "the construction's certificate is below an error the student has: the construction is "
                    "better, proven on both sides",
    "undecided": "the construction's certificate lies inside the student's bracket",
    "none": "no construction has so few hidden units",
}


def compare(row: dict) -> str:
    """Who is ahead at this size, where both sides are rigorous (COMPARISONS says what each means):
    "student" when the student's upper end is below the construction's ε (the construction's own sup
    error, not certified, may still be lower), "construction" when its ε is below the student's lower
    end (then the construction's sup error ≤ ε < the student's), else "undecided"; "none" without a
    construction of that size."""
    eps = row["construction"]["eps"]
    if eps is None:
        return "none"
    return "student" if row["upper"] < eps else "construction" if eps < row["lower"] else "undecided"


# --- one network -----------------------------------------------------------------------------

def sgd_run_of(ladder: Ladder, width: int, seed: int, folder: Path | None, progress: bool | None,
               threads: int | None = 1):
    """The verify.sgd run of one rung (its other settings verify.sgd's defaults), saving into folder."""
    from verify.learning.run_config import Runtime, SgdRun

    given = dict(I=ladder.I, H=ladder.H, O=ladder.O, M=ladder.M, K=ladder.K, split="random",
                 held_out=ladder.held_out, shapes=("custom",), widths=(width,) * ladder.depth,
                 steps=ladder.steps, lr=ladder.lr, seed=seed)
    runtime = Runtime(save=None if folder is None else str(folder), force=folder is not None,
                      no_progress=progress is False, threads=threads)
    return SgdRun.build(given, runtime=runtime)


def metric(report: dict, side: str, name: str) -> float:
    return next(m["value"] for m in report["metrics"]
                if m["network"] == STUDENT and m["side"] == side and m["metric"] == name)


def certify_run(folder: Path, ladder: Ladder, *, device: str = "cpu") -> dict:
    """verify.certify's bracket over the run's held-out supports (as `python -m verify.certify
    folder --ratio R --seconds S --z Z` gives it), with the run's teacher."""
    from verify.certify.certify import certify_supports
    from verify.certify.saved import load_run

    saved = load_run(folder)
    student, _ = saved.students[STUDENT]
    result = certify_supports(student, saved.teacher, saved.encoder, saved.split.test, device=device,
                              z=ladder.z, ratio=ladder.ratio, goal="set", seconds=ladder.seconds,
                              intermediate="auto", progress=False)
    return dict(result=result, teacher=saved.teacher)


def rung(ladder: Ladder, width: int, seed: int, folder: Path, progress: bool | None,
         device: str = "cpu", threads: int | None = 1) -> dict:
    """Train, save and certify one student; its row of the ladder."""
    import verify.learning.sgd_program as sgd_program

    run = sgd_run_of(ladder, width, seed, folder, progress, threads)
    report = sgd_program.run(run)
    row = next(r for r in report["rows"] if r["network"] == STUDENT)
    cert = certify_run(folder, ladder, device=device)
    c = cert["result"]
    units = int(row["hidden_units"])
    return dict(
        width=width, depth=ladder.depth, seed=seed, hidden_units=units, parameters=row["parameters"],
        train_seconds=row["train_seconds"], train_r2=metric(report, "train", "r2"),
        held_out_r2=metric(report, "held_out", "r2"), train_sup=metric(report, "train", "sup"),
        searched_sup=metric(report, "held_out", "sup"),
        lower=c["lower"], upper=c["upper"], ratio=c["ratio"], closed=c["ratio"] <= ladder.ratio,
        stop=c["stop"], seconds=c["seconds"], nodes=c["nodes"], open_boxes=c["open_boxes"],
        tasks=c["tasks"], supports=len(c["supports"]), worst_support=c["worst"]["support"],
        max_margin=c["max_margin"], construction=construction_at(cert["teacher"], units),
        run=str(Path("runs") / folder.name), argv=["python", "-m", "verify.sgd", *run.command_line()],
        certify_argv=["python", "-m", "verify.certify", str(Path("runs") / folder.name), "--ratio",
                      f"{ladder.ratio:g}", "--seconds", f"{ladder.seconds:g}", "--z", ladder.z],
    )


def run_ladder(ladder: Ladder, out: Path, *, progress: bool | None = None, device: str = "cpu",
               threads: int | None = 1) -> dict:
    """Every rung, in order of width then seed; OUT/ladder.json written (atomically) after each,
    so an interrupted ladder leaves the rungs it finished."""
    out = Path(out)
    rows: list[dict] = []
    rungs = [(w, s) for w in ladder.widths for s in ladder.seeds]
    start = time.perf_counter()
    bar = cli.progress(len(rungs), "certified ladder", progress, unit="network")
    beat = cli.heartbeat(len(rungs), "certified ladder", progress, unit="network", tick=True)
    report: dict = {}
    try:
        for k, (w, s) in enumerate(rungs):
            folder = out / "runs" / f"w{w}-s{s}"
            folder.mkdir(parents=True, exist_ok=True)
            rows.append(rung(ladder, w, s, folder, False if progress is False else None, device, threads))
            report = dict(ladder=asdict(ladder), rows=rows, checks=check_rows(rows), device=device,
                          seconds=time.perf_counter() - start, complete=len(rows) == len(rungs),
                          rests_on="verify.sgd --save (verify.learning.sgd_program.run); verify.certify's "
                                   "certify_supports (CROWN, branch and bound, a rounding margin); "
                                   "the construction's units and certificate from theory/bounds.py")
            cli.write_text_atomic(out / "ladder.json", cli.to_json(report))
            bar.update(1)
            beat.update(k + 1, note=f"width {w} seed {s}: [{rows[-1]['lower']:.3g}, {rows[-1]['upper']:.3g}]")
    finally:
        bar.close()
        beat.close()
    return report


def read_ladder(out: Path) -> dict:
    """OUT/ladder.json back (UsageError, one line, when it is not there or not a ladder's)."""
    import json

    path = Path(out) / "ladder.json"
    try:
        data = json.loads(path.read_text())
        Ladder(**{k: tuple(v) if isinstance(v, list) else v for k, v in data["ladder"].items()})
        data["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{str(path)!r} is not a ladder written by python -m verify.certify.ladder "
                         f"({type(e).__name__})") from None
    return data


# --- the command line ------------------------------------------------------------------------

def build_parser() -> cli.Parser:
    d = DEFAULT
    p = cli.Parser("python -m verify.certify.ladder", __doc__)
    p.add_argument("--widths", type=positive_int, nargs="+", action=cli.Distinct, default=list(d.widths),
                   help=f"students' widths, each of --depth layers (default {' '.join(map(str, d.widths))})")
    p.add_argument("--depth", type=positive_int, default=d.depth, help=f"hidden layers (default {d.depth})")
    p.add_argument("--seeds", type=cli.seed, nargs="+", action=cli.Distinct, default=list(d.seeds),
                   help="seeds: each its own teacher, split and student (default "
                        f"{' '.join(map(str, d.seeds))})")
    for name in ("I", "H", "O", "M", "K"):
        p.add_argument(f"--{name}", type=positive_int, default=getattr(d, name),
                       help=f"the hyperteacher's {name} (default {getattr(d, name)})")
    p.add_argument("--steps", type=positive_int, default=d.steps, help=f"training steps (default {d.steps})")
    p.add_argument("--lr", type=positive_float, default=d.lr, help=f"AdamW learning rate (default {d.lr:g})")
    p.add_argument("--held-out", type=cli.open_fraction, default=d.held_out,
                   help=f"held-out fraction of the random split (default {d.held_out:g})")
    p.add_argument("--ratio", type=_ratio, default=d.ratio,
                   help=f"stop a network's search once upper ≤ this × lower (default {d.ratio:g})")
    p.add_argument("--seconds", type=positive_float, default=d.seconds,
                   help=f"search budget per network; a bracket open at the end is reported open "
                        f"(default {d.seconds:g})")
    p.add_argument("--z", default=d.z, choices=("enumerate", "hull"),
                   help=f"verify.certify's --z: every task enumerated, or each support's box hull "
                        f"(default {d.z})")
    p.add_argument("--smoke", action="store_true",
                   help="the tiny ladder of the tests and the figure's preview (seconds): a 2-2-2 teacher, "
                        "M 4, depth-2 students of widths 4 and 8, one second of search each; other flags "
                        "are ignored")
    p.add_argument("--out", type=Path, default=Path("out") / "certify-ladder", metavar="DIR",
                   help="the ladder's folder, under the working folder (its files are replaced; "
                        "default out/certify-ladder)")
    p.add_argument("--device", default="cpu",
                   help="where the bounds run: cpu, or cuda / cuda:N (default cpu)")
    cli.add_json(p)
    cli.add_common(p, threads_default="1")
    return p


def _ratio(text: str) -> float:
    from verify.certify.command import ratio_arg

    return ratio_arg(text)


def parse_args(argv):
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.ladder = SMOKE
    else:
        if args.K > args.M:
            raise UsageError(f"--K {args.K} is above --M {args.M}: a task has at most M active modules")
        args.ladder = replace(DEFAULT, I=args.I, H=args.H, O=args.O, M=args.M, K=args.K, depth=args.depth,
                              widths=tuple(args.widths), seeds=tuple(args.seeds), steps=args.steps,
                              lr=args.lr, held_out=args.held_out, ratio=args.ratio, seconds=args.seconds,
                              z=args.z)
    cli.check_device(args.device)
    args.out = cli.prepare_out_dir(args.out, "--out", force=None)
    return args


def format_report(r: dict) -> str:
    d = r["ladder"]
    lines = [f"hyperteacher I={d['I']} H={d['H']} O={d['O']} M={d['M']} K={d['K']}; depth-{d['depth']} MLP "
             f"students, {d['steps']} steps (lr {d['lr']:g}); held-out sup error certified to "
             f"{d['ratio']:g}× or {d['seconds']:g} s per network",
             f"{'width':>5} {'seed':>4} {'units':>5} {'R² train':>8} {'searched':>9} "
             f"{'certified [lower, upper]':>26} {'ratio':>7} {'time':>7} {'boxes':>9}  stop     "
             "construction at ≤ units: N, units, ε  ahead"]
    for row in r["rows"]:
        c = row["construction"]
        constr = (f"N {c['N']}, {c['hidden_units']} units, ε {c['eps']:.3g}" if c["N"]
                  else f"none (needs ≥ {c['min_units']} units)")
        constr = f"{constr:<28} {compare(row)}"
        ratio = "∞" if not math.isfinite(row["ratio"]) else f"{row['ratio']:.2f}×"
        lines.append(f"{row['width']:>5} {row['seed']:>4} {row['hidden_units']:>5} {row['train_r2']:>8.3f} "
                     f"{row['searched_sup']:>9.3g} [{row['lower']:>10.4g}, {row['upper']:>10.4g}]   "
                     f"{ratio:>7} {row['seconds']:>6.0f}s {row['nodes']:>9,}  "
                     f"{'closed' if row['closed'] else 'OPEN':<8} {constr}")
    lines.append("ahead: " + "; ".join(f"{k}: {v}" for k, v in COMPARISONS.items()))
    for check, ok in r["checks"].items():
        lines.append(f"{'ok  ' if ok else 'FAIL'} {check}")
    lines.append(f"{r['seconds']:.0f} s in all")
    return "\n".join(lines)


def work(args) -> int:
    threads = cli.set_threads(args.threads, 1)
    report = run_ladder(args.ladder, args.out, progress=False if args.no_progress else None,
                        device=args.device, threads=threads)
    cli.emit(cli.to_json(report) if args.json else format_report(report))
    return cli.EXIT_OK if all(report["checks"].values()) else cli.EXIT_VIOLATED


def main(argv=None) -> int:
    return cli.main_of("verify.certify.ladder", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
