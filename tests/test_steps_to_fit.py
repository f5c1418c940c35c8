"""verify.studies.steps_to_fit (issue 43): the steps each grid point needs to fit, its early stop
once the rule has held, and its refusals before any work."""

import json
import subprocess
import sys

from verify.studies import steps_to_fit as S

ARGS = ["scaling-model", "--scale", "smoke", "--every", "10", "--tasks", "8", "--only", "encoding=identity",
        "width=4"]


def test_first_fit_is_where_the_rule_held_to_the_end():
    curve = ((10, 0.98), (20, 0.991), (30, 0.97), (40, 0.992), (50, 0.995))
    points = [dict(step=s, train_r2=v) for s, v in curve]
    assert S.first_fit(points, 0.99) == 40
    assert S.first_fit(points[:3], 0.99) is None  # fell below again: not fit at its last look
    assert S.first_fit([], 0.99) is None


def test_a_run_that_never_fits_runs_to_its_steps_and_reports_its_curve(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verify.studies.steps_to_fit", *ARGS, "--max-steps", "30",
                           "--json", "--out", str(tmp_path / "curves.jsonl")], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (r,) = json.loads(proc.stdout)
    assert [p["step"] for p in r["points"]] == [10, 20, 30] and r["last_step"] == 30
    assert r["first_fit_step"] is None and "steps" not in r["params"] and r["params"]["width"] == 4
    assert (r["study"], r["scale"], r["max_steps"], r["threshold"]) == ("scaling-model", "smoke", 30, 0.99)
    assert json.loads((tmp_path / "curves.jsonl").read_text()) == r


def test_a_run_stops_once_the_rule_held_hold_evaluations_in_a_row(monkeypatch):
    monkeypatch.setattr(S, "_score", lambda net, samples, encode, tasks: 0.995)
    params = {"encoding": "identity", "M": 4, "K": 2, "I": 2, "H": 2, "O": 2, "width": 4, "depth": 1,
              "tasks_per_batch": 8, "samples_per_task": 4, "eval_tasks": 8, "eval_samples": 4, "seed": 1}
    r = S.measure(S.run_of(params, 100), every=10, tasks=8, hold=2)
    assert [p["step"] for p in r["points"]] == [10, 20] and r["first_fit_step"] == 10 and r["last_step"] == 20


def test_a_preference_run_is_measured_by_its_own_rule_training_accuracy(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verify.studies.steps_to_fit", "scaling-model-preference",
                           "--scale", "smoke", "--only", "encoding=identity", "width=4", "--max-steps", "20",
                           "--every", "10", "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (r,) = json.loads(proc.stdout)
    assert (r["metric"], r["headline"], r["threshold"]) == ("train acc", "held-out acc_all", 0.99)
    assert [p["step"] for p in r["points"]] == [10, 20]
    for p in r["points"]:
        assert 0 <= p["train_acc"] <= 1 and 0 <= p["held_out_acc_all"] <= 1
    # its rule, read off the points: fit iff the last `hold` training accuracies reach 0.99
    assert (r["first_fit_step"] is not None) == (r["points"][-1]["train_acc"] >= 0.99)
    assert r["points_are_shorter_runs"] == (r["schedule"] == "constant")


def test_first_fit_reads_the_family_s_own_metric():
    points = [dict(step=10, train_acc=0.995, train_r2=0.5), dict(step=20, train_acc=0.999, train_r2=0.5)]
    assert S.first_fit(points, 0.99, "acc") == 10 and S.first_fit(points, 0.99, "r2") is None


def test_points_it_measures_nothing_of_are_refused_before_any_work(tmp_path):
    for argv, says in ((["scaling-law-preference", "--scale", "smoke", "--only", "student=transformer"],
                        "measures MLP students"),
                       (["image-composition"], "measures verify.sgd studies"),
                       ([*ARGS, "--every", "50", "--max-steps", "20"], "--every must be at most")):
        proc = subprocess.run([sys.executable, "-m", "verify.studies.steps_to_fit", *argv],
                              capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1  # one line, and no run started ("[1/…")
