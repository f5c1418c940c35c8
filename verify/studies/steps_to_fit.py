"""python -m verify.studies.steps_to_fit STUDY: how many steps each arm of a study needs to fit
its training tasks (issue 43).

A held-out claim ("a larger model generalizes better") is about composition only where both
arms fit their training tasks; otherwise the larger network may only fit faster. This trains
one run per grid point of the study's scale (one seed, `--seed`), with the study's settings
but `--max-steps` steps, and every `--every` steps scores the network on the run's own
in-distribution evaluation tasks (the first `--tasks` of them; the paper's R², as verify.sgd
scores them), and on its held-out tasks. A run stops once the family's convergence rule has
held at `--hold` evaluations in a row (the hyperteacher: training R² ≥ 0.99), and the step
at which it first held is reported (the preference grid's rule: training accuracy ≥ 0.99, on
the run's whole evaluation sets). With the constant learning rate of the cpu scales, a run of S
steps is the first S steps of this one (the same stream of tasks), so one run gives
every shorter run's fit.

Its output (`--json`, or a table) is what a study file's steps rest on; it states the study,
scale, seed and settings that made it. Cost: one training run a grid point, at most
--max-steps steps each (scaling-model's cpu grid at 60,000: about 2 h on one core).
Studies of verify.sgd with MLP students, of either family.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

from verify import cli
from verify.cli import UsageError, positive_int
from verify.studies.grids import expand, study_program


class _Fitted(Exception):
    """Raised from the evaluation hook to end a run that has fit."""


def _score(net, samples, encode, tasks: int) -> float:
    from verify.learning.metrics import TaskSamples, compositional_r2_paper, predict

    part = TaskSamples(samples.z[:tasks], samples.x[:tasks], samples.y[:tasks])
    f = copy.deepcopy(net).double().eval()
    return compositional_r2_paper(predict(f, part, encode), part)


def _scorer(family, net, sides, tasks: int, seed: int):
    """score(side, metric): the network now, scored on that side. The hyperteacher's R² on the
    side's first `tasks` tasks (its full score also searches sup errors: too dear to repeat);
    another family's metric from its own score, on the whole side."""
    if family.name == "hyperteacher":
        return lambda side, metric: _score(net, sides[side][1], family.encode, tasks)

    def score(side: str, metric: str) -> float:
        f = copy.deepcopy(net).double().eval()
        metrics, _ = family.score("curve", f, {side: sides[side]}, seed)
        return next(m.value for m in metrics if m.metric == metric)
    return score


class _Curve:
    """The training loop's tracker (verify.learning.tracking's interface): at every
    `every`-th step it scores the network on both sides (the family's convergence metric on
    the training side, its headline held out) and stops the run once the convergence rule has
    held `hold` evaluations in a row."""

    def __init__(self, score, convergence: tuple[str, float], headline: str, every: int, hold: int):
        self.score, self.every, self.hold = score, every, hold
        (self.metric, self.threshold), self.headline = convergence, headline
        self.points: list[dict] = []
        self.start = time.perf_counter()

    def log(self, step: int, metrics: dict) -> None:
        if step % self.every:
            return
        point = {"step": step, f"train_{self.metric}": self.score("train", self.metric),
                 f"held_out_{self.headline}": self.score("held_out", self.headline),
                 "loss": metrics.get("train/loss"), "seconds": time.perf_counter() - self.start}
        self.points.append(point)
        print(json.dumps(point), file=sys.stderr, flush=True)
        recent = self.points[-self.hold:]
        if len(recent) == self.hold and all(p[f"train_{self.metric}"] >= self.threshold for p in recent):
            raise _Fitted

    def close(self) -> None:
        pass


def first_fit(points: list[dict], threshold: float, metric: str = "r2") -> int | None:
    """The first evaluated step from which the training metric stayed ≥ threshold to the end
    (None if the last evaluation is below it)."""
    step = None
    for p in points:
        if p[f"train_{metric}"] >= threshold:
            step = p["step"] if step is None else step
        else:
            step = None
    return step


def run_of(params: dict, max_steps: int):
    """The grid point's verify.sgd run at max_steps, one thread; UsageError for a point this
    measures nothing of (another family or student)."""
    from verify.learning import sgd_program
    from verify.learning.run_config import Runtime

    run = sgd_program.config_of({**params, "steps": max_steps})
    if run.student != "mlp":
        raise UsageError(f"steps_to_fit measures MLP students; a grid point here trains a {run.student}")
    return run.replace(runtime=Runtime(threads=1, no_progress=True, seeds=(run.seed,)))


def measure(run, every: int, tasks: int, hold: int) -> dict:
    """One run's curve (run_of): train R² and held-out R² every `every` steps, up to its steps or
    until it has fit."""
    from verify.learning import sgd_program
    from verify.learning.families import FAMILIES
    from verify.learning.train import train_student

    family = FAMILIES[run.family]
    (metric, threshold), headline = family.convergence, family.headline
    prep = sgd_program.prepare(run, progress=False)
    [(shape, (net, widths))] = prep.students.items()
    curve = _Curve(_scorer(prep.family, net, prep.sides, tasks, run.seed), family.convergence, headline,
                   every, hold)
    start = time.perf_counter()
    try:
        train_student(prep.family, prep.split.train, net, prep.train, progress=False, threads=1,
                      widths=widths, log_every=every, speed=prep.speed, tracker=curve)
    except _Fitted:
        pass
    # Under a decaying schedule the learning rate at step s depends on the run's length: only
    # the last point is a run of that length, the earlier ones are not shorter runs' fits.
    return dict(widths=widths, schedule=run.schedule, points_are_shorter_runs=run.schedule == "constant",
                threshold=threshold, metric=f"train {metric}", headline=f"held-out {headline}",
                first_fit_step=first_fit(curve.points, threshold, metric),
                last_step=curve.points[-1]["step"] if curve.points else 0,
                seconds=time.perf_counter() - start, points=curve.points)


def build_parser() -> cli.Parser:
    p = cli.Parser("python -m verify.studies.steps_to_fit", __doc__)
    p.add_argument("study", help="a verify.sgd study of MLP students (verify/studies/NAME.yaml)")
    p.add_argument("--scale", default="cpu", choices=("paper", "cpu", "smoke"),
                   help="the study's scale (default cpu)")
    p.add_argument("--seed", type=int, default=1, help="the one seed each grid point runs (default 1)")
    p.add_argument("--max-steps", type=positive_int, default=60_000, help="steps at most (default 60000)")
    p.add_argument("--every", type=positive_int, default=2_500,
                   help="evaluate every this many steps (default 2500)")
    p.add_argument("--tasks", type=positive_int, default=256,
                   help="evaluation tasks a side (the first of the run's 1,024; default 256)")
    p.add_argument("--hold", type=positive_int, default=2,
                   help="stop once the rule held at this many evaluations in a row (default 2)")
    p.add_argument("--only", nargs="+", metavar="K=V", default=[],
                   help="only the grid points whose parameters match, e.g. encoding=fewshot width=128")
    p.add_argument("--out", metavar="FILE", help="also append the JSON lines here, one a grid point as it "
                   "finishes (a file, a FIFO or a device, written in place; - for stdout)")
    cli.add_json(p)
    return p


def _matches(params: dict, only: list[str]) -> bool:
    for item in only:
        k, _, v = item.partition("=")
        if str(params.get(k)) != v:
            return False
    return True


def work(ns: argparse.Namespace) -> int:
    if study_program(ns.study) != "verify.sgd":
        raise UsageError(f"steps_to_fit measures verify.sgd studies; {ns.study} runs "
                         f"{study_program(ns.study)}")
    _, runs = expand(ns.study, ns.scale)
    points, seen = [], set()
    for r in runs:
        params = {**r.params, "seed": ns.seed}
        key = json.dumps(params, sort_keys=True, default=str)
        if key not in seen and _matches(params, ns.only):
            seen.add(key)
            points.append(params)
    if not points:
        raise UsageError(f"no grid point of {ns.study} ({ns.scale}) matches --only {' '.join(ns.only)}")
    if ns.every > ns.max_steps:
        raise UsageError("--every must be at most --max-steps")
    todo = [(params, run_of(params, ns.max_steps)) for params in points]  # refused before any work
    log = cli.LineLog(ns.out) if ns.out else None  # an unwritable --out is refused before the work
    results = []
    try:
        for i, (params, run) in enumerate(todo, 1):
            print(f"[{i}/{len(todo)}] {params}", file=sys.stderr, flush=True)
            result = dict(params={k: v for k, v in params.items() if k != "steps"})
            result |= measure(run, ns.every, ns.tasks, ns.hold)
            result |= dict(study=ns.study, scale=ns.scale, seed=ns.seed, max_steps=ns.max_steps,
                           every=ns.every, tasks=ns.tasks, hold=ns.hold)
            results.append(result)
            if log:
                log.write(json.dumps(result))
    finally:
        if log:
            log.close()
    if ns.json:
        cli.emit(cli.to_json(results))
    else:
        for r in results:
            last = r["points"][-1] if r["points"] else {}
            train, held = (v for k, v in last.items() if k.startswith(("train_", "held_out_")))
            print(f"{r['params']}: fits at {r['first_fit_step']} steps; at {r['last_step']}: {r['metric']} "
                  f"{train:.4f}, {r['headline']} {held:.4f} ({r['seconds']:.0f} s)"
                  + ("" if r["points_are_shorter_runs"] else
                     f"; {r['schedule']} schedule: the earlier points are not shorter runs' fits"))
    return 0


def main(argv=None) -> int:
    return cli.main_of("python -m verify.studies.steps_to_fit", build_parser().parse_args, work, argv)


if __name__ == "__main__":
    sys.exit(main())
