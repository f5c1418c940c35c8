"""Task splits: a partition of all supports, seeded, with each protocol's own guarantee.

The paper's kinds are pinned against the official code (smonsays/scale-compositionality,
compscale/data/utils.py: split_module_combinations) at its teacher, M = 16, K = 3, held-out
fraction 0.25 (696 supports); this project's own variants keep their old tests.

What the tests pin, per --split at M = 16, K = 3, held-out fraction 0.25 (696 supports of 1..K
modules; train / held out):

- random (default, paper): 522 / 174; int(f·S) held out (truncated), training covers and
  connects every module.
- equal (paper): 522 / 174; every module's training count within one of the others' (91 each).
- pseudo_random_disconnected (paper): 523 / 173; blocks {0} and {1..15} never meet in training
  (all 120 mixing supports held out).
- non_compositional (alias missing-module, paper): 575 / 121; module M − 1 never trains.
- popular_modules (alias popular-modules, paper): 522 / 174; 6 popular modules; training is
  every support holding one of them (+ one to fill the quota).
- unpopular_modules (alias rare-modules, paper): 522 / 174; rare modules 14 and 15 train in 52
  and 1 supports; every core-only support trains.
- popular-modules-half (this project): 462 / 234; the first M//8 modules popular, half the
  other supports held out.
- rare-modules-fraction (this project): 376 / 320; two rare modules in 12 training supports
  each, 25% of the others held out.
"""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from constructions import SPLITS, enumerate_supports, make_split, n_supports
from constructions.catalogue import SPLIT_ALIASES
from constructions.tasks.splits import cooccurrence_connected, covers_all_modules, module_counts

OFFICIAL = ("random", "equal", "pseudo_random_disconnected", "non_compositional", "popular_modules",
            "unpopular_modules")


@st.composite
def sizes(draw, min_K=1):
    M = draw(st.integers(max(2, min_K), 12))
    return M, draw(st.integers(min_K, min(3, M)))


def as_sets(rows):
    return [frozenset(r[r >= 0].tolist()) for r in rows]


def contains(rows, module):
    return (rows == module).any(axis=1)


@given(name=st.sampled_from(SPLITS), MK=sizes(min_K=2), seed=st.integers(0, 2**16),
       fraction=st.sampled_from([0.25, 0.5]))
def test_every_split_partitions_all_supports_and_is_deterministic(name, MK, seed, fraction):
    M, K = MK
    M = max(M, 4)  # M = 2, 3 hold out int(0.25·S) = 0 supports, or cannot connect what is left
    if name == "pseudo_random_disconnected":
        # The official kind needs an even M, and at f = 0.25 with K = 3 even one module split
        # off mixes more than a quarter of the supports (a ValueError, see the bad-input tests).
        M, fraction = M + M % 2, 0.5
    split = make_split(name, M, K, seed=seed, held_out_fraction=fraction)
    train, test = as_sets(split.train), as_sets(split.test)
    assert len(train) > 0 and len(test) > 0
    assert set(train).isdisjoint(test)
    assert sorted(train + test, key=sorted) == sorted(as_sets(enumerate_supports(M, K)), key=sorted)
    assert split.train.shape[1] == split.test.shape[1] == K
    assert split.train.dtype == split.test.dtype == np.int64
    again = make_split(name, M, K, seed=seed, held_out_fraction=fraction)
    np.testing.assert_array_equal(split.train, again.train)
    np.testing.assert_array_equal(split.test, again.test)
    summary = split.summary()
    json.dumps(summary)  # plain types only
    assert summary["n_train"] + summary["n_test"] == n_supports(M, K)
    S = n_supports(M, K)
    if split.name in OFFICIAL and split.name != "non_compositional":  # the official ±1 check
        assert abs(len(split.test) - int(fraction * S)) <= 1
    if split.name not in ("non_compositional", "pseudo_random_disconnected"):
        assert covers_all_modules(split.train, M) and cooccurrence_connected(split.train, M)


# The paper's teacher: M = 16, K = 3, held-out fraction 0.25, 696 supports of size 1..3.
PAPER = dict(M=16, K=3)


@pytest.mark.parametrize("name,n_train,n_test", [
    ("random", 522, 174), ("equal", 522, 174), ("pseudo_random_disconnected", 523, 173),
    ("non_compositional", 575, 121), ("popular_modules", 522, 174), ("unpopular_modules", 522, 174),
    ("popular-modules-half", 462, 234), ("rare-modules-fraction", 376, 320),  # this project's own
])
@pytest.mark.parametrize("seed", [0, 1])
def test_split_counts_at_the_paper_teacher(name, n_train, n_test, seed):
    split = make_split(name, **PAPER, seed=seed, held_out_fraction=0.25)
    assert n_supports(16, 3) == 696
    assert (len(split.train), len(split.test)) == (n_train, n_test)
    assert split.name == name


def test_official_default_is_random_with_floor_of_the_fraction():
    # configs/teacher.py: task_support='random', frac_ood=0.25; num_ood = int(len · frac_ood).
    assert SPLITS[0] == "random"
    # M = 8, K = 2: 36 supports; 0.6·36 = 21.6 holds out 21 (not 22), 0.8·36 = 28.8 holds out 28.
    assert len(make_split("random", 8, 2, held_out_fraction=0.6).test) == 21
    assert len(make_split("random", 8, 2, held_out_fraction=0.8).test) == 28
    assert len(make_split("equal", 8, 2, held_out_fraction=0.6).test) == 21


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_popular_modules_are_the_six_first_and_hold_out_only_ordinary_supports(seed):
    split = make_split("popular_modules", **PAPER, seed=seed)
    popular = list(range(6))
    assert split.params["modules"] == tuple(popular)
    with_popular = np.isin(split.train, popular).any(axis=1)
    assert with_popular.sum() == 521 == n_supports(16, 3) - n_supports(10, 3)  # all with a popular one
    # The one further training support tops up to int(0.75·696) = 522 with module 6, the next.
    (extra,) = as_sets(split.train[~with_popular])
    assert 6 in extra
    assert not np.isin(split.test, popular).any()
    assert len(split.test) == n_supports(10, 3) - 1
    assert cooccurrence_connected(split.train, 16)


@pytest.mark.parametrize("seed", [0, 1])
def test_unpopular_modules_core_and_two_rare_ones(seed):
    split = make_split("unpopular_modules", **PAPER, seed=seed)
    assert split.params["modules"] == (14, 15)
    counts = module_counts(split.train, 16)
    assert counts[15] == 1 and as_sets(split.train[contains(split.train, 15)]) == [{0, 15}]
    assert counts[14] == 52
    # No core-only support is held out: all 469 supports of modules 0..13 train.
    assert not np.isin(split.test, [14, 15], invert=True).all(axis=1).any()
    assert np.isin(split.train, [14, 15], invert=True).all(axis=1).sum() == n_supports(14, 3) == 469
    assert not (contains(split.train, 14) & contains(split.train, 15)).any()
    # The choice follows enumeration order, not the seed.
    np.testing.assert_array_equal(split.train, make_split("unpopular_modules", **PAPER, seed=7).train)


@pytest.mark.parametrize("seed", [0, 1])
def test_equal_balances_module_training_counts(seed):
    split = make_split("equal", **PAPER, seed=seed)
    counts = module_counts(split.train, 16)
    assert counts.max() - counts.min() <= 1
    assert covers_all_modules(split.train, 16) and cooccurrence_connected(split.train, 16)
    # A random split of the same size is far from balanced, so this is the swaps' doing.
    random_counts = module_counts(make_split("random", **PAPER, seed=seed).train, 16)
    assert random_counts.max() - random_counts.min() > 1


@given(MK=sizes(min_K=2), seed=st.integers(0, 2**16))
def test_equal_balances_at_small_sizes(MK, seed):
    M, K = MK
    M = max(M, 4)
    counts = module_counts(make_split("equal", M, K, seed=seed).train, M)
    assert counts.max() - counts.min() <= 1


@pytest.mark.parametrize("seed", [0, 1])
def test_pseudo_random_disconnected_blocks_never_meet_in_training(seed):
    split = make_split("pseudo_random_disconnected", **PAPER, seed=seed)
    # Splitting off one module mixes 120 of 696 supports (≤ 0.25); two would mix 224 (> 0.25).
    assert split.params["first_block"] == 1
    mixes = contains(split.test, 0) & (split.test > 0).any(axis=1)
    assert mixes.sum() == 120
    assert not (contains(split.train, 0) & (split.train > 0).any(axis=1)).any()
    # Then int((0.25 − 120/696)·696) = 53 more (float arithmetic, as the official code), from within blocks.
    assert len(split.test) - 120 == 53
    assert not cooccurrence_connected(split.train, 16)


def test_pseudo_random_disconnected_picks_the_largest_share_below_the_fraction():
    # M = 8, K = 2: 36 supports; blocks of 1, 2, 3, 4 mix 7, 12, 15, 16 of them.
    for fraction, block in ((0.25, 1), (0.35, 2), (0.43, 3), (0.45, 4)):
        split = make_split("pseudo_random_disconnected", 8, 2, held_out_fraction=fraction)
        assert split.params["first_block"] == block
        first = np.isin(split.train, range(block)).any(axis=1)
        rest = (split.train >= block).any(axis=1)
        assert not (first & rest).any()
        assert len(split.test) == int(fraction * 36) or abs(len(split.test) - int(fraction * 36)) <= 1


def test_non_compositional_holds_out_the_last_module_whatever_the_fraction():
    for fraction in (0.1, 0.25, 0.9):
        split = make_split("non_compositional", **PAPER, held_out_fraction=fraction)
        assert split.params["modules"] == (15,)
        assert not contains(split.train, 15).any() and contains(split.test, 15).all()
        assert len(split.test) == 121


@pytest.mark.parametrize("alias,official", SPLIT_ALIASES)
def test_old_names_are_aliases_of_the_official_kinds(alias, official):
    split, same = make_split(alias, **PAPER, seed=3), make_split(official, **PAPER, seed=3)
    assert split.name == official
    np.testing.assert_array_equal(split.train, same.train)
    np.testing.assert_array_equal(split.test, same.test)


def test_different_seeds_give_different_random_splits():
    tests = {make_split("random", 8, 3, seed=s).test.tobytes() for s in range(5)}
    assert len(tests) == 5


def test_split_arrays_are_read_only():
    split = make_split("random", 5, 2)
    with pytest.raises(ValueError):
        split.train[0, 0] = 3


@given(MK=sizes(min_K=2), seed=st.integers(0, 2**16), fraction=st.sampled_from([0.1, 0.25, 0.5]))
def test_random_split_covers_connects_and_holds_out_the_truncated_fraction(MK, seed, fraction):
    M, K = MK
    S = n_supports(M, K)
    if int(fraction * S) == 0:  # the official code would hold out nothing (and fail); so do we, clearly
        with pytest.raises(ValueError, match="holds out no support"):
            make_split("random", M, K, seed=seed, held_out_fraction=fraction)
        return
    split = make_split("random", M, K, seed=seed, held_out_fraction=fraction)
    assert len(split.test) == int(fraction * S)
    assert covers_all_modules(split.train, M) and cooccurrence_connected(split.train, M)
    assert split.params["tries"] >= 1


def test_random_split_redraws_until_connected():
    # M = K = 2 with int(0.7·3) = 2 of 3 supports held out: only training on {0, 1} connects, a 1-in-3 draw.
    splits = [make_split("random", 2, 2, seed=s, held_out_fraction=0.7) for s in range(20)]
    assert max(split.params["tries"] for split in splits) > 1
    assert all(as_sets(split.train) == [{0, 1}] for split in splits)


@given(MK=sizes(), seed=st.integers(0, 2**16), module=st.integers(0, 11))
def test_missing_module_never_trains_and_every_task_with_it_is_held_out(MK, seed, module):
    M, K = MK
    module %= M
    split = make_split("missing-module", M, K, seed=seed, modules=[module])
    assert not contains(split.train, module).any()
    assert contains(split.test, module).all()
    assert split.summary()["modules_missing_from_train"] == [module]


@given(MK=sizes(min_K=2), seed=st.integers(0, 2**16), keep=st.sampled_from([0.05, 0.1, 0.3]),
       n_rare=st.integers(1, 2))
def test_rare_modules_train_in_about_their_keep_fraction_of_supports(MK, seed, keep, n_rare):
    M, K = MK
    rare = list(range(min(n_rare, M - 1)))
    split = make_split("rare-modules-fraction", M, K, seed=seed, modules=rare, rare_keep_fraction=keep)
    all_supports = enumerate_supports(M, K)
    for r in rare:
        n_r, n_train = contains(all_supports, r).sum(), contains(split.train, r).sum()
        assert 1 <= n_train < n_r
        # Exactly round(keep·n_r) (at least one), unless too few single-rare supports exist.
        assert n_train <= max(1, int(np.floor(keep * n_r + 0.5)))
    # No training support pairs two rare modules.
    assert (np.isin(split.train, rare).sum(axis=1) <= 1).all()
    assert covers_all_modules(split.train, M) and cooccurrence_connected(split.train, M)


def test_rare_modules_fraction_also_holds_out_ordinary_tasks():
    split = make_split("rare-modules-fraction", 16, 3, seed=0)
    summary = split.summary()
    assert split.params["modules"] == (0, 1)
    assert 0 < summary["test_with_modules"] < summary["n_test"]
    # Unlike the paper's unpopular_modules: each rare module trains in 12 supports, and core-only
    # supports are held out too.
    assert module_counts(split.train, 16)[:2].tolist() == [12, 12]
    assert (summary["n_train"], summary["n_test"]) == (376, 320)


@given(MK=sizes(min_K=2), seed=st.integers(0, 2**16), fraction=st.sampled_from([0.2, 0.5, 0.8]))
def test_popular_modules_are_in_every_support_they_can_be(MK, seed, fraction):
    M, K = MK
    split = make_split("popular-modules-half", M, K, seed=seed, popular_fraction=fraction)
    popular = list(split.params["modules"])
    assert popular == list(range(max(1, M // 8)))
    assert not np.isin(split.test, popular).any()
    rest = (~np.isin(enumerate_supports(M, K), popular).any(axis=1)).sum()
    n_kept = np.isin(split.train, popular, invert=True).all(axis=1).sum()
    assert n_kept == min(int(np.floor(fraction * rest + 0.5)), rest - 1)
    assert cooccurrence_connected(split.train, M)


def test_helpers_on_hand_built_supports():
    two_groups = np.array([[0, 1], [2, 3], [1, -1]])
    assert covers_all_modules(two_groups, 4)
    assert not cooccurrence_connected(two_groups, 4)
    assert cooccurrence_connected(np.vstack([two_groups, [[1, 2]]]), 4)
    assert not covers_all_modules(two_groups, 5)
    assert not cooccurrence_connected(two_groups[:1], 3)  # module 2 isolated
    assert cooccurrence_connected(np.array([[0, 1, 2]]), 3)  # one support of size 3
    assert not cooccurrence_connected(np.array([[0, -1], [1, -1]]), 2)  # singletons never meet
    with pytest.raises(ValueError, match="M = 2"):
        covers_all_modules(np.array([[0, 2]]), 2)


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="bogus"), "random, equal, pseudo_random_disconnected, non_compositional, popular_modules, "
                         "unpopular_modules, popular-modules-half, rare-modules-fraction, missing-module"),
    (dict(held_out_fraction=0.0), "held_out_fraction"),
    (dict(held_out_fraction=1.0), "held_out_fraction"),
    (dict(rare_keep_fraction=1.5), "rare_keep_fraction"),
    (dict(popular_fraction=-0.1), "popular_fraction"),
    (dict(K=5), "K must be at most M"),
    (dict(M=0), "M must be a positive integer"),
    (dict(M=1, K=1), "nothing to split"),
    (dict(name="missing-module", modules=[4]), "0..3"),
    (dict(name="non_compositional", modules=[-1]), "0..3"),
    (dict(name="rare-modules-fraction", modules=[1, 1]), "distinct"),
    (dict(name="popular-modules-half", modules=[0, 1, 2, 3]), "at most M - 1"),
    (dict(name="random", modules=[0]), "takes no modules"),
    (dict(name="popular_modules", modules=[0]), "takes no modules"),
    (dict(name="unpopular_modules", modules=[0]), "takes no modules"),
    (dict(K=1), "needs K >= 2"),
    (dict(name="rare-modules", K=1), "needs K >= 2"),
    (dict(held_out_fraction=0.95, M=4, K=2), "fewer than the M - 1"),
    (dict(M=2, K=2), "holds out no support"),  # int(0.25·3) = 0
    (dict(name="equal", M=2, K=2), "holds out no support"),
    (dict(name="pseudo_random_disconnected", M=5), "even M"),
    # M = 4, K = 3: splitting off one module mixes 6 of 14 supports, over int(0.25·14) + 1.
    (dict(name="pseudo_random_disconnected", K=3), "not int"),
])
def test_bad_arguments_raise(kwargs, match):
    args = dict(name="random", M=4, K=2) | kwargs
    with pytest.raises(ValueError, match=match):
        make_split(args.pop("name"), args.pop("M"), args.pop("K"), **args)


def test_missing_module_works_for_K_1():
    split = make_split("missing-module", 5, 1, modules=[3])
    assert as_sets(split.test) == [{3}] and len(split.train) == 4


def test_unlucky_draws_give_up_with_a_clear_error():
    # M = 12, K = 2: 78 supports, keep 11 = M − 1, a spanning tree, which a uniform draw hits rarely.
    with pytest.raises(ValueError, match="in 5 draws"):
        make_split("random", 12, 2, held_out_fraction=67 / 78, max_tries=5)
