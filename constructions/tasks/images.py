"""A rendered image family for the controlled text-to-image experiment, and its exact reader.

The paper asks whether text-to-image models compose known concepts, with prompts from the anchor's
setups (`image_setups.py`, from Florian-toll/compgen-vision) and a VLM as the judge. That needs SD-
or FLUX-sized models; this family is the controlled stand-in that a small denoiser learns here:

- An image (default 16×16 RGB, black background) holds `n_objects` objects (1 or 2), each with a
  shape (square, circle, triangle, cross), a colour (red, green, blue, yellow, saturated) and a
  position, one of the four quadrants (top left, top right, bottom left, bottom right). A shape is
  a fixed mask centred in its quadrant with a margin of one pixel (`shape_masks`).
- A combination is an int array (n_objects, 3) of (shape, colour, position) indices. Objects of
  one image stand in different quadrants, listed in reading order (increasing position index):
  the reversed listing would be a second prompt for the same image, so holding one out while
  training the other would leak the held-out image into training. `render` refuses other orders.
- The prompt follows one template, "a {colour} {shape} {position}", joined by " and ": "a red
  square top left and a blue circle bottom right". Labels are one one-hot block per slot (shape,
  colour, position of each object), concatenated, as for the anchor's slot setups. With two
  objects in reading order, the bits "position_1=bottom right" and "position_2=top left" are
  always 0.
- `split` holds out combinations at random by the anchor's rule (`image_setups.draw_test`) and
  reports coverage with this family's constituents: every shape, colour and position value, over
  either object, occurs in at least one training combination.

`read` inverts `render` from the pixels alone. Per quadrant: a pixel is foreground when its
brightest channel exceeds half of full scale; its colour is the nearest palette colour; the
quadrant holds an object when it has at least `min_pixels` foreground pixels; the object's colour
is the majority colour, accepted when at least `colour_purity` of its pixels agree; its shape is
the template of highest intersection over union with the foreground mask, accepted at IoU ≥
`min_iou`. Why this is exact and robust:

- The palette's colours are at least 255 apart in RGB, and each is at least 255 from black, so
  every decision threshold lies 127.5 from the clean value: five sd of Gaussian noise of sd
  0.1·255 (clipped), which therefore leaves the reading exact (measured: no error in 32,000 noisy
  renders; at sd 0.15·255, 8 in 30,720 two-object ones).
- The shapes' masks overlap with IoU ≤ 0.67 at 16×16 (`Scene.__post_init__` requires < 0.7).
  Jaccard distance (1 − IoU) is a metric, so a mask within 0.15 of one template is more than
  0.15 from every other: at `min_iou` = 0.85 the accepted shape is unique.
- Blank quadrants, garbled objects (mixed colours, no shape close enough, an object straddling
  two quadrants) come back as not found rather than as a guess; a clean object of the wrong
  colour or shape comes back as what it shows.

Usage:

    scene = Scene(n_objects=2)
    combos = combinations(scene)  # (1536, 2, 3)
    images = render(scene, combos)  # (1536, 16, 16, 3) uint8
    prompt(scene, combos[0])  # 'a red square top left and a red square top right'
    correct(read(scene, images), combos).all()  # True
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from constructions.tasks.image_setups import PromptSplit, draw_test, split_by_test

SHAPES = ("square", "circle", "triangle", "cross")
COLOURS = ("red", "green", "blue", "yellow")
RGB = ((255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0))
POSITIONS = ("top left", "top right", "bottom left", "bottom right")  # quadrant index = 2·row + column
ATTRIBUTES = ("shape", "colour", "position")  # the columns of a combination
FOREGROUND = 127.5  # half of full scale: a pixel whose brightest channel exceeds it is foreground


def _shape_mask(name: str, b: int) -> np.ndarray:
    """The (b, b) mask of a shape on its box, from pixel-centre coordinates u (left → right) and
    v (top → bottom) in (-1, 1). Proportions chosen so that the four stay apart at b = 6."""
    c = (np.arange(b) + 0.5) / b * 2 - 1
    v, u = np.meshgrid(c, c, indexing="ij")
    i, j = np.indices((b, b))
    thick = max(0, b // 6 - 1)  # the cross's half-width in pixels: one-pixel strokes at b = 6
    masks = {
        "square": np.ones((b, b), dtype=bool),
        "circle": u**2 + v**2 <= 0.8,  # at b = 6 the corners lose three pixels each
        "triangle": np.abs(u) <= (v + 1) / 2 + 0.1,  # apex up
        # The diagonal cross: an upright one lies inside the circle at this size (IoU 0.83).
        "cross": (np.abs(i - j) <= thick) | (np.abs(i + j - (b - 1)) <= thick),
    }
    return masks[name]


@lru_cache(maxsize=32)
def shape_masks(size: int, shapes: tuple[str, ...]) -> np.ndarray:
    """(n_shapes, q, q) bool, q = size // 2: each shape centred in a quadrant, one-pixel margin."""
    q = size // 2
    out = np.zeros((len(shapes), q, q), dtype=bool)
    for s, name in enumerate(shapes):
        out[s, 1:-1, 1:-1] = _shape_mask(name, q - 2)
    out.setflags(write=False)
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of masks a (..., q, q) with each of b (S, q, q): (..., S)."""
    inter = np.einsum("...ij,sij->...s", a.astype(np.float32), b.astype(np.float32))
    union = a.sum(axis=(-2, -1))[..., None] + b.sum(axis=(-2, -1)) - inter
    return inter / np.maximum(union, 1)


@dataclass(frozen=True)
class Scene:
    """The family's vocabularies and the reader's tolerances."""

    n_objects: int = 1
    size: int = 16
    shapes: tuple[str, ...] = SHAPES
    colours: tuple[str, ...] = COLOURS
    rgb: tuple[tuple[int, int, int], ...] = RGB
    min_pixels: int = 6  # fewer foreground pixels in a quadrant: empty (a stray pixel is no object)
    colour_purity: float = 0.8  # share of an object's pixels that must have its colour
    min_iou: float = 0.85  # > 1 - 0.7 / 2: at most one template is this close (see the docstring)

    def __post_init__(self):
        if not 1 <= self.n_objects <= len(POSITIONS):
            raise ValueError(f"n_objects must be 1..{len(POSITIONS)}, got {self.n_objects!r}")
        if self.size < 16 or self.size % 2:
            raise ValueError(f"size must be even and at least 16, got {self.size!r}")
        unknown = set(self.shapes) - set(SHAPES)
        if unknown or len(set(self.shapes)) != len(self.shapes):
            raise ValueError(f"shapes must be distinct ones of {', '.join(SHAPES)}; got {self.shapes!r}")
        self._check_palette()
        masks = shape_masks(self.size, self.shapes)
        overlap = _iou(masks, masks)[~np.eye(len(masks), dtype=bool)]
        if overlap.size and overlap.max() >= 0.7:
            raise ValueError(f"at size {self.size} two shapes overlap with IoU {overlap.max():.2f} >= 0.7")

    def _check_palette(self):
        rgb = np.asarray(self.rgb, dtype=float)
        if rgb.shape != (len(self.colours), 3) or len(set(self.colours)) != len(self.colours):
            raise ValueError("colours must be distinct names, one (r, g, b) triple each in rgb")
        # The reader's foreground test needs every colour well above half scale in some channel.
        if ((rgb < 0) | (rgb > 255)).any() or rgb.max(axis=1).min() < 192:
            raise ValueError("every rgb colour needs a channel >= 192 and all channels in 0..255")

    @property
    def slots(self) -> tuple[str, ...]:
        """The label's slot names: shape, colour, position, suffixed _1, _2 with two objects."""
        if self.n_objects == 1:
            return ATTRIBUTES
        return tuple(f"{a}_{i + 1}" for i in range(self.n_objects) for a in ATTRIBUTES)

    @property
    def words(self) -> tuple[tuple[str, ...], ...]:
        """Each attribute's vocabulary, in ATTRIBUTES order."""
        return self.shapes, self.colours, POSITIONS


def combinations(scene: Scene) -> np.ndarray:
    """Every allowed combination, (n, n_objects, 3) int64: positions in reading order outermost,
    then the (shape, colour) of each object, shape before colour."""
    looks = list(itertools.product(range(len(scene.shapes)), range(len(scene.colours))))
    rows = [[(*looks[k], p) for k, p in zip(ks, ps, strict=True)]
            for ps in itertools.combinations(range(len(POSITIONS)), scene.n_objects)
            for ks in itertools.product(range(len(looks)), repeat=scene.n_objects)]
    return np.array(rows, dtype=np.int64)


def _check(scene: Scene, attributes) -> np.ndarray:
    """(B, n_objects, 3) int64, each index in range and positions strictly increasing."""
    a = np.asarray(attributes, dtype=np.int64).reshape(-1, scene.n_objects, 3)
    bounds = np.array([len(scene.shapes), len(scene.colours), len(POSITIONS)])
    if ((a < 0) | (a >= bounds)).any():
        raise ValueError(f"attribute indices out of range (shape, colour, position < {tuple(bounds)})")
    if (np.diff(a[..., 2], axis=1) <= 0).any():
        raise ValueError("objects of one image must stand in different positions, listed in reading order")
    return a


def render(scene: Scene, attributes) -> np.ndarray:
    """The images of a batch of combinations: (B, size, size, 3) uint8."""
    a = _check(scene, attributes)
    q, masks, rgb = scene.size // 2, shape_masks(scene.size, scene.shapes), np.asarray(scene.rgb, np.uint8)
    images = np.zeros((len(a), scene.size, scene.size, 3), dtype=np.uint8)
    for obj in a.transpose(1, 0, 2):  # one object slot at a time, vectorised over the batch
        for p in range(len(POSITIONS)):
            rows = np.flatnonzero(obj[:, 2] == p)
            r, c = divmod(p, 2)
            index = (rows, slice(r * q, (r + 1) * q), slice(c * q, (c + 1) * q))
            paint, colour = masks[obj[rows, 0]][..., None], rgb[obj[rows, 1]][:, None, None]
            images[index] = np.where(paint, colour, images[index])
    return images


def prompt(scene: Scene, combination) -> str:
    """The prompt of one combination: "a red square top left and a blue circle bottom right"."""
    a = _check(scene, combination)[0]
    return " and ".join(f"a {scene.colours[c]} {scene.shapes[s]} {POSITIONS[p]}" for s, c, p in a)


def prompts(scene: Scene, attributes=None) -> list[str]:
    """The prompts of a batch of combinations (default all of them, in `combinations` order)."""
    a = combinations(scene) if attributes is None else _check(scene, attributes)
    return [prompt(scene, row) for row in a]


def _one_hot(scene: Scene, a: np.ndarray, per_object: bool) -> np.ndarray:
    """Blocks of shape, colour and position bits: one set per object, or one shared by all."""
    sizes = [len(w) for w in scene.words]
    offsets = np.cumsum([0, *sizes])[:-1] + (np.arange(a.shape[1])[:, None] * sum(sizes) if per_object else 0)
    out = np.zeros((len(a), (a.shape[1] if per_object else 1) * sum(sizes)), dtype=np.uint8)
    np.put_along_axis(out, (a + offsets).reshape(len(a), -1), 1, axis=1)
    return out


def labels(scene: Scene, attributes=None) -> np.ndarray:
    """(B, n_objects·(S + C + 4)) uint8: per object, one-hot shape, colour and position blocks,
    named by `label_names(scene)`."""
    a = combinations(scene) if attributes is None else _check(scene, attributes)
    return _one_hot(scene, a, per_object=True)


def label_names(scene: Scene) -> tuple[str, ...]:
    """The label bits' names, "slot=word" in label order (as `ImageSetup.constituents`)."""
    return tuple(f"{slot}={w}" for k, slot in enumerate(scene.slots) for w in scene.words[k % 3])


def constituents(scene: Scene, attributes=None) -> tuple[np.ndarray, tuple[str, ...]]:
    """Which attribute values each combination has, over any of its objects: (B, S + C + 4) uint8,
    and the names "shape=square", ..., "position=bottom right"."""
    a = combinations(scene) if attributes is None else _check(scene, attributes)
    names = tuple(f"{attr}={w}" for attr, words in zip(ATTRIBUTES, scene.words, strict=True) for w in words)
    return _one_hot(scene, a, per_object=False), names


def split(scene: Scene, test_fraction: float = 0.3, seed: int = 0) -> PromptSplit:
    """Random held-out combinations (indices into `combinations(scene)`), with the coverage
    report over shape, colour and position values."""
    present, names = constituents(scene)
    test = draw_test(len(present), test_fraction, seed)
    return split_by_test(present, names, test, n_objects=scene.n_objects, test_fraction=test_fraction,
                         seed=seed)


@dataclass(frozen=True, eq=False)  # eq=False: field-wise == on arrays has no truth value
class Reading:
    """What `read` found: the i-th occupied quadrant in reading order is object i.

    `attributes` (B, n_objects, 3) int64 is -1 where `found` (B, n_objects) is False: no i-th
    occupied quadrant, or one whose colour or shape matches nothing. `n_present` (B,) counts the
    occupied quadrants, read or not, so that an extra object is seen.
    """

    attributes: np.ndarray
    found: np.ndarray
    n_present: np.ndarray

    @property
    def complete(self) -> np.ndarray:
        """(B,) bool: every object found and no other quadrant occupied."""
        return self.found.all(axis=1) & (self.n_present == self.found.shape[1])


def _quadrants(scene: Scene, images) -> np.ndarray:
    """(B, 4, q, q, 3) float32, quadrant p = 2·row + column."""
    x = np.asarray(images, dtype=np.float32)
    if x.ndim != 4 or x.shape[1:] != (scene.size, scene.size, 3):
        raise ValueError(f"images must be (B, {scene.size}, {scene.size}, 3), got {x.shape}")
    q = scene.size // 2
    return x.reshape(len(x), 2, q, 2, q, 3).transpose(0, 1, 3, 2, 4, 5).reshape(len(x), 4, q, q, 3)


def _read_quadrants(scene: Scene, x: np.ndarray):
    """Per quadrant: occupied, readable, shape and colour index, each (B, 4)."""
    foreground = x.max(axis=-1) > FOREGROUND
    palette = np.asarray(scene.rgb, dtype=np.float32)
    # The nearest palette colour: argmin of |x - p|² = |x|² - 2x·p + |p|², |x|² being common.
    nearest = ((palette**2).sum(axis=1) - 2 * x @ palette.T).argmin(axis=-1)  # (B, 4, q, q)
    count = foreground.sum(axis=(-2, -1))
    votes = (np.eye(len(palette), dtype=bool)[nearest] & foreground[..., None]).sum(axis=(-3, -2))
    colour = votes.argmax(axis=-1)
    pure = votes.max(axis=-1) >= scene.colour_purity * np.maximum(count, 1)
    iou = _iou(foreground, shape_masks(scene.size, scene.shapes))
    shape = iou.argmax(axis=-1)
    occupied = count >= scene.min_pixels
    return occupied, occupied & pure & (iou.max(axis=-1) >= scene.min_iou), shape, colour


def read(scene: Scene, images) -> Reading:
    """Read shape, colour and position of each object from images (B, size, size, 3) in 0..255
    (uint8 or float; a CPU torch tensor converts too)."""
    occupied, readable, shape, colour = _read_quadrants(scene, _quadrants(scene, images))
    order = np.argsort(~occupied, axis=1, kind="stable")[:, : scene.n_objects]  # occupied first
    rows = np.arange(len(order))[:, None]
    found = readable[rows, order]  # readable implies occupied: slots past the occupied ones are not found
    attributes = np.stack([shape[rows, order], colour[rows, order], order], axis=-1)
    attributes = np.where(found[..., None], attributes, -1).astype(np.int64)
    return Reading(attributes=attributes, found=found, n_present=occupied.sum(axis=1))


def slot_correct(reading: Reading, attributes) -> np.ndarray:
    """(B, n_objects, 3) bool: each slot read as the combination says (a missing object: all False)."""
    a = np.asarray(attributes, dtype=np.int64).reshape(reading.attributes.shape)
    return (reading.attributes == a) & reading.found[..., None]


def correct(reading: Reading, attributes) -> np.ndarray:
    """(B,) bool: the image shows exactly the combination, every slot right and nothing else."""
    return slot_correct(reading, attributes).all(axis=(1, 2)) & reading.complete


def add_noise(images, sd: float = 0.1 * 255, seed: int = 0) -> np.ndarray:
    """Images plus Gaussian noise of standard deviation sd, clipped to 0..255, rounded to uint8."""
    noise = np.random.default_rng(seed).normal(0.0, sd, np.shape(images))
    return np.clip(np.rint(np.asarray(images, dtype=np.float64) + noise), 0, 255).astype(np.uint8)
