"""The split a pipeline of verify.images.train was trained on, saved beside its weights (issue 44).

train writes OUT/pipeline/split.json with the pipeline (in the same atomic rename): the family,
the combinations trained on, the ones held out and the split's seed. `python -m verify.images
analyse` reads it, so that the prompts it scores as held out are the ones the model never saw,
and checks a split asked for by flags against it. Without this file the analysis re-drew a split
from its own flags, which need not be train's (train's --train-combinations 48 holds out 16 of
scene1's 64 combinations, analyse's default share 0.3 holds out 20, four of them trained on).

A pipeline saved before the file existed has none: `read` gives None, and `trained_here` tells
such a folder from a pipeline this project never trained (Stable Diffusion, say), which has no
training split to respect.

Nothing here imports torch or diffusers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verify import cli
from verify.cli import UsageError

FILE = "split.json"
FORMAT = "verify.images.split"
FORMAT_VERSION = 1
PROGRAM = "verify.images.train"


@dataclass(frozen=True, eq=False)  # eq=False: field-wise == on arrays has no truth value
class Recorded:
    """A pipeline's recorded split: `train` and `test` index `family`'s prompt table (n rows)."""

    family: str
    n: int
    train: np.ndarray
    test: np.ndarray
    seed: int
    path: Path


def record(family_name: str, split) -> dict:
    """The file's content for a `PromptSplit` of the family called `family_name`."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "program": PROGRAM, "family": family_name,
            "n": int(split.n), "seed": int(split.params.get("seed", 0)),
            "train": [int(r) for r in split.train], "test": [int(r) for r in split.test]}


def write(folder: str | Path, family_name: str, split) -> Path:
    """The split record into pipeline folder `folder`, atomically."""
    text = cli.to_json(record(family_name, split), indent=None)  # one line: the lists stay short
    return cli.write_text_atomic(Path(folder) / FILE, text + "\n")


def _folder(model: str | Path) -> Path | None:
    """The local pipeline folder `model` names, or None (a hub id, or no such folder)."""
    path = Path(str(model)).expanduser()
    return path if path.is_dir() else None


def read(model: str | Path) -> Recorded | None:
    """The split recorded in pipeline folder `model`; None where it records none (a hub id, a
    folder of another program, or one saved before splits were recorded). UsageError (one line)
    for a file that is there but is not a split record."""
    folder = _folder(model)
    if folder is None or not (folder / FILE).is_file():
        return None
    path = folder / FILE
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or rec.get("format") != FORMAT:
            raise ValueError(f'no "format": "{FORMAT}"')
        n, train, test = int(rec["n"]), _rows(rec["train"]), _rows(rec["test"])
        _check_partition(n, train, test)
        return Recorded(family=str(rec["family"]), n=n, train=train, test=test, seed=int(rec["seed"]),
                        path=path)
    except OSError as e:
        raise UsageError(f"{path} cannot be read: {e.strerror or type(e).__name__}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path} is not a split record of {PROGRAM} ({e})") from None


def _rows(values) -> np.ndarray:
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        raise ValueError("train and test must be lists of prompt rows")
    return np.asarray(values, dtype=np.int64)


def _check_partition(n: int, train: np.ndarray, test: np.ndarray) -> None:
    """train and test must split 0..n-1 between them, each row once: anything else would let a
    trained prompt pass for a held-out one."""
    both = np.concatenate([train, test])
    if not (train.size and test.size) or np.unique(both).size != both.size \
            or not np.array_equal(np.sort(both), np.arange(n)):
        raise ValueError(f"train and test do not split the {n} prompt rows between them")


def trained_here(model: str | Path) -> bool:
    """Whether `model` is a folder of a pipeline class of this project (a denoiser trained by
    verify.images.train), read from its model_index.json without loading it."""
    from verify.images.pipeline import LOCAL_PIPELINES

    folder = _folder(model)
    try:
        index = json.loads((folder / "model_index.json").read_text()) if folder else None
    except (OSError, ValueError):
        return False
    return isinstance(index, dict) and index.get("_class_name") in LOCAL_PIPELINES
