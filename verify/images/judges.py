"""Judges: does an image show what its prompt asked for, slot by slot?

One interface, `Judge.judge(images, family, prompt_rows) -> (n_images, n_slots) bool`: image i was
made from prompt `prompt_rows[i]` of `family` (an index into its prompt table:
`image_setups.combinations(setup)` or `images.combinations(scene)`), and entry (i, j) says whether
slot j came out right. The slots are `slot_names(family)`: a slot setup's slots; a pick setup's
items (right when the item's presence is right); a rendered scene's shape, colour and position of
each object. `Judge.success` is every slot right (the anchor's rule); the exact judge also requires
that nothing else is in the picture.

- `exact` (`ExactJudge`), for the rendered family (`constructions.tasks.images.Scene`): reads
  shape, colour and position from the pixels with `images.read`.
- `clip` (`ClipJudge`): zero-shot per slot with a CLIP checkpoint from a local folder (or the
  local Hugging Face cache). For each slot, the image is scored against one text per candidate
  word, the prompt with that slot's word swapped for the candidate (a pick setup: "An image with
  one {item}" per item, the k best taken as present), and the best-scoring candidate is the answer.
- `llm` (`LlmJudge`): a vision-language model through the `llm` package, as the anchor's
  `llm_eval.py` does it: the setup's judge prompt, the image attached, a JSON schema with one field
  per slot (a string, "{slot} - choose ONE of: {words}"; a boolean per item for pick setups), at
  temperature 0. `per_slot=True` asks one question per slot instead. Answers are matched to words
  case-insensitively after dropping a leading article, "one " or "a pair of " (the anchor's
  case-sensitive matching also turned "stone bowl" into "stbowl", which no answer matches).
  `llm` is imported only when this judge is made; without it, or without the model's key, it
  refuses in one line.
"""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from constructions.tasks import image_setups
from constructions.tasks import images as scenes
from verify.cli import UsageError

JUDGES = ("exact", "clip", "llm")


# --- families -----------------------------------------------------------------------------------

def _is_scene(family) -> bool:
    return isinstance(family, scenes.Scene)


def _check_family(family) -> None:
    if not isinstance(family, (scenes.Scene, image_setups.ImageSetup)):
        raise TypeError(f"a family is an ImageSetup or a Scene, not {type(family).__name__}")


def slot_names(family) -> tuple[str, ...]:
    """The columns of a judge's answer."""
    _check_family(family)
    if _is_scene(family):
        return family.slots
    return family.words[0] if family.kind == "pick" else family.slots


def slot_words(family) -> tuple[tuple[str, ...], ...]:
    """Each slot's candidate words (pick setups: one list, the items, for the one question
    "which k are present")."""
    if _is_scene(family):
        return tuple(family.words[j % 3] for j in range(len(family.slots)))
    return family.words


def combinations(family) -> np.ndarray:
    """The family's prompt table: (n, n_slots) word indices (pick: (n, k) item indices)."""
    _check_family(family)
    if _is_scene(family):
        return scenes.combinations(family).reshape(-1, 3 * family.n_objects)
    return image_setups.combinations(family)


def truth(family, prompt_rows) -> np.ndarray:
    """(n, n_slots): the right word index per slot, or for pick setups the presence bit per item."""
    rows = _rows(family, prompt_rows)
    if not _is_scene(family) and family.kind == "pick":
        return image_setups.labels(family)[rows]
    return combinations(family)[rows]


def prompt_text(family, combination) -> str:
    """The prompt of a row of `combinations(family)`, also for rows that are no prompt of the
    family (a scene's objects out of reading order), as candidate texts need."""
    if _is_scene(family):
        a = np.asarray(combination).reshape(-1, 3)
        return " and ".join(f"a {family.colours[c]} {family.shapes[s]} {scenes.POSITIONS[p]}"
                            for s, c, p in a)
    return image_setups.render(family, combination)


def _rows(family, prompt_rows) -> np.ndarray:
    rows = np.asarray(prompt_rows, dtype=np.int64).ravel()
    n = len(combinations(family))
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"prompt rows must lie in 0..{n - 1}")
    return rows


def as_uint8(images) -> np.ndarray:
    """(n, H, W, 3) uint8 from an array (uint8, or floats in [0, 1]), a CPU tensor or PIL images."""
    if isinstance(images, (list, tuple)):
        images = np.stack([np.asarray(im.convert("RGB") if hasattr(im, "convert") else im) for im in images])
    x = np.asarray(images)
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"images must be (n, H, W, 3), got {x.shape}")
    if x.dtype != np.uint8:
        if x.size and (np.nanmin(x) < -1e-6 or np.nanmax(x) > 1 + 1e-6):
            raise ValueError("images that are not uint8 must be floats in [0, 1]")
        x = np.clip(np.rint(x.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
    return x


@dataclass(frozen=True, eq=False)
class Verdict:
    slot_correct: np.ndarray  # (n, n_slots) bool
    success: np.ndarray  # (n,) bool
    answers: list | None = None  # what the judge answered, per image (for the results file)


class Judge:
    """Base class: subclasses implement `evaluate`."""

    name = "judge"

    def evaluate(self, images, family, prompt_rows) -> Verdict:
        raise NotImplementedError

    def judge(self, images, family, prompt_rows) -> np.ndarray:
        """(n_images, n_slots) bool: each slot right."""
        return self.evaluate(images, family, prompt_rows).slot_correct

    def success(self, images, family, prompt_rows) -> np.ndarray:
        """(n_images,) bool: every slot right."""
        return self.evaluate(images, family, prompt_rows).success

    def describe(self) -> dict:
        return {"name": self.name}

    @staticmethod
    def _check(images, family, prompt_rows) -> tuple[np.ndarray, np.ndarray]:
        x = as_uint8(images)
        rows = _rows(family, prompt_rows)
        if len(rows) != len(x):
            raise ValueError(f"{len(x)} images for {len(rows)} prompt rows")
        return x, rows


# --- exact ----------------------------------------------------------------------------------------

class ExactJudge(Judge):
    """Reads the rendered family's images (`constructions.tasks.images.read`)."""

    name = "exact"

    def evaluate(self, images, family, prompt_rows) -> Verdict:
        if not _is_scene(family):
            raise UsageError("the exact judge reads only the rendered family (a Scene), not the setup "
                             f"{getattr(family, 'name', family)!r}: use the clip or llm judge")
        x, rows = self._check(images, family, prompt_rows)
        reading = scenes.read(family, x)
        want = scenes.combinations(family)[rows]
        slots = scenes.slot_correct(reading, want).reshape(len(rows), -1)
        return Verdict(slot_correct=slots, success=slots.all(axis=1) & reading.complete,
                       answers=reading.attributes.reshape(len(rows), -1).tolist())


# --- clip -----------------------------------------------------------------------------------------

def candidate_texts(family, prompt_row: int) -> list[list[str]]:
    """Per slot, one text per candidate word: the prompt with that slot's word swapped for it
    (pick setups: one list, "An image with one {item}" per item)."""
    if not _is_scene(family) and family.kind == "pick":
        return [[f"An image with one {item}" for item in family.words[0]]]
    row = combinations(family)[prompt_row]
    texts = []
    for j, words in enumerate(slot_words(family)):
        swapped = []
        for c in range(len(words)):
            r = row.copy()
            r[j] = c
            swapped.append(prompt_text(family, r))
        texts.append(swapped)
    return texts


def _load_failure(what: str, path: str, e: BaseException) -> UsageError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return UsageError(f"{what} {path!r} cannot be loaded from local files (nothing is downloaded here): "
                      f"{first}")


class ClipJudge(Judge):
    """Zero-shot per slot with a CLIPModel and CLIPProcessor from a local folder."""

    name = "clip"

    def __init__(self, path: str, device: str = "cpu", batch_size: int = 64):
        try:
            import torch  # noqa: F401
            from transformers import CLIPModel, CLIPProcessor
        except ImportError:
            raise UsageError("the clip judge needs transformers: pip install -e '.[images]'") from None
        try:
            self.model = CLIPModel.from_pretrained(path, local_files_only=True).to(device).eval()
            self.processor = CLIPProcessor.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise _load_failure("CLIP checkpoint", str(path), e) from None
        self.path, self.device, self.batch_size = str(path), device, batch_size

    def describe(self) -> dict:
        return {"name": self.name, "path": self.path}

    def _features(self, out):
        import torch

        feats = out if torch.is_tensor(out) else out.pooler_output  # transformers 4 / 5
        return torch.nn.functional.normalize(feats.float(), dim=-1)

    def image_features(self, x: np.ndarray):
        import torch
        from PIL import Image

        parts = []
        with torch.no_grad():
            for start in range(0, len(x), self.batch_size):
                pil = [Image.fromarray(im) for im in x[start:start + self.batch_size]]
                inputs = self.processor(images=pil, return_tensors="pt")
                parts.append(self._features(self.model.get_image_features(
                    pixel_values=inputs["pixel_values"].to(self.device))))
        return torch.cat(parts)

    def text_features(self, texts: Sequence[str]):
        import torch

        parts = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                inputs = self.processor(text=list(texts[start:start + self.batch_size]), return_tensors="pt",
                                        padding=True, truncation=True)
                inputs = {k: v.to(self.device) for k, v in inputs.items()}
                parts.append(self._features(self.model.get_text_features(**inputs)))
        return torch.cat(parts)

    def scores(self, x: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        """(n_images, n_texts) cosine similarities of CLIP's image and text embeddings."""
        return (self.image_features(x) @ self.text_features(texts).T).cpu().numpy()

    def evaluate(self, images, family, prompt_rows) -> Verdict:
        x, rows = self._check(images, family, prompt_rows)
        per_image = [candidate_texts(family, r) for r in rows]
        texts = sorted({t for slots in per_image for slot in slots for t in slot})
        index = {t: i for i, t in enumerate(texts)}
        sims = self.scores(x, texts)
        want = truth(family, rows)
        pick = not _is_scene(family) and family.kind == "pick"
        correct = np.zeros(want.shape, dtype=bool)
        answers = []
        for i, slots in enumerate(per_image):
            chosen = []
            for j, candidates in enumerate(slots):
                s = sims[i, [index[t] for t in candidates]]
                if pick:
                    present = np.zeros(len(candidates), dtype=np.uint8)
                    present[np.argsort(-s, kind="stable")[: family.k]] = 1
                    correct[i] = present == want[i]
                    chosen.append(np.flatnonzero(present).tolist())
                else:
                    best = int(np.argmax(s))
                    correct[i, j] = best == want[i, j]
                    chosen.append(best)
            answers.append(chosen)
        return Verdict(slot_correct=correct, success=correct.all(axis=1), answers=answers)


# --- llm ------------------------------------------------------------------------------------------

_LEADING = re.compile(r"^(?:a pair of|an|a|the|one)\s+")


def normalise(word) -> str:
    """Lower case, single spaces, without a leading article, "one " or "a pair of "."""
    text = " ".join(str(word).lower().split())
    return _LEADING.sub("", text)


def _key(item: str) -> str:
    return re.sub(r"\W+", "_", normalise(item)).strip("_") or "item"


def questions(family) -> tuple[tuple[str, ...], str]:
    """Per slot the question (the schema field's description), and the prompt sent with the image."""
    if not _is_scene(family):
        return family.questions, family.judge_prompt
    qs = tuple(f"{slot} - choose ONE of: {', '.join(words)}"
               for slot, words in zip(family.slots, slot_words(family), strict=True))
    n = family.n_objects
    prompt = (f"This image shows {n} coloured shape{'s' if n > 1 else ''} on a black background, each in one "
              "quadrant. For each object, in reading order (top left, top right, bottom left, bottom right), "
              f"identify its shape, colour and position. Return a JSON object with the keys "
              f"{', '.join(family.slots)}, using exactly one of the provided options for each.")
    return qs, prompt


def schema(family, slots: Sequence[int] | None = None) -> dict:
    """The JSON schema of the structured answer: one field per slot (a bool per item for pick)."""
    qs, _ = questions(family)
    names = slot_names(family)
    pick = not _is_scene(family) and family.kind == "pick"
    chosen = range(len(names)) if slots is None else slots
    props = {(_key(names[j]) if pick else names[j]): {"type": "boolean" if pick else "string",
                                                      "description": qs[j]} for j in chosen}
    return {"type": "object", "properties": props, "required": list(props)}


@dataclass(frozen=True)
class PngAttachment:
    """An image for a model's prompt when the llm package (and its Attachment) is absent: fakes."""

    content: bytes
    type: str = "image/png"


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def _import_llm():
    try:
        import llm
    except ImportError:
        raise UsageError("the llm judge needs the llm package and a plugin for its model "
                         "(pip install llm llm-gemini; llm keys set gemini)") from None
    return llm


class LlmJudge(Judge):
    """A VLM through the `llm` package; `model` may be a model object (anything with the
    `prompt(text, attachments=, schema=, temperature=)` of llm's models), for tests."""

    name = "llm"

    def __init__(self, model="gemini-2.0-flash", per_slot: bool = False, retries: int = 3,
                 wait_s: float = 5.0):
        if isinstance(model, str):
            llm = _import_llm()
            try:
                model = llm.get_model(model)
            except llm.UnknownModelError:
                raise UsageError(f"the llm package knows no model {model!r} (is its plugin installed? "
                                 "llm models lists them)") from None
            self._attach = lambda png: llm.Attachment(content=png, type="image/png")
        else:
            try:
                llm = _import_llm()
                self._attach = lambda png: llm.Attachment(content=png, type="image/png")
            except UsageError:
                self._attach = PngAttachment
        self.model = model
        self.model_id = getattr(model, "model_id", type(model).__name__)
        self.per_slot, self.retries, self.wait_s = per_slot, retries, wait_s
        self.failures = 0  # images or slots whose question failed after every retry

    def describe(self) -> dict:
        return {"name": self.name, "model": str(self.model_id), "per_slot": self.per_slot,
                "temperature": 0.0, "failures": self.failures}

    def _ask(self, text: str, png: bytes, fields: dict) -> dict | None:
        for attempt in range(self.retries):
            try:
                response = self.model.prompt(text, attachments=[self._attach(png)], schema=fields,
                                             temperature=0.0)
                answer = json.loads(response.text())
                return answer if isinstance(answer, dict) else None
            except Exception as e:  # the model's client raises its own classes
                if type(e).__name__ == "NeedsKeyException":  # llm's: no key for this model
                    raise UsageError(f"the llm judge's model {self.model_id} needs an API key: "
                                     "llm keys set <provider>") from None
                if isinstance(e, json.JSONDecodeError) or attempt == self.retries - 1:
                    break
                time.sleep(self.wait_s)
        self.failures += 1
        return None

    def evaluate(self, images, family, prompt_rows) -> Verdict:
        x, rows = self._check(images, family, prompt_rows)
        qs, prompt = questions(family)
        names = slot_names(family)
        pick = not _is_scene(family) and family.kind == "pick"
        want = truth(family, rows)
        words = slot_words(family)
        correct = np.zeros(want.shape, dtype=bool)
        answers = []
        for i, image in enumerate(x):
            png = _png(image)
            if self.per_slot:
                answer = {}
                for j in range(len(names)):
                    got = self._ask(f"{prompt}\n\nAnswer only this: {qs[j]}", png, schema(family, [j]))
                    answer.update(got or {})
            else:
                answer = self._ask(prompt, png, schema(family)) or {}
            answers.append(answer)
            for j, name in enumerate(names):
                if pick:
                    value = answer.get(_key(name))
                    if isinstance(value, str):
                        value = {"true": True, "false": False}.get(value.strip().lower())
                    correct[i, j] = isinstance(value, bool) and value == bool(want[i, j])
                else:
                    value = answer.get(name)
                    correct[i, j] = value is not None and normalise(value) == normalise(words[j][want[i, j]])
        return Verdict(slot_correct=correct, success=correct.all(axis=1), answers=answers)


def make(name: str, **options) -> Judge:
    """The judge called `name`: exact; clip (options path, device); llm (options model, per_slot)."""
    if name == "exact":
        return ExactJudge()
    if name == "clip":
        if not options.get("path"):
            raise UsageError("the clip judge needs a local CLIP checkpoint folder")
        return ClipJudge(options["path"], device=options.get("device", "cpu"))
    if name == "llm":
        return LlmJudge(options.get("model") or "gemini-2.0-flash", per_slot=options.get("per_slot", False))
    raise UsageError(f"unknown judge {name!r}; choose one of {', '.join(JUDGES)}")
