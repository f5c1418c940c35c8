"""Figure 9 reads the study stores (the working folder's, else the committed ones) and marks
the panels whose runs were made by other code or by unknown code."""

import pytest

from verify.studies import driver as study
from verify.studies import grids, provenance
from verify.studies.store import RunStore


@pytest.fixture
def fig9(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from paper_figures import fig9_studies

    monkeypatch.chdir(tmp_path)  # no store here: every panel reads the committed cpu store
    return fig9_studies


def test_committed_stores_are_drawn_and_marked_as_made_by_unknown_code(fig9):
    rows, meta = fig9.compute(quick=False, progress=False)
    assert set(meta["scales"].values()) == {"cpu"}
    for name in fig9.STUDIES:  # committed before runs recorded their code
        code = meta["code"][name]
        assert code["done"] > 0 and (code["unknown"], code["other"]) == (code["done"], 0), name
        assert fig9._title("x", name, meta).endswith(f"[{code['done']} of {code['done']} runs: unknown code]")
    support = [r for r in rows if r["panel"] == "c"]
    assert len(support) == 6 and {r["code"] for r in support} == {"unknown (2 of 2)"}
    figure = fig9.plot(rows, meta)
    assert "unknown code" in figure._suptitle.get_text() and "--rerun-stale" in figure._suptitle.get_text()


def test_a_store_made_by_this_code_is_unmarked_and_one_run_by_other_code_is_marked(fig9, tmp_path):
    shipped = grids.PACKAGED_RESULTS_DIR / "task-support" / "cpu" / "study.sqlite"
    with RunStore(shipped, readonly=True) as store:
        runs = store.rows(status="done")
    here = tmp_path / study.default_out("task-support", "cpu")
    here.mkdir(parents=True)
    with RunStore(here / "study.sqlite") as store:  # the same results, as if made by this code
        for i, r in enumerate(runs):
            store.start(r["key"], r["study"], r["scale"], r["config"])
            store.finish(r["key"], r["report"], r["seconds"], version=provenance.code_version(),
                         fingerprint="0" * 64 if i == 0 else provenance.code_fingerprint())
    rows, meta = fig9.compute(quick=False, progress=False)
    assert meta["code"]["task-support"] == dict(other=1, unknown=0, done=12)
    assert fig9._title("x", "task-support", meta).endswith("(cpu scale)\n[1 of 12 runs: other code]")
    codes = sorted(r["code"] for r in rows if r["panel"] == "c")
    assert codes == ["current"] * 5 + ["other (1 of 2)"]
    with RunStore(here / "study.sqlite") as store:  # every run by this code: no mark at all
        store.finish(runs[0]["key"], runs[0]["report"], 1.0, fingerprint=provenance.code_fingerprint())
    rows, meta = fig9.compute(quick=False, progress=False)
    assert fig9._title("x", "task-support", meta) == "x (cpu scale)"
    assert {r["code"] for r in rows if r["study"] == "task-support"} == {"current"}
