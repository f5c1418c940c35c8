"""The decodability probe on planted features: what is linearly there is found, what is not is
not, constant bits do not crash it, and held-out rows never reach the fit."""

import numpy as np
import pytest

from constructions.tasks import image_setups
from verify.images import probes

WORDS = 4  # two slots of four words: 16 prompts


def _table(n_seeds=4):
    """Labels (16 prompts × n_seeds images, 8 bits), slot word indices, and a split by prompt whose
    training prompts cover every word."""
    setup = image_setups.ImageSetup("toy", "slots", "{a} {b}", ("a", "b"), (tuple("pqrs"), tuple("wxyz")),
                                    ("a?", "b?"), "judge")
    labels = np.repeat(image_setups.labels(setup), n_seeds, axis=0)
    words = np.repeat(image_setups.combinations(setup), n_seeds, axis=0)
    split = image_setups.split_by_test(image_setups.labels(setup), setup.constituents, [1, 6, 11, 12])
    assert split.covers_all_constituents
    train, test = split.seed_rows(n_seeds)
    return labels, words, train, test


def _directions(rng, n_bits, dim):
    """n_bits orthonormal directions in R^dim: each constituent written along its own."""
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    return q[:n_bits]


def test_planted_linear_features_are_decoded_perfectly_on_held_out_prompts():
    labels, _, train, test = _table()
    rng = np.random.default_rng(0)
    X = labels @ _directions(rng, labels.shape[1], 12) + 0.05 * rng.normal(size=(len(labels), 12))
    s = probes.probe_layer(X, labels, train, test)
    assert s["test_f1"] == 1.0 and s["test_exact"] == 1.0 and s["train_exact"] == 1.0
    assert (s["n_train"], s["n_test"], s["dim"]) == (48, 16, 12)


def test_a_decodable_slot_is_found_and_an_undecodable_one_is_not():
    labels, _, train, test = _table(n_seeds=8)
    rng = np.random.default_rng(1)
    # Only slot a (bits 0..3) is in the features; slot b is not.
    X = labels[:, :WORDS] @ _directions(rng, WORDS, 6) + 0.05 * rng.normal(size=(len(labels), 6))
    s = probes.probe_layer(X, labels, train, test)
    per_bit = np.array(s["test_f1_per_bit"])
    assert (per_bit[:WORDS] == 1.0).all()
    assert per_bit[WORDS:].max() < 0.6
    assert s["test_exact"] < 0.5


def test_pure_noise_scores_near_chance():
    labels, _, train, test = _table(n_seeds=8)
    X = np.random.default_rng(2).normal(size=(len(labels), 16))
    s = probes.probe_layer(X, labels, train, test)
    assert s["test_f1"] < 0.5 and s["test_exact"] < 0.15


def test_constant_bits_are_predicted_constant():
    labels, _, train, test = _table()
    rng = np.random.default_rng(3)
    X = labels @ _directions(rng, labels.shape[1], 12)
    # A bit never on (an impossible position), one always on, and one off in training but on in
    # two held-out rows.
    never, always, unseen = np.zeros((len(labels), 1)), np.ones((len(labels), 1)), np.zeros((len(labels), 1))
    unseen[test[:2]] = 1
    Y = np.hstack([labels, never, always, unseen]).astype(np.uint8)
    s = probes.probe_layer(X, Y, train, test)
    assert s["constant_bits"] == [8, 9, 10]
    probe = probes.fit(X[train], Y[train])
    pred = probe.predict(X[test])
    assert (pred[:, 8] == 0).all() and (pred[:, 9] == 1).all() and (pred[:, 10] == 0).all()
    assert (pred[:, :8] == Y[test, :8]).all()
    assert s["test_exact"] == pytest.approx((len(test) - 2) / len(test))
    every_bit_constant = probes.fit(X[train], np.zeros((len(train), 3)))
    assert (every_bit_constant.predict(X[test]) == 0).all()


def test_the_fit_sees_the_training_rows_only(monkeypatch):
    labels, _, train, test = _table()
    rng = np.random.default_rng(4)
    X = labels @ rng.normal(size=(labels.shape[1], 12)) + 0.3 * rng.normal(size=(len(labels), 12))
    seen = []
    real_fit = probes.fit
    monkeypatch.setattr(probes, "fit",
                        lambda X_, Y_, **kw: seen.append((X_.copy(), Y_.copy())) or real_fit(X_, Y_, **kw))
    a = probes.probe_layer(X, labels, train, test)
    np.testing.assert_array_equal(seen[0][0], X[train])
    np.testing.assert_array_equal(seen[0][1], labels[train])
    # Wreck the held-out rows: the fitted probe, hence its training scores, stay the same.
    X2 = X.copy()
    X2[test] = rng.normal(size=(len(test), 12)) * 100
    b = probes.probe_layer(X2, labels, train, test)
    assert (a["train_f1"], a["train_exact"]) == (b["train_f1"], b["train_exact"])
    # Held-out rows full of NaN do not reach the fit (which refuses non-finite features), nor its
    # standardisation.
    X3 = X.copy()
    X3[test] = np.nan
    c = probes.probe_layer(X3, labels, train, test)
    assert (c["train_f1"], c["train_exact"]) == (a["train_f1"], a["train_exact"])
    with pytest.raises(ValueError, match="finite"):
        real_fit(X3, labels)
    with pytest.raises(ValueError, match="overlap"):
        probes.probe_layer(X, labels, np.append(train, test[0]), test)
    # Every seed of a prompt lies on its prompt's side.
    assert not set(train // 4) & set(test // 4)


def test_weighted_f1_and_exact_match_by_hand():
    Y = np.array([[1, 0, 1], [1, 0, 0], [0, 1, 0], [1, 1, 0]])
    P = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 1, 0]])
    # Bit 0: tp 2, 3 true, 2 predicted -> F1 0.8, support 3. Bit 1: tp 2, 2 true, 3 predicted -> 0.8,
    # support 2. Bit 2: tp 0, 1 true -> 0, support 1.
    np.testing.assert_allclose(probes.f1_per_bit(Y, P), [0.8, 0.8, 0.0])
    assert probes.weighted_f1(Y, P) == pytest.approx((0.8 * 3 + 0.8 * 2) / 6)
    assert probes.exact_match(Y, P) == 0.25
    assert probes.weighted_f1(np.zeros((2, 2)), np.ones((2, 2))) == 0.0


def test_best_layer_and_probe_layers():
    labels, _, train, test = _table()
    rng = np.random.default_rng(5)
    feats = {"noise": rng.normal(size=(len(labels), 8)),
             "planted": labels @ _directions(rng, 8, 8) + 0.05 * rng.normal(size=(len(labels), 8))}
    scores = probes.probe_layers(feats, labels, train, test)
    assert list(scores) == ["noise", "planted"] and probes.best_layer(scores) == "planted"


def test_the_probe_is_the_anchors_sklearn_pipeline_and_its_convergence_flag_means_what_it_says():
    """The anchor's make_pipeline(StandardScaler(with_mean=False), MultiOutputClassifier(
    LogisticRegression(lbfgs, max_iter=100))) predicts what the probe predicts; a fit stopped
    after one iteration says it did not converge, per bit and per layer."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multioutput import MultiOutputClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    labels, _, train, test = _table(n_seeds=8)
    rng = np.random.default_rng(6)
    X = labels @ rng.normal(size=(labels.shape[1], 10)) + 0.8 * rng.normal(size=(len(labels), 10)) + 3.0
    anchor = make_pipeline(StandardScaler(with_mean=False),
                           MultiOutputClassifier(LogisticRegression(max_iter=100, solver="lbfgs")))
    anchor.fit(X[train], labels[train])
    probe = probes.fit(X[train], labels[train])
    np.testing.assert_array_equal(probe.predict(X[test]), anchor.predict(X[test]))
    want = np.column_stack([p[:, 1] for p in anchor.predict_proba(X[test])])
    np.testing.assert_allclose(probe.proba(X[test]), want, rtol=1e-10, atol=1e-12)
    s = probes.probe_layer(X, labels, train, test)
    assert s["converged"] and s["bits_converged"] == "8 of 8"
    stopped = probes.probe_layer(X, labels, train, test, max_iter=1)
    assert not stopped["converged"] and stopped["bits_converged"] == "0 of 8"
