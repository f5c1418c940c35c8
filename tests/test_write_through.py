"""Output files that are not regular files (issue 44): a FIFO, a device, a /dev/fd/N pipe and
a symlink are written, not replaced; `-` is stdout; a full device ends in one line, exit 2.

verify/cli.py decides (writes_through): a regular file or a new name is replaced atomically
(beside a symlink's target, so the link stays), anything else is written in place. The CLI
cases run `python -m verify.study export` as a user does, on the committed cpu store of
task-support (export reads it when the working folder has none), in a subprocess whose working
folder is the test's own.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from verify import cli

ROOT = Path(__file__).resolve().parents[1]
STUDY = "task-support"
# This checkout's verify (and its committed stores), whatever the working folder.
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def export(cwd: Path, csv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verify.study", "export", STUDY, "--csv", csv], cwd=cwd,
                          env=ENV, capture_output=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def expected_csv(tmp_path_factory) -> bytes:
    """What export writes to a regular file: what every other target must receive."""
    cwd = tmp_path_factory.mktemp("regular")
    done = export(cwd, str(cwd / "runs.csv"))
    assert done.returncode == 0, done.stderr
    data = (cwd / "runs.csv").read_bytes()
    assert data.startswith(b"key,status,error") and data.count(b"\n") > 10
    return data


class Reader(threading.Thread):
    """Reads a FIFO (opened by name) or a pipe's read end to its end, as another program would."""

    def __init__(self, source: Path | int):
        super().__init__(daemon=True)
        self.source, self.data = source, None

    def run(self):
        with open(self.source, "rb") as f:
            self.data = f.read()


def full_device(tmp_path: Path) -> Path:
    """A device whose writes fail with ENOSPC. As root, a node of its own in tmp_path (c 1 7),
    so that code which replaces its target (the fault under test) cannot take the machine's
    /dev/full; otherwise /dev/full, which a user cannot replace."""
    if os.geteuid() == 0:
        node = tmp_path / "full"
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except OSError as e:
            pytest.skip(f"cannot make a full device here: {e}")
        return node
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    return Path("/dev/full")


def one_error_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert text.count("\n") == 1 and "Traceback" not in text, text
    return text


# --- the decision ---------------------------------------------------------------------------

def test_only_a_regular_file_or_a_new_name_is_replaced(tmp_path):
    (tmp_path / "file").write_text("x")
    os.symlink("file", tmp_path / "link")
    os.symlink("nowhere", tmp_path / "dangling")
    os.mkfifo(tmp_path / "fifo")
    for name in ("file", "link", "dangling", "new"):
        assert not cli.writes_through(tmp_path / name), name
    for path in (tmp_path / "fifo", Path(os.devnull), tmp_path):
        assert cli.writes_through(path), path


# --- cli's writers, in this process ---------------------------------------------------------------

def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    reader.start()
    cli.write_text_atomic(fifo, "a,b\n1,2\n")
    reader.join(10)
    assert reader.data == b"a,b\n1,2\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]  # no temporary file


def test_a_symlink_stays_a_link_and_its_target_is_replaced(tmp_path):
    target = tmp_path / "data" / "real.csv"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    os.symlink(target, link)
    cli.write_text_atomic(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    os.symlink("made.csv", tmp_path / "dangling.csv")  # relative, dangling: its target is created
    cli.write_text_atomic(tmp_path / "dangling.csv", "made\n")
    assert (tmp_path / "dangling.csv").is_symlink() and (tmp_path / "made.csv").read_text() == "made\n"


def test_an_interrupted_write_leaves_the_old_regular_file(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), cli.atomic_path(path) as tmp:
        tmp.write_text("half")
        raise KeyboardInterrupt
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv"]
    inode = path.stat().st_ino
    cli.write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_ino != inode  # replaced, not rewritten


def test_a_failed_write_is_one_usage_error_that_names_the_target(tmp_path):
    device = full_device(tmp_path)
    with pytest.raises(cli.UnwritableError, match=f"cannot write '{device}': No space left on device"):
        cli.write_text_atomic(device, "x" * 100_000)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    with pytest.raises(cli.UnwritableError, match="Is a directory"):
        cli.write_text_atomic(tmp_path, "x")
    with pytest.raises(OSError):  # still an OSError, for callers that can do without the file
        cli.write_text_atomic(tmp_path / "no" / "such" / "folder.csv", "x")


def test_stdout_is_refused_for_an_output_written_by_path():
    with pytest.raises(cli.UsageError, match="stdout"), cli.atomic_path("-"):
        pass


def test_a_line_log_opens_a_fifo_once(tmp_path):
    """steps_to_fit --out: a FIFO opened for each line would end its reader after the first."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    reader.start()
    log = cli.LineLog(fifo)
    for i in range(3):
        log.write(f'{{"point": {i}}}')
    log.close()
    reader.join(10)
    assert reader.data == b'{"point": 0}\n{"point": 1}\n{"point": 2}\n'


def test_a_line_log_on_a_full_device_is_a_usage_error(tmp_path):
    log = cli.LineLog(full_device(tmp_path))
    with pytest.raises(cli.UnwritableError, match="No space left on device"):
        log.write("x")
    with pytest.raises(cli.UnwritableError):
        log.close()


# --- verify.study export, as a user runs it -------------------------------------------------------

def test_export_to_a_fifo(tmp_path, expected_csv):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    reader.start()
    done = export(tmp_path, str(fifo))
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert reader.data == expected_csv
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_to_a_dev_fd_pipe(tmp_path, expected_csv):
    """`--csv >(wc -c)`: the shell passes /dev/fd/N, the write end of a pipe."""
    read_end, write_end = os.pipe()
    reader = Reader(read_end)
    reader.start()
    try:
        done = export(tmp_path, f"/dev/fd/{write_end}", pass_fds=(write_end,))
    finally:
        os.close(write_end)
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert reader.data == expected_csv


def test_export_through_a_symlink(tmp_path, expected_csv):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    os.symlink(target, tmp_path / "link.csv")
    done = export(tmp_path, "link.csv")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "link.csv").is_symlink() and target.read_bytes() == expected_csv


def test_export_to_stdout(tmp_path, expected_csv):
    done = export(tmp_path, "-")
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected_csv  # the CSV alone: the count goes to stderr
    assert b"runs written to stdout" in done.stderr
    assert not (tmp_path / "-").exists()
    done = export(tmp_path, "./-")  # a file that happens to be named -
    assert done.returncode == 0 and (tmp_path / "-").read_bytes() == expected_csv


def test_export_to_a_full_device(tmp_path):
    device = full_device(tmp_path)
    done = export(tmp_path, str(device))
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert f"cannot write '{device}': No space left on device" in line and b"written" not in done.stdout
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_export_to_stdout_on_a_full_device(tmp_path):
    device = full_device(tmp_path)
    with open(device, "wb") as stdout:
        done = subprocess.run([sys.executable, "-m", "verify.study", "export", STUDY, "--csv", "-"],
                              cwd=tmp_path, stdout=stdout, stderr=subprocess.PIPE, timeout=120,
                              env=ENV)
    assert done.returncode == 2
    assert "cannot write stdout: No space left on device" in one_error_line(done.stderr)


def test_export_to_a_folder(tmp_path):
    done = export(tmp_path, str(tmp_path))
    assert done.returncode == 2
    assert f"cannot write '{tmp_path}': Is a directory" in one_error_line(done.stderr)


def test_a_figures_files_in_its_folder_are_written_through(tmp_path):
    """paper_figures --out DIR: a figure's PNG that is a symlink stays one, and its JSON that
    is a FIFO gets the JSON (the writers of bound, sgd and sweep go through the same atomic_path)."""
    from paper_figures.common import FigureResult, new_figure, save

    elsewhere = tmp_path / "kept" / "fig.png"
    elsewhere.parent.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(elsewhere, out / "fig.png")
    os.mkfifo(out / "fig.json")
    reader = Reader(out / "fig.json")
    reader.start()
    figure, _ = new_figure()
    save(FigureResult("fig", figure, [dict(x=1.0, y=2.0)], {}), out)
    reader.join(10)
    assert (out / "fig.png").is_symlink() and elsewhere.read_bytes().startswith(b"\x89PNG")
    assert stat.S_ISFIFO(os.lstat(out / "fig.json").st_mode) and b'"figure": "fig"' in reader.data
