"""One verify.sgd run as a typed, frozen configuration (issue 33 part 2).

    SgdRun    the settings that decide a run's numbers: what a study's key hashes (`key()`),
              with the family's own settings as its Settings dataclass (`task`)
    Runtime   how it executes (device, threads, output, checkpoints, trackers): left out of
              the key

Every way into a run goes through `SgdRun.build(given)`: the command line (verify.sgd's
parse_args parses into the settings it was given), a study's grid point (its parameters, as
the study file types them) and the figures. `build` fills what was not given (the family's
defaults and optimiser, the --paper preset, the students' sizes and shapes) and refuses a
setting given where it does not apply. The instance then checks itself (`__post_init__`):
each value's type and range, by the same validators verify.sgd's flags use, and the rules
between settings (K ≤ M, a student's sizes, shapes and widths, the schedule, the family's
own); so a `dataclasses.replace` is checked too. Every refusal is one line (UsageError),
worded in verify.sgd's flags, before any work.

`SgdRun.from_key(config)` reads back a stored key (a study's stored run, replayed); the key
of the run it gives is that config again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

from constructions.catalogue import ENCODING_NAMES, SPLITS
from constructions.tasks.task_names import WEIGHTS
from verify import cli
from verify.cli import UsageError
from verify.learning.families import DEFAULT_FAMILY, FAMILIES
from verify.learning.settings import check_fields, checked, choice, flag, setting
from verify.learning.settings import typed as _typed
from verify.theorem.presets import CHECKPOINT_SECONDS, DECAYS, INITS, PRECISIONS, SCHEDULES, SHAPES, STUDENTS

# The official transformer (configs/teacher.py ModelConfig) and hypernetwork (d_ffw hidden
# units); a hypernetwork run records all four, as it always has (its key says so).
TRANSFORMER_DEFAULTS = dict(d_model=256, n_heads=4, n_layers=4, d_ffw=1024)
STUDENT_SIZES = {"d_model": ("transformer",), "n_heads": ("transformer",), "n_layers": ("transformer",),
                 "d_ffw": ("transformer", "hypernetwork")}
MLP_SETTINGS = ("shapes", "widths", "init")


def _per_family(name: str) -> str:
    """Each registered family's optimiser value of `name`, for a flag's help: 'hyperteacher 3e-4; …'."""
    return "; ".join(f"{family.name} {family.optimiser[name]:g}" for family in FAMILIES.values())


def family_name(text: str) -> str:
    """A registered family's name (the registry as it is now: a family registered later counts)."""
    return choice(tuple(FAMILIES))(text)


# --certify's settings (Runtime), their defaults and choices: verify.certify's, but for a budget
# of a minute per student rather than 15.
CERTIFY_SETTINGS = ("certify_seconds", "certify_ratio", "certify_tasks", "certify_z")
CERTIFY_DEFAULTS = dict(seconds=60.0, ratio=1.25, tasks="held_out", z="enumerate")
CERTIFY_TASKS = ("held_out", "all")
CERTIFY_Z = ("enumerate", "hull")


@dataclass(frozen=True)
class Runtime:
    """How a run executes: the settings that do not change its numbers (a study's key leaves
    them out)."""

    threads: int | None = None
    no_progress: bool = False
    json: bool = False
    save: str | None = None
    force: bool = False
    checkpoint: str | None = None
    checkpoint_minutes: float = CHECKPOINT_SECONDS / 60
    log_every: int | None = None
    precision: str | None = None
    compile: bool = False
    fused_adamw: bool | None = None
    device: str = "cpu"
    paper: bool = False
    seeds: tuple[int, ...] = (0,)
    log: object = None  # verify.learning.tracking.TrackerSpec, or None
    log_name: str | None = None  # the run's tracker name (default seed<N>)
    # --certify: each trained MLP student's sup error bracketed by verify.certify (its row gains
    # `certified`); it adds to the report and changes none of the run's numbers. None: the default.
    certify: bool = False
    certify_seconds: float | None = None  # budget per student, s (CERTIFY_DEFAULTS)
    certify_ratio: float | None = None  # stop at upper ≤ this × lower
    certify_tasks: str | None = None  # held_out, or all (the training supports too)
    certify_z: str | None = None  # enumerate, or hull

    def __post_init__(self):
        if self.precision is not None and self.precision not in PRECISIONS:
            raise UsageError(f"--precision {self.precision!r}: choose from {', '.join(PRECISIONS)}")
        if self.precision == "tf32" and self.device == "cpu":
            raise UsageError("--precision tf32 is a CUDA matmul mode; on the CPU use fp32 or bf16")
        for option, path in (("--save", self.save), ("--checkpoint", self.checkpoint)):
            if path == "":  # no folder: it was ignored, or read as the working folder
                raise UsageError(f"argument {option}: expected a file or folder name, got ''")
        if self.force and not self.save:
            raise UsageError("--force only applies to --save DIR")
        if not self.certify:
            for name in CERTIFY_SETTINGS:
                if getattr(self, name) is not None:
                    raise UsageError(f"--{name.replace('_', '-')} applies only with --certify")
        if self.certify_ratio is not None and self.certify_ratio < 1:
            raise UsageError(f"--certify-ratio {self.certify_ratio:g}: expected a ratio ≥ 1 (upper ÷ lower)")
        if self.certify_seconds is not None and self.certify_seconds < 0:
            raise UsageError(f"--certify-seconds {self.certify_seconds:g}: expected seconds ≥ 0")
        if self.certify_tasks not in (None, *CERTIFY_TASKS):
            raise UsageError(f"--certify-tasks {self.certify_tasks!r}: choose from "
                             f"{', '.join(CERTIFY_TASKS)}")
        if self.certify_z not in (None, *CERTIFY_Z):
            raise UsageError(f"--certify-z {self.certify_z!r}: choose from {', '.join(CERTIFY_Z)}")

    def certify_settings(self) -> dict:
        """--certify's settings, the defaults filled: seconds, ratio, tasks, z."""
        given = dict(seconds=self.certify_seconds, ratio=self.certify_ratio, tasks=self.certify_tasks,
                     z=self.certify_z)
        return {k: CERTIFY_DEFAULTS[k] if v is None else v for k, v in given.items()}


@dataclass(frozen=True)
class SgdRun:
    """The settings of one verify.sgd run that decide its numbers; see the module docstring."""

    family: str = setting(DEFAULT_FAMILY, family_name)
    task: object = None  # the family's Settings (its own settings); build() fills it
    # the task
    M: int = setting(8, cli.positive_int)
    K: int = setting(2, cli.positive_int)
    encoding: str = setting("identity", choice(ENCODING_NAMES))
    weights: str = setting("discrete", choice(WEIGHTS))
    seed: int = setting(0, cli.seed)
    split: str = setting("random", choice(SPLITS), help="which supports are held out")
    held_out: float = setting(0.25, cli.open_fraction,
                              help="held-out fraction of supports, in (0, 1), for every split except "
                                   "non_compositional (missing-module) and popular-modules-half")
    # the student
    student: str = setting("mlp", choice(STUDENTS), help="what is trained: MLPs (one per --shapes), or the "
                                                        "paper's transformer or hypernetwork")
    # An MLP's shapes; a transformer's or hypernetwork's run names its student here (its flag,
    # which offers the MLP shapes only, is verify.sgd's own).
    shapes: tuple[str, ...] = setting(("matched", "balanced"), choice((*SHAPES, *STUDENTS[1:])), many=True)
    widths: tuple[int, ...] | None = setting(None, cli.positive_int, many=True, optional=True,
                                             help="hidden widths for --shapes custom, e.g. 1024 1024 1024")
    init: str = setting("lecun_normal", choice(INITS),
                        help="MLP initialisation: lecun_normal (the paper's, Flax's default: truncated "
                             "LeCun-normal kernels, zero biases) or torch_default")
    d_model: int | None = setting(None, cli.positive_int, optional=True, help="transformer width")
    n_heads: int | None = setting(None, cli.positive_int, optional=True, help="transformer attention heads")
    n_layers: int | None = setting(None, cli.positive_int, optional=True, help="transformer blocks")
    d_ffw: int | None = setting(None, cli.positive_int, optional=True,
                                help="hidden units of the transformer's MLPs and of the hypernetwork's "
                                     "generated network")
    # training
    steps: int = setting(1500, cli.positive_int, help="training steps")
    tasks_per_batch: int = setting(32, cli.positive_int, help="tasks per step")
    lr: float = setting(None, cli.positive_float,  # None: the family's optimiser's
                        help="AdamW learning rate (default the family's: " + _per_family("lr") + ")")
    weight_decay: float = setting(None, cli.non_negative_float,
                                  help="AdamW weight decay, ≥ 0 (default the family's: "
                                       + _per_family("weight_decay") + ")")
    decay: str = setting("matrices", choice(DECAYS),
                         help="which parameters are decayed: matrices (the paper's mask: no biases, no "
                              "norms) or all")
    schedule: str = setting("constant", choice(SCHEDULES),
                            help="learning-rate schedule: constant (the paper's configs) or cosine (the "
                                 "official run.py's other one: linear warmup from 0, cosine decay to lr/10)")
    warmup_steps: int = setting(1000, cli.non_negative_int,
                                help="cosine only: steps of linear warmup; the decay lasts steps − 2 × this, "
                                     "as run.py sets it")
    # scoring
    eval_tasks: int = setting(1024, cli.positive_int,
                              help="tasks on each side (in-distribution, held out, each K+j) for RMSE, R² "
                                   "and the probe, drawn uniformly from that side's supports")
    extra_modules: int = setting(2, cli.non_negative_int,
                                 help="also score tasks with K+1 … K+this many active modules (at most M), "
                                      "which no training task has; 0 to skip")
    runtime: Runtime = field(default_factory=Runtime, compare=False, repr=False)

    # ------------------------------------------------------------------ checks

    def __post_init__(self):
        family = FAMILIES[checked("family", self.family, family_name)]
        # What a direct construction leaves unset is the family's (build() sets it already).
        if self.task is None:
            object.__setattr__(self, "task", family.Settings())
        for name, value in family.optimiser.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if not isinstance(self.task, family.Settings):
            raise UsageError(f"SgdRun.task must be the {family.name} family's settings "
                             f"({family.Settings.__name__}), got {type(self.task).__name__}")
        check_fields(self)
        check_fields(self.task)
        if self.K > self.M:
            raise UsageError(f"--K must be at most --M (got K={self.K}, M={self.M})")
        self._check_student(family)
        if self.schedule == "cosine" and self.steps <= 2 * self.warmup_steps:
            raise UsageError(f"--schedule cosine needs --steps > 2 × --warmup-steps (got {self.steps} and "
                             f"{self.warmup_steps}): its decay lasts steps − 2 × warmup, as the official "
                             "run.py sets it")
        family.validate(self)

    def _check_student(self, family) -> None:
        sizes = [getattr(self, name) for name in TRANSFORMER_DEFAULTS]
        if self.student != "mlp":
            if self.shapes != (self.student,) or self.widths is not None:
                raise UsageError(f"--shapes and --widths apply to --student mlp, not {self.student}")
            if None in sizes:
                raise UsageError(f"a {self.student} needs its sizes: --d-model, --n-heads, --n-layers, "
                                 "--d-ffw")
            if self.student == "transformer" and self.d_model % self.n_heads:
                raise UsageError(f"--d-model {self.d_model} must be a multiple of --n-heads {self.n_heads}")
            return
        if any(v is not None for v in sizes):
            raise UsageError("--d-model, --n-heads, --n-layers and --d-ffw apply to --student transformer "
                             "or hypernetwork, not mlp")
        if set(self.shapes) - set(family.shapes):
            raise UsageError(f"--shapes {' '.join(self.shapes)}: "
                             + (family.shapes_note or f"the {family.name} family offers --shapes "
                                                      f"{' '.join(family.shapes)}"))
        if self.widths is not None and "custom" not in self.shapes:
            raise UsageError("--widths applies only to --shapes custom (got --shapes "
                             f"{' '.join(self.shapes)}); add custom to --shapes or drop --widths")
        if "custom" in self.shapes and not self.widths:
            raise UsageError("--shapes custom needs --widths, e.g. --widths 1024 1024 1024 1024")

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, given: dict, *, paper: bool = False, runtime: Runtime | None = None) -> SgdRun:
        """The run of the settings `given` (by name; a value None counts as not given), with
        everything else filled: --paper's preset (`paper`) under what is given, the family's
        defaults and optimiser, the students' shapes, widths and sizes. UsageError (one line)
        for a setting given where it does not apply."""
        given = {k: v for k, v in given.items() if v is not None}
        unknown = set(given) - setting_names()
        if unknown:
            raise UsageError(f"verify.sgd has no setting {sorted(unknown)[0]!r}")
        name = checked("family", given.get("family", DEFAULT_FAMILY), family_name)
        family = FAMILIES[name]
        own = set(family.settings)
        for other in FAMILIES.values():
            for setting_name in set(other.settings) - own:
                if setting_name in given:
                    raise UsageError(f"{flag(setting_name)} applies to --family {other.name}, not {name}")
        preset = {k: v for k, v in family.paper_preset.items() if k != "seed"} if paper else {}
        values = {**preset, **given}
        task = family.Settings(**{k: _typed(family.Settings, k, v) for k, v in values.items() if k in own})
        common = {k: _typed(cls, k, v) for k, v in values.items() if k not in own and k != "family"}
        for k, v in family.optimiser.items():
            common.setdefault(k, v)
        if common.get("schedule", "constant") == "constant" and "warmup_steps" in given:
            raise UsageError("--warmup-steps applies to --schedule cosine (the constant schedule has no "
                             "warmup, as in the official run.py)")
        common.update(_student_settings(common, family, paper))
        return cls(family=name, task=task, runtime=runtime or Runtime(), **common)

    @classmethod
    def from_key(cls, config: dict, runtime: Runtime | None = None) -> SgdRun:
        """The run whose key is `config` (a stored run's, as key() wrote it)."""
        name = config.get("family", DEFAULT_FAMILY)
        family = FAMILIES[name]
        own = set(family.settings)
        task = family.Settings(**{k: _typed(family.Settings, k, v) for k, v in config.items() if k in own})
        common = {k: _typed(cls, k, v) for k, v in config.items() if k not in own and k != "family"}
        return cls(family=name, task=task, runtime=runtime or Runtime(), **common)

    def command_line(self) -> list[str]:
        """verify.sgd's flags for this run: the settings that differ from what build() fills
        for its family and student (parse_args of them gives this run again)."""
        base = SgdRun.build({"family": self.family, "student": self.student}).settings()
        out = [f for name in ("family", "student") if getattr(self, name) != SgdRun.build({}).settings()[name]
               for f in (flag(name), getattr(self, name))]
        for name, value in self.settings().items():
            if name in ("family", "student") or value is None or value == base[name]:
                continue
            if isinstance(value, bool):  # a switch: its flag when on (off is the default)
                out.append(flag(name))
            else:
                out += [flag(name), *map(str, value if isinstance(value, list) else [value])]
        return out

    def replace(self, **changes) -> SgdRun:
        """A copy with `changes` (settings or `runtime`), checked as a new run is."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ the key

    def settings(self) -> dict:
        """Every setting by name, the family's own flat beside the rest (lists for tuples)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("task", "runtime")}
        out.update({f.name: getattr(self.task, f.name) for f in fields(self.task)})
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def key(self) -> dict:
        """The run's configuration as a study keys it: every setting, sorted. Settings added
        later leave themselves out at their old behaviour (the default family; the constant
        schedule, and with it the warmup it ignores; M ≤ F kept), so the keys of runs stored
        before them stay valid."""
        constant = self.schedule == "constant"
        return {k: v for k, v in sorted(self.settings().items())
                if not (k == "family" and v == DEFAULT_FAMILY)
                and not (constant and k in ("schedule", "warmup_steps"))
                and not (k == "allow_M_above_F" and not v)}


def setting_names() -> set[str]:
    """Every setting's name: SgdRun's own and each registered family's."""
    common = {f.name for f in fields(SgdRun)} - {"task", "runtime"}
    return common.union(*(family.settings for family in FAMILIES.values()))


def _student_settings(common: dict, family, paper: bool) -> dict:
    """The student's settings with what was not given filled: a transformer's or
    hypernetwork's sizes, an MLP's shapes and widths (the family's, or --paper's); a size
    given to the wrong student is refused here, where it is known to be given."""
    student = common.get("student", "mlp")
    for name, students in STUDENT_SIZES.items():
        if name in common and student not in students:
            raise UsageError(f"{flag(name)} applies to --student {' or '.join(students)}, not {student}")
    if student != "mlp":
        given = [name for name in MLP_SETTINGS if name in common]
        if given:
            raise UsageError(f"{flag(given[0])} applies to --student mlp, not {student}")
        return {"shapes": (student,), "widths": None,
                **{k: common.get(k, v) for k, v in TRANSFORMER_DEFAULTS.items()}}
    shapes = tuple(common.get("shapes") or (("custom",) if paper else family.default_shapes))
    widths = common.get("widths")
    if widths is None and "custom" in shapes:  # the family's, or --paper's (SgdRun checks the rest)
        widths = family.paper_widths if paper else family.default_widths
    return {"shapes": shapes, "widths": None if widths is None else tuple(widths)}
