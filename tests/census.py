"""What the hypothesis property tests really run: for each test file, its properties (a
@given test, once per parametrized case) and the examples each one draws under the loaded
profile (tests/conftest.py: `ci` by default, `thorough` with HYPOTHESIS_PROFILE=thorough).

    python -m tests.census                                 # the README's table, `ci` column
    HYPOTHESIS_PROFILE=thorough python -m tests.census     # its `thorough` column
    python -m tests.census --json                          # the same, as one JSON document

Read off the test functions' own hypothesis settings, so a test that lowers its examples
(many do: they are slow) is counted at what it runs, not at the profile's default.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from hypothesis import settings

import tests.conftest  # noqa: F401  (loads the profile, as pytest does before the test modules)
from verify import cli

TESTS = Path(__file__).resolve().parent


def cases(fn) -> int:
    """How many tests pytest makes of one function: the product of its parametrize marks."""
    n = 1
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize":
            n *= len(mark.args[1])
    return n


def census() -> dict[str, list[tuple[int, int]]]:
    """{test file: [(properties, examples each), ...]}, grouped by examples per property."""
    out: dict[str, list[tuple[int, int]]] = {}
    for path in sorted(TESTS.glob("test_*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        counts: dict[int, int] = {}
        for _, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ != module.__name__ or not getattr(fn, "is_hypothesis_test", False):
                continue
            examples = getattr(fn, "_hypothesis_internal_use_settings", settings.default).max_examples
            counts[examples] = counts.get(examples, 0) + cases(fn)
        if counts:
            out[path.name] = sorted(((n, e) for e, n in counts.items()), key=lambda t: -t[1])
    return out


def describe(groups: list[tuple[int, int]]) -> str:
    return ", ".join(f"{n} × {e}" for n, e in groups)


def parse_args(argv: list[str] | None = None):
    p = cli.Parser(
        "python -m tests.census",
        description=(
            "Print what the hypothesis property tests run under the loaded profile: a first line\n"
            "with the profile's default examples per property and the examples in all, then one\n"
            "line per test file: its properties × examples each, grouped by examples (a test that\n"
            "lowers its own is counted at what it runs). The profile is tests/conftest.py's: `ci`\n"
            "by default, HYPOTHESIS_PROFILE=thorough for the README table's other column. It\n"
            "imports every test module and runs no test."
        ),
    )
    cli.add_json(p, "the census (profile, total, and per file [properties, examples] pairs)")
    return p.parse_args(argv)


def report() -> dict:
    rows = census()
    total = sum(n * e for groups in rows.values() for n, e in groups)
    return dict(
        profile=settings.get_current_profile_name(),
        default_examples=settings.default.max_examples,
        total_examples=total,
        files={name: [list(g) for g in groups] for name, groups in rows.items()},
    )


def text(r: dict) -> str:
    lines = [f"profile {r['default_examples']} examples by default; {r['total_examples']:,} examples in all"]
    lines += [f"{name}: {describe(groups)}" for name, groups in r["files"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    def work(args) -> int:
        r = report()
        cli.emit(cli.to_json(r) if args.json else text(r))
        return cli.EXIT_OK

    return cli.main_of("python -m tests.census", parse_args, work, argv)


if __name__ == "__main__":
    raise SystemExit(main())
