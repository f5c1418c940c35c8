"""The Ray engine holds a run's estimated memory while it runs (verify.studies.engines), so two
kernel solves that do not fit together wait for each other, and a request above every node's
memory runs alone instead of waiting for ever."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from verify.learning import kernel_vs_sgd
from verify.learning.kernel_limit import solve_bytes
from verify.studies import grids
from verify.studies.engines import Execution, run_memory, task_options

GiB = 2**30


def _cpu_runs():
    _, runs = grids.expand("kernel-vs-sgd", "cpu")
    return runs


def test_a_ladder_to_2048_tasks_is_estimated_at_its_top_rungs_solve_and_a_network_at_zero():
    runs = _cpu_runs()
    ladders = [r for r in runs if r.config.get("max_tasks") == 2048]
    networks = [r for r in runs if r.config["method"] == "trained"]
    assert len(ladders) == 10 and networks  # ntk and nngp, seeds 1–5
    for run in ladders:
        config = kernel_vs_sgd.from_key(run.config)
        assert run_memory(run) == solve_bytes(2048 * config.samples_per_task, config.depth, "auto", config.O)
        assert 10 * GiB < run_memory(run) < 12 * GiB  # the study file's 11 GiB at 32,768 rows
    assert {run_memory(r) for r in networks} == {0}
    plain = next(r for r in runs if r.config["method"] == "ntk" and r.config.get("max_tasks") is None)
    assert 0 < run_memory(plain) < run_memory(ladders[0]) / 16  # 4,096 rows: K is 64× smaller


def test_the_request_is_the_packs_sum_cut_to_the_largest_nodes_memory():
    runs = _cpu_runs()
    ladder = next(r for r in runs if r.config.get("max_tasks") == 2048)
    plain = [r for r in runs if r.config["method"] == "ntk" and r.config.get("max_tasks") is None][:2]
    network = next(r for r in runs if r.config["method"] == "trained")
    execution = Execution()
    node = 16.8e9  # a 23 GiB machine's local cluster counts about this much
    assert task_options([ladder], execution, node)["memory"] == run_memory(ladder)
    assert task_options(plain, execution, node)["memory"] == sum(run_memory(r) for r in plain)
    assert task_options([ladder], execution, 4 * GiB)["memory"] == 4 * GiB  # runs alone, not never
    assert "memory" not in task_options([ladder], execution, 0.0)  # Ray counts no memory
    assert "memory" not in task_options([network], execution, node)
    assert task_options([network], execution, node) == dict(name="run_one", num_cpus=1, num_gpus=0.0,
                                                            max_retries=0)
    # Two ladders' requests exceed one such node: Ray runs them one after the other.
    assert 2 * task_options([ladder], execution, node)["memory"] > node


STUDY = """\
program: verify.kernel
method: grid
parameters:
  method: {value: ntk}
  M: {value: 6}
  K: {value: 2}
  I: {value: 2}
  H: {value: 2}
  O: {value: 2}
  tasks: {value: 16}
  samples_per_task: {value: 4}
  eval_tasks: {value: 16}
  seed: {values: [1, 2]}
"""


def test_two_runs_that_each_claim_more_than_the_node_run_one_after_the_other_on_two_workers(tmp_path):
    """Each run claims 1 TiB (the driver's estimate patched): cut to the node's memory, each
    holds all of it, so on 2 workers the two runs do not overlap, and neither waits for ever.
    Without the request they overlap (both start at once); without the cut neither starts (Ray
    holds an infeasible task pending: the subprocess's timeout). A claim so large that Ray's
    fixed-point resource count overflows (10¹⁵ bytes) would be ignored instead, so 1 TiB."""
    pytest.importorskip("ray")
    (tmp_path / "s.yaml").write_text(STUDY)
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        from pathlib import Path
        from verify.learning import kernel_vs_sgd
        kernel_vs_sgd.memory_bytes = lambda config: 2**40
        from verify import study
        s = study.run_study(Path({str(tmp_path / "s.yaml")!r}), "paper", Path({str(out)!r}), engine="ray",
                            workers=2, progress=False)
        assert (s["done"], s["failed"]) == (2, 0), s
    """)
    # Its own process group, so that a run that waits for ever takes its Ray cluster down with it.
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        assert proc.wait(timeout=180) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with sqlite3.connect(out / "study.sqlite") as c:
        rows = c.execute("SELECT updated, seconds FROM runs").fetchall()
    spans = sorted((end - seconds, end) for end, seconds in rows)
    assert len(spans) == 2
    (_, first_end), (second_start, _) = spans
    assert first_end <= second_start
