"""Task splits: a partition of all supports, seeded, with each protocol's own guarantee."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from constructions import SPLITS, enumerate_supports, make_split, n_supports
from constructions.splits import cooccurrence_connected, covers_all_modules


@st.composite
def sizes(draw, min_K=1):
    M = draw(st.integers(max(2, min_K), 12))
    return M, draw(st.integers(min_K, min(3, M)))


def as_sets(rows):
    return [frozenset(r[r >= 0].tolist()) for r in rows]


def contains(rows, module):
    return (rows == module).any(axis=1)


@given(name=st.sampled_from(SPLITS), MK=sizes(min_K=2), seed=st.integers(0, 2**16))
def test_every_split_partitions_all_supports_and_is_deterministic(name, MK, seed):
    M, K = MK
    split = make_split(name, M, K, seed=seed)
    train, test = as_sets(split.train), as_sets(split.test)
    assert len(train) > 0 and len(test) > 0
    assert set(train).isdisjoint(test)
    assert sorted(train + test, key=sorted) == sorted(as_sets(enumerate_supports(M, K)), key=sorted)
    assert split.train.shape[1] == split.test.shape[1] == K
    assert split.train.dtype == split.test.dtype == np.int64
    again = make_split(name, M, K, seed=seed)
    np.testing.assert_array_equal(split.train, again.train)
    np.testing.assert_array_equal(split.test, again.test)
    summary = split.summary()
    json.dumps(summary)  # plain types only
    assert summary["n_train"] + summary["n_test"] == n_supports(M, K)


def test_different_seeds_give_different_random_splits():
    tests = {make_split("random", 8, 3, seed=s).test.tobytes() for s in range(5)}
    assert len(tests) == 5


def test_split_arrays_are_read_only():
    split = make_split("random", 5, 2)
    with pytest.raises(ValueError):
        split.train[0, 0] = 3


@given(MK=sizes(min_K=2), seed=st.integers(0, 2**16), fraction=st.sampled_from([0.1, 0.25, 0.5]))
def test_random_split_covers_connects_and_holds_out_the_rounded_fraction(MK, seed, fraction):
    M, K = MK
    split = make_split("random", M, K, seed=seed, held_out_fraction=fraction)
    S = n_supports(M, K)
    assert len(split.test) == min(max(int(np.floor(fraction * S + 0.5)), 1), S - 1)
    assert covers_all_modules(split.train, M) and cooccurrence_connected(split.train, M)
    assert split.params["tries"] >= 1


def test_random_split_redraws_until_connected():
    # M = K = 2 with 2 of 3 supports held out: only training on {0, 1} connects, a 1-in-3 draw.
    tries = [make_split("random", 2, 2, seed=s, held_out_fraction=0.5).params["tries"] for s in range(20)]
    assert max(tries) > 1
    for s in range(20):
        assert as_sets(make_split("random", 2, 2, seed=s, held_out_fraction=0.5).train) == [{0, 1}]


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
    split = make_split("rare-modules", M, K, seed=seed, modules=rare, rare_keep_fraction=keep)
    all_supports = enumerate_supports(M, K)
    for r in rare:
        n_r, n_train = contains(all_supports, r).sum(), contains(split.train, r).sum()
        assert 1 <= n_train < n_r
        # Exactly round(keep·n_r) (at least one), unless too few single-rare supports exist.
        assert n_train <= max(1, int(np.floor(keep * n_r + 0.5)))
    # No training support pairs two rare modules.
    assert (np.isin(split.train, rare).sum(axis=1) <= 1).all()
    assert covers_all_modules(split.train, M) and cooccurrence_connected(split.train, M)


def test_rare_split_also_holds_out_ordinary_tasks():
    split = make_split("rare-modules", 16, 3, seed=0)
    summary = split.summary()
    assert split.params["modules"] == (0, 1)
    assert 0 < summary["test_with_modules"] < summary["n_test"]


@given(MK=sizes(min_K=2), seed=st.integers(0, 2**16), fraction=st.sampled_from([0.2, 0.5, 0.8]))
def test_popular_modules_are_in_every_support_they_can_be(MK, seed, fraction):
    M, K = MK
    split = make_split("popular-modules", M, K, seed=seed, popular_fraction=fraction)
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
    (dict(name="bogus"), "random, missing-module, rare-modules, popular-modules"),
    (dict(held_out_fraction=0.0), "held_out_fraction"),
    (dict(held_out_fraction=1.0), "held_out_fraction"),
    (dict(rare_keep_fraction=1.5), "rare_keep_fraction"),
    (dict(popular_fraction=-0.1), "popular_fraction"),
    (dict(K=5), "K must be at most M"),
    (dict(M=0), "M must be a positive integer"),
    (dict(M=1, K=1), "nothing to split"),
    (dict(name="missing-module", modules=[4]), "0..3"),
    (dict(name="missing-module", modules=[-1]), "0..3"),
    (dict(name="rare-modules", modules=[1, 1]), "distinct"),
    (dict(name="popular-modules", modules=[0, 1, 2, 3]), "at most M - 1"),
    (dict(name="random", modules=[0]), "takes no modules"),
    (dict(K=1), "needs K >= 2"),
    (dict(name="rare-modules", K=1), "needs K >= 2"),
    (dict(held_out_fraction=0.95, M=4, K=2), "fewer than the M - 1"),
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
