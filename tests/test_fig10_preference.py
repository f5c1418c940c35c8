"""Figure 10 draws the preference grid's four studies from their stores: the smoke stores
when no cpu store has results (saying so on every panel), and, from stores of hand-made
reports, exactly the effects table's means, with a row below the convergence threshold
shown as unconverged."""

import json
import statistics

import numpy as np
import pytest

from paper_figures.common import rounded
from verify.learning.families import FAMILIES
from verify.studies import commands as study
from verify.studies import grids, provenance
from verify.studies.effects import effects_table
from verify.studies.store import RunStore

SMOKE = "[SMOKE DATA: 20-step runs, no result]"
TOL = dict(rtol=1e-12, atol=1e-12)


@pytest.fixture
def fig10(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from paper_figures import fig10_preference

    monkeypatch.chdir(tmp_path)  # no store here
    # Nor a committed one (cpu stores may be committed later): every panel reads smoke data.
    monkeypatch.setattr(grids, "PACKAGED_RESULTS_DIR", tmp_path / "nothing-committed")
    return fig10_preference


def lines(figure, panel: str) -> dict:
    """{series: (x, y)} of the lines drawn in a panel (a → the first axes, …)."""
    axis = figure.axes["abcdef".index(panel)]
    return {ln.get_gid(): (np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float))
            for ln in axis.get_lines() if ln.get_gid() is not None}


def test_the_smoke_stores_are_drawn_marked_as_smoke_and_every_series_is_in_the_csv(fig10, tmp_path):
    from paper_figures.common import read_csv, select

    out = tmp_path / "out"
    result = fig10.make(out, quick=False, progress=False)
    assert sorted(p.name for p in result.files) == [f"{fig10.NAME}.{e}" for e in "csv json pdf png".split()]
    assert all(p.parent == out and p.stat().st_size > 0 for p in result.files)
    assert (out / "fig10_preference.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "fig10_preference.pdf").read_bytes()[:5] == b"%PDF-"
    meta = json.loads((out / "fig10_preference.json").read_text())
    assert meta["scales"] == dict.fromkeys(fig10.STUDIES, "smoke") and meta["passed"] and not meta["preview"]
    assert meta["convergence"] == dict(metric="train_acc", threshold=FAMILIES["preference"].convergence[1])
    titles = [axis.get_title() for axis in result.figure.axes]
    assert len(titles) == 6 and all(t.endswith(SMOKE) for t in titles), titles
    rows = read_csv(out / "fig10_preference.csv")
    assert {r["panel"] for r in rows} == set("abcdef")
    drawn = set()
    for panel in "abcdef":
        for series, (x, y) in lines(result.figure, panel).items():
            sel = select(rows, series, panel)
            assert sel, (panel, series)
            np.testing.assert_allclose(x, [r["x"] for r in sel], **TOL)
            np.testing.assert_allclose(y, [r["y"] for r in sel], **TOL)
            drawn.add((panel, series))
    assert {(r["panel"], r["series"]) for r in rows} == drawn
    # (e) and (f) hold every study; (c) says, per kind the paper speaks of, its claim and the measure.
    for panel in "ef":
        assert {r["study"] for r in rows if r["panel"] == panel and r["study"]} == set(fig10.STUDIES)
    claims = {c.treatment: c.paper for c in study.study_plan("task-support-preference").claims}
    said = [r for r in result.rows if r["panel"] == "c" and r["split"] in claims]
    texts = {t.get_text() for t in result.figure.axes[2].texts}
    assert said and all(f"paper: {claims[r['split']]}\nhere: {r['effect_vs_random']}" in texts
                        for r in said)


def hand_made(config: dict, i: int, unconverged: bool) -> dict:
    """A preference report with made-up numbers, distinct for each i."""
    network = "sgd " + ("transformer" if config.get("student") == "transformer" else "custom")
    values = dict(train=dict(acc=0.5 if unconverged else 0.995 + 0.0001 * i, acc_all=0.9, loss=0.1),
                  held_out=dict(acc=0.6 + 0.011 * i, acc_all=0.2 + 0.017 * i, loss=0.3))
    return dict(family="preference", rows=[dict(network=network)],
                metrics=[dict(network=network, side=side, metric=metric, value=v)
                         for side, of_side in values.items() for metric, v in of_side.items()],
                split=dict(n_train=int(100 * (1 - config["held_out"]))), construction_within_certificate=None)


def test_the_plotted_points_are_the_effects_tables_means_and_a_row_below_the_threshold_is_unconverged(fig10):
    expected, i = {}, 0  # study → grid point (its configuration but the seed) → the runs' i
    for name in fig10.STUDIES:
        out = study.default_out(name, "smoke")
        out.mkdir(parents=True)
        runs = study.expand(name, "smoke")[1]
        with RunStore(out / "study.sqlite") as store:
            for run in runs:  # the first task-support run (the first support kind) does not converge
                report = hand_made(run.config, i, unconverged=name == fig10.STUDIES[2] and run is runs[0])
                store.start(run.key, name, "smoke", run.config)
                store.finish(run.key, report, 1.0, version=provenance.code_version(),
                             fingerprint=provenance.code_fingerprint())
                group = json.dumps({k: v for k, v in run.config.items() if k != "seed"}, sort_keys=True)
                expected.setdefault(name, {}).setdefault(group, []).append(i)
                i += 1
    rows, meta = fig10.compute(quick=False, progress=False)  # nothing is trained: every run is stored
    assert meta["scales"] == dict.fromkeys(fig10.STUDIES, "smoke")
    assert meta["code"] == {s: dict(other=0, unknown=0, done=sum(map(len, expected[s].values())))
                            for s in fig10.STUDIES}
    figure = fig10.plot(rows, meta)
    for panel, name in zip("abcd", fig10.STUDIES, strict=True):
        table = effects_table(name, "smoke", study.default_out(name, "smoke"))
        # By hand: each grid point's mean over seeds of the held-out acc_all made up above.
        by_hand = sorted(statistics.mean(0.2 + 0.017 * i for i in runs) for runs in expected[name].values())
        means = sorted(r["held_out_acc_all_mean"] for r in table["rows"])
        np.testing.assert_allclose(means, by_hand, **TOL)
        plotted = sorted(y for _, ys in lines(figure, panel).values() for y in ys)
        np.testing.assert_allclose(plotted, means, **TOL)
        # The picture draws the data file's values: 12 significant digits (common.rounded).
        assert sorted(rounded(r["y"]) for r in rows if r["panel"] == panel) == plotted
        assert sorted(r["sd"] for r in rows if r["panel"] == panel) == sorted(
            r["held_out_acc_all_sd"] for r in table["rows"])
    # (f): per-step acc against acc_all, the table's means, one point per row of every study.
    tables = {s: effects_table(s, "smoke", study.default_out(s, "smoke")) for s in fig10.STUDIES}
    points = sorted((r["x"], r["y"]) for r in rows if r["panel"] == "f" and not r.get("guide"))
    assert points == sorted((r["held_out_acc_mean"], r["held_out_acc_all_mean"])
                            for t in tables.values() for r in t["rows"])
    # (e): the one row made below the threshold is unconverged, below the dotted line and ringed.
    threshold = FAMILIES["preference"].convergence[1]
    trained = [r for r in rows if r["panel"] == "e" and r["series"] != fig10.RING]
    low = [r for r in trained if not r["converged"]]
    assert len(low) == 1 and low[0]["study"] == fig10.STUDIES[2] and low[0]["y"] == 0.5 < threshold
    assert all(r["y"] >= threshold for r in trained if r["converged"])
    assert [r["converged"] for r in tables[fig10.STUDIES[2]]["rows"]].count(False) == 1
    ring_x, ring_y = lines(figure, "e")[fig10.RING]
    assert (list(ring_x), list(ring_y)) == ([rounded(low[0]["x"])], [0.5])
    assert [list(ln.get_ydata()) for ln in figure.axes[4].get_lines() if ln.get_gid() is None] == [
        [threshold, threshold]]


def test_a_panel_of_every_study_names_the_smoke_ones(fig10):
    scales = dict(zip(fig10.STUDIES, ["cpu", "smoke", "cpu", "smoke"], strict=True))
    assert fig10._every_title("(e)", dict(scales=scales)) == (
        "(e)\n[SMOKE DATA: 20-step runs, no result: scaling-model, scaling-law]")
    assert fig10._every_title("(e)", dict(scales=dict.fromkeys(fig10.STUDIES, "cpu"))) == "(e)"
