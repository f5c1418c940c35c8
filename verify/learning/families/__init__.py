"""Task families: what a student learns, behind one interface for training and scoring
(base.TaskFamily). A family is one module here and one line in FAMILIES below, as a
construction is one module and one registry entry in constructions/; tests/test_families.py
holds every registered family to the interface, and adds a toy one through `register`.

    base          the interface, Batch and Reference
    draw          tasks drawn on the training device (the families that use the hyperteacher's
                  supports and weights)
    hyperteacher  the paper's hyperteacher: regression, beside the theorem's construction
    preference    the compositional preference grid: imitation of a planner's actions
"""

from __future__ import annotations

from verify.learning.families.base import Batch, Reference, TaskFamily
from verify.learning.families.hyperteacher import PROBE_MAX_BYTES, HyperteacherBatches, HyperteacherFamily
from verify.learning.families.preference import (
    PreferenceBatches,
    PreferenceFamily,
    action_accuracy,
    masked_cross_entropy,
)

FAMILIES: dict[str, type[TaskFamily]] = {f.name: f for f in (
    HyperteacherFamily,
    PreferenceFamily,
)}
DEFAULT_FAMILY = HyperteacherFamily.name  # a run or stored report that names no family is the hyperteacher's


def register(family: type[TaskFamily]) -> type[TaskFamily]:
    """Add a family to the registry (a plug-in outside this package; a test's toy family).
    verify.sgd's parser, built per registry, offers it from the next parse on."""
    if not (isinstance(family, type) and issubclass(family, TaskFamily)):
        raise TypeError(f"{family!r} is not a TaskFamily subclass")
    if family.name in FAMILIES and FAMILIES[family.name] is not family:
        raise ValueError(f"a task family named {family.name!r} is registered already")
    FAMILIES[family.name] = family
    return family


def family_named(name: str | None) -> type[TaskFamily]:
    """The family of a run's or stored report's `family` (None: the default)."""
    return FAMILIES[name or DEFAULT_FAMILY]


__all__ = ["FAMILIES", "DEFAULT_FAMILY", "register", "family_named", "Batch", "Reference", "TaskFamily",
           "HyperteacherFamily", "HyperteacherBatches", "PROBE_MAX_BYTES",
           "PreferenceFamily", "PreferenceBatches", "masked_cross_entropy", "action_accuracy"]
