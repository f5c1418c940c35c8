"""The contract every registered construction keeps, on small random instances drawn for it:

- count = formula: the built nn.Sequential has the formula's widths, layer by layer, and
  counted_widths() reads the same widths off the structured parameters;
- dense = structured: to_sequential() computes the structured forward's function, up to
  float64 rounding, on the task set and off it (the check verify.bound makes);
- certificate ≤ ε, and the measured sup error ≤ certificate (or, for an exact construction,
  zero on its task set up to rounding), by the rule of its own claim();
- --save reloads: the files verify.bound writes give back the same network and teacher.

The tests are parametrized from the registry (constructions/catalogue.py), so a new
construction is held to all of this without a new line here. The last tests show that the
contract can fail: a construction that claims a certificate it does not have, one whose
count is off by a unit, and one that leaves out a member.
"""

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

import verify.bound
from constructions.base import EXACT_TOL, Construction, count_hidden_units
from constructions.catalogue import CONSTRUCTIONS, REGISTRY
from constructions.registry import BUILDERS, build
from constructions.shallow import ShallowConstruction, build_shallow
from tests.strategies import FAST, small_configs
from theory.bounds import CONSTANTS, VARIANTS
from verify.learning.train import mlp
from verify.theorem.check import AGREEMENT_TOL, dense_agreement, measure_claim, sample_teacher

# A fourth of the profile's examples per construction (5 with the default `ci` profile): the
# contract is the same for every registered construction, and each example measures one.
EXAMPLES = max(3, settings.default.max_examples // 4)


@st.composite
def instances(draw, name: str):
    """(teacher, ε, network) for the registered construction `name`: a multi-layer one gets a
    teacher with 2 or 3 layers. Combinations a builder refuses (exact: continuous weights;
    multilayer: the lean variant) and ε that float64 cannot resolve are drawn again, as
    verify.bound refuses them with a usage error."""
    cfg = draw(small_configs(max_io=3, max_M=5))
    L = draw(st.integers(2, 3)) if REGISTRY[name].multi_layer else 1
    eps = 10.0 ** draw(st.floats(-3.0, 0.0))
    teacher = sample_teacher(cfg, L)
    try:
        net = build(name, teacher, eps, variant=draw(st.sampled_from(VARIANTS)),
                    constants=draw(st.sampled_from(CONSTANTS)))
    except ValueError:
        reject()
    assume(net.claim(eps).resolvable)
    return teacher, eps, net


def broken_promises(net: Construction, teacher, eps: float, seed: int) -> list[str]:
    """The parts of the contract `net` breaks, by name (empty: it keeps all of them)."""
    broken = []
    units = net.hidden_units()
    dense = net.to_sequential()
    widths = count_hidden_units(dense)
    if not (widths == list(units.widths) == net.counted_widths() and sum(widths) == units.total
            == sum(units.terms.values()) and net.count_matches(widths)):
        broken.append("count = formula")
    if not all(isinstance(m, (torch.nn.Linear, torch.nn.ReLU)) for m in dense):
        broken.append("dense is Linear/ReLU only")
    if net.dense_bytes() != 8 * sum(p.numel() for p in dense.parameters()):
        broken.append("dense_bytes")
    if not dense_agreement(net, dense, teacher, seed) <= AGREEMENT_TOL:
        broken.append("dense = structured")

    claim = net.claim(eps)
    if not claim.certificate == net.certificate() <= eps:
        broken.append("certificate <= eps")
    _, measured, _ = measure_claim(claim, net, net, teacher, FAST | dict(seed=seed), seed, progress=False)
    # The rule itself, not only the claim's word for it: an exact claim is certificate 0 and
    # rounding only; any other is measured ≤ certificate up to float64 rounding.
    if claim.exact:
        kept = claim.certificate == 0 and measured <= EXACT_TOL
    else:
        kept = measured <= claim.certificate + claim.floor
    if not kept:
        broken.append("measured <= certificate")
    broken += [name for name, ok in claim.extra.items() if not ok]  # the construction's own checks
    if claim.holds(measured) != (kept and all(claim.extra.values())):
        broken.append("claim() states the rule")
    return broken


def saved_and_reloaded(net: Construction, teacher, dense: torch.nn.Sequential, out: Path):
    """Write the files as `verify.bound --save DIR` does, then rebuild the teacher and the
    plain Linear/ReLU network from them (widths from report.json, as a reader would)."""
    report = dict(construction=dict(name=net.name), hidden_units=dict(widths=count_hidden_units(dense)))
    verify.bound.save(out, report, teacher, dense)
    widths = json.loads((out / "report.json").read_text())["hidden_units"]["widths"]
    reloaded = mlp(net.input_dim, widths, net.O).double()
    reloaded.load_state_dict(torch.load(out / "network.pt"))
    return type(teacher).load_npz(out / "teacher.npz"), reloaded


@pytest.mark.parametrize("name", list(REGISTRY))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_every_registered_construction_keeps_its_contract(name, data):
    teacher, eps, net = data.draw(instances(name))
    assert isinstance(net, Construction) and net.name == name
    assert broken_promises(net, teacher, eps, seed=data.draw(st.integers(0, 2**16))) == []

    dense = net.to_sequential()
    rng = np.random.default_rng(0)
    z = torch.as_tensor(rng.uniform(0, 1, (64, net.M)) * (rng.random((64, net.M)) < net.K / net.M))
    x = torch.as_tensor(rng.uniform(-1, 1, (64, net.I)))
    with tempfile.TemporaryDirectory() as tmp:
        teacher2, reloaded = saved_and_reloaded(net, teacher, dense, Path(tmp))
    inputs = torch.cat([teacher.encode(z), x], dim=1)
    with torch.no_grad():
        assert torch.equal(reloaded(inputs), dense(inputs))
    assert torch.equal(teacher2.encode(z), teacher.encode(z))
    assert torch.equal(teacher2.forward(z, x), teacher.forward(z, x))


def test_the_registry_is_the_one_list_of_constructions():
    """Every entry has a builder, a label and help text; --construction offers the
    single-layer ones and names their help; a multi-layer entry stacks a registered one."""
    assert tuple(BUILDERS) == tuple(REGISTRY)
    assert all(e.label and e.help and e.constants in CONSTANTS for e in REGISTRY.values())
    assert CONSTRUCTIONS == tuple(n for n, e in REGISTRY.items() if not e.multi_layer)
    assert all(e.blocks in CONSTRUCTIONS for e in REGISTRY.values() if e.multi_layer)
    help_text = verify.bound.build_parser().format_help()
    assert "{" + ",".join(CONSTRUCTIONS) + "}" in help_text


def test_a_multi_layer_teacher_asks_for_the_blocks_not_for_another_construction():
    from constructions.multilayer import MultiLayerConstruction
    from constructions.tasks.hyperteacher import HyperteacherConfig

    teacher = sample_teacher(HyperteacherConfig(I=2, H=2, O=1, M=3, K=2, seed=0), 2)
    assert isinstance(build("shallow", teacher, 0.1), MultiLayerConstruction)
    with pytest.raises(ValueError, match="single-layer") as err:
        build("deep", teacher, 0.1)
    assert "--" not in str(err.value)  # a library message names no CLI flag


class Overclaiming(ShallowConstruction):
    """The theorem's network claiming a quarter of its certificate."""

    def certificate(self) -> float:
        return super().certificate() / 4


class Miscounted(ShallowConstruction):
    """The theorem's network reading one unit too many per layer off its parameters."""

    def counted_widths(self) -> list[int]:
        return [w + 1 for w in super().counted_widths()]


@pytest.mark.parametrize("wrong,broken", [(Overclaiming, "measured <= certificate"),
                                          (Miscounted, "count = formula")])
def test_the_contract_catches_a_wrong_construction(wrong, broken):
    """On the one-module instance the theorem's bound is nearly reached (see
    test_construction), so a certificate 4× too small is caught by the measurement."""
    from constructions.tasks.hyperteacher import HyperteacherConfig

    teacher = sample_teacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="continuous", seed=0))
    net = build_shallow(teacher, 1e-2)
    bad = wrong(teacher, N=net.N, C=net.C, a=net.a)
    assert broken_promises(net, teacher, 1e-2, seed=0) == []
    assert broken in broken_promises(bad, teacher, 1e-2, seed=0)


def test_a_construction_missing_a_member_fails_when_it_is_defined():
    with pytest.raises(TypeError, match="must define certificate, rounding_floor"):
        class Incomplete(Construction):
            name, task_set = "incomplete", "Z_K"

            def forward(self, inputs):
                return inputs
