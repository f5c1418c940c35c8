"""The infinite-width kernels of the MLP students, in closed form, and their finite-width
estimates: the NNGP and the NTK of a depth-L ReLU MLP at the students' own initialisation.

The students (verify.learning.students.mlp_student) are L hidden ReLU layers and a linear
readout, f(x) = W^{L+1} a^L, a^l = φ(h^l), h^l = W^l a^{l-1} + b^l, a^0 = x (the encoded task z
concatenated with the input), in *standard parametrization*: W^l_ij has variance σ_w²/n_{l-1}
(LeCun: σ_w² = 1) and the biases start at 0 (σ_b² = 0), though they train.

**NNGP** (Neal 1996; Lee et al. 2018; Cho and Saul 2009 for ReLU). The pre-activations of
layer l are, as every width → ∞, a Gaussian process with covariance
    K^1(x, x') = σ_w² x·x'/n_0 + σ_b²,
    K^{l+1} = σ_w² Σ^l + σ_b²,   Σ^l(x, x') = E[φ(u)φ(v)],  (u, v) ~ N(0, K^l restricted to x, x'),
and for ReLU, with θ = arccos(K^l(x,x') / √(K^l(x,x) K^l(x',x'))),
    Σ^l = √(K^l(x,x) K^l(x',x')) (sin θ + (π − θ) cos θ) / (2π),
    Σ̇^l = E[φ'(u)φ'(v)] = (π − θ) / (2π).
The output's NNGP is K^{L+1}; `nngp` returns the last hidden layer's Σ^L, which the empirical
Gram a^L·a'^L / n_L estimates (the readout's σ_w² times it is K^{L+1}).

**NTK** (Jacot et al. 2018; Lee et al. 2019). The empirical NTK Θ(x,x') = Σ_θ ∂f/∂θ(x) ∂f/∂θ(x')
of an MLP splits by layer: the weights of layer l give (δ^l·δ'^l)(a^{l-1}·a'^{l-1}) and its
biases δ^l·δ'^l, where δ^l = ∂f/∂h^l (`empirical_ntk` computes exactly this). As the widths
grow, a^{l-1}·a'^{l-1} → n_{l-1} Σ^{l-1} and δ^l·δ'^l → Π_{k=l}^{L} σ_w² Σ̇^k (the readout's
δ^{L+1} = 1).
- In *NTK parametrization* (h^l = σ_w W a^{l-1}/√n_{l-1} + σ_b b, W and b standard normal) the
  limit is Jacot's recursion Θ^1 = K^1, Θ^{l+1} = K^{l+1} + σ_w² Σ̇^l Θ^l (`ntk(...,
  "ntk")`).
- In *standard parametrization* the weights of layer l ≥ 2 contribute a^{l-1}·a'^{l-1} ∝ the
  width, while the first layer's (a^0 = x, of fixed size n_0) and every bias's stay O(1). So
  Θ_SP grows like the width n (all hidden widths equal), and what converges is
      Θ_SP / n → Σ_{l=2}^{L+1} Σ^{l-1} Π_{k=l}^{L} σ_w² Σ̇^k      (`ntk(..., "standard")`):
  Jacot's sum less its first layer's and the biases' terms, whose share vanishes like 1/n.
Kernel regression's mean predictor K(x*, X) K(X, X)⁻¹ Y does not depend on the kernel's
overall scale, but it does depend on the layers' relative shares, which differ between the
two parametrizations.

**The bias caveat.** With σ_b² = 0 (the students' init) both limits are homogeneous of degree 1
in each row, K(cx, x') = c K(x, x') for c > 0, while the teacher has biases; and in standard
parametrization the biases' own gradient terms vanish from Θ_SP / n whatever σ_b², so a bias
variance enters only through K^l (verify.kernel --sigma-b2). Measured on the kernel-vs-sgd
study's cpu scale (M = 16, K = 3, a 4-4-4 teacher, depth 4, 256 tasks × 16 x, identity
encoding, seed 1; one seed), held-out R² (RMSE) at σ_b² = 0, 0.1, 1: NTK 0.826 (0.140),
0.836 (0.132), 0.827 (0.137); NNGP 0.844 (0.127), 0.861 (0.115), 0.862 (0.114): a bias
variance raises the limits held out by at most 0.02 there, and the default stays σ_b² = 0.

Everything is float64 and batched over pairs: the analytic kernels of N × N' inputs are
(N, N') tensors built from the (N,) and (N',) diagonals, never more than one block in memory.
tests/test_kernels.py checks the analytic kernels against the empirical ones of finite
networks (the error falls like 1/√width) and a wrong variance or depth against them (caught).
"""

from __future__ import annotations

import math

import torch
from torch import nn

PARAMETRIZATIONS = ("standard", "ntk")


def _relu_expectations(k12: torch.Tensor, k11: torch.Tensor,
                       k22: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E[φ(u)φ(v)], E[φ'(u)φ'(v)]) for ReLU φ and (u, v) ~ N(0, [[k11, k12], [k12, k22]]),
    elementwise (k11, k22 broadcast to k12's shape): Cho and Saul's arc-cosine kernels of
    degree 1 and 0."""
    norm = torch.sqrt(k11 * k22)
    cos = torch.clamp(k12 / torch.where(norm > 0, norm, 1.0), -1.0, 1.0)
    theta = torch.arccos(cos)
    value = norm * (torch.sin(theta) + (math.pi - theta) * cos) / (2 * math.pi)
    derivative = (math.pi - theta) / (2 * math.pi)
    return value, derivative


def _layers(x: torch.Tensor, y: torch.Tensor | None, depth: int, sigma_w2: float, sigma_b2: float):
    """Per hidden layer l = 1..depth: (K^l(X, Y), Σ^l(X, Y), Σ̇^l(X, Y)); and K^1's inputs.
    y None: the diagonal, each row with itself (n,), in closed form at θ = 0: Σ^l = K^l / 2,
    Σ̇^l = 1/2. Through x @ xᵀ it is not exact: arccos near 1 turns an inner product's last-bit
    rounding δ into θ ≈ √(2δ), a relative 1e-8 of the kernel, and BLAS kernels of different
    block shapes round it differently (seen: gram's diagonal against gram_diagonal's)."""
    x = x.to(torch.float64)
    n0 = x.shape[1]
    kx = sigma_w2 * (x * x).sum(1) / n0 + sigma_b2  # the diagonals K^l(x, x), K^l(y, y)
    if y is None:
        out = []
        for _ in range(depth):
            # E[φ(u)²] = K/2, E[φ'(u)²] = 1/2 (1/4 at K = 0, as the arc-cosine form reads it there)
            out.append((kx, kx / 2, torch.where(kx > 0, 0.5, 0.25).to(torch.float64)))
            kx = sigma_w2 * kx / 2 + sigma_b2
        return out
    y = y.to(torch.float64)
    k = sigma_w2 * (x @ y.T) / n0 + sigma_b2
    ky = sigma_w2 * (y * y).sum(1) / n0 + sigma_b2
    out = []
    for _ in range(depth):
        value, derivative = _relu_expectations(k, kx[:, None], ky[None, :])
        out.append((k, value, derivative))
        k = sigma_w2 * value + sigma_b2
        kx, ky = sigma_w2 * kx / 2 + sigma_b2, sigma_w2 * ky / 2 + sigma_b2  # E[φ(u)²] = K/2 for ReLU
    return out


def _check(depth: int, sigma_w2: float, sigma_b2: float) -> None:
    if not (isinstance(depth, int) and depth >= 1):
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    if not (sigma_w2 > 0 and sigma_b2 >= 0):
        raise ValueError(f"need σ_w² > 0 and σ_b² ≥ 0, got {sigma_w2}, {sigma_b2}")


def nngp(x: torch.Tensor, y: torch.Tensor | None = None, *, depth: int, sigma_w2: float = 1.0,
         sigma_b2: float = 0.0, diagonal: bool = False) -> torch.Tensor:
    """Σ^L(X, Y): the infinite-width limit of the last hidden layer's Gram a^L(x)·a^L(y) / n_L
    (the output's NNGP is σ_w² times it, plus σ_b²). y None: Σ^L(X, X), its diagonal in closed
    form; diagonal: that diagonal alone (n,)."""
    _check(depth, sigma_w2, sigma_b2)
    return _gram_or_cross(lambda a, b: _layers(a, b, depth, sigma_w2, sigma_b2)[-1][1], x, y, diagonal)


def _gram_or_cross(kernel, x: torch.Tensor, y: torch.Tensor | None, diagonal: bool) -> torch.Tensor:
    """kernel(x, y) (b None: each row of x with itself, in closed form): K(X, Y); for y None,
    K(X, X) with the closed-form diagonal (_layers says why); with diagonal, that alone."""
    if diagonal:
        if y is not None:
            raise ValueError("diagonal=True is the kernel of each row of x with itself: give no y")
        return kernel(x, None)
    if y is not None:
        return kernel(x, y)
    out = kernel(x, x)
    out.diagonal().copy_(kernel(x, None))
    return out


def ntk(x: torch.Tensor, y: torch.Tensor | None = None, *, depth: int, parametrization: str = "standard",
        sigma_w2: float = 1.0, sigma_b2: float = 0.0, diagonal: bool = False) -> torch.Tensor:
    """The infinite-width NTK of the scalar output, Θ(X, Y): in NTK parametrization Jacot's
    limit; in standard parametrization the limit of Θ_SP / n (module docstring). y None:
    Θ(X, X), its diagonal in closed form; diagonal: that diagonal alone (n,)."""
    _check(depth, sigma_w2, sigma_b2)
    if parametrization not in PARAMETRIZATIONS:
        raise ValueError(f"parametrization must be one of {PARAMETRIZATIONS}, got {parametrization!r}")
    return _gram_or_cross(lambda a, b: _ntk(a, b, depth, parametrization, sigma_w2, sigma_b2), x, y, diagonal)


def _ntk(x: torch.Tensor, y: torch.Tensor | None, depth: int, parametrization: str, sigma_w2: float,
         sigma_b2: float) -> torch.Tensor:
    layers = _layers(x, y, depth, sigma_w2, sigma_b2)
    if parametrization == "ntk":
        theta = layers[0][0]  # Θ^1 = K^1
        for _, value, derivative in layers:  # Θ^{l+1} = K^{l+1} + σ_w² Σ̇^l Θ^l
            theta = (sigma_w2 * value + sigma_b2) + sigma_w2 * derivative * theta
        return theta
    # Standard: Σ_{l=2}^{L+1} Σ^{l-1} Π_{k=l}^{L} σ_w² Σ̇^k, accumulated from the readout down.
    theta = torch.zeros_like(layers[0][0])
    downstream = torch.ones_like(theta)  # Π_{k=l}^{L} σ_w² Σ̇^k, empty for the readout (l = L+1)
    for l in range(depth, 0, -1):  # the weights W^{l+1} read a^l: their term is Σ^l × downstream
        _, value, derivative = layers[l - 1]
        theta = theta + value * downstream
        downstream = downstream * sigma_w2 * derivative
    return theta


def empirical_ntk(net: nn.Sequential, x: torch.Tensor, y: torch.Tensor | None = None, *,
                  parametrization: str = "standard", sigma_w2: float = 1.0,
                  sigma_b2: float = 0.0) -> tuple[torch.Tensor, dict]:
    """The exact NTK of a Linear/ReLU nn.Sequential with one output, Θ(X, Y) = Σ_θ ∂f(x)/∂θ
    ∂f(y)/∂θ, by layer (weights: (δ^l·δ'^l)(a^{l-1}·a'^{l-1}); biases: δ^l·δ'^l), without
    forming the Jacobian; and the last hidden layer's activations of x and y.

    "standard": the network's own parameters. "ntk": the same function's NTK in NTK
    parametrization (its weights W√n_{l-1}/σ_w and biases b/σ_b as the parameters): each
    layer's weight term times σ_w²/n_{l-1} and its bias term times σ_b²."""
    if parametrization not in PARAMETRIZATIONS:
        raise ValueError(f"parametrization must be one of {PARAMETRIZATIONS}, got {parametrization!r}")
    y = x if y is None else y
    linears = [m for m in net if isinstance(m, nn.Linear)]
    if net[-1] is not linears[-1] or linears[-1].out_features != 1:
        raise ValueError("empirical_ntk takes an MLP ending in a Linear with one output")
    dtype = next(net.parameters()).dtype

    def forward(inputs):
        """Each Linear's input a^{l-1} and δ^l = ∂f/∂h^l at its output, per row."""
        a, seen = inputs.to(dtype), []
        for module in net:
            if isinstance(module, nn.Linear):
                h = module(a)
                h.retain_grad()
                seen.append((a, h))
                a = h
            else:
                a = module(a)
        a.sum().backward()  # rows are independent: each row's δ^l = ∂f(row)/∂h^l(row)
        return [(a_in.detach(), h.grad.detach()) for a_in, h in seen]

    with torch.enable_grad():
        fx = forward(x)
        fy = fx if y is x else forward(y)
    net.zero_grad(set_to_none=True)
    theta = torch.zeros(len(x), len(y), dtype=dtype)
    for (ax, dx), (ay, dy), module in zip(fx, fy, linears, strict=True):
        delta = dx @ dy.T
        weight_scale, bias_scale = ((1.0, 1.0) if parametrization == "standard"
                                    else (sigma_w2 / module.in_features, sigma_b2))
        theta += weight_scale * delta * (ax @ ay.T)
        if module.bias is not None:
            theta += bias_scale * delta
    return theta, dict(last_hidden=(fx[-1][0], fy[-1][0]))
