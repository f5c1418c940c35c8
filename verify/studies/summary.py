"""The README's result blocks, generated from the committed stores: no result number in them
is typed by hand.

A block sits in README.md between `<!-- results: NAME -->` and `<!-- /results: NAME -->`.
`python -m verify.study readme` rewrites every block from the stores shipped with the package
(`verify/studies/results/STUDY/cpu/`) and the installed code, and `tests/test_readme_results.py`
fails when a block is not what it prints. So a rerun, a change that marks stored runs as
made by other code (`verify.studies.behaviour`), or a new verdict shows in the README only
through this command.

NAME is a study, `grids` (every study's runs per scale) or `budget` (the summary line of
`verify.study budget`). A study's block is short, so that the README stays readable: one line
saying what it rests on (runs done, whether the installed code made them, stored run time)
with a link to the study's full report (`effects.md`, which `report` writes), then one line
per comparison the study tests (its difference, outcome, test and the paper's claim), or per
row where it tests none, and the notes that qualify them (unconverged rows, failed or missing
runs). For width-vs-M the lines are the slope verdicts (verify.studies.width, compact); for
image-composition the decodability fits and the ladders' verdicts.
"""

from __future__ import annotations

import re
from pathlib import Path

from verify.studies import budget, grids, staged
from verify.studies.effects import _cell, key_cell
from verify.studies.status import store_counts
from verify.studies.store import RunStore

SCALE = "cpu"
BLOCK = re.compile(r"(<!-- results: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results: (?P=name) -->)", re.S)
# Settings a block folds into the network it names.
NETWORK_SETTINGS = ("shapes", "student", "widths", "d_ffw", "d_model", "n_heads", "n_layers")


def blocks_of(text: str) -> dict[str, str]:
    """NAME → the text between a block's markers."""
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def replace_blocks(text: str, made: dict[str, str]) -> str:
    """`text` with each block's body replaced by made[NAME]."""
    return BLOCK.sub(lambda m: m[1] + made[m["name"]] + m[4], text)


def generate(name: str) -> str:
    """The body of block NAME, ending in a newline."""
    if name == "budget":
        return budget.summary_line(budget.budget_table(SCALE, 2)) + "\n"
    if name == "grids":
        return grids_table() + "\n"
    if name not in grids.study_names():
        raise ValueError(f"README block {name!r}: not a study, nor `budget`")
    store = grids.PACKAGED_RESULTS_DIR / name / SCALE
    if not (store / "study.sqlite").is_file():
        return f"*No committed {SCALE}-scale store for `{name}` yet.*\n"
    runs, table = staged.study_table(name, SCALE, store)
    program = runs[0].program
    report = grids.PROGRAMS[program].report_module()
    head = _head(name, store, {r.key for r in runs}, table)
    if hasattr(report, "format_compact"):  # a report with a README block of its own
        return head + report.format_compact(table) + "\n"
    if program != grids.DEFAULT_PROGRAM:
        return head + _demote(report.format_markdown(table, runs=False)) + "\n"
    if "analysis" in table:
        analysis = grids.study_analysis(name)
        return head + _demote(analysis.format_analysis(table["analysis"], compact=True)) + "\n"
    return head + compact_lines(table) + "\n"


def grids_table() -> str:
    """Each study's runs at every scale, and what its committed cpu store holds."""
    lines = ["| study | program | " + " | ".join(grids.SCALES)
             + f" | committed {SCALE} store: done (current) |",
             "|---|---|" + "---:|" * len(grids.SCALES) + "---|"]
    for name in grids.study_names():
        counts = {scale: grids.expand(name, scale)[1] for scale in grids.SCALES}
        program = counts[SCALE][0].program
        store = grids.PACKAGED_RESULTS_DIR / name / SCALE / "study.sqlite"
        held = "—"
        if store.is_file():
            c = store_counts(counts[SCALE], store)
            held = f"{c['done']} ({c['done'] - c['stale']})"
        lines.append(f"| `{name}` | {program} | " + " | ".join(f"{len(counts[s]):,}" for s in grids.SCALES)
                     + f" | {held} |")
    return "\n".join(lines)


def _head(name: str, store: Path, keys: set[str], table: dict) -> str:
    """One line: what the block rests on (runs, run time, the code that made them)."""
    with RunStore(store / "study.sqlite", readonly=True) as s:
        seconds = sum(r["seconds"] or 0 for r in s.rows() if r["status"] == "done" and r["key"] in keys)
    stale = table.get("runs_other_code", 0) + table.get("runs_unknown_code", 0)
    code = (f"{stale} of them made by other or unknown code (`run {name} --scale {SCALE} --rerun-stale` "
            "recomputes them)" if stale else "all made by the installed code or code that behaves the same")
    report = f"verify/studies/results/{name}/{SCALE}/effects.md"
    of = (f"the grid's and its sequential plan's (`run {name} --until-decided`)" if "staged" in table
          else "the grid's")
    return (f"*{table['runs_done']} of {of} {len(keys)} runs done, {code}; "
            f"{seconds / 60:.0f} min of stored run time. Full report: [`{report}`]({report}).*\n")


def _demote(markdown: str) -> str:
    """A report's markdown inside the README: its headings as bold lines, its title dropped."""
    out = []
    for line in markdown.splitlines():
        if line.startswith("# "):
            continue
        out.append(f"**{line.lstrip('#').strip()}**" if line.startswith("#") else line)
    return "\n".join(out).strip("\n")


def _network(row: dict) -> str:
    widths = row.get("widths")
    if isinstance(widths, tuple) and widths and len(set(widths)) == 1:
        return f"{len(widths)}×{widths[0]} MLP"
    if row.get("d_model") is not None:
        return f"transformer (d_model {row['d_model']}, {row['n_layers']} blocks)"
    return str(row["network"])


# The notes a block keeps under its lines: failed runs (the head line says how many are done;
# each line says whether its row converged). The rest (the verdict rule, margins, seeds for
# power, deviations from the paper) are in the study's full report and its study file.
KEPT_NOTES = ("runs failed", "the sequential plan asks for")


def kept_notes(notes: list[str]) -> list[str]:
    """The notes a README block keeps (KEPT_NOTES), as list items."""
    return [f"- {n}" for n in notes if any(k in n for k in KEPT_NOTES)]


def _label(row: dict, keys: list[str], network: bool) -> str:
    """What a row's line names: its settings and, where several, its network; for a tested
    row, the treatment against its control (`K 2, M 8: held_out 0.25 vs 0.75`)."""
    parts = {k: f"{k} {key_cell(row.get(k))}" for k in keys}
    net = _network(row) if network else None
    if row.get("effect_vs_random") is not None:
        return ", ".join([*parts.values(), *([net] if net else [])]) + " vs random"
    control = row.get("compared_with")
    if control is None:
        return ", ".join([*parts.values(), *([net] if net else [])])
    factor, _, value = control.partition(" ")
    treatment = parts.pop(factor) if factor in parts else (net or _network(row))
    others = ", ".join([*parts.values(), *([net] if net and factor in keys else [])])
    return (f"{others}: " if others else "") + f"{treatment} vs {value if factor in keys else control}"


def compact_lines(table: dict) -> str:
    """One line per comparison the table tests (the treatment's held-out metric, the
    difference, its outcome and test, the paper's claim), or one per row where it tests none;
    then the notes that qualify them."""
    keys = [k for k in table["group_by"] if k not in NETWORK_SETTINGS]
    rows = table["rows"]
    network = len({_network(r) for r in rows}) > 1
    tested = [r for r in rows if r.get("test") is not None]
    lines = []
    for r in tested or rows:
        m = r["effect_metric"]
        value = f"{m.replace('_', ' ')} {_cell(r.get(f'{m}_mean'))} ± {_cell(r.get(f'{m}_sd'))}"
        runs = f"{r['runs']} run" + ("s" if r["runs"] != 1 else "")
        runs += "" if r["converged"] else ", not converged"  # in some run: the family's rule
        paper = (f" (paper {_cell(r['paper_held_out_r2'])})" if r.get("paper_held_out_r2") is not None
                 else "")
        code = f"; code: {r['code']}" if r.get("code") not in (None, "current") else ""
        if r in tested:
            effect, _, outcome = (r.get("effect_vs_random") or r["effect"]).partition(" ")
            claim = (f"; paper: {r['paper_effect']}, agrees: {_cell(r.get('agrees'))}"
                     if r.get("paper_effect") is not None else "")
            fit = (f"; training {r['train_effect']:+.3f}, gap change {r['gap_change']:+.3f}"
                   if r.get("train_effect") is not None else "")
            lines.append(f"- {_label(r, keys, network)}: {effect} {outcome[:-1]}; {r['test']}) "
                         f"[{value}{paper}, {runs}{fit}]{claim}{code}")
        else:
            lines.append(f"- {_label(r, keys, network)}: {value}{paper}, {runs}{code}")
    return "\n".join(lines + kept_notes(table["notes"]))


def readme_path() -> Path:
    """The checkout's README.md (the blocks document the committed stores)."""
    return Path(__file__).resolve().parents[2] / "README.md"


def regenerate(path: Path) -> list[str]:
    """Rewrite every block of `path` (atomically); the names of the blocks that changed."""
    from verify import cli

    text = path.read_text()
    found = blocks_of(text)
    made = {name: generate(name) for name in found}
    cli.write_text_atomic(path, replace_blocks(text, made))
    return [name for name in found if made[name] != found[name]]
