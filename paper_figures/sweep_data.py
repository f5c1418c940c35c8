"""The ε-sweep behind figures 1 and 3, run once per process and shared.

Both figures read the same `verify.sweep.run_sweep` rows (fig. 1 the sizes counted on the
built networks, fig. 3 their certificates and measured errors), so building and
measuring every point once halves the default run's time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from verify.theorem.sweep import FAST_MEASURE, SweepConfig, run_sweep


@dataclass(frozen=True)
class SweepPlan:
    sweep: SweepConfig
    measure: tuple[tuple[str, int], ...]  # a hashable dict, so plans can key the cache


# Half-decade steps over six decades of ε; the ε-slope is fitted on ε ≤ 1e-3, where the
# ceiling in N and the additive M + H move the log-count by under 1%.
DEFAULT = SweepPlan(
    sweep=SweepConfig(eps=(1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6),
                      M=(4, 16, 64), K=(3,), seeds=(0, 1, 2), asymptotic_eps=1e-3),
    measure=tuple(FAST_MEASURE.items()),
)
# A few seconds: tiny teacher, three ε, one seed, a token measurement budget.
QUICK = SweepPlan(
    sweep=SweepConfig(eps=(1e-1, 1e-2, 1e-3), M=(3, 6), K=(2,), seeds=(0,), I=3, H=3, O=3,
                      asymptotic_eps=1e-1),
    measure=tuple(dict(max_tasks=40, points_per_task=4, refine_tasks=4, refine_starts=2,
                       refine_steps=10).items()),
)


def plan(quick: bool, seed: int) -> SweepPlan:
    """The plan with its seeds shifted to start at `seed`."""
    base = QUICK if quick else DEFAULT
    seeds = tuple(seed + s for s in base.sweep.seeds)
    return replace(base, sweep=replace(base.sweep, seeds=seeds))


# One sweep per plan and process; a plain dict rather than lru_cache, so that `progress`
# (how the first caller shows the sweep) is not part of the key.
_ROWS: dict[SweepPlan, tuple[dict, ...]] = {}


def sweep_rows(p: SweepPlan, progress: bool | None = None) -> list[dict]:
    """run_sweep's rows for the plan (copies: callers may annotate them). The sweep runs on
    the first call only, with a bar (see verify.cli.progress) unless progress is False."""
    if p not in _ROWS:
        _ROWS[p] = tuple(run_sweep(p.sweep, measure=dict(p.measure), progress=progress))
    return [dict(r) for r in _ROWS[p]]
