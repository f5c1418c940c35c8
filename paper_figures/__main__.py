"""python -m paper_figures: regenerate the theory figures.

Each figure is written as <name>.png, <name>.pdf and its data (<name>.csv: every plotted
point; <name>.json: settings, fits, checks) into --out: paper_figures/output/ by default,
paper_figures/preview/ with --quick, whose tiny figures are marked PREVIEW on the picture
and "preview": true in their JSON. Each file appears under its name only once complete.
A figure's expensive rows are cached in OUT/.cache/, keyed by its configuration and the
fingerprint of the code that computes them: an unchanged figure redraws in seconds; --fresh
recomputes. --redraw draws each figure again from its data files in --out, computing nothing
(its PNG and PDF only). Every run also writes OUT/captions.md: each figure's caption (its
module's CAPTION, which is also its PDF's Subject). Exit codes: 0 every figure's checks hold,
1 some figure's data contradict the theory, 2 usage error, 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from paper_figures import DEFAULT_OUT, PREVIEW_OUT
from verify import cli
from verify.cli import UsageError

# Figures are many small tensors: with more threads than free cores they run up to 10×
# slower, so one thread unless told otherwise.
DEFAULT_THREADS = 1


class Entry(NamedTuple):
    name: str
    module: str  # imported only when the figure runs, so --help loads no torch or matplotlib
    slow: bool  # only with --slow (or --only): figures that train networks


def _entries(*names: str, slow: bool) -> tuple[Entry, ...]:
    """One entry a figure module paper_figures.<name>."""
    return tuple(Entry(name, f"paper_figures.{name}", slow) for name in names)


# Registration order is run order: figures 1 and 3 share one sweep, run once; figures 5–7
# share the SGD runs of paper_figures.sgd_data (7 reads 5's and 6's), each trained once
# (slow: only with --slow or --only). Figures 9–13 read the committed study stores
# (verify.study: 9 the hyperteacher's studies, 10 the preference grid's, 11 width vs M, 12 the
# image experiment, 13 the kernel limit), else run the seconds-long smoke studies; 14 reads the
# committed certified ladder (verify.certify.ladder), else runs its smoke ladder (seconds). Each
# module's NAME is its entry's name (tests/test_figures.py holds them to it).
FIGURES: tuple[Entry, ...] = (
    *_entries("fig1_units_vs_eps", "fig2_units_vs_M", "fig3_error_vs_eps", "fig4_where_error_lives",
              "fig8_constructions_vs_eps", slow=False),
    *_entries("fig5_sgd_error_vs_size", "fig6_sgd_r2_vs_tasks", "fig7_probe_vs_r2", slow=True),
    *_entries("fig9_studies", "fig10_preference", "fig11_width_vs_M", "fig12_images", "fig13_kernel",
              "fig14_certified", slow=False),
)


def load(entry: Entry) -> ModuleType:
    """The figure's module, whose make(out, *, quick, seed, progress) draws and writes it."""
    return importlib.import_module(entry.module)


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m paper_figures", __doc__)
    p.add_argument("--quick", action="store_true",
                   help="tiny previews of every figure (a few seconds), marked PREVIEW")
    p.add_argument("--slow", action="store_true", help="also the figures registered as slow")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help=f"output folder (default {DEFAULT_OUT}; with --quick {PREVIEW_OUT})")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help="just these figures: " + ", ".join(e.name for e in FIGURES))
    p.add_argument("--seed", type=cli.seed, default=0, help="first teacher seed (default 0)")
    p.add_argument("--fresh", action="store_true",
                   help="recompute every figure's rows; by default a figure whose configuration and "
                        "code are unchanged draws them from OUT/.cache/")
    p.add_argument("--studies", type=Path, default=None, metavar="DIR",
                   help="figures 9 and 10 read the studies' stores under DIR/STUDY/cpu (your own runs: "
                        "python -m verify.study run STUDY --out DIR/STUDY/cpu) instead of the working "
                        "folder's or the committed ones")
    p.add_argument("--redraw", action="store_true",
                   help="draw the figures again from their data files in --out (NAME.csv, NAME.json), "
                        "computing nothing: writes their PNG and PDF only")
    cli.add_common(p, threads_default=str(DEFAULT_THREADS))
    return p


def select(args) -> list[Entry]:
    if args.only is None:
        return [e for e in FIGURES if args.slow or not e.slow]
    known = {e.name: e for e in FIGURES}
    unknown = [n for n in args.only if n not in known]
    if unknown:
        raise UsageError(f"unknown figure {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")
    # Naming a slow figure asks for it; keep registry order so shared work is reused.
    return [e for e in FIGURES if e.name in args.only]


def parse_args(argv) -> object:
    """The arguments, with `figures` (the entries to run, in order) and a usable `out`
    folder, created here; nothing heavy is imported."""
    args = build_parser().parse_args(argv)
    args.figures = select(args)
    if args.out is None:  # read at call time, so tests can point the defaults elsewhere
        args.out = PREVIEW_OUT if args.quick else DEFAULT_OUT
    args.out = cli.prepare_out_dir(args.out, "--out", force=None)
    if args.studies is not None and not args.studies.is_dir():
        raise UsageError(f"--studies {args.studies}: no such folder (it holds STUDY/cpu/study.sqlite)")
    if args.redraw:
        if args.fresh:
            raise UsageError("--redraw computes nothing: it cannot be --fresh")
        missing = [e.name for e in args.figures if not (args.out / f"{e.name}.json").is_file()]
        if missing:
            raise UsageError(f"--redraw: no data files for {', '.join(missing)} in {args.out}; "
                             "run without --redraw to make them")
    return args


def run_figure(entry: Entry, args, progress: bool | None):
    """Draw and write one figure under a bar that shows its name and elapsed time (with
    --redraw: from its data files)."""
    with cli.phase(entry.name, progress):
        if args.redraw:
            from paper_figures import common

            return common.redraw(load(entry), args.out)
        return load(entry).make(args.out, quick=args.quick, seed=args.seed, progress=progress)


def write_captions(out: Path) -> Path:
    """OUT/captions.md: every registered figure's caption, from its module's CAPTION."""
    from paper_figures import common

    return common.write_captions(out, [(e.name, getattr(load(e), "CAPTION", "")) for e in FIGURES])


def work(args) -> int:
    import torch

    progress = False if args.no_progress else None
    threads = torch.get_num_threads()
    cli.set_threads(args.threads, DEFAULT_THREADS)
    failed = []
    from paper_figures import common

    fresh = common.FRESH.set(args.fresh)
    root = common.STUDIES_ROOT.set(args.studies)
    try:
        for entry in args.figures:
            start = time.perf_counter()
            result = run_figure(entry, args, progress)
            seconds = time.perf_counter() - start
            files = ", ".join(f.name for f in result.files)
            cli.emit(f"{entry.name}: {files} in {args.out}  ({seconds:.1f} s)")
            for check, ok in result.checks.items():
                if not ok:
                    cli.emit(f"  FAIL {check}")
                    failed.append(f"{entry.name}: {check}")
        write_captions(args.out)  # quietly: the output is one line a figure
    finally:
        common.FRESH.reset(fresh)
        common.STUDIES_ROOT.reset(root)
        torch.set_num_threads(threads)  # main() also runs in-process, from the tests
    if failed:
        print(f"{len(failed)} check(s) failed: the data contradict the theory", file=sys.stderr)
    return cli.EXIT_VIOLATED if failed else cli.EXIT_OK


def main(argv=None) -> int:
    return cli.main_of("paper_figures", parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
