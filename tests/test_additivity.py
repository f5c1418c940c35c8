"""The conjunction-wise additivity score (verify/learning/additivity.py; Lippl and Stachenfeld,
ICLR 2025): planted outputs whose score is known, and the features a wrong score would use."""

import itertools

import numpy as np
import pytest

from constructions.tasks.splits import make_split
from verify.learning import additivity, kernel_vs_sgd

SPLIT = make_split("random", 8, 3, seed=3, held_out_fraction=0.25)


def _supports():
    return np.concatenate([SPLIT.train, SPLIT.test])


def _sets(supports):
    return [frozenset(int(m) for m in row if m >= 0) for row in supports]


def test_the_seen_conjunctions_are_every_part_of_every_training_support():
    seen = set(additivity.seen_conjunctions(SPLIT.train))
    brute = {frozenset(c) for s in _sets(SPLIT.train) for k in range(1, len(s) + 1)
             for c in itertools.combinations(sorted(s), k)}
    assert seen == brute
    held_triples = [s for s in _sets(SPLIT.test) if len(s) == 3]
    assert held_triples and not any(s in seen for s in held_triples)  # a held-out support is unseen


def test_outputs_that_sum_effects_of_seen_conjunctions_score_one_on_both_sides():
    rng = np.random.default_rng(0)
    effect = {c: rng.normal(size=5) for c in additivity.seen_conjunctions(SPLIT.train) if len(c) <= 2}
    y = np.array([sum(v for c, v in effect.items() if c <= s) + 0.3 for s in _sets(_supports())])
    got = additivity.score(y, SPLIT.train, SPLIT.test)
    assert got["residual_dof"] > 0
    assert got["train"] == pytest.approx(1.0, abs=1e-12) and got["held_out"] == pytest.approx(1.0, abs=1e-12)


def test_an_interaction_of_its_own_on_held_out_supports_lowers_the_held_out_score():
    # The cpu scale's M = 16, K = 3 (147 residual df; at M = 8 the 13 left absorb much of it).
    split = make_split("random", 16, 3, seed=3, held_out_fraction=0.25)
    supports = np.concatenate([split.train, split.test])
    rng = np.random.default_rng(1)
    single = rng.normal(size=(split.M, 5))
    own = {s: rng.normal(size=5) for s in _sets(split.test)}  # what no seen conjunction explains
    y = np.array([single[sorted(s)].sum(axis=0) + own.get(s, 0.0) for s in _sets(supports)])
    got = additivity.score(y, split.train, split.test)
    # Training supports below K modules share their columns with held-out supports, so the
    # fit's pull on those columns costs the training side a little too (a triple has its own).
    assert got["held_out"] < 0.9 < got["train"]
    # A score whose features came from every support (held-out ones included) would call the
    # same outputs additive: the check above is one it can fail.
    everything = additivity.seen_conjunctions(supports)
    phi = additivity.features(supports, everything)
    coef, *_ = np.linalg.lstsq(phi, y, rcond=None)
    assert np.allclose(phi @ coef, y)


def test_a_fit_with_no_residual_degree_of_freedom_gives_no_score():
    small = make_split("random", 5, 2, seed=0, held_out_fraction=0.25)
    y = np.random.default_rng(2).normal(size=(len(small.train) + len(small.test), 3))
    got = additivity.score(y, small.train, small.test)
    assert got["residual_dof"] == 0 and np.isnan(got["train"]) and np.isnan(got["held_out"])


def test_a_kernel_run_reports_the_additivity_of_its_predictor():
    argv = ["--M", "6", "--K", "3", "--I", "2", "--H", "2", "--O", "2", "--eval-tasks", "16",
            "--eval-samples", "4", "--samples-per-task", "4", "--depth", "2", "--method", "ntk",
            "--tasks", "32", "--no-progress"]
    report = kernel_vs_sgd.run(kernel_vs_sgd.parse_args(argv))
    add = report["record"]["additivity"]
    assert add["residual_dof"] > 0 and 0 < add["held_out"] <= 1
    assert add["probe_points"] == additivity.PROBE_POINTS
    assert "additivity (Lippl & Stachenfeld)" in kernel_vs_sgd.format_report(report)
