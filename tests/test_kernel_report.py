"""The kernel-vs-sgd study's added grids and their report sections (issue 45;
verify.studies.kernel_report): the kernel limit along tasks, trained − kernel at equal data and the
lazy-to-rich axis. The study's smoke scale runs once into a temporary folder (about 30 runs, a few
minutes on a shared machine), and each section's numbers are checked against a hand computation
from the stored records: scipy.stats' t on the per-seed differences and Holm's step by hand."""

import csv
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from verify.studies import grids
from verify.studies import kernel_report as kr

STUDY = "kernel-vs-sgd"
LEVEL = 0.95


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The study's smoke scale, run serially: (its folder, the report's table, the done rows)."""
    from verify.studies import commands as driver
    from verify.studies.store import RunStore

    out = tmp_path_factory.mktemp("kernel-smoke")
    _, runs = grids.expand(STUDY, "smoke")
    summary = driver.run_study(STUDY, "smoke", out, engine="serial", progress=False)
    assert (summary["done"], summary["failed"]) == (len(runs), 0), summary
    table = kr.effects_table(STUDY, "smoke", out, keys={r.key for r in runs})
    with RunStore(out / "study.sqlite", readonly=True) as store:
        rows = [kr.run_row(r) for r in store.rows() if r["status"] == "done"]
    return out, table, rows


def _holm(p):
    """Holm's step-down adjusted p-values, written out: the i-th smallest times (m − i), made
    monotone, capped at 1."""
    order = np.argsort(p)
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def _t(diffs):
    """(mean, lo, hi, p) of a one-sample t on the differences, by scipy."""
    d = np.asarray(diffs, dtype=float)
    half = stats.t.ppf(0.5 + LEVEL / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half, stats.ttest_1samp(d, 0.0).pvalue


# ----------------------------------------------------------------------------- the study file

def test_the_added_grids_leave_the_main_grids_keys_as_they_were():
    """The cpu scale's main grid is the 90 runs the committed store holds, each still part of
    the study (none of an earlier grid); the added grids are 10 ladders along tasks (ntk and nngp,
    identity, to 2,048 tasks, seeds 1–5), 40 finite-data networks (seeds 1–5), 40 points of the α
    axis (8 α × 5 seeds) and the main grid's identity cells at seeds 4 and 5 (issue 45: at least
    5 seeds a cell; the kernel limits and networks the others pair with)."""
    from verify.studies.store import RunStore

    _, runs = grids.expand(STUDY, "cpu")
    kinds = {k: [r for r in runs if kr.kind_of(r.config) == k] for k in kr.KINDS}
    assert {k: len(v) for k, v in kinds.items()} == dict(main=110, ladder=10, finite=40, alpha=40)
    _, every_grid, program = grids.load_study(STUDY, "cpu")
    main_grid = every_grid[0]  # the scale's own grid; `also:` adds the others
    alone = {grids.run_of(STUDY, dict(zip(main_grid, v, strict=True)), program).key
             for v in itertools.product(*main_grid.values())}
    added = [r for r in kinds["main"] if r.key not in alone]
    assert alone < {r.key for r in kinds["main"]} and len(added) == 20
    # The kernel limits read no width, so their configurations hold none.
    cells = {(r.config["method"], r.config["encoding"], r.config["seed"], r.config.get("width"))
             for r in added}
    assert cells == {
        (m, "identity", s, w) for s in (4, 5) for m, widths in (("ntk", [None]), ("nngp", [None]),
                                                                 ("trained", [32, 64, 128, 256]),
                                                                 ("linearised", [32, 64, 128, 256]))
        for w in widths}
    with RunStore(grids.PACKAGED_RESULTS_DIR / STUDY / "cpu" / "study.sqlite", readonly=True) as store:
        stored = {r["key"] for r in store.rows() if r["status"] == "done"}
    # The 90 runs of the main grid are stored, and every stored run is one of the study's grid
    # (none of an earlier grid).
    assert alone <= stored <= {r.key for r in runs}
    ladder = kinds["ladder"]
    assert sorted(r.config["method"] for r in ladder) == ["nngp"] * 5 + ["ntk"] * 5
    assert {(r.config["encoding"], r.config["tasks"], r.config["max_tasks"], r.config["samples_per_task"])
            for r in ladder} == {("identity", 256, 2048, 16)}
    assert {r.config["seed"] for r in ladder} == {1, 2, 3, 4, 5}
    finite = kinds["finite"]
    assert {r.config["seed"] for r in finite} == {1, 2, 3, 4, 5}
    assert {(r.config["method"], r.config["width"]) for r in finite} == {
        (m, w) for m in ("trained", "linearised") for w in (32, 64, 128, 256)}
    assert {(r.config["tasks"], r.config["encoding"]) for r in finite} == {(256, "identity")}
    alphas = sorted({r.config["alpha"] for r in kinds["alpha"]})
    assert len(alphas) >= 6 and alphas[0] <= 0.1 and alphas[-1] >= 100
    assert {(r.config["method"], r.config["width"], r.config["encoding"]) for r in kinds["alpha"]} == {
        ("trained", 256, "identity")}
    assert {r.config["seed"] for r in kinds["alpha"]} == {1, 2, 3, 4, 5}  # issue 45: 5 seeds along α


def test_the_committed_report_says_which_of_the_added_grids_runs_are_planned_and_not_yet_run():
    """Per kind, the runs of the study's grid that the committed store does not hold are counted
    as planned, and each section with some says so with the command that makes them."""
    from verify.studies import staged
    from verify.studies.store import RunStore

    _, runs = grids.expand(STUDY, "cpu")
    with RunStore(grids.PACKAGED_RESULTS_DIR / STUDY / "cpu" / "study.sqlite", readonly=True) as store:
        done = {r["key"] for r in store.rows() if r["status"] == "done"}
    missing = {k: sum(1 for r in runs if kr.kind_of(r.config) == k and r.key not in done) for k in kr.KINDS}
    _, table = staged.study_table(STUDY, "cpu", grids.stored_out(STUDY, "cpu"))
    assert table["planned"] == missing
    text = kr.format_markdown(table)
    command = "(`python -m verify.study run kernel-vs-sgd --scale cpu`)"
    for kind in ("ladder", "finite", "alpha"):
        n = missing[kind]
        line = f"lanned, not yet run: {n} run{'s' if n != 1 else ''} {command}"
        assert (line in text) == (n > 0), (kind, n)
    compact = kr.format_compact(table)
    assert compact.count("planned, not yet run") == sum(missing[k] > 0 for k in ("ladder", "finite", "alpha"))


# ----------------------------------------------------------------------------- the smoke scale

def test_the_added_runs_never_mix_into_the_main_grids_cells(smoke):
    _, table, rows = smoke
    main = [r for r in rows if r["kind"] == "main"]
    assert len(main) == 12 and len(rows) == 30
    cells = {(c["method"], c["width"]): c for c in table["cells"]}
    assert cells[("ntk", None)]["seeds"] == [1, 2]  # not the ladders' ntk runs
    assert cells[("trained", 64)]["seeds"] == [1, 2]  # not the finite or α runs
    plain = [r["held_out_r2"] for r in main if (r["method"], r["width"]) == ("trained", 64)]
    assert cells[("trained", 64)]["held_out_r2"]["mean"] == pytest.approx(np.mean(plain))
    assert len(table["runs"]) == 12 and len(table["added_runs"]) == 18
    assert table["planned"] == dict.fromkeys(kr.KINDS, 0)


def test_the_limit_along_tasks_is_each_records_ladder_and_its_limit(smoke):
    _, table, rows = smoke
    along = {a["method"]: a for a in table["along_tasks"]}
    assert set(along) == {"ntk", "nngp"}
    for r in (r for r in rows if r["kind"] == "ladder"):
        q = next(q for q in along[r["method"]]["seeds"] if q["seed"] == r["seed"])
        assert [s["tasks"] for s in q["rungs"]] == [16, 32, 64, 128]
        assert [s["rows"] for s in q["rungs"]] == [128, 256, 512, 1024]
        assert [s["held_out_r2"] for s in q["rungs"]] == [s["held_out_r2"] for s in r["task_ladder"]]
        assert all(s["supports_covered"] <= s["training_supports"] for s in q["rungs"])
        assert q["kind"] == r["task_limit"]["kind"] and q["value"] == r["task_limit"]["value"]
        # Settled: the last doubling moved held-out R² by less than 0.005.
        rungs = [s["held_out_r2"] for s in r["task_ladder"]]
        assert (q["kind"] == "settled") == (abs(rungs[-1] - rungs[-2]) < 0.005)
        if q["kind"] == "extrapolated":  # 4 rungs: a profile interval around R∞
            assert q["interval"] == r["task_limit"]["fit"]["interval"]
            assert q["interval"][0] <= q["value"] <= q["interval"][1] <= 1.0
    for a in along.values():  # across seeds, by hand
        values = [q["value"] for q in a["seeds"]]
        mean, lo, hi, _ = _t(values)
        lim = a["limit"]
        assert lim["mean"] == pytest.approx(mean) and lim["t"]["lo"] == pytest.approx(lo)
        if all(q["kind"] == "settled" for q in a["seeds"]):
            assert lim["kind"] == "settled" and lim["interval"] == pytest.approx([lo, min(hi, 1.0)])
        else:
            ends = [q["interval"] for q in a["seeds"]]
            assert lim["kind"] == "extrapolated"
            assert lim["interval"] == pytest.approx([min(lo, *(e[0] for e in ends)),
                                                     min(1.0, max(hi, *(e[1] for e in ends)))])
    text = kr.format_markdown(table)
    assert "## The kernel limit along tasks" in text and "| ntk | identity | 1 | 128 | 1,024 |" in text
    assert ("**settled** at every seed" in text) or ("**extrapolated** (not every seed settled)" in text)


def test_the_online_network_against_the_limit_along_tasks_is_paired_and_holm_corrected(smoke):
    _, table, rows = smoke
    ntk = {q["seed"]: q for q in next(a for a in table["along_tasks"] if a["method"] == "ntk")["seeds"]}
    (entry,) = table["against_limit"]
    ps, p_upper = [], []
    for w in entry["widths"]:
        trained = {r["seed"]: r["held_out_r2"] for r in rows
                   if (r["kind"], r["method"], r["width"]) == ("main", "trained", w["width"])}
        mean, lo, hi, p = _t([trained[s] - ntk[s]["value"] for s in (1, 2)])
        got = w["minus_limit"]
        assert (got["mean"], got["lo"], got["hi"], got["p"]) == pytest.approx((mean, lo, hi, p))
        ps.append(p)
        upper = [trained[s] - (ntk[s]["interval"] or [None, None])[1] for s in (1, 2) if ntk[s]["interval"]]
        if len(upper) == 2:
            assert w["minus_upper"]["mean"] == pytest.approx(np.mean(upper))
            p_upper.append(_t(upper)[3])
    assert [w["minus_limit"]["p_holm"] for w in entry["widths"]] == pytest.approx(_holm(ps))
    if len(p_upper) == len(entry["widths"]):
        assert [w["minus_upper"]["p_holm"] for w in entry["widths"]] == pytest.approx(_holm(p_upper))


def test_trained_minus_kernel_at_equal_data_is_a_paired_t_over_seeds_holm_over_widths(smoke):
    _, table, rows = smoke
    ntk = {r["seed"]: r for r in rows if (r["kind"], r["method"]) == ("main", "ntk")}
    (entry,) = table["equal_data"]
    assert entry["unpaired"] == []
    for m in entry["methods"]:
        ps = []
        for w in m["widths"]:
            finite = {r["seed"]: r for r in rows
                      if (r["kind"], r["method"], r["width"]) == ("finite", m["method"], w["width"])}
            for s, r in finite.items():  # the very rows: the NTK fit of its seed has the set's rows
                assert r["rows"] == ntk[s]["rows"] == r["tasks"] * r["samples_per_task"] == 64 * 8
                assert r["finite"]["rows"] == 512 and r["finite"]["epochs"] == pytest.approx(200 / 8)
            mean, lo, hi, p = _t([finite[s]["held_out_r2"] - ntk[s]["held_out_r2"] for s in (1, 2)])
            # scipy's paired test on the two arms is the one-sample test on their differences
            paired = stats.ttest_rel([finite[s]["held_out_r2"] for s in (1, 2)],
                                     [ntk[s]["held_out_r2"] for s in (1, 2)]).pvalue
            assert p == pytest.approx(paired)
            t = w["minus_ntk"]
            assert (t["mean"], t["lo"], t["hi"], t["p"]) == pytest.approx((mean, lo, hi, p))
            ps.append(p)
        holm = _holm(ps)
        assert [w["minus_ntk"]["p_holm"] for w in m["widths"]] == pytest.approx(holm)
        for w, adjusted in zip(m["widths"], holm, strict=True):
            expected = ("not resolved" if adjusted >= 0.05 else
                        "above the limit" if w["minus_ntk"]["mean"] > 0 else "below the limit")
            assert w["minus_ntk"]["verdict"] == expected
    text = kr.format_markdown(table)
    assert "## Trained − kernel at equal data" in text
    assert "| identity | trained | 16 | 2 | 512 | 16/16 |" in text


def test_a_wrong_pairing_is_caught(smoke):
    """A finite-data network is paired only with the NTK limit of its own seed, --tasks,
    --samples-per-task and setup whose fit has the set's rows: another seed's, another --tasks'
    (a ladder's first rung at 16 tasks), one whose ladder along x per task settled early (fewer
    rows) or another teacher's are refused, and the network is named unpaired, not paired."""
    _, _, rows = smoke
    finite = [r for r in rows if r["kind"] == "finite"]
    ntk = [r for r in rows if (r["kind"], r["method"]) == ("main", "ntk")]
    pairs, unpaired = kr.equal_data_pairs(finite, ntk)
    assert len(pairs) == len(finite) and not unpaired
    assert all((n["seed"], n["tasks"]) == (k["seed"], k["tasks"]) for n, k in pairs)
    seed1 = [k for k in ntk if k["seed"] == 1]
    # Only seed 1's kernel: seed 2's networks stay unpaired (never paired with seed 1's kernel).
    pairs, unpaired = kr.equal_data_pairs(finite, seed1)
    assert {n["seed"] for n, _ in pairs} == {1} and {u["seed"] for u in unpaired} == {2}
    assert all("no NTK limit of its encoding, seed and setup" in u["why"] for u in unpaired)
    # Another --tasks (the kernel fits 16 tasks): unpaired, with why.
    other = [dict(k, tasks=16, rows=16 * 8) for k in ntk]
    pairs, unpaired = kr.equal_data_pairs(finite, other)
    assert not pairs and all("--tasks 64" in u["why"] for u in unpaired)
    # A ladder along x per task that settled at 4 x a task fits 256 rows, not the set's 512.
    early = [dict(k, rows=256) for k in ntk]
    pairs, unpaired = kr.equal_data_pairs(finite, early)
    assert not pairs and all("fits 256 rows, the set has 512" in u["why"] for u in unpaired)
    # Another teacher (another M) of the same seed: no pair.
    teacher = [dict(k, setup=(7,) + tuple(k["setup"][1:])) for k in ntk]
    assert kr.equal_data_pairs(finite, teacher)[0] == []
    # The ladder's own ntk runs (16 tasks a first rung) are never the equal-data kernel.
    ladders = [r for r in rows if (r["kind"], r["method"]) == ("ladder", "ntk")]
    assert kr.equal_data_pairs(finite, ladders)[0] == []
    # In the report: the unpaired network's section lists it, and its cell holds the paired seed only.
    mixed = [r for r in rows if not (r["kind"] == "main" and r["method"] == "ntk" and r["seed"] == 2)]
    entry = kr.analyse(mixed)["equal_data"][0]
    assert {u["seed"] for u in entry["unpaired"]} == {2}
    assert all(w["seeds"] == [1] and w["minus_ntk"]["p"] is None
               for m in entry["methods"] for w in m["widths"])


def test_the_lazy_to_rich_axis_per_alpha_is_paired_against_the_ntk_limit_holm_over_alpha(smoke):
    _, table, rows = smoke
    ntk = {r["seed"]: r["held_out_r2"] for r in rows if (r["kind"], r["method"]) == ("main", "ntk")}
    (entry,) = table["lazy_rich"]
    assert (entry["encoding"], entry["width"]) == ("identity", 64)
    assert [p["alpha"] for p in entry["alphas"]] == [0.1, 1.0, 100.0]
    ps, tost = [], []
    delta = kr.EQUIVALENCE_DELTA
    for p in entry["alphas"]:
        cell = {r["seed"]: r for r in rows if r["kind"] == "alpha" and r["alpha"] == p["alpha"]}
        for name in ("held_out_r2", "kernel_movement", "parameter_movement", "additivity",
                     "additivity_train"):
            assert p[name]["mean"] == pytest.approx(np.mean([cell[s][name] for s in (1, 2)]))
        mean, lo, hi, pv = _t([cell[s]["held_out_r2"] - ntk[s] for s in (1, 2)])
        t = p["minus_ntk"]
        assert (t["mean"], t["lo"], t["hi"], t["p"]) == pytest.approx((mean, lo, hi, pv))
        ps.append(pv)
        # The TOST on −log(1 − R²): the two one-sided t tests of |Δ| ≥ δ, the larger p.
        d = np.array([math.log(1 - ntk[s]) - math.log(1 - cell[s]["held_out_r2"]) for s in (1, 2)])
        se = d.std(ddof=1) / math.sqrt(len(d))
        p_tost = max(stats.t.sf((d.mean() + delta) / se, len(d) - 1),
                     stats.t.cdf((d.mean() - delta) / se, len(d) - 1))
        assert p["within_delta"]["p"] == pytest.approx(p_tost)
        assert p["within_delta"]["ratio"] == pytest.approx(math.exp(-d.mean()))
        tost.append(p_tost)
    assert [p["minus_ntk"]["p_holm"] for p in entry["alphas"]] == pytest.approx(_holm(ps))
    assert [p["within_delta"]["p_holm"] for p in entry["alphas"]] == pytest.approx(_holm(tost))
    assert entry["equivalent_at"] == [p["alpha"] for p, q in zip(entry["alphas"], _holm(tost), strict=True)
                                      if q < 0.05]
    # The lazy end moves its kernel and its parameters far less than the rich end.
    assert entry["alphas"][-1]["kernel_movement"]["mean"] < entry["alphas"][0]["kernel_movement"]["mean"]
    lazy, rich = entry["alphas"][-1], entry["alphas"][0]
    assert lazy["parameter_movement"]["mean"] < rich["parameter_movement"]["mean"]
    refs = entry["references"]
    for name, method in (("ntk", "ntk"), ("linearised", "linearised")):
        mine = [r["additivity"] for r in rows if (r["kind"], r["method"]) == ("main", method)
                and (method == "ntk" or r["width"] == 64)]
        assert refs[name]["additivity"]["mean"] == pytest.approx(np.mean(mine))
    text = kr.format_markdown(table)
    assert "## The lazy-to-rich axis" in text and "| 100 | 2 |" in text


def test_a_section_without_its_runs_says_they_are_planned(smoke):
    _, _, rows = smoke
    main = [r for r in rows if r["kind"] == "main"]
    table = dict(study=STUDY, scale="smoke", runs_done=len(main), runs_failed=0, runs=[], notes=[],
                 level=LEVEL,
                 **kr.analyse(main, dict(ladder=4, finite=8, alpha=6)))
    text = kr.format_markdown(table, runs=False)
    for n in (4, 8, 6):
        assert (f"planned, not yet run: {n} runs (`python -m verify.study run kernel-vs-sgd --scale "
                "smoke`)") in text
    assert "Feature learning is not claimed needed: that limit is not an asymptote" in text
    # With nothing planned either (another study), the section says there is none.
    bare = dict(table, **kr.analyse(main))
    assert "no ladders along tasks in this study's grid at this scale" in kr.format_markdown(bare)
    # Only the ladders missing: the other two sections stand, the ladder's says it is planned.
    some = [r for r in rows if r["kind"] != "ladder"]
    partial = dict(table, **kr.analyse(some, dict(ladder=4)))
    text = kr.format_markdown(partial)
    assert "planned, not yet run: 4 runs" in text and "| − NTK, same rows |" in text
    assert partial["against_limit"] == [] and "− limit along tasks" not in text


def test_the_compact_block_and_the_csv_carry_every_section_and_run(smoke, tmp_path):
    out, table, _ = smoke
    compact = kr.format_compact(table)
    for line in ("- The ntk limit along tasks (identity, top rung 128 tasks, 1,024 rows):",
                 "- At equal data (identity, the kernel's own rows), trained − NTK per width",
                 "- Along α (identity, ×64;"):
        assert line in compact
    kr.write_table(table, tmp_path)
    with open(tmp_path / "effects.csv") as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == 30 and {line["kind"] for line in lines} == set(kr.KINDS)
    assert list(lines[0]) == list(kr.CSV_COLUMNS)
    assert kr.export_csv(out, tmp_path / "export.csv") == 30
    with open(tmp_path / "export.csv") as f:
        exported = list(csv.DictReader(f))
    assert "additivity" in exported[0] and all(line["additivity"] for line in exported)


# ----------------------------------------------------------------------------- the claim, planted

def _ladder_row(seed, value, interval, kind="extrapolated", setup=("s",)):
    fit = dict(interval=interval, upper_at_bound=interval is not None and interval[1] >= 1.0, a=0.1, b=0.5)
    return dict(key=f"ladder-{seed}", kind="ladder", encoding="identity", method="ntk", width=None, seed=seed,
                held_out_r2=value, train_r2=value, setup=setup, task_ladder=[],
                task_limit=dict(kind=kind, value=value, last_change=0.01, fit=fit))


def _trained(seed, width, value, setup=("s",)):
    return dict(key=f"t-{seed}-{width}", kind="main", encoding="identity", method="trained", width=width,
                seed=seed, held_out_r2=value, train_r2=value, kernel_movement=None, setup=setup)


def test_feature_learning_is_said_needed_only_above_the_upper_end_of_the_limits_interval():
    limits = [(1, 0.90, [0.88, 0.92]), (2, 0.91, [0.89, 0.93]), (3, 0.89, [0.87, 0.91])]
    ladders = [_ladder_row(s, v, iv) for s, v, iv in limits]
    above = ladders + [_trained(s, 256, v + 0.06 + 0.001 * s) for s, v, _ in limits]
    table = dict(study="planted", scale="cpu", runs_done=6, runs_failed=0, runs=[], notes=[], level=LEVEL,
                 **kr.analyse(above))
    (w,) = table["against_limit"][0]["widths"]
    assert w["minus_upper"]["verdict"] == "above its interval"
    assert "there feature learning is needed" in kr.conclusion(table)
    # Above the limit's value but not its interval's upper end: not claimed.
    near = ladders + [_trained(s, 256, v + 0.015 + 0.001 * s) for s, v, _ in limits]
    table = dict(table, **kr.analyse(near))
    (w,) = table["against_limit"][0]["widths"]
    assert w["minus_limit"]["verdict"] == "above the limit"
    assert w["minus_upper"]["verdict"] != "above its interval"
    assert "Feature learning is not claimed needed" in kr.conclusion(table)
    # An upper end at the bound R² = 1 bounds nothing: never above it.
    unbounded = [_ladder_row(s, v, [iv[0], 1.0]) for s, v, iv in limits]
    table = dict(table, **kr.analyse(unbounded + [_trained(s, 256, 0.99) for s, _, _ in limits]))
    assert table["along_tasks"][0]["limit"]["upper_at_bound"] is True
    assert "feature learning is needed" not in kr.conclusion(table).lower()
    # A trained run of another setup is not paired with the limit.
    other = ladders + [_trained(s, 256, 0.99, setup=("other",)) for s, _, _ in limits]
    assert kr.analyse(other)["against_limit"][0]["widths"][0]["minus_limit"]["n"] == 0


def test_the_limit_across_seeds_is_settled_only_when_every_seed_settled():
    settled = [kr._seed_limit(_ladder_row(s, v, None, kind="settled"))
               for s, v in ((1, 0.90), (2, 0.92), (3, 0.91))]
    lim = kr.limit_across_seeds(settled)
    mean, lo, hi, _ = _t([0.90, 0.92, 0.91])
    assert lim["kind"] == "settled" and lim["mean"] == pytest.approx(mean)
    assert lim["interval"] == pytest.approx([lo, hi])
    mixed = settled[:2] + [kr._seed_limit(_ladder_row(3, 0.95, [0.90, 0.99]))]
    lim = kr.limit_across_seeds(mixed)
    mean, lo, hi, _ = _t([0.90, 0.92, 0.95])
    assert lim["kind"] == "extrapolated" and lim["profile"] == pytest.approx([0.90, 0.99])
    assert lim["interval"] == pytest.approx([min(lo, 0.90), min(1.0, max(hi, 0.99))])
    assert "**extrapolated**" in kr.limit_summary(lim) and "**settled**" in kr.limit_summary(
        kr.limit_across_seeds(settled))
    assert kr.limit_across_seeds([kr._seed_limit(dict(_ladder_row(1, None, None), task_limit=dict(
        kind="unresolved", value=None, last_change=0.1)))])["kind"] == "unresolved"
