"""What the hypothesis property tests really run: for each test file, its properties (a
@given test, once per parametrized case) and the examples each one draws under the loaded
profile (tests/conftest.py: `ci` by default, `thorough` with HYPOTHESIS_PROFILE=thorough).

    HYPOTHESIS_PROFILE=thorough python -m tests.census     # the README's table, one profile

Read off the test functions' own hypothesis settings, so a test that lowers its examples
(many do: they are slow) is counted at what it runs, not at the profile's default.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from hypothesis import settings

import tests.conftest  # noqa: F401  (loads the profile, as pytest does before the test modules)

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


def main() -> None:
    rows = census()
    total = sum(n * e for groups in rows.values() for n, e in groups)
    print(f"profile {settings.default.max_examples} examples by default; {total:,} examples in all")
    for name, groups in rows.items():
        print(f"{name}: {describe(groups)}")


if __name__ == "__main__":
    main()
