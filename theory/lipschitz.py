"""Interval bounds and Lipschitz constants for the exact sup error (verify/theorem/exact_sup.py).

For a fixed task z, f − g is a ReLU network in x and its max over the box is a MILP. Over a
cell of z's (z_S within δ of the centre c in ‖·‖_∞, z = 0 off the support S), the MILP lets z
range in f, which is a ReLU network in (e(z), x), and takes the teacher at c; what g can move
inside the cell is bounded by its Lipschitz constant in z: for every z in the cell and x in
the box, |g_o(z, x) − g_o(c, x)| ≤ Lg_o·δ. The constants come from sensitivity vectors: s_l[j]
bounds |Δ(unit j of layer l)| / δ between two points of the region (x in the box, z_S in the
cell), and a unit whose pre-activation is ≤ 0 on the whole region is 0 at both points, so its
s is 0 (the region's interval bounds find those units).

- the teacher, layer by layer (h⁰ = x does not move; z̃ = z/√K ≥ 0, one term per m ∈ S):
      pre_h = Σ_m z̃_m q_mh,   q_mh = h·W_m[:, h] + b_m[h],
      |Δ(z̃_m q_mh)| ≤ |Δz̃_m|·max|q_mh| + max z̃_m·|Δq_mh|,   |Δq_mh| ≤ |W_m[:, h]|·s_{l-1},
  so s_l[h] = Σ_m (max|q_mh| + z_hi,m·|W_m[:, h]|·s_{l-1}) / √K (masked), Lg_o = Σ_h |A_ho| s_L[h].
  For one layer, max|q_mh| ≤ Σ_i |W_mih| + b_mh: the bound |∂g_o/∂z_m| ≤ Σ_h |A_ho|·max|q_mh|/√K.
- a network f with layers (W_l, b_l) and ReLU between them, whose input moves by D·Δt (D: the
  input's derivative, e.g. the x columns, for the Lipschitz constant in x at a fixed task):
      s_1 = |W_1 D|·1,   s_l = |W_l|·(s_{l-1} masked),   L = |W_last|·(s masked)
  (ReLU is 1-Lipschitz, and |Wv|_j ≤ Σ_k |W_jk||v_k|); never larger than the product of the
  layers' ∞-norms with the first restricted to the moving columns.
Rounding: interval ends and the teacher's constants are rounded outward (γ_n bounds from
theory/bounds.gamma, then one ulp by np.nextafter), so a float64 end still bounds the exact one.
network_lipschitz (used by the tests' grid comparison only) is plain float64.
"""

from __future__ import annotations

import math

import numpy as np

from theory.bounds import gamma


def affine_interval(W: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """(lo, hi) of W·v + b over the box lo ≤ v ≤ hi (W: out × in), rounded outward.

    Each end is a sum of 2n + 1 terms (n = W's columns: pos·lo, neg·hi, b), so its float64
    value is within γ_{2n+1}·Σ|terms| of the exact one (Higham's bound, theory/bounds.gamma,
    in any summation order). Each end moves out by γ_{2n+4}·Σ|terms| as computed (the 3
    extra units cover the pad's own rounding), then one ulp for that subtraction. An end
    whose terms are all 0 is exactly 0 and stays put, so a ReLU whose bound is exactly 0
    stays stable (no binary) in the MILP."""
    pos, neg = np.maximum(W, 0.0), np.minimum(W, 0.0)
    lo_out, hi_out = pos @ lo + neg @ hi + b, pos @ hi + neg @ lo + b
    g = gamma(2 * W.shape[-1] + 4)
    pad_lo = g * (pos @ np.abs(lo) - neg @ np.abs(hi) + np.abs(b))
    pad_hi = g * (pos @ np.abs(hi) - neg @ np.abs(lo) + np.abs(b))
    return (np.where(pad_lo > 0, np.nextafter(lo_out - pad_lo, -np.inf), lo_out),
            np.where(pad_hi > 0, np.nextafter(hi_out + pad_hi, np.inf), hi_out))


def interval_bounds(layers, lo: np.ndarray, hi: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pre-activation (lo, hi) of every layer of a ReLU network (ReLU between layers, none
    after the last) over the input box [lo, hi]: plain interval arithmetic."""
    out = []
    for n, (W, b) in enumerate(layers):
        if n:
            lo, hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        lo, hi = affine_interval(W, b, lo, hi)
        out.append((lo, hi))
    return out


def network_lipschitz(layers, D: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per output o, L_o with |Δf_o| ≤ L_o·‖Δt‖_∞ when the input moves by D·Δt (D: in × k)
    and stays in the box [lo, hi] (the module docstring's first bound)."""
    bounds = interval_bounds(layers, lo, hi)
    s = np.abs(layers[0][0] @ D).sum(axis=1)
    for (W, _), (_, pre_hi) in zip(layers[1:], bounds[:-1], strict=True):
        s = np.abs(W) @ np.where(pre_hi > 0, s, 0.0)
    return s


def teacher_z_lipschitz(Ws, bs, A: np.ndarray, K: int, support, z_lo, z_hi) -> np.ndarray:
    """Per output o, Lg_o with |Δg_o| ≤ Lg_o·‖Δz_S‖_∞ over x ∈ [-1,1]^I and z_S in the box
    [z_lo, z_hi] ⊆ [0, 1]^|S| (z = 0 off S): the module docstring's second bound.
    Ws, bs: the teacher's layers, arrays (M, H_{l-1}, H_l) and (M, H_l)."""
    S = np.asarray(support)
    zt_lo, zt_hi = np.asarray(z_lo) / math.sqrt(K), np.asarray(z_hi) / math.sqrt(K)
    h_lo, h_hi = -np.ones(Ws[0].shape[1]), np.ones(Ws[0].shape[1])  # h⁰ = x
    s = np.zeros_like(h_lo)
    # Rounding, outward throughout: q's bounds come from affine_interval (outward). z̃'s ends
    # are z/√K in 2 roundings (γ_2 relative), so each corner product is within γ_3 of an exact
    # one, and the |S| corners' sum adds γ_{|S|}: pre's ends move out by γ_{2|S|+6}·Σ|corners|.
    # Every term of s and Lg is ≥ 0, so their relative errors add up: layer l's s is within
    # γ_{H_{l-1} + 2|S| + 6} of its exact formula (q_abs/√K: 2 roundings, z̃: 2, |W|ᵀs: H_{l-1},
    # the product: 1, the 2|S| terms' sum), and the readout adds γ_{H + 1}; `n_ops` counts them.
    n_ops = 0
    for W, b in zip(Ws, bs, strict=True):
        pre_lo, pre_hi, s_next, size = 0.0, 0.0, 0.0, 0.0
        for j, m in enumerate(S):
            q_lo, q_hi = affine_interval(W[m].T, b[m], h_lo, h_hi)  # q_mh over the region
            corners = np.stack([q_lo * zt_lo[j], q_lo * zt_hi[j], q_hi * zt_lo[j], q_hi * zt_hi[j]])
            pre_lo, pre_hi = pre_lo + corners.min(axis=0), pre_hi + corners.max(axis=0)
            size = size + np.abs(corners).max(axis=0)
            q_abs = np.maximum(np.abs(q_lo), np.abs(q_hi))
            s_next = s_next + q_abs / math.sqrt(K) + zt_hi[j] * (np.abs(W[m]).T @ s)
        pad = gamma(2 * len(S) + 6) * size
        pre_lo = np.where(pad > 0, np.nextafter(pre_lo - pad, -np.inf), pre_lo)
        pre_hi = np.where(pad > 0, np.nextafter(pre_hi + pad, np.inf), pre_hi)
        n_ops += W.shape[1] + 2 * len(S) + 6
        live = pre_hi > 0
        s = np.where(live, s_next, 0.0)
        h_lo, h_hi = np.maximum(pre_lo, 0.0), np.maximum(pre_hi, 0.0)
    n_ops += A.shape[0] + 1
    return np.nextafter((np.abs(A).T @ s) * (1.0 + gamma(n_ops + 2)), np.inf)
