"""The decodability probe: can a layer's activations be read out, linearly, as the prompt's label?

Per layer (the anchor's `analysis.train_decoder_with_split`, Florian-toll/compgen-vision, rebuilt):

1. Standardise each feature with the mean and standard deviation of the training rows (a
   feature constant on them is only centred). The anchor's StandardScaler(with_mean=False) only
   scales; with an unpenalised intercept, centring changes no prediction.
2. One L2-regularised logistic regression per label bit, sklearn's objective with its defaults:
   0.5·|w|² + C·Σ_rows log-loss, C = 1, intercept not penalised. The bits' problems are
   independent, so they are solved as one sum with scipy's L-BFGS-B (max_iter iterations; the
   anchor used 100). A bit that is constant on the training rows (a word no training prompt has,
   or the rendered family's impossible position bits) is not fitted: it is predicted constant.
3. Scored on the held-out rows (and, for comparison, on the training rows) by the bits'
   F1 weighted by their support (sklearn's f1_score(average="weighted") on multilabel data: a
   bit with no positive has weight 0; all bits without positives give 0) and exact match (every
   bit right). A bit is predicted 1 when its probability exceeds 0.5.

`fit` sees only the rows it is given, and `probe_layers` gives it the training rows only: rows
are images, and the split is by prompt (`PromptSplit.seed_rows`), so no held-out prompt's image
is ever fitted on. Overlapping row sets are refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class LinearProbe:
    """A fitted probe: standardisation, then a logistic regression per bit, or a constant."""

    mean: np.ndarray  # (d,)
    scale: np.ndarray  # (d,)
    weights: np.ndarray  # (d, m), zero for constant bits
    bias: np.ndarray  # (m,)
    constant: np.ndarray  # (m,) the constant prediction (0 or 1), or -1 for fitted bits
    converged: bool

    def proba(self, X) -> np.ndarray:
        """(n, m) probabilities of each bit being 1."""
        from scipy.special import expit

        Z = (np.asarray(X, dtype=np.float64) - self.mean) / self.scale
        p = expit(Z @ self.weights + self.bias)
        fixed = self.constant >= 0
        p[:, fixed] = self.constant[fixed]
        return p

    def predict(self, X) -> np.ndarray:
        """(n, m) uint8 bits."""
        return (self.proba(X) > 0.5).astype(np.uint8)


def fit(X, Y, C: float = 1.0, max_iter: int = 100) -> LinearProbe:
    """The probe of labels Y (n, m) in {0, 1} from features X (n, d), fitted on these rows only."""
    from scipy.optimize import minimize
    from scipy.special import expit

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
    mean = X.mean(axis=0)
    sd = X.std(axis=0)
    scale = np.where(sd > 0, sd, 1.0)
    Z = (X - mean) / scale
    n, d = Z.shape
    m = Y.shape[1]
    first = Y[0]
    constant = np.where((Y == first).all(axis=0), first, -1.0)
    free = constant < 0
    W, b, converged = np.zeros((d, m)), np.zeros(m), True
    if free.any():
        Yf = Y[:, free]
        k = Yf.shape[1]

        def objective(theta):
            Wf, bf = theta[: d * k].reshape(d, k), theta[d * k:]
            logits = Z @ Wf + bf
            loss = C * (np.logaddexp(0.0, logits) - Yf * logits).sum() + 0.5 * (Wf**2).sum()
            residual = C * (expit(logits) - Yf)
            grad = np.concatenate([(Z.T @ residual + Wf).ravel(), residual.sum(axis=0)])
            return loss, grad

        result = minimize(objective, np.zeros(d * k + k), jac=True, method="L-BFGS-B",
                          options={"maxiter": max_iter})
        W[:, free] = result.x[: d * k].reshape(d, k)
        b[free] = result.x[d * k:]
        converged = bool(result.success)
    return LinearProbe(mean=mean, scale=scale, weights=W, bias=b, constant=constant, converged=converged)


def f1_per_bit(Y_true, Y_pred) -> np.ndarray:
    """(m,) F1 of each bit (0 where it has no positive, true or predicted)."""
    t = np.asarray(Y_true) != 0
    p = np.asarray(Y_pred) != 0
    tp = (t & p).sum(axis=0)
    denom = t.sum(axis=0) + p.sum(axis=0)
    return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)


def weighted_f1(Y_true, Y_pred) -> float:
    """The bits' F1 weighted by their number of true positives (sklearn's average="weighted")."""
    support = (np.asarray(Y_true) != 0).sum(axis=0)
    if not support.sum():
        return 0.0
    return float((f1_per_bit(Y_true, Y_pred) * support).sum() / support.sum())


def exact_match(Y_true, Y_pred) -> float:
    """Share of rows with every bit right."""
    return float(((np.asarray(Y_true) != 0) == (np.asarray(Y_pred) != 0)).all(axis=1).mean())


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
                max_iter: int = 100) -> dict:
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
                constant_bits=[int(i) for i in np.flatnonzero(probe.constant >= 0)])


def probe_layers(features: Mapping[str, np.ndarray], labels, train_rows, test_rows, C: float = 1.0,
                 max_iter: int = 100) -> dict[str, dict]:
    """`probe_layer` for every layer of `features` ({layer: (n_images, d)}); labels (n_images, m)."""
    return {layer: probe_layer(X, labels, train_rows, test_rows, C=C, max_iter=max_iter)
            for layer, X in features.items()}


def best_layer(scores: Mapping[str, dict], key: str = "test_f1") -> str:
    """The layer with the highest held-out score (the first of ties, in `scores`' order)."""
    return max(scores, key=lambda layer: scores[layer][key])
