"""The text report of `python -m verify.bound`, from verify_point's JSON report: the teacher,
the construction's own lines (Construction.report_lines), the measurement, the checks.

What its lines say (the README shows the default run's report):
- N, the knots of the piecewise-linear square; N·√ε tends to the constant √(I·C·a), so the
  size is 2·I·H·√(I·C·a)/√ε + M + H = O(1/√ε + M);
- certificate I·C·a/N²: a proven bound on the sup over x ∈ [-1,1]^I and all K-sparse
  z ∈ [0,1]^M of ‖f − g‖∞, ≤ ε by the choice of N;
- measured: a lower estimate of that sup (verify/theorem/measure.py's four stages). It is the error at a
  real point of X × Z_K, so it can never exceed the certificate: 0.26 of it on the default
  instance, 0.99–1.00 on the one-neuron instance (I = H = O = M = K = 1), where the certificate
  is tight;
- widths and `count = formula` are counted on the built nn.Sequential (the out features of its
  Linear layers), and `dense check` shows that this network computes the structured evaluator's
  function. Where the dense network is too large to build (above 512 MB, or with --save or
  --dense as asked), the report says the widths are the formula's and prints
  `NOT CHECKED  count = formula`: a formula compared with itself cannot fail. The JSON's
  hidden_units.counted_from is "nn.Sequential" or "formula".

Large sizes go through the structured evaluator, which computes the same function as the dense
MLP without its (2IHN + M) × (M + I) first layer. Real output (lines cut at …):

    $ python -m verify.bound --M 1024 --eps 1e-5
    ...
    N             3,467 = ⌈√(I·C·a/ε)⌉     N·√ε = 10.964 (→ √(I·C·a) = 10.962)
    hidden units  squares 2·I·H·N = 1,775,104
                  carry M         = 1,024
                  widths          = (1776128, 16) from the formula: the nn.Sequential (14.0 GiB) …
    certificate   I·C·a/N² = 9.998e-06   (float64 rounding ≤ 2.3e-10)
    measured      sup‖f−g‖∞ = 2.353e-06  = 0.235 × certificate   (20,000 sampled of 178,957,824 …
    PASS          certificate <= eps
    PASS          measured <= certificate
    NOT CHECKED   count = formula (no nn.Sequential was built to count on)
    verdict       PASS  (16.5 s, peak memory 0.89 GiB)
"""

from __future__ import annotations

from constructions.base import summary_value


def _teacher_line(t: dict) -> str:
    layers = f" L={t['L']}" if t["L"] > 1 else ""
    return (f"hyperteacher  I={t['I']} H={t['H']} O={t['O']} M={t['M']} K={t['K']}{layers}  "
            f"weights={t['weights']} encoding={t['encoding']} seed={t['seed']}  "
            f"({t['n_supports']:,} supports)")


def _error_stats(s: dict) -> str:
    return (f"max error {s['max_error']:.2e} (teacher max |g| {s['teacher_max']:.2f}), "
            f"{100 * s['fraction_above_1e_12']:.3g}% of points off by > 1e-12")


def _off_task_set_lines(off: dict | None) -> list[str]:
    """Where the exact construction stops being exact, one line per probe."""
    if not off:
        return []
    lines = []
    for name, value in off.items():
        if isinstance(value, dict) and "max_error" in value:
            lines.append(f"{name}: {_error_stats(value)}")
        elif name == "x_off_box":
            lines += [f"x in [-{radius}, {radius}]^I: {_error_stats(s)}" for radius, s in value.items()]
        elif isinstance(value, dict) and "sup_error" in value:
            lines.append(f"{name}: sup error {value['sup_error']:.2e} (ascent over z on a support)")
        else:
            lines.append(f"{name}: {summary_value(value)}")
    return [f"{'off task set' if n == 0 else '':<14}{line}" for n, line in enumerate(lines)]


def _instance_bound_lines(r: dict) -> list[str]:
    """The bracket lower ≤ true sup ≤ instance bound ≤ certificate ≤ ε, with each ratio."""
    if "instance_bound" not in r:
        return []
    ib, cert = r["instance_bound"], r["certificate"]
    zk, g = ib["Z_K"], ib["guided"]
    how = ("the certificate: the branch and bound did not get below it" if zk["branch_and_bound"] >= cert
           else f"{zk['over_certificate']:.3f} × certificate")
    lines = [
        f"bracket Z_K   {zk['lower']:.3e} ({zk['lower_from']}) ≤ sup over X × Z_K ≤ {zk['upper']:.3e} ≤ "
        f"certificate {cert:.3e} ≤ ε {r['eps']:.3e}",
        f"              upper ÷ lower = {zk['upper_over_lower']:.2f}; upper = {how} "
        f"({zk['boxes']:,} boxes, {zk['seconds']:.1f} s)",
    ]
    if "levels" in ib:
        lv = ib["levels"]
        lines += [
            f"bracket tasks {lv['lower']:.3e} ≤ sup over the family's {lv['tasks']:,} tasks "
            f"≤ {lv['upper']:.3e} = {lv['over_certificate']:.3f} × certificate",
            f"              upper ÷ lower = {lv['upper_over_lower']:.2f}; upper: task_bound (≤ "
            f"{lv['first_pass'] / cert:.3f} × certificate) on every task, gamma_bound on the "
            f"{lv['refined']:,} largest{'' if lv['refined_exact'] else ' (then time ran out)'} "
            f"({lv['seconds']:.1f} s)",
        ]
    # The float64 margin is the same on both ends (one teacher); shown against the smaller end.
    end = ib["levels"] if "levels" in ib else zk
    if "fp_margin" in end:
        margin = end["fp_margin"]
        lines.append(f"rests on      the phase form in exact arithmetic; float64 rounding: a proven γ_n "
                     f"margin {margin:.1e} added to each upper end ({margin / end['upper']:.1e} of it)")
    lines.append(f"guided search {g['error']:.3e} = {g['error'] / cert:.3f} × certificate on "
                 f"{g['tasks']} task{'s' * (g['tasks'] != 1)} ({g['seconds']:.1f} s)")
    return lines


def format_report(r: dict, construction_lines: list[str]) -> str:
    """The text report of verify_point's JSON report; `construction_lines` are the
    construction's own part of it (Construction.report_lines)."""
    t, m = r["teacher"], r["measured"]
    task_line = (f"all {m['n_tasks']:,} supports" if m["tasks_enumerated"]
                 else f"{m['n_tasks']:,} sampled of {t['n_supports']:,} supports")
    z_where = ", ".join(f"z{k}={v:.3g}" for k, v in zip(m["z_support"], m["z_values"], strict=True))
    ratio = r["measured_over_certificate"]
    ratio = f"= {ratio:.3f} × certificate" if ratio is not None else "(certificate 0: exact)"
    lines = [_teacher_line(t)]
    lines += construction_lines
    lines += [
        f"measured      sup‖f−g‖∞ = {m['sup_error']:.3e}  {ratio}   ({task_line}, "
        f"{m['n_evaluations']:,} evaluations, {m['seconds']:.1f} s)",
        f"              worst at {z_where}; stages "
        + ", ".join(f"{k} {v:.2e}" for k, v in m["by_stage"].items()),
    ]
    if "level_tasks" in r:
        lt = r["level_tasks"]
        which = f"all {lt['of']:,}" if lt["enumerated"] else f"{lt['n_tasks']:,} sampled of {lt['of']:,}"
        lines.append(f"level tasks   max error {lt['max_error']:.3e} over {which} tasks (supports × weight "
                     f"levels, {lt['seconds']:.1f} s)")
    lines += _off_task_set_lines(r.get("off_task_set"))
    lines += _instance_bound_lines(r)
    if r["dense_vs_structured_max_abs"] is not None:
        lines.append(f"dense check   max|dense − structured| = {r['dense_vs_structured_max_abs']:.1e}")
    lines += [f"{'PASS' if ok else 'FAIL'}          {name}" for name, ok in r["checks"].items()]
    if r["hidden_units"]["counted_from"] == "formula":
        lines.append("NOT CHECKED   count = formula (no nn.Sequential was built to count on)")
    lines.append(f"verdict       {'PASS' if r['passed'] else 'FAIL'}  ({r['seconds']:.1f} s, "
                 f"peak memory {r['peak_memory_gib']:.2f} GiB)")
    return "\n".join(lines)
