"""Task splits over supports: which module combinations are trained on, which are held out.

Compositional generalization is measured on tasks whose *combination* of modules was
never trained on, while every module was (spec: train on some supports, test on the rest).
A split partitions all supports of size 1..K (`enumerate_supports(M, K)`, "up to K" as in
the official `make_latents`) into a training and a held-out set; tasks of a support differ
only in their weights, so splitting supports rather than latents keeps every held-out
combination truly unseen.

The paper's task supports, rebuilt from the official code (smonsays/scale-compositionality,
`compscale/data/utils.py: split_module_combinations`) under its names; the official default
(`configs/teacher.py`, task_support='random', frac_ood=0.25) is `random`:

- `random`: int(f·S) supports held out uniformly, redrawn until training covers and
  connects all modules.
- `equal`: as many held out, then swaps until every module trains in equally many
  supports (counts differ by at most one); the scaling-law sweep's support.
- `pseudo_random_disconnected`: modules cut into two blocks; every support mixing them is
  held out, plus random within-block ones up to the fraction. Training never links the blocks.
- `non_compositional`: the last module never trains (the control where compositional
  generalization should fail).
- `popular_modules`: the n first modules are popular; training is every support with one
  of them, n as large as the fraction allows.
- `unpopular_modules`: all supports of the M − r first (core) modules train; the r last
  (rare) ones train in one support each, the first of them in more up to the fraction.

This project's own variants, not the paper's, kept under explicit names:

- `popular-modules-half`: the first M // 8 modules train in all their supports, plus half
  of the others at random (what `popular-modules` meant before).
- `rare-modules-fraction`: the first M // 8 modules each train in a tenth of their supports,
  and a random quarter of the other supports is held out too (what `rare-modules` meant).

The old names `missing-module`, `rare-modules`, `popular-modules` are aliases of the
official `non_compositional`, `unpopular_modules`, `popular_modules` (`SPLIT_ALIASES`).

K = 1 only works for `non_compositional`: a support of size one is a single module, so
holding out any task removes its module from training entirely, and no two modules ever
co-occur. The other protocols then degenerate into a missing-module split and
`make_split` refuses them rather than return something misleadingly named.

Train and test rows keep the order of `enumerate_supports`, so a split is a mask on that
table and two splits can be compared row by row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from constructions.tasks.hyperteacher import enumerate_supports
from constructions.tasks.task_names import SPLIT_ALIASES, SPLITS


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

    `name` is one of `SPLITS`; an alias is resolved to its official name, which the split
    records. Deterministic given `seed` (one `np.random.default_rng(seed)` stream per call;
    the official code draws with jax, so the random draws differ from its, not the counts
    and structure). All fractions must lie in the open interval (0, 1), and are checked
    whatever the protocol, so that a typo in an unused argument does not pass silently.
    Anything that cannot be built for (M, K, fraction) raises ValueError.

    With S supports and f = held_out_fraction, the paper's kinds hold out about int(f·S)
    supports (truncated, as the official `int(len · frac_ood)`), and, as the official code
    checks after building them, all but `non_compositional` hold out int(f·S) ± 1 and all
    but it and `pseudo_random_disconnected` train on supports that cover and connect all
    modules. At M = 16, K = 3, f = 0.25 (S = 696, the paper's teacher) the tests pin:

    - random (paper's, the official default): exactly int(f·S) = 174 held out, drawn
      uniformly, redrawn up to `max_tries` times until training covers and connects.
    - equal (paper's): 174 held out; training module counts differ by at most one.
    - pseudo_random_disconnected (paper's; needs an even M): blocks {0} and {1..15}; the
      120 mixing supports plus 53 within-block ones held out (523 / 173: the official
      float arithmetic int((f − 120/696)·696) gives 53, not 54).
    - non_compositional (paper's): module M − 1 (or `modules`) never trains: 575 / 121;
      the fraction is ignored.
    - popular_modules (paper's): 6 popular modules, 521 supports with one of them plus one
      with module 6: 522 / 174; held out are supports of modules 6..15 only.
    - unpopular_modules (paper's): core 0..13, rare 14 and 15; module 15 trains only in
      {0, 15}, module 14 in 52 supports; no core-only support held out; 522 / 174, the
      same for every seed (the official choice is by enumeration order, not random).
    - popular-modules-half (this project's): `modules` (default the first max(1, M // 8))
      train in all their supports; round(popular_fraction · n) of the n others train too
      (`_popular_split`): 462 / 234 at seed 0.
    - rare-modules-fraction (this project's): `modules` (default the first max(1, M // 8))
      each train in round(rare_keep_fraction · their support count) supports; the other
      supports split like `random` with held_out_fraction (`_rare_split`): 376 / 320.

    `modules` is taken by non_compositional and this project's two variants only; the
    other kinds choose their modules themselves.
    """
    name = _check_arguments(name, M, K, held_out_fraction, rare_keep_fraction, popular_fraction, max_tries)
    if modules is not None and name not in TAKES_MODULES:
        raise ValueError(f"the {name} split takes no modules (only {', '.join(TAKES_MODULES)} do)")
    rng = np.random.default_rng(seed)
    supports = enumerate_supports(M, K)
    params: dict = dict(seed=seed)
    if name in ("random", "equal"):
        test_mask, tries = _random_split(supports, M, held_out_fraction, rng, max_tries,
                                         balanced=name == "equal")
        params.update(held_out_fraction=held_out_fraction, tries=tries)
    elif name == "pseudo_random_disconnected":
        test_mask, block = _disconnected_split(supports, M, K, held_out_fraction, rng)
        params.update(held_out_fraction=held_out_fraction, first_block=block)
    elif name == "non_compositional":
        chosen = _check_modules(modules, M, default=(M - 1,))
        test_mask = np.isin(supports, chosen).any(axis=1)
        params.update(modules=chosen)
    elif name == "popular_modules":
        test_mask, chosen, tries = _popular_modules_split(supports, M, held_out_fraction, rng, max_tries)
        params.update(modules=chosen, held_out_fraction=held_out_fraction, tries=tries)
    elif name == "unpopular_modules":
        test_mask, chosen = _unpopular_modules_split(supports, M, K, held_out_fraction)
        params.update(modules=chosen, held_out_fraction=held_out_fraction)
    elif name == "rare-modules-fraction":
        chosen = _check_modules(modules, M, default=tuple(range(max(1, M // 8))))
        test_mask, tries = _rare_split(supports, M, K, chosen, rare_keep_fraction, held_out_fraction,
                                       rng, max_tries)
        params.update(modules=chosen, rare_keep_fraction=rare_keep_fraction,
                      held_out_fraction=held_out_fraction, tries=tries)
    else:  # popular-modules-half
        chosen = _check_modules(modules, M, default=tuple(range(max(1, M // 8))))
        test_mask = _popular_split(supports, K, chosen, popular_fraction, rng)
        params.update(modules=chosen, popular_fraction=popular_fraction)
    _check_official(name, supports, test_mask, M, held_out_fraction)
    return TaskSplit(name=name, M=M, K=K, train=supports[~test_mask], test=supports[test_mask],
                     params=params)


# The official code's checks after building a split: held-out count within one of int(f·S),
# and training supports that cover and connect all modules. Each kind skips what it breaks
# by design (non_compositional ignores the fraction; the disconnected one is not connected).
FRACTION_CHECKED = ("random", "equal", "pseudo_random_disconnected", "popular_modules", "unpopular_modules")
CONNECTION_CHECKED = ("random", "equal", "popular_modules", "unpopular_modules")
TAKES_MODULES = ("non_compositional", "popular-modules-half", "rare-modules-fraction")


def _check_official(name, supports, test_mask, M, fraction):
    S, n_test = len(supports), int(test_mask.sum())
    if name in FRACTION_CHECKED and abs(n_test - _n_held_out(fraction, S)) > 1:
        raise ValueError(f"the {name} split holds out {n_test} of {S} supports, not int({fraction:g}·{S}) "
                         f"= {_n_held_out(fraction, S)} ± 1; change held_out_fraction")
    train = supports[~test_mask]
    if name in CONNECTION_CHECKED and not (covers_all_modules(train, M) and cooccurrence_connected(train, M)):
        raise ValueError(f"the {name} split's training supports do not cover and connect all {M} modules; "
                         "change held_out_fraction")


def _n_held_out(fraction: float, S: int) -> int:
    # The official int(len(combinations_all) * frac_ood): truncation of the float product, so
    # 0.6 · 36 holds out 21 (not 22) and 0.29 · 100 holds out 28.
    return int(S * fraction)


def _check_arguments(name, M, K, held_out_fraction, rare_keep_fraction, popular_fraction, max_tries) -> str:
    """Check the arguments; the official name of `name`."""
    if name not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {name!r}")
    name = dict(SPLIT_ALIASES).get(name, name)
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
    if K == 1 and name != "non_compositional":
        raise ValueError(f"the {name} split needs K >= 2: with K = 1 every task is a single module, "
                         "so holding one out removes that module from training (use missing-module)")
    if name == "pseudo_random_disconnected" and M % 2:
        raise ValueError(f"the pseudo_random_disconnected split needs an even M (as the official code), "
                         f"got M = {M}")
    return name


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


def _random_split(supports, M, fraction, rng, max_tries, balanced=False):
    """`random` and `equal`: int(f·S) held out, redrawn until training covers and connects.

    For `equal` each draw is then balanced by swaps (`_balance`); a draw the swaps cannot
    balance counts as a failed try, like one that does not connect.
    """
    S = len(supports)
    n_test = _n_held_out(fraction, S)
    if n_test < 1:
        raise ValueError(f"int({fraction:g}·{S}) holds out no support; raise held_out_fraction")
    _check_enough_to_connect(S - n_test, M, f"holding out {n_test} of {S} supports")
    hot = _k_hot(supports, M)

    def draw():
        test = np.zeros(S, dtype=bool)
        test[rng.permutation(S)[:n_test]] = True
        return _balance(hot, test) if balanced else test

    return _draw_until(draw, supports, M, "balanced held-out set" if balanced else "random held-out set",
                       max_tries)


def _k_hot(supports: np.ndarray, M: int) -> np.ndarray:
    """(S, M) int: 1 where a support contains the module."""
    hot = np.zeros((len(supports), M + 1), dtype=np.int64)  # column M takes the -1 padding
    np.put_along_axis(hot, np.where(supports >= 0, supports, M), 1, axis=1)
    return hot[:, :M]


# Candidate blocks for a swap, tried in turn: the best few training and held-out supports by
# their own share of the gain, then more. The last, whole search is only done while the
# gain matrix stays small; a draw that needs it beyond that counts as stuck and is redrawn.
SWAP_BLOCKS = (64, 1024)
FULL_SEARCH_PAIRS = 50_000_000


def _balance(hot: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Swap training and held-out supports until module training counts differ by at most one.

    The official local search (`find_balanced_connected_compositional`): a swap is taken if
    it lowers the squared distance of the counts to their mean (the mean held at its value
    before the swap) without widening max − min. The official scans for the first such
    swap; this takes the best one within a block of candidates, for fewer passes, which
    changes which balanced set is found, not that it is balanced. A draw stuck above a
    spread of one (no such swap left) is rejected through `_mark_unbalanced`, and
    `_draw_until` draws again.

    The gain of swapping training support a for held-out b is A(a) + B(b) − 2 a·b with
    A(a) = |a| − 2 a·d and B(b) = |b| + 2 b·d (d = counts − mean): separable but for the
    overlap a·b ≤ K. So the best pairs are found among the supports with the smallest A
    and B, and each pass costs O(S·M), not the O(S_train·S_test) of every pair: the
    scaling-law sweep's `equal` split over half a million supports is built in seconds.
    """
    test = test.copy()
    counts = hot[~test].sum(axis=0)
    size = hot.sum(axis=1)
    while counts.max() - counts.min() > 1:
        inside, outside = np.flatnonzero(~test), np.flatnonzero(test)
        d = counts - counts.mean()
        A = size[inside] - 2 * (hot[inside] @ d)
        B = size[outside] + 2 * (hot[outside] @ d)
        spread = counts.max() - counts.min()
        swapped = False
        for block in (*SWAP_BLOCKS, None):
            if block is None:
                if len(inside) * len(outside) > FULL_SEARCH_PAIRS:
                    break
                ia, jb = np.arange(len(inside)), np.arange(len(outside))
            else:
                ia = np.argsort(A)[:block] if len(A) > block else np.arange(len(A))
                jb = np.argsort(B)[:block] if len(B) > block else np.arange(len(B))
            a, b = hot[inside[ia]], hot[outside[jb]]
            gain = A[ia][:, None] + B[jb][None, :] - 2 * a @ b.T
            for flat in np.argsort(gain, axis=None):
                i, j = np.unravel_index(flat, gain.shape)
                if gain[i, j] >= 0:
                    break
                new = counts - a[i] + b[j]
                if new.max() - new.min() <= spread:
                    test[inside[ia[i]]], test[outside[jb[j]]] = True, False
                    counts, swapped = new, True
                    break
            if swapped or (block is not None and len(ia) == len(A) and len(jb) == len(B)):
                break  # swapped, or this block was already every pair
        if not swapped:
            return _mark_unbalanced(test)
    return test


def _mark_unbalanced(test: np.ndarray) -> np.ndarray:
    # Hold everything out: a training set with no support covers nothing, so `_draw_until`
    # counts the draw as failed and draws again, as the official code does on a stuck search.
    return np.ones_like(test)


def _n_within(n: int, K: int) -> int:
    """Supports of size 1..K over n modules."""
    return sum(math.comb(n, k) for k in range(1, K + 1))


def _disconnected_split(supports, M, K, fraction, rng):
    """`pseudo_random_disconnected`: two blocks of modules that never meet in training.

    The first block is modules 0..s−1, s in 1..M/2 the smallest with the largest share of
    mixing supports (those with modules in both blocks) not above f; if none is, s = 1 and
    `_check_official` decides whether the overshoot is within one support. Every mixing
    support is held out; then int((f − mixing/S)·S) of the others, drawn uniformly (float
    arithmetic as the official's, so 53 at M = 16, K = 3, f = 0.25 where 174 − 120 = 54).
    Those may include a block's only support ({0} when s = 1): the official code checks
    neither coverage nor connection for this kind.
    """
    S = len(supports)
    shares = {s: (S - _n_within(s, K) - _n_within(M - s, K)) / S for s in range(1, M // 2 + 1)}
    below = [s for s, share in shares.items() if share <= fraction]
    block = max(below, key=lambda s: (shares[s], -s)) if below else 1
    first = np.where(supports >= 0, supports < block, False).any(axis=1)
    rest = (supports >= block).any(axis=1)
    test = first & rest
    n_extra = int((fraction - test.sum() / S) * S) if test.sum() / S < fraction else 0
    # n_extra ≤ int(f·S) − mixing < S − mixing for f < 1, so training never empties (the
    # official code's check for that cannot fire here).
    within = np.flatnonzero(~test)
    test[within[rng.permutation(len(within))[:n_extra]]] = True
    return test, block


def _popular_modules_split(supports, M, fraction, rng, max_tries):
    """`popular_modules`: training is every support with one of the n first modules.

    n is the largest number whose supports fit in the training target int((1 − f)·S); the
    shortfall is then filled with supports of module n (the next, "pseudo-popular" one)
    drawn uniformly, redrawn until training covers and connects (the official keeps the
    unfilled set if no draw does, and `_check_official` then judges it).
    """
    S = len(supports)
    target = int(S * (1 - fraction))
    with_first = [np.isin(supports, np.arange(n)).any(axis=1) for n in range(M + 1)]
    n = max(k for k in range(M + 1) if with_first[k].sum() <= target)
    train = with_first[n]
    tries = 0
    if n < M and target > train.sum():
        candidates = np.flatnonzero(~train & (supports == n).any(axis=1))
        n_add = min(target - int(train.sum()), len(candidates))

        def draw():
            test = ~train
            test[candidates[rng.permutation(len(candidates))[:n_add]]] = False
            return test

        try:
            test, tries = _draw_until(draw, supports, M, "popular_modules top-up", max_tries)
            return test, tuple(range(n)), tries
        except ValueError:
            pass
    return ~train, tuple(range(n)), tries


def _unpopular_modules_split(supports, M, K, fraction):
    """`unpopular_modules`: core modules train fully, the last ones rarely; no randomness.

    The core is 0..c−1 with c the largest in M−1..2 whose supports plus one per other
    module fit in the training target int((1 − f)·S) (c = 2 if none). Every core-only
    support trains. Each rare module r ≥ c then trains in the first support, in
    `enumerate_supports` order, that pairs it with core modules and no other rare one; the
    first rare module alone fills the shortfall with further such supports, again first
    in order. So at M = 16, K = 3, f = 0.25 module 15 trains only in {0, 15} and module 14
    in {0, 14}, {1, 14}, ..., {13, 14} and the first 38 of size three, 52 in all.
    """
    S = len(supports)
    target = int(S * (1 - fraction))
    core = next((c for c in range(M - 1, 1, -1) if _n_within(c, K) + M - c <= target), 2)
    rare = tuple(range(core, M))
    n_rare = np.isin(supports, rare).sum(axis=1)
    has_core = np.where(supports >= 0, supports < core, False).any(axis=1)
    train = n_rare == 0
    for r in rare:
        candidates = np.flatnonzero(~train & (supports == r).any(axis=1) & has_core & (n_rare == 1))
        train[candidates[:1]] = True
    if rare and target > train.sum():
        candidates = np.flatnonzero(~train & (supports == rare[0]).any(axis=1) & has_core & (n_rare == 1))
        train[candidates[:target - int(train.sum())]] = True
    return ~train, rare


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

    return _draw_until(draw, supports, M, "rare-modules-fraction split", max_tries)


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
