"""One driver a study folder: `run` holds an exclusive lock on FOLDER/study.lock while it
works, so that a second driver into the same folder refuses in one line (exit 2), or with
--wait waits for the first to end, instead of training every run a second time beside it
(before this lock, two drivers each trained all of a folder's runs: `attempts 2` in the
store, and the run times of runs that shared their cores).

The lock is fcntl.flock, which the kernel drops when the holder's process ends, however it
ends: a lock file left by a driver killed with SIGKILL never blocks the next one. The holder
writes who it is (pid, host, start time, command) into the file, for the refusal to name; the
file itself stays (removing it would race with the next holder), empty when no one holds it.
The lock is not inherited by the processes a driver starts (Python opens files close-on-exec).
`report`, `export` and `list` only read the store and take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from verify.cli import UsageError

LOCK_NAME = "study.lock"


class FolderBusy(UsageError):
    """Another driver holds the study folder's lock (one line, exit 2)."""


@contextlib.contextmanager
def holding(folder: Path, command: str, *, wait: bool = False) -> Iterator[Path]:
    """Hold `folder`'s lock for the block (FolderBusy if another process holds it, unless
    `wait`: then wait for it); `command` names this holder to the others."""
    path = Path(folder) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _take(fd, path, wait)
        _write_holder(fd, command)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)  # while still held: an idle folder names no holder
    finally:
        os.close(fd)  # releases the lock


def _take(fd: int, path: Path, wait: bool) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    if not wait:
        raise FolderBusy(f"{path.parent} is in use by another driver ({holder(path)}), which holds "
                         f"{path}; let it finish, or pass --wait to start when it ends")
    print(f"verify.study: waiting for {path.parent}, in use by another driver ({holder(path)})",
          file=sys.stderr, flush=True)
    fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C interrupts the wait (PEP 475 retries only when no handler raises)


def _write_holder(fd: int, command: str) -> None:
    """Replace the file's note with this process's identity, in one write (a reader sees all of it or
    none)."""
    note = dict(pid=os.getpid(), host=socket.gethostname(), since=time.strftime("%Y-%m-%d %H:%M:%S %z"),
                command=" ".join(command.split()))  # one line, whatever the command held
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(note).encode(), 0)


def holder(path: Path) -> str:
    """Who holds the lock at `path`, as its note says (a holder that has just started may not
    have written it yet)."""
    try:
        note = json.loads(path.read_text())
        return f"pid {note['pid']} on {note['host']}, since {note['since']}: {note['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a driver that has not named itself yet"
