"""Task encodings e(z): shapes, determinism, and the property that defines each one.

The paper's encodings are pinned to the facts of its official code
(smonsays/scale-compositionality, compscale/data/utils.py::make_encode_latent); the
`_tanh`, `_sparse` and `_fixed_x` variants are this project's own.

What the tests pin, per --encoding (whose: the paper's, or this project's):

- identity (paper): e(z) = z.
- orthogonal (paper): e(z) = zQᵀ, Q orthogonal.
- interval_shuffle (paper): a fixed permutation of 10 intervals of [0, 1], offsets kept, 1.0
  fixed; agrees with the official float32 rule to 3e-7 on the weight levels and 5,000 random
  weights.
- tokens (paper): 2M floats, (m + 1, ⌊10·z_m⌋ + M + 1) for every module m; z = (0, .55, 0, 1) at
  M = 4 gives (1, 5, 2, 10, 3, 5, 4, 15); affine fit back to z: R² = 1.0000.
- invertible_nn (paper): 3 affine couplings, sigmoid conditioner of width 2M, weights
  N(0, 1)·0.1, zero biases, scale 0.5·tanh + 1; nearly linear: 1 − R² of an affine fit
  4–5e-7; exact inverse.
- fewshot (paper): 50 shots (x, g(x, z)), x fresh for every task and every call.
- tokens_sparse (this project): only the active modules as (index, weight) pairs padded with
  (−1, 0), 2K values; affine R² to z 0.09.
- invertible_nn_tanh (this project): a tanh coupling MLP of width 16; 1 − R² of an affine fit
  0.03–0.05 (a harder code).
- fewshot_fixed_x (this project): 8 shots at one x shared by every task (reading a fixed code,
  not inferring z).
"""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from constructions import (
    ENCODING_NAMES,
    ENCODINGS,
    LINEAR_ENCODINGS,
    HyperteacherConfig,
    dense_latents,
    make_encoder,
    sample_hyperteacher,
    sample_supports,
    support_weights,
)
from constructions.tasks.encodings import TOKEN_PAD_INDEX, TOKEN_PAD_WEIGHT
from tests.strategies import small_configs

TEACHER = sample_hyperteacher(HyperteacherConfig(I=4, H=6, O=3, M=7, K=3, seed=3))
BIJECTIONS = ("identity", "orthogonal", "interval_shuffle", "invertible_nn", "invertible_nn_tanh")
OFFICIAL_CFG = HyperteacherConfig(I=16, H=16, O=16, M=16, K=3, seed=43)  # configs/teacher.py's sizes


def tasks(teacher, n, seed, weights="discrete"):
    rng = np.random.default_rng(seed)
    supports = sample_supports(teacher.M, teacher.K, n, rng)
    return torch.as_tensor(dense_latents(supports, support_weights(supports, weights, rng), teacher.M))


def expected_dim(name, teacher):
    return {"tokens": 2 * teacher.M, "tokens_sparse": 2 * teacher.K, "fewshot": 50 * (teacher.I + teacher.O),
            "fewshot_fixed_x": 8 * (teacher.I + teacher.O)}.get(name, teacher.M)


def affine_r2(a, b) -> float:
    """R² of the least-squares affine fit b ≈ a·W + c, pooled over b's columns."""
    a, b = np.asarray(a), np.asarray(b)
    A = np.c_[a, np.ones(len(a))]
    coef, *_ = np.linalg.lstsq(A, b, rcond=None)
    return 1 - ((b - A @ coef) ** 2).sum() / ((b - b.mean(0)) ** 2).sum()


def test_linear_encodings_are_the_ones_the_teacher_and_construction_support():
    assert set(LINEAR_ENCODINGS) == set(ENCODINGS) and set(LINEAR_ENCODINGS) <= set(ENCODING_NAMES)


@given(cfg=small_configs(), name=st.sampled_from(ENCODING_NAMES), seed=st.integers(0, 2**16))
def test_shapes_dtypes_and_determinism(cfg, name, seed):
    teacher = sample_hyperteacher(cfg)
    z = tasks(teacher, 12, seed)
    enc = make_encoder(name, teacher, seed=seed)
    e = enc(z)
    assert enc.name == name and enc.dim == expected_dim(name, teacher)
    assert e.shape == (12, enc.dim) and e.dtype == torch.float64
    torch.testing.assert_close(e, make_encoder(name, teacher, seed=seed)(z), rtol=0, atol=0)
    if name in BIJECTIONS:
        torch.testing.assert_close(enc.inverse(e), z, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["orthogonal", "interval_shuffle", "invertible_nn", "invertible_nn_tanh",
                                  "fewshot", "fewshot_fixed_x"])
def test_different_seeds_give_different_encoders(name):
    # A teacher without Q, so that orthogonal draws its own.
    z = tasks(TEACHER, 8, 0)
    assert not torch.equal(make_encoder(name, TEACHER, seed=0)(z), make_encoder(name, TEACHER, seed=1)(z))


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_distinct_tasks_get_distinct_encodings(name):
    z = torch.unique(tasks(TEACHER, 300, 1), dim=0)
    e = make_encoder(name, TEACHER, seed=2)(z)
    assert len(torch.unique(e, dim=0)) == len(z) > 100


def test_orthogonal_uses_the_teachers_Q_and_preserves_norms():
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=3, O=3, M=9, K=2, encoding="orthogonal", seed=5))
    z = tasks(teacher, 50, 0)
    e = make_encoder("orthogonal", teacher)(z)
    torch.testing.assert_close(e, teacher.encode(z), rtol=0, atol=0)
    torch.testing.assert_close(e.norm(dim=1), z.norm(dim=1), rtol=0, atol=1e-12)
    own = make_encoder("orthogonal", TEACHER, seed=4)  # TEACHER has no Q: a Haar draw of its own
    Q = own.state["Q"]
    np.testing.assert_allclose(Q @ Q.T, np.eye(TEACHER.M), atol=1e-12)
    z = tasks(TEACHER, 50, 0)
    torch.testing.assert_close(own(z).norm(dim=1), z.norm(dim=1), rtol=0, atol=1e-12)


def test_interval_shuffle_is_a_bijection_of_the_unit_interval_that_moves_whole_intervals():
    enc = make_encoder("interval_shuffle", TEACHER, seed=7)
    perm = enc.state["permutation"]
    assert sorted(perm.tolist()) == list(range(10)) and not (perm == np.arange(10)).all()
    grid = torch.linspace(0, 1, 1001, dtype=torch.float64)
    z = grid[:, None].expand(-1, TEACHER.M)
    e = enc(z)[:, 0]
    assert len(torch.unique(e)) == len(grid)  # injective on the grid
    assert e.min() >= 0 and e.max() <= 1
    assert e[-1] == 1.0  # 1.0 is fixed
    k = torch.clamp(torch.floor(grid * 10), max=9)
    inside = grid < 1
    # The offset inside an interval is kept, and interval k lands in interval π(k).
    start = torch.as_tensor(perm, dtype=torch.float64)[k.long()] / 10
    torch.testing.assert_close((e - start)[inside], (grid - k / 10)[inside], rtol=0, atol=1e-12)
    assert e[0] == perm[0] / 10  # an inactive module (z = 0) moves to the start of interval π(0)
    torch.testing.assert_close(enc.inverse(enc(z)), z, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        enc(torch.full((1, TEACHER.M), 1.5, dtype=torch.float64))


def test_interval_shuffle_agrees_with_the_official_float32_rule():
    """The official encoder (compscale/data/utils.py) runs in float32: interval int(v / 0.1)
    capped at 9, offset v − 0.1·interval, 1.0 kept. This one finds the interval by exact
    comparison in float64. On the discrete weight levels and on random weights the two
    agree to float32 rounding: no value lands in another interval."""
    enc = make_encoder("interval_shuffle", TEACHER, seed=7)
    perm = enc.state["permutation"]
    # The levels as each side holds them: float64 here, float32 there (0.7 becomes 0.69999999).
    levels = np.array([0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    here = np.concatenate([levels, np.random.default_rng(0).uniform(0, 1, 5000).astype(np.float32)])
    there = here.astype(np.float32)
    k = np.minimum((there / np.float32(0.1)).astype(np.int32), 9)
    official = perm[k].astype(np.float32) * np.float32(0.1) + (there - k.astype(np.float32) * np.float32(0.1))
    official = np.where(there == 1.0, np.float32(1.0), official)
    ours = enc(torch.as_tensor(here)[:, None].expand(-1, TEACHER.M))[:, 0].numpy()
    np.testing.assert_allclose(ours, official, rtol=0, atol=3e-7)


@pytest.mark.parametrize("name", ["invertible_nn", "invertible_nn_tanh"])
def test_invertible_nn_round_trips_and_is_differentiable(name):
    for M in (1, 2, 7, 16):
        teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=M, K=1, seed=0))
        enc = make_encoder(name, teacher, seed=3, n_layers=4)
        z = torch.tensor(np.random.default_rng(0).uniform(-1, 2, (64, M)), requires_grad=True)
        e = enc(z)
        torch.testing.assert_close(enc.inverse(e), z, rtol=0, atol=1e-10)
        assert not torch.allclose(e, z)  # not secretly the identity
        e.sum().backward()
        assert torch.isfinite(z.grad).all() and (z.grad != 0).any()
    assert len(make_encoder(name, TEACHER, n_layers=5).state["layers"]) == 5


def test_invertible_nn_is_the_papers_nearly_affine_flow_and_the_tanh_variant_is_not():
    # Official: conditioner weights N(0, 1)·0.1, zero biases, sigmoid, s = 0.5·tanh + 1, so
    # every sigmoid sits near 0.5 and the flow is affine up to 1 − R² ≈ 5e-7 (measured
    # 4–5e-7 at M = 16, 5–8e-8 at M = 7); this project's tanh variant leaves 2–5e-2.
    for teacher in (sample_hyperteacher(OFFICIAL_CFG), TEACHER):  # M = 16 as the paper's, and an odd M
        z = tasks(teacher, 2000, 0)
        for seed in range(3):
            official = make_encoder("invertible_nn", teacher, seed=seed)
            tanh = make_encoder("invertible_nn_tanh", teacher, seed=seed)
            assert 1 - affine_r2(z, official(z)) < 1e-5
            assert 1 - affine_r2(z, tanh(z)) > 1e-2
    layers = make_encoder("invertible_nn", sample_hyperteacher(OFFICIAL_CFG), seed=0).state["layers"]
    assert len(layers) == 3
    for layer in layers:  # [M/2 → 2M → 2M → 2·M/2], zero biases, weights 0.1·N(0, 1)
        assert [w.shape for w, _ in layer] == [(8, 32), (32, 32), (32, 16)]
        assert all((b == 0).all() for _, b in layer)
        w = np.concatenate([w.ravel() for w, _ in layer])
        assert 0.09 < w.std() < 0.11


def test_invertible_nn_is_injective_on_random_sparse_tasks():
    teacher = sample_hyperteacher(OFFICIAL_CFG)
    z = torch.unique(tasks(teacher, 2000, 4, "continuous"), dim=0)
    for name in ("invertible_nn", "invertible_nn_tanh"):
        enc = make_encoder(name, teacher, seed=5)
        e = enc(z)
        assert len(torch.unique(e, dim=0)) == len(z) > 1900
        torch.testing.assert_close(enc.inverse(e), z, rtol=0, atol=1e-12)
        # Distinct tasks stay apart in proportion to their distance, not just in the last bit.
        off = ~torch.eye(500, dtype=torch.bool)
        stretch = torch.cdist(e[:500], e[:500])[off] / torch.cdist(z[:500], z[:500])[off]
        assert stretch.min() > 0.2


def test_tokens_are_the_papers_dense_index_weight_pairs():
    # (m, ⌊10·z_m⌋ + M + 1) for every module m = 1..M, in order; floats, dim 2M.
    teacher4 = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=4, K=2, seed=0))
    enc = make_encoder("tokens", teacher4)
    e = enc(torch.tensor([[0, 0.55, 0, 1.0], [0.5, 0, 0.8, 0]], dtype=torch.float64))
    assert enc.dim == 8 and e.dtype == torch.float64 and not enc.differentiable
    assert e.tolist() == [[1, 5, 2, 10, 3, 5, 4, 15], [1, 10, 2, 5, 3, 13, 4, 5]]
    # The official docstring's example, as its code computes it: [0.5, 0.8, 0] → 1,9,2,12,3,4.
    teacher3 = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=3, K=2, seed=0))
    assert make_encoder("tokens", teacher3)(torch.tensor([[0.5, 0.8, 0.0]])).tolist() == [[1, 9, 2, 12, 3, 4]]
    # Every discrete weight k/10 lands on its own token, however 10·k/10 rounds.
    w = torch.arange(11, dtype=torch.float64) / 10
    e = make_encoder("tokens", sample_hyperteacher(OFFICIAL_CFG))(w[:, None].expand(-1, 16))
    assert e[:, 1].tolist() == [17.0 + k for k in range(11)]


def test_tokens_are_affine_in_z_and_the_sparse_variant_is_not():
    # Measured: R² = 1.0000 (official, discrete weights), 0.09 (sparse) at M = 16, K = 3.
    teacher = sample_hyperteacher(OFFICIAL_CFG)
    z = tasks(teacher, 2000, 0)
    assert affine_r2(make_encoder("tokens", teacher)(z), z) >= 0.9999
    assert affine_r2(make_encoder("tokens_sparse", teacher)(z), z) < 0.5


def test_tokens_sparse_on_hand_built_latents():
    enc = make_encoder("tokens_sparse", TEACHER)  # M = 7, K = 3
    z = torch.zeros(3, 7, dtype=torch.float64)
    z[0, 5], z[0, 2] = 1.0, 0.53
    z[1, [0, 3, 6]] = torch.tensor([0.6, 0.75, 0.94], dtype=torch.float64)
    pad = [TOKEN_PAD_INDEX, TOKEN_PAD_WEIGHT]
    expected = torch.tensor([[2, 0.5, 5, 1.0, *pad], [0, 0.6, 3, 0.8, 6, 0.9], [*pad, *pad, *pad]],
                            dtype=torch.float64)
    torch.testing.assert_close(enc(z), expected, rtol=0, atol=1e-15)
    assert pad == [-1.0, 0.0]
    with pytest.raises(ValueError, match="at most K = 3"):
        enc(torch.ones(1, 7, dtype=torch.float64))


def test_fewshot_is_the_papers_50_shots_at_fresh_inputs():
    enc = make_encoder("fewshot", TEACHER, seed=1)
    n, I, O = 50, TEACHER.I, TEACHER.O
    assert enc.dim == n * (I + O) and enc.stochastic
    z = tasks(TEACHER, 4, 0)[[0, 0, 1, 2]]  # the same task twice
    e = enc(z)
    x, y = e[:, :n * I].reshape(4, n, I), e[:, n * I:].reshape(4, n, O)  # all inputs, then all outputs
    assert x.abs().max() <= 1 and x.std() > 0.4  # uniform on [-1, 1]
    for b in range(4):
        torch.testing.assert_close(y[b], TEACHER.forward(z[b].expand(n, -1), x[b]), rtol=0, atol=1e-14)
    assert not torch.equal(x[0], x[1])  # fresh inputs for every task
    assert not torch.equal(enc(z)[:, :n * I], e[:, :n * I])  # and on every call
    again = make_encoder("fewshot", TEACHER, seed=1)
    torch.testing.assert_close(again(z), e, rtol=0, atol=0)  # the same sequence for the same seed
    assert not make_encoder("fewshot_fixed_x", TEACHER).stochastic


def test_fewshot_fixed_x_shows_the_teacher_at_the_stored_inputs():
    enc = make_encoder("fewshot_fixed_x", TEACHER, seed=1, n_shots=5)
    x = torch.as_tensor(enc.state["x"])
    assert x.shape == (5, TEACHER.I) and x.abs().max() <= 1
    z = tasks(TEACHER, 6, 0).requires_grad_(True)
    e = enc(z).reshape(6, 5, TEACHER.I + TEACHER.O)
    torch.testing.assert_close(e[..., :TEACHER.I], x.expand(6, -1, -1), rtol=0, atol=0)
    for b in range(6):
        torch.testing.assert_close(e[b, :, TEACHER.I:], TEACHER.forward(z[b].expand(5, -1), x),
                                   rtol=0, atol=1e-14)
    e.sum().backward()
    assert torch.isfinite(z.grad).all()


def test_bad_names_options_and_shapes_raise():
    with pytest.raises(ValueError, match=", ".join(ENCODING_NAMES)):
        make_encoder("onehot", TEACHER)
    with pytest.raises(ValueError, match="unknown options for fewshot: n_layers"):
        make_encoder("fewshot", TEACHER, n_layers=2)
    with pytest.raises(ValueError, match="tokens_sparse, fewshot_fixed_x"):
        make_encoder("tokens_dense", TEACHER)
    with pytest.raises(ValueError, match="unknown options for invertible_nn: hidden"):
        make_encoder("invertible_nn", TEACHER, hidden=16)
    with pytest.raises(ValueError, match=r"shape \(B, 7\)"):
        make_encoder("identity", TEACHER)(torch.zeros(2, 6, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="tokens"):
        make_encoder("tokens", TEACHER).inverse(torch.zeros(1, 6, dtype=torch.float64))
