"""Task splits over supports: which module combinations are trained on, which are held out.

Compositional generalization is measured on tasks whose *combination* of modules was
never trained on, while every module was (spec: train on some supports, test on the rest).
A split partitions all supports of size 1..K (`enumerate_supports(M, K)`) into a training
and a held-out set; tasks of a support differ only in their weights, so splitting supports
rather than latents keeps every held-out combination truly unseen.

Four protocols, the names of `SPLITS`:

- `random`: a fraction of supports held out uniformly, resampled until the training
  supports use every module and their co-occurrence graph is connected (otherwise the
  held-out set would contain modules, or groups of modules, that never met in training
  and the test would measure something other than recombination).
- `missing-module`: one module never appears in training. The control where
  compositional generalization *should* fail.
- `rare-modules`: a few modules appear in training in only a small fraction of their
  supports (the paper finds rare modules hurt generalization).
- `popular-modules`: a few modules appear in every training support they can (the paper
  finds popular modules are harmless).

K = 1 only works for `missing-module`: a support of size one is a single module, so
holding out any task removes its module from training entirely, and no two modules ever
co-occur. The other three protocols then degenerate into a missing-module split and
`make_split` refuses them rather than return something misleadingly named.

Train and test rows keep the order of `enumerate_supports`, so a split is a mask on that
table and two splits can be compared row by row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from constructions.hyperteacher import enumerate_supports
from constructions.names import SPLITS  # noqa: F401  (re-exported)


@dataclass(frozen=True, eq=False)  # eq=False: field-wise == on arrays has no truth value
class TaskSplit:
    """A partition of all supports of size 1..K over M modules into train and test.

    `train` and `test` are (S, K) int64 arrays of module indices padded with -1, in the
    format of `enumerate_supports`, disjoint, and together all n_supports(M, K) rows. They
    are made read-only so that the frozen dataclass is frozen all the way down. `params`
    records the arguments that shaped the split (seed, fractions, modules, tries used).
    """

    name: str
    M: int
    K: int
    train: np.ndarray
    test: np.ndarray
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        for arr in (self.train, self.test):
            arr.setflags(write=False)

    def summary(self) -> dict:
        """Counts and checks, JSON-serialisable (plain ints, floats, bools and lists).

        `*_with_modules` count the supports touching `params["modules"]` (the missing, rare
        or popular ones), which is what each of those protocols is about.
        """
        train_counts = module_counts(self.train, self.M)
        sizes = lambda s: np.bincount((s >= 0).sum(axis=1), minlength=self.K + 1)[1:].tolist()  # noqa: E731
        out = dict(
            name=self.name, M=self.M, K=self.K,
            n_train=len(self.train), n_test=len(self.test),
            test_fraction=len(self.test) / (len(self.train) + len(self.test)),
            train_sizes=sizes(self.train), test_sizes=sizes(self.test),
            train_module_counts=train_counts.tolist(),
            test_module_counts=module_counts(self.test, self.M).tolist(),
            modules_missing_from_train=np.flatnonzero(train_counts == 0).tolist(),
            covers_all_modules=covers_all_modules(self.train, self.M),
            connected=cooccurrence_connected(self.train, self.M),
            params={k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params.items()},
        )
        if "modules" in self.params:
            special = list(self.params["modules"])
            out["train_with_modules"] = int(np.isin(self.train, special).any(axis=1).sum())
            out["test_with_modules"] = int(np.isin(self.test, special).any(axis=1).sum())
        return out


def module_counts(supports: np.ndarray, M: int) -> np.ndarray:
    """How many of the supports each module appears in: (M,) int."""
    supports = np.asarray(supports)
    active = supports[supports >= 0]
    if active.size and active.max() >= M:
        raise ValueError(f"supports use module {int(active.max())}, but M = {M}")
    return np.bincount(active, minlength=M)


def covers_all_modules(supports: np.ndarray, M: int) -> bool:
    """Whether every module 0..M-1 appears in at least one support."""
    return bool((module_counts(supports, M) > 0).all())


def cooccurrence_connected(supports: np.ndarray, M: int) -> bool:
    """Whether the co-occurrence graph of the supports is connected.

    Nodes are the M modules, with an edge between two modules that appear in one support.
    A module in no support is an isolated node, so for M > 1 connectivity implies
    coverage. Linking each support's consecutive entries is enough: the chain connects all
    of its modules, and it needs K − 1 edges per support instead of K(K − 1)/2.
    """
    supports = np.asarray(supports)
    if supports.ndim != 2:
        raise ValueError(f"supports must be an (S, K) array, got shape {supports.shape}")
    module_counts(supports, M)  # range check
    a, b = supports[:, :-1].ravel(), supports[:, 1:].ravel()
    both = (a >= 0) & (b >= 0)
    graph = coo_matrix((np.ones(both.sum()), (a[both], b[both])), shape=(M, M))
    n_components, _ = connected_components(graph, directed=False)
    return bool(n_components == 1)


def make_split(name: str, M: int, K: int, *, seed: int = 0, held_out_fraction: float = 0.25,
               modules: Sequence[int] | None = None, rare_keep_fraction: float = 0.1,
               popular_fraction: float = 0.5, max_tries: int = 1000) -> TaskSplit:
    """Split all supports of size 1..K over M modules with the protocol `name`.

    Deterministic given `seed` (one `np.random.default_rng(seed)` stream per call). All
    fractions must lie in the open interval (0, 1), and are checked whatever the protocol,
    so that a typo in an unused argument does not pass silently. `modules` names the
    missing, rare or popular modules (defaults below); `random` takes none.

    - random: n_test = round(held_out_fraction · S) supports (halves rounded up), clamped to
      1..S−1 so that both sets are non-empty, drawn uniformly; a fresh draw from the same
      stream replaces any draw whose training supports miss a module or split into
      unconnected groups, up to `max_tries` draws.
    - missing-module: every module of `modules` (default (0,)) is missing: train = the
      supports with none of them, test = the supports with any of them.
    - rare-modules: `modules` (default the first max(1, M // 8)) each train in
      round(rare_keep_fraction · their support count) supports (at least one, never one
      with two rare modules); the other supports split like `random` with
      held_out_fraction, as a baseline (details in `_rare_split`).
    - popular-modules: `modules` (default the first max(1, M // 8)) train in all their
      supports; round(popular_fraction · n) of the n others train too (`_popular_split`).
    """
    _check_arguments(name, M, K, held_out_fraction, rare_keep_fraction, popular_fraction, max_tries)
    rng = np.random.default_rng(seed)
    supports = enumerate_supports(M, K)
    params: dict = dict(seed=seed)
    if name == "random":
        if modules is not None:
            raise ValueError("the random split takes no modules; it holds out supports uniformly")
        test_mask, tries = _random_split(supports, M, K, held_out_fraction, rng, max_tries)
        params.update(held_out_fraction=held_out_fraction, tries=tries)
    elif name == "missing-module":
        chosen = _check_modules(modules, M, default=(0,))
        test_mask = np.isin(supports, chosen).any(axis=1)
        params.update(modules=chosen)
    elif name == "rare-modules":
        chosen = _check_modules(modules, M, default=tuple(range(max(1, M // 8))))
        test_mask, tries = _rare_split(supports, M, K, chosen, rare_keep_fraction, held_out_fraction,
                                       rng, max_tries)
        params.update(modules=chosen, rare_keep_fraction=rare_keep_fraction,
                      held_out_fraction=held_out_fraction, tries=tries)
    else:
        chosen = _check_modules(modules, M, default=tuple(range(max(1, M // 8))))
        test_mask = _popular_split(supports, K, chosen, popular_fraction, rng)
        params.update(modules=chosen, popular_fraction=popular_fraction)
    return TaskSplit(name=name, M=M, K=K, train=supports[~test_mask], test=supports[test_mask],
                     params=params)


def _check_arguments(name, M, K, held_out_fraction, rare_keep_fraction, popular_fraction, max_tries):
    if name not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {name!r}")
    for label, value in (("M", M), ("K", K), ("max_tries", max_tries)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if K > M:
        raise ValueError(f"K must be at most M (K={K}, M={M})")
    for label, value in (("held_out_fraction", held_out_fraction),
                         ("rare_keep_fraction", rare_keep_fraction),
                         ("popular_fraction", popular_fraction)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{label} must lie in the open interval (0, 1), got {value!r}")
    if M == 1:
        raise ValueError("M = 1 has a single task; there is nothing to split")
    if K == 1 and name != "missing-module":
        raise ValueError(f"the {name} split needs K >= 2: with K = 1 every task is a single module, "
                         "so holding one out removes that module from training (use missing-module)")


def _check_modules(modules, M: int, default: tuple[int, ...]) -> tuple[int, ...]:
    """The special modules as a sorted tuple of distinct ints in 0..M-1, leaving one ordinary."""
    if modules is None:
        return default
    arr = np.asarray(modules)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise ValueError(f"modules must be a non-empty sequence of module indices, got {modules!r}")
    if arr.min() < 0 or arr.max() >= M:
        raise ValueError(f"module indices must lie in 0..{M - 1}, got {arr.tolist()}")
    if len(np.unique(arr)) != arr.size:
        raise ValueError(f"modules must be distinct, got {arr.tolist()}")
    if arr.size >= M:
        raise ValueError(f"at most M - 1 = {M - 1} modules can be special, got {arr.size}")
    return tuple(sorted(int(m) for m in arr))


def _round_half_up(x: float) -> int:
    # Python's round() rounds halves to even, so 0.25·6 would hold out 2 but 0.25·10 also 2.
    return int(np.floor(x + 0.5))


def _draw_until(draw: Callable[[], np.ndarray], supports: np.ndarray, M: int,
                what: str, max_tries: int) -> tuple[np.ndarray, int]:
    """Call `draw()` for a test mask until its training supports cover and connect all modules."""
    for tries in range(1, max_tries + 1):
        test = draw()
        train = supports[~test]
        if covers_all_modules(train, M) and cooccurrence_connected(train, M):
            return test, tries
    raise ValueError(f"no {what} whose training supports cover and connect all modules in "
                     f"{max_tries} draws; lower the held-out fraction or raise max_tries")


def _check_enough_to_connect(n_train: int, M: int, what: str) -> None:
    # A connected graph on M nodes needs M − 1 edges, so at least M − 1 training supports.
    if n_train < M - 1:
        raise ValueError(f"{what} leaves {n_train} training supports, fewer than the M - 1 = {M - 1} "
                         "needed to connect all modules; lower held_out_fraction")


def _random_split(supports, M, K, fraction, rng, max_tries):
    S = len(supports)
    n_test = min(max(_round_half_up(fraction * S), 1), S - 1)
    _check_enough_to_connect(S - n_test, M, f"holding out {n_test} of {S} supports")

    def draw():
        test = np.zeros(S, dtype=bool)
        test[rng.permutation(S)[:n_test]] = True
        return test

    return _draw_until(draw, supports, M, "random held-out set", max_tries)


def _rare_split(supports, M, K, rare, keep_fraction, held_out_fraction, rng, max_tries):
    """Rare modules: kept in few training supports; the other supports split as `random`.

    For a rare module r with G_r = its supports, n_r = round(keep_fraction·|G_r|) supports
    are trained on, at least one (so r is rare, not missing) and at most |G_r| − 1 (so some
    task of r is held out). They are drawn only from supports in which r is the sole rare
    module: a support pairing two rare modules is rarer still and is always held out, and
    this way each rare module's training count is exactly n_r (capped by how many such
    supports exist), not a sum over overlapping picks.

    Of the supports without rare modules, round(held_out_fraction · n) are held out
    uniformly too, so the held-out set also has ordinary tasks: their loss is the baseline
    against which the loss on rare-module tasks is compared (`TaskSplit.summary` counts
    the two groups). As for `random`, both draws are redone together until the training
    supports cover and connect all modules; in particular a rare module kept only as the
    single-module task {r} (which never meets another module) is redrawn.
    """
    n_rare_in = np.isin(supports, rare).sum(axis=1)
    keep = []
    for r in rare:
        in_r = (supports == r).any(axis=1)
        sole = np.flatnonzero(in_r & (n_rare_in == 1))
        keep.append((sole, min(max(_round_half_up(keep_fraction * in_r.sum()), 1),
                               int(in_r.sum()) - 1, len(sole))))
    common = np.flatnonzero(n_rare_in == 0)
    n_out = _round_half_up(held_out_fraction * len(common))
    _check_enough_to_connect(len(common) - n_out + sum(n for _, n in keep), M,
                             f"holding out {n_out} of the {len(common)} supports without rare modules")

    def draw():
        test = n_rare_in > 0
        for sole, n_keep in keep:
            test[rng.choice(sole, size=n_keep, replace=False)] = False
        test[common[rng.permutation(len(common))[:n_out]]] = True
        return test

    return _draw_until(draw, supports, M, "rare-modules split", max_tries)


def _popular_split(supports, K, popular, fraction, rng):
    """Popular modules: every support with one is trained on, plus a fraction of the rest.

    round(fraction · n_rest) of the other supports are trained on, drawn uniformly, at
    most n_rest − 1 so that something is held out. No resampling is needed: for K ≥ 2 each
    ordinary module m trains in {p, m} for a popular p, which also connects the graph.
    """
    rest = np.flatnonzero(~np.isin(supports, popular).any(axis=1))
    n_keep = min(_round_half_up(fraction * len(rest)), len(rest) - 1)
    test = np.zeros(len(supports), dtype=bool)
    test[rest[rng.permutation(len(rest))[n_keep:]]] = True
    return test
