"""The results file of an image analysis: what was run, on what, and what came out.

One JSON object (strict JSON, written atomically: a crash leaves the old file or the new one,
never half of one), with provenance enough to rerun it:

- `model`: the id or folder given, the pipeline class and `config_hash` (components' configs);
- `family`: the setup's name and kind, or the rendered scene's parameters;
- `prompts`, `prompt_rows` (indices into the family's prompt table), `seeds` (n_prompts, n_seeds)
  and the split (`train_prompts`/`test_prompts`, positions in `prompts`, with the coverage report);
- `denoising`: steps asked and run, guidance scale, whether CFG rows were present, which rows
  were recorded;
- `activations`: layers, step fractions, the step indices they picked, how features were pooled;
- `probe`: the scores per layer (`probes.probe_layer`) and the best layer by held-out F1;
- `judge`: its description, the slot names, per image its success and per-slot correctness, and
  the success rates on training and held-out prompts;
- `code_version` (the package's), `git_commit` where the code is a git checkout, and `timestamp`
  (UTC, ISO 8601).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from verify import cli

FORMAT = "verify.images/results"
FORMAT_VERSION = 1
POOLING = ("spatial mean of (B, C, H, W), token mean of (B, T, D); per denoiser layer the kept steps "
           "concatenated, then the mean over all steps; text encoders: last hidden state, token mean")


def family_summary(family) -> dict:
    from constructions.tasks.images import Scene

    if isinstance(family, Scene):
        return {"kind": "scene", **dataclasses.asdict(family)}
    return {"kind": "setup", "name": family.name, "setup_kind": family.kind, "template": family.template,
            "slots": list(family.slots), "n_prompts": family.n_prompts}


def git_commit(root: str | os.PathLike | None = None) -> str | None:
    """HEAD of the checkout this code lies in ("+dirty" when it has uncommitted changes), or None.
    `root`: the project's top folder (default: the one this file lies in)."""
    root = Path(__file__).resolve().parents[2] if root is None else Path(root).resolve()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        run = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True,  # noqa: E731
                                        timeout=10, check=True).stdout.strip()
        # A wheel installed into a venv inside someone's own repository lies in a checkout that is
        # not this project's: only a checkout whose top level holds this code counts.
        if Path(run("rev-parse", "--show-toplevel")).resolve() != root:
            return None
        head = run("rev-parse", "HEAD")
        dirty = run("status", "--porcelain", "--untracked-files=no")
        return head + ("+dirty" if dirty else "")
    return None


def _success_rate(success: np.ndarray, rows: np.ndarray | None) -> float | None:
    if rows is None or not len(rows):
        return None
    return float(np.mean(success[rows]))


def build(*, model: str, pipeline_class: str, config_sha256: str, family, prompt_rows: Sequence[int],
          generation, split=None, train_prompts: Sequence[int] | None = None,
          test_prompts: Sequence[int] | None = None,
          layers: Sequence[str] = (), rows: str = "cond", probe: Mapping[str, dict] | None = None,
          judge=None, verdict=None, extra: Mapping | None = None) -> dict:
    """The results record. `generation` is a `pipeline.Generation`; `train_prompts`/`test_prompts`
    are positions in its prompts; `verdict` a `judges.Verdict` of its images."""
    from verify.images.judges import slot_names
    from verify.images.probes import best_layer
    from verify.studies.provenance import code_version

    n_seeds = generation.n_seeds
    record = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "model": {"id": str(model), "pipeline": pipeline_class, "config_sha256": config_sha256},
        "family": family_summary(family),
        "prompts": list(generation.prompts), "prompt_rows": [int(r) for r in prompt_rows],
        "seeds": generation.seeds, "n_seeds": n_seeds,
        "split": {"train_prompts": None if train_prompts is None else [int(p) for p in train_prompts],
                  "test_prompts": None if test_prompts is None else [int(p) for p in test_prompts],
                  "report": None if split is None else split.summary()},
        "denoising": {"steps": generation.steps, "steps_run": generation.n_steps,
                      "guidance": generation.guidance, "cfg": generation.cfg, "rows_recorded": rows},
        "activations": {"layers": list(layers), "step_fractions": list(generation.fractions),
                        "steps_kept": list(generation.steps_kept), "pooling": POOLING,
                        "dims": {k: int(v.shape[1]) for k, v in generation.features.items()}},
        "probe": None if probe is None else {"per_layer": dict(probe),
                                             "best_layer": best_layer(probe) if probe else None},
        "judge": None,
        "code_version": code_version(), "git_commit": git_commit(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if judge is not None and verdict is not None:
        success = np.asarray(verdict.success, dtype=bool)

        def image_rows(prompts):
            if prompts is None:
                return None
            p = np.asarray(prompts, dtype=np.int64)
            return (p[:, None] * n_seeds + np.arange(n_seeds)).ravel()

        record["judge"] = {**judge.describe(), "slots": list(slot_names(family)), "success": success,
                           "slot_correct": np.asarray(verdict.slot_correct, dtype=bool),
                           "success_rate": float(success.mean()) if success.size else None,
                           "train_success_rate": _success_rate(success, image_rows(train_prompts)),
                           "test_success_rate": _success_rate(success, image_rows(test_prompts)),
                           "answers": verdict.answers}
    if extra:
        record.update(extra)
    return record


def write(path: str | os.PathLike, record: Mapping) -> Path:
    """The record as strict JSON at `path`, atomically."""
    return cli.write_text_atomic(path, cli.to_json(record) + "\n")


def read(path: str | os.PathLike) -> dict:
    record = json.loads(Path(path).read_text())
    if record.get("format") != FORMAT:
        raise cli.UsageError(f"{path} is not a {FORMAT} file")
    return record
