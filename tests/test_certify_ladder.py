"""verify.certify.ladder and figure 14: certified students against width, beside the construction
(issue 46).

- the smoke ladder (train, save, certify; seconds): every certified upper end is above both lower
  bounds (the lower end found and the run's own searched sup error), and the files are written;
- a budget too small for the bracket to close is reported open (stop "seconds"), still sound, and
  the figure builds from that output and marks it;
- the construction's side: its N is the largest that fits the student's units, its ε the builder's
  certificate at that N, and a wrong number (its ε at another unit count) is caught;
- the command line: the report, and bad input exit 2 (tests/test_promises.py has more rows).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from verify.certify import ladder as ladder_module
from verify.certify.ladder import SMOKE, check_rows, construction_at, read_ladder, run_ladder

UPPER_CHECK = "every certified upper end >= the lower end found and the run's searched sup error"
CONSTRUCTION_CHECK = "the construction's eps is I*C*a/N^2 at the largest N whose units fit the student's"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder")
    return out, run_ladder(SMOKE, out, progress=False)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory):
    """One network whose search gets far too little time for its bracket to close (ratio 1: only
    an exact bracket would close it)."""
    out = tmp_path_factory.mktemp("budgeted")
    return out, run_ladder(replace(SMOKE, widths=(8,), ratio=1.0, seconds=0.02), out, progress=False)


def test_the_smoke_ladder_brackets_every_network_above_both_lower_bounds(smoke):
    out, report = smoke
    rows = report["rows"]
    assert [(r["width"], r["seed"]) for r in rows] == [(w, s) for w in SMOKE.widths for s in SMOKE.seeds]
    for r in rows:
        assert r["upper"] >= max(r["lower"], r["searched_sup"]), r
        assert r["lower"] > 0 and r["nodes"] >= r["tasks"]  # every task's root box was bounded
        assert r["hidden_units"] == SMOKE.depth * r["width"]
        assert r["closed"] == (r["ratio"] <= SMOKE.ratio)
    assert all(report["checks"].values()) and report["complete"]
    assert read_ladder(out)["rows"] == json.loads(json.dumps(rows))
    for r in rows:  # each run can be certified again by the command line
        assert {p.name for p in (out / r["run"]).iterdir()} == {"report.json", "sgd_custom.pt"}


def test_an_upper_end_below_a_lower_bound_is_caught(smoke):
    rows = copy.deepcopy(smoke[1]["rows"])
    rows[0]["searched_sup"] = rows[0]["upper"] * 1.01  # the run found an error above the "proof"
    assert not check_rows(rows)[UPPER_CHECK]
    rows = copy.deepcopy(smoke[1]["rows"])
    rows[-1]["lower"] = rows[-1]["upper"] * 1.5
    assert not check_rows(rows)[UPPER_CHECK]


def test_a_budget_too_small_to_close_the_bracket_is_reported_open_and_sound(budgeted):
    out, report = budgeted
    (r,) = report["rows"]
    assert r["stop"] == "seconds" and not r["closed"] and r["ratio"] > 1.0
    assert r["upper"] >= max(r["lower"], r["searched_sup"]) and all(report["checks"].values())
    text = ladder_module.format_report(report)
    assert "OPEN" in text and "closed" not in text.split("\n", 2)[2]


def test_the_figure_builds_from_a_ladder_with_an_open_bracket(budgeted, tmp_path, monkeypatch):
    from paper_figures import common, fig14_certified

    out, report = budgeted
    monkeypatch.setattr(fig14_certified, "LADDER_DIR", out)
    result = fig14_certified.make(tmp_path / "fig", quick=False, progress=False)
    assert result.passed and result.meta["scale"] == "cpu"
    assert [p.name for p in result.files] == [f"fig14_certified.{s}" for s in ("png", "pdf", "csv", "json")]
    (net,) = result.meta["networks"]
    assert not net["closed"]
    ax = result.figure.axes[0]
    assert "open at the budget (1 of 1)" in ax.get_title()
    bars = [c for c in ax.collections if (c.get_gid() or "").startswith("bracket")]
    assert [c.get_gid() for c in bars] == [f"bracket open seed {net['seed']}"]  # the open bracket's bar
    assert any("open bracket" in t.get_text() for t in result.figure.axes[1].get_legend().get_texts())
    # the drawn points are the data file's
    rows, meta = common.load_data(tmp_path / "fig", fig14_certified.NAME)
    upper = [r for r in rows if r["series"].startswith("upper")]
    assert [r["y"] for r in upper] == [common.rounded(net["upper"])] and upper[0]["closed"] is False
    assert fig14_certified.redraw(rows, meta) is not None


def test_the_quick_figure_is_marked_smoke_data(smoke, tmp_path, monkeypatch):
    from paper_figures import fig14_certified

    calls = []
    monkeypatch.setattr(ladder_module, "run_ladder",
                        lambda ladder, out, **kw: calls.append(ladder) or smoke[1])
    result = fig14_certified.make(tmp_path, quick=True, progress=False)
    assert result.preview and result.meta["scale"] == "smoke" and result.passed
    assert "SMOKE DATA" in result.figure.axes[0].get_title() and calls == [SMOKE]


def test_the_figure_refuses_data_whose_construction_is_at_the_wrong_size(smoke, tmp_path, monkeypatch):
    """A ladder whose construction's ε was taken at twice the student's units: the figure's check fails."""
    from paper_figures import fig14_certified
    from verify.certify.saved import load_run

    out, report = smoke
    bad = copy.deepcopy(report)
    r = bad["rows"][-1]
    teacher = load_run(out / r["run"]).teacher
    r["construction"] = construction_at(teacher, 2 * r["hidden_units"])
    assert r["construction"]["N"] > report["rows"][-1]["construction"]["N"]  # a bigger network
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "ladder.json").write_text(json.dumps(bad))
    monkeypatch.setattr(fig14_certified, "LADDER_DIR", folder)
    result = fig14_certified.make(tmp_path / "fig", quick=False, progress=False)
    assert result.checks == {UPPER_CHECK: True, CONSTRUCTION_CHECK: False}


def test_a_wrong_construction_number_is_caught(smoke):
    rows = smoke[1]["rows"]
    assert check_rows(rows)[CONSTRUCTION_CHECK]
    for mutate in (
        lambda c: c.update(N=c["N"] + 1),  # one knot more than fits
        lambda c: c.update(eps=c["eps"] * 1.001),  # the certificate misread
        lambda c: c.update(a=c["a"] * 2),  # another teacher's readout norm
        lambda c: c.update(hidden_units=c["hidden_units"] - 1),  # the count misread
    ):
        bad = copy.deepcopy(rows)
        with_construction = [r for r in bad if r["construction"]["N"]]
        assert with_construction
        mutate(with_construction[-1]["construction"])
        assert not check_rows(bad)[CONSTRUCTION_CHECK]
    bad = copy.deepcopy(rows)  # a construction claimed where none is that small
    none = [r for r in bad if not r["construction"]["N"]]
    assert none
    none[0]["construction"].update(N=1, hidden_units=none[0]["construction"]["min_units"], eps=1.0)
    assert not check_rows(bad)[CONSTRUCTION_CHECK]


def test_who_is_ahead_is_said_only_where_both_sides_prove_it():
    from verify.certify.ladder import compare

    row = dict(lower=1.0, upper=2.0, construction=dict(eps=None))
    assert compare(row) == "none"
    for eps, said in ((2.5, "student"), (0.5, "construction"), (1.5, "undecided"), (1.0, "undecided"),
                      (2.0, "undecided")):
        assert compare(row | dict(construction=dict(eps=eps))) == said, eps


def test_the_construction_at_a_unit_count_is_the_builders_network():
    from constructions.shallow import build_shallow
    from constructions.tasks.hyperteacher import HyperteacherConfig, sample_hyperteacher

    teacher = sample_hyperteacher(HyperteacherConfig(I=4, H=4, O=4, M=8, K=2, seed=1))
    assert construction_at(teacher, 32)["N"] == 0 and construction_at(teacher, 32)["eps"] is None
    assert construction_at(teacher, 43)["N"] == 0 and construction_at(teacher, 44)["N"] == 1
    for units, N in ((64, 1), (128, 3), (256, 7)):
        c = construction_at(teacher, units)
        assert c["N"] == N and c["hidden_units"] == 32 * N + 12 <= units < 32 * (N + 1) + 12
        built = build_shallow(teacher, c["eps"])  # the network the theorem builds for that ε
        assert built.N == N and built.hidden_units().total == c["hidden_units"]
        assert built.certificate() == c["eps"]


def test_the_command_line_prints_the_table_and_exits_0(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verify.certify.ladder", "--smoke", "--out",
                           str(tmp_path / "o"), "--no-progress", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert len(report["rows"]) == len(SMOKE.widths) * len(SMOKE.seeds)
    assert Path(tmp_path / "o" / "ladder.json").is_file()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for argv, said in ((["--depth", "0"], "--depth"), (["--held-out", "1.5"], "--held-out"),
                       (["--device", "nope"], "--device")):
        proc = subprocess.run([sys.executable, "-m", "verify.certify.ladder", *argv, "--out",
                               str(tmp_path / "o")],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr


def test_ctrl_c_mid_ladder_leaves_a_whole_ladder_json_marked_incomplete(tmp_path):
    """Interrupted after its first network: exit 130 and one line; ladder.json (rewritten whole after
    each network) loads, holds the networks done and says it is not complete; no partial file."""
    import signal
    import time

    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "verify.certify.ladder", "--widths", "8", "16", "32",
                             "--seeds", "1", "--steps", "2000", "--seconds", "20", "--out", str(out),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while not (out / "ladder.json").is_file():
        assert proc.poll() is None, f"ended before the interrupt: {proc.communicate()}"
        assert time.monotonic() < deadline, "no network finished in time"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.count("\n") == 1 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    written = json.loads((out / "ladder.json").read_text())
    assert written["complete"] is False and 1 <= len(written["rows"]) < 3
    assert not [p for p in out.rglob("*") if ".partial" in p.name or p.name.startswith(".")]
