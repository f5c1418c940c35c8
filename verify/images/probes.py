"""The decodability probe: can a layer's activations be read out, linearly, as the prompt's label?

Per layer, the anchor's `analysis.train_decoder_with_split` (Florian-toll/compgen-vision) with
scikit-learn, as it is written there:

1. `StandardScaler(with_mean=False)`, fitted on the training rows: each feature divided by its
   training standard deviation (a feature constant on them is left as it is).
2. One `LogisticRegression(solver="lbfgs", max_iter=100)` per label bit (the anchor's
   `MultiOutputClassifier`; sklearn's defaults otherwise: L2, C = 1, an unpenalised
   intercept). A bit that is constant on the training rows (a word no training prompt has, or
   the rendered family's impossible position bits) cannot be fitted (sklearn refuses one
   class): it is predicted constant. A bit converged when L-BFGS stopped before `max_iter`
   (its `n_iter_`); a layer's `converged` is every fitted bit's, and `bits_converged` counts.
3. Scored on the held-out rows (and, for comparison, on the training rows) by sklearn's
   `f1_score(average="weighted")` (the bits' F1 weighted by their support; a bit with no
   positive has weight 0) and exact match (`accuracy_score` on multilabel rows: every bit
   right). A bit is predicted 1 when its probability exceeds 0.5.

`fit` sees only the rows it is given, and `probe_layers` gives it the training rows only: rows
are images, and the split is by prompt (`PromptSplit.seed_rows`), so no held-out prompt's image
is ever fitted on. Overlapping row sets are refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MAX_ITER = 100  # the anchor's


@dataclass(frozen=True, eq=False)
class LinearProbe:
    """A fitted probe: the scaler, then a logistic regression per bit, or a constant."""

    scale: np.ndarray  # (d,) the scaler's divisor
    weights: np.ndarray  # (d, m), zero for constant bits
    bias: np.ndarray  # (m,)
    constant: np.ndarray  # (m,) the constant prediction (0 or 1), or -1 for fitted bits
    bit_converged: np.ndarray  # (m,) bool: True for constant bits

    @property
    def converged(self) -> bool:
        return bool(self.bit_converged.all())

    def proba(self, X) -> np.ndarray:
        """(n, m) probabilities of each bit being 1."""
        from scipy.special import expit

        p = expit((np.asarray(X, dtype=np.float64) / self.scale) @ self.weights + self.bias)
        fixed = self.constant >= 0
        p[:, fixed] = self.constant[fixed]
        return p

    def predict(self, X) -> np.ndarray:
        """(n, m) uint8 bits."""
        return (self.proba(X) > 0.5).astype(np.uint8)


def _check(X, Y, C: float) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if X.ndim != 2 or Y.ndim != 2 or len(X) != len(Y) or not len(X):
        raise ValueError(f"need features (n, d) and labels (n, m) with n ≥ 1, got {X.shape} and {Y.shape}")
    if not np.isfinite(X).all():
        raise ValueError("features must be finite")
    if not np.isin(Y, (0.0, 1.0)).all():
        raise ValueError("labels must be 0 or 1")
    if not C > 0:
        raise ValueError(f"C must be positive, got {C}")
    return X, Y


def fit(X, Y, C: float = 1.0, max_iter: int = MAX_ITER) -> LinearProbe:
    """The probe of labels Y (n, m) in {0, 1} from features X (n, d), fitted on these rows only."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X, Y = _check(X, Y, C)
    scaler = StandardScaler(with_mean=False).fit(X)
    Z = scaler.transform(X)
    d, m = X.shape[1], Y.shape[1]
    constant = np.where((Y == Y[0]).all(axis=0), Y[0], -1.0)
    W, b, converged = np.zeros((d, m)), np.zeros(m), np.ones(m, dtype=bool)
    for j in np.flatnonzero(constant < 0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # recorded per bit instead
            model = LogisticRegression(C=C, solver="lbfgs", max_iter=max_iter).fit(Z, Y[:, j])
        W[:, j], b[j] = model.coef_[0], model.intercept_[0]
        converged[j] = int(model.n_iter_[0]) < max_iter
    return LinearProbe(scale=np.asarray(scaler.scale_, dtype=np.float64), weights=W, bias=b,
                       constant=constant, bit_converged=converged)


def f1_per_bit(Y_true, Y_pred) -> np.ndarray:
    """(m,) F1 of each bit (0 where it has no positive, true or predicted): sklearn's."""
    from sklearn.metrics import f1_score

    return np.asarray(f1_score(np.asarray(Y_true) != 0, np.asarray(Y_pred) != 0, average=None,
                               zero_division=0), dtype=np.float64)


def weighted_f1(Y_true, Y_pred) -> float:
    """The bits' F1 weighted by their number of true positives: sklearn's average="weighted"
    (0 when no bit has a positive)."""
    from sklearn.metrics import f1_score

    t, p = np.asarray(Y_true) != 0, np.asarray(Y_pred) != 0
    if not t.any():
        return 0.0
    return float(f1_score(t, p, average="weighted", zero_division=0))


def exact_match(Y_true, Y_pred) -> float:
    """Share of rows with every bit right: sklearn's accuracy_score on multilabel rows."""
    from sklearn.metrics import accuracy_score

    return float(accuracy_score(np.asarray(Y_true) != 0, np.asarray(Y_pred) != 0))


def score(probe: LinearProbe, X, Y) -> dict:
    pred = probe.predict(X)
    return dict(f1=weighted_f1(Y, pred), exact=exact_match(Y, pred), f1_per_bit=f1_per_bit(Y, pred).tolist())


def _rows(rows, n: int) -> np.ndarray:
    r = np.asarray(rows, dtype=np.int64).ravel()
    if r.size == 0 or r.min() < 0 or r.max() >= n:
        raise ValueError(f"rows must be a non-empty set of indices in 0..{n - 1}")
    if np.unique(r).size != r.size:
        raise ValueError("rows must not repeat")
    return r


def probe_layer(X, Y, train_rows: Sequence[int], test_rows: Sequence[int], C: float = 1.0,
                max_iter: int = MAX_ITER) -> dict:
    """Fit on the training rows of X and Y, score on the held-out rows (and on the training rows)."""
    X, Y = np.asarray(X), np.asarray(Y)
    if len(X) != len(Y):
        raise ValueError(f"{len(X)} feature rows for {len(Y)} label rows")
    train, test = _rows(train_rows, len(X)), _rows(test_rows, len(X))
    if np.intersect1d(train, test).size:
        raise ValueError("training and held-out rows overlap")
    probe = fit(X[train], Y[train], C=C, max_iter=max_iter)
    held_out, seen = score(probe, X[test], Y[test]), score(probe, X[train], Y[train])
    return dict(test_f1=held_out["f1"], test_exact=held_out["exact"], train_f1=seen["f1"],
                train_exact=seen["exact"], test_f1_per_bit=held_out["f1_per_bit"], dim=int(X.shape[1]),
                n_train=int(train.size), n_test=int(test.size), converged=probe.converged,
                bits_converged=f"{int(probe.bit_converged[probe.constant < 0].sum())} of "
                               f"{int((probe.constant < 0).sum())}",
                constant_bits=[int(i) for i in np.flatnonzero(probe.constant >= 0)])


def probe_layers(features: Mapping[str, np.ndarray], labels, train_rows, test_rows, C: float = 1.0,
                 max_iter: int = MAX_ITER) -> dict[str, dict]:
    """`probe_layer` for every layer of `features` ({layer: (n_images, d)}); labels (n_images, m)."""
    return {layer: probe_layer(X, labels, train_rows, test_rows, C=C, max_iter=max_iter)
            for layer, X in features.items()}


def best_layer(scores: Mapping[str, dict], key: str = "test_f1") -> str:
    """The layer with the highest held-out score (the first of ties, in `scores`' order)."""
    return max(scores, key=lambda layer: scores[layer][key])
