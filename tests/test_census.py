"""The README's table of what the property tests run matches what they really run, under
the loaded profile (tests/census.py): a test that lowers its examples, a new property or a
new profile default without a README line fails here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

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


def test_census_help_says_what_it_prints_and_runs_nothing(capsys, monkeypatch):
    """`python -m tests.census --help` prints its help and exit 0 without taking the census (it
    took it before it had a parser); a bad flag is one line and exit 2; --json is the census."""
    import json

    import tests.census as tc

    def no_census():
        raise AssertionError("--help took the census")

    monkeypatch.setattr(tc, "census", no_census)
    with pytest.raises(SystemExit) as ended:
        tc.main(["--help"])
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m tests.census [-h] [--json]")
    assert "properties × examples" in out and "HYPOTHESIS_PROFILE=thorough" in out
    assert tc.main(["--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "unrecognized arguments: --bogus" in err
    monkeypatch.undo()
    assert tc.main(["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {name: describe([tuple(g) for g in groups]) for name, groups in r["files"].items()} == {
        name: describe(groups) for name, groups in census().items()}
    assert r["total_examples"] == sum(n * e for groups in r["files"].values() for n, e in groups)
    assert tc.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    total = f"{r['total_examples']:,} examples in all"
    assert out[0] == f"profile {r['default_examples']} examples by default; {total}"
    assert out[1:] == [f"{name}: {describe(groups)}" for name, groups in census().items()]


def test_census_help_from_the_command_line():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "tests.census", "--help"], cwd=root, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(root)))
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m tests.census")
    assert "examples in all;" not in done.stdout and "test_construction.py" not in done.stdout
