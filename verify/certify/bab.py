"""Branch and bound over input boxes: a bracket [lower, upper] on sup_x max_o |D_o(x)| per group of
tasks (a support, or the whole set), for a DiffNet of many tasks.

Every task starts as one box, its net's root (`net.root`: [-1, 1]^I for a DiffNet; a support's
joint box of weights and x for a HullNet, hull.py). Boxes are bounded in batches (bounds.Bounder), and the
open boxes with the largest upper ends are split in half, best first, along the side where the
bound's linear function varies most (|slope| × width), unless another side is over ASPECT times
wider (`split_axis`: so that every side shrinks). A hull net's children are tightened to the
weight levels they hold (`net.tighten`), and a child that holds no task is dropped.
A box is closed once its upper end is at most `ratio` × the lower end of its group (`goal`
"support": its support's; "set": the whole set's), or at most `abs_tol`: refining it cannot
change whether the bracket is within the ratio. The upper end of a group is the largest upper
end of its boxes, open or closed, so it is sound whenever the search stops: at the ratio, when
`seconds` have passed, or after `max_nodes` boxes have been bounded (each stop is reported).

Tiers (`intermediate`). "auto": every box gets forward intermediate bounds, then CROWN's if its bound
is still above its target. "inherit": the same on the roots; each open box keeps the intermediate
bounds it was bounded with (inherit.py: float32, rounded outward, under a memory cap), and its
children start from them (a box's bounds hold on its sub-boxes): the cheap tier is forward bounds ∩
the parent's, layer by layer, then the backward pass; CROWN's, starting from those, runs on the
children still above their target (RHO's rule can skip some; by default it skips none). A child's
intermediate bounds are never looser than its parent's (the intersection), and its bound is at most
its parent's.

The lower end is an error D has at a point of the family (`net.project`: a HullNet's weights
rounded to the nearest level, so a real task): D evaluated at box centres, at the vertex where each box's
bound peaks, and after a few steps of gradient ascent (signed, on the worst boxes' vertices).
The caller evaluates the best points again on the student and teacher themselves (certify.py).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import torch

from verify.certify.bounds import Bounder
from verify.certify.inherit import CAP_BYTES, BoundStore
from verify.cli import Heartbeat, heartbeat_seconds

# Seconds between heartbeat lines off a terminal: a search runs for minutes, and its bracket moves.
HEARTBEAT = 30.0

# Floats in CROWN's largest temporary, (boxes, 2n, n), per bounding call. Below glibc's largest mmap
# threshold (32 MiB), the allocator reuses freed memory; above it, every temporary was a fresh
# mapping, and the kernel's zeroing of its pages took as much time as the arithmetic (sys ≈ user).
CHUNK_FLOATS = 2**21


@dataclass
class Bracket:
    lower: torch.Tensor  # (G,) per group: the largest |D_o| found
    upper: torch.Tensor  # (G,) per group: the bound, margin included
    where: torch.Tensor  # (G,) the task of the lower end
    x: torch.Tensor  # (G, I) its point
    nodes: int  # boxes bounded
    splits: int  # boxes split
    open_boxes: int  # boxes still open at the stop
    stop: str  # "ratio", "seconds" or "nodes"
    seconds: float
    max_slack: float  # the largest rounding margin added to a box's bound
    tier_boxes: list[int]  # boxes bounded again by each later tier (intermediate "auto": CROWN's)
    dropped: int = 0  # intermediate "inherit": boxes whose stored bounds the memory cap dropped


# intermediate="inherit": a child still above its target after the cheap tier (forward ∩ inherited,
# and its parent's bound) gets CROWN's intermediate bounds, starting from the cheap tier's, once
# EVERY generations have passed without them (EVERY = 1: always), or when CROWN's gain the last
# time it ran in the child's line (1 − its bound / the cheap tier's) would close the box or was
# over RHO. Measured (command.py's docstring): skipping CROWN that way (RHO 0.02, EVERY 4) saved
# time on the M 8 students, but left the upper end higher on M 16, K 3 and on the 4×256 student
# at equal time: a parent's gain depends on the side it was split along, so it predicts its
# children's poorly. So by default CROWN runs on every child still above its target; what the
# inheritance gains is the cheap tier closing boxes without CROWN (its bound is within the
# parent's), and CROWN's relaxations starting from tighter bounds (on the students measured, the
# forward bounds leave nearly every unit unstable at the box sizes reached: few units drop out).
RHO = 0.02
EVERY = 1


def parent_bounds(store: BoundStore, slots: torch.Tensor):
    """The bounds that the children of the boxes at `slots` inherit (halves [first; second]): their
    parent's, which hold on every sub-box. Module-level so that a test can hand down wrong ones."""
    return [(torch.cat([l, l]), torch.cat([u, u])) for l, u in store.get(slots)]


def _chunk(bounder, net, batch: int) -> int:
    """Boxes per bounding call (CHUNK_FLOATS): CROWN's intermediate rows take (B, 2n, n) floats, the
    other bounds (B, n, 2I + 2O)."""
    n = max(net.widths)
    per_box = n * (2 * n if bounder.intermediate == "crown" else 2 * net.I + 2 * net.O)
    return max(16, min(batch, CHUNK_FLOATS // per_box))


def _scatter_max(values: torch.Tensor, index: torch.Tensor, G: int, fill: float) -> torch.Tensor:
    out = torch.full((G,), fill, dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, index, values, reduce="amax", include_self=True)


# The most a box's side may exceed the split side, both relative to the root's: see split_axis.
ASPECT = 16.0


def split_axis(net, task, lo, hi, score) -> torch.Tensor:
    """The side to halve per box: where the bound's linear function varies most across the box
    (`score`: |slope| × width, and a hull net's product terms), unless another side is over ASPECT
    times wider (each relative to its root's), then the widest. The score sees only the final
    linear function, not the ReLU relaxations that a side's width loosens: on M 16, K 3 (4×32), the
    top box's slope along x₁, x₂ was ~1e-5 while they drove its unstable units, so they stayed at
    [-1, 1] while the other sides shrank to 1e-4, and the upper end stalled at 5.17 (the bound of
    a box that is a point in 5 of 7 sides). The cap makes every side shrink with the box, so a
    box's bound tends to the sup on it. A side of width 0 is never split."""
    rlo, rhi = net.root(task)
    root = rhi - rlo
    side = hi - lo
    rel = torch.where(
        root > 0, side / torch.where(root > 0, root, torch.ones_like(root)), torch.zeros_like(side)
    )
    rows = torch.arange(len(task), device=lo.device)
    best = torch.where(side > 0, score, torch.full_like(score, -1.0)).argmax(1)
    widest = rel.argmax(1)
    lagging = (
        (rel[rows, widest] > ASPECT * rel[rows, best]) | (score[rows, best] <= 0) | (side[rows, best] <= 0)
    )
    return torch.where(lagging, widest, best)


def ascend(net, task: torch.Tensor, x: torch.Tensor, steps: int = 20, step: float = 0.05):
    """A few steps of signed gradient ascent on max_o |D_o| from x (B, I), in the tasks' root boxes,
    the step shrinking geometrically; returns the best point seen per start and its value. Values
    are taken at net.project(task, x), a point of the family (a hull net's z rounded to a level;
    the gradient passes through the rounding as if it were the identity), and the points returned
    are projected."""
    lo, hi = net.root(task)

    def value(x):
        return net.forward(task, net.project(task, x)).abs().max(1).values

    best_x, best = net.project(task, x).detach().clone(), value(x).detach()
    x = x.clone()
    for k in range(steps):
        x.requires_grad_(True)
        (grad,) = torch.autograd.grad(value(x).sum(), x)
        with torch.no_grad():
            x = torch.minimum(torch.maximum(x + step * 0.85**k * grad.sign(), lo), hi)
            v = value(x)
            better = v > best
            best = torch.where(better, v, best)
            best_x[better] = net.project(task, x)[better]
    return best_x, best


def branch_and_bound(
    net,
    groups: torch.Tensor,
    *,
    ratio: float = 1.25,
    seconds: float = 60.0,
    max_nodes: int | None = None,
    batch: int = 2048,
    method: str = "crown",
    intermediate: str = "forward",
    alpha_steps: int = 0,
    goal: str = "set",
    abs_tol: float = 1e-12,
    ascent_tasks: int = 64,
    progress=None,
    rho: float = RHO,
    every: int = EVERY,
    cap_bytes: float = CAP_BYTES,
) -> Bracket:
    """The bracket per group (`groups` (T,): each task's group, 0..G−1); see the module docstring.
    `batch`: boxes bounded per call. `intermediate`: the hidden units' bounds (bounds.py), or "auto":
    forward bounds for every box, then CROWN's for the boxes still above their target, or "inherit":
    as auto, but each open box keeps its intermediate bounds (inherit.py, at most `cap_bytes`) and
    its children start from them: the cheap tier is forward ∩ the parent's, and CROWN's runs on a
    child above its target only as RHO's rule says (`rho`, `every`: see RHO).
    `max_nodes`: boxes bounded in all (None: no limit); the roots
    (one per task) are always bounded, so the bracket is always sound and finite."""
    if goal not in ("set", "support"):
        raise ValueError(f"goal must be set or support; got {goal!r}")
    start = time.perf_counter()
    dev = net.device
    inheriting = intermediate == "inherit"
    if intermediate in ("auto", "inherit"):  # forward bounds everywhere, CROWN's where they leave a box open
        tiers = [Bounder(net, "forward"), Bounder(net, "crown", alpha_steps=alpha_steps)]
    else:
        tiers = [Bounder(net, intermediate=intermediate, alpha_steps=alpha_steps)]
    store = BoundStore(net.widths, dev, cap_bytes) if inheriting else None
    tier_boxes = [0] * len(tiers)
    chunks = [_chunk(b, net, batch) for b in tiers]
    T, I = net.T, net.I
    groups = groups.to(dev)
    G = int(groups.max()) + 1
    lower = torch.full((G,), -1.0, dtype=torch.float64, device=dev)  # |D| ≥ 0: any point beats −1
    where = torch.zeros(G, dtype=torch.long, device=dev)
    best_x = torch.zeros(G, I, dtype=torch.float64, device=dev)
    closed = torch.full((G,), -torch.inf, dtype=torch.float64, device=dev)
    max_slack = 0.0
    nodes = splits = 0

    def offer(task, x, value):
        """Points (task, x) with |D| = value: raise their groups' lower ends."""
        nonlocal lower
        g = groups[task]
        new = _scatter_max(value, g, G, -1.0)
        better = new > lower
        if better.any():
            hit = value == new[g]  # the points that reach their group's new maximum
            at = torch.zeros(G, dtype=torch.long, device=value.device)
            at.scatter_(0, g[hit], torch.nonzero(hit).flatten())  # one of them per group
            where[better], best_x[better] = task[at[better]], x[at[better]]
            lower = torch.maximum(lower, new)

    def target_of(task):
        """The bound below which a box of these tasks is closed."""
        t = ratio * (lower[groups[task]] if goal == "support" else lower.max().expand(len(task)))
        return torch.clamp(t, min=abs_tol)

    def run_tier(bounder, task, lo, hi, deadline=None, inherited=None):
        """The tier's bounds of the boxes, chunk by chunk; with a deadline, only the chunks begun
        before it (the first boxes: the caller orders them), and the rest get inf. With inherited
        bounds (per layer (l, u)), also the intermediate bounds used, per layer, of the boxes done
        (the first ones)."""
        chunk = chunks[tiers.index(bounder)]
        nonlocal max_slack
        ups, verts, scores, layers = [], [], [], []
        for s in range(0, len(task), chunk):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            sl = slice(s, s + chunk)
            given = None if inherited is None else [(l[sl], u[sl]) for l, u in inherited]
            r = bounder.bound(task[sl], lo[sl], hi[sl], method, inherited=given)
            ups.append(r.upper)
            verts.append(r.vertex)
            scores.append(r.score)
            layers.append(r.layers)
            max_slack = max(max_slack, float(r.slack.max()))
        done = sum(len(u) for u in ups)
        layers = [tuple(map(torch.cat, zip(*at, strict=True))) for at in zip(*layers, strict=True)]
        if done == 0:
            return torch.full((len(task),), torch.inf, dtype=torch.float64, device=dev), hi - lo, layers
        up, vert = torch.cat(ups), torch.cat(verts)
        with torch.no_grad():
            tt = torch.cat([task[:done], task[:done]])
            pts = net.project(tt, torch.cat([(lo[:done] + hi[:done]) / 2, vert]))
            offer(tt, pts, net.forward(tt, pts).abs().max(1).values)
        rest = len(task) - done
        up = torch.cat([up, torch.full((rest,), torch.inf, dtype=up.dtype, device=dev)])
        return up, torch.cat([*scores, (hi - lo)[done:]]), layers

    def bound(task, lo, hi):
        """The boxes' bounds and split scores: the first tier's, then each later tier's on the boxes
        still above their target (the smaller bound holds: both are sound)."""
        nonlocal nodes, tier_boxes
        nodes += len(task)
        up, score, _ = run_tier(tiers[0], task, lo, hi)
        for k, bounder in enumerate(tiers[1:], start=1):
            # The later tiers refine the boxes above their target, largest bound first, while the time
            # lasts: the first tier's bound holds for the others.
            need = torch.nonzero(up > target_of(task)).flatten()
            need = need[torch.argsort(up[need], descending=True)]
            if len(need):
                up_k, score_k, _ = run_tier(bounder, task[need], lo[need], hi[need], deadline=start + seconds)
                reached = torch.isfinite(up_k)
                up[need] = torch.minimum(up[need], up_k)
                score[need[reached]] = score_k[reached]
                tier_boxes[k] += int(reached.sum())
        return up, score

    def bound_inheriting(task, lo, hi, parent=None):
        """bound() for intermediate="inherit": (up, score, layers, gain, age) per box. parent: None for
        roots, else (up, layers, gain, age) of each child's parent. The cheap tier (forward bounds
        ∩ the inherited ones, then the backward pass) on every box; CROWN's intermediate bounds,
        starting from the cheap tier's, on the boxes above their target that RHO's rule picks.
        gain: 1 − CROWN's bound / the cheap one, the last time CROWN ran in the box's line; age:
        generations since then."""
        nonlocal nodes
        nodes += len(task)
        given = None if parent is None else parent[1]
        cheap, score, layers = run_tier(tiers[0], task, lo, hi, inherited=given)
        up = cheap.clone()
        if parent is None:
            gain = torch.ones_like(up)  # no CROWN yet: assume it pays
            age = torch.zeros(len(task), dtype=torch.long, device=dev)
            pick = up > target_of(task)
        else:
            p_up, _, gain, age = parent
            gain, age = gain.clone(), age + 1
            up = torch.minimum(up, p_up)  # the parent's box holds the child
            target = target_of(task)
            closes = cheap * (1 - gain) <= target  # CROWN's last gain would close the box
            pays = gain > rho  # CROWN took more than rho off last time: its bounds go to the children
            pick = (up > target) & (closes | pays | (age >= every))
        need = torch.nonzero(pick).flatten()
        need = need[torch.argsort(up[need], descending=True)]
        if len(need):
            mine = [(l[need], u[need]) for l, u in layers]
            up_k, score_k, lay_k = run_tier(
                tiers[1], task[need], lo[need], hi[need], deadline=start + seconds, inherited=mine
            )
            done = need[: len(lay_k[0][0]) if lay_k else 0]  # the boxes CROWN's tier reached in time
            reached = torch.isfinite(up_k)
            up[need] = torch.minimum(up[need], up_k)
            score[need[reached]] = score_k[reached]
            for (l, u), (lk, uk) in zip(layers, lay_k, strict=False):
                l[done], u[done] = lk, uk
            gain[need[reached]] = 1 - up_k[reached] / cheap[need[reached]].clamp(min=1e-300)
            age[need[reached]] = 0
            tier_boxes[1] += int(reached.sum())
        return up, score, layers, gain, age

    bar_total = None if max_nodes is None else max_nodes
    from verify.cli import progress as progress_bar

    bar = progress_bar(bar_total, "certify (boxes)", progress, unit="box")
    # Off a terminal the bar is hidden: a plain line every HEARTBEAT seconds (or the project's shorter
    # interval, $COMPGEN_HEARTBEAT_SECONDS) says the search is alive and where its bracket stands.
    on = progress is None and not sys.stderr.isatty()
    budget = int(math.ceil(seconds)) if math.isfinite(seconds) else 0
    beat = Heartbeat(budget, "certify", "second", every=min(HEARTBEAT, heartbeat_seconds()) if on else None)
    task = torch.arange(T, device=dev)
    lo, hi = net.root(task)
    if inheriting:
        up, score, layers, gain, age = bound_inheriting(task, lo, hi)
        slot = store.put(layers)
    else:
        up, score = bound(task, lo, hi)
        slot = gain = age = torch.zeros(T, device=dev)  # unused: carried along to keep one code path
    bar.update(T)

    def climb(task, lo, hi, up):
        """Gradient ascent from the centres and vertices of the open boxes with the largest bounds."""
        top = torch.argsort(up, descending=True)[:ascent_tasks]
        if len(top) == 0:
            return
        t = torch.cat([task[top], task[top]])
        r = tiers[0].bound(task[top], lo[top], hi[top], method)
        x0 = torch.cat([(lo[top] + hi[top]) / 2, r.vertex])
        x, v = ascend(net, t, x0)
        offer(t, x, v)

    climb(task, lo, hi, up)
    stop = "ratio"
    rounds = 0
    while True:
        done = up <= target_of(task)
        if done.any():
            closed = torch.maximum(closed, _scatter_max(up[done], groups[task[done]], G, -torch.inf))
            keep = ~done
            task, lo, hi, up, score = task[keep], lo[keep], hi[keep], up[keep], score[keep]
            slot, gain, age = slot[keep], gain[keep], age[keep]
        top_up = float(torch.maximum(closed.max(), up.max() if len(up) else closed.max()))
        bar.set_postfix_str(
            f"open {len(task)}, bracket [{float(lower.max()):.4g}, {top_up:.4g}]", refresh=False
        )
        beat.update(
            int(time.perf_counter() - start),
            f"{nodes:,} boxes, {len(task):,} open, bracket [{float(lower.max()):.4g}, {top_up:.4g}]",
        )
        if len(task) == 0:
            stop = "ratio"
            break
        if time.perf_counter() - start >= seconds:
            stop = "seconds"
            break
        if max_nodes is not None and nodes + 2 > max_nodes:  # a split bounds two boxes
            stop = "nodes"
            break
        n_split = min(len(task), max(1, batch // 2))
        if max_nodes is not None:
            n_split = min(n_split, (max_nodes - nodes) // 2)
        top = torch.topk(up, n_split).indices
        axis = split_axis(net, task[top], lo[top], hi[top], score[top])
        rows = torch.arange(n_split, device=dev)
        mid = (lo[top, axis] + hi[top, axis]) / 2
        if hasattr(net, "split_at"):  # a hull net cuts its weights between levels
            mid = net.split_at(task[top], lo[top], hi[top], axis, mid)
        lo1, hi1, lo2, hi2 = lo[top].clone(), hi[top].clone(), lo[top].clone(), hi[top].clone()
        hi1[rows, axis] = mid
        lo2[rows, axis] = mid
        ct = torch.cat([task[top], task[top]])
        clo, chi = torch.cat([lo1, lo2]), torch.cat([hi1, hi2])
        pup = torch.cat([up[top], up[top]])
        both = torch.cat([top, top])
        holds = slice(None)
        if hasattr(net, "tighten"):  # a hull net's boxes shrink to the levels they hold, or go
            clo, chi, holds = net.tighten(ct, clo, chi)
            ct, clo, chi, pup = ct[holds], clo[holds], chi[holds], pup[holds]
        both = both[holds]
        if inheriting:
            player = [(l[holds], u[holds]) for l, u in parent_bounds(store, slot[top])]
            cup, cscore, clayers, cgain, cage = bound_inheriting(
                ct, clo, chi, (pup, player, gain[both], age[both])
            )
            cslot = store.put(clayers)
        else:
            cup, cscore = bound(ct, clo, chi)
            cslot, cgain, cage = slot[both], gain[both], age[both]
        # A child's bound is also bounded by its parent's (the parent's box holds it).
        cup = torch.minimum(cup, pup)
        splits += n_split
        bar.update(2 * n_split)
        keep = torch.ones(len(task), dtype=torch.bool, device=dev)
        keep[top] = False
        task, lo, hi, up, score = (
            torch.cat([task[keep], ct]),
            torch.cat([lo[keep], clo]),
            torch.cat([hi[keep], chi]),
            torch.cat([up[keep], cup]),
            torch.cat([score[keep], cscore]),
        )
        slot, gain, age = (torch.cat([a[keep], c]) for a, c in ((slot, cslot), (gain, cgain), (age, cage)))
        if inheriting:  # the split boxes' rows are garbage now; the cap drops the lowest boxes' rows
            slot = store.compact(slot, up)
        rounds += 1
        if rounds % 8 == 0:
            climb(task, lo, hi, up)
    bar.close()
    beat.close()
    upper = closed.clone()
    if len(task):
        upper = torch.maximum(upper, _scatter_max(up, groups[task], G, -torch.inf))
    return Bracket(
        lower=lower.clamp(min=0.0),
        upper=upper,
        where=where,
        x=best_x,
        nodes=nodes,
        splits=splits,
        open_boxes=len(task),
        stop=stop,
        seconds=time.perf_counter() - start,
        max_slack=max_slack,
        tier_boxes=tier_boxes[1:],
        dropped=store.dropped if inheriting else 0,
    )
