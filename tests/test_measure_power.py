"""The measurer's power: on tiny instances of every registered construction (and of the
multi-layer one with L = 2 and 3), the sup error it reports is at least 0.95 of the largest
error on an exhaustive grid over the same task set (its claim's: Z_K, or for an exact
construction the family's weight levels), and never more than the certificate.

The grid is dense in x and in every active weight of every support, which is affordable
only for I + |support| ≤ 3; the measurer is run as `verify.bound` runs it (through
measure_claim, with its default budget), so this is the search the CLI reports.
"""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

from constructions.catalogue import ENCODINGS, REGISTRY, WEIGHTS
from constructions.registry import build
from constructions.tasks.hyperteacher import HyperteacherConfig
from theory.bounds import CONSTANTS
from verify.theorem.check import measure_claim, sample_teacher
from verify.theorem.measure import measure_sup_error, pointwise_error

POWER = 0.95  # the measurer finds at least this fraction of the grid's maximum
# Grid points per x axis and per weight axis, by (I, |support|): about 2^17 points a support.
GRID = {(1, 1): (1025, 129), (1, 2): (257, 23), (2, 1): (91, 17)}
EXAMPLES = max(2, settings.default.max_examples // 8)
# Every registered construction; a multi-layer one once per L.
CASES = [(name, L) for name, e in REGISTRY.items() for L in ((2, 3) if e.multi_layer else (1,))]


@st.composite
def tiny_instances(draw, name: str, L: int):
    """(teacher, ε, network) with I + K ≤ 3 and at most 3 modules, at an ε whose knots the
    grid resolves. Combinations a builder refuses are drawn again, as in the contract test."""
    I = draw(st.integers(1, 2))
    M = draw(st.integers(1, 3))
    cfg = HyperteacherConfig(I=I, H=draw(st.integers(1, 2)), O=draw(st.integers(1, 2)), M=M,
                             K=draw(st.integers(1, min(M, 3 - I))), weights=draw(st.sampled_from(WEIGHTS)),
                             encoding=draw(st.sampled_from(ENCODINGS)), seed=draw(st.integers(0, 2**16)))
    eps = 10.0 ** draw(st.floats(-2.5, -1.0))
    teacher = sample_teacher(cfg, L)
    try:
        net = build(name, teacher, eps, constants=draw(st.sampled_from(CONSTANTS)))
    except ValueError:
        reject()
    assume(net.claim(eps).resolvable)
    return teacher, eps, net


def grid_max(net, teacher, refine_z: bool) -> float:
    """The largest error on a grid over the claim's task set: every support of size ≤ K,
    with its weights on a grid over (0, 1] (refine_z) or on every tuple of the family's
    levels, by a grid over the box of x."""
    I, M, K = teacher.I, teacher.M, teacher.K
    worst = 0.0
    for k in range(1, K + 1):
        n_x, n_w = GRID[I, k]
        x_axis = torch.linspace(-1.0, 1.0, n_x, dtype=torch.float64)
        xs = torch.cartesian_prod(*[x_axis] * I).view(-1, I)
        levels = np.linspace(0.0, 1.0, n_w)[1:] if refine_z else teacher.weight_values
        weights = torch.as_tensor(list(itertools.product(levels, repeat=k)), dtype=torch.float64)
        for support in itertools.combinations(range(M), k):
            z = torch.zeros(len(weights), M, dtype=torch.float64)
            z[:, list(support)] = weights
            rows_z = z.repeat_interleave(len(xs), 0)
            rows_x = xs.repeat(len(weights), 1)
            with torch.no_grad():
                for s in range(0, len(rows_x), 2**16):
                    err = pointwise_error(net, teacher, rows_z[s:s + 2**16], rows_x[s:s + 2**16])
                    worst = max(worst, float(err.max()))
    return worst


@pytest.mark.parametrize("name,L", CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_the_measurer_finds_what_a_grid_over_its_task_set_finds(name, L, data):
    teacher, eps, net = data.draw(tiny_instances(name, L))
    claim = net.claim(eps)
    seed = data.draw(st.integers(0, 2**16))
    _, measured, _ = measure_claim(claim, net, net, teacher, dict(seed=seed), seed, progress=False)
    on_grid = grid_max(net, teacher, claim.refine_z)
    # The floor covers an exact construction, whose error on its task set is rounding only.
    assert measured >= POWER * on_grid - claim.floor
    assert claim.holds(measured)


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_on_the_levels_only_the_measurer_finds_what_a_grid_over_them_finds(data):
    """The exact construction's task set (the family's weight levels) through a network whose
    error there is not zero: the measurer, kept on the levels (refine_z False), against a
    grid over every tuple of levels of every support."""
    teacher, eps, net = data.draw(tiny_instances("shallow", 1))
    assume(teacher.weights != "continuous")  # the continuous family has no finite levels
    seed = data.draw(st.integers(0, 2**16))
    measured = measure_sup_error(net, teacher, refine_z=False, seed=seed, progress=False).sup_error
    assert measured >= POWER * grid_max(net, teacher, refine_z=False)
