"""Figures as a reader sees them (issue 44, part 9): every committed figure, drawn again from its
committed data files, has no legend or text box over its plotted data or over another text, and
every figure carries its caption (its PDF's Subject, and captions.md beside the figures)."""

import shutil
from pathlib import Path

import pytest
from matplotlib.backends.backend_pdf import pdfRepr

import paper_figures.__main__ as cli
from paper_figures import common, layout

COMMITTED = Path(__file__).resolve().parents[1] / "paper_figures" / "output"
# Known clutter, left for a later change: figure 7's numbers beside its points (training tasks)
# pile up where runs land on one spot (the construction's five stars at R² = 1, the balanced
# networks at probe ≈ 0.98). strict: the test fails once they no longer clash, to be removed.
KNOWN: dict[str, str] = {}


def redrawn(name: str):
    entry = next(e for e in cli.FIGURES if e.name == name)
    return cli.load(entry).redraw(*common.load_data(COMMITTED, name))


def _marks(name: str) -> list:
    return [pytest.mark.xfail(reason=KNOWN[name], strict=True)] if name in KNOWN else []


@pytest.mark.parametrize("name", [pytest.param(e.name, marks=_marks(e.name)) for e in cli.FIGURES])
def test_no_legend_or_text_overlaps_data_or_another_text(name):
    assert [str(c) for c in layout.clashes(redrawn(name))] == []


def test_a_redrawn_figure_is_the_committed_picture_drawn_from_the_committed_data(tmp_path):
    """redraw reads back what make wrote: the data files give the figure's rows and meta exactly."""
    rows = [dict(panel="a", series="s", x=3, y=0.1 + 0.2, sd=None, ok=True, note="M=3"),
            dict(panel="a", series="t", x=2.5, y=-1e-300, sd=0.25, ok=False, note="")]
    common.write_csv(tmp_path / "f.csv", rows)
    (tmp_path / "f.json").write_text('{"figure": "f", "checks": {}}\n')
    back, meta = common.load_data(tmp_path, "f")
    # Floats come back at the files' precision (12 significant digits): 0.1 + 0.2 as 0.3.
    assert back[0] == rows[0] | dict(y=0.3) and back[1] == rows[1] | dict(note=None)
    assert type(back[0]["x"]) is int and type(back[1]["x"]) is float and meta["figure"] == "f"


# ------------------------------------------------------------------ the checker catches bad placements


def _line_figure():
    fig, axes = common.new_figure(1, 1, figsize=(5.0, 4.0))
    ax = axes[0, 0]
    common.plot_series(ax, [dict(panel="a", series="s", x=x, y=x) for x in range(11)], "s", "a",
                       marker="o", label="the data")
    ax.set(title="a title", xlabel="x", ylabel="y")
    return fig, ax


def test_the_checker_passes_a_clean_figure():
    fig, ax = _line_figure()
    ax.legend(loc="upper left")  # the line runs from lower left to upper right
    assert layout.clashes(fig) == []


def test_the_checker_catches_a_legend_over_the_data():
    fig, ax = _line_figure()
    ax.legend(loc="center")  # the diagonal runs through the middle
    assert [str(c) for c in layout.clashes(fig)] == [
        "legend of 'a title' overlaps the plotted data of 'a title'"]


def test_the_checker_catches_a_legend_over_a_line_between_its_points():
    fig, axes = common.new_figure(1, 1, figsize=(5.0, 4.0))
    ax = axes[0, 0]
    common.plot_series(ax, [dict(panel="a", series="s", x=x, y=0.5) for x in (0, 1)], "s", "a", label="s")
    ax.set(ylim=(0, 1), title="two points")
    ax.legend(loc="center")  # no point under it, only the segment between them
    assert any("plotted data" in str(c) for c in layout.clashes(fig))


def test_the_checker_catches_an_annotation_run_into_the_title():
    fig, ax = _line_figure()
    ax.legend(loc="upper left")
    ax.annotate("a note\non two lines", (5, 10), xytext=(0, 8), textcoords="offset points", ha="center",
                va="bottom")  # from just under the axes' top edge up into the title
    clashes = [str(c) for c in layout.clashes(fig)]
    assert "text 'a note on two lines' in 'a title' overlaps title 'a title'" in clashes


def test_the_checker_catches_two_texts_on_one_spot_and_a_text_box_on_the_data():
    fig, ax = _line_figure()
    ax.text(0.5, 0.5, "one box", transform=ax.transAxes, bbox=dict(fc="white"))
    ax.text(0.52, 0.5, "another", transform=ax.transAxes)
    clashes = [str(c) for c in layout.clashes(fig)]
    assert "text 'one box' in 'a title' overlaps text 'another' in 'a title'" in clashes
    assert "text 'one box' in 'a title' overlaps the plotted data of 'a title'" in clashes


def test_a_point_label_may_touch_its_own_point_but_not_another():
    fig, ax = _line_figure()
    ax.legend(loc="upper left")
    ax.annotate("5", (5, 5), xytext=(4, -4), textcoords="offset points", fontsize=7, va="top")  # off the line
    assert layout.clashes(fig) == []
    ax.annotate("far", (5, 5), xytext=(7, 7), textcoords="data", fontsize=7, ha="center", va="center")
    assert [str(c) for c in layout.clashes(fig)] == [
        "text 'far' in 'a title' overlaps the plotted data of 'a title'"]


def test_the_checker_catches_figure_9s_old_legend_over_the_fewshot_line():
    """The placement issue 44 found in 9(b), on the committed data: the legend in the lower left."""
    fig = redrawn("fig9_studies")
    bx = next(a for a in fig.axes if a.get_title().startswith("(b)"))
    bx.legend(fontsize=7.5, loc="lower left")
    where = "'(b) scaling-model (cpu scale)'"
    assert [str(c) for c in layout.clashes(fig)] == [f"legend of {where} overlaps the plotted data of {where}"
                                                     ]


def test_figure_9b_has_a_tick_at_every_measured_width():
    fig = redrawn("fig9_studies")
    layout.clashes(fig)  # draws it
    bx = next(a for a in fig.axes if a.get_title().startswith("(b)"))
    labels = [t.get_text() for t in bx.get_xticklabels()]
    assert {"128", "256"} <= set(labels)


def test_figure_13_has_at_most_two_panels_a_row():
    fig = redrawn("fig13_kernel")
    shown = [a for a in fig.axes if a.axison]
    assert len(shown) == 6  # 3 encodings, the NTK's movement, the limit along tasks, the α axis
    assert max(sum(1 for b in shown if abs(b.get_position().y0 - a.get_position().y0) < 1e-6)
               for a in shown) == 2
    assert fig.get_size_inches()[0] <= 11.0


# ------------------------------------------------------------------ captions


def test_every_figure_has_a_caption_in_its_pdf_and_in_captions_md():
    captions = [(e.name, cli.load(e).CAPTION) for e in cli.FIGURES]
    for name, caption in captions:
        assert len(caption) > 80 and caption == caption.strip(), name
        pdf = (COMMITTED / f"{name}.pdf").read_bytes()
        assert b"/Subject " + pdfRepr(caption) in pdf, f"{name}.pdf does not carry its CAPTION: redraw it"
    assert (COMMITTED / common.CAPTIONS_FILE).read_text() == common.captions_text(captions), (
        "captions.md is not the modules' CAPTIONs: python -m paper_figures --redraw --only NAME rewrites it")


def test_redraw_writes_the_picture_with_its_caption_and_captions_md(tmp_path, capsys):
    for suffix in (".csv", ".json"):
        shutil.copy(COMMITTED / f"fig2_units_vs_M{suffix}", tmp_path)
    assert cli.main(["--redraw", "--only", "fig2_units_vs_M", "--out", str(tmp_path), "--no-progress"]) == 0
    from paper_figures import fig2_units_vs_M

    assert b"/Subject " + pdfRepr(fig2_units_vs_M.CAPTION) in (tmp_path / "fig2_units_vs_M.pdf").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["captions.md", *(f"fig2_units_vs_M.{s}" for s in
                                                                           ("csv", "json", "pdf", "png"))]
    assert capsys.readouterr().out.count("\n") == 1  # one line a figure


def test_redraw_without_data_files_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["--redraw", "--only", "fig9_studies", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no data files for fig9_studies" in err and list(tmp_path.iterdir()) == []
