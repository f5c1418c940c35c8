"""Task encodings e(z): what the student sees of the task, as the first part of [e(z), x].

The theorem's explicit construction reads z through a linear first layer, so any linear
bijection of z is absorbed into that layer at no cost: only `LINEAR_ENCODINGS` are
supported there. The other encodings ask whether a *learned* network still generalizes
compositionally when z is scrambled non-linearly (`interval_shuffle`, `invertible_nn`),
given as discrete symbols (`tokens`), or only shown through examples (`fewshot`).

The six names of the paper (identity, orthogonal, interval_shuffle, invertible_nn, tokens,
fewshot) are built as its official code builds them (smonsays/scale-compositionality,
`compscale/data/utils.py::make_encode_latent`). `invertible_nn_tanh`, `tokens_sparse` and
`fewshot_fixed_x` are this project's own variants, not the paper's: a strongly non-linear
flow, a sparse (module, weight) code, and shots at fixed inputs.

All randomness comes from `seed`, never from the teacher's seed, so the same encoding can
be put in front of different teachers (the official code draws it from the teacher's key).
Every encoder is a fixed map once built except `fewshot`, which, as in the paper, shows
each task at fresh random inputs on every call (`stochastic`). Inputs and outputs are
float64 torch tensors with tasks as rows.

Every encoder runs where z lives: its fixed tensors are copied to z's device on the first
call there and kept (`_PerDevice`), so that encoding a training batch on an accelerator
copies nothing to or from the host. On the CPU the numbers are the same as they always were.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from types import SimpleNamespace

import numpy as np
import torch

from constructions.tasks.hyperteacher import Hyperteacher
from constructions.tasks.task_names import ENCODING_NAMES, LINEAR_ENCODINGS  # noqa: F401  (re-exported)

TOKEN_PAD_INDEX = -1.0  # no module has index −1, so a pad pair cannot be read as a task
TOKEN_PAD_WEIGHT = 0.0  # the weight of an inactive module, as in z itself

# The options each encoding takes, with their defaults.
OPTIONS: dict[str, dict] = {
    "identity": {}, "orthogonal": {}, "tokens": {}, "tokens_sparse": {},
    "interval_shuffle": {"n_intervals": 10},
    "invertible_nn": {"n_layers": 3, "width_factor": 2.0, "init_scale": 0.1},
    "invertible_nn_tanh": {"n_layers": 3, "hidden": 16, "s_scale": 1.0},
    "fewshot": {"n_shots": 50},
    "fewshot_fixed_x": {"n_shots": 8},
}


@dataclass(frozen=True, eq=False)  # eq=False: state holds arrays and the maps are closures
class TaskEncoder:
    """A fixed map e: (B, M) latents → (B, dim) encodings, float64 in and out.

    `differentiable` says whether gradients through e are meaningful (torch autograd runs
    through all of them, but `tokens` is piecewise constant and `interval_shuffle` jumps
    at the interval ends). `inverse` is there for the bijections (identity, orthogonal,
    interval_shuffle, invertible_nn, invertible_nn_tanh). `state` holds the fixed random
    draws (Q, the permutation, the coupling weights, the shot inputs) for inspection and
    tests. `stochastic` marks an encoder whose value for the same z changes from call to
    call (`fewshot`): e(z) is then not a function of z, and a metric that encodes the same
    task twice sees two different inputs.
    """

    name: str
    M: int
    dim: int
    differentiable: bool
    encode: Callable[[torch.Tensor], torch.Tensor] = field(repr=False)
    decode: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None, repr=False)
    state: dict = field(default_factory=dict, repr=False)
    stochastic: bool = False

    def __call__(self, z) -> torch.Tensor:
        z = torch.as_tensor(z, dtype=torch.float64)
        if z.ndim != 2 or z.shape[1] != self.M:
            raise ValueError(f"z must have shape (B, {self.M}), got {tuple(z.shape)}")
        return self.encode(z)

    def inverse(self, e) -> torch.Tensor:
        """z from e(z), for the encodings that are bijections."""
        if self.decode is None:
            raise NotImplementedError(f"the {self.name} encoding has no inverse")
        e = torch.as_tensor(e, dtype=torch.float64)
        if e.ndim != 2 or e.shape[1] != self.dim:
            raise ValueError(f"e must have shape (B, {self.dim}), got {tuple(e.shape)}")
        return self.decode(e)

    def generator_on(self, device) -> torch.Generator | None:
        """The random stream a stochastic encoder (`fewshot`) draws from on `device`, made
        there if it has not drawn there yet: `state["generator"]` on the CPU, another on
        another device. None for the fixed maps."""
        if "generators" not in self.state:
            return None
        return _generator_on(self.state["generators"], self.state["seed"], torch.device(device))


def make_encoder(name: str, teacher: Hyperteacher, seed: int = 0, **options) -> TaskEncoder:
    """The encoder `name` for tasks of `teacher`, its random parts drawn from `seed`.

    `options` override the defaults in `OPTIONS[name]`; unknown ones are an error.
    """
    if name not in ENCODING_NAMES:
        raise ValueError(f"encoding must be one of {', '.join(ENCODING_NAMES)}; got {name!r}")
    unknown = set(options) - set(OPTIONS[name])
    if unknown:
        allowed = ", ".join(OPTIONS[name]) or "none"
        raise ValueError(f"unknown options for {name}: {', '.join(sorted(unknown))} (allowed: {allowed})")
    builder = {"identity": _identity, "orthogonal": _orthogonal, "interval_shuffle": _interval_shuffle,
               "invertible_nn": _invertible_nn, "tokens": _tokens, "fewshot": _fewshot,
               "invertible_nn_tanh": _invertible_nn_tanh, "tokens_sparse": _tokens_sparse,
               "fewshot_fixed_x": _fewshot_fixed_x}[name]
    return builder(teacher, np.random.default_rng(seed), **{**OPTIONS[name], **options})


def _t(arr) -> torch.Tensor:
    return torch.as_tensor(np.asarray(arr), dtype=torch.float64)


_CPU = torch.device("cpu")


class _PerDevice:
    """An encoder's fixed tensors, one copy per device: the CPU ones as built, and on another
    device (an accelerator, in training) a copy made on its first use there and kept, so
    that later calls copy nothing from the host. `on(device)` gives them as attributes."""

    def __init__(self, **tensors):
        self._copies = {_CPU: SimpleNamespace(**tensors)}

    def on(self, device: torch.device) -> SimpleNamespace:
        if device not in self._copies:
            self._copies[device] = SimpleNamespace(**_to(vars(self._copies[_CPU]), device))
        return self._copies[device]


def _to(tree, device):
    """Every tensor in nested dicts, lists and tuples, moved to `device`."""
    if torch.is_tensor(tree):
        return tree.to(device)
    if isinstance(tree, dict):
        return {k: _to(v, device) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to(v, device) for v in tree)
    return tree


def _refuse(bad: torch.Tensor, message: str) -> None:
    """ValueError(message) where the 0-d bool tensor `bad` is true.

    On the CPU it is read here. On another device reading it would make the host wait for
    the device every call, so the device checks it itself (torch._assert_async) and the
    call goes on: a failure there surfaces later, as a device-side assert that ends the
    process, not as a ValueError. Training's tasks never trip it (weights in [0, 1], at
    most K modules), so there it costs nothing.
    """
    if bad.device == _CPU:
        if bad:
            raise ValueError(message)
    else:
        torch._assert_async(~bad, message)


def _identity(teacher, rng) -> TaskEncoder:
    """e(z) = z."""
    return TaskEncoder("identity", teacher.M, teacher.M, True, encode=lambda z: z, decode=lambda e: e)


def _orthogonal(teacher, rng) -> TaskEncoder:
    """e(z) = z Qᵀ (rows are tasks), the convention of `Hyperteacher.encode`.

    Q is the teacher's own when it has one, so that this encoder and the teacher's
    `encode` agree; otherwise a Haar-random orthogonal matrix drawn from the seed (QR of a
    Gaussian matrix with the signs of R's diagonal moved into Q, which makes it Haar).
    """
    if teacher.Q is not None:
        Q = np.asarray(teacher.Q, dtype=np.float64)
    else:
        Q, R = np.linalg.qr(rng.standard_normal((teacher.M, teacher.M)))
        Q = Q * np.sign(np.diag(R))
    fixed = _PerDevice(Q=_t(Q))
    return TaskEncoder("orthogonal", teacher.M, teacher.M, True, encode=lambda z: z @ fixed.on(z.device).Q.T,
                       decode=lambda e: e @ fixed.on(e.device).Q, state=dict(Q=Q))


def _interval_shuffle(teacher, rng, n_intervals: int) -> TaskEncoder:
    """Each z_m ∈ [0, 1]: its interval [k/n, (k+1)/n) moved to [π(k)/n, (π(k)+1)/n).

    π is a fixed random permutation of the n (default 10) intervals; the offset of z_m
    inside its interval is kept, and 1.0 (the end of the last interval) maps to itself, so
    the map is a bijection of [0, 1]. It is not continuous, which is the point: no network
    can undo it with a single linear layer. An inactive module (z_m = 0, the start of the
    first interval) maps to π(0)/n, which need not be 0; that is fine, since the map is
    still a bijection and so the encoding still identifies the task. Discrete weights
    (multiples of 0.1) sit at interval starts for n = 10 and map to other multiples.
    Values outside [0, 1] are an error.
    """
    n = int(n_intervals)
    if n < 1:
        raise ValueError(f"n_intervals must be a positive integer, got {n_intervals!r}")
    perm = rng.permutation(n)
    # Interval starts, and the largest float below each interval's end. The interval of v
    # is found by comparison with the starts, never by floor(v·n), whose rounding can put
    # a value just below a boundary in the next interval; and the moved value is kept
    # below its new interval's end, which a rounded sum could reach. So decoding finds
    # the interval encoding chose, and the round trip is exact to a few ulps everywhere.
    starts = torch.arange(n, dtype=torch.float64) / n
    last_below = torch.nextafter(torch.cat([starts[1:], torch.ones(1, dtype=torch.float64)]),
                                 torch.zeros(1, dtype=torch.float64))
    fixed = _PerDevice(pi=torch.as_tensor(perm), pi_inv=torch.as_tensor(np.argsort(perm)), starts=starts,
                       last_below=last_below)

    def shuffle(v, inverse: bool):
        _refuse(((v < 0) | (v > 1)).any(), "interval_shuffle is defined on [0, 1]")
        c = fixed.on(v.device)
        k = torch.searchsorted(c.starts, v.contiguous(), right=True) - 1
        j = (c.pi_inv if inverse else c.pi)[k]
        moved = torch.minimum(c.starts[j] + (v - c.starts[k]), c.last_below[j])
        return torch.where(v == 1.0, v, moved)

    return TaskEncoder("interval_shuffle", teacher.M, teacher.M, False,
                       encode=lambda z: shuffle(z, False), decode=lambda e: shuffle(e, True),
                       state=dict(permutation=perm, n_intervals=n))


def _invertible_nn(teacher, rng, n_layers: int, width_factor: float, init_scale: float) -> TaskEncoder:
    """The paper's: a fixed random flow of `n_layers` (default 3) affine coupling layers.

    As the official `create_invertible_mlp`: each layer keeps x_a = x[:M//2] and moves
    x_b = x[M//2:] to x_b·s + t, where (log s, t) is the output of a conditioner MLP on
    x_a with two sigmoid hidden layers of width ⌊width_factor·M⌋ (default 2M), weights
    N(0, 1)·init_scale (default 0.1) and zero biases, and s = 0.5·tanh(log s) + 1 ∈ [0.5, 1.5].
    Odd layers reverse the coordinates before and after, so the halves alternate.

    The small weights keep every sigmoid near 0.5, so the map is nearly affine: the best
    affine fit from z to e(z) leaves 1 − R² below 1e-5 (pinned by the tests; 4–5e-7 at M = 16).
    The official code needs M even; for odd M, x_b takes the extra coordinate (this
    project's extension), and for M = 1 each layer is a fixed affine map.
    """
    M, n_keep = teacher.M, teacher.M // 2
    n_move, width = M - n_keep, int(M * width_factor)
    dims = [n_keep, width, width, 2 * n_move]  # the last layer gives log s and t
    layers = [[(rng.standard_normal((a, b)) * init_scale, np.zeros(b)) for a, b in pairwise(dims)]
              for _ in range(int(n_layers))]
    fixed = _PerDevice(params=[[(_t(w), _t(b)) for w, b in layer] for layer in layers])

    def conditioner(layer, x_a):
        h = x_a
        for w, b in layer[:-1]:
            h = torch.sigmoid(h @ w + b)
        w, b = layer[-1]
        h = h @ w + b
        return 0.5 * torch.tanh(h[:, :n_move]) + 1.0, h[:, n_move:]

    def encode(z):
        x = z
        for i, layer in enumerate(fixed.on(z.device).params):
            x = x.flip(1) if i % 2 else x
            s, t = conditioner(layer, x[:, :n_keep])
            x = torch.cat([x[:, :n_keep], x[:, n_keep:] * s + t], 1)
            x = x.flip(1) if i % 2 else x
        return x

    def decode(e):
        y, params = e, fixed.on(e.device).params
        for i in reversed(range(len(params))):
            y = y.flip(1) if i % 2 else y
            s, t = conditioner(params[i], y[:, :n_keep])  # x_a passes through unchanged
            y = torch.cat([y[:, :n_keep], (y[:, n_keep:] - t) / s], 1)
            y = y.flip(1) if i % 2 else y
        return y

    return TaskEncoder("invertible_nn", M, M, True, encode=encode, decode=decode,
                       state=dict(layers=layers, init_scale=init_scale, width=width))


def _invertible_nn_tanh(teacher, rng, n_layers: int, hidden: int, s_scale: float) -> TaskEncoder:
    """This project's own, not the paper's: a strongly non-linear fixed random RealNVP flow.

    Harder than the paper's `invertible_nn`, which is nearly linear: its affine residual
    1 − R² (the best affine fit from z to e(z)) is 0.02–0.05 (above 1e-2 as pinned by
    tests/test_encodings.py), where the paper's is below 1e-5. `n_layers` (default 3) affine coupling layers.

    The M coordinates split into halves x_a = x[:M//2], x_b = x[M//2:]; layer l keeps one
    half and transforms the other, alternating: y_b = x_b·exp(s(x_a)) + t(x_a) for even l,
    the roles swapped for odd l. s and t are heads of one tanh MLP (`hidden` units, weights
    N(0, 1/fan_in)); s = s_scale·tanh(·) so that each layer scales by at most e^s_scale and
    the inverse x_b = (y_b − t(x_a))·exp(−s(x_a)) stays well conditioned. For M = 1 the
    kept half is empty and the MLP sees only its biases: the layer is a fixed affine map.
    """
    M, half = teacher.M, teacher.M // 2
    layers = []
    for layer in range(int(n_layers)):
        n_in = half if layer % 2 == 0 else M - half
        n_out = M - n_in
        layers.append(dict(
            W1=rng.standard_normal((n_in, hidden)) / np.sqrt(max(n_in, 1)), b1=rng.standard_normal(hidden),
            Ws=rng.standard_normal((hidden, n_out)) / np.sqrt(hidden), bs=rng.standard_normal(n_out) * 0.1,
            Wt=rng.standard_normal((hidden, n_out)) / np.sqrt(hidden), bt=rng.standard_normal(n_out) * 0.1))
    fixed = _PerDevice(params=[{k: _t(v) for k, v in p.items()} for p in layers])

    def coupling(p, x_a):
        h = torch.tanh(x_a @ p["W1"] + p["b1"])
        return s_scale * torch.tanh(h @ p["Ws"] + p["bs"]), h @ p["Wt"] + p["bt"]

    def encode(z):
        x = z
        for layer, p in enumerate(fixed.on(z.device).params):
            x_a, x_b = (x[:, :half], x[:, half:]) if layer % 2 == 0 else (x[:, half:], x[:, :half])
            s, t = coupling(p, x_a)
            y_b = x_b * torch.exp(s) + t
            x = torch.cat([x_a, y_b], 1) if layer % 2 == 0 else torch.cat([y_b, x_a], 1)
        return x

    def decode(e):
        y, params = e, fixed.on(e.device).params
        for layer in reversed(range(len(params))):
            y_a, y_b = (y[:, :half], y[:, half:]) if layer % 2 == 0 else (y[:, half:], y[:, :half])
            s, t = coupling(params[layer], y_a)
            x_b = (y_b - t) * torch.exp(-s)
            y = torch.cat([y_a, x_b], 1) if layer % 2 == 0 else torch.cat([x_b, y_a], 1)
        return y

    return TaskEncoder("invertible_nn_tanh", M, M, True, encode=encode, decode=decode,
                       state=dict(layers=layers, s_scale=s_scale))


def _tokens(teacher, rng) -> TaskEncoder:
    """The paper's: for every module m = 1, …, M (1-based, as the official code), the pair
    (m, ⌊10·z_m⌋ + M + 1); dim = 2M, fed to the network as floats.

    The index tokens are constant and the weight tokens are z quantized to tenths, shifted
    by M + 1 so that no weight token equals an index token: an inactive module reads
    M + 1, a weight 1.0 reads M + 11. ⌊·⌋ is the official cast to int, which truncates
    toward zero (the same for z ≥ 0). The encoding is an affine function of z on multiples
    of 0.1 (`khot`, `discrete` weights): the best affine fit from e(z) back to z has
    R² = 1 (pinned by the tests). Piecewise constant in z, so not differentiable.
    """
    M = teacher.M
    fixed = _PerDevice(index=torch.arange(1, M + 1, dtype=torch.float64))

    def encode(z):
        weight = torch.trunc(10 * z) + M + 1
        return torch.stack([fixed.on(z.device).index.expand_as(z), weight], dim=2).reshape(len(z), 2 * M)

    return TaskEncoder("tokens", M, 2 * M, False, encode=encode)


def _tokens_sparse(teacher, rng) -> TaskEncoder:
    """This project's own, not the paper's (whose `tokens` lists every module, dim 2M).

    [m_1, w_1, …, m_K, w_K]: the active modules in increasing index order, each with
    its weight rounded to tenths, then (TOKEN_PAD_INDEX, TOKEN_PAD_WEIGHT) = (−1, 0) pairs
    up to K pairs; dim = 2K. Active means z_m ≠ 0; more than K active modules is an error.

    Rounding makes it lossless for `khot` and `discrete` weights (multiples of 0.1) and
    lossy for `continuous` ones. Piecewise constant in z, so not differentiable. Far from
    linear in z: the best affine fit from e(z) back to z has R² ≈ 0.09 (the paper's ≈ 1).
    """
    M, K = teacher.M, teacher.K
    fixed = _PerDevice(order_key=torch.arange(M, dtype=torch.float64))

    def encode(z):
        active = z != 0
        _refuse((active.sum(1) > K).any(), f"tokens encode at most K = {K} active modules per task")
        order_key = fixed.on(z.device).order_key
        # Inactive modules sort after all active ones; among each group by index.
        idx = torch.argsort(torch.where(active, order_key, order_key + M), dim=1)[:, :K]
        valid = torch.gather(active, 1, idx)
        weights = torch.round(torch.gather(z, 1, idx) * 10) / 10
        index = torch.where(valid, idx.to(torch.float64), torch.full_like(weights, TOKEN_PAD_INDEX))
        weights = torch.where(valid, weights, torch.full_like(weights, TOKEN_PAD_WEIGHT))
        return torch.stack([index, weights], dim=2).reshape(len(z), 2 * K)

    return TaskEncoder("tokens_sparse", M, 2 * K, False, encode=encode)


def _fewshot(teacher, rng, n_shots: int) -> TaskEncoder:
    """The paper's: the task shown by n (default 50) examples at fresh random inputs.

    e(z) = [x_1, …, x_n, g(x_1, z), …, g(x_n, z)] (all inputs, then all outputs, as the
    official code), dim = n·(I + O), with the x_j drawn uniformly on [-1, 1]^I anew for
    every task on every call: the official code draws them from the per-batch key. So
    the encoder is `stochastic`, not a function of z; its draws come from one generator
    seeded by `seed`, so a fresh encoder with the same seed repeats the same sequence.
    g is `teacher.forward` on the raw latent z (the official `sample_from_latent`).

    The inputs are drawn where z lives. On the CPU from `state["generator"]`, the stream a
    checkpoint saves and restores. On another device from a generator of that device,
    made on its first use there from the same seed (`state["generators"]`; `generator_on`
    gives it): a stream of its own, which differs from the CPU's (another algorithm), so the
    same seed gives other inputs on an accelerator than on the CPU, the same ones run after
    run on one device.
    """
    n = int(n_shots)
    if n < 1:
        raise ValueError(f"n_shots must be a positive integer, got {n_shots!r}")
    I, O = teacher.I, teacher.O
    seed = int(rng.integers(2**63))
    gen = torch.Generator().manual_seed(seed)
    generators = {_CPU: gen}

    def encode(z):
        B = len(z)
        x = torch.rand((B * n, I), generator=_generator_on(generators, seed, z.device), dtype=torch.float64,
                       device=z.device)
        x = x * 2 - 1
        y = teacher.forward(z.repeat_interleave(n, dim=0), x)
        return torch.cat([x.reshape(B, n * I), y.reshape(B, n * O)], dim=1)

    return TaskEncoder("fewshot", teacher.M, n * (I + O), True, encode=encode,
                       state=dict(generator=gen, generators=generators, seed=seed), stochastic=True)


def _generator_on(generators: dict, seed: int, device: torch.device) -> torch.Generator:
    """generators[device], made from `seed` on first use. A device named without its index
    ("cuda") is the current one ("cuda:0"), the device its tensors land on."""
    if device.type != "cpu" and device.index is None:
        device = torch.empty(0, device=device).device
    if device not in generators:
        generators[device] = _device_generator(device, seed)
    return generators[device]


def _device_generator(device: torch.device, seed: int) -> torch.Generator:
    """A generator on `device` (not the CPU), seeded with `seed`."""
    return torch.Generator(device=device).manual_seed(seed)


def _fewshot_fixed_x(teacher, rng, n_shots: int) -> TaskEncoder:
    """This project's own, not the paper's (whose `fewshot` draws 50 fresh inputs per task
    per call): [x_1, g(x_1, z), …, x_n, g(x_n, z)], dim = n·(I + O), a fixed map of z.

    The n (default 8) shot inputs x_j are drawn once, uniformly on X = [-1, 1]^I, and are
    the same for every task, so the x_j parts are constant and only the g parts carry z;
    they are kept so the encoding reads as a context of (input, output) pairs. g is
    `teacher.forward` on the raw latent z (not the teacher's own `encode`).
    """
    n = int(n_shots)
    if n < 1:
        raise ValueError(f"n_shots must be a positive integer, got {n_shots!r}")
    xs = rng.uniform(-1.0, 1.0, size=(n, teacher.I))
    fixed = _PerDevice(x=_t(xs))

    def encode(z):
        B, x_t = len(z), fixed.on(z.device).x
        y = teacher.forward(z.repeat_interleave(n, dim=0), x_t.repeat(B, 1)).reshape(B, n, teacher.O)
        return torch.cat([x_t.expand(B, n, teacher.I), y], dim=2).reshape(B, n * (teacher.I + teacher.O))

    return TaskEncoder("fewshot_fixed_x", teacher.M, n * (teacher.I + teacher.O), True, encode=encode,
                       state=dict(x=xs))
