"""A run saved by `python -m verify.sgd --save DIR`, read back for certification: its teacher,
encoder and split (rebuilt from report.json's settings, and checked against the split's recorded
counts), and its trained MLP students (sgd_<shape>.pt)."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verify.cli import UsageError


@dataclass
class SavedRun:
    folder: Path
    report: dict
    teacher: object
    encoder: object
    split: object
    students: dict  # {row name "sgd <shape>": (nn.Sequential in float64, widths)}


def load_run(folder) -> SavedRun:
    """UsageError (one line) for a folder that is not a hyperteacher MLP run of verify.sgd --save."""
    import torch

    from constructions.tasks.encodings import make_encoder
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
    from constructions.tasks.splits import make_split
    from verify.learning.train import mlp

    folder = Path(folder)
    path = folder / "report.json"
    if not path.is_file():
        raise UsageError(
            f"RUN {str(folder)!r} holds no report.json: give a folder written by "
            "`python -m verify.sgd --save DIR`"
        )
    try:
        report = json.loads(path.read_text())
        task, split_info = report["task"], report["split"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{str(path)!r} is not a verify.sgd report") from None
    if report.get("family", "hyperteacher") != "hyperteacher":
        raise UsageError(
            f"RUN {str(folder)!r} is a {report['family']} run; only hyperteacher runs can be certified"
        )
    if report.get("student", "mlp") != "mlp":
        raise UsageError(
            f"RUN {str(folder)!r} trained a {report['student']}; only MLP students can be certified"
        )
    encoding = task["encoding"]
    cfg = HyperteacherConfig(
        I=task["I"],
        H=task["H"],
        O=task["O"],
        M=task["M"],
        K=task["K"],
        weights=task["weights"],
        encoding="orthogonal" if encoding == "orthogonal" else "identity",
        seed=task["seed"],
    )
    teacher = sample_hyperteacher(cfg)
    encoder = make_encoder(encoding, teacher, seed=task["seed"])
    if encoder.stochastic:
        raise UsageError(
            f"the {encoding} encoding shows a task through random samples: e(z) is not a "
            "function of z, and there is nothing fixed to certify"
        )
    allowed = set(inspect.signature(make_split).parameters) - {"name", "M", "K"}
    params = {
        k: (tuple(v) if isinstance(v, list) else v)
        for k, v in split_info.get("params", {}).items()
        if k in allowed
    }
    split = make_split(split_info["name"], task["M"], task["K"], **params)
    if (len(split.train), len(split.test)) != (split_info["n_train"], split_info["n_test"]):
        raise UsageError(
            f"the split rebuilt from {str(path)!r} has {len(split.train)} / {len(split.test)} "
            f"supports, the run recorded {split_info['n_train']} / {split_info['n_test']}"
        )
    students = {}
    for row in report.get("rows", []):
        name = row.get("network", "")
        if not name.startswith("sgd ") or not row.get("widths"):
            continue
        shape = name[len("sgd ") :]
        pt = folder / f"sgd_{shape}.pt"
        if not pt.is_file():
            raise UsageError(f"RUN {str(folder)!r} lists {name!r} but holds no {pt.name}")
        net = mlp(encoder.dim + teacher.I, list(row["widths"]), teacher.O)
        net.load_state_dict(torch.load(pt, map_location="cpu"))
        students[name] = (net.double().eval(), list(row["widths"]))
    if not students:
        raise UsageError(f"RUN {str(folder)!r} holds no trained MLP student (sgd_<shape>.pt)")
    return SavedRun(folder, report, teacher, encoder, split, students)


def support_tasks(supports: np.ndarray, levels: np.ndarray, M: int) -> tuple[np.ndarray, np.ndarray]:
    """Every task of the supports (S, K) padded with −1: each support with every tuple of the weight
    levels on it. Returns (z (T, M), the support's row per task (T,))."""
    import itertools

    zs, rows = [], []
    for s, row in enumerate(supports):
        S = row[row >= 0]
        for w in itertools.product(levels, repeat=len(S)):
            z = np.zeros(M)
            z[S] = w
            zs.append(z)
            rows.append(s)
    return np.array(zs).reshape(-1, M), np.array(rows, dtype=np.int64)
