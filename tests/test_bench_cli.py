"""python -m verify.bench: bad input, --help, and its output (the measurements are faked:
the real ones take minutes and are timings, which no test asserts)."""

import json
import subprocess

import pytest

import verify.bench as bench


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("argv,message", [
    (["--repeats", "0"], "positive integer"), (["--repeats", "-3"], "positive integer"),
    (["--repeats", "x"], "positive integer"), (["--threads", "0"], "positive integer"),
    (["--frobnicate"], "unrecognized"), (["--quick", "extra"], "unrecognized"),
    (["--pack", "4"], "apply to --device"), (["--assume-tflops", "100"], "apply to --device"),
    (["--device", "cpu", "--pack", "0"], "positive integer"),
    (["--device", "cpu", "--assume-tflops", "0"], "positive"),
    (["--device", "meta"], "only cpu and cuda"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    assert bench.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("verify.bench: error: ") and message in err, err


FORWARD = dict(M=32, eps=1e-3, batch=2048, hidden_units=1000, structured_s=0.01, dense_s=0.5, speedup=50.0,
               max_abs_diff=1e-14)


@pytest.fixture
def fake_runs(monkeypatch):
    """verify.bound runs that all fail (no report), and a fast forward measurement; records
    each verify.bound command line."""
    commands = []

    def run(cmd, **kw):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 3, stdout="", stderr="boom\n")

    monkeypatch.setattr(bench.subprocess, "run", run)
    monkeypatch.setattr(bench, "forward_speed", lambda *a, **kw: dict(FORWARD))
    monkeypatch.setattr(bench, "shallow_units", lambda M, eps: 123_456)
    monkeypatch.setattr(bench, "training_speed", lambda widths, steps, repeats, family="hyperteacher": dict(
        widths=widths, step_s=0.1, data_share=0.02, model_flops=1e10, gemm_flops=2e10, model_over_gemm=0.5))
    monkeypatch.setattr(bench, "ray_overhead", lambda: dict(study="task-support", runs=2, serial_s=4.0,
                                                            ray_s=10.0, overhead_s=6.0))
    return commands


def test_json_output_is_strict_even_when_a_run_failed(capsys, fake_runs):
    """A failed verify.bound run has no peak memory: null in JSON (never NaN), and MISSED."""
    assert bench.main(["--quick", "--json", "--no-progress"]) == 0
    rows = strict_json(capsys.readouterr().out)
    assert rows[0]["peak_gib"] is None and rows[0]["exit"] == 3 and rows[0]["ok"] is False
    assert rows[1]["value"] == 50.0 and rows[1]["ok"] is True
    assert len(fake_runs) == 2 and all("--threads" not in cmd for cmd in fake_runs)


def test_table_and_threads_passed_to_the_bound_runs(capsys, fake_runs):
    assert bench.main(["--quick", "--no-progress", "--threads", "1", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "MISSED" in out and "torch threads = 1" in out
    assert all(cmd[cmd.index("--threads") + 1] == "1" for cmd in fake_runs) and len(fake_runs) == 2


def test_training_speed_measures_a_real_step():
    """The training line on a tiny MLP: a positive step time, a data share in (0, 1), and the
    model's FLOP/s as counted by verify.train.step_macs."""
    for family, rows in (("hyperteacher", 128 * 16), ("preference", 128 * 8)):
        tr = bench.training_speed([32, 32], steps=2, repeats=2, family=family)
        assert tr["step_s"] > 0 and 0 < tr["data_share"] < 1 and tr["rows"] == rows
        assert tr["model_over_gemm"] == pytest.approx(tr["model_flops"] / tr["gemm_flops"])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="only meaningful without a GPU")
def test_a_cuda_bench_without_a_gpu_is_a_usage_error(capsys):
    assert bench.main(["--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_device_bench_runs_on_the_cpu_and_prices_every_paper_study(capsys):
    """A real (quick) run: the 4×256 step alone and packed ×2, timed; and each paper-scale
    study's training FLOPs, priced at the measured rate and at an assumed one."""
    from verify.studies.commands import DEFAULT_PROGRAM, study_names, study_program

    assert bench.main(["--device", "cpu", "--quick", "--pack", "2", "--assume-tflops", "100", "--json",
                       "--no-progress"]) == 0
    m = strict_json(capsys.readouterr().out)
    assert [s["n_pack"] for s in m["steps"]] == [1, 2] and all(s["step_s"] > 0 for s in m["steps"])
    assert m["speed"] == {"precision": "fp32", "compile": False, "fused": False}
    assert m["checkpoint"]["bytes"] > 3 * 4 * 3 * 256 * 256  # AdamW's moments and the weights, float32
    studies = {r["study"]: r for r in m["studies"]}
    # Every verify.sgd study (the image study trains no verify.sgd student: its runs are priced
    # in verify/images/study_report.py's docstring).
    sgd_studies = {n for n in study_names() if study_program(n) == DEFAULT_PROGRAM}
    assert set(studies) == sgd_studies != set(study_names())
    # The paper's task-support sweep: 18 runs of 300k steps of a 4×1024 MLP on 128×16 rows of
    # [z (16), x (16)] → 16: 3 × 2,048 × (32·1024 + 3·1024² + 1024·16) multiply-adds a step, ×2 FLOPs.
    per_step = 2 * 3 * 2048 * (32 * 1024 + 3 * 1024**2 + 1024 * 16)
    assert studies["task-support"]["flops"] == 18 * 300_000 * per_step
    assert studies["task-support"]["assumed_hours"] == pytest.approx(
        studies["task-support"]["flops"] / 100e12 / 3600)
