"""The measurer on functions whose sup error is known in closed form."""

import numpy as np
import pytest
import torch

from constructions import HyperteacherConfig, sample_hyperteacher
from verify.theorem.measure import measure_sup_error, pointwise_error


class TeacherPlus(torch.nn.Module):
    """f = g + bump(z, x): the error is the bump, whose sup we know."""

    def __init__(self, teacher, bump):
        super().__init__()
        self.teacher, self.bump = teacher, bump

    def forward(self, inputs):
        e, x = inputs[:, : self.teacher.M], inputs[:, self.teacher.M:]
        z = e if self.teacher.Q is None else e @ torch.as_tensor(self.teacher.Q)
        out = self.teacher.forward(z, x)
        return out + self.bump(z, x)[:, None] * torch.ones(1, self.teacher.O, dtype=out.dtype)


@pytest.mark.parametrize("encoding", ["identity", "orthogonal"])
def test_finds_a_corner_maximum_exactly(encoding):
    teacher = sample_hyperteacher(HyperteacherConfig(I=5, H=4, O=3, M=6, K=2, encoding=encoding))
    delta = 1e-3
    # |bump| peaks at x0 = −x1 = ±1: random points rarely get close, the ascent must.
    f = TeacherPlus(teacher, lambda z, x: delta * (x[:, 0] - x[:, 1]) ** 2 / 4)
    result = measure_sup_error(f, teacher, points_per_task=2)
    assert result.sup_error == pytest.approx(delta, rel=1e-9)
    assert result.by_stage["random"] < result.sup_error
    assert abs(result.x[0] - result.x[1]) == pytest.approx(2.0)


def test_finds_the_one_pair_of_modules_that_is_wrong():
    """An error only on tasks that use modules 3 and 5 together: enumeration must reach that
    support, and the ascent over z must push both weights to 1."""
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=3, O=2, M=12, K=3))
    f = TeacherPlus(teacher, lambda z, x: 0.01 * z[:, 3] * z[:, 5] * (1 + x[:, 0]) / 2)
    result = measure_sup_error(f, teacher)
    assert result.tasks_enumerated and result.n_tasks == 12 + 66 + 220
    assert {3, 5} <= set(result.support)
    assert result.sup_error == pytest.approx(0.01, rel=1e-9)
    # With the task set's own weight levels only (no z ascent), the sup is 0.01·z3·z5 ≤ 0.01.
    levels_only = measure_sup_error(f, teacher, refine_z=False)
    assert levels_only.sup_error <= 0.01 + 1e-15


def test_reported_location_reproduces_the_reported_error():
    teacher = sample_hyperteacher(HyperteacherConfig(I=4, H=4, O=4, M=5, K=2))
    torch.manual_seed(0)
    f = torch.nn.Sequential(torch.nn.Linear(9, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).double()
    result = measure_sup_error(f, teacher)
    z = torch.as_tensor(result.z)[None]
    x = torch.as_tensor(result.x)[None]
    with torch.no_grad():
        assert float(pointwise_error(f, teacher, z, x)) == pytest.approx(result.sup_error, rel=1e-12)
    assert np.abs(result.x).max() <= 1 and result.z.min() >= 0 and result.z.max() <= 1
    assert 1 <= np.count_nonzero(result.z) <= teacher.K
    assert result.sup_error >= max(result.by_stage.values()) - 1e-15


def test_samples_supports_when_there_are_too_many_to_enumerate():
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=2, O=2, M=40, K=3))
    f = TeacherPlus(teacher, lambda z, x: 0 * x[:, 0])
    result = measure_sup_error(f, teacher, max_tasks=300, refine_steps=5)
    assert not result.tasks_enumerated and result.n_tasks == 300
    assert result.sup_error == 0.0
    # Stratified: each support size appears equally often.
    assert len(result.task_errors) == 300
