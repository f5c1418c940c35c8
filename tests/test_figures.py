"""python -m paper_figures: every figure is written, and its data files hold what was drawn."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import StepPatch

import paper_figures.__main__ as cli
from paper_figures.common import FigureResult, read_csv, select

TOL = dict(rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The --quick version of every registered figure, made once in-process."""
    out = tmp_path_factory.mktemp("figures")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the CLI does: small tensors, possibly shared cores
    try:
        return out, {e.name: e.make(out, quick=True, seed=0) for e in cli.FIGURES}
    finally:
        torch.set_num_threads(threads)


def artists(fig):
    for ax in fig.axes:
        yield from ax.get_children()


def test_every_figure_is_written_as_png_pdf_and_data(made):
    out, results = made
    assert [e.name for e in cli.FIGURES] == list(results)
    for name, result in results.items():
        paths = {p.suffix: p for p in result.files}
        assert set(paths) == {".png", ".pdf", ".csv", ".json"}, name
        assert all(p.parent == out and p.stem == name and p.stat().st_size > 0 for p in paths.values())
        assert paths[".png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert paths[".pdf"].read_bytes()[:5] == b"%PDF-"
        meta = json.loads(paths[".json"].read_text())
        assert meta["figure"] == name and meta["passed"] and all(meta["checks"].values()), meta["checks"]


def test_every_plotted_line_is_in_the_csv_and_every_csv_series_is_plotted(made):
    out, results = made
    for name, result in results.items():
        rows = read_csv(out / f"{name}.csv")
        drawn = set()
        for artist in artists(result.figure):
            if not isinstance(artist, Line2D):
                continue
            series = artist.get_gid()
            if series is None:
                # Only axhline/axvline guides (spanning the axes, in axes coordinates) go unsaved.
                assert [0, 1] in (list(artist.get_xdata()), list(artist.get_ydata())), name
                continue
            sel = select(rows, series)
            assert sel and len({r["panel"] for r in sel}) == 1, (name, series)
            np.testing.assert_allclose(np.asarray(artist.get_xdata(), float), [r["x"] for r in sel], **TOL)
            np.testing.assert_allclose(np.asarray(artist.get_ydata(), float), [r["y"] for r in sel], **TOL)
            drawn.add(series)
        histograms = {a.get_gid() for a in artists(result.figure) if isinstance(a, StepPatch)}
        assert {r["series"] for r in rows} == drawn | histograms, name


def test_figure_1_plots_the_built_counts_and_the_fitted_slopes(made):
    out, results = made
    result = results["fig1_units_vs_eps"]
    rows = read_csv(out / "fig1_units_vs_eps.csv")
    built = [r for r in rows if r["series"].startswith("built M=")]
    formula = select(rows, "formula")
    point = lambda r: (r["M"], r["seed"], r["eps"])  # noqa: E731
    assert built and {point(r): r["y"] for r in built} == {point(r): r["y"] for r in formula}
    fits = json.loads((out / "fig1_units_vs_eps.json").read_text())["fits"]
    text = "\n".join(t.get_text() for ax in result.figure.axes for t in ax.texts)
    assert fits and all(f"{f['slope']:.4f}" in text for f in fits)


def test_figure_4_heat_map_and_histogram_match_the_saved_data(made):
    out, results = made
    meta = json.loads((out / "fig4_where_error_lives.json").read_text())
    rows = read_csv(out / "fig4_where_error_lives.csv")
    fig = results["fig4_where_error_lives"].figure
    (image,) = [a for a in artists(fig) if isinstance(a, AxesImage)]
    values = np.asarray(meta["slice"]["values"])
    np.testing.assert_allclose(np.asarray(image.get_array()), values, **TOL)
    assert list(image.get_extent()) == [meta["slice"]["x0"][0], meta["slice"]["x0"][-1],
                                        meta["slice"]["x1"][0], meta["slice"]["x1"][-1]]
    assert np.abs(values).max() <= meta["certificate"] + meta["rounding_floor"]
    (hist,) = [a for a in artists(fig) if isinstance(a, StepPatch)]
    data = hist.get_data()
    counts, edges = np.asarray(data.values), np.asarray(data.edges)
    bins = select(rows, "tasks")
    np.testing.assert_allclose(counts, [r["y"] for r in bins], **TOL)
    np.testing.assert_allclose(edges, [r["x"] for r in bins] + [bins[-1]["x_right"]], **TOL)
    np.testing.assert_allclose(counts, meta["task_ratios"]["counts"], **TOL)
    assert counts.sum() == meta["task_ratios"]["n"] == len(meta["task_ratios"]["values"])


def test_main_prints_one_line_per_figure(capsys, tmp_path):
    assert cli.main(["--quick", "--only", "fig2_units_vs_M", "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and out.startswith("fig2_units_vs_M: fig2_units_vs_M.png") and err == ""
    assert (tmp_path / "fig2_units_vs_M.pdf").stat().st_size > 0


def fake(name, calls):
    def make(out, *, quick, seed):
        calls.append((name, quick, seed))
        return FigureResult(name, Figure(), [], {}, files=[out / f"{name}.png"])
    return make


def test_slow_figures_run_only_when_asked(capsys, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "FIGURES", [cli.Entry("fast", fake("fast", calls), slow=False),
                                         cli.Entry("slow", fake("slow", calls), slow=True)])
    for argv, expected in ([[], ["fast"]], [["--slow"], ["fast", "slow"]], [["--only", "slow"], ["slow"]]):
        calls.clear()
        assert cli.main([*argv, "--quick", "--seed", "7", "--out", str(tmp_path)]) == 0
        assert calls == [(n, True, 7) for n in expected]
    capsys.readouterr()


def test_a_failed_check_exits_1(capsys, tmp_path, monkeypatch):
    def failing(out, *, quick, seed):
        return FigureResult("bad", Figure(), [], {}, checks={"measured <= certificate": False})
    monkeypatch.setattr(cli, "FIGURES", [cli.Entry("bad", failing, slow=False)])
    assert cli.main(["--out", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "FAIL measured <= certificate" in out and "contradict" in err


@pytest.mark.parametrize("argv,message", [
    (["--only", "fig9_nope"], "unknown figure"), (["--frobnicate"], "unrecognized"),
    (["--seed", "-1"], "integer ≥ 0"), (["--seed", "x"], "integer ≥ 0"),
    (["--threads", "0"], "positive integer"), (["--only"], "expected at least one"),
])
def test_bad_input_gets_one_line_and_exit_2(capsys, argv, message):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_out_that_is_a_file_exits_2(capsys, tmp_path):
    path = tmp_path / "not_a_folder"
    path.write_text("")
    assert cli.main(["--quick", "--out", str(path)]) == 2
    assert "--out" in capsys.readouterr().err


def test_module_entry_point_exits_2_on_bad_input():
    proc = subprocess.run([sys.executable, "-m", "paper_figures", "--only", "nope"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("paper_figures: error: unknown figure 'nope'")
