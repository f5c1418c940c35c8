"""Names and defaults the verify CLIs offer, importable without torch (so `--help` answers at once)."""

from dataclasses import asdict, dataclass, replace

# Hidden-layer shapes of an SGD student: the construction's widths, two (or four) equal
# layers with the same number of units, or widths given with --widths.
SHAPES = ("matched", "balanced", "balanced4", "custom")
# The students verify.sgd trains (the paper's three, compscale/model/policy.py).
STUDENTS = ("mlp", "transformer", "hypernetwork")
# Initialisations of an MLP student: the paper's (Flax default) or torch's own.
INITS = ("lecun_normal", "torch_default")
# Which parameters AdamW decays: the paper's mask (matrices only) or every one.
DECAYS = ("matrices", "all")
CHECKPOINT_SECONDS = 600.0  # wall-clock time between training checkpoints, not every N steps
PRECISIONS = ("fp32", "tf32", "bf16")  # how float32 matmuls run in training (verify.learning.train.Speed)
SCHEDULES = ("constant", "cosine")  # the official run.py's learning-rate schedules
# How many tasks the measurer takes by default: every support up to this many, else a
# sample of this many (verify.measure, verify.bound --max-tasks, the exact level tasks).
MAX_TASKS = 20_000


@dataclass(frozen=True)
class MeasureBudget:
    """How hard verify.measure searches, stage by stage. A stage whose budget is 0 is
    skipped, and no other stage with it.

    1. random points: `points_per_task` x on each of `max_tasks` tasks (at least 1: this
       stage ranks the tasks every later stage starts from);
    2. gradient ascent: `refine_tasks` × `refine_starts` paths from the worst tasks, of
       `refine_steps` steps each (0 steps or 0 starts: no ascent);
    3. line searches from the worst tasks (the ascent's path ends, else the random stage's
       best points): `line_evaluations` before verify.measure's LINE_BOOST, which raises it
       for a cheap network. None: as many as the ascent spent, so a lighter or heavier
       search is so in both stages; with the ascent off, the default ascent's
       (DEFAULT_LINE_EVALUATIONS), so turning the ascent off does not starve them. A
       budget below one start's cost still buys one start (one sweep of every coordinate);
    4. for I ≤ 2, a grid of `grid_points` per axis of x (None: 4097 for I = 1, 257 for I = 2).
    `refine_tasks` = 0 leaves stages 2 and 3 nothing to start from.
    """

    max_tasks: int = MAX_TASKS
    points_per_task: int = 16
    refine_tasks: int = 32
    refine_starts: int = 16
    refine_steps: int = 100
    line_evaluations: int | None = None
    grid_points: int | None = None

    def __post_init__(self):
        for name, value in vars(self).items():
            if value is not None and value < 0:
                raise ValueError(f"MeasureBudget.{name} must be ≥ 0, got {value}")
        if self.max_tasks < 1 or self.points_per_task < 1:
            raise ValueError("MeasureBudget: max_tasks and points_per_task must be ≥ 1 "
                             f"(got {self.max_tasks}, {self.points_per_task})")

    def kwargs(self) -> dict:
        """The fields as measure_sup_error's keyword arguments (a dict callers can merge)."""
        return asdict(self)

    def scaled(self, fraction: float) -> "MeasureBudget":
        """This search cut to `fraction` of its cost: the random stage's tasks and the
        ascent's steps (and so the line searches, which spend what the ascent did unless set)
        × fraction, at least one of each; the stages stay as they are."""
        if not 0 < fraction <= 1:
            raise ValueError(f"MeasureBudget.scaled: the fraction must be in (0, 1], got {fraction}")
        if fraction == 1:
            return self
        def cut(n):
            return n if n is None or n == 0 else max(1, round(n * fraction))
        return replace(self, max_tasks=cut(self.max_tasks), refine_steps=cut(self.refine_steps),
                       line_evaluations=cut(self.line_evaluations))


# The presets, every one here. The default is what verify.bound and the power test run.
DEFAULT_MEASURE = MeasureBudget()
# The default ascent's evaluations (32 × 16 paths of 101 points): the line searches' own
# budget when the ascent is off.
DEFAULT_LINE_EVALUATIONS = DEFAULT_MEASURE.refine_tasks * DEFAULT_MEASURE.refine_starts * (
    DEFAULT_MEASURE.refine_steps + 1)
# verify.sweep's fast path: every point of a grid over ε, M, K and seeds is measured.
SWEEP_MEASURE = MeasureBudget(max_tasks=2000, points_per_task=8, refine_tasks=16, refine_starts=8,
                              refine_steps=50)
# verify.sweep's preflight needs verify_point's refusals (memory, 2^40 knots, float64), not
# a measurement: one random point, no other stage.
PREFLIGHT_MEASURE = MeasureBudget(max_tasks=1, points_per_task=1, refine_tasks=0, refine_starts=0,
                                  refine_steps=0, line_evaluations=0, grid_points=0)
# verify.sgd's sup error of a trained student, on each side's supports.
SGD_MEASURE = MeasureBudget(max_tasks=2000, points_per_task=8, refine_tasks=16, refine_starts=8,
                            refine_steps=60)
# The tests' light measurement of small instances (the default takes ~10× longer).
TEST_MEASURE = MeasureBudget(points_per_task=8, refine_tasks=8, refine_starts=8, refine_steps=40)

# The constructions whose error has the phase form of theory/instance.py (deep computes the
# shallow network with N = 2^(m+1) on the box), so `--bound instance` can bound it.
INSTANCE_BOUND_CONSTRUCTIONS = ("shallow", "deep")
