"""The box hull over the task: student minus teacher over a whole support at once (HullNet).

`--z enumerate` (graph.py) builds one ReLU network of x per task z of a support. `--z hull` builds
one per support, of the joint input u = (ζ, x): ζ ∈ R^K holds the weights of the support's modules
S = (S_1, …, S_k) in its first k slots (z_{S_j} = ζ_j; the other modules are 0, and so are the
slots j > k, whose box is [0, 0]), and ζ ranges over the box Z = Π_j [min level, max level]: for
discrete weights [0.5, 1] on every active module, which holds every tuple of levels.

Layer 0 of the difference D = f(e(z), x) − g(z, x), on a box [lo, hi] of u:
- the student's units: W₁ₓx + W₁ₑ e(z) + b₁ with e(z) = E z linear (identity: E = 1; orthogonal:
  E = Q; any other encoding is refused), so W₁ₑ E_S ζ + W₁ₓ x + b₁: affine in u, exact;
- the teacher's units: Σ_j w_j a_hj(x) with w_j = ζ_j/√K and a_hj(x) = Σ_i W[S_j, i, h] x_i +
  b[S_j, h] (hyperteacher.py: W(z̃), b(z̃) = Σ z̃_m (W_m, b_m), z̃ = z/√K), bilinear in (ζ, x).

The relaxation. For a product w·a with w ∈ [w_l, w_u], a ∈ [a_l, a_u] and any centre (w_c, a_c),

    w·a = w_c·a + a_c·w − w_c·a_c + (w − w_c)(a − a_c),   |(w − w_c)(a − a_c)| ≤ r_w·r_a,

with r_w = max(w_u − w_c, w_c − w_l), r_a likewise: an identity and a product of two bounds, so it
rests on nothing but [w_l, w_u] ∋ w and [a_l, a_u] ∋ a. At the midpoints it is the McCormick
envelope's two over-planes averaged (upper end) and its two under-planes averaged (lower end):
those averages share their slopes and differ by (w_u − w_l)(a_u − a_l)/2, the half-width 2·r_w·r_a.
Applied to each w_j·a_hj(x), with a_hj's range over the box's x (interval arithmetic, widened by
its rounding), a_hj(x) affine in x, it makes each teacher unit an affine function of u plus a
half-width d_h = Σ_j r_w·r_a: exactly the form of graph.py's layer 0 (W₀u + b₀, a per-unit margin
d₀ that every bound adds), now per box. So bounds.py and bab.py bound and split the joint box as
they do x-boxes: the products' relaxation shrinks as the product of the two widths, and branch
and bound splits ζ as well as x (the bound's |slope| × width, as for x).

Floating point, per box (the bound holds for the exact f(E z, x) − g(z, x) at every real u in it):
- [a_l, a_u]: the interval sum, then widened by γ_{I+1}·(Σ_i|W| + |b|) (|x| ≤ 1) and rounded
  outward (nextafter); [w_l, w_u] = [ζ_l, ζ_u]·fl(1/√K) widened by 8u relative and rounded
  outward (ζ ≥ 0 is checked). The centres are any floats; r_w, r_a are rounded up.
- the affine part's computed coefficients (Σ_j w_c W_j over x, a_c·fl(1/√K) over ζ_j, and the
  constant Σ_j w_c(b_j − a_c)) are off by ≤ γ_{2K+4}·Σ_j (|w_c|(Σ_i|W_j| + |b_j| + |a_c|) +
  |a_c|·fl(1/√K)) per unit over |u| ≤ 1, and the student's W₁ₑ E_S by γ_{M+2}·|W₁ₑ||E_S|·1: both go
  into d₀ with the half-widths (summed, then rounded up by γ_{K+2} and nextafter).
bounds.py's own margins assume |u| ≤ 1, which holds: the levels are in [0.5, 1].

Splits (`tighten`, `split_at`). The sup is over the support's tasks, whose active weights are
levels, so a box's ζ_j side is cut between two levels and shrunk to the levels it holds (its ends
are levels), and a box whose ζ_j side holds none is dropped: it holds no task. A side that holds
one level has width 0 (r_w = 0: the products with it are exact).

The lower end. A point u found by the search has a ζ of the box, not always a task of the family;
`project` rounds each active ζ_j to the nearest level (so the error reported is one the network
has at a real task), and bab.py evaluates and reports only projected points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from theory.bounds import gamma
from verify.certify.bounds import UP, U, nextup
from verify.certify.graph import linear_layers, stacked_layers


def nextdown(t: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(t, torch.full_like(t, -float("inf")))


def product_relaxation(wl, wu, al, au):
    """(w_c, a_c, r) with w·a = w_c·a + a_c·w − w_c·a_c ± r for every w ∈ [wl, wu], a ∈ [al, au]:
    the midpoints (the McCormick planes averaged), r ≥ the half-widths' product, rounded up."""
    wc, ac = (wl + wu) / 2, (al + au) / 2
    rw = nextup(torch.maximum(wu - wc, wc - wl))
    ra = nextup(torch.maximum(au - ac, ac - al))
    return wc, ac, nextup(rw * ra)


@dataclass
class HullNet:
    """D over the joint boxes (ζ, x) of T supports (see the module docstring); the shared layers
    after layer 0 are graph.py's (the student's, and the identity on the teacher's units)."""

    Wz: torch.Tensor  # (T, n_s, K): the student's ζ-columns per support, W₁ₑ E_S
    Ws: torch.Tensor  # (n_s, I): its x-columns
    b1: torch.Tensor  # (n_s,)
    d_s: torch.Tensor  # (T, n_s): the rounding of Wz over |ζ| ≤ 1
    C: torch.Tensor  # (T, K, H, I): W[S_j, :, h] per slot (0 on empty slots)
    c: torch.Tensor  # (T, K, H): b[S_j, h]
    zlo: torch.Tensor  # (T, K): the slots' boxes (0 on empty slots)
    zhi: torch.Tensor  # (T, K)
    levels: torch.Tensor  # (L,): the levels an active weight takes
    K: int
    hidden: list[tuple[torch.Tensor, torch.Tensor]]
    W_out: torch.Tensor
    b_out: torch.Tensor

    @property
    def device(self):
        return self.Ws.device

    @property
    def T(self) -> int:
        return self.C.shape[0]

    @property
    def I(self) -> int:  # noqa: E743  (the joint input's size, K + the teacher's I)
        return self.K + self.Ws.shape[1]

    @property
    def O(self) -> int:  # noqa: E743
        return self.W_out.shape[0]

    @property
    def widths(self) -> list[int]:
        return [self.Ws.shape[0] + self.C.shape[2]] + [len(b) for _, b in self.hidden]

    def layers(self):
        return [*self.hidden, (self.W_out, self.b_out)]

    def to(self, device) -> HullNet:
        move = lambda t: t.to(device)  # noqa: E731
        return HullNet(
            *(move(t) for t in (self.Wz, self.Ws, self.b1, self.d_s, self.C, self.c, self.zlo, self.zhi)),
            move(self.levels),
            self.K,
            [(move(W), move(b)) for W, b in self.hidden],
            move(self.W_out),
            move(self.b_out),
        )

    def root(self, task):
        I = self.Ws.shape[1]
        one = torch.ones(len(task), I, dtype=torch.float64, device=self.device)
        return torch.cat([self.zlo[task], -one], 1), torch.cat([self.zhi[task], one], 1)

    def project(self, task, u):
        """u with each active ζ_j rounded to the nearest level (a real task); the gradient passes
        through as the identity's."""
        zeta = u[:, : self.K]
        near = self.levels[(zeta[..., None] - self.levels).abs().argmin(-1)]
        near = torch.where(self.zhi[task] > 0, near, torch.zeros_like(near))
        zeta = zeta + (near - zeta).detach()
        return torch.cat([zeta, u[:, self.K :]], 1)

    def tighten(self, task, lo, hi):
        """(lo, hi, keep): each active ζ_j's interval shrunk to the hull of the levels in it, and keep
        False for a box where some active ζ_j holds no level. The search is over the support's tasks,
        whose weights are levels: a box's part between two levels holds none of them, and its bound
        (D there is not one the family has) is no part of the sup. Without this, best-first refined
        a box of ζ ∈ [0.6901, 0.6902] × [0.9556, 0.9557] for minutes (M 16, K 3: the stall at 5.17).
        The endpoints are levels (their float64 values, compared exactly), so r_w = 0 on a ζ_j that
        holds one level: the teacher's product with it is exact there."""
        L = self.levels.sort().values
        zl, zh = lo[:, : self.K], hi[:, : self.K]
        active = self.zhi[task] > 0
        i = torch.searchsorted(L, zl.contiguous(), right=False)  # first level ≥ zl
        j = torch.searchsorted(L, zh.contiguous(), right=True) - 1  # last level ≤ zh
        keep = ~(active & (i > j)).any(1)
        n = len(L)
        new_l = torch.where(active & (i < n), L[i.clamp(max=n - 1)], zl)
        new_h = torch.where(active & (j >= 0), L[j.clamp(min=0)], zh)
        lo = torch.cat([torch.where(keep[:, None], new_l, zl), lo[:, self.K :]], 1)
        hi = torch.cat([torch.where(keep[:, None], new_h, zh), hi[:, self.K :]], 1)
        return lo, hi, keep

    def split_at(self, task, lo, hi, axis, mid):
        """Where to cut each box along `axis`: on an active ζ_j, halfway between the two middle levels
        of the ones in its interval (so that, tightened, the halves hold half the levels each, and
        neither holds the other's), elsewhere `mid`, the side's midpoint."""
        L = self.levels.sort().values
        rows = torch.arange(len(task), device=lo.device)
        on_z = axis < self.K
        a = axis.clamp(max=self.K - 1)
        zl, zh = lo[rows, a], hi[rows, a]
        i = torch.searchsorted(L, zl.contiguous())
        j = torch.searchsorted(L, zh.contiguous(), right=True) - 1
        m = ((i + j) // 2).clamp(0, len(L) - 2)
        between = (L[m] + L[m + 1]) / 2
        return torch.where(on_z & (j > i), between, mid)

    def forward(self, task, u):
        """D at joint points u (B, K + I) of the supports `task` (B,), in float64: (B, O)."""
        zeta, x = u[:, : self.K], u[:, self.K :]
        hs = x @ self.Ws.T + torch.einsum("bnk,bk->bn", self.Wz[task], zeta) + self.b1
        a = torch.einsum("bkhi,bi->bkh", self.C[task], x) + self.c[task]
        ht = torch.einsum("bk,bkh->bh", zeta / math.sqrt(self.K), a)
        h = torch.relu(torch.cat([hs, ht], 1))
        for W, b in self.hidden:
            h = torch.relu(h @ W.T + b)
        return h @ self.W_out.T + self.b_out

    def magnitude0(self) -> torch.Tensor:
        task = torch.arange(self.T, device=self.device)
        W0, b0, d0 = self.first(task, *self.root(task))
        return (W0.abs().sum(2) + b0.abs() + d0).max(0).values

    def split_gain(self, task, lo, hi, weight):
        """Per input of each box, 4× what halving it takes off the products' half-widths d_h, each
        weighted by |the worst row's multiplier| of unit h (`weight` (B, n0)): r_w·r_a halves with
        ζ_j's side, and r_a loses |W[S_j, i, h]|·side_i/4 when x_i is halved. On the scale of
        bounds.py's |slope| × width (4× what a halving takes off a linear function's peak)."""
        K, n_s = self.K, self.Ws.shape[0]
        r = 1.0 / math.sqrt(K)
        side = hi - lo
        C = self.C[task].abs()  # (B, K, H, I)
        rw = side[:, :K] * r / 2  # (B, K)
        ra = (C * side[:, None, None, K:]).sum(3) / 2  # (B, K, H)
        lam = weight[:, n_s:]  # (B, H): the teacher's units
        g_z = 2 * torch.einsum("bh,bk,bkh->bk", lam, rw, ra)
        g_x = torch.einsum("bh,bk,bkhi->bi", lam, rw, C) * side[:, K:]
        return torch.cat([g_z, g_x], 1)

    def first(self, task, lo, hi):
        """(W₀ (B, n0, K + I), b₀ (B, n0), d₀ (B, n0)) on the boxes [lo, hi] of the supports `task`:
        layer 0 is within W₀u + b₀ ± d₀ on its box (the module docstring)."""
        K = self.K
        B = len(task)
        zl, zu, xl, xh = lo[:, :K], hi[:, :K], lo[:, K:], hi[:, K:]
        if (zl < 0).any():
            raise ValueError("the hull needs weights ζ ≥ 0")
        C, c = self.C[task], self.c[task]  # (B, K, H, I), (B, K, H)
        Cp, Cn = C.clamp(min=0), C.clamp(max=0)
        lo_, hi_ = xl[:, None, None, :], xh[:, None, None, :]
        al = (Cp * lo_ + Cn * hi_).sum(3) + c
        au = (Cp * hi_ + Cn * lo_).sum(3) + c
        ea = gamma(C.shape[3] + 1) * (C.abs().sum(3) + c.abs()) * UP
        al, au = nextdown(al - ea), nextup(au + ea)
        r = 1.0 / math.sqrt(K)
        wl = nextdown(zl * r * (1 - 8 * U))[:, :, None].expand_as(al)
        wu = nextup(zu * r * (1 + 8 * U))[:, :, None].expand_as(al)
        wc, ac, rad = product_relaxation(wl, wu, al, au)  # (B, K, H) each
        Wx = torch.einsum("bkh,bkhi->bhi", wc, C)  # the teacher's x-columns
        Wzt = (ac * r).transpose(1, 2)  # (B, H, K): its ζ-columns
        bt = (wc * (c - ac)).sum(1)
        err = gamma(2 * K + 4) * (wc.abs() * (C.abs().sum(3) + c.abs() + ac.abs()) + ac.abs() * r).sum(1)
        dt = nextup((rad.sum(1) + err) * (1 + gamma(K + 2)) * UP)
        n_s = self.Ws.shape[0]
        W0 = torch.cat(
            [
                torch.cat([self.Wz[task], self.Ws.expand(B, n_s, -1)], 2),
                torch.cat([Wzt, Wx], 2),
            ],
            1,
        )
        b0 = torch.cat([self.b1.expand(B, n_s), bt], 1)
        return W0, b0, torch.cat([self.d_s[task], dt], 1)


def linear_encoding(encoder, M: int) -> np.ndarray:
    """E (dim, M) with e(z) = E z, for the linear encodings (identity, orthogonal); ValueError for
    any other, or if the encoder does not act as its matrix on random z (checked)."""
    from constructions.tasks.encodings import LINEAR_ENCODINGS

    if encoder.name not in LINEAR_ENCODINGS or encoder.stochastic:
        raise ValueError(
            f"--z hull needs a linear encoding ({', '.join(LINEAR_ENCODINGS)}); the run's is {encoder.name}"
        )
    with torch.no_grad():
        E = encoder(torch.eye(M, dtype=torch.float64)).numpy().T
        z = np.random.default_rng(0).uniform(0, 1, (8, M))
        if not np.allclose(encoder(torch.as_tensor(z)).numpy(), z @ E.T, rtol=0, atol=1e-12):
            raise ValueError(f"the {encoder.name} encoder is not the linear map it should be")
    return E


def hull_net(student, teacher, supports: np.ndarray, E: np.ndarray) -> HullNet:
    """The HullNet of an MLP student on [E z, x] against a single-layer hyperteacher, one joint box
    per support of `supports` (S, K) padded with −1, ζ over [min level, max level] per module."""
    if hasattr(teacher, "Ws"):
        raise ValueError("multi-layer teachers are not covered yet")
    layers = linear_layers(student)
    (W1, b1), rest = layers[0], layers[1:]
    I, H, K = teacher.I, teacher.H, teacher.K
    dim = E.shape[0]
    if not rest:
        raise ValueError("the student has no hidden layer")
    if W1.shape[1] != dim + I:
        raise ValueError(f"the student reads {W1.shape[1]} inputs, the task gives E + I = {dim} + {I}")
    if layers[-1][0].shape[0] != teacher.O:
        raise ValueError(f"the student has {layers[-1][0].shape[0]} outputs, the teacher {teacher.O}")
    levels = np.asarray(teacher.weight_values, dtype=np.float64)
    if levels.min() < 0 or levels.max() > 1:
        raise ValueError("the hull needs weights in [0, 1]")
    supports = np.asarray(supports).reshape(len(supports), -1)
    S, Kp = supports.shape
    if Kp > K:
        raise ValueError(f"supports of {Kp} modules, the teacher's K is {K}")
    We, Ws = W1[:, :dim], W1[:, dim:].contiguous()
    Et = torch.as_tensor(E, dtype=torch.float64)
    Wt, bt = torch.as_tensor(teacher.W), torch.as_tensor(teacher.b)  # (M, I, H), (M, H)
    n_s = W1.shape[0]
    Wz = torch.zeros(S, n_s, K, dtype=torch.float64)
    d_s = torch.zeros(S, n_s, dtype=torch.float64)
    C = torch.zeros(S, K, H, I, dtype=torch.float64)
    c = torch.zeros(S, K, H, dtype=torch.float64)
    zlo = torch.zeros(S, K, dtype=torch.float64)
    zhi = torch.zeros(S, K, dtype=torch.float64)
    for s, row in enumerate(supports):
        mods = row[row >= 0]
        k = len(mods)
        ES = Et[:, mods]  # (dim, k)
        Wz[s, :, :k] = We @ ES
        d_s[s] = gamma(dim + 2) * (We.abs() @ ES.abs()).sum(1) * UP
        C[s, :k] = Wt[mods].transpose(1, 2)
        c[s, :k] = bt[mods]
        zlo[s, :k], zhi[s, :k] = float(levels.min()), float(levels.max())
    hidden, W_out, b_out = stacked_layers(rest, teacher, H)
    return HullNet(Wz, Ws, b1, d_s, C, c, zlo, zhi, torch.as_tensor(levels), K, hidden, W_out, b_out)
