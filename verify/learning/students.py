"""The student networks of "Scaling can lead to compositional generalization", in torch.

Each is rebuilt from the official JAX/Flax code (repository smonsays/scale-compositionality,
commit 423c6ea); every docstring names the official file its facts were read from. A task is
an encoding e (T, E) and P input samples x (T, P, I); the teacher's output has size O.

Every student has
  forward_tasks(e, x) -> (T, P, O)   the official call: one prediction per x sample;
  forward(rows) -> (N, O)            rows = [e, x] (N, E + I): the network as a function of one
                                     (z, x) pair, for sup-error measurement.
A student whose prediction for x_j also reads the task's earlier samples (the transformer)
says so with `reads_sequence = True`: its sup error is then measured over whole sequences,
every position's prediction, as its R² scores them (verify.metrics.sup_error).

Everything works after `.double()`: no constant is stored in a fixed dtype, and the rotary
tables are built in the dtype of the activations they rotate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

# Standard deviation of a standard normal truncated to [-2, 2]: dividing by it makes the
# truncated draw's variance exactly 1/fan_in (Flax variance_scaling, hypernetwork.py).
TRUNC_STD = 0.87962566103423978
# Flax's LayerNorm default epsilon (torch's default is 1e-5).
LN_EPS = 1e-6


# ----------------------------------------------------------------------------- initialisation

def lecun_normal_(weight: torch.Tensor) -> torch.Tensor:
    """Flax's default Dense kernel init, in place on a torch Linear weight (out, in).

    flax.linen.Dense uses variance_scaling(1.0, 'fan_in', 'truncated_normal'): a standard normal
    truncated to [-2, 2] times sqrt(1/fan_in) / TRUNC_STD, so the variance is 1/fan_in
    (used unchanged by policy.py's nn.Dense layers).
    """
    fan_in = weight.shape[1]
    std = math.sqrt(1.0 / fan_in) / TRUNC_STD
    with torch.no_grad():
        return nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-2.0 * std, b=2.0 * std)


def dense(in_dim: int, out_dim: int, bias: bool = True) -> nn.Linear:
    """A Linear initialised like flax.linen.Dense: LeCun-normal kernel, zero bias."""
    layer = nn.Linear(in_dim, out_dim, bias=bias)
    lecun_normal_(layer.weight)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


def xavier_linear(in_dim: int, out_dim: int) -> nn.Linear:
    """A bias-free Linear with xavier_uniform kernel, the transformer blocks' init (fsdp.py).

    Flax's DenseGeneral flattens its kernel to (prod(in axes), prod(feature axes)) before
    calling the initialiser, so the (d_model, n_heads, Dh) query kernel has the fans of a
    plain (d_model -> n_heads*Dh) Linear, and the (n_heads, Dh, d_model) output kernel those
    of (n_heads*Dh -> d_model).
    """
    layer = nn.Linear(in_dim, out_dim, bias=False)
    nn.init.xavier_uniform_(layer.weight)
    return layer


def mlp_student(in_dim: int, widths: Sequence[int], out_dim: int) -> nn.Sequential:
    """policy.MultilayerPerceptronPolicy: Dense/ReLU stack on [z, x], Flax default init.

    Linear(in, w1), ReLU, ..., Linear(w_last, out); a plain nn.Sequential, so callers can walk
    its layers. The official policy repeats z for each sample and concatenates [z, x].
    """
    layers: list[nn.Module] = []
    prev = in_dim
    for w in widths:
        layers += [dense(prev, w), nn.ReLU()]
        prev = w
    layers.append(dense(prev, out_dim))
    return nn.Sequential(*layers)


# ----------------------------------------------------------------------------- rotary

def rotary_sin_cos(dim: int, length: int, dtype: torch.dtype = torch.float64,
                   device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin, cos) tables of shape (length, dim) for rotary embeddings (rotary.py, flaxformer).

    angle[p, j] = p / 10000^(2j/dim) for p < length, j < dim/2; both tables hold
    [angles, angles]. Built in float64 and cast, so float32 tables are at least as exact as
    the official float32 ones and float64 modules get float64 tables.
    """
    if dim % 2:
        raise ValueError(f"rotary embeddings need an even head size, got {dim}")
    fraction = torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim
    frequency = 1.0 / (10000.0 ** fraction)
    angles = torch.arange(length, dtype=torch.float64, device=device)[:, None] * frequency[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.sin().to(dtype), angles.cos().to(dtype)


def rotate_half(v: torch.Tensor) -> torch.Tensor:
    """[v1, v2] -> [-v2, v1] over the last axis (rotary.py)."""
    v1, v2 = v.chunk(2, dim=-1)
    return torch.cat([-v2, v1], dim=-1)


def apply_rotary(v: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """Rotate v (..., L, n_heads, Dh) by position; sin, cos are (L, Dh) (rotary.py)."""
    sin, cos = sin[:, None, :], cos[:, None, :]  # broadcast over heads
    return v * cos + rotate_half(v) * sin


# ----------------------------------------------------------------------------- transformer

def layer_norm(dim: int) -> nn.LayerNorm:
    """Bias-free LayerNorm, scale 1: nn.LayerNorm(use_bias=False) in transformer.py."""
    return nn.LayerNorm(dim, eps=LN_EPS, bias=False)


class CausalSelfAttention(nn.Module):
    """transformer.CausalAttn: QK-LayerNorm, rotary, causal softmax attention, no biases."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        # Three separate maps, not one fused (d, 3d) Linear: xavier's fan_out must be d.
        self.query = xavier_linear(d_model, d_model)
        self.key = xavier_linear(d_model, d_model)
        self.value = xavier_linear(d_model, d_model)
        # One scale vector of size Dh, shared by all heads (Flax normalises the last axis).
        self.q_norm = layer_norm(self.head_dim)
        self.k_norm = layer_norm(self.head_dim)
        self.out = xavier_linear(d_model, d_model)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, L, _ = h.shape
        shape = (B, L, self.n_heads, self.head_dim)
        q = self.q_norm(self.query(h).view(shape))
        k = self.k_norm(self.key(h).view(shape))
        v = self.value(h).view(shape)
        sin, cos = rotary_sin_cos(self.head_dim, L, dtype=q.dtype, device=q.device)
        q, k = apply_rotary(q, sin, cos), apply_rotary(k, sin, cos)
        q = q / math.sqrt(self.head_dim)
        att = torch.einsum("bqhd,bkhd->bhqk", q, k)
        causal = torch.ones(L, L, dtype=torch.bool, device=h.device).tril()
        # The official code fills with the dtype's most negative finite value, not -inf.
        att = att.masked_fill(~causal, torch.finfo(att.dtype).min)
        # Softmax in float32 as officially, but never below the module's own precision.
        soft_dtype = torch.float64 if att.dtype == torch.float64 else torch.float32
        att = torch.softmax(att.to(soft_dtype), dim=-1).to(v.dtype)
        y = torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(B, L, -1)  # heads merged h-major
        return self.out(y)


class MLP(nn.Module):
    """transformer.Mlp: bias-free Dense, GELU (jax.nn.gelu's default tanh form), Dense."""

    def __init__(self, d_model: int, d_ffw: int):
        super().__init__()
        self.fc = xavier_linear(d_model, d_ffw)
        self.proj = xavier_linear(d_ffw, d_model)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(h), approximate="tanh"))


class Block(nn.Module):
    """transformer.TBlock: pre-LayerNorm residual attention then residual MLP."""

    def __init__(self, d_model: int, n_heads: int, d_ffw: int):
        super().__init__()
        self.ln1, self.attn = layer_norm(d_model), CausalSelfAttention(d_model, n_heads)
        self.ln2, self.mlp = layer_norm(d_model), MLP(d_model, d_ffw)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(self.ln1(h))
        return h + self.mlp(self.ln2(h))


def check_task_inputs(student: nn.Module, e: torch.Tensor, x: torch.Tensor) -> None:
    if e.ndim != 2 or e.shape[1] != student.E:
        raise ValueError(f"e must be (T, {student.E}), got {tuple(e.shape)}")
    if x.ndim != 3 or x.shape[2] != student.I or x.shape[0] != e.shape[0]:
        raise ValueError(f"x must be ({e.shape[0]}, P, {student.I}), got {tuple(x.shape)}")


def split_rows(student: nn.Module, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rows (N, E + I) -> e (N, E), x (N, 1, I): each row is a one-sample task."""
    if rows.ndim != 2 or rows.shape[1] != student.E + student.I:
        raise ValueError(f"rows must be (N, {student.E + student.I}), got {tuple(rows.shape)}")
    return rows[:, :student.E], rows[:, None, student.E:]


class TransformerStudent(nn.Module):
    """policy.TransformerPolicy over transformer.Transformer (defaults from configs/teacher.py).

    Sequence [z_token, x_1, ..., x_P]: z embedded by a bias-free Dense to one token, each x by
    a Dense with bias (both Flax default init, policy.py); n_layers pre-LN blocks; a final
    bias-free LayerNorm (transformer.py); an output Dense with bias read at the x tokens only.
    Positions count from 0 at the z token, so the prediction for x_j sees z and x_1..x_j.
    """

    # The prediction for x_j depends on x_1..x_{j-1}: one (z, x) row is not the whole function.
    reads_sequence = True

    def __init__(self, E: int, I: int, O: int, d_model: int = 256, n_heads: int = 4,
                 n_layers: int = 4, d_ffw: int = 1024):
        super().__init__()
        self.E, self.I, self.O = E, I, O
        self.d_model, self.n_layers = d_model, n_layers
        self.embed_z = dense(E, d_model, bias=False)
        self.embed_x = dense(I, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ffw) for _ in range(n_layers))
        self.ln_f = layer_norm(d_model)
        self.head = dense(d_model, O)

    def _trunk(self, e: torch.Tensor, x: torch.Tensor,
               keep: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Final-normed hidden states (T, P+1, d_model); appends block outputs to keep."""
        check_task_inputs(self, e, x)
        h = torch.cat([self.embed_z(e)[:, None, :], self.embed_x(x)], dim=1)
        for block in self.blocks:
            h = block(h)
            if keep is not None:
                keep.append(h)
        return self.ln_f(h)

    def macs_per_task(self, P: int) -> int:
        """Multiply-adds of one task's forward: every matrix once per token, plus the
        attention scores and mixing (2·L²·d_model a block, L = P + 1 tokens)."""
        L = P + 1
        matrices = sum(p.numel() for p in self.parameters() if p.ndim > 1)
        return L * matrices + self.n_layers * 2 * L * L * self.d_model

    def forward_tasks(self, e: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(T, E), (T, P, I) -> (T, P, O): the official call."""
        return self.head(self._trunk(e, x)[:, 1:])

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """(N, E + I) -> (N, O): each row as the sequence [z, x], i.e. a task's first prediction
        only; the sup error reads every position (reads_sequence)."""
        e, x = split_rows(self, rows)
        return self.forward_tasks(e, x)[:, 0]

    @torch.no_grad()
    def probe_features(self, e: torch.Tensor, x: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """What callbacks.ExtendedActivationProbing reads for a transformer policy.

        Flax's capture_intermediates records the z input, each block's output and the final
        LayerNorm's output; the probe takes the last token of each sequence. Returns
        [("encoding", e (T, E)), ("block1", (T, d_model)), ..., ("final_norm", (T, d_model))].
        """
        blocks: list[torch.Tensor] = []
        final = self._trunk(e, x, keep=blocks)
        features = [("encoding", e.detach())]
        features += [(f"block{i + 1}", h[:, -1]) for i, h in enumerate(blocks)]
        features.append(("final_norm", final[:, -1]))
        return features


# ----------------------------------------------------------------------------- hypernetwork

class HypernetworkStudent(nn.Module):
    """policy.HypernetworkPolicy (hypernetwork.py): a generator maps e to a target MLP's weights.

    Generator (policy.py): Dense(LayerNorm(e)), the LayerNorm with scale and bias, the Dense
    with Flax default init; these are the only trainable parameters.
    Target (hypernetwork.VarianceScaledMLP, one hidden layer):
        out = relu(x @ (W1 s1) + b1) @ (W2 s2) + b2,
    whose kernels are rescaled in the forward pass (VarianceScaledKernel, truncated-normal
    fan-in mode): s1 = sqrt(1/I)/TRUNC_STD, s2 = sqrt(1/d_ffw)/TRUNC_STD; biases unscaled.
    The generated vector is split as [W1 (I, d_ffw) row-major, b1, W2 (d_ffw, O) row-major, b2],
    the order in which the official ravel_pytree flattens the target's parameter tree
    (norm_dense0 before norm_dense_out; in each, the kernel module sorts before 'bias').
    """

    def __init__(self, E: int, I: int, O: int, d_ffw: int = 1024):
        super().__init__()
        self.E, self.I, self.O, self.d_ffw = E, I, O, d_ffw
        self.shapes = [(I, d_ffw), (d_ffw,), (d_ffw, O), (O,)]
        self.n_params = sum(math.prod(s) for s in self.shapes)
        self.norm = nn.LayerNorm(E, eps=LN_EPS)
        self.generator = dense(E, self.n_params)
        # Python floats, so the scales follow the module's dtype after .double().
        self.s1 = math.sqrt(1.0 / I) / TRUNC_STD
        self.s2 = math.sqrt(1.0 / d_ffw) / TRUNC_STD

    def macs_per_task(self, P: int) -> int:
        """Multiply-adds of one task's forward: the generator once, the target net P times."""
        return self.E * self.n_params + P * self.d_ffw * (self.I + self.O)

    def target_params(self, e: torch.Tensor) -> list[torch.Tensor]:
        """Per-task [W1 (T, I, H), b1 (T, H), W2 (T, H, O), b2 (T, O)], unscaled."""
        flat = self.generator(self.norm(e))
        pieces = flat.split([math.prod(s) for s in self.shapes], dim=-1)
        return [p.reshape(e.shape[0], *s) for p, s in zip(pieces, self.shapes, strict=True)]

    def forward_tasks(self, e: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(T, E), (T, P, I) -> (T, P, O): each task's generated network on its samples."""
        check_task_inputs(self, e, x)
        W1, b1, W2, b2 = self.target_params(e)
        h = torch.relu(torch.bmm(x, W1 * self.s1) + b1[:, None, :])
        return torch.bmm(h, W2 * self.s2) + b2[:, None, :]

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """(N, E + I) -> (N, O): exact, the hypernetwork is per-sample anyway."""
        e, x = split_rows(self, rows)
        return self.forward_tasks(e, x)[:, 0]


# ----------------------------------------------------------------------------- training helpers

def decay_parameter_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups matching run.py's mask: decay exactly the parameters with ndim != 1.

    So kernels are decayed and biases and LayerNorm scales/biases are not. Empty groups are
    dropped.
    """
    params = list(module.parameters())
    groups = [{"params": [p for p in params if p.ndim != 1], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim == 1], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def parameter_count(module: nn.Module) -> int:
    """Number of scalar parameters (run.py logs the same count as n_params)."""
    return sum(p.numel() for p in module.parameters())
