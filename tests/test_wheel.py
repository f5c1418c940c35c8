"""The package as a user installs it: a wheel (not `pip install -e`) in a fresh virtual
environment, run from a folder outside the checkout.

The wheel is built from a copy of the source tree (an in-tree build/ could carry modules
that no longer exist). The fresh environment installs the wheel alone and borrows this
environment's dependencies (torch, numpy, ...) through a path file, so the test downloads
nothing; a path file's folders are plain sys.path entries, so this environment's editable
install of the project (its own .pth finder) does not come along: the project is imported
from the wheel or not at all.

What it runs from a folder outside the checkout: `verify.bound --help`, a small `verify.bound`,
a sweep, a smoke study, a figure, the smoke certification ladder and figure 14 from the ladder
data the package ships, checking that nothing was written into the installed package.
Outputs never go there: `verify.sweep` writes `sweep_out/`, `verify.study run`
`verify/studies/results/STUDY/SCALE/` and `paper_figures` `paper_figures/output/` (or
`preview/`), each relative to the working folder (`--out` chooses another), so in the
checkout's root they are the committed folders and anywhere else new ones. The editable
install puts the checkout itself on sys.path (`package-dir` in pyproject.toml), so those
folders, made in any other working folder, never hide the packages (tests/test_study.py runs
the commands from such a folder). Every subpackage and the committed cpu-scale study stores
ship in the wheel.

By hand, with the dependencies installed from the registry (35 s in all on the
project's 2-core machine):

    $ pip wheel -q --no-deps -w /tmp/dist . && python3 -m venv /tmp/w
    $ /tmp/w/bin/pip install -q torch==2.13.0 /tmp/dist/compgen_bound-0.1.0-py3-none-any.whl
    $ cd /tmp
    $ /tmp/w/bin/python -m verify.bound --M 4 --K 2 --I 2 --H 2 --O 2 --eps 1e-2 | sed -n '9p;15,19p'
                  widths          = (276, 2) counted on the nn.Sequential
    PASS          certificate <= eps
    PASS          measured <= certificate
    PASS          count = formula
    PASS          dense = structured
    verdict       PASS  (0.8 s, peak memory 0.33 GiB)
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What a clean clone would not hold, or a wheel does not need.
NOT_SOURCE = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache",
              ".ruff_cache", "mutants", "runs", "smoke", "preview", "output")
TINY = ["--M", "4", "--K", "2", "--I", "2", "--H", "2", "--O", "2"]


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of the fresh environment, its site-packages, a working folder outside the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    source, dist, env, work = base / "source", base / "dist", base / "env", base / "work"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(dist), str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    wheel = next(dist.glob("compgen_bound-*.whl"))
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                                  check=True).stdout.strip())
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "-q", str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    ours = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    (purelib / "_borrowed_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    work.mkdir()
    return python, purelib, work


def run(installed, *argv, timeout=600) -> subprocess.CompletedProcess:
    python, _, work = installed
    return subprocess.run([str(python), *argv], capture_output=True, text=True, cwd=work, timeout=timeout)


def test_every_subpackage_and_the_committed_stores_ship(installed):
    _, purelib, _ = installed
    shipped = files_under(purelib)
    for module in ("constructions/tasks/hyperteacher.py", "constructions/tasks/splits.py",
                   "theory/instance.py", "verify/bound.py", "verify/theorem/bound.py",
                   "paper_figures/__main__.py",
                   "verify/studies/task-support.yaml",
                   "verify/studies/results/task-support/cpu/study.sqlite"):
        assert module in shipped, module
    assert not any(p.startswith("tests/") for p in shipped)


def test_the_wheel_runs_from_outside_the_checkout_and_writes_only_there(installed):
    python, purelib, work = installed
    before = files_under(purelib)
    where = run(installed, "-c", "import verify, constructions.tasks; print(verify.__file__)")
    assert where.returncode == 0 and where.stdout.strip().startswith(str(purelib)), where

    helped = run(installed, "-m", "verify.bound", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m verify.bound"), helped.stderr

    bound = run(installed, "-m", "verify.bound", *TINY, "--eps", "1e-2", "--json", "--no-progress")
    assert bound.returncode == 0, bound.stderr
    report = json.loads(bound.stdout)
    assert report["passed"] and report["hidden_units"]["counted_from"] == "nn.Sequential"

    # Default outputs land under the working folder: a sweep's folder and the study store.
    sweep = run(installed, "-m", "verify.sweep", *TINY, "--eps", "1e-2", "1e-4", "--M", "3", "4", "--seeds",
                "0", "1", "--asymptotic-eps", "1e-2", "--no-progress")
    assert sweep.returncode == 0, sweep.stderr
    assert (work / "sweep_out" / "sweep.csv").is_file()
    listed = run(installed, "-m", "verify.study", "list")
    assert listed.returncode == 0 and "task-support" in listed.stdout, listed.stderr
    study = run(installed, "-m", "verify.study", "run", "task-support", "--scale", "smoke", "--engine",
                "serial", "--no-progress")
    assert study.returncode == 0, study.stderr
    assert (work / "verify" / "studies" / "results" / "task-support" / "smoke" / "study.sqlite").is_file()
    figures = run(installed, "-m", "paper_figures", "--quick", "--only", "fig2_units_vs_M", "--no-progress")
    assert figures.returncode == 0, figures.stderr
    assert (work / "paper_figures" / "preview" / "fig2_units_vs_M.png").is_file()
    ladder = run(installed, "-m", "verify.certify.ladder", "--smoke", "--no-progress")
    assert ladder.returncode == 0, ladder.stderr
    assert json.loads((work / "out" / "certify-ladder" / "ladder.json").read_text())["complete"]
    fig14 = run(installed, "-m", "paper_figures", "--only", "fig14_certified", "--no-progress")
    assert fig14.returncode == 0, fig14.stderr
    assert (work / "paper_figures" / "output" / "fig14_certified.png").is_file()

    assert files_under(purelib) == before  # nothing written into the installed package
