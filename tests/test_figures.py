"""python -m paper_figures: every figure is written, and its data files hold what was drawn."""

import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import StepPatch

import paper_figures.__main__ as cli
from constructions.catalogue import CONSTRUCTIONS
from paper_figures import common
from paper_figures.common import FigureResult, read_csv, rounded, select

TOL = dict(rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The --quick version of every registered figure, made once in-process."""
    out = tmp_path_factory.mktemp("figures")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the CLI does: small tensors, possibly shared cores
    try:
        return out, {e.name: cli.load(e).make(out, quick=True, seed=0, progress=False) for e in cli.FIGURES}
    finally:
        torch.set_num_threads(threads)


def artists(fig):
    for ax in fig.axes:
        yield from ax.get_children()


def test_every_figure_is_written_as_png_pdf_and_data(made):
    out, results = made
    assert [e.name for e in cli.FIGURES] == list(results)
    for entry in cli.FIGURES:  # the registry names each figure without importing its module
        assert cli.load(entry).NAME == entry.name == results[entry.name].name
    for name, result in results.items():
        paths = {p.suffix: p for p in result.files}
        assert set(paths) == {".png", ".pdf", ".csv", ".json"}, name
        assert all(p.parent == out and p.stem == name and p.stat().st_size > 0 for p in paths.values())
        assert paths[".png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert paths[".pdf"].read_bytes()[:5] == b"%PDF-"
        meta = json.loads(paths[".json"].read_text())
        assert meta["figure"] == name and meta["passed"] and all(meta["checks"].values()), meta["checks"]


def test_every_quick_figure_is_marked_as_a_preview(made):
    out, results = made
    for name, result in results.items():
        assert json.loads((out / f"{name}.json").read_text())["preview"] is True
        marks = [t.get_text() for t in result.figure.texts if "PREVIEW" in t.get_text()]
        assert len(marks) == 1 and "not the paper's figure" in marks[0], name


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
    def make(out, *, quick, seed, progress):
        calls.append((name, quick, seed, progress))
        return FigureResult(name, Figure(), [], {}, files=[out / f"{name}.png"])
    return make


def register(monkeypatch, *figures):
    """Make FIGURES these (name, make, slow) figures, each in a module of its own, as
    main() imports them."""
    entries = []
    for name, make, slow in figures:
        module = types.ModuleType(f"fake_figure_{name}")
        module.NAME, module.make = name, make
        monkeypatch.setitem(sys.modules, module.__name__, module)
        entries.append(cli.Entry(name, module.__name__, slow))
    monkeypatch.setattr(cli, "FIGURES", tuple(entries))


def test_slow_figures_run_only_when_asked(capsys, tmp_path, monkeypatch):
    calls = []
    register(monkeypatch, ("fast", fake("fast", calls), False), ("slow", fake("slow", calls), True))
    for argv, expected in ([[], ["fast"]], [["--slow"], ["fast", "slow"]], [["--only", "slow"], ["slow"]]):
        calls.clear()
        assert cli.main([*argv, "--quick", "--seed", "7", "--out", str(tmp_path)]) == 0
        assert calls == [(n, True, 7, None) for n in expected]  # None: bars only on a terminal
    calls.clear()
    assert cli.main(["--no-progress", "--out", str(tmp_path)]) == 0
    assert calls == [("fast", False, 0, False)]
    capsys.readouterr()


def test_a_failed_check_exits_1(capsys, tmp_path, monkeypatch):
    def failing(out, *, quick, seed, progress):
        return FigureResult("bad", Figure(), [], {}, checks={"measured <= certificate": False})
    register(monkeypatch, ("bad", failing, False))
    assert cli.main(["--out", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "FAIL measured <= certificate" in out and "contradict" in err


def test_ctrl_c_exits_130_with_one_line(capsys, tmp_path, monkeypatch):
    def interrupted(out, *, quick, seed, progress):
        raise KeyboardInterrupt
    register(monkeypatch, ("ctrl_c", interrupted, False))
    assert cli.main(["--out", str(tmp_path)]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["--only", "fig9_nope"], "unknown figure"), (["--frobnicate"], "unrecognized"),
    (["--seed", "-1"], "seed in [0, "), (["--seed", "x"], "seed in [0, "),
    (["--threads", "0"], "positive integer"), (["--only"], "expected at least one"),
    (["--out", "FILE"], "is an existing file"), (["--quick", "--out", "FILE"], "is an existing file"),
])
def test_bad_input_gets_one_line_and_exit_2(capsys, tmp_path, argv, message):
    a_file = tmp_path / "not_a_folder"
    a_file.write_text("")
    assert cli.main([str(a_file) if a == "FILE" else a for a in argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("paper_figures: error: ")
    assert [p.name for p in tmp_path.iterdir()] == ["not_a_folder"]  # refused before any work


def test_help_and_usage_errors_import_no_torch_matplotlib_or_scipy():
    code = (
        "import sys\n"
        "import paper_figures.__main__ as m\n"
        "try:\n"
        "    m.main(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "assert m.main(['--only', 'nope']) == 2\n"
        "print('heavy:', sorted(n for n in ('torch', 'matplotlib', 'scipy') if n in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--no-progress" in proc.stdout and proc.stdout.splitlines()[-1] == "heavy: []"


def test_quick_writes_into_the_preview_folder_never_into_output(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "DEFAULT_OUT", tmp_path / "output")
    monkeypatch.setattr(cli, "PREVIEW_OUT", tmp_path / "preview")
    assert cli.main(["--quick", "--only", "fig2_units_vs_M"]) == 0
    assert not (tmp_path / "output").exists()
    files = [p for p in (tmp_path / "preview").iterdir() if p.is_file()]
    assert sorted(p.name for p in files) == [common.CAPTIONS_FILE, *(f"fig2_units_vs_M.{s}" for s in
                                                                    ("csv", "json", "pdf", "png"))]
    assert (tmp_path / "preview" / common.CACHE_DIR).is_dir()  # the cache goes with the figures
    assert json.loads((tmp_path / "preview" / "fig2_units_vs_M.json").read_text())["preview"] is True
    assert str(tmp_path / "preview") in capsys.readouterr().out
    # Without --quick the committed folder is the default; an explicit --out wins over both.
    assert cli.parse_args([]).out == tmp_path / "output"
    assert cli.parse_args(["--quick", "--out", str(tmp_path / "mine")]).out == tmp_path / "mine"


def test_a_full_size_figure_is_not_marked_as_a_preview(tmp_path):
    fig, axes = common.new_figure()
    axes[0, 0].plot([0, 1], [0, 1])
    common.save(FigureResult("full", fig, [], {}), tmp_path)
    assert json.loads((tmp_path / "full.json").read_text())["preview"] is False
    assert not [t for t in fig.texts if "PREVIEW" in t.get_text()]


def test_a_figure_drawn_twice_is_the_same_bytes(tmp_path, monkeypatch):
    """No creation date or version stamp in the PDF or PNG: a redraw changes a committed file
    only where the picture changed (and a changed picture does change it)."""
    def draw(folder, y):
        fig, axes = common.new_figure()
        axes[0, 0].plot([0, 1], [0, y])
        return common.save(FigureResult("same", fig, [], {}), folder)

    first = draw(tmp_path / "a", 1)
    import time
    monkeypatch.setattr(time, "time", lambda: 2e9)  # another moment: a date, if written, would differ
    second = draw(tmp_path / "b", 1)
    third = draw(tmp_path / "c", 2)
    for a, b, c in zip(first, second, third, strict=True):
        if a.suffix in (".png", ".pdf"):
            assert a.read_bytes() == b.read_bytes(), a.name
            assert a.read_bytes() != c.read_bytes(), a.name
    assert b"CreationDate" not in first[1].read_bytes()


@pytest.mark.parametrize("name", ["fig1_units_vs_eps", "fig2_units_vs_M", "fig4_where_error_lives"])
def test_a_rerun_draws_from_the_cache_byte_identical_and_fresh_or_other_code_recomputes(
        tmp_path, monkeypatch, capsys, name):
    module = cli.load(next(e for e in cli.FIGURES if e.name == name))
    argv = ["--quick", "--only", name, "--out", str(tmp_path), "--no-progress"]
    assert cli.main(argv) == 0
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert len(list((tmp_path / common.CACHE_DIR).glob(f"{name}-*.pickle"))) == 1
    calls = []
    compute = module.compute
    monkeypatch.setattr(module, "compute", lambda *a: calls.append(1) or compute(*a))
    assert cli.main(argv) == 0  # warm: nothing computed, every file the same bytes
    assert calls == [] and {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == first
    assert cli.main([*argv, "--fresh"]) == 0  # recomputed: the same, but for measured times
    assert calls == [1]

    def timeless(data: bytes):
        def drop(v):
            return ({k: drop(x) for k, x in v.items() if k != "seconds"} if isinstance(v, dict) else
                    [drop(x) for x in v] if isinstance(v, list) else v)
        return drop(json.loads(data))
    for path in (p for p in tmp_path.iterdir() if p.is_file()):
        same = (timeless(path.read_bytes()) == timeless(first[path.name]) if path.suffix == ".json"
                else path.read_bytes() == first[path.name])
        assert same, path.name
    from verify.studies import provenance

    monkeypatch.setattr(provenance, "module_fingerprint", lambda root: "0" * 64)  # other code
    assert cli.main(argv) == 0 and calls == [1, 1]
    assert len(list((tmp_path / common.CACHE_DIR).glob(f"{name}-*.pickle"))) == 2
    capsys.readouterr()


def partial_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".partial" in p.name]


@pytest.mark.parametrize("breaks", ["pdf", "csv"])
def test_an_interrupted_save_leaves_no_file_half_written(tmp_path, monkeypatch, breaks):
    """Ctrl-C in the middle of writing the PDF (or the CSV): what was written before is
    whole, the file being written appears under no name, and nothing after it is written."""
    savefig, write_csv = Figure.savefig, common.write_csv

    def half_then_interrupt(path):
        Path(path).write_bytes(b"%PDF-1.4 half of a file")
        raise KeyboardInterrupt

    def breaking_savefig(self, fname, **kw):
        if Path(fname).suffix == ".pdf" and breaks == "pdf":
            half_then_interrupt(fname)
        return savefig(self, fname, **kw)

    def breaking_write_csv(path, rows):
        if breaks == "csv":
            half_then_interrupt(path)
        return write_csv(path, rows)

    monkeypatch.setattr(Figure, "savefig", breaking_savefig)
    monkeypatch.setattr(common, "write_csv", breaking_write_csv)
    fig, axes = common.new_figure()
    rows = [dict(panel="a", series="line", x=0.0, y=1.0), dict(panel="a", series="line", x=1.0, y=2.0)]
    common.plot_series(axes[0, 0], rows, "line", "a")
    with pytest.raises(KeyboardInterrupt):
        common.save(FigureResult("fig", fig, rows, {}, preview=True), tmp_path)
    written = {"pdf": ["fig.png"], "csv": ["fig.pdf", "fig.png"]}[breaks]
    assert sorted(p.name for p in tmp_path.iterdir()) == written
    assert partial_files(tmp_path) == []
    assert (tmp_path / "fig.png").read_bytes().endswith(b"IEND\xaeB`\x82")
    if breaks == "csv":
        assert (tmp_path / "fig.pdf").read_bytes().rstrip().endswith(b"%%EOF")


def test_a_closed_pipe_ends_quietly_and_every_figure_is_written(tmp_path):
    """As `| head -1`: the reader leaves after the first line. The figures after it are
    still drawn and written, with no traceback, and the exit code is still 0."""
    names = ["fig2_units_vs_M", "fig4_where_error_lives", "fig8_constructions_vs_eps"]  # cheap, run order
    argv = [sys.executable, "-m", "paper_figures", "--quick", "--only", *names, "--out", str(tmp_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()  # the next line (the second figure's) meets a closed pipe
    _, stderr = proc.communicate(timeout=300)
    assert first.startswith("fig2_units_vs_M: ")
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr
    for name in names:
        assert json.loads((tmp_path / f"{name}.json").read_text())["passed"], name
        assert (tmp_path / f"{name}.pdf").read_bytes().rstrip().endswith(b"%%EOF"), name


def test_module_entry_point_exits_2_on_bad_input():
    proc = subprocess.run([sys.executable, "-m", "paper_figures", "--only", "nope"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("paper_figures: error: unknown figure 'nope'")


# --- the SGD figures (5–7): slow, run here in their --quick versions by `made` ---

SGD_FIGURES = ["fig5_sgd_error_vs_size", "fig6_sgd_r2_vs_tasks", "fig7_probe_vs_r2"]


def test_sgd_figures_are_slow_left_out_by_default_and_run_with_slow(tmp_path):
    assert {e.name for e in cli.FIGURES if e.slow} == set(SGD_FIGURES)
    names = lambda argv: [e.name for e in cli.parse_args([*argv, "--out", str(tmp_path)]).figures]  # noqa: E731
    assert not set(SGD_FIGURES) & set(names([])) and names([]) == [e.name for e in cli.FIGURES if not e.slow]
    assert names(["--slow"]) == [e.name for e in cli.FIGURES]
    assert names(["--only", *SGD_FIGURES[::-1]]) == SGD_FIGURES  # registry order: 7 reuses 5's and 6's runs


def test_sgd_runs_are_trained_once_and_shared(monkeypatch):
    """Figures 5 and 6 ask for one run in common (the quick plan's split at its ε); each
    distinct verify.sgd call runs once, with the plan's arguments."""
    import verify.learning.sgd_program
    from paper_figures import sgd_data

    calls = []
    monkeypatch.setattr(verify.learning.sgd_program, "run",
                        lambda run: calls.append(run.settings() | {"no_progress": run.runtime.no_progress})
                        or dict(rows=[]))
    sgd_data.clear_cache()
    try:
        p = sgd_data.plan(quick=True, seed=5)
        reports = sgd_data.all_reports(p, progress=False)
        sgd_data.size_reports(p), sgd_data.task_reports(p)  # bars or not, the cached runs serve
    finally:
        sgd_data.clear_cache()  # the fakes must not reach the figures
    runs = {(e, p.size_held_out) for e in p.size_eps} | {(p.tasks_eps, f) for f in p.held_out}
    assert len(calls) == len(reports) == len(runs) < len(p.size_eps) + len(p.held_out)
    assert {(c["eps"], c["held_out"]) for c in calls} == runs
    assert all(c["seed"] == 5 and c["no_progress"] and c["steps"] == p.steps and c["split"] == "random"
               and c["shapes"] == list(p.shapes) and (c["lr"], c["weight_decay"]) == (3e-4, 3e-3)
               for c in calls)
    shared = [r for r in reports if r["figures"] == ["fig5", "fig6"]]
    assert [(r["eps"], r["held_out"]) for r in shared] == [(p.tasks_eps, p.size_held_out)]


def test_figure_5_plots_the_runs_at_equal_size_and_the_certificate(made):
    out, results = made
    meta = json.loads((out / "fig5_sgd_error_vs_size.json").read_text())
    rows = read_csv(out / "fig5_sgd_error_vs_size.csv")
    runs = {run["rows"][0]["hidden_units"]: run for run in meta["runs"]}
    assert len(runs) == len(meta["plan"]["size_eps"]) >= 2
    for r in rows:
        run = runs[r["x"]]  # every point sits at its run's size, shared by construction and SGD
        if r["series"] == "certificate":
            assert r["y"] == run["rows"][0]["certificate"]
            continue
        (net,) = [x for x in run["rows"] if x["network"].startswith(r["network"])]
        assert net["hidden_units"] == r["x"]
        assert r["y"] == net[f"{r['side']}_{'sup' if r['panel'] == 'a' else 'rmse'}"]
    for run in runs.values():
        c = run["rows"][0]
        assert max(c["train_sup"], c["held_out_sup"]) <= c["certificate"]
    text = "\n".join(t.get_text() for ax in results["fig5_sgd_error_vs_size"].figure.axes for t in ax.texts)
    assert all(f"{r['held_out_sup']:.0f}×" in text for r in meta["sgd_over_construction"])


def test_figure_6_plots_r2_against_the_number_of_training_tasks(made):
    out, _ = made
    meta = json.loads((out / "fig6_sgd_r2_vs_tasks.json").read_text())
    rows = read_csv(out / "fig6_sgd_r2_vs_tasks.csv")
    n_train = [run["split"]["n_train"] for run in meta["runs"]]
    assert n_train == sorted(n_train) and len(set(n_train)) == len(meta["plan"]["held_out"]) >= 2
    by_n = {run["split"]["n_train"]: run for run in meta["runs"]}
    for r in rows:
        (net,) = [x for x in by_n[r["x"]]["rows"] if x["network"].startswith(r["network"])]
        r2 = net[f"{r['side']}_r2"]
        # Both files hold floats at 12 significant digits (paper_figures.common.rounded): the
        # R² itself is the same rounded value; 1 − R² is rounded from the unrounded R², so it
        # sits within two such roundings (5e-12 of |R²| and of the result each) of 1 − rounded R².
        if r["panel"] == "a":
            assert r["y"] == r2
        else:
            two_roundings = 5e-12 * (abs(r2) + 2 * abs(1.0 - r2))
            assert r["y"] == pytest.approx(1.0 - r2, rel=0, abs=two_roundings)
    for shape in meta["plan"]["shapes"]:
        held = select(rows, f"R2 sgd {shape} held_out", "a")
        assert [r["x"] for r in held] == n_train


def test_figure_7_points_are_last_hidden_layers_and_r_is_pearson(made):
    out, results = made
    meta = json.loads((out / "fig7_probe_vs_r2.json").read_text())
    rows = read_csv(out / "fig7_probe_vs_r2.csv")
    sgd = [r for r in rows if r["series"] != "construction"]
    n_runs = len({tuple(run["argv"]) for run in meta["runs"]})
    assert len(sgd) + meta["dropped_sgd_points"] == n_runs * len(meta["plan"]["shapes"])
    for r in rows:
        layers = [float(v) for v in str(r["probe_r2_layers"]).split()]
        # x is a data file's float (12 significant digits: common.rounded); the layers' text is not.
        assert r["x"] == rounded(layers[-1]) and int(r["layer"]) == len(layers)
    x, y = np.array([p["x"] for p in sgd]), np.array([p["y"] for p in sgd])
    r = np.corrcoef(x, y)[0, 1]
    # The files hold 12 significant digits (common.rounded: 5e-12 relative each). r is the cosine
    # of the centred x and y, so moving a vector v by Δ turns it by at most ‖Δ‖/‖v‖ (doubled for
    # safety); the stored r is rounded once more.
    turn = sum(5e-12 * np.linalg.norm(v) / np.linalg.norm(v - v.mean()) for v in (x, y))
    assert len(sgd) >= 3 and meta["correlation"]["all"]["pearson_r"] == pytest.approx(
        r, rel=0, abs=2 * turn + 5e-12 * abs(r))
    text = "\n".join(t.get_text() for ax in results["fig7_probe_vs_r2"].figure.axes for t in ax.texts)
    assert ["all", f"n={len(sgd)}", "r", "=", f"{r:+.3f}"] in [line.split() for line in text.splitlines()]


def test_figure_8_counts_every_construction_and_exact_is_flat_in_eps(made):
    out, results = made
    rows = read_csv(out / "fig8_constructions_vs_eps.csv")
    units = {n: [r for r in select(rows, n, "a")] for n in CONSTRUCTIONS}  # every registered one
    assert all(sel and all(r["y"] == r["formula"] and r["within"] for r in sel) for sel in units.values())
    assert len({r["y"] for r in units["exact"]}) == 1 and all(r["measured"] <= 1e-12 for r in units["exact"])
    for name in ("shallow", "deep", "optimal"):  # a smaller ε never costs fewer units
        ys = [r["y"] for r in sorted(units[name], key=lambda r: -r["x"])]
        assert ys == sorted(ys) and ys[0] < ys[-1], name
        assert all(r["measured"] <= r["certificate"] <= r["x"] for r in units[name]), name
    depth = [r["y"] for r in sorted(select(rows, "deep depth", "b"), key=lambda r: -r["x"])]
    assert depth == sorted(depth) and depth[0] < depth[-1]
    assert all(o["y"] <= s["y"] for o, s in zip(units["optimal"], units["shallow"], strict=True))


def test_figure_8_log_rate_check_accepts_deep_counts_and_rejects_a_sqrt_law():
    from paper_figures.fig8_constructions_vs_eps import units_per_decade
    from theory import deep

    I = H = 16
    eps = [10.0**-k for k in range(1, 9)]
    C, a = 1.3, 5.8
    levels = {e: deep.levels_for_eps(I, C, a, e) for e in eps}
    depth = {e: m + 1 for e, m in levels.items()}
    per_level = 4 * I * H + H
    rate, ok = units_per_decade({e: deep.count(I, H, m) for e, m in levels.items()}, depth, per_level)
    assert ok and rate > 0
    sqrt_law = {e: round(per_level * (1 / e) ** 0.5) for e in eps}  # shallow-like growth
    assert not units_per_decade(sqrt_law, depth, per_level)[1]
    half_rate = {e: deep.count(I, H, max(1, m // 2)) for e, m in levels.items()}
    assert not units_per_decade(half_rate, depth, per_level)[1]
