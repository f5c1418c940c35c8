"""What every construction is: the shared setup, the members each must define, and its claim.

A construction is an nn.Module whose forward pass is the structured evaluator of a dense
ReLU MLP with input [e(z), x]. `verify`, the figures and the contract test
(tests/test_construction_contract.py) use only the members below, so a new construction
subclasses `Construction`, defines them, and gets a registry entry (constructions/catalogue.py
and constructions/registry.py); nothing else needs to know about it.

Members every subclass defines (checked when the class is defined):
- name: its registry name; task_set: where its claim holds ("Z_K": x ∈ [-1,1]^I and
  z ∈ [0,1]^M with at most K nonzeros; "levels": the same with z on the family's levels);
- forward(inputs): the structured evaluator, (B, M + I) → (B, O), float64;
- certificate(): the guaranteed sup error on the task set;
- rounding_floor(unit_roundoff, dense): the worst-case floating-point error of evaluating it;
- hidden_units(): the count from the formula (.total, .widths, .terms);
- count_formula(): that formula as text;
- counted_widths(): the hidden widths the structured parameters imply (buffer shapes and N:
  cheap, but the formula by another road, so no check; verify.check.count_built counts
  the built to_sequential() instead);
- to_sequential(dtype): the dense nn.Sequential of Linear and ReLU layers;
- summary(): the parameters that determine the network, for reports.
What it may override: claim() (what must hold: see Claim), report_fields() and
report_lines() (what `verify.bound` adds to its report).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from theory.bounds import CONSTANTS, VARIANTS, apriori_C, instance_C, readout_norm

BYTES_PER_FLOAT64 = 8
# An exact construction's error on its task set is float64 rounding only: this much at most.
EXACT_TOL = 1e-12

REQUIRED = ("name", "task_set", "forward", "certificate", "rounding_floor", "hidden_units",
            "count_formula", "counted_widths", "to_sequential", "summary")


@dataclass(frozen=True)
class Claim:
    """What a construction promises at ε, and the one rule that judges a measured sup error
    (verify_point, the figures and the contract test all apply this one).

    Approximate constructions: certificate ≤ ε, and measured ≤ certificate (up to the float64
    worst case `floor`, which can push an exact-math tie a hair over). An exact one
    (certificate 0): measured ≤ EXACT_TOL on its task set, which is then the family's own
    weight levels, so the measurer must not move z off them (`refine_z` False). `extra`:
    checks of the construction's own that need no measurement (name → whether it holds).
    """

    eps: float
    certificate: float
    floor: float  # worst-case float64 rounding of evaluating the network (and the teacher)
    exact: bool = False
    extra: dict[str, bool] = field(default_factory=dict)

    @property
    def rule(self) -> str:
        """The rule in words, as the figures name their checks."""
        return f"measured <= {EXACT_TOL:g}" if self.exact else "certificate <= eps, measured <= certificate"

    @property
    def refine_z(self) -> bool:
        """Whether the measurer may move z anywhere in [0, 1] (the ascent over Z_K)."""
        return not self.exact

    @property
    def resolvable(self) -> bool:
        """Whether float64 can tell a broken bound from rounding: the certificate must exceed
        ten times the worst-case rounding error (an exact claim is judged by EXACT_TOL)."""
        return self.exact or self.certificate > 10 * self.floor

    def checks(self, measured: float) -> dict[str, bool]:
        """name → whether it holds, for a measured sup error."""
        if self.exact:
            measured_ok = {f"measured <= {EXACT_TOL:g} (exact)": measured <= EXACT_TOL}
        else:
            measured_ok = {"measured <= certificate": measured <= self.certificate + self.floor}
        return {"certificate <= eps": self.certificate <= self.eps, **measured_ok, **self.extra}

    def holds(self, measured: float) -> bool:
        return all(self.checks(measured).values())


def _float64(arr) -> torch.Tensor:
    """A float64 copy (not a view: the network must not change with the teacher's arrays)."""
    return torch.as_tensor(np.array(arr, dtype=np.float64))


class Construction(nn.Module):
    """The shared setup: sizes I, H, O, M, K from the teacher, `variant` and `constants`
    (validated), the readout A and the encoding's Q as float64 buffers; input_dim, decode
    and dense_bytes, which are the same for every construction."""

    name: str
    task_set: str

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        missing = [m for m in REQUIRED if getattr(cls, m, None) is None or
                   (m == "forward" and cls.forward is nn.Module.forward)]
        if missing:
            raise TypeError(f"{cls.__name__} must define {', '.join(missing)} "
                            "(the members every construction has: see constructions/base.py)")

    def __init__(self, teacher, variant: str = "theorem", constants: str = "apriori"):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
        if constants not in CONSTANTS:
            raise ValueError(f"constants must be one of {', '.join(CONSTANTS)}; got {constants!r}")
        self.I, self.H, self.O, self.M, self.K = teacher.I, teacher.H, teacher.O, teacher.M, teacher.K
        self.variant, self.constants = variant, constants
        self.register_buffer("A", _float64(teacher.A))
        self.register_buffer("Q", _float64(teacher.Q) if teacher.Q is not None else None)

    @property
    def input_dim(self) -> int:
        return self.M + self.I

    def decode(self, e: torch.Tensor) -> torch.Tensor:
        """z from e(z); the orthogonal map is undone by its transpose."""
        return e if self.Q is None else e @ self.Q

    def dense_bytes(self) -> int:
        """Memory the parameters of `to_sequential()` take, from the formula's widths."""
        dims = [self.input_dim, *self.hidden_units().widths, self.O]
        return sum((n_in + 1) * n_out for n_in, n_out in itertools.pairwise(dims)) * BYTES_PER_FLOAT64

    def count_matches(self, widths) -> bool:
        """Whether hidden widths counted on a built network are the formula's, layer by layer."""
        units = self.hidden_units()
        return sum(widths) == units.total and tuple(widths) == tuple(units.widths)

    def claim(self, eps: float, dense: bool = False) -> Claim:
        """What must hold at ε: certificate ≤ ε and measured ≤ certificate. `dense`: the
        rounding allowance of the nn.Sequential rather than of the structured evaluator."""
        return Claim(eps=eps, certificate=self.certificate(), floor=self.rounding_floor(dense=dense))

    def report_fields(self, teacher, eps: float) -> dict:
        """What this construction adds to verify.bound's JSON report. A key the report already
        has (a dict, such as hidden_units) is extended, any other is added."""
        return {}

    def report_lines(self, r: dict) -> list[str]:
        """The construction's part of verify.bound's text report (r: the JSON report): its
        parameters, ε, the hidden units term by term, the certificate."""
        c, u = r["construction"], r["hidden_units"]
        params = [f"{k}={summary_value(v)}" for k, v in c.items() if k not in ("name", "task_set")]
        lines = [f"construction  {c['name']}   certificate holds on: {c['task_set']}"]
        for s in range(0, len(params), 4):
            lines.append("              " + "  ".join(params[s:s + 4]))
        lines.append(f"ε             {r['eps']:.3e}")
        width = max(len(k) for k in u["terms"])
        for n, (k, v) in enumerate(u["terms"].items()):
            lines.append(f"{'hidden units' if n == 0 else '':<14}{k:<{width}} = {v:,}")
        lines += [f"{'':<14}{'total':<{width}} = {u['total']:,}   formula {u['formula']}",
                  f"{'':<14}{'widths':<{width}} = {run_length(u['widths'])} "
                  f"({len(u['widths'])} hidden layers) {widths_source(u)}",
                  f"certificate   {r['certificate']:.3e}   "
                  f"(float64 rounding ≤ {r['rounding_floor_float64']:.1e})"]
        return lines


def widths_source(u: dict) -> str:
    """Where a report's widths come from: counted on the built nn.Sequential, or, where that
    was too large to build, the formula's (and then no independent count)."""
    if u["counted_from"] == "nn.Sequential":
        return "counted on the nn.Sequential"
    return (f"from the formula: the nn.Sequential ({u['dense_gib']:.1f} GiB) was not built, so they "
            "are not counted")


def summary_value(v) -> str:
    """A summary() value on one short line: floats to 4 digits, long lists cut at 8."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        shown = ", ".join(summary_value(x) for x in v[:8])
        return f"[{shown}, … {len(v)} values]" if len(v) > 8 else f"[{shown}]"
    return str(v)


def run_length(widths) -> str:
    """(2064, 1040×12, 16): a deep network's widths on one line."""
    runs: list[list[int]] = []
    for w in widths:
        if runs and runs[-1][0] == w:
            runs[-1][1] += 1
        else:
            runs.append([w, 1])
    return "(" + ", ".join(f"{w}×{n}" if n > 1 else str(w) for w, n in runs) + ")"


def construction_constants(teacher, constants: str = "apriori") -> tuple[float, float]:
    """(C, a): C from the a-priori truncation bound or from this instance's exact range,
    a = max_o Σ_h |A_ho| (shared by the shallow and the deep construction)."""
    if constants not in CONSTANTS:
        raise ValueError(f"constants must be one of {', '.join(CONSTANTS)}; got {constants!r}")
    C = apriori_C(teacher.I, teacher.K) if constants == "apriori" else instance_C(teacher.W, teacher.K)
    return C, readout_norm(teacher.A)


def count_hidden_units(net: nn.Module) -> list[int]:
    """Hidden widths of any nn.Sequential MLP: out_features of every Linear but the last.
    On a construction's to_sequential() this counts the network as built, whose every
    block is written by index into those layers (a wrong size fails there), and which the
    callers check against the structured evaluator's function (dense = structured)."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    return [m.out_features for m in linears[:-1]]
