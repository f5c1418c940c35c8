"""Does a drawn figure read? Where its legends and texts overlap its plotted data or each other,
found from the renderer's own bounding boxes (tests/test_figure_layout.py draws every figure
from its committed data files and holds each to no clash).

What is checked, in display coordinates after a full draw:
- every legend (its frame) and every text box (texts, annotations, titles, the suptitle,
  axis labels and tick labels; a text with a bbox patch by that patch) against every other:
  two that intersect are a clash;
- every legend and every text drawn inside an axes, against that axes' plotted data: the
  points of every line and marker set tagged with its series name (the `gid` that
  common.plot_series gives each plotted series), each point with its marker's radius, and
  the segments between the points of a drawn line. A point or segment outside the axes'
  view is not drawn and is not checked. Reference lines (axhline, grid) carry no series
  name and are not data. A point's label (an annotation of a data point) may touch its own
  marker, not another's nor a line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

from paper_figures.common import PREVIEW_GID


@dataclass(frozen=True)
class Box:
    what: str  # e.g. "legend of (b) scaling-model", "text 'paper: hurts…' in (c) …"
    bbox: Bbox
    axes: object | None  # the axes it is drawn in, when inside one (legends, texts, annotations)
    tick: bool = False  # a tick label: checked against other texts, not against data
    anchor: tuple[float, float] | None = None  # a point label's point (display), which it may touch


@dataclass(frozen=True)
class Clash:
    first: str
    second: str

    def __str__(self) -> str:
        return f"{self.first} overlaps {self.second}"


def _name(axes) -> str:
    title = axes.get_title() or axes.get_title(loc="left") or axes.get_ylabel() or "untitled axes"
    return repr(title.split("\n")[0][:50])


def _short(text: str) -> str:
    text = text.replace("\n", " ")
    return repr(text if len(text) <= 40 else text[:39] + "…")


def _extent(text: Text, renderer) -> Bbox:
    patch = text.get_bbox_patch()
    return patch.get_window_extent(renderer) if patch is not None else text.get_window_extent(renderer)


def _shown(text: Text) -> bool:
    return text.get_visible() and bool(text.get_text().strip()) and text.get_gid() != PREVIEW_GID


def _ticks(axis) -> list:
    """The tick labels the axis draws: the ticks within its view (Axis._update_ticks, what
    Axis.draw itself calls)."""
    return [label for tick in axis._update_ticks() for label in (tick.label1, tick.label2)
            if label.get_visible() and label.get_text()]


def _anchor(text: Text) -> tuple[float, float] | None:
    """Where an annotation of a data point points (display coordinates), else None: the label
    of a point sits beside its own marker, and that marker is not a clash."""
    if isinstance(text, Annotation) and text.xycoords == "data":
        x, y = text.axes.transData.transform(text.xy)
        return float(x), float(y)
    return None


def text_boxes(fig: Figure, renderer) -> list[Box]:
    """Every legend and text box of the drawn figure, with its extent."""
    boxes = []
    suptitle = getattr(fig, "_suptitle", None)
    texts = [*fig.texts, *([suptitle] if suptitle is not None and suptitle not in fig.texts else [])]
    for text in texts:
        if _shown(text):
            boxes.append(Box(f"figure text {_short(text.get_text())}", _extent(text, renderer), None))
    for legend in fig.legends:
        boxes.append(Box("figure legend", legend.get_window_extent(renderer), None))
    for axes in fig.axes:
        if not axes.get_visible():
            continue
        where = _name(axes)
        legend = axes.get_legend()
        if legend is not None and legend.get_visible():  # placed in the axes or beside it
            boxes.append(Box(f"legend of {where}", legend.get_window_extent(renderer), axes))
        for text in axes.texts:
            if _shown(text):
                boxes.append(Box(f"text {_short(text.get_text())} in {where}", _extent(text, renderer), axes,
                                 anchor=_anchor(text)))
        for title in (axes.title, axes._left_title, axes._right_title):
            if _shown(title):
                boxes.append(Box(f"title {_short(title.get_text())}", _extent(title, renderer), None))
        if not axes.axison:
            continue
        for axis, name in ((axes.xaxis, "x"), (axes.yaxis, "y")):
            if _shown(axis.label):
                boxes.append(Box(f"{name} label {_short(axis.label.get_text())} of {where}",
                                 axis.label.get_window_extent(renderer), None))
            for label in _ticks(axis):
                boxes.append(Box(f"{name} tick {_short(label.get_text())} of {where}",
                                 label.get_window_extent(renderer), None, tick=True))
    return boxes


def data_of(axes) -> tuple[list[tuple[np.ndarray, float]], list[np.ndarray]]:
    """The axes' plotted data in display coordinates: (points (n, 2), marker radius in pixels)
    per series, and the (n, 2) vertices of each drawn line, for the series tagged with a gid."""
    points, lines = [], []
    pixels_per_point = axes.figure.dpi / 72.0
    for artist in axes.get_children():
        if not artist.get_gid() or not artist.get_visible():
            continue
        if isinstance(artist, Line2D):
            xy = artist.get_transform().transform(np.asarray(artist.get_xydata(), float))
            xy = xy[np.isfinite(xy).all(axis=1)]
            marker = artist.get_marker() not in (None, "", " ", "None", "none")
            points.append((xy, artist.get_markersize() * pixels_per_point / 2 if marker else 0.0))
            if artist.get_linestyle() not in ("None", "none", "", " "):
                lines.append(xy)
        elif isinstance(artist, PathCollection):
            xy = artist.get_offset_transform().transform(np.asarray(artist.get_offsets(), float))
            sizes = artist.get_sizes()
            radius = float(np.sqrt(sizes.max()) * pixels_per_point / 2) if len(sizes) else 0.0
            points.append((xy[np.isfinite(xy).all(axis=1)], radius))
    return points, lines


def _overlap(a: Bbox, b: Bbox) -> bool:
    """The two boxes share an area (touching edges is no overlap)."""
    return min(a.x1, b.x1) > max(a.x0, b.x0) and min(a.y1, b.y1) > max(a.y0, b.y0)


def _clip(p: np.ndarray, q: np.ndarray, box: Bbox) -> tuple[np.ndarray, np.ndarray] | None:
    """The part of segment pq inside `box` (Liang–Barsky), or None."""
    t0, t1 = 0.0, 1.0
    d = q - p
    for delta, low, high, start in ((d[0], box.x0, box.x1, p[0]), (d[1], box.y0, box.y1, p[1])):
        if delta == 0:
            if start < low or start > high:
                return None
            continue
        a, b = (low - start) / delta, (high - start) / delta
        t0, t1 = max(t0, min(a, b)), min(t1, max(a, b))
        if t0 > t1:
            return None
    return p + t0 * d, p + t1 * d


def _hits(box: Bbox, points, lines, view: Bbox, anchor: tuple[float, float] | None = None) -> bool:
    for xy, radius in points:
        shown = xy[(xy[:, 0] >= view.x0) & (xy[:, 0] <= view.x1)
                   & (xy[:, 1] >= view.y0) & (xy[:, 1] <= view.y1)]
        if anchor is not None:  # the labelled point itself
            shown = shown[np.hypot(shown[:, 0] - anchor[0], shown[:, 1] - anchor[1]) > 1e-6]
        if len(shown) and ((shown[:, 0] > box.x0 - radius) & (shown[:, 0] < box.x1 + radius)
                           & (shown[:, 1] > box.y0 - radius) & (shown[:, 1] < box.y1 + radius)).any():
            return True
    for xy in lines:
        for p, q in zip(xy[:-1], xy[1:], strict=True):
            inside = _clip(p, q, view)  # only what the axes draw
            if inside is not None and _clip(*inside, box) is not None:
                return True
    return False


def clashes(fig: Figure) -> list[Clash]:
    """Every overlap of a legend or text box with another, or with the plotted data of the axes
    it is drawn in, in the figure as drawn (on an Agg canvas, at the figure's dpi)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = text_boxes(fig, renderer)
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if _overlap(a.bbox, b.bbox):
                found.append(Clash(a.what, b.what))
    data = {}
    for box in boxes:
        if box.axes is None or box.tick:
            continue
        if box.axes not in data:
            data[box.axes] = data_of(box.axes)
        if _hits(box.bbox, *data[box.axes], box.axes.bbox, box.anchor):
            found.append(Clash(box.what, f"the plotted data of {_name(box.axes)}"))
    return found

