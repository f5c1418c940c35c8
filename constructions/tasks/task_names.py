"""The task family's names the CLIs offer, importable without torch (so `--help` answers at
once). Each tuple is the one source of its names: the modules that implement them import it.
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
