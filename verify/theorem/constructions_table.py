"""python -m verify.theorem.constructions_table: the README's table of constructions, measured now.

Each row is `python -m verify.bound`'s check of one construction on the default teacher
(I = H = O = 16, M = 32, K = 3, `discrete` weights, seed 0) at ε = 10⁻³ and 10⁻⁶, with its
default measurement budget (all 5,488 supports enumerated): the hidden units and hidden layers
counted on the construction, measured ÷ certificate at each ε, and where the certificate holds.
The memorization baseline (figure 2) is its formula, H units per task. The table is printed as
Markdown, so that `python -m tests.readme --expensive` writes it into the README (its output
marker there), and tests/test_readme_blocks.py compares the two.

Cost: 139 s of CPU (100 s user, 39 s system) and 1.2 GiB peak on this project's 2-core
machine, deep's four measurements about 64 s of it; the sizes alone (measure_row(row,
measure=False), which tests/test_readme_blocks.py checks against the README) take a second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from verify import cli

EPS = (1e-3, 1e-6)
TEACHER = dict(I=16, H=16, O=16, M=32, K=3, weights="discrete", seed=0)  # verify.bound's defaults
HOLDS_ON = {"Z_K": "all of X × Z_K", "levels": "X × the weight levels"}
HEADER = (
    "| construction | command | hidden units, ε = 10⁻³ | ε = 10⁻⁶ | hidden layers "
    "| measured / certificate | certificate holds on |"
)
ALIGN = "| --- | --- | ---: | ---: | ---: | --- | --- |"


@dataclass(frozen=True)
class Row:
    label: str
    command: str  # verify.bound's flags that build it
    construction: str = "shallow"
    layers: int = 1
    constants: str | None = None  # None: the construction's own default
    measure: tuple[float, ...] = EPS  # the ε at which it is measured


ROWS = (
    Row("`shallow` (the theorem)", "--construction shallow", "shallow"),
    Row("`optimal` (a range and N per product)", "--construction optimal", "optimal"),
    Row("`deep` (sawtooth squares)", "--construction deep", "deep"),
    # Its size and error do not depend on ε: counted at both, measured at the first.
    Row("`exact` (gated units)", "--construction exact", "exact", measure=EPS[:1]),
    Row("multi-layer teacher, L = 2", "--layers 2 --constants instance", layers=2, constants="instance"),
    Row("multi-layer teacher, L = 3", "--layers 3 --constants instance", layers=3, constants="instance"),
)
MEMORIZER = "memorization baseline"


def measure_row(row: Row, measure: bool = True) -> dict:
    """One row's numbers: at each ε the hidden units and hidden layers of the construction as
    built ("—" where float64 cannot verify its claim), and where `row.measure` asks (and
    `measure`), verify_point's measured ÷ certificate (for a certificate of 0, the largest
    error measured). With measure=False, a second or so: the sizes alone."""
    # Imported here, as the other entry points do: --help and a bad flag load no torch.
    from constructions import HyperteacherConfig, build
    from constructions.catalogue import default_constants
    from verify.theorem.check import sample_teacher, verify_point

    cfg = HyperteacherConfig(**TEACHER)
    constants = row.constants or default_constants(row.construction)
    teacher = sample_teacher(cfg, row.layers)
    out = dict(
        label=row.label,
        command=row.command,
        units={},
        layers={},
        ratio={},
        error=None,
        holds_on=None,
        seconds=0.0,
    )
    for eps in EPS:
        net = build(row.construction, teacher, eps, constants=constants)
        out["holds_on"] = HOLDS_ON[net.task_set]
        if not net.claim(eps).resolvable:
            continue
        units = net.hidden_units()
        out["units"][eps], out["layers"][eps] = units.total, len(units.widths)
        if not measure or eps not in row.measure:
            continue
        start = time.perf_counter()
        report, _, _, _ = verify_point(
            cfg, eps, constants=constants, construction=row.construction, layers=row.layers, progress=False
        )
        out["seconds"] += time.perf_counter() - start
        assert report["hidden_units"]["total"] == units.total
        if report["certificate"] > 0:
            out["ratio"][eps] = report["measured_over_certificate"]
        else:
            level = report.get("level_tasks") or {}
            out["error"] = max(report["measured"]["sup_error"], level.get("max_error", 0.0))
    return out


def memorizer_row() -> dict:
    from theory.bounds import memorization_hidden_units

    units = memorization_hidden_units(TEACHER["M"], TEACHER["K"], TEACHER["H"])
    return dict(
        label=MEMORIZER,
        command="(figure 2)",
        units=dict.fromkeys(EPS, units),
        layers=dict.fromkeys(EPS, 1),
        ratio={},
        error=None,
        holds_on="the `khot` tasks",
        seconds=0.0,
    )


def _both(values: dict, fmt) -> str:
    """One cell for the values at each ε: one value when they agree, else 'a / b'."""
    shown = [fmt(values[e]) for e in EPS if e in values]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)


def line(r: dict) -> str:
    units = [f"{r['units'][e]:,}" if e in r["units"] else "—" for e in EPS]
    if r["label"] == MEMORIZER:
        measured = "exact on `khot` only"
    elif r["error"] is not None:
        measured = f"error {r['error']:.1e}, certificate 0"
    else:
        measured = _both(r["ratio"], lambda v: f"{v:#.2g}")
    return (
        f"| {r['label']} | `{r['command']}` | {units[0]} | {units[1]} | {_both(r['layers'], str)} "
        f"| {measured} | {r['holds_on']} |"
    ).replace("`(figure 2)`", "(figure 2)")


def table(rows: list[dict]) -> str:
    return "\n".join([HEADER, ALIGN, *map(line, rows)])


def build_parser() -> cli.Parser:
    p = cli.Parser(
        "python -m verify.theorem.constructions_table",
        __doc__.split("\n\n")[1] + ("\n\nPrints the Markdown table; --json its numbers. About 140 s of CPU."),
    )
    cli.add_json(p, "the rows' numbers")
    cli.add_common(p, threads_default="1")
    return p


def parse_args(argv: list[str] | None = None):
    return build_parser().parse_args(argv)


def run(args) -> int:
    cli.set_threads(args.threads, 1)
    progress = False if args.no_progress else None
    bar = cli.progress(len(ROWS), "constructions", progress, unit="row")
    rows = []
    for row in ROWS:
        rows.append(measure_row(row))
        bar.update(1)
    bar.close()
    rows.append(memorizer_row())
    if args.json:
        cli.emit(
            cli.to_json(
                [
                    r
                    | dict(
                        units={str(k): v for k, v in r["units"].items()},
                        layers={str(k): v for k, v in r["layers"].items()},
                        ratio={str(k): v for k, v in r["ratio"].items()},
                    )
                    for r in rows
                ]
            )
        )
    else:
        cli.emit(table(rows))
    return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return cli.main_of("python -m verify.theorem.constructions_table", parse_args, run, argv)


if __name__ == "__main__":
    cli.exit(main())
