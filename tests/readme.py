"""The README's code blocks, read, run, compared and regenerated (issue 44, part 5).

    python -m tests.readme              # rewrite every output block the test runs (~2.5 min)
    python -m tests.readme --expensive  # and the blocks whose commands run for minutes (+ ~10 min)
    python -m tests.readme --check      # say which blocks differ from a fresh run; write nothing

The study result blocks (`<!-- results: NAME -->`) are `python -m verify.study readme`'s
(verify/studies/summary.py); this module does the rest. An HTML comment on the line right above
a fenced block (GitHub shows none) says what the block is:

    <!-- commands: MODE, MODE, ... -->
        a bash block: one MODE for each `python -m` command in it, in order;
    <!-- output: SOURCE | rel R [| abs A] [| integers rel] [| machine COL, ...] [| test MODE] -->
    <!-- output: SOURCE | timings [| test MODE] -->
        an output block (a fenced block, or the Markdown table on the lines right below the
        marker, whose rows are the block's lines): what SOURCE prints, its numbers within R
        of the block's (relative) or within A (absolute), or none compared (`timings`: every
        number is a measured speed);
        SOURCE is a command (`python -m ...`), `$` (the block's own
        `$ python -m ...` lines, each followed by what it prints) or `python above` (what the
        Python block above it prints). `test MODE` (default run) is how the test runs it.

MODE is how tests/test_readme_blocks.py runs a command: `run` as written (in a temporary
folder; it must exit 0, and an output block must match what it prints), `parse` (only its
arguments, by the command's own parser: its work takes minutes, trains or needs a GPU) or
`help` (`--help`: its arguments name what a fresh checkout or this machine lacks: a trained
model's files, a cluster). A block whose
command is not run is regenerated only with `--expensive`.

An output block may leave lines out (a line `...`): the lines it keeps must appear in that
order in the output. A line ending in ` …` is cut there (the output's line is longer; a
regeneration cuts the same lines at the first cut line's column). Lines
match when their text without numbers is equal and each number is within the tolerance:
|fresh − block| ≤ max(R·|block|, A, one unit in the block's last printed digit) for a number
with a decimal point or exponent, which allows the rounding to the printed digits; an integer
is a count and must be equal, unless the marker says `integers rel` (a trained network's
error ratio, printed as an integer: held to R like the rest). Times and memory (a number followed
by s, min, h, GiB or MiB) are not compared: they are the machine's, and a regeneration
rewrites them. So are the numbers of the columns a marker names in `machine COL, COL` (named as
the block's header line names them; their numbers right-aligned under them): a searched maximum
of a float32-trained network's error is another number on another CPU, where the network's R²
agrees to 1e-3 (verify.sgd's default, two machines of this project: sup train 0.647 and 0.542).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

FENCE = re.compile(r"^```(\w*)\s*$")
TABLE = "table"  # the `lang` of a Markdown table under an output marker (not a fenced block)
MARKER = re.compile(r"^<!--\s*(commands|output):(.*?)-->\s*$")
MODES = ("run", "parse", "help")
LEFT_OUT = "..."
CUT = " …"
# numbers: 1,234 (a count with thousands commas), 12, -0.5, 2.619e-04
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
TIME_UNIT = re.compile(r"\s?(?:s|ms|min|h|GiB|MiB)\b")


@dataclass
class Block:
    """A fenced block: its language, its lines, its marker (if any) and where it is."""

    lang: str
    lines: list[str]
    first: int  # the index of its first body line in the README's lines
    marker: str | None = None  # "commands" or "output"
    spec: str = ""
    python_above: str | None = None  # for an output block: the nearest Python block above

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def blocks(text: str) -> list[Block]:
    """Every fenced block of `text`, with the marker on the line above it."""
    lines = text.split("\n")
    out: list[Block] = []
    i = 0
    last_python = None
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            marker = MARKER.match(lines[i])
            if marker and marker[1] == "output" and i + 1 < len(lines) and lines[i + 1].startswith("|"):
                # An output marker above a Markdown table: the table's rows are the block.
                j = i + 1
                while j < len(lines) and lines[j].startswith("|"):
                    j += 1
                out.append(Block(TABLE, lines[i + 1:j], i + 1, marker[1], marker[2].strip(), last_python))
                i = j
                continue
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j] != "```":
            j += 1
        block = Block(m[1], lines[i + 1:j], i + 1)
        marker = MARKER.match(lines[i - 1]) if i else None
        if marker:
            block.marker, block.spec = marker[1], marker[2].strip()
        if block.lang == "python":
            last_python = block.text
        elif block.marker == "output":
            block.python_above = last_python
        out.append(block)
        i = j + 1
    return out


# --- commands --------------------------------------------------------------------------------

def commands_in(shell: str) -> list[str]:
    """The `python -m` commands of a bash block, as written (continuations joined, comments and
    the set-up and tools around them (venv, pip, ruff, pytest, ray) left out)."""
    joined = re.sub(r"\\\n\s*", " ", shell)
    found = []
    for line in joined.split("\n"):
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words[:2] == ["python", "-m"]:
                found.append(shlex.join(words))
    return found


def inline_commands(text: str) -> list[str]:
    """Every `python -m ...` code span of the prose (a span may wrap a line)."""
    prose = "\n".join(b for i, b in enumerate(re.split(r"^```.*$", text, flags=re.M)) if i % 2 == 0)
    return [" ".join(span.split()) for span in re.findall(r"`(python\s+-m\s[^`]+)`", prose)]


def parse_only(command: str, mode: str) -> None:
    """`parse`: the command's own parser reads its arguments (raises on a refusal); `help`: its
    --help answers, exit 0."""
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"], command
    module, argv = words[2], words[3:]
    if mode == "help":
        done = _python([*words[2:3], *argv, "--help"], timeout=120)
        assert done.returncode == 0, f"{command} --help: exit {done.returncode}\n{done.stderr}"
        return
    entry = _entry(module)
    if argv and importlib.util.find_spec(module).submodule_search_locations is not None:
        try:  # a command that hands its first word to a module of its own (`verify.images train`)
            sub = importlib.import_module(f"{module}.{argv[0]}")
        except ModuleNotFoundError:
            sub = None
        if sub is not None and hasattr(sub, "parse_args") and hasattr(sub, "main"):
            entry, argv = sub, argv[1:]
    entry.parse_args(argv)


def _entry(module: str):
    try:
        return importlib.import_module(module + ".__main__")
    except ModuleNotFoundError:
        return importlib.import_module(module)


PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]+$")


def inline_mode(command: str) -> str:
    """How a code span's command is checked: a bare command, or one whose arguments hold a
    placeholder (PATH, DIR), answers --help; any other is parsed."""
    words = shlex.split(command)[3:]
    return "help" if not words or any(PLACEHOLDER.match(w) for w in words) else "parse"


def _env() -> dict[str, str]:
    """The checkout first on the path (a worktree's code, not whatever is installed)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _python(argv: list[str], *, timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run([sys.executable, "-m", *argv], cwd=tmp, env=_env(), capture_output=True,
                              text=True, timeout=timeout)


def run_command(command: str, timeout: float = 600) -> str:
    """What `command` prints on stdout, run as written in an empty temporary folder (exit 0)."""
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"], command
    done = _python(words[2:], timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"`{command}` exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def run_python(code: str, timeout: float = 600) -> str:
    """What a Python block prints, run in an empty temporary folder (exit 0)."""
    done = _python_code(code, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"a Python block exited {done.returncode}:\n{done.stderr[-3000:]}\n{code}")
    return done.stdout


def _python_code(code: str, timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run([sys.executable, "-c", code], cwd=tmp, env=_env(), capture_output=True,
                              text=True, timeout=timeout)


# --- output blocks ---------------------------------------------------------------------------

@dataclass
class Output:
    """An output block's marker, read: where its text comes from and its tolerance."""

    source: str  # a command, "$" or "python above"
    rel: float
    abs: float = 0.0
    test: str = "run"
    timings: bool = False  # every number is a measured speed or time: none is compared
    integers: bool = False  # integers are measured (ratios of trained networks' errors), held to rel
    machine: list[str] = field(default_factory=list)  # columns whose numbers are the machine's: not compared
    parts: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (command, expected lines)


def output_of(block: Block) -> Output:
    fields = [f.strip() for f in block.spec.split("|")]
    spec = Output(fields[0], rel=float("nan"))
    for f in fields[1:]:
        key, _, value = f.partition(" ")
        if key == "rel":
            spec.rel = float(value)
        elif key == "abs":
            spec.abs = float(value)
        elif key == "timings" and not value:
            spec.timings = True
        elif key == "integers" and value == "rel":
            spec.integers = True
        elif key == "test" and value in MODES:
            spec.test = value
        elif key == "machine" and value:
            spec.machine = [c.strip() for c in value.split(",")]
        else:
            raise ValueError(f"README line {block.first}: output marker field {f!r}")
    if spec.rel != spec.rel and not spec.timings:
        raise ValueError(f"README line {block.first}: an output marker states its tolerance (`rel R`)")
    if spec.source == "$":
        current: tuple[str | None, list[str]] | None = None
        for line in block.lines:
            if line.startswith("$ "):
                current = (commands_in(line)[0], [])
                spec.parts.append(current)
            elif current is None:
                raise ValueError(f"README line {block.first}: a `$` output block starts with its command")
            else:
                current[1].append(line)
    elif spec.source == "python above":
        if block.python_above is None:
            raise ValueError(f"README line {block.first}: no Python block above")
        spec.parts.append((None, list(block.lines)))
    else:
        spec.parts.append((commands_in(spec.source)[0], list(block.lines)))
    return spec


def _numbers(line: str, skip_ends: frozenset[int] = frozenset()) -> tuple[str, list[tuple[str, bool]]]:
    """A line's text with each number as `#`, and its numbers (text, not compared: a time, a
    memory, or a number ending at one of `skip_ends`, a machine column's right edge)."""
    shape, numbers, at = [], [], 0
    for m in NUMBER.finditer(line):
        shape.append(line[at:m.start()] + "#")
        numbers.append((m[0], bool(TIME_UNIT.match(line, m.end())) or m.end() in skip_ends))
        at = m.end()
    shape.append(line[at:])
    return "".join(shape).rstrip(), numbers


def _close(fresh: str, said: str, rel: float, abs_: float, integers: bool) -> bool:
    a, b = float(fresh.replace(",", "")), float(said.replace(",", ""))
    if not re.search(r"[.eE]", said):
        return abs(a - b) <= rel * abs(b) if integers else a == b
    mantissa = re.split(r"[eE]", said)[0]
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(re.split(r"[eE]", said)[1]) if re.search(r"[eE]", said) else 0
    unit = 10.0 ** (exponent - digits)
    return abs(a - b) <= max(rel * abs(b), abs_, unit) * (1 + 1e-12)


def _cut(line: str, said: str) -> str:
    return line[:len(said) - len(CUT)] if said.endswith(CUT) else line


def line_problem(fresh: str, said: str, rel: float, abs_: float, integers: bool = False,
                 skip_ends: frozenset[int] = frozenset()) -> str | None:
    """Why the printed line `fresh` does not match the block's line `said` (None: it does)."""
    fresh = _cut(fresh, said)
    said_text = said[:-len(CUT)] if said.endswith(CUT) else said
    shape_f, nums_f = _numbers(fresh)
    shape_s, nums_s = _numbers(said_text, skip_ends)
    if shape_f != shape_s:
        return f"text differs:\n  README: {said}\n  prints: {fresh}"
    off = [f"{s} in the README, {f} printed" for (f, _), (s, is_time) in zip(nums_f, nums_s, strict=True)
           if not is_time and not _close(f, s, rel, abs_, integers)]
    if off:
        return f"{'; '.join(off)} (rel {rel:g}, abs {abs_:g}):\n  README: {said}\n  prints: {fresh}"
    return None


def machine_column_ends(expected: list[str], machine: list[str]) -> frozenset[int]:
    """The right edges of the `machine` columns, read off the block's header line (the first
    that names them all); their numbers are printed right-aligned under them."""
    if not machine:
        return frozenset()
    header = next((line for line in expected if all(f" {c}" in line for c in machine)), None)
    if header is None:
        raise ValueError(f"no header line in the block names the machine columns {machine}")
    return frozenset(header.index(f" {c}") + 1 + len(c) for c in machine)


def compare(printed: str, expected: list[str], rel: float, abs_: float, integers: bool = False,
            machine: list[str] = ()) -> list[str]:
    """The problems of an output block's lines `expected` against what was `printed`; numbers
    in the `machine` columns are not compared."""
    out = printed.rstrip("\n").split("\n")
    skip = machine_column_ends(expected, list(machine))
    if LEFT_OUT not in expected:
        problems = [p for f, s in zip(out, expected, strict=False)
                    if (p := line_problem(f, s, rel, abs_, integers, skip))]
        if len(out) != len(expected):
            problems.append(f"{len(expected)} lines in the README, {len(out)} printed")
        return problems
    problems, at = [], 0
    for said in expected:
        if said == LEFT_OUT:
            continue
        shape = _numbers(said[:-len(CUT)] if said.endswith(CUT) else said)[0]
        while at < len(out) and _numbers(_cut(out[at], said))[0] != shape:
            at += 1
        if at == len(out):
            problems.append(f"not printed (in this order): {said}")
            at = 0
            continue
        if (p := line_problem(out[at], said, rel, abs_, integers, skip)):
            problems.append(p)
        at += 1
    return problems


def regenerated(printed: str, expected: list[str]) -> list[str]:
    """The block's lines `expected` rewritten from what was `printed` (lines left out stay out;
    a cut line is cut at the same column). ValueError where a kept line is not printed."""
    out = printed.rstrip("\n").split("\n")
    if LEFT_OUT not in expected:
        cuts = [s for s in expected if s.endswith(CUT)]
        width = len(cuts[0]) - len(CUT) if cuts else None
        cut = [i < len(expected) and expected[i].endswith(CUT) for i in range(len(out))]
        return [o[:width].rstrip() + CUT if c and len(o) > width else o
                for o, c in zip(out, cut, strict=True)]
    made, at = [], 0
    for said in expected:
        if said == LEFT_OUT:
            made.append(said)
            continue
        shape = _numbers(said[:-len(CUT)] if said.endswith(CUT) else said)[0]
        while at < len(out) and _numbers(_cut(out[at], said))[0] != shape:
            at += 1
        if at == len(out):
            raise ValueError(f"no longer printed: {said!r} (edit the README's excerpt by hand)")
        made.append(_cut(out[at], said) + (CUT if said.endswith(CUT) else ""))
        at += 1
    return made


def fresh_output(spec: Output, part: tuple[str | None, list[str]], block: Block) -> str:
    command, _ = part
    print(f"running {command or 'the Python block above line ' + str(block.first)}", file=sys.stderr)
    return run_python(block.python_above) if command is None else run_command(command)


def regenerate(path: Path = README, *, expensive: bool = False, check: bool = False) -> list[str]:
    """Rewrite the output blocks of `path` from fresh runs; the lines saying what changed
    (`check`: write nothing, and say which blocks are out of their tolerance)."""
    from verify import cli

    text = path.read_text()
    lines = text.split("\n")
    said = []
    for block in reversed(blocks(text)):
        if block.marker != "output":
            continue
        spec = output_of(block)
        if spec.test != "run" and not expensive:
            continue
        made: list[str] = []
        problems: list[str] = []
        for part in spec.parts:
            command, expected = part
            printed = fresh_output(spec, part, block)
            if not spec.timings:
                problems += compare(printed, expected, spec.rel, spec.abs, spec.integers, spec.machine)
            if command is not None and spec.source == "$":
                made.append(f"$ {command}")
            made += regenerated(printed, expected)
        if check and problems:
            said.append(f"README line {block.first}: {spec.source}:\n" + "\n".join(problems))
        elif not check and made != block.lines:
            said.append(f"README line {block.first}: {spec.source} changed")
            lines[block.first:block.first + len(block.lines)] = made
    if said and not check:
        cli.write_text_atomic(path, "\n".join(lines))
    return said


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.readme", description=__doc__.split("\n\n")[0])
    p.add_argument("--file", default=str(README))
    p.add_argument("--expensive", action="store_true", help="also the blocks whose commands run for minutes")
    p.add_argument("--check", action="store_true", help="say which blocks differ; write nothing")
    args = p.parse_args(argv)
    changed = regenerate(Path(args.file), expensive=args.expensive, check=args.check)
    for line in changed:
        print(line)
    print(f"{args.file}: {len(changed)} output blocks {'differ' if args.check else 'changed'}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
