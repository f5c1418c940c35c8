"""What every figure script shares: the headless backend, the result record, and one way
of writing a figure's files, so that PNG, PDF and data always sit side by side.

Data layout: `<stem>.csv` holds every plotted point of every line, marker set and
histogram, one row per point (tidy), with `panel` and `series` columns naming where it
was drawn; `<stem>.json` holds what is not a point: the configuration, slope fits,
checks, and arrays such as a heat map's grid. A plotted artist carries its series name
as its matplotlib `gid`, which is how tests match the picture to the data file.

Every file is written under a temporary name and renamed when complete, so an
interrupted run (Ctrl-C) leaves no truncated file under a figure's name.

Precision: every float in a data file (CSV and JSON alike) is written rounded to
SIGNIFICANT_DIGITS = 12 significant digits (`rounded`: the shortest repr of the float nearest
to its `%.12g` form), so that regenerating the data on another machine, whose BLAS or libm
differ in the last bits, changes no committed byte where the values agree to well within
1e-12 (a rounding moves a value by at most 5e-12 relative; a pair that straddles a rounding
boundary of the 12th digit still differs there, about a fraction δ/1e-12 of the values that
agree to δ relative). Integers are written exactly. plot_series draws the values as written
(`as_written`), so the picture is its data file's and a --redraw draws the same figure.

A figure's expensive rows (the sweeps that build and count every network) are cached in the
output folder (`cached`: `<out>/.cache/`), keyed by the figure's configuration and the
fingerprint of the code that computes them (verify.studies.provenance.module_fingerprint):
a rerun with the same code draws from the cache, any edit to that code recomputes, and
`python -m paper_figures --fresh` recomputes regardless.
"""

from __future__ import annotations

import contextvars
import csv
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np

# Headless on every machine (CI, the device boxes): choose the backend before anything
# imports pyplot. The scripts themselves build `Figure` objects directly, which keeps no
# global figure registry and so needs no plt.close().
matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from verify import cli  # noqa: E402

PNG_DPI = 150
# Files without a date or a version stamp (matplotlib writes both by default; None drops one).
PDF_METADATA = {"CreationDate": None, "Producer": None, "Creator": None}
PNG_METADATA = {"Software": None}
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
MARKERS = ("o", "s", "^", "D", "v", "P")
# Drawn across every --quick figure: its sizes are too small to show the paper's trends,
# and a preview must not pass for the real figure once it is copied out of its folder.
PREVIEW_TEXT = "PREVIEW (--quick): tiny sizes, not the paper's figure"
PREVIEW_GID = "preview"


@dataclass
class FigureResult:
    name: str  # the file stem
    figure: Figure
    rows: list[dict]  # plotted points, written as <name>.csv
    meta: dict  # everything else, written as <name>.json
    checks: dict[str, bool] = field(default_factory=dict)  # theory claims the data must meet
    files: list[Path] = field(default_factory=list)
    preview: bool = False  # a --quick figure: marked as such on the picture and in the JSON
    caption: str = ""  # what the figure shows, in words: the PDF's Subject and captions.md

    @property
    def passed(self) -> bool:
        return all(self.checks.values())


def new_figure(nrows: int = 1, ncols: int = 1, figsize=(7.0, 5.0), **subplot_kw):
    """A Figure with a grid of axes, laid out by the constrained layout engine (which keeps
    colour bars, legends and labels from overlapping)."""
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)
    return fig, axes


def select(rows: Iterable[dict], series: str, panel: str | None = None) -> list[dict]:
    return [r for r in rows if r["series"] == series and (panel is None or r["panel"] == panel)]


def plot_series(ax, rows: list[dict], series: str, panel: str, **style):
    """Draw one series exactly as its rows say, in row order, tagged with its name: at the
    data files' precision (`as_written`), so the picture is the CSV's, and a redraw from the
    files draws the same figure."""
    sel = select(rows, series, panel)
    if not sel:
        raise ValueError(f"no rows for series {series!r} in panel {panel!r}")
    (line,) = ax.plot([as_written(r["x"]) for r in sel], [as_written(r["y"]) for r in sel], **style)
    line.set_gid(series)
    return line



def plain_ticks(axis, xs) -> None:
    """Log axes labelled in plain numbers: x at the given values, y at matplotlib's decades."""
    xs = sorted(set(xs))
    if xs:
        axis.set_xticks(xs, [f"{x:g}" for x in xs])
    axis.xaxis.set_minor_formatter(NullFormatter())
    if axis.get_yscale() == "log":
        axis.yaxis.set_major_formatter(ScalarFormatter())
        axis.yaxis.set_minor_formatter(NullFormatter())


CACHE_DIR = ".cache"
# Set by `python -m paper_figures --fresh`: every cached computation runs again.
FRESH: contextvars.ContextVar[bool] = contextvars.ContextVar("fresh", default=False)
# Set by `python -m paper_figures --studies DIR`: the studies figures read DIR/STUDY/SCALE.
STUDIES_ROOT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("studies_root", default=None)


def cached(out: Path, name: str, config, code: str, compute: Callable[[], object]):
    """compute()'s result, from `out`/.cache when an earlier run stored it for this `config`
    (keyed by its repr: a frozen dataclass of the figure's settings) and the same code (the
    fingerprint of module `code` and everything it imports), else computed and stored
    (atomically). FRESH recomputes. Stored with pickle, which gives back exactly what was
    computed (dataclasses, tuples, numpy values); the file is this program's own, in the
    user's output folder."""
    import pickle

    from verify.studies.provenance import module_fingerprint

    fingerprint = module_fingerprint(code)
    key = hashlib.sha256(json.dumps([name, repr(config), fingerprint]).encode()).hexdigest()[:24]
    path = Path(out) / CACHE_DIR / f"{name}-{key}.pickle"
    if not FRESH.get() and path.is_file():
        return pickle.loads(path.read_bytes())["value"]
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with cli.atomic_path(path) as tmp:
        Path(tmp).write_bytes(pickle.dumps(dict(name=name, code=code, fingerprint=fingerprint, value=value),
                                           protocol=pickle.HIGHEST_PROTOCOL))
    return value


SIGNIFICANT_DIGITS = 12  # every float of a data file, rounded (see the module's docstring)


def rounded(x: float) -> float:
    """x rounded to SIGNIFICANT_DIGITS significant digits: the float nearest to its `%.12g`
    form, whose repr (Python's shortest round-trip form) has at most 12 significant digits."""
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def as_written(value):
    """A plotted value as the data files hold it: a finite float `rounded`, anything else as is."""
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        return rounded(float(value))
    return value


def to_plain(value):
    """Dataclasses, numpy scalars and arrays to JSON-able Python values; non-finite floats to
    None, finite ones `rounded` to SIGNIFICANT_DIGITS (the data files' stated precision)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_plain(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return rounded(float(value)) if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def write_csv(path: Path, rows: list[dict]) -> None:
    # Union of keys in order of first appearance: series differ in their extra columns.
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        # Floats at the stated precision (to_plain: `rounded`, whose repr reads back exactly),
        # so the CSV holds the plotted values to 12 significant digits.
        writer.writerows({k: to_plain(v) for k, v in r.items()} for r in rows)


def read_csv(path: Path) -> list[dict]:
    """Rows back with numbers as floats (empty cells stay empty strings)."""
    def parse(text: str):
        try:
            return float(text)
        except ValueError:
            return text

    with open(path, newline="") as f:
        return [{k: (parse(v) if v != "" else v) for k, v in r.items()} for r in csv.DictReader(f)]


def _cell(text: str):
    """One CSV cell back as write_csv had it: an int, a float (as written: `rounded`), a bool,
    None (an empty cell) or a string."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_data(out: Path, name: str) -> tuple[list[dict], dict]:
    """A figure's rows and meta back from its data files in `out` (<name>.csv, <name>.json),
    as its `make` held them when it drew the figure (but that every row has every column,
    None where the row had none, and floats are at the files' precision, `rounded`): what
    `redraw` draws from."""
    out = Path(out)
    rows = []
    csv_path = out / f"{name}.csv"
    if csv_path.is_file():
        with open(csv_path, newline="") as f:
            rows = [{k: _cell(v) for k, v in r.items()} for r in csv.DictReader(f)]
    meta = json.loads((out / f"{name}.json").read_text())
    return rows, meta


def config_of(meta: dict, key: str, quick, default):
    """The configuration (`quick` for a preview's data, else `default`) that figure data's
    meta[key] records, its seed as recorded: a figure redrawn from its files is drawn as it
    was made. ValueError when the data were made under another configuration."""
    cfg = quick if meta.get("preview") else default
    said = meta.get(key) or {}
    fields = {f.name for f in dataclasses.fields(cfg)}
    if "seed" in said and "seed" in fields:
        cfg = dataclasses.replace(cfg, seed=said["seed"])
    if "seeds" in said and "seeds" in fields and said["seeds"]:
        cfg = dataclasses.replace(cfg, seeds=tuple(said["seeds"][0] + s - cfg.seeds[0] for s in cfg.seeds))
    if to_plain(cfg) != said:
        raise ValueError(f"the data's {key} is not this module's configuration: redraw it with `make`")
    return cfg


def mark_preview(figure: Figure) -> None:
    """Write PREVIEW_TEXT across the figure, once, above everything drawn."""
    if any(t.get_gid() == PREVIEW_GID for t in figure.texts):
        return
    width, height = figure.get_size_inches()
    # Scaled with the figure, so it spans a 7×5 and a 12×5 figure alike without leaving it.
    figure.text(0.5, 0.5, PREVIEW_TEXT.replace(": ", ":\n", 1), gid=PREVIEW_GID, ha="center", va="center",
                rotation=25, fontsize=3.0 * math.sqrt(width * height), fontweight="bold", color="tab:red",
                alpha=0.35, zorder=1000, linespacing=1.6)


def pdf_metadata(name: str, caption: str) -> dict:
    """The PDF's document information: the figure's name as its Title and its caption as its
    Subject, and no date or version stamp (PDF_METADATA)."""
    return PDF_METADATA | dict(Title=name) | (dict(Subject=caption) if caption else {})


def save_picture(result: FigureResult, out: Path) -> list[Path]:
    """The figure's PNG and PDF (see `save`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if result.preview:
        mark_preview(result.figure)
    stem = out / result.name
    files = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    # The temporary names end in .partial.png and so on; `format=` says what to write anyway.
    # No creation date in either file: the same figure drawn twice is the same bytes, so a
    # redraw changes a committed file only where its picture changed.
    with cli.atomic_path(files[0]) as tmp:
        result.figure.savefig(tmp, format="png", dpi=PNG_DPI, metadata=PNG_METADATA)
    with cli.atomic_path(files[1]) as tmp:
        result.figure.savefig(tmp, format="pdf", metadata=pdf_metadata(result.name, result.caption))
    return files


def save(result: FigureResult, out: Path) -> list[Path]:
    """PNG, PDF, CSV (if there are rows) and JSON, all named after the figure. Each goes
    through a temporary file renamed when complete; the JSON comes last, so a figure
    whose JSON is there has all its files."""
    files = save_picture(result, out)
    stem = Path(out) / result.name
    if result.rows:
        files.append(stem.with_suffix(".csv"))
        with cli.atomic_path(files[-1]) as tmp:
            write_csv(tmp, result.rows)
    files.append(stem.with_suffix(".json"))
    payload = dict(figure=result.name, preview=result.preview, checks=result.checks,
                   passed=result.passed) | result.meta
    cli.write_text_atomic(files[-1], json.dumps(to_plain(payload), indent=1, allow_nan=False) + "\n")
    result.files = files
    return files


def finish(name: str, figure: Figure, rows: list[dict], meta: dict, out: Path, *,
           preview: bool = False, caption: str = "") -> FigureResult:
    """A figure's record, its checks taken out of `meta`, written to `out` (see `save`);
    `preview` for a --quick figure; `caption` its module's CAPTION."""
    result = FigureResult(name, figure, rows, meta, checks=meta.pop("checks"), preview=preview,
                          caption=caption)
    save(result, out)
    return result


def log_grid(lo: float, hi: float, n: int = 60) -> np.ndarray:
    return np.geomspace(lo, hi, n)


def redraw(module, out: Path) -> FigureResult:
    """Figure `module`'s figure drawn again from its data files in `out` (load_data and the
    module's `redraw`), computing nothing: its PNG and PDF are written, with its CAPTION."""
    rows, meta = load_data(out, module.NAME)
    result = FigureResult(module.NAME, module.redraw(rows, meta), rows, meta, checks=meta["checks"],
                          preview=bool(meta.get("preview")), caption=module.CAPTION)
    result.files = save_picture(result, out)
    return result


CAPTIONS_FILE = "captions.md"


def captions_text(captions: list[tuple[str, str]]) -> str:
    """captions.md: one section per figure, its picture and its caption."""
    parts = ["# Figure captions", "",
             "Written by `python -m paper_figures` from each figure module's `CAPTION` (also each PDF's "
             "Subject); edit the module, not this file.", ""]
    for name, caption in captions:
        parts += [f"## {name}", "", f"![{name}]({name}.png)", "", caption, ""]
    return "\n".join(parts)


def write_captions(out: Path, captions: list[tuple[str, str]]) -> Path:
    path = Path(out) / CAPTIONS_FILE
    cli.write_text_atomic(path, captions_text(captions))
    return path
