"""A user's own stores (issue 44, part 7): `verify.study compare` sets a rerun beside the
committed results, `list --out ROOT` and `paper_figures --studies ROOT` read a user's stores."""

import shutil

import pytest

from paper_figures import common, fig9_studies
from tests.test_staged import planted_study  # noqa: F401 - the fixture
from verify.studies import commands as study
from verify.studies import compare, grids
from verify.studies.store import RunStore


def _run(path, out):
    study.run_study(path, "paper", out, engine="serial", progress=False, until_decided=True)


def test_a_rerun_that_reproduces_is_the_same_and_a_changed_run_is_named(planted_study, tmp_path):  # noqa: F811
    path, out = planted_study
    _run(path, out)
    mine = tmp_path / "mine"
    shutil.copytree(out, mine)
    same = compare.compare(path, "paper", mine, reference=out)
    assert len(same["rows"]) == 4 and "4 the same" in compare.format_comparison(same)
    # One run of the wider arm at held-out 0.25 loses its gain: its row's mean moves by 0.1,
    # beyond the tolerance, and its claim, decided at look 1, now stops there for futility
    # (differences 0, 0.3, 0.3: neither outcome within 9 seeds' reach).
    with RunStore(mine / "study.sqlite") as store:
        run = next(r for r in store.rows() if r["config"]["seed"] == 1 and r["config"]["widths"] == [8]
                   and r["config"]["held_out"] == 0.25)
        store.finish(run["key"], dict(run["report"], config=dict(run["config"], widths=[4])), 0.01)
    changed = compare.compare(path, "paper", mine, reference=out)
    text = compare.format_comparison(changed)
    assert "3 the same" in text, text
    line = next(x for x in text.splitlines() if x.startswith("- "))
    assert "held_out 0.25" in line and "held_out_r2 0.7140 vs 0.8143" in line, line
    assert "+0.200 (inconclusive) vs +0.300 (helps)" in line and "agrees: inconclusive vs yes" in line, line


def test_a_changed_verdict_is_named_even_where_the_means_agree(planted_study, tmp_path):  # noqa: F811
    path, out = planted_study
    _run(path, out)
    theirs = compare.table_of(path, "paper", out)
    row = next(r for r in theirs["rows"] if r.get("effect"))
    assert compare._outcome(row["effect"]) == "helps"
    assert compare._outcome("-0.001 (trivial)") == "trivial" and compare._outcome("yes") == "yes"


def test_compare_refuses_without_a_folder_or_on_the_committed_store_itself():
    with pytest.raises(study.UsageError, match="needs --out"):
        study.parse_args(["compare", "scaling-model"])
    committed = grids.PACKAGED_RESULTS_DIR / "scaling-model" / "cpu"
    with pytest.raises(study.UsageError, match="the committed store itself"):
        study.parse_args(["compare", "scaling-model", "--out", str(committed)])


def test_list_and_figure_9_read_a_users_own_stores(tmp_path):
    root = tmp_path / "mine"
    shutil.copytree(grids.PACKAGED_RESULTS_DIR / "scaling-law" / "cpu", root / "scaling-law" / "cpu")
    listed = study.format_list(root)
    law = next(line for line in listed.splitlines() if line.startswith("scaling-law "))
    assert "cpu 16 (16 done" in law or "done, 0 failed" in law, law
    assert "(" not in next(line for line in listed.splitlines() if line.startswith("scaling-data "))
    token = common.STUDIES_ROOT.set(root)
    try:
        scale, out, keys = fig9_studies.store_of("scaling-law", quick=False, progress=False)
    finally:
        common.STUDIES_ROOT.reset(token)
    assert (scale, out) == ("cpu", root / "scaling-law" / "cpu") and keys
    with pytest.raises(study.UsageError, match="no such folder"):
        study.parse_args(["list", "--out", str(tmp_path / "nothing")])
