"""Every construction by name, so `verify.bound --construction NAME` and the figures pick
them the same way.

- shallow: the theorem's network, O(1/√ε + M) units (constructions/shallow.py).
- exact:   gated units, zero error on finite weight sets, O(M·H·levels) units.
- deep:    sawtooth squares, O(log(1/ε)) units and depth per square.
- optimal: the shallow network with its own range and knot count per product (i, h).
A teacher with L > 1 modular layers is built block by block (constructions/multilayer.py)
with shallow blocks.
"""

from __future__ import annotations

from constructions.deep import build_deep
from constructions.exact import build_exact
from constructions.multilayer import build_multilayer
from constructions.names import CONSTRUCTIONS, DEFAULT_CONSTANTS, default_constants  # noqa: F401
from constructions.optimal import build_optimal
from constructions.shallow import build_construction

BUILDERS = {"shallow": build_construction, "exact": build_exact, "deep": build_deep,
            "optimal": build_optimal}
assert tuple(BUILDERS) == CONSTRUCTIONS, "constructions/names.py lists the registered builders"


def build(name: str, teacher, eps: float, variant: str = "theorem", constants: str | None = None):
    """The construction `name` for `teacher` at ε (ValueError for a bad combination).
    `constants` None picks the construction's default (see DEFAULT_CONSTANTS)."""
    if name not in BUILDERS:
        raise ValueError(f"construction must be one of {', '.join(CONSTRUCTIONS)}; got {name!r}")
    constants = default_constants(name) if constants is None else constants
    if getattr(teacher, "L", 1) > 1:
        if name != "shallow":
            raise ValueError(f"multi-layer teachers are built with shallow blocks only; "
                             f"--construction {name} needs --layers 1")
        return build_multilayer(teacher, eps, variant=variant, constants=constants)
    return BUILDERS[name](teacher, eps, variant=variant, constants=constants)
