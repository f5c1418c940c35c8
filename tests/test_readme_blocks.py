"""Every Python block and every command of the README runs, and every output block is what its
command prints now (issue 44, part 5: the README had drifted from the code).

The rule (markers and tolerances: tests/readme.py's docstring):
- every Python block runs as written, in an empty folder, and must exit 0; an output block
  marked `python above` must match what it prints;
- every `python -m` command of a bash block, of an output block (`$ python -m ...` or its
  marker) and of the prose (a code span) is run the way the README marks it: `run` as written
  (exit 0; an output block must match what it prints, within the tolerance its marker states),
  `parse` by its own parser only (its work takes minutes or hours: a study at cpu or paper
  scale, image training, a GPU run, a guided search of minutes), `help` its `--help` (its
  arguments name what a fresh checkout or this machine lacks: a model's files, a cluster). A
  code span that names a bare command (`python -m verify.bound`) or holds a placeholder
  (`--clip-model PATH`) answers --help; one with arguments is parsed. A command shown twice
  runs once, as its strongest mark asks;
- every fenced block is either Python, marked, or has no `python -m` command (set-up and
  tools: venv, pip, ruff, pytest, ray); the extras a `pip install` names exist, and CI's
  script runs the README's test command;
- `python -m tests.readme` regenerates every output block (`--expensive` also the ones not
  run here), so a block that fails here is fixed by one command, not by hand.

Tolerances are stated in each output block's marker: the theorem's checks are float64 and
seeded (rel 1e-3: the printed digits, 4 significant, with an absolute floor where a number is
float64 rounding, as max|dense − structured| ~ 1e-14, whose value is the BLAS's summation
order), trained networks float32 (rel 2e-2: the same seed on another CPU or BLAS rounds
differently, and 1,500 steps of AdamW carry that into the second or third digit; the stored
studies' replays differ between machines by up to 1e-4 in float32 features; only one machine
was at hand to check it). Both lie well inside the drifts they must catch: issue 44 found the
construction example's measured values 10–50% off, and the verify.sgd block's sup error 3% and
its 'vs constr' ratios 6–10% off. Times and memory are not compared.
"""

from __future__ import annotations

import functools
import re

import pytest
import tomllib

from tests import readme

TEXT = readme.README.read_text()
BLOCKS = readme.blocks(TEXT)
OUTPUTS = [b for b in BLOCKS if b.marker == "output"]
PYTHON = [b for b in BLOCKS if b.lang == "python"]


def _shell_commands() -> list[tuple[str, str]]:
    """(command, mode) for every `python -m` command of a bash block and of an output block."""
    found = []
    for b in BLOCKS:
        if b.marker == "commands":
            commands = readme.commands_in(b.text)
            modes = [m.strip() for m in b.spec.split(",") if m.strip()]
            assert len(modes) == len(commands), (
                f"README line {b.first}: {len(commands)} commands, {len(modes)} modes in its marker")
            found += zip(commands, modes, strict=True)
        elif b.marker == "output":
            spec = readme.output_of(b)
            found += [(c, spec.test) for c, _ in spec.parts if c is not None]
    return found


def _all_commands() -> dict[str, str]:
    """Each distinct command, with the cheapest mode that still runs what a marker asks
    (run > parse > help: a command shown twice runs once, as its strongest mark asks)."""
    order = {"help": 0, "parse": 1, "run": 2}
    out: dict[str, str] = {}
    for command, mode in _shell_commands():
        out[command] = max(out.get(command, mode), mode, key=order.get)
    for command in readme.inline_commands(TEXT):
        out.setdefault(command, readme.inline_mode(command))
    return out


COMMANDS = _all_commands()


@functools.cache
def printed(command: str) -> str:
    """What a command prints, once per session (a command run for two checks runs once)."""
    return readme.run_command(command)


@functools.cache
def printed_python(code: str) -> str:
    return readme.run_python(code)


def test_every_fenced_block_is_python_or_marked_or_has_no_command():
    for b in BLOCKS:
        if b.lang == "python" or b.marker:
            continue
        assert not readme.commands_in(b.text), f"README line {b.first}: a block with commands and no marker"
        assert b.lang == "bash", f"README line {b.first}: an output block with no `<!-- output -->` marker"


def test_the_readme_has_what_this_test_runs():
    assert len(PYTHON) >= 2 and len(OUTPUTS) >= 6
    assert {m for _, m in _shell_commands()} == {"run", "parse", "help"}
    assert any(o.source == "python above" for o in map(readme.output_of, OUTPUTS))


@pytest.mark.parametrize("index", range(len(PYTHON)), ids=lambda i: f"line{PYTHON[i].first}")
def test_every_python_block_runs(index):
    printed_python(PYTHON[index].text)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_runs_as_the_readme_marks_it(command):
    mode = COMMANDS[command]
    if mode == "run":
        printed(command)
    else:
        readme.parse_only(command, mode)


@pytest.mark.parametrize("index", range(len(OUTPUTS)), ids=lambda i: f"line{OUTPUTS[i].first}")
def test_every_output_block_is_what_its_command_prints(index):
    block = OUTPUTS[index]
    spec = readme.output_of(block)
    if spec.test != "run":
        pytest.skip(f"{spec.source}: not run here (`test {spec.test}`); `python -m tests.readme --expensive`")
    problems = []
    for command, expected in spec.parts:
        out = printed_python(block.python_above) if command is None else printed(command)
        problems += readme.compare(out, expected, spec.rel, spec.abs, spec.integers, spec.machine)
    assert not problems, (f"README line {block.first} ({spec.source}) is not what it prints; "
                          "`python -m tests.readme` rewrites it:\n" + "\n".join(problems))


def test_the_extras_exist_and_ci_runs_the_readme_test_command():
    project = tomllib.loads((readme.ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    named = {e for spec in re.findall(r"\.\[([\w,]+)\]", TEXT) for e in spec.split(",")}
    assert named and named <= extras, named - extras
    ci = (readme.ROOT / ".ci" / "run").read_text().strip().split("\n")[-1]
    assert any(b.text.strip() == ci for b in BLOCKS if b.lang == "bash")


# --- the checks can fail ---------------------------------------------------------------------

BOUND = """\
certificate   I·C·a/N² = 9.980e-04   (float64 rounding ≤ 1.4e-11)
measured      sup‖f−g‖∞ = 2.619e-04  = 0.262 × certificate   (all 5,488 supports, 163,281 evaluations, 2.6 s)
dense check   max|dense − structured| = 2.3e-14
verdict       PASS  (3.4 s, peak memory 1.07 GiB)"""

SGD = """\
network         hidden  sup train   sup held held/train vs constr …
sgd matched      1,484   3.78e+00   2.99e+00       0.81       499 …"""


def _lines(text):
    return text.split("\n")


def test_machine_columns_are_not_compared_and_the_rest_of_their_lines_is():
    """`machine sup train, held/train`: those columns' numbers may be anything (another CPU's
    searched maximum); the line's other numbers and its text are held as before; a column the
    header does not name is an error, not a silent pass."""
    said, machine = _lines(SGD), ["sup train", "held/train"]
    other_cpu = SGD.replace("3.78e+00", "3.18e+00").replace("0.81", "0.94")
    assert readme.compare(other_cpu, said, 2e-2, 0, True) and readme.compare(other_cpu, said, 2e-2, 0, True,
                                                                            machine) == []
    assert readme.compare(other_cpu.replace("2.99e+00", "3.29e+00"), said, 2e-2, 0, True, machine)
    assert readme.compare(other_cpu.replace("499", "599"), said, 2e-2, 0, True, machine)
    assert readme.compare(other_cpu.replace("sgd matched", "sgd balance"), said, 2e-2, 0, True, machine)
    with pytest.raises(ValueError, match="names the machine columns"):
        readme.compare(SGD, said, 2e-2, 0, True, ["sup test"])


def test_the_comparison_holds_numbers_to_the_tolerance_and_ignores_times():
    said = _lines(BOUND)
    slower = BOUND.replace("2.6 s", "9.1 s").replace("1.07 GiB", "2.00 GiB")
    assert readme.compare(slower, said, 1e-3, 1e-12) == []
    assert readme.compare(BOUND.replace("2.3e-14", "5.6e-14"), said, 1e-3, 1e-12) == []  # the floor
    assert readme.compare(BOUND.replace("2.619e-04", "2.620e-04"), said, 1e-3, 0) == []  # one printed digit
    assert readme.compare(BOUND.replace("2.619e-04", "2.719e-04"), said, 1e-3, 0)        # a drift
    assert readme.compare(BOUND.replace("163,281", "163,282"), said, 1e-3, 0)            # a count
    assert readme.compare(BOUND.replace("2.3e-14", "5.6e-14"), said, 1e-3, 0)            # no floor
    assert readme.compare(BOUND.replace("PASS", "FAIL"), said, 1e-3, 1e-12)             # the text
    assert readme.compare(BOUND + "\nanother line", said, 1e-3, 1e-12)                  # a new line


def test_issue_44s_drifted_sgd_block_is_caught_at_the_training_tolerance():
    said = _lines(SGD.replace("3.78e+00", "3.68e+00").replace("499", "549"))
    printed_now = SGD.replace(" …", " 1.0  2.0")  # the printed line runs on past the cut
    problems = readme.compare(printed_now, said, 2e-2, 0, integers=True)
    assert len(problems) == 1
    assert "3.68e+00 in the README, 3.78e+00 printed; 549 in the README, 499 printed" in problems[0]
    near = printed_now.replace("3.78e+00", "3.76e+00").replace("499", "505")
    assert readme.compare(near, _lines(SGD), 2e-2, 0, integers=True) == []
    assert readme.compare(near, _lines(SGD), 2e-2, 0)  # without `integers rel`, 499 is a count


def test_an_excerpt_keeps_its_lines_in_order_and_is_regenerated_from_a_fresh_run():
    said = ["...", "measured      sup‖f−g‖∞ = 2.500e-04  = 0.250 × certificate   (all 5,488 supports, "
            "163,281 evaluations, 2.6 s)", "..."]
    assert readme.compare(BOUND, said, 1e-3, 0)
    made = readme.regenerated(BOUND, said)
    assert made == ["...", _lines(BOUND)[1], "..."] and readme.compare(BOUND, made, 1e-3, 0) == []
    with pytest.raises(ValueError, match="no longer printed"):
        readme.regenerated(BOUND, ["...", "a line the command never prints 1.0", "..."])
    assert readme.compare(BOUND, [_lines(BOUND)[2], "...", _lines(BOUND)[0]], 1e-3, 1e-12)  # order


def test_a_cut_block_is_regenerated_at_its_column(tmp_path):
    printed_now = SGD.replace(" …", " 1.0  2.0")
    assert readme.regenerated(printed_now, _lines(SGD)) == _lines(SGD)
    path = tmp_path / "README.md"
    path.write_text("a\n<!-- output: python -m verify.sgd | rel 2e-2 -->\n```\n"
                    + SGD.replace("3.78e+00", "3.68e+00") + "\n```\nend\n")
    spec = readme.output_of(readme.blocks(path.read_text())[0])
    assert spec.parts == [("python -m verify.sgd", _lines(SGD.replace("3.78e+00", "3.68e+00")))]


def test_a_marker_without_its_tolerance_or_with_wrong_modes_is_refused():
    with pytest.raises(ValueError, match="tolerance"):
        readme.output_of(readme.blocks("<!-- output: python -m verify.bound -->\n```\nx\n```\n")[0])
    with pytest.raises(ValueError, match="field"):
        readme.output_of(readme.blocks("<!-- output: python -m verify.bound | rel 1 | test twice -->\n"
                                       "```\nx\n```\n")[0])


def test_a_number_drifted_in_the_readmes_own_bound_block_fails_against_a_fresh_run():
    block = next(b for b in OUTPUTS if readme.output_of(b).source.startswith("python -m verify.bound"))
    spec = readme.output_of(block)
    command, expected = spec.parts[0]
    assert readme.compare(printed(command), expected, spec.rel, spec.abs) == []
    drifted = [line.replace("= 0.262 ×", "= 0.272 ×") for line in expected]
    assert drifted != expected
    assert readme.compare(printed(command), drifted, spec.rel, spec.abs)


# --- the constructions table (a Markdown table under an output marker) -----------------------

TABLE_COMMAND = "python -m verify.theorem.constructions_table"


def _table_block():
    return next(b for b in OUTPUTS if readme.output_of(b).source == TABLE_COMMAND)


def test_the_constructions_table_is_an_output_block_regenerated_from_its_command(tmp_path, monkeypatch):
    """The table is read as an output block (its rows are the lines), held to its marker's
    tolerance, and `python -m tests.readme --expensive` rewrites the rows in place: issue 44's
    drift (optimal at ε = 10⁻³ said 0.29 of its certificate, measured 0.38) fails the compare."""
    block = _table_block()
    assert block.lang == readme.TABLE and block.lines[0].startswith("| construction |")
    spec = readme.output_of(block)
    assert spec.test == "parse" and spec.rel == 1e-3  # 140 s of CPU: regenerated with --expensive
    table = "\n".join(block.lines)
    assert readme.compare(table, block.lines, spec.rel, spec.abs) == []
    optimal = next(line for line in block.lines if line.startswith("| `optimal`"))
    drifted = optimal.replace(optimal.split(" | ")[5], "0.29 / 0.35")
    assert readme.compare(table.replace(optimal, drifted), block.lines, spec.rel, spec.abs)

    path = tmp_path / "README.md"
    marker = f"<!-- output: {TABLE_COMMAND} | rel 1e-3 | test parse -->"
    path.write_text(f"a\n\n{marker}\n" + table.replace(optimal, drifted) + "\n\nend\n")
    monkeypatch.setattr(readme, "run_command", lambda command, timeout=600: table + "\n")
    assert readme.regenerate(path) == []  # `test parse`: only with --expensive
    assert readme.regenerate(path, expensive=True) == [f"README line 3: {TABLE_COMMAND} changed"]
    assert path.read_text() == f"a\n\n{marker}\n{table}\n\nend\n"


def test_the_constructions_tables_sizes_are_what_is_built():
    """The columns that need no measurement (units at each ε, hidden layers, where the
    certificate holds), built now: a second or two, so this runs where the table's command
    (140 s) does not."""
    from verify.theorem import constructions_table as ct

    rows = [ct.measure_row(row, measure=False) for row in ct.ROWS] + [ct.memorizer_row()]
    said = [line.split(" | ") for line in _table_block().lines[2:]]
    built = [ct.line(r).split(" | ") for r in rows]
    assert [line[:5] + line[6:] for line in said] == [line[:5] + line[6:] for line in built]
    assert ct.table(rows).split("\n")[:2] == _table_block().lines[:2]
