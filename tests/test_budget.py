"""verify.study budget: the time a scale's evidence takes, from the stored run times."""

import json
import sqlite3

import pytest

from tests.test_study import tiny_study
from verify.studies import budget, grids, provenance
from verify.studies import commands as study


@pytest.mark.parametrize("seconds, workers, makespan", [
    ([3, 3, 2, 2, 2], 2, 7),  # greedy in order: 3|3, 5|5, 7|5
    ([10, 1, 1, 1], 2, 10),
    ([1, 1, 1, 1], 1, 4),
    ([5], 3, 5),
])
def test_list_schedule_takes_jobs_in_order_on_the_first_free_worker(seconds, workers, makespan):
    got = budget.list_schedule(seconds, workers)
    assert got == makespan
    assert sum(seconds) / workers <= got <= sum(seconds) / workers + max(seconds)


def test_a_store_times_its_own_runs_and_their_seed_twins_and_says_what_is_left(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tiny_study(tmp_path, seeds="[1, 2, 3]", held_out="[0.25, 0.5]")
    out = study.default_out(path, "paper")
    one_seed = tiny_study(tmp_path, seeds="[1]", held_out="[0.25, 0.5]", name="one_seed.yaml")
    study.run_study(one_seed, "paper", out, engine="serial", progress=False)
    db = out / "study.sqlite"
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT key, config FROM runs").fetchall()
        times = {json.loads(cfg)["held_out"]: t for (_, cfg), t in zip(rows, (100.0, 40.0), strict=True)}
        for (key, _), t in zip(rows, (100.0, 40.0), strict=True):
            c.execute("UPDATE runs SET seconds = ? WHERE key = ?", (t, key))
    b = budget.study_budget(path, "paper")
    assert (b.runs, b.current, b.measured, b.matched, b.guessed, b.unknown) == (6, 2, 2, 4, 0, 0)
    assert sorted(b.seconds) == sorted([times[0.25]] * 3 + [times[0.5]] * 3)
    assert b.core_minutes() == pytest.approx(420 / 60)
    assert b.core_minutes(only_left=True) == pytest.approx(280 / 60)  # the seed-1 runs are done
    assert b.wall_minutes(2) == pytest.approx(budget.list_schedule(list(b.seconds), 2) / 60)

    # A run made by code that behaves otherwise is left to do (its time still counts as measured).
    monkeypatch.setattr(provenance, "code_fingerprint", lambda *program: "f" * 64)
    monkeypatch.setattr(budget.behaviour.Judge, "__call__", lambda self, run: budget.behaviour.OTHER)
    stale = budget.study_budget(path, "paper")
    assert (stale.current, stale.measured) == (0, 2)
    assert stale.core_minutes(only_left=True) == pytest.approx(420 / 60)


def test_a_study_with_no_store_is_unknown_and_the_cli_prints_the_totals(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(grids, "PACKAGED_RESULTS_DIR", tmp_path / "none")
    b = budget.study_budget("task-support", "smoke")
    assert (b.runs, b.current, b.unknown) == (2, 0, 2) and b.core_minutes() == 0
    assert study.main(["budget", "--scale", "smoke", "--workers", "3", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["workers"] == 3 and table["total"]["unknown"] == table["total"]["runs"] > 0
    assert study.main(["budget", "--scale", "smoke"]) == 0
    assert "have no time to go by (not counted)" in capsys.readouterr().out
    assert study.main(["budget", "--workers", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_run_at_other_steps_is_timed_by_its_twins_scaled_by_the_steps():
    """staged.run_seconds: a cell's own runs first; a cell moved to more steps is timed by its runs at
    fewer, scaled by the steps (not by the study's mean); another cell, or a run without steps, None."""
    from verify.studies import staged

    def row(seconds, **config):
        return {"config": {"M": 8, "width": 64, **config}, "seconds": seconds}

    done = [row(100.0, steps=1000, seed=1), row(140.0, steps=1000, seed=2),
            row(10.0, steps=50, seed=1, width=8)]
    timed = staged.run_seconds(done)
    assert timed({"M": 8, "width": 64, "steps": 1000, "seed": 7}) == pytest.approx(120.0)  # its cell
    assert timed({"M": 8, "width": 64, "steps": 4000, "seed": 1}) == pytest.approx(480.0)  # ×4 steps
    assert timed({"M": 8, "width": 8, "steps": 100, "seed": 3}) == pytest.approx(20.0)
    assert timed({"M": 16, "width": 64, "steps": 1000, "seed": 1}) is None  # no twin at any steps
    assert timed({"M": 8, "width": 64, "seed": 1}) is None  # no steps to scale by
    # split_seed is a seed where the caller says so (verify.study budget), not otherwise.
    split = [row(30.0, steps=10, seed=1, split_seed=0)]
    assert staged.run_seconds(split)({"M": 8, "width": 64, "steps": 10, "seed": 1, "split_seed": 1}) is None
    assert staged.run_seconds(split, ("seed", "split_seed"))(
        {"M": 8, "width": 64, "steps": 20, "seed": 2, "split_seed": 1}) == pytest.approx(60.0)


def test_a_run_no_stored_run_can_time_is_timed_by_the_seconds_its_also_block_declares(tmp_path, monkeypatch):
    """kernel-vs-sgd's ladders are unlike any stored run: the study's mean (a guess) would time
    them at a few minutes. An `also:` block's `seconds:` times its runs until they are stored;
    a stored run and a seed twin still come first."""
    monkeypatch.chdir(tmp_path)
    path = tiny_study(tmp_path, seeds="[1, 2]")
    with open(path, "a") as f:
        f.write("also:\n  - parameters:\n      width: {value: 8}\n    seconds: 300\n")
    out = study.default_out(path, "paper")
    one = tiny_study(tmp_path, seeds="[1]", name="one.yaml")
    study.run_study(one, "paper", out, engine="serial", progress=False)
    with sqlite3.connect(out / "study.sqlite") as c:
        c.execute("UPDATE runs SET seconds = 100.0")
    b = budget.study_budget(path, "paper")
    assert (b.runs, b.measured, b.matched, b.declared, b.guessed) == (4, 1, 1, 2, 0)
    assert sorted(b.seconds) == [100.0, 100.0, 300.0, 300.0]
    assert grids.declared_seconds(path, "paper") == [({"width": [8]}, 300.0)]
    assert "| 1 / 1 / 2 / 0 / 0 |" in budget.format_budget(
        dict(workers=2, scale="paper", rows=[dict(study="tiny", runs=4, current=1, measured=1, matched=1,
                                                  declared=2, guessed=0, unknown=0, core_minutes=13.3,
                                                  core_minutes_left=11.7, wall_minutes=6.7,
                                                  wall_minutes_left=5.0)],
             total=dict(runs=4, current=1, measured=1, matched=1, declared=2, guessed=0, unknown=0,
                        core_minutes=13.3, core_minutes_left=11.7, wall_minutes=6.7, wall_minutes_left=5.0)))


@pytest.mark.parametrize("seconds", ["0", "-5", "true", "soon", ".inf"])
def test_a_declared_time_that_is_not_a_positive_number_is_refused_in_one_line(tmp_path, seconds):
    path = tiny_study(tmp_path)
    with open(path, "a") as f:
        f.write(f"also:\n  - parameters:\n      width: {{value: 8}}\n    seconds: {seconds}\n")
    with pytest.raises(grids.UsageError, match="`seconds` must be a positive number") as e:
        grids.load_study(path, "paper")
    assert "\n" not in str(e.value)


def test_runs_that_hold_memory_start_only_where_they_fit_and_the_others_take_the_free_worker():
    """budget.list_schedule with Ray's memory holds (verify.studies.engines): two runs of 11 GiB
    on a 15.6 GiB node run one after the other, the small runs beside them."""
    GiB = 2**30
    seconds, memory = [10, 10, 1, 1], [11 * GiB, 11 * GiB, 0, 0]
    assert budget.list_schedule(seconds, 2) == 11  # memory not counted: both big ones at once
    assert budget.list_schedule(seconds, 2, memory, 15.6 * GiB) == 20
    assert budget.list_schedule(seconds, 2, memory, 22.5 * GiB) == 11  # room for both
    assert budget.list_schedule(seconds, 2, [0, 0, 0, 0], 15.6 * GiB) == 11
    # A hold above the node is cut to it (the engine's cut): it runs, alone but for runs holding nothing.
    assert budget.list_schedule([5, 5], 2, [100 * GiB, 0], 10 * GiB) == 5
    assert budget.list_schedule([5, 5], 2, [100 * GiB, 1], 10 * GiB) == 10
    # The first waiting run that fits takes the worker, not only the next in order.
    assert budget.list_schedule([4, 4, 1], 2, [8 * GiB, 8 * GiB, 0], 10 * GiB) == 8


def test_kernel_vs_sgds_ladders_along_tasks_make_its_wall_time_at_least_their_sum():
    """On 8 workers the whole grid would take about its core time / 8, but its 10 ladders (11 GiB
    each) run one at a time on a 15.6 GiB node: the wall time is at least their sum."""
    b = budget.study_budget("kernel-vs-sgd", "cpu")
    ladders = [s for s, m in zip(b.seconds, b.memory, strict=True) if m > 10 * 2**30]
    assert len(ladders) == 10 and all(ladders)
    node = budget.NODE_MEMORY_GIB * 2**30
    assert b.wall_minutes(8) * 60 < sum(ladders) <= b.wall_minutes(8, False, node) * 60
