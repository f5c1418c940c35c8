"""Build a construction for a hyperteacher at ε, measure it, and check its claims:
`verify_point`, the library behind `python -m verify.bound`, `verify.sweep` and the
figures. Sizes are checked before anything is allocated; what cannot fit, or cannot be
resolved in float64, raises UsageError with what it would need.

The refusals, as `verify.bound` prints them (one line, exit 2, before any work):
- `--eps 1e-300`: "ε=1e-300 would need about 1.1e+151 knots per square, more than 2^40: no
  network of that size can be built or checked; use a larger ε";
- `--eps 1e-16`: "ε=1e-16 is below what float64 can verify here: the worst-case rounding
  error 1.4e-11 of this 561,274,742,832-unit network exceeds a tenth of the certificate
  1.0e-16; use a larger --eps";
- `--M 100000`: "the teacher and the structured evaluator would need 42.8 GiB but 22.8 GiB is
  available; use a smaller --M, --I or --H (or fewer --max-tasks)";
- `--M 1024 --eps 1e-5 --dense`: "--dense (the dense network and a batch of its activations)
  would need 339.2 GiB but 22.8 GiB is available; use a larger --eps or a smaller --M, --I
  or --H".

Numbers: everything is float64. An ε whose certificate would sit within 10× of the worst-case
float64 rounding error of the evaluation (the γ_n bound, reported as "float64 rounding") is
refused, and the check "measured ≤ certificate" allows exactly that rounding. float32 is not
good enough for this construction below ε ≈ 1e-4 at I = H = 16: the dense network's layer-2
sums have 2·I·N terms of size O(C), and measured in float32 its error was 2.9e-5 at ε = 1e-4
(float64: 2.4e-5), 1.5e-5 at ε = 1e-5 (above the certificate) and 2.7e-5 at ε = 1e-6:
rounding, not approximation.
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import torch

from constructions.base import BYTES_PER_FLOAT64, Claim, Construction, count_hidden_units
from constructions.registry import build
from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher
from constructions.tasks.multilayer import sample_multilayer_hyperteacher
from verify.cli import GIB, UsageError, phase
from verify.theorem.exact_checks import every_level_task, off_task_set_errors
from verify.theorem.measure import measure_sup_error
from verify.theorem.presets import MAX_TASKS

DENSE_CHECK_BYTES = 512 * 2**20  # build the dense net for the agreement check up to this size
AGREEMENT_TOL = 1e-9  # dense vs structured: both float64, same function, rounding only
AGREEMENT_ROWS = 8  # dense_agreement's inputs per forward pass


def _proc_kib_field(path: str, key: str) -> int | None:
    """A 'Key:  N kB' line of a /proc file, in bytes; None where /proc cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo; 8 GiB where it cannot be read."""
    return _proc_kib_field("/proc/meminfo", "MemAvailable") or 8 * GIB


def peak_memory_bytes() -> int | None:
    """This process's peak resident memory (VmHWM), or None where /proc is missing.
    VmHWM belongs to the address space, so unlike ru_maxrss it does not count what a
    parent process held before it started this one."""
    return _proc_kib_field("/proc/self/status", "VmHWM")


def structured_bytes(cfg: HyperteacherConfig, tasks: int) -> int:
    """Peak memory of the default path: the teacher (held ~3×: numpy, scaled copy,
    autograd), the task latents, and one chunk of per-row (I, H) temporaries."""
    teacher = cfg.M * cfg.I * cfg.H + cfg.M * cfg.H + cfg.H * cfg.O
    latents = 2 * tasks * cfg.M
    chunk = 8192 * (2 * cfg.M + 12 * cfg.I * cfg.H)
    return (3 * teacher + latents + chunk) * BYTES_PER_FLOAT64


def check_memory(need: int, what: str, remedy: str) -> None:
    """UsageError naming the size, the memory there is, and what would make it fit."""
    have = available_bytes()
    if need > have:
        raise UsageError(f"{what} would need {need / GIB:.1f} GiB but {have / GIB:.1f} GiB is "
                         f"available; {remedy}")


# What makes each kind of memory smaller: the teacher and the evaluator's temporaries do
# not depend on ε, the dense network does.
SMALLER_TEACHER = "use a smaller --M, --I or --H (or fewer --max-tasks)"
SMALLER_NETWORK = "use a larger --eps or a smaller --M, --I or --H"


def dense_agreement(net: Construction, dense: torch.nn.Module, teacher, seed: int, n: int = 256) -> float:
    """Max |dense − structured| on n random inputs from the task set and off it."""
    rng = np.random.default_rng(seed + 1)
    z = rng.uniform(0.0, 1.0, size=(n, net.M)) * (rng.random((n, net.M)) < net.K / net.M)
    x = rng.uniform(-1.5, 1.5, size=(n, net.I))  # off the box too: the same function everywhere
    inputs = torch.cat([teacher.encode(torch.as_tensor(z)), torch.as_tensor(x)], dim=1)
    # A few rows at a time: a row's activations in a 512 MiB network take 5 MiB.
    with torch.no_grad():
        return max(float((net(rows) - dense(rows)).abs().max()) for rows in inputs.split(AGREEMENT_ROWS))


def count_widths(net: Construction, dense_net: torch.nn.Module | None) -> tuple[list[int], str]:
    """(hidden widths, where they come from). Counted on the built nn.Sequential's weights
    (count_hidden_units: the units that take part) when there is one: "nn.Sequential". Without
    one they are the count formula's ("formula"), which is no count at all: the caller must
    not check them against the formula, and reports say so."""
    if dense_net is not None:
        return count_hidden_units(dense_net), "nn.Sequential"
    return list(net.hidden_units().widths), "formula"


# count_built builds an nn.Sequential with its weights up to this size, and beyond it its shapes
# only (count_shapes). Figure 1's largest network takes 4.3 GiB, figure 2's 4.7 GiB: built with
# their weights they set the figures' peak memory (7.5 GiB) and most of their time.
COUNT_BYTES = DENSE_CHECK_BYTES
# Where count_built's widths come from (counted_from): the network built with its weights, and
# checked against the structured evaluator; built as shapes only (count_shapes); the formula.
BUILT, SHAPES, FORMULA = "nn.Sequential", "nn.Sequential shapes", "formula"
COUNTED = (BUILT, SHAPES)  # counted on a built network: the count check applies


def shapes_note(rows: list[dict]) -> str:
    """", S as shapes only" for rows of which S were counted as shapes (counted_from SHAPES),
    for a count check's label; "" when none was."""
    shapes = sum(r["counted_from"] == SHAPES for r in rows)
    return f", {shapes} as shapes only" if shapes else ""


class _OnMeta(torch.overrides.TorchFunctionMode):
    """A torch function called within with a meta tensor among its arguments sees its CPU
    tensors on the meta device too (their shape and dtype, no copy): a construction's own
    buffers then mix with the meta layers it writes them into. A function of CPU tensors only
    (the small teacher-sized quantities, float() of a buffer) runs as usual. torch.empty, which
    nn.Linear makes its weights with, makes them on the meta device unless told a device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.empty and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        if any(isinstance(t, torch.Tensor) and t.is_meta for t in leaves):
            meta = lambda t: t.to("meta") if isinstance(t, torch.Tensor) and not t.is_meta else t  # noqa: E731
            args, kwargs = torch.utils._pytree.tree_map(meta, (args, kwargs))
        return func(*args, **kwargs)


@contextlib.contextmanager
def _meta_device():
    """Every module made inside, with nn.Linear or nn.utils.skip_init (how the constructions
    make their layers), is made on torch's meta device, not the CPU: its weights have a shape
    and a dtype but no storage, and every operation on them (_OnMeta) checks shapes as on the CPU without
    computing anything. Other tensors are made as usual: the index arrays and teacher-sized
    blocks that the build computes before it writes them into the layers."""
    from torch import nn

    cpu_skip_init = nn.utils.skip_init

    def skip_init(module_cls, *args, **kwargs):
        return module_cls(*args, **(kwargs | dict(device="meta")))

    nn.utils.skip_init = skip_init
    try:
        with _OnMeta():
            yield
    finally:
        nn.utils.skip_init = cpu_skip_init


def count_shapes(net: Construction) -> list[int]:
    """The hidden widths of net.to_sequential() built as shapes only (the meta device): the
    same code as the real build, which writes every block by index into layers of the widths
    counted here (a block of the wrong size fails there, as in the real build), at no memory:
    a 4.3 GiB network in milliseconds. What it cannot check is that the weights compute the
    structured evaluator's function: count_built checks that, and holds this count to the real
    build's, on every network small enough to build with its weights."""
    with _meta_device():
        dense = net.to_sequential()
    if any(not p.is_meta for p in dense.parameters()):
        raise RuntimeError(f"{type(net).__name__}.to_sequential() made a weight outside the meta device")
    return count_hidden_units(dense)


def count_built(net: Construction, teacher, seed: int, max_bytes: int = COUNT_BYTES,
                agreement_inputs: int = 32) -> dict:
    """Count a construction's hidden units on its built nn.Sequential. Up to max_bytes (and
    half the free memory) it is built with its weights, for the purpose and dropped
    (counted_from BUILT): checked to compute the structured evaluator's function (a count of a
    network that computes something else would prove nothing), and its widths held to those of
    the same network built as shapes (count_shapes), so that the shapes count is checked on
    every network small enough. Beyond, it is built as shapes only (SHAPES): agreement None,
    and the count check is the widths' against the formula's.
    Returns dict(widths, counted_from, agreement, count_ok: bool)."""
    shapes = count_shapes(net)
    if net.dense_bytes() > min(max_bytes, available_bytes() // 2):
        return dict(widths=shapes, counted_from=SHAPES, agreement=None, count_ok=net.count_matches(shapes))
    dense = net.to_sequential()
    widths, counted_from = count_widths(net, dense)
    agreement = dense_agreement(net, dense, teacher, seed, agreement_inputs)
    return dict(widths=widths, counted_from=counted_from, agreement=agreement,
                count_ok=net.count_matches(widths) and widths == shapes and agreement <= AGREEMENT_TOL)


def sample_teacher(cfg: HyperteacherConfig, layers: int = 1):
    """The single-layer hyperteacher, or for layers > 1 the multi-layer one (whose first
    layer is the same draw)."""
    return sample_hyperteacher(cfg) if layers == 1 else sample_multilayer_hyperteacher(cfg, layers)


def verify_point(cfg: HyperteacherConfig, eps: float, variant: str = "theorem",
                 constants: str | None = None, *, construction: str = "shallow", layers: int = 1,
                 dense: bool = False, build_dense: bool | None = None,
                 measure: dict | None = None, progress: bool | None = None):
    """Build a construction for (teacher, ε), measure it, and check its claims.

    Returns (report, teacher, construction, dense network or None). `dense` measures the
    nn.Sequential itself; `build_dense` (default: when it is small) builds it to count its
    widths and compare it with the structured evaluator. Raises UsageError for sizes that
    cannot fit in memory, for ε below float64 resolution and for combinations that a
    construction does not support.
    """
    start = time.perf_counter()
    measure = dict(measure or {})
    tasks = min(measure.get("max_tasks", MAX_TASKS), math.comb(cfg.M, cfg.K) * cfg.K)
    check_memory(layers * structured_bytes(cfg, tasks), "the teacher and the structured evaluator",
                 SMALLER_TEACHER)
    with phase("teacher and network", progress):
        teacher = sample_teacher(cfg, layers)
        try:  # cheap for every ε: no construction allocates anything that grows with 1/ε
            net = build(construction, teacher, eps, variant=variant, constants=constants)
        except ValueError as e:
            raise UsageError(str(e)) from None
    units = net.hidden_units()
    if dense:
        check_memory(net.dense_bytes() + 3 * 8192 * max(units.widths) * BYTES_PER_FLOAT64,
                     "--dense (the dense network and a batch of its activations)", SMALLER_NETWORK)
    claim = net.claim(eps, dense=dense)
    if not claim.resolvable:
        hint = " (or --constants instance, or fewer --layers)" if layers > 1 else ""
        raise UsageError(f"ε={eps:g} is below what float64 can verify here: the worst-case "
                         f"rounding error {claim.floor:.1e} of this {units.total:,}-unit network exceeds a "
                         f"tenth of the certificate {claim.certificate:.1e}; use a larger --eps{hint}")
    if build_dense is None:
        build_dense = net.dense_bytes() <= DENSE_CHECK_BYTES
    elif build_dense:
        check_memory(2 * net.dense_bytes(), "the dense nn.Sequential (for --save)", SMALLER_NETWORK)
    dense_net = None
    if dense or build_dense:
        with phase("dense nn.Sequential", progress):
            dense_net = net.to_sequential()
    widths, counted_from = count_widths(net, dense_net)
    agreement = dense_agreement(net, dense_net, teacher, cfg.seed) if dense_net is not None else None

    measure.setdefault("seed", cfg.seed)
    measured, worst, level_tasks = measure_claim(claim, net, dense_net if dense else net, teacher, measure,
                                                 cfg.seed, progress)
    checks = claim.checks(worst)
    if counted_from == "nn.Sequential":  # the formula's own widths could not fail against it
        checks["count = formula"] = net.count_matches(widths)
    if agreement is not None:
        checks["dense = structured"] = agreement <= AGREEMENT_TOL
    cert = claim.certificate
    report = {
        "teacher": dict(I=cfg.I, H=cfg.H, O=cfg.O, M=cfg.M, K=cfg.K, L=layers, weights=cfg.weights,
                        encoding=cfg.encoding, seed=cfg.seed, n_supports=teacher.n_supports()),
        "construction": dict(name=net.name, task_set=net.task_set, **net.summary()),
        "eps": eps,
        "variant": variant,
        "hidden_units": dict(terms=units.terms, total=units.total, widths=widths,
                             formula=net.count_formula(), counted_from=counted_from,
                             dense_gib=net.dense_bytes() / GIB),
        "certificate": cert,
        "rounding_floor_float64": claim.floor,
        "measured": measured.to_dict() | dict(
            network="dense nn.Sequential" if dense else "structured evaluator"),
        "measured_over_certificate": measured.sup_error / cert if cert > 0 else None,
        "dense_vs_structured_max_abs": agreement,
        "checks": checks,
    }
    for key, value in net.report_fields(teacher, eps).items():
        report[key] = report[key] | value if key in report else value
    if level_tasks is not None:
        report["level_tasks"] = level_tasks
        with phase("off the task set", progress):
            report["off_task_set"] = off_task_set_errors(net, teacher, np.random.default_rng(cfg.seed + 2))
    report |= {"passed": all(checks.values()), "seconds": time.perf_counter() - start,
               "peak_memory_gib": (peak_memory_bytes() or 0) / GIB}
    return report, teacher, net, dense_net


def measure_claim(claim: Claim, net: Construction, f, teacher, measure: dict, seed: int,
                  progress: bool | None = None):
    """(sup-error estimate, worst error seen, level-task errors or None) of f, the construction
    or its dense network, measured where its claim holds: over Z_K, or for an exact claim on
    the family's weight levels only, and then on every level task as well."""
    if not claim.refine_z:  # an exact claim covers the family's own weight levels, not all of [0, 1]
        measure = measure | dict(refine_z=False)
    measured = measure_sup_error(f, teacher, progress=progress, **measure)
    if not claim.exact:
        return measured, measured.sup_error, None
    with phase("every level task", progress):
        level_tasks = every_level_task(net, f, teacher, measure, seed)
    return measured, max(measured.sup_error, level_tasks["max_error"]), level_tasks
