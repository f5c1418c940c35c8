"""Task encodings e(z): shapes, determinism, and the property that defines each one."""

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
from constructions.encodings import TOKEN_PAD_INDEX, TOKEN_PAD_WEIGHT
from tests.strategies import small_configs

TEACHER = sample_hyperteacher(HyperteacherConfig(I=4, H=6, O=3, M=7, K=3, seed=3))
BIJECTIONS = ("identity", "orthogonal", "interval_shuffle", "invertible_nn")


def tasks(teacher, n, seed, weights="discrete"):
    rng = np.random.default_rng(seed)
    supports = sample_supports(teacher.M, teacher.K, n, rng)
    return torch.as_tensor(dense_latents(supports, support_weights(supports, weights, rng), teacher.M))


def expected_dim(name, teacher, n_shots=8):
    return {"tokens": 2 * teacher.K, "fewshot": n_shots * (teacher.I + teacher.O)}.get(name, teacher.M)


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


@pytest.mark.parametrize("name", ["orthogonal", "interval_shuffle", "invertible_nn", "fewshot"])
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


def test_invertible_nn_round_trips_and_is_differentiable():
    for M in (1, 2, 7):
        teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=M, K=1, seed=0))
        enc = make_encoder("invertible_nn", teacher, seed=3, n_layers=4)
        z = torch.tensor(np.random.default_rng(0).uniform(-1, 2, (64, M)), requires_grad=True)
        e = enc(z)
        torch.testing.assert_close(enc.inverse(e), z, rtol=0, atol=1e-10)
        assert not torch.allclose(e, z)  # not secretly the identity
        e.sum().backward()
        assert torch.isfinite(z.grad).all() and (z.grad != 0).any()
    assert len(make_encoder("invertible_nn", TEACHER, n_layers=5).state["layers"]) == 5


def test_tokens_on_hand_built_latents():
    enc = make_encoder("tokens", TEACHER)  # M = 7, K = 3
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


def test_fewshot_shows_the_teacher_at_the_stored_inputs():
    enc = make_encoder("fewshot", TEACHER, seed=1, n_shots=5)
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
    with pytest.raises(ValueError, match=r"shape \(B, 7\)"):
        make_encoder("identity", TEACHER)(torch.zeros(2, 6, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="tokens"):
        make_encoder("tokens", TEACHER).inverse(torch.zeros(1, 6, dtype=torch.float64))
