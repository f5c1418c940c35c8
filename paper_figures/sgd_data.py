"""The SGD runs behind figures 5–7, run once per process and shared.

Every run is one verify.sgd run (an SgdRun built from the plan, so the optimiser settings
are verify.sgd's defaults, the paper's: AdamW, lr 3e-4, weight decay 3e-3, batches of 32
tasks × 16 samples): a teacher, a random split of its supports, the construction at ε, and one
SGD-trained MLP per shape, all scored on training and held-out tasks. Figure 5 reads
the runs over ε (network size) at one split, figure 6 the runs over the held-out
fraction (number of training tasks) at one ε, figure 7 every distinct run of both. A run
both figures ask for (same ε and split) is trained once: reports are cached by their runs'
keys.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import verify.learning.sgd_program
from verify.learning.run_config import Runtime, SgdRun
from verify.studies.store import config_key

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


def run_of(p: SgdPlan, eps: float, held_out: float) -> SgdRun:
    """The verify.sgd run of one point of the plan (its other settings verify.sgd's defaults)."""
    return SgdRun.build(dict(I=p.I, H=p.H, O=p.O, M=p.M, K=p.K, eps=eps, split="random", held_out=held_out,
                             shapes=p.shapes, steps=p.steps, eval_samples=p.eval_samples, seed=p.seed))


# verify.sgd's reports by their runs' keys. A plain dict rather than lru_cache, so that how
# a run shows its training bars (--no-progress or not) is not part of the key.
_REPORTS: dict[str, dict] = {}


def clear_cache() -> None:
    _REPORTS.clear()


def _report(run: SgdRun, progress: bool | None) -> dict:
    key = config_key(run.key())
    if key not in _REPORTS:
        quiet = run.replace(runtime=Runtime(no_progress=progress is False))
        _REPORTS[key] = verify.learning.sgd_program.run(quiet)
    return _REPORTS[key]


def report(p: SgdPlan, eps: float, held_out: float, progress: bool | None = None) -> dict:
    """verify.sgd's report for one run, with the command line that reproduces it (`argv`; a
    copy: callers may annotate it). The run trains once per process, showing its bars on a
    terminal unless progress is False. Each row also carries its network's metrics as
    "<side>_<metric>" columns (the names the figures' data files use), composed from the
    report's records."""
    run = run_of(p, eps, held_out)
    r = copy.deepcopy(_report(run, progress)) | dict(eps=eps, held_out=held_out, argv=run.command_line())
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
