"""python -m paper_figures: regenerate the theory figures.

Each figure is written as <name>.png, <name>.pdf and its data (<name>.csv: every plotted
point; <name>.json: settings, fits, checks) into --out. Exit codes: 0 every figure's
checks hold, 1 some figure's data contradict the theory, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from paper_figures import (
    fig1_units_vs_eps,
    fig2_units_vs_M,
    fig3_error_vs_eps,
    fig4_where_error_lives,
    fig5_sgd_error_vs_size,
    fig6_sgd_r2_vs_tasks,
    fig7_probe_vs_r2,
    fig8_constructions_vs_eps,
)
from paper_figures.common import DEFAULT_OUT, FigureResult
from verify.bound import UsageError, positive_int


class Entry(NamedTuple):
    name: str
    make: Callable[..., FigureResult]  # make(out, *, quick, seed)
    slow: bool  # only with --slow (or --only): figures that train networks


# Registration order is run order: figures 1 and 3 share one sweep, run once; figures 5–7
# share the SGD runs of paper_figures.sgd_data (7 reads 5's and 6's), each trained once.
FIGURES: list[Entry] = [
    Entry(fig1_units_vs_eps.NAME, fig1_units_vs_eps.make, slow=False),
    Entry(fig2_units_vs_M.NAME, fig2_units_vs_M.make, slow=False),
    Entry(fig3_error_vs_eps.NAME, fig3_error_vs_eps.make, slow=False),
    Entry(fig4_where_error_lives.NAME, fig4_where_error_lives.make, slow=False),
    Entry(fig8_constructions_vs_eps.NAME, fig8_constructions_vs_eps.make, slow=False),
    Entry(fig5_sgd_error_vs_size.NAME, fig5_sgd_error_vs_size.make, slow=True),
    Entry(fig6_sgd_r2_vs_tasks.NAME, fig6_sgd_r2_vs_tasks.make, slow=True),
    Entry(fig7_probe_vs_r2.NAME, fig7_probe_vs_r2.make, slow=True),
]


def non_negative_int(text: str) -> int:
    """Seeds feed numpy's SeedSequence, which refuses negative numbers."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}")
    return value


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser() -> Parser:
    p = Parser(prog="python -m paper_figures", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny versions of every figure (a few seconds)")
    p.add_argument("--slow", action="store_true", help="also the figures registered as slow")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                   help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help="just these figures: " + ", ".join(e.name for e in FIGURES))
    p.add_argument("--seed", type=non_negative_int, default=0, help="first teacher seed (default 0)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads (default 1: the work is many small tensors, and with more "
                        "threads than free cores it runs up to 10x slower)")
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


def parse_args(argv) -> tuple[argparse.Namespace, list[Entry]]:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    entries = select(args)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {str(args.out)!r} cannot be used as a folder: {e.strerror}") from None
    return args, entries


def main(argv=None) -> int:
    try:
        args, entries = parse_args(argv)
    except UsageError as e:
        print(f"paper_figures: error: {e} (see --help)", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    failed = []
    try:
        for entry in entries:
            start = time.perf_counter()
            result = entry.make(args.out, quick=args.quick, seed=args.seed)
            seconds = time.perf_counter() - start
            files = ", ".join(f.name for f in result.files)
            print(f"{entry.name}: {files} in {args.out}  ({seconds:.1f} s)", flush=True)
            for check, ok in result.checks.items():
                if not ok:
                    print(f"  FAIL {check}", flush=True)
                    failed.append(f"{entry.name}: {check}")
    finally:
        torch.set_num_threads(threads)  # main() also runs in-process, from the tests
    if failed:
        print(f"{len(failed)} check(s) failed: the data contradict the theory", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
