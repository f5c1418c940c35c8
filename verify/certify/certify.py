"""A trained MLP student's sup error over a set of supports, certified: per support and over the set,
a bracket [lower, upper] on sup over x ∈ [-1, 1]^I and the support's tasks z of
‖f(e(z), x) − g(z, x)‖_∞.

The tasks. With weight levels (khot, discrete), z="enumerate" enumerates every task of a support:
each tuple of levels on it (6^|S| for discrete), and for each the student minus the teacher is one
ReLU network of x (graph.py), bounded by branch and bound over x (bab.py). z="hull" takes one joint
box per support instead, the weights over [min level, max level] and x over [-1, 1]^I (hull.py): z
enters the student linearly (identity and orthogonal encodings) and the teacher bilinearly (z·x),
relaxed by McCormick planes; branch and bound splits weights and x. Its upper end holds for every
task of the support (the box holds them all); its lower end is at a real task (weights rounded to
levels). Continuous weights ([0.5, 1) on each active module, the sum of their excesses below 1)
lie in the same box, so the hull's upper end would hold for them too, but a lower end needs a
point of their set: not built yet, and such runs are refused.

The lower end is reported as the student and the teacher give it: at the best point the search
found, f(e(z), x) − g(z, x) evaluated in float64 by the student module and Hyperteacher.forward
(as verify.exact_sup's lower end is). The upper end is the branch and bound's, with its rounding
margin (bounds.py).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from verify.certify.bab import branch_and_bound
from verify.certify.graph import diff_net
from verify.certify.saved import support_tasks


def error_at(student, teacher, encoder, z: np.ndarray, x: np.ndarray) -> float:
    """max_o |f(e(z), x) − g(z, x)_o| at one point, as the networks give it (float64)."""
    zt = torch.as_tensor(z[None], dtype=torch.float64)
    xt = torch.as_tensor(x[None], dtype=torch.float64)
    with torch.no_grad():
        f = student(torch.cat([encoder(zt), xt], dim=1))
        g = teacher.forward(zt, xt)
    return float((f - g).abs().max())


Z_MODES = ("enumerate", "hull")


def best_task_at(student, teacher, encoder, row: np.ndarray, x: np.ndarray, z0: np.ndarray) -> np.ndarray:
    """Of the support's tasks (every tuple of levels) and z0, the one with the largest error at x:
    the hull's search ends at one point, and its x is often as bad, or worse, at another task."""
    z, _ = support_tasks(row[None], teacher.weight_values, teacher.M)
    z = np.concatenate([z0[None], z])
    zt = torch.as_tensor(z)
    xt = torch.as_tensor(np.repeat(x[None], len(z), 0))
    with torch.no_grad():
        err = (student(torch.cat([encoder(zt), xt], dim=1)) - teacher.forward(zt, xt)).abs().amax(1)
    return z[int(err.argmax())]


def certify_supports(
    student, teacher, encoder, supports: np.ndarray, *, device: str = "cpu", z: str = "enumerate", **search
) -> dict:
    """The bracket per support of `supports` (S, K) and over them all; `search` goes to
    bab.branch_and_bound (ratio, seconds, max_nodes, batch, method, intermediate, alpha_steps, goal).
    z: "enumerate" every task of each support (one box of x per task), or "hull": one joint box
    (ζ, x) per support, z over the box hull of its tasks (hull.py; linear encodings only)."""
    if z not in Z_MODES:
        raise ValueError(f"z must be one of {', '.join(Z_MODES)}; got {z!r}")
    if teacher.weights == "continuous":
        raise ValueError(
            "continuous weights are not covered yet (a hull's lower end needs a point of their set)"
        )
    tasks_in = len(support_tasks(supports, teacher.weight_values, teacher.M)[0])
    if z == "hull":
        from verify.certify.hull import hull_net, linear_encoding

        net = hull_net(student, teacher, supports, linear_encoding(encoder, teacher.M)).to(device)
        br = branch_and_bound(net, torch.arange(len(supports)), **search)
    else:
        zz, rows = support_tasks(supports, teacher.weight_values, teacher.M)
        with torch.no_grad():
            encoded = encoder(torch.as_tensor(zz)).numpy()
        net = diff_net(student, teacher, zz, encoded).to(device)
        br = branch_and_bound(net, torch.as_tensor(rows), **search)
    upper = br.upper.cpu().numpy()
    where, xs = br.where.cpu().numpy(), br.x.cpu().numpy()
    per_support = []
    for s, row in enumerate(supports):
        if z == "hull":  # the joint point (ζ, x), ζ already a tuple of levels (bab.py projects)
            S = row[row >= 0]
            zs = np.zeros(teacher.M)
            zs[S] = xs[s][: len(S)]
            x = xs[s][net.K :]
            if not np.isin(zs[S], teacher.weight_values).all():
                raise AssertionError(f"the hull's lower end is not at a task: z {zs[S]}")
            zs = best_task_at(student, teacher, encoder, row, x, zs)
        else:
            zs, x = zz[where[s]], xs[s]
        measured = error_at(student, teacher, encoder, zs, x)  # the networks' own value at the point
        S = row[row >= 0]
        per_support.append(
            dict(
                support=[int(m) for m in S],
                lower=measured,
                upper=float(upper[s]),
                z=[float(v) for v in zs[S]],
                x=[float(v) for v in x],
            )
        )
    low = max(p["lower"] for p in per_support)
    up = max(p["upper"] for p in per_support)
    return dict(
        lower=low,
        upper=up,
        ratio=up / low if low > 0 else math.inf,
        supports=per_support,
        tasks=tasks_in,
        boxes_at_start=net.T,
        nodes=br.nodes,
        splits=br.splits,
        open_boxes=br.open_boxes,
        stop=br.stop,
        seconds=br.seconds,
        max_margin=br.max_slack,
        crown_boxes=sum(br.tier_boxes),
        inherited_dropped=br.dropped,  # intermediate "inherit": boxes whose stored bounds the cap dropped
        worst=max(per_support, key=lambda p: p["upper"]),
    )
