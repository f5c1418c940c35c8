"""The names the CLIs offer, importable without torch (so `--help` answers at once).

Each tuple is the one source of its names: the modules that implement them import it
from here, and `constructions.registry` checks that its builders match CONSTRUCTIONS.
"""

WEIGHTS = ("khot", "discrete", "continuous")  # weights of a task's active modules
ENCODINGS = ("identity", "orthogonal")  # the teacher's own task encodings e(z)
# Every encoding a student can be trained on; the linear ones the construction reads too.
ENCODING_NAMES = ("identity", "orthogonal", "interval_shuffle", "invertible_nn", "tokens", "fewshot",  # paper
                  "invertible_nn_tanh", "tokens_sparse", "fewshot_fixed_x")  # this project's own variants
LINEAR_ENCODINGS = ("identity", "orthogonal")
# The paper's six task supports (official names), this project's own two, then the names this
# project used before, kept as aliases (alias, official name) so typed commands keep working.
SPLIT_ALIASES = (("missing-module", "non_compositional"), ("rare-modules", "unpopular_modules"),
                 ("popular-modules", "popular_modules"))
SPLITS = ("random", "equal", "pseudo_random_disconnected", "non_compositional", "popular_modules",
          "unpopular_modules", "popular-modules-half", "rare-modules-fraction",
          *(alias for alias, _ in SPLIT_ALIASES))
CONSTRUCTIONS = ("shallow", "exact", "deep", "optimal")
CONSTRUCTION_HELP = {
    "shallow": "the theorem's network, O(1/√ε + M) units",
    "exact": "gated units, zero error for khot/discrete weights",
    "deep": "sawtooth squares, O(log 1/ε) units",
    "optimal": "a range and N per product",
}
# `optimal` is about each product's own exact range; the others default to the a-priori
# bound, which holds for every draw of the teacher.
DEFAULT_CONSTANTS = {"optimal": "instance"}


def default_constants(name: str) -> str:
    return DEFAULT_CONSTANTS.get(name, "apriori")
