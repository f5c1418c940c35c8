"""A student's sup error and its R² score the same function: for the transformer, which reads
a task's samples as one sequence, every position's prediction (verify.metrics.sup_error,
through the hyperteacher family's score, as the CLI runs it)."""

import numpy as np
import pytest
import torch
from torch import nn

from constructions import HyperteacherConfig, sample_hyperteacher
from constructions.tasks.hyperteacher import enumerate_supports
from verify.learning.families import HyperteacherFamily
from verify.learning.metrics import SequenceRows, SequenceTeacher, predict, sample_eval_tasks, sup_error
from verify.learning.records import as_dicts, lookup
from verify.learning.students import TransformerStudent
from verify.theorem.presets import SGD_MEASURE

DELTA = 0.25
SAMPLES = 4  # positions a task's sequence holds


def teacher_and_sides(seed: int = 0):
    teacher = sample_hyperteacher(HyperteacherConfig(I=2, H=3, O=2, M=4, K=2, seed=seed))
    supports = enumerate_supports(teacher.M, teacher.K)
    rng = np.random.default_rng(seed)
    sides = {side: (supports, sample_eval_tasks(teacher, supports, 16, SAMPLES, rng))
             for side in ("train", "held_out")}
    return teacher, sides


class LaterPositionsWrong(nn.Module):
    """A 'transformer' that is the teacher at its first position and off by DELTA at every
    later one: its first prediction, all that one (z, x) row shows, is exact."""

    reads_sequence = True

    def __init__(self, teacher):
        super().__init__()
        self.teacher, self.E, self.I = teacher, teacher.M, teacher.I
        self.scale = nn.Parameter(torch.ones((), dtype=torch.float64))  # so numbers_read sees a module

    def forward_tasks(self, e, x):
        T, P, _ = x.shape
        y = self.teacher.forward(e.repeat_interleave(P, dim=0), x.reshape(T * P, -1)).view(T, P, -1)
        return y + DELTA * (torch.arange(P, dtype=y.dtype) > 0)[None, :, None] * self.scale

    def forward(self, rows):
        e, x = rows[:, :self.E], rows[:, None, self.E:]
        return self.forward_tasks(e, x)[:, 0]


def test_an_error_at_a_later_position_only_is_in_the_sup_error_as_in_the_r2():
    """Before, the sup error read the first position only and reported 0 here, while the
    R² (every position) saw the error."""
    teacher, sides = teacher_and_sides()
    family = HyperteacherFamily(teacher, teacher.encode, "identity")
    records, _ = family.score("stub", LaterPositionsWrong(teacher), sides, seed=0)
    m = as_dicts(records)
    assert lookup(m, "stub", "train", "r2") < 1 and lookup(m, "stub", "held_out", "r2") < 1
    assert lookup(m, "stub", "train", "sup") == pytest.approx(DELTA, rel=1e-12)
    assert lookup(m, "stub", "held_out", "sup") == pytest.approx(DELTA, rel=1e-12)


def test_a_transformers_sup_error_bounds_its_error_on_the_r2_samples():
    """The sup error is over every sequence of the R²'s length, so it is at least the largest
    error of any position of the sampled tasks the R² scores, whose later positions err more
    than their first here. (A consistency check: the search over x alone also passes it here.)"""
    teacher, sides = teacher_and_sides(seed=3)
    torch.manual_seed(0)
    student = TransformerStudent(teacher.M, teacher.I, teacher.O, d_model=8, n_heads=2, n_layers=1,
                                 d_ffw=16).double()
    supports, samples = sides["held_out"]
    pred = predict(student, samples, teacher.encode)
    on_samples = float((pred - samples.y).abs().max())
    first_only = float((pred - samples.y)[:, 0].abs().max())
    sup = sup_error(student, teacher, teacher.encode, supports, SAMPLES, 0, SGD_MEASURE, refine_z=False)
    assert len(sup.x) == SAMPLES * teacher.I  # the search moved whole sequences
    assert sup.sup_error >= on_samples > first_only


def test_the_sequence_view_is_the_students_own_call():
    teacher, sides = teacher_and_sides()
    torch.manual_seed(1)
    student = TransformerStudent(teacher.M, teacher.I, teacher.O, d_model=8, n_heads=2, n_layers=1,
                                 d_ffw=16).double()
    _, samples = sides["train"]
    e = teacher.encode(samples.z)
    rows = torch.cat([e, samples.x.reshape(len(e), -1)], dim=1)
    with torch.no_grad():
        assert torch.equal(SequenceRows(student, SAMPLES)(rows).view(len(e), SAMPLES, -1),
                           student.forward_tasks(e, samples.x))
    z_rows = samples.z.repeat_interleave(SAMPLES, dim=0)
    view = SequenceTeacher(teacher, SAMPLES)
    assert (view.I, view.O) == (SAMPLES * teacher.I, SAMPLES * teacher.O)
    assert (view.M, view.K, view.weights) == (teacher.M, teacher.K, teacher.weights)
    assert torch.equal(view.forward(samples.z, samples.x.reshape(len(e), -1)).view(len(e), SAMPLES, -1),
                       teacher.forward(z_rows, samples.x.reshape(-1, teacher.I)).view(len(e), SAMPLES, -1))


def test_a_network_of_one_pair_is_measured_as_before():
    """An MLP (no reads_sequence) is measured at single (z, x) points, unchanged."""
    teacher, sides = teacher_and_sides()
    torch.manual_seed(2)
    mlp = nn.Sequential(nn.Linear(teacher.M + teacher.I, 8), nn.ReLU(), nn.Linear(8, teacher.O)).double()
    supports, _ = sides["train"]
    sup = sup_error(mlp, teacher, teacher.encode, supports, SAMPLES, 0, SGD_MEASURE, refine_z=False)
    assert len(sup.x) == teacher.I
