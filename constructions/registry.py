"""Every construction by name, so `verify.bound --construction NAME`, the figures and the
contract test pick them the same way.

- shallow:    the theorem's network, O(1/√ε + M) units (constructions/shallow.py).
- exact:      gated units, zero error on finite weight sets, O(M·H·levels) units.
- deep:       sawtooth squares, O(log(1/ε)) units and depth per square.
- optimal:    the shallow network with its own range and knot count per product (i, h).
- multilayer: a teacher with L > 1 modular layers, built block by block from shallow blocks.

What each is called, its label, help and default constants are its entry in
constructions/catalogue.py (importable without torch); its builder is here. Adding a
construction is its own theory/ and constructions/ modules, one Entry and one builder.

A construction's dense network is a plain nn.Sequential, so its saved state_dict
(`torch.save(net.to_sequential().state_dict(), path)`) reloads into
verify.learning.train.mlp(M + I, widths, O), widths being its hidden_units().widths.
"""

from __future__ import annotations

from constructions.catalogue import CONSTRUCTIONS, REGISTRY, Entry  # noqa: F401
from constructions.deep import build_deep
from constructions.exact import build_exact
from constructions.multilayer import build_multilayer
from constructions.optimal import build_optimal
from constructions.shallow import build_shallow

# Every builder takes (teacher, eps, variant=..., constants=...) and returns a Construction.
BUILDERS = {"shallow": build_shallow, "exact": build_exact, "deep": build_deep,
            "optimal": build_optimal, "multilayer": build_multilayer}
assert tuple(BUILDERS) == tuple(REGISTRY), "constructions/catalogue.py has an entry for every builder"


def entry_for(name: str, teacher) -> Entry:
    """The entry that builds `name` for this teacher: for a teacher with L > 1 layers, a
    single-layer name means the multi-layer construction made of its blocks."""
    if name not in REGISTRY:
        raise ValueError(f"construction must be one of {', '.join(REGISTRY)}; got {name!r}")
    entry = REGISTRY[name]
    L = getattr(teacher, "L", 1)
    if L > 1 and not entry.multi_layer:
        stacked = [e for e in REGISTRY.values() if e.blocks == name]
        if not stacked:
            blocks = " or ".join(e.blocks for e in REGISTRY.values() if e.multi_layer)
            raise ValueError(f"a teacher with {L} layers is built from {blocks} blocks only; "
                             f"the {name} construction takes single-layer teachers")
        entry = stacked[0]
    return entry


def build(name: str, teacher, eps: float, variant: str = "theorem", constants: str | None = None):
    """The construction `name` for `teacher` at ε (ValueError for a bad combination).
    `constants` None picks the construction's default (its entry's `constants`)."""
    entry = entry_for(name, teacher)
    constants = entry.constants if constants is None else constants
    return BUILDERS[entry.name](teacher, eps, variant=variant, constants=constants)
