"""Issue 45, part 3: SGD on the kernel limit's own rows (python -m verify.kernel --data finite,
verify.learning.finite_rows): the same rows as the kernel fit, epochs over them, the same
numbers twice, online runs and stored keys unchanged, refusals in one line."""

import re
from pathlib import Path

import pytest
import torch

from verify.learning import finite_rows, kernel_limit, kernel_vs_sgd
from verify.studies.store import RunStore, config_key

SMALL = ["--M", "5", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--eval-tasks", "16",
         "--eval-samples", "4", "--no-progress", "--seed", "3"]
NET = ["--width", "8", "--steps", "6", "--tasks-per-batch", "4", "--samples-per-task", "3"]
STORE = Path(__file__).resolve().parents[1] / "verify/studies/results/kernel-vs-sgd/cpu/study.sqlite"

# The loss curves of these online runs (SMALL + NET) by the code before --data existed
# (commit 59b53d1), one thread on the CPU.
ONLINE_LOSSES = {
    "trained": [0.15518108010292053, 0.15440518036484718, 0.15645253844559193, 0.15830425474792717,
                0.1597845686741173, 0.1617231278222948],
    "linearised": [0.15518108010292053, 0.15440517842769624, 0.15645263131856918, 0.15830555633378027,
                   0.1597863082504129, 0.16172500069216275],
}


def _train(*argv):
    """train_network of a small run: its run, family, split and training record."""
    run = kernel_vs_sgd.parse_args([*SMALL, *NET, *argv])
    family, split = kernel_vs_sgd._family_and_split(run)
    sides = kernel_vs_sgd._sides(run, family, split)
    net, record = kernel_vs_sgd.train_network(run, family, split, sides, False)
    return run, family, split, net, record


# ----------------------------------------------------------------------------- the same rows


def test_the_finite_rows_are_the_rows_the_ntk_fit_receives(monkeypatch):
    given, made = [], []
    original_fit, original_set = kernel_limit.fit, finite_rows.finite_set

    def spy_fit(cfg, x, y):
        given.append((x.clone(), y.clone()))
        return original_fit(cfg, x, y)

    def spy_set(*args, **kwargs):
        made.append(original_set(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(kernel_limit, "fit", spy_fit)
    monkeypatch.setattr(finite_rows, "finite_set", spy_set)
    same = ["--tasks", "10", "--samples-per-task", "3"]
    ntk = kernel_vs_sgd.parse_args([*SMALL, "--method", "ntk", *same])
    family, split = kernel_vs_sgd._family_and_split(ntk)
    kernel_vs_sgd.fit_kernel(ntk, family, split, kernel_vs_sgd._sides(ntk, family, split), False)
    _, _, _, _, record = _train("--method", "trained", "--data", "finite", *same)
    (x, y), (data,) = given[-1], made
    assert torch.equal(data.rows, x) and torch.equal(data.targets, y)
    assert record["finite"]["rows"] == len(x) == 30 and record["finite"]["tasks"] == 10
    # What the network reads is those rows, in float32, a task's P rows together.
    batches = finite_rows.FiniteBatches(data, 4, ntk.seed, "cpu")
    rows = torch.cat([batches.e[:, None, :].expand(10, 3, -1), batches.x], dim=2).reshape(30, -1)
    assert torch.equal(rows, x.float()) and torch.equal(batches.y.reshape(30, -1), y.float())


# ----------------------------------------------------------------------------- epochs


def test_each_epoch_visits_every_task_once_reshuffled():
    run = kernel_vs_sgd.parse_args([*SMALL, *NET, "--method", "trained", "--data", "finite", "--tasks", "10"])
    family, split = kernel_vs_sgd._family_and_split(run)
    data = finite_rows.finite_set(family, split.train, 10, 3, run.seed)
    batches = finite_rows.FiniteFamily(family, data).batches(split.train, 4, 3, run.seed, "cpu")
    assert finite_rows.batches_per_epoch(10, 4) == 3
    orders = []
    for epoch in range(1, 5):
        seen = []
        for size in (4, 4, 2):  # the last step of an epoch takes the tasks left
            batch = batches()
            assert batches.epoch == epoch and batch.x.shape == (size, 3, 2) and batch.e.shape == (size, 5)
            assert batch.y.shape == (size, 3, 2) and batch.x.dtype == torch.float32
            # the batch is those tasks' rows, all of them
            assert torch.equal(batch.x, batches.x[batches.last_tasks])
            seen += batches.last_tasks.tolist()
        assert sorted(seen) == list(range(10))
        orders.append(seen)
    assert len({tuple(o) for o in orders}) > 1  # reshuffled
    # the same seed, the same order
    again = finite_rows.FiniteBatches(data, 4, run.seed, "cpu")
    first = []
    for _ in range(3):
        again()
        first += again.last_tasks.tolist()
    assert first == orders[0]
    with pytest.raises(NotImplementedError, match="does not checkpoint"):
        batches.generator  # noqa: B018


def test_two_finite_runs_with_one_seed_give_the_same_numbers():
    argv = ("--method", "trained", "--data", "finite", "--tasks", "10")
    *_, net_a, a = _train(*argv)
    *_, net_b, b = _train(*argv)
    assert a["losses"] == b["losses"]
    for (k, va), vb in zip(net_a.state_dict().items(), net_b.state_dict().values(), strict=True):
        assert torch.equal(va, vb), k
    *_, c = _train("--method", "trained", "--data", "finite", "--tasks", "10", "--seed", "4")
    assert c["losses"] != a["losses"]


# ----------------------------------------------------------------------------- online unchanged


@pytest.mark.parametrize("method", ["trained", "linearised"])
def test_an_online_run_trains_as_before(method):
    for data in ([], ["--data", "online"]):
        *_, record = _train("--method", method, *data)
        assert "finite" not in record
        assert [v for _, v in record["losses"]] == pytest.approx(ONLINE_LOSSES[method], rel=1e-6)


def test_a_key_without_data_is_the_key_it_was():
    run = kernel_vs_sgd.parse_args([*SMALL, *NET, "--method", "trained"])
    key = kernel_vs_sgd.run_config(run)
    assert "data" not in key and "tasks" not in key
    online = kernel_vs_sgd.parse_args([*SMALL, *NET, "--method", "trained", "--data", "online"])
    assert kernel_vs_sgd.run_config(online) == key and online.data is None
    finite = kernel_vs_sgd.run_config(
        kernel_vs_sgd.parse_args([*SMALL, *NET, "--method", "trained", "--data", "finite", "--tasks", "64"]))
    assert finite == {**key, "data": "finite", "tasks": 64}
    # Every run of the committed kernel-vs-sgd store is the run, and the key, it was.
    with RunStore(STORE, readonly=True) as store:
        rows = store.rows()
    assert len(rows) >= 90
    for r in rows:
        assert kernel_vs_sgd.from_key(r["config"]).key() == r["config"]
        assert config_key(kernel_vs_sgd.config_of(r["config"]).key()) == r["key"]


def test_a_study_grid_gives_tasks_to_the_networks_only_under_finite():
    point = dict(method="trained", tasks=256, width=32, steps=10)
    assert "tasks" not in kernel_vs_sgd.own_parameters(point)
    assert kernel_vs_sgd.own_parameters({**point, "data": "finite"})["tasks"] == 256
    assert kernel_vs_sgd.config_of({**point, "data": "finite"}).key()["tasks"] == 256
    assert "data" not in kernel_vs_sgd.own_parameters({**point, "method": "ntk", "data": "finite"})


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--method", "trained", "--data", "finite"],
         "--data finite trains on the rows of a kernel fit: give its --tasks"),
        (["--method", "linearised", "--data", "finite"], "give its --tasks"),
        (["--method", "ntk", "--data", "finite"], "--data does not apply to --method ntk"),
        (["--method", "nngp", "--data", "online"], "--data does not apply to --method nngp"),
        (["--method", "trained", "--tasks", "64"],
         "--tasks does not apply to --method trained unless --data finite"),
        (["--method", "trained", "--data", "online", "--tasks", "64"], "unless --data finite"),
        (["--method", "trained", "--data", "finite", "--tasks", "8", "--tasks-per-batch", "16"],
         "--data finite: --tasks-per-batch must be at most --tasks (got 16 > 8)"),
        (["--method", "trained", "--data", "finite", "--tasks", "8", "--max-tasks", "16"],
         "--max-tasks does not apply to --method trained"),
        (["--method", "trained", "--data", "epochs"], "invalid choice"),
    ],
)
def test_a_finite_run_it_cannot_run_gets_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("work began")

    monkeypatch.setattr(kernel_vs_sgd, "_family_and_split", no_work)
    assert kernel_vs_sgd.main([*SMALL, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- a tiny run


def test_a_tiny_finite_run_trains_and_says_so():
    argv = [*SMALL, "--method", "trained", "--width", "16", "--steps", "200", "--tasks-per-batch", "4",
            "--samples-per-task", "3", "--lr", "0.01", "--data", "finite", "--tasks", "8"]
    report = kernel_vs_sgd.run(kernel_vs_sgd.parse_args(argv))
    text = kernel_vs_sgd.format_report(report)  # what the command prints
    assert re.search(r"^  finite: 8 tasks × 3 rows, 100 epochs \(24 rows, .*training supports\)$", text, re.M)
    losses = [v for _, v in report["record"]["losses"]]
    assert losses[-1] < 0.25 * losses[0]
    finite = report["record"]["finite"]
    assert finite["epochs"] == 100 and finite["batches_per_epoch"] == 2
    assert 1 <= finite["supports_covered"] <= min(8, finite["training_supports"])


@pytest.mark.parametrize("method", ["trained", "linearised"])
def test_a_finite_run_has_a_behaviour_record_of_its_own(method):
    """verify.study's behaviour record: a finite run's first steps, replayed the same, and not
    the online run's (another key, other batches)."""
    finite = kernel_vs_sgd.parse_args([*SMALL, *NET, "--method", method, "--data", "finite", "--tasks", "10"])
    record = kernel_vs_sgd.behaviour(finite)
    assert len(record["losses"]) == kernel_vs_sgd.BEHAVIOUR_STEPS
    assert kernel_vs_sgd.behaviour(finite) == record
    online = kernel_vs_sgd.behaviour(finite.replace(data=None, tasks=None))
    assert online["split"] == record["split"] and online["losses"] != record["losses"]
