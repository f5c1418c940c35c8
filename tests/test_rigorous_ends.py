r"""Upper ends that say what they rest on (issue 19, item 5): a solver's answer is an upper end
only when the solver proved it; interval bounds are rounded outward; the instance bound's
float64 margin covers the distance to the exact (rational) value of its formula.

Mutation testing
----------------
The rigorous bounds and their tests are checked with mutmut 3.8.1 (the `dev` extra; configured
in pyproject.toml under [tool.mutmut]: the five files theory/instance.py, verify/theorem/instance.py,
verify/theorem/exact_sup.py, theory/lipschitz.py, theory/bounds.py, and their five test files with -x,
less the four slowest tests, which cross-check the same bounds by MILP, a 2,000-point grid over
Z_K and the CLI; a mutant is a timeout past 6 × its tests' time + 6 s of CPU). It is not run in
CI. Run it in a scratch copy, so that its mutants/ folder stays out of the checkout, on the
functions that compute or judge a bound. Mutant names are globs; these are the ones run (in
four batches, about 35 min on two shared cores):

    rm -rf /tmp/mut && mkdir /tmp/mut && git archive HEAD | tar -x -C /tmp/mut && cd /tmp/mut
    export OMP_NUM_THREADS=1 HYPOTHESIS_PROFILE=ci
    I=theory.instance.x_; B=theory.bounds.x_; L=theory.lipschitz.x_; V=verify.theorem.instance.x_
    E=verify.theorem.exact_sup.x
    mutmut run --max-children 2 "${I}task_bound*" "${I}box_bound*" "${I}_beta_range*" \
      "${I}gamma_bound*" "${I}rounding_margin*" "${I}kink_values*" "${I}task_phases*" \
      "${I}phase_scale*" "${I}beta_*" "${I}product_error*" "${I}phase_slopes*" "${I}input_phases*" \
      "${B}gamma_*" "${B}certificate_*" "${B}readout_norm*" "${B}top_k_sum*" "${B}instance_C*" \
      "${B}rounding_floor*" "${B}N_for_eps*" "${L}affine_interval*" "${L}interval_bounds*" \
      "${L}teacher_z_lipschitz*" "${V}levels_bound*" "${V}zk_bound*" "${V}_level_z*" \
      "${V}level_tasks*" "${V}add_instance_bound*" "${E}_proven_upper*" "${E}_certified*" \
      "${E}_judge*" "${E}_relu_rows*" "${E}_pre_bounds*" "${E}_exact_sup*" "${E}ǁMilpǁ__init__*" \
      "${E}ǁMilpǁsolve*" "${E}ǁProblemǁremainder*" "${E}ǁProblemǁsolve_cell*"
    mutmut results

Not run: phase_form_error and guided_search (the lower end), network_lipschitz (used by tests
only), and the sizes, CLI and text of bounds.py and exact_sup.py.

Mutants tried, then killed (⏰: timeouts, counted apart) and surviving; "after" is with the
tests added for the survivors (in tests/test_budgeted_bounds.py, test_rigorous_ends.py,
test_instance_bound.py, test_theory.py), whose 127 targets were rerun by name: 126 killed,
1 timeout (`refined = 1` in levels_bound, which loops to the deadline):

    file (what)                                            tried  killed  ⏰   surviving  surviving after
    theory/instance.py (all but phase_form_error)            433     372   10      51  15, all equivalent
    theory/bounds.py (γ_n, certificate, readout norm,        153     121    0      32  7, all equivalent
      top-K, instance C, N(ε), rounding floor)                                          (N_for_eps 6)
    verify/theorem/instance.py (levels_bound, zk_bound,      616     467    4     145  87, none changes
      level_tasks, _level_z)                                                            a bound
    verify/theorem/instance.py add_instance_bound            279       —    —     279  13, none changes a
      (no test in the selection reached it)                                             bound or a check
    verify/theorem/exact_sup.py (MILP, bounds, remainder,    484     356   39      89  48, all equivalent
      checks, exact_sup)                                                                (exact_sup 13,
                                                                                        Milp.__init__ 7)
    theory/lipschitz.py (affine_interval,                    245      67  117      61  22: 14 equivalent,
      interval_bounds, teacher_z_lipschitz)                                             8 rounding-level
                                                                                        pads (below)

A second round took the 114 survivors left unexamined above and the 279 mutants of
add_instance_bound (reached now by test_add_instance_bound_* in test_instance_bound.py: a tiny
teacher, no time budget, every report field against zk_bound, levels_bound and guided_search
called alone, the checks True at equality and False one step past it). Tests added:
teacher_z_lipschitz against its docstring formula in rationals (above it by (1 − γ_n)(1 +
γ_{n+2}), below it by 1e-12 relative), the γ_n counts its comment derives, and a unit live by
2⁻⁵⁴ (test_rigorous_ends.py); a ReLU stable at an exact 0 and a readout bias in Milp, branch
and bound with max_cells = 7 checked against a 201² grid, the task set asked for
(test_exact_sup.py); N_for_eps at ε = each certificate value and one ulp either side against
counting (test_theory.py). All rerun by name (twice: 5 more assertions killed the last 5 that
changed a reported value):

    function                                  tried  before: killed  ⏰  surviving  now: killed  ⏰  surviving
    theory/lipschitz.py teacher_z_lipschitz     157               8  95         54           38   0         16
    theory/bounds.py N_for_eps                   49              37   0         12            6   0          6
    verify/theorem/exact_sup.py exact_sup       126              88   3         35           20   2         13
    verify/theorem/exact_sup.py Milp.__init__   119             104   2         13            6   0          7
    verify/theorem/instance.py
      add_instance_bound                        279               —   —        279          265   1         13

Not killed, and not equivalent in general: 8 of teacher_z_lipschitz's outward steps on the
pre-activation ends (the pad dropped: `size - …`, `np.where(None, …)` twice, `pad > 1` twice;
`γ / size`; `pre_lo + pad`; `nextafter(…, +inf)` on pre_lo). They change Lg only through
float64 rounding of the corner sums, and on every instance tried affine_interval's own pad on
q (γ_{2n+4} of the same terms) already covers that rounding; a support with |S| > 2n + 2 could
need the pre-activation pad, and no test builds such a case yet.

The survivors left, by kind (each checked by hand; "looser" means a bound that is still an
upper bound, only larger):
- Same value in numpy 2.4: `reshape(…, -2)` is -1 (task_phases, phase_scale, instance_C,
  zk_bound); take_along_axis without axis is the last axis; `axis=+2` is -2 for the 4-D kink
  array; `dtype=None` for int64 combinations; einsum letters in capitals; `task_t[r:r + 2]` in
  levels_bound (only the first entry is read); `r2[y] = 1` for `+= 1` on a zero entry
  (relu_rows).
- Same value mod 1: the θ grid shifted by one step (box_bound, `(k ∓ 0.5)/G`, `(k + 1.5)/G`);
  input_phases shifted by N (β is 1-periodic, N an integer).
- Unreachable: gamma_bound's last return (the loop returns once its frontier is empty, always
  by depth H); a MILP with no point found (Milp.solve's first return).
- Batching only: TASK_ROWS/BOX_ROWS chunk sizes and slices that recompute rows; `range(K + 1)`
  (no support of size 0).
- Search order or pruning at equality: gamma_bound's branching order and >= for > (same
  maximum), levels_bound's >= in its loop and its dropped `above=` (same max), zk_bound's
  choice of axis and of which boxes to split, solve_cell's < for ≤ and ties, break for
  continue (a cell keeps the bound of its parent, which holds).
- Looser: larger margins or pads (γ_3 for γ_2 in the z-remainder, γ_{3n+4}/γ_{2n+5} in
  affine_interval, one ulp outward at an exact 0), `max(hi, 1)` in interval_bounds, a larger or
  mis-centred split that still covers its box (zk_bound's mid), gamma_bound stopping at a
  frontier of exactly the cap, HiGHS's own default tolerances or no time limit (its dual bound
  is still a proof), an LP answered as not proven; the defaults grid=257, seconds=31, keep=9,
  split_batch=257 (all sound settings).
- Second round (teacher_z_lipschitz, N_for_eps, exact_sup, Milp.__init__, add_instance_bound):
  `zip(…, strict=…)` dropped or False (the lists have equal lengths); size starting at 1 or
  maxed over all axes, `pad >= 0`, `pre_hi >= 0` for live (looser: one more ulp or one more
  live unit); N_for_eps starting at 2, a fifth round, `N > 2`, steps of 2 (the next round
  steps back; N = 2 with certificate(1) ≤ ε cannot come from a monotone division) and the text
  of its unreachable error; exact_sup's defaults (grid, max_cells, rel_tol, abs_tol,
  time_limit: sound settings), the per-MILP limit left to Problem's default, the
  stopping/skipping target moved (a cell keeps its parent's proven bound), >= at ties; Milp's
  larger scratch arrays (cut to n), `lo > 0` for the constant (an end is exactly 0 only when
  every term is, so p = 0), a binary for a unit with hi = 0 (y ≤ hi = 0), a ≤ 2 (a = 2 makes
  y ≤ pre + lo < pre ≤ y infeasible); add_instance_bound's progress flags and phase label, the
  -2.0 of an unused no-levels result (the measured task's search returns an error ≥ 0), max
  without its key (tuples compare by the error first).
- No bound: progress bars, warning filters, the objective value Milp.solve returns (callers
  score the point on the network), refined_exact at `unreached == best`, np.clip guards on a
  solver point that lies in its bounds, stable-sort ties in levels_bound's order.
"""

import itertools
import math
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

import theory.instance as ti
import verify.theorem.exact_sup as es
from constructions.registry import build
from constructions.tasks.hyperteacher import HyperteacherConfig
from theory.bounds import gamma, readout_norm
from theory.lipschitz import affine_interval
from verify.theorem.check import sample_teacher

# ─── the solver's status ──────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("status, dual, binaries, expected", [
    (0, -0.5, True, 0.5),  # proven optimal MILP: its dual bound
    (0, None, False, 0.4),  # an LP solved to optimality: its optimum
    (0, None, True, math.inf),  # a MILP without a dual bound: nothing proven
    (1, -0.5, True, math.inf),  # time limit: not proven, even with a dual bound
    (1, None, False, math.inf),
    (2, None, False, math.inf),
])
def test_an_upper_end_is_the_solvers_proof_or_inf(status, dual, binaries, expected):
    res = SimpleNamespace(status=status, mip_dual_bound=dual, fun=-0.4, x=np.zeros(1))
    assert es.proven_upper(res, binaries) == expected


def one_module(weights="khot", construction="shallow", eps=1e-1):
    teacher = sample_teacher(HyperteacherConfig(I=1, H=1, O=1, M=2, K=1, weights=weights, seed=0))
    return teacher, build(construction, teacher, eps)


def test_a_time_limited_solve_gives_an_infinite_upper_end_and_not_proven(monkeypatch):
    """Every MILP answered as if its time ran out (status 1, its dual bound still there): the
    exact sup must not report that bound, and the text says NOT proven."""
    import scipy.optimize

    real = scipy.optimize.milp

    def time_limited(*args, **kwargs):
        res = real(*args, **kwargs)
        res.status = 1
        return res

    teacher, net = one_module()
    honest = es.exact_sup(net, teacher, task_set="levels")
    assert honest["proven"] and math.isfinite(honest["upper"])
    monkeypatch.setattr(scipy.optimize, "milp", time_limited)
    limited = es.exact_sup(net, teacher, task_set="levels")
    assert limited["upper"] == math.inf and not limited["proven"]
    assert limited["n_time_limited"] == limited["n_milps"] > 0
    assert limited["lower"] == honest["lower"]  # the points it found are still real errors
    report = dict(construction=dict(name="shallow", task_set="levels"), eps=0.1, certificate=0.05,
                  rounding_floor=1e-13, exact=limited | dict(unstable_relus=0),
                  measured=dict(sup_error=0.0, seconds=0.0), measured_over_exact=None,
                  certified=es.certified(limited["upper"], 0.05), rests_on=es.RESTS_ON,
                  checks={}, passed=True)
    text = es.format_report(report)
    assert "NOT proven" in text and "certified     no" in text and "proved no bound" in text


def test_a_milp_with_no_dual_bound_gives_inf(monkeypatch):
    import scipy.optimize

    real = scipy.optimize.milp

    def no_dual(*args, **kwargs):
        res = real(*args, **kwargs)
        res.mip_dual_bound = None
        return res

    teacher, net = one_module()
    milp = es.Problem(net, teacher).milp_at(np.array([0]), np.array([1.0]), np.array([1.0]))
    assert milp.binaries > 0
    _, _, upper, proven = milp.solve(0, 1.0, 5.0)
    assert proven and math.isfinite(upper)
    monkeypatch.setattr(scipy.optimize, "milp", no_dual)
    _, value, upper, proven = milp.solve(0, 1.0, 5.0)
    assert upper == math.inf and not proven and math.isfinite(value)


def test_milp_tol_enters_every_comparison_with_the_solvers_end():
    from constructions.base import Claim

    claim = Claim(eps=0.1, certificate=0.05, floor=1e-13)
    upper = 0.04
    # measured ≤ upper: the solver's end may sit MILP_TOL below the exact max.
    ends, key = dict(lower=0.03, upper=upper), "measured <= exact upper"
    assert es.judge(claim, ends, upper + 0.5 * es.MILP_TOL, 1e-13)[key]
    assert not es.judge(claim, ends, upper + 2 * es.MILP_TOL, 1e-13)[key]
    # certified: a proof, so MILP_TOL counts against the end.
    assert es.certified(0.05 - 2 * es.MILP_TOL, 0.05)
    assert not es.certified(0.05 - 0.5 * es.MILP_TOL, 0.05)
    assert not es.certified(math.inf, 0.05)


# ─── outward interval arithmetic ──────────────────────────────────────────────────────────────

def exact_affine(W, b, lo, hi):
    """(lo, hi) of W·v + b over the box, in rational arithmetic on the float64 inputs."""
    F = Fraction
    out_lo, out_hi = [], []
    for row, bj in zip(W, b, strict=True):
        terms_lo = [F(w) * F(lo[k] if w >= 0 else hi[k]) for k, w in enumerate(row)]
        terms_hi = [F(w) * F(hi[k] if w >= 0 else lo[k]) for k, w in enumerate(row)]
        out_lo.append(sum(terms_lo, F(bj)))
        out_hi.append(sum(terms_hi, F(bj)))
    return out_lo, out_hi


def test_affine_interval_is_outward_where_plain_float64_is_not():
    rng = np.random.default_rng(0)
    plain_inside = 0
    for _ in range(200):
        n = int(rng.integers(2, 12))
        W, b = rng.normal(size=(3, n)) * 10.0 ** rng.uniform(-3, 3), rng.normal(size=3)
        lo = rng.uniform(-1, 0, n)
        hi = lo + rng.uniform(0, 1, n)
        ex_lo, ex_hi = exact_affine(W, b, lo, hi)
        got_lo, got_hi = affine_interval(W, b, lo, hi)
        pos, neg = np.maximum(W, 0.0), np.minimum(W, 0.0)
        plain_lo = pos @ lo + neg @ hi + b
        for j in range(3):
            assert Fraction(got_lo[j]) <= ex_lo[j] and ex_hi[j] <= Fraction(got_hi[j])
            plain_inside += Fraction(plain_lo[j]) > ex_lo[j]
    assert plain_inside > 0, "plain float64 was never inside the exact end: the test would not bite"


def test_an_exactly_zero_bound_stays_exact():
    """A ReLU whose inputs are ≥ 0 with weights ≥ 0 and no bias has lower bound exactly 0: it
    must stay stable (no binary), so the outward pad leaves an end made of zeros alone."""
    lo, hi = affine_interval(np.array([[1.0, 2.0]]), np.zeros(1), np.zeros(2), np.ones(2))
    assert lo[0] == 0.0 and hi[0] >= 3.0


# ─── the instance bound's float64 margin ─────────────────────────────────────────────────────

def beta_exact(s: Fraction) -> Fraction:
    f = s - math.floor(s)
    return 4 * f * (1 - f)


def task_bound_exact(W, A, C, N, z) -> Fraction:
    """task_bound's formula in rational arithmetic on the float64 W, A, C and z (K = 1): the
    max over σ, o of (C/N²)·Σ_i max over kinks θ ∈ {±φ_ij} of Σ_h (σA_ho·B(θ, φ_ih))⁺."""
    M, I, H = W.shape
    F = Fraction
    phi = [[sum(F(z[m]) * F(W[m, i, h]) for m in range(M)) * N / (4 * F(C)) for h in range(H)]
           for i in range(I)]
    best = None
    for o, sigma in itertools.product(range(A.shape[1]), (1, -1)):
        total = F(0)
        for i in range(I):
            kinks = [s * phi[i][j] for j in range(H) for s in (1, -1)]
            B = [[beta_exact(t + phi[i][h]) - beta_exact(t - phi[i][h]) for h in range(H)] for t in kinks]
            total += max(sum(max(sigma * F(A[h, o]) * row[h], 0) for h in range(H)) for row in B)
        best = total if best is None else max(best, total)
    return best * F(C) / N**2


def test_the_margin_covers_the_exact_value_where_float64_alone_does_not():
    """Large N (phases of about 10⁵) makes the rounding of θ ± φ visible: the float64 task_bound
    falls below the exact value of its own formula on some tasks, and never by more than the margin."""
    rng = np.random.default_rng(1)
    below, worst = 0, 0.0
    for _ in range(30):
        M, I, H, O = 2, 2, 3, 2
        W, A = rng.normal(size=(M, I, H)), rng.normal(size=(H, O))
        C, N = float(np.abs(W).max()) * 1.01, int(rng.integers(2**18, 2**20))
        z = np.eye(M)[rng.integers(M)] * rng.uniform(0.3, 1.0)
        got = ti.task_bound(ti.task_phases(W, 1, C, N, z[None]), A, C, N)[0]
        exact = task_bound_exact(W, A, C, N, z)
        margin = ti.rounding_margin(W, A, 1, C, N)
        below += Fraction(got) < exact
        worst = max(worst, float(exact - Fraction(got)) / margin)
        assert exact <= Fraction(got) + Fraction(margin)
    assert below > 0, "float64 was never below the exact value: the margin would not be needed"
    assert worst < 1.0


def test_the_margin_is_at_least_the_gamma_formula():
    """On a known case, the margin is at least the γ_n terms it must contain: the phases' γ_{M+4}·Φ
    through B's Lipschitz constant 8, and the sums' γ_{2H}, per i, times C/N²."""
    W = np.full((4, 2, 3), 0.5)
    A = np.ones((3, 2))
    C, N, K = 1.0, 1000, 2
    Phi = 2 * 0.5 * N / (4 * C * math.sqrt(K))  # top-2 of |W| = 1.0 per (i, h)
    assert ti.phase_scale(W, K, C, N) == pytest.approx(Phi, rel=1e-15)
    a, I, H, M = readout_norm(A), 2, 3, 4
    floor = I * a * (8 * gamma(M + 4) * Phi + gamma(2 * H)) * C / N**2
    assert ti.rounding_margin(W, A, K, C, N) >= floor
    # and it is small: about 1e-12 of the certificate I·C·a/N² here.
    assert ti.rounding_margin(W, A, K, C, N) <= 1e-11 * I * C * a / N**2


def test_the_instance_bounds_carry_their_margin(monkeypatch):
    import verify.theorem.instance as vi

    teacher = sample_teacher(HyperteacherConfig(I=1, H=2, O=1, M=2, K=1, weights="khot", seed=0))
    net = build("shallow", teacher, 1e-2)
    margin = ti.rounding_margin(teacher.W, teacher.A, 1, net.C, net.N)
    lv = vi.levels_bound(net, teacher, seconds=5.0, progress=False)
    zk = vi.zk_bound(net, teacher, seconds=0.0, progress=False)
    assert lv.fp_margin == margin == zk.fp_margin > 0
    monkeypatch.setattr(vi, "rounding_margin", lambda *args: 0.0)
    lv0 = vi.levels_bound(net, teacher, seconds=5.0, progress=False)
    zk0 = vi.zk_bound(net, teacher, seconds=0.0, progress=False)
    assert lv.bound >= lv0.bound + margin and zk.bound >= zk0.bound + margin


def test_the_margin_is_the_documented_sum():
    """rounding_margin is exactly the module docstring's sum, written out term by term on a case
    with C ≠ 1, K > 1 and unequal |W|: the phases' γ_{M+K+16}·Φ through B's Lipschitz constant 8,
    each value's u·(16Φ + 64), the sums over h (γ_{2H+4}) and over i with the factor C/N²
    (γ_{I+3}), twice. A smaller term (a weaker claim) or a larger one changes it."""
    rng = np.random.default_rng(5)
    M, I, H, O, K, C, N = 5, 3, 4, 2, 2, 1.7, 123
    W, A = rng.normal(size=(M, I, H)), rng.normal(size=(H, O))
    u = 2.0**-53
    Phi = ti.phase_scale(W, K, C, N)
    a = readout_norm(A)
    per_value = 8 * gamma(M + K + 16) * Phi + u * (16 * Phi + 64)
    per_i = a * (per_value + gamma(2 * H + 4))
    expected = 2 * (I * per_i + gamma(I + 3) * I * (a + per_i)) * C / N**2
    assert ti.rounding_margin(W, A, K, C, N) == pytest.approx(expected, rel=1e-15, abs=0.0)


# ─── the z-remainder and the checks at their boundaries ─────────────────────────────────────

def test_the_z_remainder_is_zero_on_a_task_and_above_lg_delta_exactly():
    """Problem.remainder is 0 for a single task and, on a cell, at least Lg·δ in exact (rational)
    arithmetic, δ the cell's half-width and Lg teacher_z_lipschitz's float64 value: the MILP's
    upper end adds it, so a remainder below that product would cut the bound."""
    from theory.lipschitz import teacher_z_lipschitz

    teacher = sample_teacher(HyperteacherConfig(I=2, H=3, O=2, M=3, K=2, weights="continuous", seed=1))
    prob = es.Problem(build("shallow", teacher, 1e-1), teacher)
    S = np.array([0, 2])
    assert (prob.remainder(S, np.array([0.3, 0.7]), np.array([0.3, 0.7])) == 0.0).all()
    rng = np.random.default_rng(6)
    Ws, bs = es.teacher_arrays(teacher)
    for _ in range(200):
        lo = rng.uniform(0, 1, 2)
        hi = np.minimum(lo + rng.uniform(0, 0.5, 2) * 10.0 ** -rng.integers(0, 6), 1.0)
        R = prob.remainder(S, lo, hi)
        Lg = teacher_z_lipschitz(Ws, bs, teacher.A, teacher.K, S, lo, hi)
        delta = max(Fraction(h) - Fraction(v) for h, v in zip(hi, lo, strict=True)) / 2
        for o in range(teacher.O):
            assert Fraction(R[o]) >= Fraction(Lg[o]) * delta


def test_the_checks_hold_at_their_boundaries():
    """judge and certified at exact equality, and with a floor that matters: each check is
    `≤` with MILP_TOL and the floor on the side the docstrings say, and the check keys stay."""
    from constructions.base import EXACT_TOL, Claim

    claim = Claim(eps=0.1, certificate=0.05, floor=1e-6)
    upper, floor = 0.04, 1e-6
    at = upper + es.MILP_TOL + floor
    checks = es.judge(claim, dict(lower=0.05 + floor, upper=upper), at, floor)
    assert checks == {"measured <= exact upper": True, "exact lower <= certificate": True}
    # The floor counts for the network: half of it past the solver's end still agrees.
    assert es.judge(claim, dict(lower=0.0, upper=upper), upper + es.MILP_TOL + 0.5 * floor, floor)[
        "measured <= exact upper"]
    lower_key = "exact lower <= certificate"
    assert es.judge(claim, dict(lower=0.05 + 0.5 * floor, upper=upper), 0.0, floor)[lower_key]
    exact = Claim(eps=0.1, certificate=0.0, floor=1e-13, exact=True)
    key = f"exact upper <= {EXACT_TOL:g} + MILP_TOL (exact)"
    assert es.judge(exact, dict(lower=0.0, upper=EXACT_TOL + es.MILP_TOL), 0.0, 1e-13)[key]
    cert = 0.25 + es.MILP_TOL
    assert es.certified(cert - es.MILP_TOL, cert) == (cert - es.MILP_TOL + es.MILP_TOL <= cert)
    assert es.certified(0.25, 0.25 + es.MILP_TOL)


def test_a_milp_with_one_binary_and_no_dual_bound_gives_inf(monkeypatch):
    """One unstable ReLU (one binary): without a dual bound its answer is no proof either."""
    import scipy.optimize

    milp = es.Milp([[(np.array([[1.0]]), np.array([0.0])), (np.array([[1.0]]), np.array([0.0]))]], [1.0],
                   np.array([-1.0]), np.array([1.0]))
    assert milp.binaries == 1
    real = scipy.optimize.milp

    def no_dual(*args, **kwargs):
        res = real(*args, **kwargs)
        res.mip_dual_bound = None
        return res

    monkeypatch.setattr(scipy.optimize, "milp", no_dual)
    _, _, upper, proven = milp.solve(0, 1.0, 5.0)
    assert upper == math.inf and not proven


def test_a_cells_bounds_hold_for_both_signs():
    """solve_cell bounds max of σ·(f − g)_o for σ = +1 and −1 separately: each is above that
    signed error on a grid of x, on every level task of an instance whose errors take both signs."""
    teacher = sample_teacher(HyperteacherConfig(I=1, H=2, O=2, M=2, K=1, weights="khot", seed=0))
    net = build("shallow", teacher, 0.2)
    prob = es.Problem(net, teacher)
    xs = np.linspace(-1.0, 1.0, 2001)
    negative_side = False
    for m in range(teacher.M):
        S, w = np.array([m]), np.array([1.0])
        bounds, _, _ = prob.solve_cell(S, w, w, np.full(2 * teacher.O, np.inf), -np.inf)
        z = prob.z_of(S, w)
        diff = []
        for x in xs:
            v = np.concatenate([z, [x]])
            for W, b in prob.layers[:-1]:
                v = np.maximum(W @ v + b, 0.0)
            h = np.array([x])
            for W, b in es.g_at(teacher, z)[:-1]:
                h = np.maximum(W @ h + b, 0.0)
            diff.append(prob.layers[-1][0] @ v + prob.layers[-1][1] - teacher.A.T @ h)
        diff = np.array(diff)  # (x, O)
        for o in range(teacher.O):
            assert diff[:, o].max() <= bounds[2 * o] + es.MILP_TOL
            assert -diff[:, o].min() <= bounds[2 * o + 1] + es.MILP_TOL
            negative_side |= -diff[:, o].min() > diff[:, o].max() + 10 * es.MILP_TOL
    assert negative_side, "no output's error was larger on its negative side: the test would not bite"


def test_affine_interval_pads_by_gamma_of_its_columns():
    """The pad is γ_{2n+4}·Σ|terms| with n = W's columns (each end sums 2n + 1 terms), also for a
    wide W with one row."""
    rng = np.random.default_rng(7)
    n = 50
    W, b = rng.normal(size=(1, n)), rng.normal(size=1)
    lo, hi = -rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    pos, neg = np.maximum(W, 0.0), np.minimum(W, 0.0)
    plain_hi = pos @ hi + neg @ lo + b
    size = pos @ np.abs(hi) - neg @ np.abs(lo) + np.abs(b)
    got_lo, got_hi = affine_interval(W, b, lo, hi)
    assert got_hi[0] - plain_hi[0] >= 0.99 * gamma(2 * n + 4) * size[0]


# ─── teacher_z_lipschitz against its formula in rationals ───────────────────────────────────

def lg_in_rationals(Ws, bs, A, K, S, z_lo, z_hi) -> list[Fraction]:
    """theory/lipschitz.py's docstring formula, exactly: interval q's, corner sums for the
    pre-activations, s_l[h] = Σ_m (max|q_mh| + z_hi,m·|W_m[:, h]|·s_{l-1}) / √K masked by
    pre_hi > 0, Lg_o = Σ_h |A_ho| s_L[h]. K is 1 or 4, so √K is rational."""
    rK, F = {1: 1, 4: 2}[K], Fraction
    zl, zh = [F(v) / rK for v in z_lo], [F(v) / rK for v in z_hi]
    n_in = Ws[0].shape[1]
    h_lo, h_hi, s = [F(-1)] * n_in, [F(1)] * n_in, [F(0)] * n_in
    for W, b in zip(Ws, bs, strict=True):
        H = W.shape[2]
        pre_lo, pre_hi, s_next = [F(0)] * H, [F(0)] * H, [F(0)] * H
        for j, m in enumerate(S):
            for h in range(H):
                w = [F(v) for v in W[m, :, h]]
                q_lo = F(b[m, h]) + sum(c * (h_lo[i] if c > 0 else h_hi[i]) for i, c in enumerate(w))
                q_hi = F(b[m, h]) + sum(c * (h_hi[i] if c > 0 else h_lo[i]) for i, c in enumerate(w))
                corners = [q_lo * zl[j], q_lo * zh[j], q_hi * zl[j], q_hi * zh[j]]
                pre_lo[h] += min(corners)
                pre_hi[h] += max(corners)
                moved = sum(abs(c) * s[i] for i, c in enumerate(w))
                s_next[h] += max(abs(q_lo), abs(q_hi)) / rK + zh[j] * moved
        s = [s_next[h] if pre_hi[h] > 0 else F(0) for h in range(H)]
        h_lo, h_hi = [max(v, F(0)) for v in pre_lo], [max(v, F(0)) for v in pre_hi]
    return [sum(abs(F(A[h, o])) * s[h] for h in range(len(s))) for o in range(A.shape[1])]


def documented_n_ops(Ws, A, S) -> int:
    """The roundings teacher_z_lipschitz's comment counts: H_{l-1} + 2|S| + 6 per layer, H + 1."""
    return sum(W.shape[1] + 2 * len(S) + 6 for W in Ws) + A.shape[0] + 1


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_teacher_z_lipschitz_is_its_formula_padded_by_its_rounding(layers):
    """Lg ≥ the formula's exact value × (1 − γ_n)(1 + γ_{n+2}) (s is within γ_n of its exact
    value, then the readout is scaled up by 1 + γ_{n+2}; wider float intervals only add), so a
    smaller Lg, or a smaller factor, is caught; and Lg ≤ exact·(1 + 1e-12): the pads are
    γ_n ≤ 1e-14 of the same sums, so a constant that grows with the mutation is caught too."""
    from theory.lipschitz import teacher_z_lipschitz

    rng = np.random.default_rng(layers)
    for K in (1, 4):
        for _ in range(20):
            M, n_in, H, O = 4, 2, 3, 2
            widths = [n_in] + [H] * layers
            Ws = [rng.uniform(-1, 1, (M, widths[l], widths[l + 1])) for l in range(layers)]
            bs = [rng.uniform(-1, 1, (M, H)) for _ in range(layers)]
            A = rng.uniform(-1, 1, (H, O))
            S = np.sort(rng.choice(M, size=min(K, int(rng.integers(1, 4))), replace=False))
            z_lo = rng.uniform(0, 1, len(S))
            z_hi = np.minimum(z_lo + rng.uniform(0, 0.5, len(S)), 1.0)
            Lg = teacher_z_lipschitz(Ws, bs, A, K, S, z_lo, z_hi)
            exact = lg_in_rationals(Ws, bs, A, K, S, z_lo, z_hi)
            n = documented_n_ops(Ws, A, S)
            scale = (1 - Fraction(gamma(n))) * (1 + Fraction(gamma(n + 2)))
            for o in range(O):
                assert Fraction(Lg[o]) >= exact[o] * scale
                # + one ulp of 0: the final nextafter moves an exact 0 to the least subnormal.
                assert Fraction(Lg[o]) <= exact[o] * (1 + Fraction(1, 10**12)) + Fraction(5e-324)


def test_teacher_z_lipschitz_pads_by_the_counts_its_comment_derives(monkeypatch):
    """The γ's it asks for: γ_{2|S|+6} per layer for the pre-activations, and last
    γ_{n+2} with n the documented count of roundings."""
    import theory.lipschitz as tl

    calls = []
    monkeypatch.setattr(tl, "gamma", lambda n, *a: calls.append(n) or gamma(n, *a))
    rng = np.random.default_rng(0)
    M, n_in, H, O = 4, 2, 3, 2
    for layers, S in ((1, np.array([0, 3])), (2, np.array([0, 1, 2])), (3, np.array([0, 1, 2, 3]))):
        widths = [n_in] + [H] * layers
        Ws = [rng.uniform(-1, 1, (M, widths[l], widths[l + 1])) for l in range(layers)]
        bs = [rng.uniform(-1, 1, (M, H)) for _ in range(layers)]
        A = rng.uniform(-1, 1, (H, O))
        calls.clear()
        tl.teacher_z_lipschitz(Ws, bs, A, 4, S, np.full(len(S), 0.25), np.full(len(S), 0.75))
        affine = [2 * W.shape[1] + 4 for W in Ws]  # affine_interval's own pads
        assert 2 * len(S) + 6 not in affine and calls.count(2 * len(S) + 6) == layers
        assert calls[-1] == documented_n_ops(Ws, A, S) + 2


def test_teacher_z_lipschitz_keeps_a_unit_live_within_its_pad():
    """A unit whose exact pre-activation bound is 2⁻⁵⁴ > 0 (q = 1 at z̃ = 0.25 + 2⁻⁵⁴, q = −1
    at z̃ = 0.25) is live: its s counts. Moving the upper end inward by the pad kills it."""
    from theory.lipschitz import teacher_z_lipschitz

    Ws = [np.zeros((2, 1, 1))]
    bs = [np.array([[1.0], [-1.0]])]
    A = np.ones((1, 1))
    z = np.array([0.5 + 2.0**-53, 0.5])
    Lg = teacher_z_lipschitz(Ws, bs, A, 4, np.array([0, 1]), z, z)
    exact = lg_in_rationals(Ws, bs, A, 4, np.array([0, 1]), z, z)
    assert exact[0] == 1 and Fraction(Lg[0]) >= exact[0]
