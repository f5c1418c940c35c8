"""verify.sgd --certify (issue 46, "Where it shows"): a trained MLP student's searched sup error
(a lower bound) beside verify.certify's bracket [lower, upper], upper proven; the flags are runtime
settings, so no stored run's key changes, and verify.certify is not part of the run fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verify.cli import UsageError
from verify.learning import sgd_program as sgd
from verify.learning.records import lookup
from verify.learning.run_config import SgdRun
from verify.studies import provenance
from verify.studies.store import RunStore, config_key

TINY = ["--M", "4", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--shapes", "custom",
        "--widths", "8", "8", "--steps", "200", "--eval-tasks", "32", "--eval-samples", "4",
        "--extra-modules", "0", "--threads", "1", "--no-progress"]
RESULTS = Path(sgd.__file__).resolve().parents[1] / "studies" / "results"
# The rounding slack allowed between two float64 evaluations of the same error (the search's and
# certify's lower end are measured by different code paths; upper carries a proven margin already).
SLACK = 1e-9


def main_json(argv, capsys) -> tuple[int, dict]:
    code = sgd.main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture(scope="module")
def certified_run():
    """One tiny run with --certify (20 s budget; it stops at the ratio in well under a second)."""
    run = sgd.parse_args([*TINY, "--certify", "--certify-seconds", "20"])
    return sgd.run(run)


def test_the_bracket_holds_the_searched_sup_error_and_is_printed_beside_it(certified_run):
    r = certified_run
    (row,) = [row for row in r["rows"] if row["network"] == "sgd custom"]
    c = row["certified"]
    assert set(c) == {"settings", "held_out"}
    assert c["settings"] == dict(seconds=20.0, ratio=1.25, tasks="held_out", z="enumerate", goal="set",
                                 intermediate="auto", device="cpu")
    h = c["held_out"]
    searched = lookup(r["metrics"], "sgd custom", "held_out", "sup")
    assert 0 <= h["lower"] <= h["upper"]
    # Both lower ends are errors the network has at some point: the proven upper end is above both.
    assert h["upper"] >= max(h["lower"], searched) - SLACK
    assert h["supports"] == r["split"]["n_test"]
    assert h["tasks"] == h["supports"] * 6**2  # discrete weights: 6 levels on each of K = 2 modules
    assert h["stop"] in ("ratio", "seconds") and h["nodes"] >= h["tasks"]
    if h["stop"] == "ratio":
        assert h["upper"] <= 1.25 * h["lower"] * (1 + 1e-12) and h["open_boxes"] == 0
    assert len(h["per_support"]) == h["supports"]
    assert all(p["upper"] <= h["upper"] and p["lower"] <= h["lower"] for p in h["per_support"])
    # The construction's row is not a student: it gets no bracket.
    assert "certified" not in r["rows"][0]
    text = sgd.format_report(r)
    (line,) = [t for t in text.splitlines() if "certified in" in t]
    assert line.startswith("sgd custom: held_out sup error certified in [")
    assert f"searched {searched:.3e}" in line and f"stopped by {h['stop']}" in line


def test_certify_changes_no_number_of_the_run(certified_run):
    """The scores are taken before the certification and do not depend on it."""
    plain = sgd.run(sgd.parse_args(TINY))
    strip = [{k: v for k, v in row.items() if k not in ("certified", "train_seconds")}
             for row in certified_run["rows"]]
    assert strip == [{k: v for k, v in row.items() if k != "train_seconds"} for row in plain["rows"]]
    assert certified_run["metrics"] == plain["metrics"]


def test_a_budget_of_zero_seconds_leaves_an_open_bracket_and_the_run_exits_0(capsys):
    """The budgeted branch: the roots are bounded, then the budget is spent (ratio 1 is never met
    by a bracket with room in it); the bracket is sound (upper ≥ lower) and the run ends with 0."""
    code, r = main_json([*TINY, "--certify", "--certify-seconds", "0", "--certify-ratio", "1",
                         "--certify-tasks", "all"], capsys)
    assert code == 0
    (row,) = [row for row in r["rows"] if row["network"] == "sgd custom"]
    for side in ("held_out", "train"):
        c = row["certified"][side]
        assert c["stop"] == "seconds" and c["open_boxes"] > 0
        assert c["nodes"] == c["tasks"]  # every task's first box is bounded, nothing else
        assert 0 <= c["lower"] <= c["upper"] and c["ratio"] > 1
        searched = lookup(r["metrics"], "sgd custom", side, "sup")
        assert c["upper"] >= max(c["lower"], searched) - SLACK
    assert row["certified"]["train"]["supports"] == r["split"]["n_train"]


@pytest.mark.parametrize("extra, words", [
    (["--family", "preference", "--F", "4", "--widths", "4"], "only hyperteacher runs"),
    (["--student", "hypernetwork", "--d-ffw", "8"], "only MLP students"),
    (["--student", "transformer", "--d-model", "8", "--n-heads", "2", "--n-layers", "1", "--d-ffw", "8"],
     "only MLP students"),
    (["--weights", "continuous", "--shapes", "custom", "--widths", "4"], "--weights continuous"),
    (["--encoding", "fewshot", "--shapes", "custom", "--widths", "4"], "random samples"),
    (["--encoding", "tokens", "--shapes", "custom", "--widths", "4", "--certify-z", "hull"],
     "linear encoding"),
])
def test_certify_out_of_scope_is_refused_in_one_line_before_any_work(extra, words, tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.setattr(sgd, "prepare", lambda *a, **k: pytest.fail("work began"))
    argv = ["--M", "4", "--K", "2", "--steps", "2", *extra, "--certify", "--save", str(tmp_path / "out")]
    with pytest.raises(UsageError, match=words):
        sgd.parse_args(argv)
    assert sgd.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err
    assert not (tmp_path / "out").exists()  # --save's folder is made only once nothing is wrong


@pytest.mark.parametrize("argv, words", [
    (["--certify-seconds", "5"], "--certify-seconds applies only with --certify"),
    (["--certify-z", "hull"], "--certify-z applies only with --certify"),
    (["--certify", "--certify-ratio", "0.5"], "ratio ≥ 1"),
])
def test_certify_settings_are_checked(argv, words, capsys):
    assert sgd.main([*TINY, *argv]) == 2
    assert words in capsys.readouterr().err


# ------------------------------------------------------------------ keys and fingerprints

def test_certify_flags_are_runtime_settings_out_of_the_key():
    plain = sgd.parse_args(TINY)
    certified = sgd.parse_args([*TINY, "--certify", "--certify-seconds", "3", "--certify-ratio", "2",
                                "--certify-tasks", "all", "--certify-z", "hull"])
    assert certified.runtime.certify and certified == plain
    assert config_key(sgd.run_config(certified)) == config_key(sgd.run_config(plain))
    assert set(sgd.RUNTIME) >= {"certify", "certify_seconds", "certify_ratio", "certify_tasks", "certify_z"}
    from verify.studies.grids import program_parameters

    assert not {p for p in program_parameters("verify.sgd") if p.startswith("certify")}  # no study sets them


@pytest.mark.parametrize("study", ["scaling-data", "size-matched"])
def test_stored_keys_are_unchanged(study):
    """Every stored run of a committed store (read only): the run its key stands for keys to the
    same key again, with --certify's runtime on or off; and the study's expansion gives the keys."""
    from verify.learning.run_config import Runtime
    from verify.studies.grids import expand

    store = RunStore(RESULTS / study / "cpu" / "study.sqlite", readonly=True)
    rows = store.rows()
    assert rows
    on = Runtime(certify=True, certify_seconds=1.0, certify_ratio=2.0, certify_tasks="all", certify_z="hull")
    for row in rows:
        for runtime in (None, on):
            run = SgdRun.from_key(row["config"], runtime)
            assert config_key(sgd.run_config(run)) == row["key"], row["config"]
    _, runs = expand(study, "cpu")
    assert {run.key for run in runs} <= {row["key"] for row in rows}


def test_verify_certify_is_not_part_of_the_run_fingerprint():
    """--certify imports verify.certify (inside a function), but a certify edit must not mark every
    store stale: no verify.certify module is among the modules a run rests on. A root inside the
    package still rests on it (a figure's cache keyed on verify.certify's code)."""
    for program in ("verify.sgd", "verify.kernel"):
        modules = provenance.code_modules(program)
        assert "verify.learning.sgd_program" in modules
        assert not [m for m in modules if m == "verify.certify" or m.startswith("verify.certify.")], program
    inside = provenance.modules_from("verify.certify.command")
    assert {"verify.certify.command", "verify.certify.certify", "verify.certify.bab",
            "verify.certify.bounds"} <= set(inside)
    assert provenance.left_out("verify.certify.bab", "verify.sgd")
    assert not provenance.left_out("verify.certify.bab", "verify.certify.ladder")
    assert provenance.left_out("verify.cli", "verify.certify.command")


def test_certify_z_hull_with_khot_weights():
    """--certify-z hull: one joint box (weights, x) per support; with khot weights a support is one
    task. The run's own encoding and split are what verify.certify would rebuild from --save."""
    run = sgd.parse_args([*TINY, "--weights", "khot", "--certify", "--certify-z", "hull",
                          "--certify-seconds", "10"])
    r = sgd.run(run)
    (row,) = [row for row in r["rows"] if row["network"] == "sgd custom"]
    c = row["certified"]
    assert c["settings"]["z"] == "hull"
    h = c["held_out"]
    assert h["tasks"] == h["supports"] == r["split"]["n_test"]  # khot: one task a support
    searched = lookup(r["metrics"], "sgd custom", "held_out", "sup")
    assert 0 <= h["lower"] <= h["upper"] and h["upper"] >= max(h["lower"], searched) - SLACK
    assert all(set(p["z"]) == {1.0} for p in h["per_support"])
