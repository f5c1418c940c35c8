"""Figure 9 reads the study stores (the working folder's, else the committed ones) and marks
the panels whose runs were made by other code or by unknown code."""

import pytest

from verify.studies import commands as study
from verify.studies import grids, provenance, staged
from verify.studies.store import RunStore


@pytest.fixture
def fig9(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from paper_figures import fig9_studies

    monkeypatch.chdir(tmp_path)  # no store here: every panel reads the committed cpu store
    return fig9_studies


def test_committed_stores_are_drawn_and_marked_by_the_code_that_made_them(fig9):
    """Each panel's mark says what its committed store holds: how many of the grid's done runs
    other or unknown code made (read here from the store, judged as verify.study judges them)."""
    from verify.studies import behaviour

    rows, meta = fig9.compute(quick=False, progress=False)
    assert set(meta["scales"].values()) == {"cpu"}
    judge = behaviour.Judge("verify.sgd", provenance.code_fingerprint())
    stale_anywhere = False
    for name in fig9.STUDIES:
        # The grid's runs and those its sequential plan asks for (scaling-data, scaling-model).
        folder = grids.PACKAGED_RESULTS_DIR / name / "cpu"
        grid = {r.key for r in staged.planned_runs(name, "cpu", folder)[1]}
        with RunStore(folder / "study.sqlite", readonly=True) as store:
            done = [r for r in store.rows(status="done") if r["key"] in grid]
        codes = [judge(r) for r in done]
        want = dict(done=len(done), unknown=codes.count("unknown"), other=codes.count("other"))
        assert {k: meta["code"][name][k] for k in want} == want, name
        title = fig9._title("x", name, meta)
        stale = want["unknown"] + want["other"]
        stale_anywhere |= bool(stale)
        marked = f"[{stale} of {len(done)} runs:" in title
        assert marked if stale else title == "x (cpu scale)", (name, title)
    support = [r for r in rows if r["panel"] == "c"]
    assert len(support) == 6
    figure = fig9.plot(rows, meta)
    assert ("--rerun-stale" in figure._suptitle.get_text()) == stale_anywhere


def test_a_store_made_by_this_code_is_unmarked_and_one_run_by_other_code_is_marked(fig9, tmp_path):
    shipped = grids.PACKAGED_RESULTS_DIR / "task-support" / "cpu" / "study.sqlite"
    # The runs the study's plan reads (its store also keeps an earlier grid's, at 10,000 steps).
    grid = {r.key for r in staged.planned_runs("task-support", "cpu", shipped.parent)[1]}
    with RunStore(shipped, readonly=True) as store:
        runs = [r for r in store.rows(status="done") if r["key"] in grid]
    here = tmp_path / study.default_out("task-support", "cpu")
    here.mkdir(parents=True)
    with RunStore(here / "study.sqlite") as store:  # the same results, as if made by this code
        for i, r in enumerate(runs):
            store.start(r["key"], r["study"], r["scale"], r["config"])
            store.finish(r["key"], r["report"], r["seconds"], version=provenance.code_version(),
                         fingerprint="0" * 64 if i == 0 else provenance.code_fingerprint())
    rows, meta = fig9.compute(quick=False, progress=False)
    n = len(runs)
    seeds = sum(r["config"]["split"] == runs[0]["config"]["split"] for r in runs)  # runs[0]'s support's
    assert meta["code"]["task-support"] == dict(other=1, unknown=0, done=n)
    assert fig9._title("x", "task-support", meta).endswith(f"(cpu scale)\n[1 of {n} runs: other code]")
    codes = sorted(r["code"] for r in rows if r["panel"] == "c")
    assert codes == ["current"] * 5 + [f"other (1 of {seeds})"]
    with RunStore(here / "study.sqlite") as store:  # every run by this code: no mark at all
        store.finish(runs[0]["key"], runs[0]["report"], 1.0, fingerprint=provenance.code_fingerprint())
    rows, meta = fig9.compute(quick=False, progress=False)
    assert fig9._title("x", "task-support", meta) == "x (cpu scale)"
    assert {r["code"] for r in rows if r["study"] == "task-support"} == {"current"}
