"""verify.certify, intermediate="inherit": children start from their parent's intermediate bounds.

- a child bounded from its parent's bounds has no violation (points where |D| exceeds the bound),
  and its bounds lie inside the parent's; a child handed its *sibling's* bounds instead has some;
- branch and bound with inheritance brackets every task's exact sup (MILP), enumerated and over
  the hull, under each tier rule; a search whose children inherit shrunk bounds, or another split
  box's, does not (each mutant is caught);
- the float32 store rounds outward: the stored interval holds the float64 one, for values float32
  cannot represent (a plain conversion does not, which is what the check would catch);
- the memory cap drops the stored bounds of the lowest boxes, and the search is still sound; the
  store's buffer grows and compacts without mixing boxes up;
- the budgeted stops (seconds, nodes) with inheritance: test_certify.py's test_every_stop_is_sound
  (no time for a split; 14 boxes), and here a seconds stop mid-run (a fake clock), CROWN's tier cut.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.test_certify import exact_sup_milp, instance, small_instance  # noqa: F401
from tests.test_certify_hull import SUPPORTS, hull_instance  # noqa: F401
from verify.certify import bab as bab_module
from verify.certify.bab import branch_and_bound
from verify.certify.bounds import Bounder
from verify.certify.graph import diff_net
from verify.certify.inherit import BoundStore, to_float32_outward
from verify.theorem.exact_sup import MILP_TOL

# ─── a child from its parent's bounds, and from its sibling's ───────────────────────────────


@pytest.fixture(scope="module")
def net():
    teacher, student, z = small_instance(seed=3, widths=(12, 12), T=6)
    return diff_net(student, teacher, z, z)


def halves(net, seed: int = 0, boxes: int = 300):
    """Random parent boxes and their two halves along x₀: (task, parent lo/hi, left lo/hi, right lo/hi)."""
    g = torch.Generator().manual_seed(seed)
    task = torch.arange(boxes) % net.T
    centre = torch.rand(boxes, net.I, generator=g, dtype=torch.float64) * 1.2 - 0.6
    radius = 0.1 + torch.rand(boxes, net.I, generator=g, dtype=torch.float64) * 0.3
    lo, hi = (centre - radius).clamp(-1, 1), (centre + radius).clamp(-1, 1)
    mid = (lo[:, 0] + hi[:, 0]) / 2
    left_hi, right_lo = hi.clone(), lo.clone()
    left_hi[:, 0], right_lo[:, 0] = mid, mid
    return task, (lo, hi), (lo, left_hi), (right_lo, hi)


def violations(net, task, lo, hi, upper, points: int = 64, seed: int = 1) -> int:
    """Points of the boxes (random ones and the corners) where |D| exceeds the box's bound."""
    g = torch.Generator().manual_seed(seed)
    B = len(task)
    xs = lo[:, None] + (hi - lo)[:, None] * torch.rand(B, points, net.I, generator=g, dtype=torch.float64)
    corners = torch.stack(
        [torch.where(torch.tensor(c), hi, lo) for c in itertools.product((False, True), repeat=net.I)], 1
    )
    xs = torch.cat([xs, corners], 1)
    n = xs.shape[1]
    values = net.forward(task.repeat_interleave(n), xs.reshape(-1, net.I)).abs().max(1).values
    return int((values.reshape(B, n) > upper[:, None]).sum())


@pytest.mark.parametrize("intermediate", ["forward", "crown"])
def test_a_child_from_its_parents_bounds_is_sound_and_inside_them(net, intermediate):
    task, parent, left, right = halves(net)
    bounder = Bounder(net, intermediate=intermediate)
    inherited = bounder.bound(task, *parent).layers
    for child in (left, right):
        r = bounder.bound(task, *child, inherited=inherited)
        assert violations(net, task, *child, r.upper) == 0
        for (l, u), (pl, pu) in zip(r.layers, inherited, strict=True):
            assert (l >= pl).all() and (u <= pu).all() and (l <= u).all()


def test_a_child_given_its_siblings_bounds_is_caught(net):
    """The mutant: the left half bounded from the right half's own bounds (which hold on the right
    half, not on the left): the check finds points where |D| exceeds the bound."""
    task, _, left, right = halves(net)
    bounder = Bounder(net, intermediate="forward")
    sibling = bounder.bound(task, *right).layers
    r = bounder.bound(task, *left, inherited=sibling)
    assert violations(net, task, *left, r.upper) > 0


# ─── branch and bound with inheritance ─────────────────────────────────────────────────────

# the default (CROWN on every child above its target), the skip rule measured in command.py, and CROWN
# only where its last gain would close the box
RULES = [dict(), dict(rho=0.02, every=4), dict(rho=1.0, every=10**6)]


@pytest.mark.parametrize("rule", RULES, ids=["default", "skip-rule", "crown-rarely"])
def test_inheriting_search_brackets_the_exact_sup(instance, rule):  # noqa: F811
    _, _, z, net, exact = instance
    br = branch_and_bound(
        net, torch.arange(len(z)), ratio=1.02, seconds=15, intermediate="inherit", goal="support",
        progress=False, **rule,
    )
    assert br.stop == "ratio" and br.splits > 0
    for t, (best, milp_upper, _) in enumerate(exact):
        assert best - MILP_TOL <= float(br.upper[t])
        assert float(br.lower[t]) <= milp_upper + MILP_TOL
    assert (br.upper <= 1.02 * br.lower).all()


def test_inheriting_hull_search_brackets_every_tasks_exact_sup(hull_instance):  # noqa: F811
    _, _, net, z, rows, exact = hull_instance
    br = branch_and_bound(
        net, torch.arange(net.T), ratio=1.02, seconds=30, intermediate="inherit", goal="support",
        progress=False,
    )
    assert br.stop == "ratio" and br.splits > 0
    for s in range(len(SUPPORTS)):
        mine = [t for t in range(len(z)) if rows[t] == s]
        assert max(exact[t][0] for t in mine) - MILP_TOL <= float(br.upper[s])
        assert float(br.lower[s]) <= max(exact[t][1] for t in mine) + MILP_TOL
    assert (br.upper <= 1.02 * br.lower).all()


def _shrunk(store, slots):
    """The mutant: each child inherits its parent's bounds shrunk to their middle third."""
    out = []
    for l, u in bab_module.PARENT_BOUNDS(store, slots):
        mid, half = (l + u) / 2, (u - l) / 2
        out.append((mid - half / 3, mid + half / 3))
    return out


def _another_boxs(store, slots):
    """The mutant: each split box's children inherit the bounds of the next split box."""
    return bab_module.PARENT_BOUNDS(store, slots.roll(1))


bab_module.PARENT_BOUNDS = bab_module.parent_bounds
WRONG_INHERITANCE = {"shrunk": _shrunk, "another box's": _another_boxs}


@pytest.mark.parametrize("name", WRONG_INHERITANCE)
def test_a_search_whose_children_inherit_wrong_bounds_is_caught(instance, monkeypatch, name):  # noqa: F811
    _, _, z, net, exact = instance
    monkeypatch.setattr(bab_module, "parent_bounds", WRONG_INHERITANCE[name])
    br = branch_and_bound(
        net, torch.arange(len(z)), ratio=1.02, seconds=15, intermediate="inherit", goal="support",
        progress=False, rho=0.0, every=1,
    )
    below = [t for t, (best, _, _) in enumerate(exact) if float(br.upper[t]) < best - MILP_TOL]
    assert below, "a search from wrong inherited bounds must leave some exact sup above its upper end"


# ─── the float32 store ─────────────────────────────────────────────────────────────────────

AWKWARD = [0.1, -0.1, 1 / 3, -2 / 3, 1 + 2**-40, -(1 + 2**-40), 1e-50, -1e-50, 1e39, -1e39, 0.5, 0.0, 3.0]


def test_float32_outward_rounding_holds_the_float64_interval():
    x = torch.tensor(AWKWARD, dtype=torch.float64)
    l32, u32 = to_float32_outward(x, x)
    assert l32.dtype == torch.float32
    assert (l32.double() <= x).all() and (u32.double() >= x).all()
    # exact where float32 holds the value, and one float32 step wide at most elsewhere
    exact = x.to(torch.float32).double() == x
    assert (l32.double()[exact] == x[exact]).all() and (u32.double()[exact] == x[exact]).all()
    inexact = ~exact & (x.abs() < 1e38)
    assert (torch.nextafter(l32, u32) == u32)[inexact].all()
    # the check above is one a plain conversion fails: round to nearest lands on the wrong side
    plain = x.to(torch.float32).double()
    assert ((plain > x) | (plain < x)).any()
    assert not ((plain <= x).all() and (plain >= x).all())


def test_the_store_gives_back_intervals_holding_what_it_was_given():
    g = torch.Generator().manual_seed(0)
    store = BoundStore([5, 3], "cpu")
    layers = []
    for n in (5, 3):
        l = torch.randn(7, n, generator=g, dtype=torch.float64)
        layers.append((l, l + torch.rand(7, n, generator=g, dtype=torch.float64)))
    slots = store.put(layers)
    got = store.get(torch.cat([slots, torch.tensor([-1])]))
    for (l, u), (gl, gu) in zip(layers, got, strict=True):
        assert (gl[:7] <= l).all() and (gu[:7] >= u).all()
        assert (gl[:7] < l).any()  # float32 could not hold them all: rounded, outward
        assert torch.isinf(gl[7]).all() and torch.isinf(gu[7]).all() and (gl[7] < 0).all()


# ─── the memory cap ──────────────────────────────────────────────────────────────────────


def test_the_cap_drops_the_stored_bounds_of_the_lowest_boxes():
    store = BoundStore([4], "cpu", cap_bytes=3 * 2 * 4 * 4)  # room for 3 boxes' bounds
    l = torch.arange(6, dtype=torch.float64)[:, None].expand(6, 4)
    slots = store.put([(l, l + 1)])
    up = torch.tensor([5.0, 1.0, 4.0, 0.5, 3.0, 2.0], dtype=torch.float64)
    new = store.compact(slots, up)
    assert store.dropped == 3 and len(store.bank) == 3
    assert ((new >= 0) == torch.tensor([True, False, True, False, True, False])).all()
    lo, hi = store.get(new)[0]
    assert (lo[[0, 2, 4], 0] == torch.tensor([0.0, 2.0, 4.0], dtype=torch.float64)).all()
    assert torch.isinf(lo[[1, 3, 5]]).all() and torch.isinf(hi[[1, 3, 5]]).all()


def test_a_search_over_the_cap_is_still_sound(instance):  # noqa: F811
    _, _, z, net, exact = instance
    row = 2 * sum(net.widths) * 4
    br = branch_and_bound(
        net, torch.arange(len(z)), ratio=1.02, seconds=15, intermediate="inherit", goal="support",
        progress=False, cap_bytes=2 * row, batch=8,
    )
    assert br.dropped > 0 and br.stop == "ratio"
    for t, (best, _, _) in enumerate(exact):
        assert best - MILP_TOL <= float(br.upper[t])
    assert (br.upper <= 1.02 * br.lower).all()


class _Clock:
    """A stand-in for time.perf_counter that advances one second a call: the search stops on
    seconds after a fixed number of steps, some of them splits and CROWN tiers cut short."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


@pytest.mark.parametrize("seconds", [10, 18, 22])
def test_an_inheriting_search_stopped_by_seconds_mid_run_is_sound(net, monkeypatch, seconds):
    """Stops after splits, with CROWN's tier given no time (10, 22) or cut after some chunks (18: 8
    of 13 boxes), chunks of 4 boxes: every task's upper end is above the errors at 4,096 points."""
    monkeypatch.setattr(bab_module, "time", _Clock())
    monkeypatch.setattr(bab_module, "_chunk", lambda bounder, net, batch: 4)
    br = branch_and_bound(
        net, torch.arange(net.T), ratio=1.0001, seconds=seconds, intermediate="inherit", goal="support",
        progress=False, batch=256, rho=0.0, every=1,
    )
    assert br.stop == "seconds" and br.splits > 0
    g = torch.Generator().manual_seed(0)
    x = torch.rand(net.T, 4096, net.I, generator=g, dtype=torch.float64) * 2 - 1
    task = torch.arange(net.T).repeat_interleave(4096)
    sampled = net.forward(task, x.reshape(-1, net.I)).abs().max(1).values.reshape(net.T, -1).max(1).values
    assert (sampled <= br.upper).all() and (br.lower <= br.upper).all()


def test_the_store_grows_and_compacts_without_mixing_boxes_up():
    """Rounds of appends past the first buffer (it grows), then compactions (it is rebuilt): each
    live box still gets back its own bounds."""
    store = BoundStore([3, 2], "cpu")
    slots, values = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64)
    for r in range(5):
        v = torch.arange(700, dtype=torch.float64) + 1000 * r  # exact in float32
        col = v[:, None]
        new = store.put([(col.expand(700, 3), col.expand(700, 3) + 1), (col.expand(700, 2),) * 2])
        live = torch.arange(len(slots)) % 3 != 0  # a third of the open boxes were split or closed
        slots, values = torch.cat([slots[live], new]), torch.cat([values[live], v])
        slots = store.compact(slots, values)
        assert store.used <= 2 * len(slots) or store.used <= 1024
    (l0, u0), (l1, u1) = store.get(slots)
    col = values[:, None]
    assert (l0 == col).all() and (u0 == col + 1).all() and (l1 == col).all() and (u1 == col).all()
