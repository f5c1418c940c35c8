"""The README's table of what the property tests run matches what they really run, under
the loaded profile (tests/census.py): a test that lowers its examples, a new property or a
new profile default without a README line fails here."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.census import census, describe

README = Path(__file__).resolve().parents[1] / "README.md"
COLUMNS = {"ci": 0, "thorough": 1}
ROW = re.compile(r"^\| `(test_\w+\.py)` \| ([^|]+) \| ([^|]+) \|$")


def readme_table() -> dict[str, tuple[str, str]]:
    return {m[1]: (m[2].strip(), m[3].strip()) for line in README.read_text().splitlines()
            if (m := ROW.match(line))}


def test_readme_says_how_many_examples_each_property_runs():
    column = COLUMNS[os.environ.get("HYPOTHESIS_PROFILE", "ci")]
    table = readme_table()
    real = {name: describe(groups) for name, groups in census().items()}
    assert set(table) == set(real), f"README lists {sorted(set(table) ^ set(real))} wrongly"
    wrong = {name: (table[name][column], real[name]) for name in real if table[name][column] != real[name]}
    assert not wrong, f"README (said, run): {wrong}"
