"""Every CLI keeps the README's promise, run as a user runs it (a subprocess):

- bad input: exit 2, one line on stderr, no traceback, before any work, no files left;
- Ctrl-C: exit 130, one line, and no file under a final name that is incomplete;
- a closed stdout pipe: no traceback, the work goes on, the exit code keeps its meaning.

Each row of the hardening issue's table is one case here. Usage errors answer before
torch is imported, so most rows cost a fraction of a second.

In all: 49 bad inputs (each exits 2 with one line, no traceback, and leaves no file), Ctrl-C in
the middle of each CLI's work and while network.pt or a figure is being written, a closed
pipe, an internal error (exit 3 with its traceback), --help without torch, scipy or
matplotlib, and that the README names every flag of every CLI (README_SECTIONS).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

TINY_SGD = ["--I", "2", "--H", "2", "--O", "2", "--M", "4", "--K", "2", "--steps", "5", "--eval-samples", "4"]
TINY_BOUND = ["--I", "2", "--H", "2", "--O", "2", "--M", "4", "--K", "2", "--eps", "1e-2"]


def run(module: str, argv: list[str], timeout: float = 120, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def interruptible(argv: list[str]) -> subprocess.Popen:
    """Start a CLI as a terminal would: with SIGINT at its default. A shell starts
    background jobs (CI runners, `nohup … &`) with SIGINT ignored, and Python then installs
    no KeyboardInterrupt handler, so Ctrl-C could not be tested there."""
    return subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def partial_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".partial" in p.name]


@pytest.fixture
def places(tmp_path):
    """Paths that cannot be output folders, and one that already holds results."""
    a_file = tmp_path / "a_file.txt"
    a_file.write_text("not a folder\n")
    full = tmp_path / "full"
    full.mkdir()
    (full / "report.json").write_text("{}\n")
    return dict(FILE=str(a_file), UNDER_FILE=str(a_file / "sub"), PROC="/proc/compgen_cannot_write",
                FULL=str(full), TMP=str(tmp_path))


# (module, argv, what the one line must contain). FILE, UNDER_FILE, PROC, FULL, TMP are
# replaced by the paths of the `places` fixture.
USAGE_ROWS = [
    ("verify.bound", ["--eps", "1e-300"], "2^40"),
    ("verify.bound", ["--eps", "1e-320"], "2^40"),
    ("verify.bound", ["--eps", "1e-16"], "float64"),
    ("verify.bound", ["--eps", "1e-18"], "float64"),
    ("verify.bound", ["--eps", "1e-40"], "2^40"),
    ("verify.bound", ["--layers", "2", "--eps", "1e-20"], "float64"),
    ("verify.bound", ["--construction", "optimal", "--eps", "1e-300"], "2^40"),
    ("verify.bound", ["--construction", "deep", "--eps", "1e-300"], "float64"),
    ("verify.bound", ["--seed", "-1"], "seed"),
    ("verify.bound", ["--save", "FILE"], "existing file"),
    ("verify.bound", ["--save", "UNDER_FILE"], "cannot be written"),
    ("verify.bound", ["--save", "PROC"], "cannot be written"),
    ("verify.bound", ["--save", "FULL"], "--force"),
    ("verify.bound", ["--force"], "--save"),
    ("verify.bound", ["--save", ""], "argument --save: expected a file or folder name, got ''"),
    ("verify.bound", ["--save=", "--force"], "argument --save: expected a file or folder name"),
    ("verify.bound", ["--M", "100000"], "smaller --M"),
    ("verify.bound", ["--I", "4096"], "smaller --M, --I"),
    ("verify.bound", ["--threads", "0"], "positive integer"),
    ("verify.bound", ["--eps", "nan"], "positive finite"),
    ("verify.sweep", ["--eps", "1e-300", "--M", "4", "--seeds", "0", "--allow-untested", "--out", "TMP"],
     "2^40"),
    ("verify.sweep", ["--eps", "1e-20", "1e-23", "--asymptotic-eps", "1e-2", "--M", "4", "8",
                      "--seeds", "0", "1", "--out", "TMP"], "float64"),
    ("verify.sweep", ["--seeds", "-1"], "seed"),
    ("verify.sweep", ["--out", "FILE"], "existing file"),
    ("verify.sweep", ["--out", "PROC"], "cannot be written"),
    ("verify.sweep", ["--eps", "1e-2", "--M", "4", "8", "--seeds", "0"], "--allow-untested"),
    ("verify.sweep", ["--asymptotic-eps", "1e-9"], "--allow-untested"),
    ("verify.sweep", ["--M", "8"], "--allow-untested"),
    ("verify.sgd", ["--eps", "1e-300"], "2^40"),
    ("verify.sgd", ["--seed", "-1"], "seed"),
    ("verify.sgd", ["--save", "FILE"], "existing file"),
    ("verify.sgd", ["--save", "PROC"], "cannot be written"),
    ("verify.sgd", ["--save", "FULL"], "--force"),
    ("verify.sgd", ["--save", ""], "argument --save: expected a file or folder name, got ''"),
    ("verify.sgd", ["--checkpoint", ""], "argument --checkpoint: expected a file or folder name"),
    ("verify.sgd", ["--log", "tensorboard", ""], "argument --log: expected a file or folder name"),
    ("verify.sweep", ["--out", ""], "argument --out: expected a file or folder name"),
    ("paper_figures", ["--out", ""], "argument --out: expected a file or folder name"),
    ("verify.sgd", ["--seed", "0", "0"], "argument --seed: 0 is given twice"),
    ("verify.sgd", ["--seed", "1", "2", "1"], "argument --seed: 1 is given twice"),
    ("verify.sweep", ["--seeds", "3", "3"], "argument --seeds: 3 is given twice"),
    ("verify.sgd", ["--device", "bogus"], "--device"),
    ("verify.sgd", ["--weight-decay", "-1"], "--weight-decay"),
    ("verify.sgd", ["--held-out", "2"], "--held-out"),
    ("verify.sgd", ["--widths", "8", "8"], "--shapes custom"),
    ("verify.sgd", ["--family", "grid"], "invalid choice: 'grid'"),
    ("verify.sgd", ["--family", "preference", "--I", "4"], "--I applies to --family hyperteacher"),
    ("verify.sgd", ["--family", "preference", "--eps", "1e-3"], "--eps applies to --family hyperteacher"),
    ("verify.sgd", ["--F", "8"], "--F applies to --family preference"),
    ("verify.sgd", ["--timelimit=4"], "--timelimit applies to --family preference"),
    ("verify.sgd", ["--family", "preference", "--encoding", "fewshot"], "hyperteacher only"),
    ("verify.sgd", ["--family", "preference", "--shapes", "matched"], "no construction to match"),
    ("verify.sgd", ["--family", "preference", "--objects", "19"], "at most 18 objects"),
    ("verify.sgd", ["--family", "preference", "--M", "16", "--F", "4"], "the official run.py requires M ≤ F"),
    ("verify.sgd", ["--allow-M-above-F"], "--allow-M-above-F applies to --family preference"),
    ("verify.bench", ["--repeats", "0"], "positive integer"),
    ("verify.kernel", ["--method", "ntk", "--width", "64"], "--width does not apply to --method ntk"),
    ("verify.kernel", ["--depth", "0"], "--depth"),
    ("verify.kernel", ["--tasks", "100000", "--samples-per-task", "100000"], "the kernel solve needs"),
    ("verify.bench", ["--repeats", "-3"], "positive integer"),
    ("verify.bench", ["--frobnicate"], "unrecognized"),
    ("paper_figures", ["--seed", "-1"], "seed"),
    ("paper_figures", ["--out", "FILE"], "existing file"),
    ("paper_figures", ["--only", "fig99"], "fig99"),
    ("verify.certify", ["NOPE"], "NOPE"),
    ("verify.certify", ["TMP", "--ratio", "0.5"], "ratio"),
    ("verify.certify.ladder", ["--ratio", "0.5"], "ratio"),
    ("verify.certify.ladder", ["--widths", "0"], "--widths"),
    ("verify.certify.ladder", ["--seeds", "1", "1"], "1 is given twice"),
    ("verify.certify.ladder", ["--K", "9"], "--K 9 is above --M 8"),
    ("verify.certify.ladder", ["--out", "FILE"], "existing file"),
]


@pytest.mark.parametrize("module,argv,message", USAGE_ROWS,
                         ids=[f"{m} {' '.join(a)}" for m, a, _ in USAGE_ROWS])
def test_bad_input_gets_one_line_and_exit_2(places, module, argv, message):
    argv = [places.get(a, a) for a in argv]
    before = sorted(p.name for p in Path(places["TMP"]).rglob("*"))
    proc = run(module, argv, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"{module}: error: ") and message in proc.stderr, proc.stderr
    assert proc.stdout == ""
    # Refused before any work: nothing new in the folders it was pointed at.
    assert sorted(p.name for p in Path(places["TMP"]).rglob("*")) == before


@pytest.mark.parametrize("module", ["verify.bound", "verify.sweep", "verify.sgd", "verify.bench",
                                    "paper_figures", "verify.study run", "verify.kernel", "verify.certify",
                                    "verify.certify.ladder"])
def test_help_answers_without_importing_torch(module):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", *module.split(), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--threads" in proc.stdout and "--no-progress" in proc.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "scipy.stats", "matplotlib.pyplot", "matplotlib"}, \
        sorted(imported & {"torch", "scipy.stats", "matplotlib"})


ASCII_ENV = {**os.environ, "PYTHONIOENCODING": "ascii"}


@pytest.mark.parametrize("module", ["verify.bound", "verify.sweep", "verify.sgd", "verify.bench",
                                    "verify.kernel", "paper_figures", "verify.study run",
                                    "verify.images train", "verify.certify", "verify.certify.ladder"])
def test_help_survives_an_ascii_stdout(module):
    """The help has ε, √, ×, –: on a stream that cannot encode them it writes them escaped,
    and exits 0 (it was an internal error, exit 3)."""
    proc = subprocess.run([sys.executable, "-m", *module.split(), "--help"], capture_output=True,
                          text=True, timeout=60, env=ASCII_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--threads" in proc.stdout and "Traceback" not in proc.stderr


def test_a_report_survives_an_ascii_stdout():
    proc = subprocess.run([sys.executable, "-m", "verify.bound", *TINY_BOUND, "--no-progress"],
                          capture_output=True, text=True, timeout=120, env=ASCII_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "verdict       PASS" in proc.stdout and "\\u" in proc.stdout  # escaped, not lost
    usage = subprocess.run([sys.executable, "-m", "verify.bound", "--eps", "-1"], capture_output=True,
                           text=True, timeout=60, env=ASCII_ENV)
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1, usage.stderr


def _interrupt_when(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    """SIGINT the process once ready() holds (polled), or fail if it ends first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"ended before the interrupt: {proc.communicate()}"
        assert time.monotonic() < deadline, "never reached the point to interrupt"
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)


def test_ctrl_c_while_saving_leaves_no_truncated_file(tmp_path):
    """Interrupted while network.pt is being written: exit 130, one line, and every file
    under a final name is complete (here: teacher.npz, written first)."""
    out = tmp_path / "run"
    argv = ["--M", "16", "--eps", "1e-4", "--max-tasks", "50", "--refine-steps", "2", "--save", str(out)]
    proc = interruptible(["verify.bound", *argv])
    _interrupt_when(proc, lambda: out.is_dir() and any(p.name.startswith(".network.")
                                                      for p in out.iterdir()))
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.count("\n") == 1 and "interrupted" in stderr and "Traceback" not in stderr
    assert partial_files(out) == []
    names = {p.name for p in out.iterdir()}
    assert "report.json" not in names and "network.pt" not in names
    with np.load(out / "teacher.npz") as f:  # complete: it loads
        assert f["W"].shape == (16, 16, 16)


def test_ctrl_c_during_figures_leaves_no_truncated_file(tmp_path):
    out = tmp_path / "figs"
    proc = interruptible(["paper_figures", "--quick", "--out", str(out)])
    _interrupt_when(proc, lambda: out.is_dir() and len(list(out.iterdir())) >= 5)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert partial_files(out) == []  # the cache's folder included
    for path in (p for p in out.rglob("*") if p.is_file()):  # every file with a final name is whole
        data = path.read_bytes()
        if path.suffix == ".pickle":  # the figure cache (paper_figures.common.cached)
            import pickle

            assert pickle.loads(data)["value"] is not None, path
        if path.suffix == ".png":
            assert data.endswith(b"IEND\xaeB`\x82"), path
        elif path.suffix == ".pdf":
            assert data.rstrip().endswith(b"%%EOF"), path
        elif path.suffix == ".json":
            json.loads(data)
        elif path.suffix == ".csv":
            assert data.endswith(b"\n"), path


@pytest.mark.parametrize("module,argv", [
    ("verify.bound", ["--eps", "1e-5", "--refine-steps", "1000", "--no-progress"]),
    ("verify.sweep", ["--out", "TMP"]),
    ("verify.sgd", [*TINY_SGD[:-4], "--steps", "1000000"]),
    ("verify.bench", ["--quick"]),
])
def test_ctrl_c_is_one_line_and_exit_130(tmp_path, module, argv):
    """Interrupted in the middle of its work (after torch is loaded, 4 s in): exit 130 and
    one line, not a KeyboardInterrupt traceback."""
    argv = [str(tmp_path) if a == "TMP" else a for a in argv]
    proc = interruptible([module, *argv])
    time.sleep(4.0)
    assert proc.poll() is None, f"ended before the interrupt: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.count("\n") == 1 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    assert partial_files(tmp_path) == []


TINY_SWEEP = ["--K", "2", "--I", "3", "--H", "2", "--O", "2", "--allow-untested", "--eps", "1e-2", "--M", "4",
              "8", "--seeds", "0"]
FAST_SGD = [*TINY_SGD, "--eval-tasks", "32", "--shapes", "matched"]


# paper_figures has the same test in tests/test_figures.py. TMP is the output folder, whose
# files must all be written although stdout closed after the first line.
@pytest.mark.parametrize("module,argv,files", [
    ("verify.bound", TINY_BOUND, []),
    ("verify.sweep", [*TINY_SWEEP, "--out", "TMP"], ["sweep.csv", "sweep.json"]),
    ("verify.sgd", [*FAST_SGD, "--save", "TMP"], ["report.json", "sgd_matched.pt"]),
])
def test_a_closed_pipe_ends_quietly(tmp_path, module, argv, files):
    argv = [str(tmp_path) if a == "TMP" else a for a in argv]
    cmd = " ".join([sys.executable, "-m", module, *argv, "--no-progress"])
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} | head -1"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert proc.stdout.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_an_internal_error_is_exit_3_with_its_traceback(monkeypatch, capsys):
    import verify.bound
    import verify.theorem.check

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(verify.theorem.check, "verify_point", broken)
    code = verify.bound.main(TINY_BOUND + ["--no-progress"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" in err and "RuntimeError: boom" in err
    assert err.strip().splitlines()[-1].startswith("verify.bound: internal error")


def test_saved_files_are_written_whole_and_refused_twice(tmp_path):
    """--save writes complete files; a second --save into the same folder is refused before
    work (exit 2), and --force replaces them."""
    out = tmp_path / "run"
    first = run("verify.bound", [*TINY_BOUND, "--save", str(out), "--no-progress"])
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in out.iterdir()) == ["network.pt", "report.json", "teacher.npz"]
    assert oct(os.stat(out / "report.json").st_mode & 0o777) != oct(0o600)  # the usual mode, not mkstemp's
    again = run("verify.bound", [*TINY_BOUND, "--save", str(out)])
    assert again.returncode == 2 and "--force" in again.stderr
    forced = run("verify.bound", [*TINY_BOUND, "--save", str(out), "--force", "--seed", "1"])
    assert forced.returncode == 0, forced.stderr
    assert json.loads((out / "report.json").read_text())["teacher"]["seed"] == 1
    assert torch.load(out / "network.pt")  # loads whole


README_SECTIONS = {  # CLI module -> the heading of its README section (a ### section runs to the next ##)
    "verify.bound": "## Check the theorem: `python -m verify.bound`",
    "verify.sweep": "## Scaling sweeps: `python -m verify.sweep`",
    "verify.sgd": "## Train and compare: `python -m verify.sgd`",
    "verify.bench": "## Run at scale: `python -m verify.bench`, GPUs, a cluster",
    "paper_figures.__main__": "## Regenerate the figures: `python -m paper_figures`",
    "verify.study": "## Run a study: `python -m verify.study`",
    "verify.exact_sup": "### How tight is the certificate? `--bound instance` and "
                        "`python -m verify.exact_sup`",
    "verify.images.__main__": "## Analyse an image model: `python -m verify.images`",
    "verify.images.train": "## Analyse an image model: `python -m verify.images`",
    "verify.kernel": "### The kernel limit beside SGD: `python -m verify.kernel`",
    "verify.certify.command": "### Certify a trained student: `python -m verify.certify`",
    "verify.certify.ladder": "### Certify a trained student: `python -m verify.certify`",
}


def parser_actions(module: str) -> list:
    """Every argparse action of a CLI, its subcommands' included (verify.study run, report, …)."""
    import importlib

    parser = importlib.import_module(module).build_parser()
    actions = list(parser._actions)
    for a in parser._actions:
        for sub in getattr(a, "_name_parser_map", {}).values():
            actions += sub._actions
    return actions


@pytest.mark.parametrize("module", sorted(README_SECTIONS))
def test_every_flag_has_help(module):
    assert not [a.option_strings for a in parser_actions(module) if a.option_strings and not a.help]


@pytest.mark.parametrize("module", sorted(README_SECTIONS))
def test_readme_documents_every_flag(module):
    """Each CLI's README section names every flag its parser has (a new flag without a
    line in the README fails here)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = readme.index(README_SECTIONS[module] + "\n")
    end = readme.find("\n## ", start + 1)
    section = readme[start:end if end > 0 else None]
    flags = sorted({a.option_strings[-1] for a in parser_actions(module) if a.option_strings} - {"--help"})
    missing = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", section)]
    assert not missing, f"README section {README_SECTIONS[module]!r} does not mention {missing}"
