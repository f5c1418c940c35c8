"""Names and defaults the verify CLIs offer, importable without torch (so `--help` answers at once)."""

# Hidden-layer shapes of an SGD student: the construction's widths, two (or four) equal
# layers with the same number of units, or widths given with --widths.
SHAPES = ("matched", "balanced", "balanced4", "custom")
# The students verify.sgd trains (the paper's three, compscale/model/policy.py).
STUDENTS = ("mlp", "transformer", "hypernetwork")
# Initialisations of an MLP student: the paper's (Flax default) or torch's own.
INITS = ("lecun_normal", "torch_default")
# Which parameters AdamW decays: the paper's mask (matrices only) or every one.
DECAYS = ("matrices", "all")
# How many tasks the measurer takes by default: every support up to this many, else a
# sample of this many (verify.measure, verify.bound --max-tasks, the exact level tasks).
MAX_TASKS = 20_000

# The constructions whose error has the phase form of theory/instance.py (deep computes the
# shallow network with N = 2^(m+1) on the box), so `--bound instance` can bound it.
INSTANCE_BOUND_CONSTRUCTIONS = ("shallow", "deep")
