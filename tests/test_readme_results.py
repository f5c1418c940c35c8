"""The README's result blocks are what `python -m verify.study readme` prints from the
committed stores: no result number in them is typed by hand (issue 32)."""

import pytest

from verify.studies import commands as driver
from verify.studies import summary

README = summary.readme_path()


@pytest.fixture(scope="module")
def _shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("behaviour-cache")


@pytest.fixture(autouse=True)
def _one_cache_for_the_module(_shared_cache, monkeypatch):
    """After a change to the code, every block replays the stores' behaviour records
    (verify.studies.behaviour): once for the module, not once per block."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(_shared_cache))


def test_every_study_and_the_budget_has_a_block_in_the_readme():
    assert set(summary.blocks_of(README.read_text())) == {*driver.study_names(), "budget", "grids"}


@pytest.mark.parametrize("name", sorted(summary.blocks_of(README.read_text())))
def test_the_readme_block_is_what_the_generator_prints(name):
    body = summary.blocks_of(README.read_text())[name]
    assert body == summary.generate(name), (
        f"README.md's `{name}` block is not what the stores give: run `python -m verify.study readme`")


def test_a_number_typed_by_hand_is_rewritten_and_a_second_pass_changes_nothing(tmp_path, capsys):
    made = summary.generate("scaling-law")
    edited = made.replace("0.9", "0.8", 1)
    assert edited != made
    path = tmp_path / "README.md"
    path.write_text(f"intro\n<!-- results: scaling-law -->\n{edited}<!-- /results: scaling-law -->\nend\n")
    assert summary.regenerate(path) == ["scaling-law"]
    block = f"<!-- results: scaling-law -->\n{made}<!-- /results: scaling-law -->"
    assert path.read_text() == f"intro\n{block}\nend\n"
    assert driver.main(["readme", "--file", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: 0 result blocks changed"


def test_an_unknown_block_and_a_missing_file_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="not a study"):
        summary.generate("no-such-study")
    assert driver.main(["readme", "--file", str(tmp_path / "none.md")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
