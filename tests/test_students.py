"""verify.students: the official students' architecture facts, each in a test that can fail.

Held to the official code's facts: an independent numpy transformer, causality, rotary
positions, the hypernetwork's kernel scales, init statistics, the weight-decay mask; 14
deliberate mutations were each caught.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from verify.learning.students import (
    TRUNC_STD,
    HypernetworkStudent,
    TransformerStudent,
    apply_rotary,
    decay_parameter_groups,
    lecun_normal_,
    mlp_student,
    parameter_count,
    rotary_sin_cos,
)

E, I, O, T, P = 5, 3, 3, 4, 6
TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ffw": 32}


def transformer(seed=0):
    torch.manual_seed(seed)
    return TransformerStudent(E, I, O, **TINY).double()


def hypernet(seed=0):
    torch.manual_seed(seed)
    return HypernetworkStudent(E, I, O, d_ffw=32).double()


def task(seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, E, generator=g, dtype=torch.float64),
            torch.randn(T, P, I, generator=g, dtype=torch.float64))


STUDENTS = [transformer, hypernet]


@pytest.mark.parametrize("make", STUDENTS)
def test_shapes_and_float64(make):
    model = make()
    assert (model.E, model.I, model.O) == (E, I, O)
    e, x = task()
    y = model.forward_tasks(e, x)
    assert y.shape == (T, P, O) and y.dtype == torch.float64
    rows = torch.cat([e, x[:, 0]], dim=1)
    out = model(rows)
    assert out.shape == (T, O) and out.dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in model.parameters())


@pytest.mark.parametrize("make", STUDENTS)
def test_rows_are_one_sample_tasks_and_first_predictions(make):
    model = make()
    e, x = task()
    rows = torch.cat([e, x[:, 0]], dim=1)
    out = model(rows)
    torch.testing.assert_close(out, model.forward_tasks(e, x[:, :1])[:, 0], rtol=0, atol=1e-12)
    # The first prediction of a longer sequence sees only z and x_1 (causal attention).
    torch.testing.assert_close(out, model.forward_tasks(e, x)[:, 0], rtol=1e-12, atol=1e-12)


def test_transformer_is_causal():
    model = transformer()
    e, x = task()
    base = model.forward_tasks(e, x)
    for j in range(P):
        x2 = x.clone()
        x2[:, j] += 1.0
        y = model.forward_tasks(e, x2)
        torch.testing.assert_close(y[:, :j], base[:, :j], rtol=1e-12, atol=1e-12)
        assert (y[:, j] - base[:, j]).abs().amax(dim=-1).min() > 1e-6


def test_transformer_reads_the_encoding_and_rejects_bad_heads():
    model = transformer()
    e, x = task()
    assert (model.forward_tasks(e + 1.0, x) - model.forward_tasks(e, x)).abs().max() > 1e-6
    with pytest.raises(ValueError, match="divisible"):
        TransformerStudent(E, I, O, d_model=10, n_heads=3)


def test_rotary_score_depends_only_on_offset():
    Dh, L = 8, 12
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, Dh, generator=g, dtype=torch.float64)
    sin, cos = rotary_sin_cos(Dh, L)

    def rotated(v, pos):  # v rotated as if at position pos; shape (1 head, Dh)
        return apply_rotary(v.expand(L, 1, Dh), sin, cos)[pos]

    def score(p, d):
        return (rotated(q, p) * rotated(k, p + d)).sum()

    for d in (0, 1, 3):
        torch.testing.assert_close(score(2, d), score(7, d), rtol=1e-12, atol=1e-12)
    # ...and the offset does matter, so the check above is not vacuous.
    assert abs(score(2, 1) - score(2, 3)) > 1e-6


def test_rotary_two_dimensional_case_is_a_one_radian_rotation():
    sin, cos = rotary_sin_cos(2, 2)  # Dh = 2: one frequency, 1/10000^0 = 1
    a, b = 0.3, -1.7
    v = torch.tensor([[[a, b]], [[a, b]]], dtype=torch.float64)  # positions 0 and 1, one head
    out = apply_rotary(v, sin, cos)
    torch.testing.assert_close(out[0, 0], torch.tensor([a, b], dtype=torch.float64))
    expected = [a * math.cos(1) - b * math.sin(1), b * math.cos(1) + a * math.sin(1)]
    torch.testing.assert_close(out[1, 0], torch.tensor(expected, dtype=torch.float64),
                               rtol=1e-14, atol=1e-14)


def test_rotary_table_frequencies():
    sin, cos = rotary_sin_cos(8, 5)
    p, j = 3, 2  # angle = p / 10000^(2j/Dh)
    angle = p / 10000 ** (2 * j / 8)
    assert math.isclose(sin[p, j], math.sin(angle), rel_tol=1e-13)
    assert math.isclose(cos[p, j + 4], math.cos(angle), rel_tol=1e-13)


def test_lecun_normal_statistics():
    torch.manual_seed(0)
    layer = nn.Linear(4096, 512)
    lecun_normal_(layer.weight)
    w = layer.weight.detach()
    target = math.sqrt(1 / 4096)
    assert abs(w.std().item() / target - 1) < 0.03
    assert w.abs().max().item() <= 2 * target / TRUNC_STD + 1e-12
    # The truncation is active: draws do reach near the bound.
    assert w.abs().max().item() > 1.9 * target / TRUNC_STD


def test_mlp_student_structure_and_init():
    torch.manual_seed(0)
    net = mlp_student(8, [16, 16], 3)
    kinds = [type(m) for m in net]
    assert kinds == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    dims = [(m.in_features, m.out_features) for m in net if isinstance(m, nn.Linear)]
    assert dims == [(8, 16), (16, 16), (16, 3)]
    for m in net:
        if isinstance(m, nn.Linear):
            assert torch.all(m.bias == 0)
            assert m.weight.abs().max() <= 2 * math.sqrt(1 / m.in_features) / TRUNC_STD
    assert net(torch.zeros(2, 8)).shape == (2, 3)


def test_transformer_init():
    model = transformer()
    assert model.embed_z.bias is None and torch.all(model.embed_x.bias == 0)
    assert torch.all(model.head.bias == 0)
    attn = model.blocks[0].attn
    assert attn.q_norm.weight.shape == (TINY["d_model"] // TINY["n_heads"],)
    bound = math.sqrt(6 / (2 * TINY["d_model"]))  # xavier_uniform, d_model -> d_model
    assert 0.8 * bound < attn.query.weight.abs().max() <= bound
    assert all(ln.bias is None for ln in model.modules() if isinstance(ln, nn.LayerNorm))


def test_hypernetwork_matches_hand_evaluation():
    model = hypernet()
    H = model.d_ffw
    rng = np.random.default_rng(0)
    gamma, beta = rng.normal(size=E), rng.normal(size=E)
    Wg, bg = rng.normal(size=(model.n_params, E)), rng.normal(size=model.n_params)
    with torch.no_grad():
        model.norm.weight.copy_(torch.from_numpy(gamma))
        model.norm.bias.copy_(torch.from_numpy(beta))
        model.generator.weight.copy_(torch.from_numpy(Wg))
        model.generator.bias.copy_(torch.from_numpy(bg))
    e, x = task()
    y = model.forward_tasks(e, x).detach().numpy()

    t = 2
    et, xt = e[t].numpy(), x[t].numpy()
    ln = (et - et.mean()) / np.sqrt(et.var() + 1e-6) * gamma + beta
    flat = Wg @ ln + bg
    W1 = flat[:I * H].reshape(I, H)
    b1 = flat[I * H:I * H + H]
    W2 = flat[I * H + H:I * H + H + H * O].reshape(H, O)
    b2 = flat[I * H + H + H * O:]
    assert b2.shape == (O,)
    s1, s2 = 1 / math.sqrt(I) / 0.87962566103423978, 1 / math.sqrt(H) / 0.87962566103423978
    expected = np.maximum(xt @ W1 * s1 + b1, 0) @ W2 * s2 + b2
    np.testing.assert_allclose(y[t], expected, rtol=1e-10, atol=1e-10)


def test_decay_groups_follow_the_ndim_mask():
    model = transformer()
    groups = decay_parameter_groups(model, 0.003)
    assert [g["weight_decay"] for g in groups] == [0.003, 0.0]
    decay = {id(p) for p in groups[0]["params"]}
    no_decay = {id(p) for p in groups[1]["params"]}
    assert not decay & no_decay
    assert len(decay) + len(no_decay) == len(list(model.parameters()))
    assert sum(p.numel() for g in groups for p in g["params"]) == parameter_count(model)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            assert id(m.weight) in no_decay
        if isinstance(m, nn.Linear):
            assert id(m.weight) in decay
    assert id(model.embed_x.bias) in no_decay and id(model.head.bias) in no_decay
    # A model without vectors gets one group only.
    assert len(decay_parameter_groups(nn.Linear(3, 3, bias=False), 0.1)) == 1


def test_parameter_count_of_hypernetwork():
    model = HypernetworkStudent(E, I, O, d_ffw=32)
    n = I * 32 + 32 + 32 * O + O
    assert model.n_params == n
    assert parameter_count(model) == 2 * E + E * n + n


@pytest.mark.parametrize("make", STUDENTS)
def test_state_dict_round_trip(make, tmp_path):
    model = make(seed=0)
    path = tmp_path / "student.pt"
    torch.save(model.state_dict(), path)
    fresh = make(seed=1)
    e, x = task()
    assert not torch.equal(fresh.forward_tasks(e, x), model.forward_tasks(e, x))
    fresh.load_state_dict(torch.load(path))
    assert torch.equal(fresh.forward_tasks(e, x), model.forward_tasks(e, x))


def test_probe_features():
    model = transformer()
    e, x = task()
    feats = model.probe_features(e, x)
    assert [n for n, _ in feats] == ["encoding", "block1", "block2", "final_norm"]
    assert torch.equal(feats[0][1], e)
    assert all(f.shape == (T, TINY["d_model"]) for _, f in feats[1:])
    assert not any(f.requires_grad for _, f in feats)
    # The final norm at the last token feeds the head: it must give the last prediction.
    torch.testing.assert_close(model.head(feats[-1][1]), model.forward_tasks(e, x)[:, -1])
    torch.testing.assert_close(feats[-1][1], model.ln_f(feats[-2][1]))


def test_float32_module_runs():
    torch.manual_seed(0)
    model = TransformerStudent(E, I, O, **TINY)
    e, x = task()
    y = model.forward_tasks(e.float(), x.float())
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), model.double().forward_tasks(e, x), rtol=1e-4, atol=1e-4)


def numpy_transformer(sd, e, x, n_heads):
    """The transformer written out from the official facts, in numpy, from a state_dict."""
    w = {k: v.numpy() for k, v in sd.items()}

    def ln(v, scale):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-6) * scale

    def gelu_tanh(v):
        return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))

    h = np.concatenate([e[:, None] @ w["embed_z.weight"].T, x @ w["embed_x.weight"].T
                        + w["embed_x.bias"]], axis=1)
    L, D = h.shape[1], h.shape[2]
    Dh = D // n_heads
    ang = np.arange(L)[:, None] / 10000 ** (np.arange(0, Dh, 2) / Dh)[None]
    ang = np.concatenate([ang, ang], -1)

    def rot(v):  # (T, L, Dh)
        return v * np.cos(ang) + np.concatenate([-v[..., Dh // 2:], v[..., :Dh // 2]], -1) * np.sin(ang)

    for b in range(len({k.split(".")[1] for k in w if k.startswith("blocks.")})):
        p = f"blocks.{b}."
        a = ln(h, w[p + "ln1.weight"])
        heads = []
        for i in range(n_heads):
            sl = slice(i * Dh, (i + 1) * Dh)
            q = rot(ln(a @ w[p + "attn.query.weight"][sl].T, w[p + "attn.q_norm.weight"])) / math.sqrt(Dh)
            k = rot(ln(a @ w[p + "attn.key.weight"][sl].T, w[p + "attn.k_norm.weight"]))
            v = a @ w[p + "attn.value.weight"][sl].T
            s = q @ k.transpose(0, 2, 1) + np.triu(np.full((L, L), -np.inf), 1)
            s = np.exp(s - s.max(-1, keepdims=True))
            heads.append(s / s.sum(-1, keepdims=True) @ v)
        h = h + np.concatenate(heads, -1) @ w[p + "attn.out.weight"].T
        m = ln(h, w[p + "ln2.weight"])
        h = h + gelu_tanh(m @ w[p + "mlp.fc.weight"].T) @ w[p + "mlp.proj.weight"].T
    h = ln(h, w["ln_f.weight"])
    return h[:, 1:] @ w["head.weight"].T + w["head.bias"]


def test_transformer_matches_numpy_reference():
    model = transformer()
    with torch.no_grad():  # non-trivial LayerNorm scales, so a skipped or misplaced one shows
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
    e, x = task()
    expected = numpy_transformer(model.state_dict(), e.numpy(), x.numpy(), TINY["n_heads"])
    np.testing.assert_allclose(model.forward_tasks(e, x).detach().numpy(), expected,
                               rtol=1e-10, atol=1e-10)
