"""The SGD runs behind figures 5–7, run once per process and shared.

Every run is one call of `verify.sgd` (its parser, so the optimiser settings are its
defaults, the paper's: AdamW, lr 3e-4, weight decay 3e-3, batches of 32 tasks × 16
samples): a teacher, a random split of its supports, the construction at ε, and one
SGD-trained MLP per shape, all scored on training and held-out tasks. Figure 5 reads
the runs over ε (network size) at one split, figure 6 the runs over the held-out
fraction (number of training tasks) at one ε, figure 7 every distinct run of both. A run
both figures ask for (same ε and split) is trained once: reports are cached by their
`verify.sgd` arguments.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import verify.learning.sgd

SHAPES = ("matched", "balanced")


@dataclass(frozen=True)
class SgdPlan:
    I: int
    H: int
    O: int
    M: int
    K: int
    steps: int
    eval_samples: int
    size_eps: tuple[float, ...]  # figure 5: one run per ε, at size_held_out
    size_held_out: float
    tasks_eps: float  # figure 6: one run per held-out fraction, at this ε
    held_out: tuple[float, ...]
    shapes: tuple[str, ...] = SHAPES
    seed: int = 0


# The verify.sgd teacher (I = H = O = 4, M = 8, K = 2: 36 supports). Matched widths are the
# construction's ([872, 4] at ε = 3e-2) and cost little; balanced ones are two equal layers whose cost
# per step grows with the square of the size, which is what bounds ε from below here (ε = 1e-2: 1,484
# hidden units, ~25 ms a step on one core). Figure 6 uses ε = 3e-2 (876 units) so that
# five splits (8, 11, 15, 18 and 27 training supports) fit the budget; its held-out
# fraction 0.25 is figure 5's split, so that run is shared.
DEFAULT = SgdPlan(I=4, H=4, O=4, M=8, K=2, steps=3000, eval_samples=16,
                  size_eps=(1e-1, 3e-2, 1e-2), size_held_out=0.25,
                  tasks_eps=3e-2, held_out=(0.8, 0.7, 0.6, 0.5, 0.25))
# A few seconds: a 2-2-2 teacher over 4 modules (10 supports), 50 steps, 8 x per task.
QUICK = SgdPlan(I=2, H=2, O=2, M=4, K=2, steps=50, eval_samples=8,
                size_eps=(1e-1, 3e-2), size_held_out=0.3,
                tasks_eps=1e-1, held_out=(0.6, 0.3))


def plan(quick: bool, seed: int) -> SgdPlan:
    return replace(QUICK if quick else DEFAULT, seed=seed)


def argv(p: SgdPlan, eps: float, held_out: float) -> tuple[str, ...]:
    """The `python -m verify.sgd` arguments of one run (also its cache key)."""
    return ("--I", str(p.I), "--H", str(p.H), "--O", str(p.O), "--M", str(p.M), "--K", str(p.K),
            "--eps", repr(eps), "--split", "random", "--held-out", repr(held_out),
            "--shapes", *p.shapes, "--steps", str(p.steps), "--eval-samples", str(p.eval_samples),
            "--seed", str(p.seed))


# verify.sgd's reports by their arguments. A plain dict rather than lru_cache, so that how
# a run shows its training bars (--no-progress or not) is not part of the key.
_REPORTS: dict[tuple[str, ...], dict] = {}


def clear_cache() -> None:
    _REPORTS.clear()


def _report(args: tuple[str, ...], progress: bool | None) -> dict:
    if args not in _REPORTS:
        flags = ["--no-progress"] if progress is False else []
        _REPORTS[args] = verify.learning.sgd.run(verify.learning.sgd.parse_args([*args, *flags]))
    return _REPORTS[args]


def report(p: SgdPlan, eps: float, held_out: float, progress: bool | None = None) -> dict:
    """verify.sgd's report for one run, with its arguments (a copy: callers may annotate it).
    The run trains once per process, showing its bars on a terminal unless progress is False.
    Each row also carries its network's metrics as "<side>_<metric>" columns (the names the
    figures' data files use), composed from the report's records."""
    args = argv(p, eps, held_out)
    r = copy.deepcopy(_report(args, progress)) | dict(eps=eps, held_out=held_out, argv=list(args))
    for row in r["rows"]:
        mine = [m for m in r["metrics"] if m["network"] == row["network"]]
        row |= {f"{m['side']}_{m['metric']}": m["value"] for m in mine}
    return r


def size_reports(p: SgdPlan, progress: bool | None = None) -> list[dict]:
    """Figure 5: one report per ε (growing network size) at the split size_held_out."""
    return [report(p, eps, p.size_held_out, progress) for eps in p.size_eps]


def task_reports(p: SgdPlan, progress: bool | None = None) -> list[dict]:
    """Figure 6: one report per held-out fraction (fewest training tasks first) at tasks_eps."""
    return [report(p, p.tasks_eps, f, progress) for f in sorted(p.held_out, reverse=True)]


def all_reports(p: SgdPlan, progress: bool | None = None) -> list[dict]:
    """Figure 7: every distinct run of figures 5 and 6, each once, tagged with its figures."""
    out: dict[tuple[str, ...], dict] = {}
    for figure, reports in (("fig5", size_reports(p, progress)), ("fig6", task_reports(p, progress))):
        for r in reports:
            key = tuple(r["argv"])
            out.setdefault(key, r | dict(figures=[]))["figures"].append(figure)
    return list(out.values())


def sgd_rows(r: dict) -> list[dict]:
    """The report's trained networks (every row after the construction's), with their shape."""
    return [row | dict(shape=row["network"].removeprefix("sgd ")) for row in r["rows"][1:]]
