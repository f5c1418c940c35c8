"""The hyperteacher task family (spec §1), sampled from a seed, evaluated in float64.

Conventions follow the paper's experiment code: truncated-normal modules with fan-in I,
Uniform[0, 0.5) biases, a fixed truncated-normal readout, and task latents z that are
K-sparse with weights from `khot`, `discrete` or `continuous`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from constructions.tasks.task_names import ENCODINGS, WEIGHTS  # noqa: F401  (re-exported)
from theory.bounds import TRUNCATION, init_std, n_tasks

DISCRETE_LEVELS = np.array([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])


@dataclass(frozen=True)
class HyperteacherConfig:
    I: int = 16
    H: int = 16
    O: int = 16
    M: int = 32
    K: int = 3
    weights: str = "discrete"
    encoding: str = "identity"
    seed: int = 0

    def validate(self) -> None:
        for name in ("I", "H", "O", "M", "K"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.K > self.M:
            raise ValueError(f"K must be at most M (K={self.K}, M={self.M})")
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {self.weights!r}")
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}; got {self.encoding!r}")


@dataclass(frozen=True, kw_only=True)
class TeacherBase:
    """What the single- and multi-layer hyperteachers share: the readout, K, the task family's
    weights and encoding, the sizes read off the arrays, and teacher.npz's common entries.

    A subclass (a frozen, keyword-only dataclass) adds its modules' arrays and names their
    weight arrays, first layer first, in `_layer_weights`, and the arrays its forward reads
    in `_forward_arrays`.
    """

    A: np.ndarray  # (H, O)
    K: int
    weights: str = "discrete"
    encoding: str = "identity"
    Q: np.ndarray | None = None  # (M, M) orthogonal, e(z) = Q z
    # The forward's arrays as tensors, one set per (device, dtype) they were asked for (see
    # `tensors`). Not a parameter: left out of __init__, repr and ==; a replace() starts empty.
    _tensors: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def _layer_weights(self) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    def _forward_arrays(self) -> dict:
        """{name: array, or tuple of arrays}: what `tensors` converts."""
        raise NotImplementedError

    def tensors(self, like: torch.Tensor) -> dict:
        """The forward's arrays (and Q, if any) as tensors of `like`'s dtype on its device.

        Made on the first call for that (device, dtype) and kept, so that a training step on
        an accelerator copies nothing from the host. On the CPU in float64 they share the
        arrays' memory (torch.as_tensor), as the per-call conversion did before.
        """
        key = (like.device, like.dtype)
        if key not in self._tensors:
            def convert(a):
                return torch.as_tensor(a, dtype=like.dtype, device=like.device)

            arrays = dict(self._forward_arrays(), **({} if self.Q is None else {"Q": self.Q}))
            self._tensors[key] = {name: tuple(map(convert, a)) if isinstance(a, tuple) else convert(a)
                                  for name, a in arrays.items()}
        return self._tensors[key]

    M = property(lambda self: self._layer_weights()[0].shape[0], doc="number of modules")
    I = property(lambda self: self._layer_weights()[0].shape[1], doc="input size")
    H = property(lambda self: self._layer_weights()[-1].shape[2], doc="hidden size (of the last layer)")
    O = property(lambda self: self.A.shape[1], doc="output size")

    @property
    def weight_values(self) -> np.ndarray:
        return weight_values(self.weights)

    def n_supports(self) -> int:
        return n_supports(self.M, self.K)

    def encode(self, z):
        if self.Q is not None and torch.is_tensor(z):
            return z @ self.tensors(z)["Q"].T  # Q where z lives, as `encode` computes it
        return encode(self.Q, z)

    def _save_npz(self, path, first: dict | None = None, after_K: dict | None = None,
                  last: dict | None = None) -> None:
        """teacher.npz: first, A, K, after_K, weights, weight_values, encoding, last, then Q if any."""
        arrays = dict(first or {}, A=self.A, K=np.int64(self.K), **(after_K or {}),
                      weights=np.str_(self.weights), weight_values=self.weight_values,
                      encoding=np.str_(self.encoding), **(last or {}))
        if self.Q is not None:
            arrays["Q"] = self.Q
        np.savez(path, **arrays)

    @staticmethod
    def _loaded_fields(f) -> dict:
        """The base's fields from an open teacher.npz."""
        return dict(A=f["A"], K=int(f["K"]), weights=str(f["weights"]), encoding=str(f["encoding"]),
                    Q=f["Q"] if "Q" in f else None)


@dataclass(frozen=True, kw_only=True)
class Hyperteacher(TeacherBase):
    """g(x, z) = ReLU(x·W(z̃) + b(z̃))·A with z̃ = z/√K. Arrays are float64 numpy."""

    W: np.ndarray  # (M, I, H)
    b: np.ndarray  # (M, H)

    def _layer_weights(self) -> tuple[np.ndarray, ...]:
        return (self.W,)

    def _forward_arrays(self) -> dict:
        return dict(W=self.W, b=self.b, A=self.A)

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """g(x, z) for rows of z (B, M) and x (B, I), on x's device and in its dtype (the
        teacher's arrays are kept there: `tensors`); differentiable in both."""
        arrays = self.tensors(x)
        W, b, A = arrays["W"].reshape(self.M, -1), arrays["b"], arrays["A"]
        z_tilde = z / math.sqrt(self.K)
        W_z = (z_tilde @ W).reshape(-1, self.I, self.H)
        hidden = torch.relu(torch.einsum("bi,bih->bh", x, W_z) + z_tilde @ b)
        return hidden @ A

    def save_npz(self, path) -> None:
        self._save_npz(path, first=dict(W=self.W, b=self.b))

    @classmethod
    def load_npz(cls, path) -> Hyperteacher:
        with np.load(path) as f:
            return cls(W=f["W"], b=f["b"], **cls._loaded_fields(f))


def weight_values(weights: str) -> np.ndarray:
    """The values an active module's weight can take ([0.5, 1] is a range for `continuous`)."""
    return {"khot": np.array([1.0]), "discrete": DISCRETE_LEVELS}.get(weights, np.array([0.5, 1.0]))


def encode(Q: np.ndarray | None, z):
    """e(z): identity (Q None), or the fixed orthogonal map Q z (rows are tasks)."""
    if Q is None:
        return z
    Q = torch.as_tensor(Q, dtype=z.dtype) if torch.is_tensor(z) else Q
    return z @ Q.T


def truncated_normal(rng: np.random.Generator, shape, fan_in: int) -> np.ndarray:
    """Standard normal truncated to [-2, 2], scaled to variance √3 / fan_in.

    Inverse-CDF sampling uses exactly one uniform per entry, in C order, so the first
    modules of a teacher do not depend on how many modules follow them.
    """
    lo, hi = torch.special.ndtr(torch.tensor([-TRUNCATION, TRUNCATION], dtype=torch.float64))
    draw = torch.special.ndtri(lo + (hi - lo) * torch.as_tensor(rng.random(shape))).numpy()
    return init_std(fan_in) * np.clip(draw, -TRUNCATION, TRUNCATION)


def sample_hyperteacher(cfg: HyperteacherConfig) -> Hyperteacher:
    """Draw a teacher from a seed.

    Each array has its own random stream, and W is drawn module by module, so teachers
    with the same seed and a different M share their first modules and their readout:
    a sweep over M compares nested families rather than unrelated ones.
    """
    cfg.validate()
    rng_W, rng_b, rng_A, rng_Q = (np.random.default_rng(s)
                                  for s in np.random.SeedSequence(cfg.seed).spawn(4))
    W = truncated_normal(rng_W, (cfg.M, cfg.I, cfg.H), fan_in=cfg.I)
    b = rng_b.uniform(0.0, 0.5, size=(cfg.M, cfg.H))
    A = truncated_normal(rng_A, (cfg.H, cfg.O), fan_in=cfg.H)
    Q = None
    if cfg.encoding == "orthogonal":
        Q, R = np.linalg.qr(rng_Q.standard_normal((cfg.M, cfg.M)))
        Q = Q * np.sign(np.diag(R))  # Haar-distributed, not just any orthogonal matrix
    return Hyperteacher(W=W, b=b, A=A, K=cfg.K, weights=cfg.weights, encoding=cfg.encoding, Q=Q)


def n_supports(M: int, K: int) -> int:
    """Σ_{k=1..K} C(M, k): the number of distinct tasks' supports (theory's `n_tasks`)."""
    return n_tasks(M, K)


def enumerate_supports(M: int, K: int) -> np.ndarray:
    """All supports of size 1..K as rows of module indices, padded with -1: (S, K)."""
    rows = np.full((n_supports(M, K), K), -1, dtype=np.int64)
    start = 0
    for k in range(1, K + 1):
        combos = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(M), k)),
                             dtype=np.int64).reshape(-1, k)
        rows[start:start + len(combos), :k] = combos
        start += len(combos)
    return rows


def sample_supports(M: int, K: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n random supports, equally many of each size 1..K (uniform within a size).

    Stratifying by size keeps the rare small supports in the sample; uniform sampling
    over all supports would almost never draw a single-module task when M is large.
    """
    sizes = np.arange(n) % K + 1
    rows = np.full((n, K), -1, dtype=np.int64)
    order = np.argsort(rng.random((n, M)), axis=1)[:, :K]
    mask = np.arange(K)[None, :] < sizes[:, None]
    rows[mask] = order[mask]
    return rows


def support_weights(supports: np.ndarray, weights: str, rng: np.random.Generator) -> np.ndarray:
    """Weights of the active modules, one per support entry (0 on padding): (S, K)."""
    active = supports >= 0
    if weights == "khot":
        w = np.ones(supports.shape)
    elif weights == "discrete":
        w = rng.choice(DISCRETE_LEVELS, size=supports.shape)
    elif weights == "continuous":
        e = rng.exponential(1.0, size=supports.shape) * active
        w = 0.5 * e / (e.sum(axis=1, keepdims=True) + 1.0) + 0.5
    else:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {weights!r}")
    return np.where(active, w, 0.0)


def dense_latents(supports: np.ndarray, values: np.ndarray, M: int) -> np.ndarray:
    """Scatter (S, K) supports and values into dense latents z of shape (S, M)."""
    z = np.zeros((len(supports), M))
    rows = np.repeat(np.arange(len(supports)), supports.shape[1])
    active = supports.ravel() >= 0
    z[rows[active], supports.ravel()[active]] = values.ravel()[active]
    return z


def sample_inputs(n: int, I: int, rng: np.random.Generator) -> np.ndarray:
    """x uniform on the box X = [-1, 1]^I."""
    return rng.uniform(-1.0, 1.0, size=(n, I))
