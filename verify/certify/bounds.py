"""Bounds on a DiffNet over input boxes, batched: interval bounds (IBP), forward linear bounds,
backward linear relaxation (CROWN: Zhang et al. 2018) and optimised lower slopes (α-CROWN: Xu
et al. 2021). Everything is float64 torch on the net's device, batched over boxes (B of them,
each with its task); the GPU helps as soon as B is in the hundreds.

Why our own code. auto_LiRPA and α,β-CROWN are the references (CROWN's relaxation, the adaptive
lower slope, α as a projected-gradient variable). Neither installs beside this project's torch:
the package index here has auto_LiRPA 0.3 only, which requires torch < 1.13 (checked with pip
download, 2026-12), and α,β-CROWN is a repository, not a release. Neither is sound in floating
point either (both bound in float32 or float64 without a rounding margin); here every bound
carries one. So there is no optional cross-check test against them yet.

Bounds per ReLU layer j (pre-activations z_j, B × n_j):
- `ibp`: interval arithmetic, W⁺u + W⁻l + b.
- `forward`: linear functions of x, A·x + c for the upper and the lower end, pushed forward
  through ReLU relaxations (upper: the chord; lower: slope 0 or 1, whichever keeps more), then
  maximised over the box. It costs (I + 1)/n of a backward pass per layer: cheap at I = 4.
- `crown`: the forward bounds, then the backward pass from each unit they leave unstable
  (2 rows a unit; a stable unit's relaxation does not depend on its bounds).
  Intermediate bounds are intersected with IBP's, and with ±m_j (below), all sound.
- inherited: bounds given per box and layer (a parent box's, bab.py), intersected with IBP's
  layer by layer, so every later layer's interval, forward and CROWN bounds start from them: a
  box's intermediate bounds hold at every point of the box, so on each of its sub-boxes too.
  Each call returns the intermediate bounds it used (`Result.layers`), for the children.
The output's bound is always the backward pass (`backward`), from the rows ±e_o of the output:
the largest of D_o and of −D_o over the box, so the sup norm per output. With `alpha_steps`
the lower slopes of the unstable units are optimised (projected Adam on the bound, per box,
row and unit), and the bound at the final slopes is taken: any slope in [0, 1] is sound.

Floating point. Each bound is the float64 computation plus a proven margin (`slack`), so
it holds for the exact-arithmetic network (graph.py's d0 covers the task's computed weights):
- m_j ≥ |z_j| for every x ∈ [-1, 1]^I and every task: the root box's interval bound, each
  layer's |W|·m + |b| rounded up by (1 + γ_{n+2}). Every bound is clipped to [−m_j, m_j]
  (sound), so every relaxed unit has |l|, |u|, |z| ≤ m_j.
- A product Λ·W (n_j terms a row: W_j is n_j × n_{j−1}) is off by ≤ γ_{n_j}·|Λ|·|W| (Higham
  §3.1, any summation order or FMA), so its error's effect on Λ·W·h is ≤ γ_{n_j}·|Λ|·(|W|·m).
  Λ·b likewise.
- The chord s = u/(u − l), t = −s·l as computed lies within 5.1u·m_j of the exact chord on
  [l, u] (|s| ≤ 1, three roundings), and the products pos·s, neg·a, pos·t are off by u·|Λ|·m:
  γ_{n+8}·|Λ|·m per layer covers these and the n-term sums.
- Adding up the constant c: 4u·|c| per layer; the box's maximum Σ max(L·lo, L·hi) + c:
  γ_{I+2}·(Σ|L| + |c|) (|x| ≤ 1).
The slack's own computation (nonnegative terms, a few dozen roundings) is covered by a factor
1 + 2⁻³⁰, and the final sum is rounded up (nextafter). On the networks here the slack is
about 1e-13 of the bound. IBP's margin per layer is γ_{n+2}·(|W|·m + |b|), and forward
bounds carry theirs as a per-unit constant (`_forward`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from theory.bounds import gamma
from verify.certify.graph import DiffNet

U = 2.0**-53
UP = 1.0 + 2.0**-30  # covers the rounding of a slack's own computation
INTERMEDIATE = ("ibp", "forward", "crown")


def nextup(t: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(t, torch.full_like(t, float("inf")))


# ─── the ReLU relaxation (module-level, so that a test can swap in a wrong one) ─────────────


def upper_line(l: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, t) with ReLU(z) ≤ s·z + t on [l, u]: the chord of an unstable unit, z on an active one,
    0 on an inactive one."""
    unstable = (l < 0) & (u > 0)
    s = torch.where(unstable, u / torch.where(unstable, u - l, torch.ones_like(u)), (l >= 0).to(u.dtype))
    t = torch.where(unstable, -s * l, torch.zeros_like(l))
    return s, t


def lower_slope(l: torch.Tensor, u: torch.Tensor, alpha: torch.Tensor | None = None) -> torch.Tensor:
    """a with ReLU(z) ≥ a·z on [l, u]: 1 (active), 0 (inactive), and on an unstable unit α ∈ [0, 1]
    (given), or CROWN's adaptive choice: 1 if u ≥ −l, else 0."""
    active = (l >= 0).to(u.dtype)
    unstable = (l < 0) & (u > 0)
    if alpha is None:
        return torch.where(unstable, (u >= -l).to(u.dtype), active)
    return torch.where(unstable, alpha.clamp(0.0, 1.0), active)


def bias_term(Lam: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Λ·b: what a layer's bias adds to the bound of Λ·z."""
    return Lam @ b


# ─── the network's constants ─────────────────────────────────────────────────────────────


@dataclass
class Result:
    upper: torch.Tensor  # (B,): the box's bound on max_o |D_o|, margin included
    rows: torch.Tensor  # (B, 2O): bounds on max D_o (rows < O) and max −D_o (rows ≥ O)
    vertex: torch.Tensor  # (B, I): the box's vertex where the bound's worst row's linear function peaks
    slack: torch.Tensor  # (B,): the largest margin added to a row
    score: torch.Tensor  # (B, I): per input, |the worst row's slope| × the box's width (where to split)
    layers: list | None = None  # per ReLU layer (l, u), (B, n_j) each: the intermediate bounds used


class Bounder:
    """Bounds of one DiffNet over boxes inside [-1, 1]^I (see the module docstring)."""

    def __init__(
        self, net: DiffNet, intermediate: str = "forward", alpha_steps: int = 0, alpha_lr: float = 0.1
    ):
        if intermediate not in INTERMEDIATE:
            raise ValueError(f"intermediate must be one of {', '.join(INTERMEDIATE)}; got {intermediate!r}")
        self.net, self.intermediate = net, intermediate
        self.alpha_steps, self.alpha_lr = alpha_steps, alpha_lr
        self.shared = net.layers()
        self.m = self._magnitudes()
        # Per shared layer j ≥ 1: |b_j| + |W_j|·m_{j−1} (rounded up), and IBP's margin.
        self.v, self.ibp_margin = [], []
        for (W, b), m_prev in zip(self.shared, self.m, strict=False):
            v = (b.abs() + W.abs() @ m_prev) * (1 + gamma(W.shape[1] + 2)) * UP
            self.v.append(v)
            self.ibp_margin.append(gamma(W.shape[1] + 2) * v * UP)

    def _magnitudes(self) -> list[torch.Tensor]:
        """m_j ≥ |z_j| over x ∈ [-1, 1]^I and every task, per unit of each ReLU layer."""
        net = self.net
        m0 = net.magnitude0() * (1 + gamma(net.I + 3)) * UP
        ms = [m0]
        for W, b in self.shared[:-1]:
            ms.append((W.abs() @ ms[-1] + b.abs()) * (1 + gamma(W.shape[1] + 2)) * UP)
        return ms

    # ── intermediate bounds ──────────────────────────────────────────────────────────────

    def _clip(self, j, l, u):
        return torch.maximum(l, -self.m[j]), torch.minimum(u, self.m[j])

    def _layer0(self, W0, b0, d0, lo, hi):
        """Interval bounds of z₀ = W₀x + b₀ (an affine map: its interval is its exact range)."""
        Wp, Wn = W0.clamp(min=0), W0.clamp(max=0)
        u = torch.einsum("bni,bi->bn", Wp, hi) + torch.einsum("bni,bi->bn", Wn, lo) + b0
        l = torch.einsum("bni,bi->bn", Wp, lo) + torch.einsum("bni,bi->bn", Wn, hi) + b0
        s = gamma(W0.shape[2] + 2) * (W0.abs().sum(2) + b0.abs()) * UP + d0
        return self._clip(0, l - s, u + s)

    @staticmethod
    def _meet(bounds, inherited, j):
        """Layer j's bounds intersected with the inherited ones (both hold on the box)."""
        if inherited is None:
            return bounds
        (l, u), (il, iu) = bounds, inherited[j]
        return torch.maximum(l, il), torch.minimum(u, iu)

    def ibp(self, W0, b0, d0, lo, hi, inherited=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Interval bounds of every ReLU layer and (last) of the output; each ReLU layer's intersected
        with `inherited` (per layer (l, u), or None) before the next layer is bounded from it."""
        out = [self._meet(self._layer0(W0, b0, d0, lo, hi), inherited, 0)]
        for j, (W, b) in enumerate(self.shared, start=1):
            hl, hu = (torch.relu(t) for t in out[-1])
            Wp, Wn = W.clamp(min=0), W.clamp(max=0)
            u = hu @ Wp.T + hl @ Wn.T + b + self.ibp_margin[j - 1]
            l = hl @ Wp.T + hu @ Wn.T + b - self.ibp_margin[j - 1]
            out.append(self._meet(self._clip(j, l, u), inherited, j) if j < len(self.m) else (l, u))
        return out

    def _forward(self, W0, b0, d0, lo, hi, ibp) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Forward linear bounds: z_j between A_L·x + c_L − s and A_U·x + c_U + s on the box."""
        I = lo.shape[1]
        AU, cU, AL, cL, s = W0, b0, W0, b0, d0
        bounds = [ibp[0]]
        for j in range(1, len(self.m)):
            l, u = bounds[-1]
            su, tu = upper_line(l, u)
            a = lower_slope(l, u)
            size = torch.maximum(AU.abs().sum(2) + cU.abs(), AL.abs().sum(2) + cL.abs())  # ≥ |A·x + c|
            hs = s + gamma(8) * (size + self.m[j - 1]) * UP  # products, the chord's error
            hAU, hcU, hAL, hcL = su[..., None] * AU, su * cU + tu, a[..., None] * AL, a * cL
            W, b = self.shared[j - 1]
            Wp, Wn = W.clamp(min=0), W.clamp(max=0)
            AU = torch.einsum("on,bni->boi", Wp, hAU) + torch.einsum("on,bni->boi", Wn, hAL)
            AL = torch.einsum("on,bni->boi", Wp, hAL) + torch.einsum("on,bni->boi", Wn, hAU)
            cU = hcU @ Wp.T + hcL @ Wn.T + b
            cL = hcL @ Wp.T + hcU @ Wn.T + b
            hsize = torch.maximum(hAU.abs().sum(2) + hcU.abs(), hAL.abs().sum(2) + hcL.abs())
            s = (hs @ W.abs().T + gamma(W.shape[1] + 2) * (hsize @ W.abs().T + b.abs())) * UP
            g = gamma(I + 2)
            u = cU + torch.maximum(AU * hi[:, None, :], AU * lo[:, None, :]).sum(2)
            l = cL + torch.minimum(AL * hi[:, None, :], AL * lo[:, None, :]).sum(2)
            su_ = s + g * (AU.abs().sum(2) + cU.abs()) * UP
            sl_ = s + g * (AL.abs().sum(2) + cL.abs()) * UP
            l, u = torch.maximum(l - sl_, ibp[j][0]), torch.minimum(u + su_, ibp[j][1])
            bounds.append(self._clip(j, l, u))
        return bounds

    def _crown_intermediate(self, W0, b0, d0, lo, hi, ibp) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Backward bounds of the units that the forward bounds leave unstable: a stable unit's
        relaxation is exact (z or 0) whatever its bounds, so only the unstable ones are refined.
        Each box's unstable units are gathered into 2·k rows (k: the most any box of the batch has)."""
        first = self._forward(W0, b0, d0, lo, hi, ibp)
        bounds = [first[0]]
        B = len(lo)
        for j in range(1, len(self.m)):
            l, u = first[j]
            unstable = (l < 0) & (u > 0)
            k = int(unstable.sum(1).max())
            if k == 0:
                bounds.append((l, u))
                continue
            idx = torch.topk(unstable.to(lo.dtype), k, dim=1).indices  # (B, k): the unstable ones first
            valid = torch.gather(unstable, 1, idx)
            n = l.shape[1]
            onehot = torch.zeros(B, k, n, dtype=lo.dtype, device=lo.device)
            onehot.scatter_(2, idx[..., None], 1.0)
            val, slack, _ = self.backward(torch.cat([onehot, -onehot], dim=1), j, bounds, W0, b0, d0, lo, hi)
            ub = nextup(val + slack)
            new_u = torch.where(
                valid, torch.minimum(ub[:, :k], torch.gather(u, 1, idx)), torch.gather(u, 1, idx)
            )
            new_l = torch.where(
                valid, torch.maximum(-ub[:, k:], torch.gather(l, 1, idx)), torch.gather(l, 1, idx)
            )
            u, l = u.scatter(1, idx, new_u), l.scatter(1, idx, new_l)
            bounds.append(self._clip(j, l, u))
        return bounds

    # ── the backward pass ────────────────────────────────────────────────────────────────

    def backward(self, Lam, k, bounds, W0, b0, d0, lo, hi, alphas=None, with_lam0=False):
        """(value, slack, L₀) with Λ·z_k ≤ value + slack on the box, per row: Λ (B, R, n_k) on the
        pre-activations of ReLU layer k ≥ 1, or on the output (k = number of ReLU layers).
        L₀ (B, R, I) is the bound's linear function of x. with_lam0: and the rows' multipliers of
        layer 0's units (B, R, n0), last."""
        c = torch.zeros(Lam.shape[:2], dtype=Lam.dtype, device=Lam.device)
        slack = torch.zeros_like(c)
        for j in range(k, 0, -1):
            W, b = self.shared[j - 1]
            n_out, n = W.shape  # Λ·W and Λ·b sum n_out terms; the relaxation's sums n
            c = c + bias_term(Lam, b)
            slack = slack + gamma(n_out + 1) * (Lam.abs() @ self.v[j - 1])
            Lh = Lam @ W
            l, u = bounds[j - 1]
            s, t = upper_line(l, u)
            a = lower_slope(l[:, None, :], u[:, None, :], None if alphas is None else alphas[j - 1])
            pos, neg = Lh.clamp(min=0), Lh.clamp(max=0)
            c = c + (pos * t[:, None, :]).sum(-1)
            Lam = pos * s[:, None, :] + neg * a
            slack = slack + gamma(n + 8) * (Lh.abs() @ self.m[j - 1]) + 4 * U * c.abs()
        n0 = W0.shape[1]
        c = c + torch.einsum("brn,bn->br", Lam, b0)
        slack = slack + (
            gamma(n0 + 1) * torch.einsum("brn,bn->br", Lam.abs(), W0.abs().sum(2) + b0.abs())
            + torch.einsum("brn,bn->br", Lam.abs(), d0)
        )
        L0 = torch.einsum("brn,bni->bri", Lam, W0)
        val = c + torch.maximum(L0 * hi[:, None, :], L0 * lo[:, None, :]).sum(2)
        slack = (slack + gamma(lo.shape[1] + 2) * (L0.abs().sum(2) + c.abs())) * UP
        return (val, slack, L0, Lam) if with_lam0 else (val, slack, L0)

    def intermediate_bounds(self, W0, b0, d0, lo, hi, inherited=None):
        """(per ReLU layer (l, u), the output's interval bounds). `inherited` enters through IBP's:
        the forward and CROWN bounds intersect each layer with IBP's before relaxing it, so each
        layer's relaxation uses the inherited bounds, and CROWN refines only the units that stay
        unstable after the intersection."""
        ibp = self.ibp(W0, b0, d0, lo, hi, inherited)
        if self.intermediate == "ibp":
            return ibp[:-1], ibp[-1]
        make = self._forward if self.intermediate == "forward" else self._crown_intermediate
        return make(W0, b0, d0, lo, hi, ibp), ibp[-1]

    def bound(
        self, task: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, method: str = "crown", inherited=None
    ) -> Result:
        """The bound of max_o |D_o| over each box [lo, hi] ⊂ [-1, 1]^I of the task `task`.
        method: "ibp" (interval bounds only) or "crown" (this Bounder's intermediate bounds, then the
        backward pass, α-optimised when alpha_steps > 0, intersected with IBP's output bounds).
        inherited: per ReLU layer (l, u) (B, n_j) that hold on each box (a box holding it had them),
        or None; ±inf where a box has none."""
        W0, b0, d0 = self.net.first(task, lo, hi)
        O, B = self.net.O, len(task)
        if method == "crown":
            bounds, out_ibp = self.intermediate_bounds(W0, b0, d0, lo, hi, inherited)
        else:
            *bounds, out_ibp = self.ibp(W0, b0, d0, lo, hi, inherited)
        ibp_rows = torch.cat([out_ibp[1], -out_ibp[0]], dim=1)
        if method == "ibp":
            mid = (lo + hi) / 2
            zero = torch.zeros(B, dtype=lo.dtype, device=lo.device)
            return Result(ibp_rows.max(1).values, ibp_rows, mid, zero, hi - lo, bounds)
        eye = torch.eye(O, dtype=lo.dtype, device=lo.device)
        Lam = torch.cat([eye, -eye]).expand(B, 2 * O, O)
        k = len(self.m)
        alphas = self._optimise_alpha(Lam, k, bounds, W0, b0, d0, lo, hi) if self.alpha_steps else None
        with torch.no_grad():
            val, slack, L0, lam0 = self.backward(Lam, k, bounds, W0, b0, d0, lo, hi, alphas, with_lam0=True)
            rows = torch.minimum(nextup(val + slack), ibp_rows)
        worst = rows.argmax(1)
        at = torch.arange(B, device=lo.device)
        L = L0[at, worst]
        vertex = torch.where(L >= 0, hi, lo)
        score = L.abs() * (hi - lo)
        if hasattr(self.net, "split_gain"):  # a hull net: what a split takes off the products' relaxation
            score = score + self.net.split_gain(task, lo, hi, lam0[at, worst].abs())
        return Result(rows.max(1).values, rows, vertex, slack.max(1).values, score, bounds)

    def _optimise_alpha(self, Lam, k, bounds, W0, b0, d0, lo, hi):
        """Lower slopes per box, row and unstable unit, by projected Adam on the sum of the rows'
        bounds (each row's bound depends on its own slopes only)."""
        alphas = []
        for j in range(k):
            l, u = bounds[j]
            init = (u >= -l).to(lo.dtype)[:, None, :].expand(Lam.shape[0], Lam.shape[1], -1)
            alphas.append(init.clone().requires_grad_(True))
        opt = torch.optim.Adam(alphas, lr=self.alpha_lr)
        for _ in range(self.alpha_steps):
            val, _, _ = self.backward(Lam, k, bounds, W0, b0, d0, lo, hi, alphas)
            opt.zero_grad()
            val.sum().backward()
            opt.step()
            with torch.no_grad():
                for a in alphas:
                    a.clamp_(0.0, 1.0)
        return [a.detach() for a in alphas]
