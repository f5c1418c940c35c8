"""The names the CLIs offer, importable without torch (so `--help` answers at once).

Each tuple is the one source of its names: the modules that implement them import it
from here. REGISTRY is the one source of what each construction is called, how the figures
and `--help` describe it and how it is built by default; `constructions.registry` holds
their builders and checks that they match.
"""

from __future__ import annotations

from dataclasses import dataclass

from constructions.tasks.task_names import (  # noqa: F401  (the CLIs read every name from here)
    ENCODING_NAMES,
    ENCODINGS,
    LINEAR_ENCODINGS,
    SPLIT_ALIASES,
    SPLITS,
    WEIGHTS,
)


@dataclass(frozen=True)
class Entry:
    """One registered construction: everything about it that is not its code. The builder
    sits beside it in constructions/registry.py, which imports torch."""

    name: str
    label: str  # its series in the figures
    help: str  # its line in `--construction`'s help
    constants: str = "apriori"  # the constants it is built with unless told otherwise
    # A multi-layer construction takes teachers with L > 1 modular layers, and stacks blocks
    # of the construction named here: asking for that one on such a teacher builds this one.
    blocks: str | None = None

    @property
    def multi_layer(self) -> bool:
        return self.blocks is not None


# `optimal` is about each product's own exact range; the others default to the a-priori
# bound, which holds for every draw of the teacher.
REGISTRY = {e.name: e for e in (
    Entry("shallow", label="shallow (the theorem, a-priori C)",
          help="the theorem's network, O(1/√ε + M) units"),
    Entry("exact", label="exact (zero error on the weight levels)",
          help="gated units, zero error for khot/discrete weights"),
    Entry("deep", label="deep (sawtooth squares)", help="sawtooth squares, O(log 1/ε) units"),
    Entry("optimal", label="optimal (a range and N per product)", help="a range and N per product",
          constants="instance"),
    Entry("multilayer", label="multilayer (a shallow block per layer)",
          help="a teacher with L > 1 modular layers, one shallow block per layer", blocks="shallow"),
)}
# What `--construction` picks: the single-layer ones (a multi-layer teacher, --layers L > 1,
# is built by the multi-layer entry whose blocks are the construction picked).
CONSTRUCTIONS = tuple(name for name, e in REGISTRY.items() if not e.multi_layer)
CONSTRUCTION_HELP = {name: REGISTRY[name].help for name in CONSTRUCTIONS}
DEFAULT_CONSTANTS = {name: e.constants for name, e in REGISTRY.items()}


def default_constants(name: str) -> str:
    return REGISTRY[name].constants if name in REGISTRY else "apriori"


def multi_layer_blocks() -> tuple[str, ...]:
    """The constructions a multi-layer teacher can be built from (as blocks)."""
    return tuple(e.blocks for e in REGISTRY.values() if e.multi_layer)
