"""Metrics as typed records: one value per (network, side, metric).

A report carries its metrics as a list of these (as dicts in JSON), so that a reader (the
effects table, a figure, a user's notebook) selects by field, never by parsing a key such
as "held_out_r2" back into its parts. Sides are the scoring sets: `train` (fresh tasks on
the training supports), `held_out` (the held-out supports) and `k<j>` (tasks with j active
modules, more than any training task has).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Metric:
    network: str
    side: str
    metric: str
    value: float | None


def as_dicts(metrics: list[Metric]) -> list[dict]:
    return [asdict(m) for m in metrics]


def lookup(metrics: list[dict], network: str, side: str, metric: str, default=KeyError):
    """The value of one record (from a report's `metrics`); `default` when there is none,
    else KeyError."""
    for m in metrics:
        if m["network"] == network and m["side"] == side and m["metric"] == metric:
            return m["value"]
    if default is KeyError:
        raise KeyError((network, side, metric))
    return default


def sides_of(metrics: list[dict], network: str | None = None) -> list[str]:
    """The sides scored, in the order first seen."""
    return list(dict.fromkeys(m["side"] for m in metrics if network is None or m["network"] == network))


def mean_sd(values: list) -> tuple[float | None, float | None]:
    """Mean and sample sd (ddof 1; 0 for one value) of the finite values; None, None if none."""
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return None, None
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


# How reports stored before metrics were records named them (the committed cpu stores
# hold such reports): "<side>_<metric>" row keys, and the ratios under names of their own.
_LEGACY_RATIOS = {"held_out_over_train_sup": "sup_over_train", "held_out_over_train_rmse": "rmse_over_train",
                  "sgd_over_construction_held_out_sup": "sup_over_reference",
                  "sgd_over_construction_held_out_rmse": "rmse_over_reference"}
_LEGACY_METRICS = ("r2_nonconstant", "r2_pairs_used", "sup", "rmse", "r2")  # longest suffix first


def records_of(report: dict) -> list[dict]:
    """A report's metric records: its own `metrics`, or, for a report stored before they
    existed (a hyperteacher report of verify.sgd whose rows hold "<side>_<metric>" keys),
    the same records read from its rows. This is the one place such keys are parsed."""
    if "metrics" in report:
        return report["metrics"]
    out = []
    for row in report["rows"]:
        for key, value in row.items():
            if key in _LEGACY_RATIOS:
                out.append(asdict(Metric(row["network"], "held_out", _LEGACY_RATIOS[key], value)))
                continue
            for metric in _LEGACY_METRICS:
                side = key[:-len(metric) - 1]
                if key.endswith("_" + metric) and (side in ("train", "held_out") or
                                                   (side[:1] == "k" and side[1:].isdigit())):
                    out.append(asdict(Metric(row["network"], side, metric, value)))
                    break
    return out
