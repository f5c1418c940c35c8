"""What every command line of this toolkit shares: its argument parser, its validators,
its exit codes, atomic output files, threads and progress bars.

Exit codes (every CLI):
  0    every check holds
  1    a bound or check is violated, and nothing else
  2    usage error: one line on stderr, before any work starts
  3    an internal error (a bug): the traceback, then one line asking for a report
  130  interrupted (Ctrl-C): one line, no traceback, no half-written output file
A closed stdout (`| head -1`) is not an error: the work goes on and the exit code keeps
its meaning. Nor is a stdout or stderr that cannot encode ε, √ or × (PYTHONIOENCODING=ascii):
those characters are written as backslash escapes.

This module imports neither torch nor scipy, so `--help` and usage errors answer at once;
each CLI imports its heavy modules after its arguments have been read. `--help`, median of 3 on
one machine, before that rule and after: verify.bound 2.49 s → 0.18 s, verify.sweep 3.26 →
0.17, verify.sgd 2.29 → 0.08, verify.bench 2.49 → 0.06, paper_figures 3.16 → 0.06.

What every CLI promises through it (tests/test_promises.py runs each as a user does):
- Bad input is found before the work. Every flag has a range (seeds in [0, 2³²), fractions in
  (0, 1), --weight-decay ≥ 0, --repeats ≥ 1, …); devices, output folders (not an existing
  file, creatable, writable) and sizes (memory, the 2⁴⁰-knot limit, the float64 floor) are
  checked before anything is built, trained or measured. A message names the flag and what
  would help, e.g. `verify.bound --eps -1e-3`: "argument --eps: expected a positive finite
  number, got '-1e-3'"; `verify.bound --save results` where results/ holds an earlier run:
  "--save 'results' already holds files (report.json); pass --force to replace them, or choose
  a new folder" (verify/theorem/check.py has the size refusals).
- Output files are never half-written. Every file (network.pt, teacher.npz, report.json,
  sweep.csv/.json, checkpoints, effects.md/.csv, runs.csv, each figure's PNG/PDF/CSV/JSON) is
  written under a temporary name in its folder and renamed when complete. Ctrl-C at any moment
  leaves complete files or none, and no temporary ones. Only a regular file (or a new name) is
  replaced so: a FIFO, a device or a /dev/fd/N pipe is written in place, and a symlink stays a
  link whose target is written (atomically when that is a regular file). `-` as a file flag's
  value (export --csv, steps_to_fit --out) is stdout. A target that cannot be written (a full
  device, a folder, no permission) is a usage error: one line naming it and why, exit 2.
- Results are not overwritten by accident. --save DIR (bound, sgd) wants a new or empty
  folder, or --force. --out DIR (sweep, figures) is the tool's own folder and its files are
  replaced; paper_figures --quick has its own, paper_figures/preview/.
- Progress bars (tqdm, with rate and ETA) go to stderr on a terminal only. Off a terminal (nohup,
  CI, a log file) a long loop (a study's runs, a training's steps) prints instead one plain line
  at most every HEARTBEAT_SECONDS of wall time ("run 9 of 36, 5:02 elapsed, ETA 15:06";
  COMPGEN_HEARTBEAT_SECONDS sets the interval, 0 a line per update); --no-progress turns both off.
  A resumed training says so ("resumed at step N"), and a study's Ctrl-C line says how to resume.
- Threads: every CLI has --threads N. torch's default (one thread per core) is the wrong choice
  on a busy machine: its threads spin while they wait for a core. The default is therefore one
  thread, except for work large enough for threads to pay off (verify.bound with I·H ≥ 64, an
  SGD step of ≥ 5e7 multiply-adds, the bench's dense forward), which gets the cores the
  1-minute load average leaves free (`default_threads`). Measured on a 2-core machine, idle and
  with two busy-looping processes beside it (wall seconds):

      command                              idle: 1 thread   2   default   busy: 1 thread    2   default
      verify.bound (M = 32, ε = 1e-3)                 6.5  5.3      6.9             13.0  14.7     12.7
      verify.sweep (3 ε × 2 M)                        4.5  4.6      4.9              7.3  11.9      8.8
      verify.sgd (default)                           59.8 43.6     62.3            102.1 286.5    102.5

  Before this rule every CLI but the figures ran on torch's 2 threads; on the busy machine that
  cost 21.7 s against 13.6 s on one thread (verify.bound), 50.2 against 8.4 s (a 2 ε × 2 M
  sweep) and 465 against 86 s (verify.sgd). The default gives up at most 1.4× on an idle
  machine (the load average still counts the last minute's work, so right after other work it
  picks one thread) and never loses the 3–6× of a busy one; --threads 2 takes the idle speed-up
  when the cores are known to be free. Results do not depend on the thread count beyond
  float64 rounding (parallel sums add in another order); --threads 1 reproduces a run bit for
  bit.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import secrets
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

EXIT_OK, EXIT_VIOLATED, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
GIB = 2**30
# Seeds feed numpy's SeedSequence and torch.manual_seed, and the code derives seed + 1, + 2,
# ... from them: keep them in [0, 2³²) so every derived seed is valid for both.
MAX_SEED = 2**32 - 1


class UsageError(Exception):
    """Bad input: reported on one line with exit code 2."""


class UnwritableError(UsageError, OSError):
    """An output that cannot be written (a full device, a folder, no permission): a usage
    error, one line naming it and why, and still an OSError for the callers that can do
    without their file (behaviour's replay cache)."""


# The metavars of the flags whose values are paths (or, for SPEC, hold one): an empty value
# is refused for each (Parser._get_values). A new path flag gets the rule by its metavar.
PATH_METAVARS = frozenset({"DIR", "FILE", "FOLDER", "MODEL", "README", "RESULTS.json", "SPEC"})


class Parser(argparse.ArgumentParser):
    """argparse whose errors raise UsageError (one line, exit 2), and which reads
    '--eps -1e-3' as a value, so the validator can say what is allowed."""

    def __init__(self, prog: str, description: str | None = None, **kw):
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(prog=prog, description=description, **kw)

    def error(self, message):
        raise UsageError(message)

    def _get_values(self, action, arg_strings):
        # An empty path ('--save ""', a shell variable that was not set) named no folder and was
        # silently ignored, or read as the working folder: refuse it for every path flag.
        if action.metavar in PATH_METAVARS and "" in arg_strings:
            raise argparse.ArgumentError(action, "expected a file or folder name, got ''")
        return super()._get_values(action, arg_strings)

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_args(_glue_negative_numbers(args), namespace)


def _glue_negative_numbers(argv: list[str]) -> list[str]:
    """argparse reads '--eps -1e-3' as two options; glue it to '--eps=-1e-3'. For a flag
    with several values ('--seeds 0 -1') the negative one is kept apart but made visible
    to argparse as a value by the same rule."""
    out: list[str] = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _is_number(token) \
                and token.startswith("-"):
            out[-1] = f"{out[-1]}={token}"
            continue
        out.append(token)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --- validators: argparse `type=` functions, each names what it expects -----------------

def positive_int(text: str) -> int:
    value = _int(text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text, "an integer ≥ 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}")
    return value


def seed(text: str) -> int:
    value = _int(text, f"a seed in [0, {MAX_SEED}]")
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, {MAX_SEED}], got {text!r}")
    return value


class Distinct(argparse.Action):
    """A flag of several values (nargs="+") whose values must differ: `--seed 0 0` ran one
    seed without a word; now it is a usage error naming the repeated value."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = set()
        for value in values:
            if value in seen:
                raise argparse.ArgumentError(self, f"{value!r} is given twice; give each value once")
            seen.add(value)
        setattr(namespace, self.dest, values)


def positive_float(text: str) -> float:
    value = _float(text, "a positive finite number")
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text, "a finite number ≥ 0")
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number ≥ 0, got {text!r}")
    return value


def open_fraction(text: str) -> float:
    """A fraction strictly between 0 and 1 (a held-out share, say)."""
    value = _float(text, "a number strictly between 0 and 1")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number strictly between 0 and 1, got {text!r}")
    return value


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def add_json(p: argparse.ArgumentParser, what: str = "the report") -> None:
    """--json: print `what` as JSON (one document on stdout) instead of text."""
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def add_common(p: argparse.ArgumentParser, *, threads_default: str) -> None:
    """The flags every CLI has: --threads and --no-progress."""
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help=f"torch threads (default: {threads_default})")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


TEACHER_SIZE_HELP = dict(M="number of modules", K="max active modules per task, K ≤ M", I="input size",
                         H="teacher hidden size", O="output size")


def add_teacher_flags(p: argparse.ArgumentParser, defaults: dict, *, encodings: Sequence[str] | None = None,
                      encoding_help: str = "task encoding e(z)", strict_names: bool = False,
                      with_seed: bool = True) -> None:
    """The hyperteacher's flags, with this CLI's defaults: --M --K --I --H --O (defaults[name]
    each), --weights and --encoding (defaults["weights"], defaults["encoding"]; discrete and
    identity when not given) and, with_seed, --seed (default 0).

    With strict_names argparse itself refuses a weight or encoding name outside the lists
    (choices); otherwise the help shows the lists and the CLI's own check refuses a wrong name
    with its message (verify.bound.check_teacher_and_construction). `encodings` defaults to the
    teacher's own (ENCODINGS)."""
    # Imported here: a program with no teacher (verify.images) loads no task names.
    from constructions.tasks.task_names import ENCODINGS, WEIGHTS

    encodings = ENCODINGS if encodings is None else encodings
    for name, what in TEACHER_SIZE_HELP.items():
        p.add_argument(f"--{name}", type=positive_int, default=defaults[name],
                       help=f"{what} (default {defaults[name]})")
    for flag, names, what, fallback in (("weights", WEIGHTS, "weights of active modules", "discrete"),
                                        ("encoding", encodings, encoding_help, "identity")):
        default = defaults.get(flag, fallback)
        listed = dict(choices=names) if strict_names else dict(metavar="{" + ",".join(names) + "}")
        p.add_argument(f"--{flag}", default=default, **listed, help=f"{what} (default {default})")
    if with_seed:
        p.add_argument("--seed", type=seed, default=0,
                       help="seed of the teacher and the measurement (default 0)")


# --- a program's run as a study runs it -------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RunPlace:
    """Where and how a study runs one run of a program: on `device`, one thread, no progress
    bars, writing into `run_dir` (checkpoints, a saved model), checkpointing every
    `checkpoint_minutes` (verify.sgd; None: its default), and logging to the tracker `log`
    (its --log values, e.g. ("tensorboard", DIR); empty: none) grouped by `log_group` (the
    study) and named after the run's folder, its key."""

    run_dir: str
    device: str = "cpu"
    checkpoint_minutes: float | None = None
    log: tuple[str, ...] = ()
    log_group: str | None = None

    @property
    def log_name(self) -> str:
        return Path(self.run_dir).name


def argv_of(parser: argparse.ArgumentParser, settings: dict) -> list[str]:
    """The parser's flags that set `settings` (by destination): a list value gives a flag
    of several values, a switch (a flag without a value) its flag when true and nothing when
    false. ValueError for a switch given anything but true or false."""
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    argv: list[str] = []
    for name, value in settings.items():
        action = actions[name]
        if action.nargs == 0:
            if not isinstance(value, bool):
                raise ValueError(f"parameter {name!r} is a switch: its value is true or false, not {value!r}")
            argv += [action.option_strings[-1]] * value
            continue
        argv += [action.option_strings[-1], *map(str, value if isinstance(value, list | tuple) else [value])]
    return argv


# --- output files ------------------------------------------------------------------------

def check_out_dir(path: str | os.PathLike, flag: str) -> Path:
    """What prepare_out_dir checks, without creating anything (for a parse that must leave no
    trace, as a study's resolving of many runs): not an existing file, and the nearest folder
    that exists above it is writable."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {str(out)!r} is an existing file, not a folder")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {str(out)!r} cannot be written (the folder {str(parent)!r} is not "
                         "writable)")
    return out


def prepare_out_dir(path: str | os.PathLike, flag: str, *, force: bool | None = None) -> Path:
    """Check, before any work, that `path` can be the folder a CLI writes into: not an
    existing file, creatable, writable. It is created here (an empty folder is all a
    failed run can leave). With `force` False (the --save rule), a folder that already
    holds files is refused; None (the --out rule) lets the CLI replace its own files."""
    out = check_out_dir(path, flag)
    if force is False and out.is_dir() and any(out.iterdir()):
        names = sorted(p.name for p in out.iterdir())
        shown = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
        raise UsageError(f"{flag} {str(out)!r} already holds files ({shown}); pass --force to "
                         "replace them, or choose a new folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise UsageError(f"{flag} {str(out)!r} cannot be written: {reason}") from None
    return out


# A file flag's value that means stdout. Only this string: Path("-") and "./-" name a file.
STDOUT = "-"


def is_stdout(target) -> bool:
    return isinstance(target, str) and target == STDOUT


def unwritable(target, error: OSError) -> UnwritableError:
    """The one-line error for an output that failed: its name and the system's reason."""
    name = "stdout" if is_stdout(target) else repr(os.fspath(target))
    return UnwritableError(f"cannot write {name}: {error.strerror or error}")


def writes_through(final: str | os.PathLike) -> bool:
    """Whether `final` must be written in place rather than replaced: it exists and is not
    a regular file once symlinks are followed (a FIFO, a character device, /dev/fd/N of a
    pipe, a folder). Renaming a file over it would put a plain file where a reader waits,
    or remove a device node."""
    try:
        return not stat.S_ISREG(os.stat(final).st_mode)
    except FileNotFoundError:  # a new name, or a link to one: created atomically
        return False


def replaced_name(final: Path) -> Path:
    """The name an atomic write renames onto: a symlink's target, so the link stays a link
    (a dangling one gets its target created); `final` itself otherwise."""
    return Path(os.path.realpath(final)) if os.path.islink(final) else final


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield the path to write `final` through. For a regular file or a new name: a
    temporary path beside it (beside a symlink's target), renamed to it only when the block
    finishes, so an interrupted or failed write leaves the old file (and no temporary one).
    For anything else (writes_through): `final` itself, written in place; a reader of a pipe
    may then get part of the output, as from any program stopped while it writes.
    An OSError of the block or the rename ends as UnwritableError (exit 2, one line)."""
    if is_stdout(final):
        raise UsageError("stdout ('-') cannot take this output: it is written by name (binary, or a "
                         "folder's file); give a file name")
    final = Path(final)
    try:
        if writes_through(final):
            yield final
        else:
            with _replacing(replaced_name(final)) as tmp:
                yield tmp
    except UnwritableError:
        raise
    except OSError as e:
        raise unwritable(final, e) from None


@contextlib.contextmanager
def _replacing(final: Path) -> Iterator[Path]:
    """A temporary path beside `final`, renamed to it when the block finishes. The
    temporary name keeps the suffix, for writers that read it. The file is fsynced before
    the rename and the folder after it, so a power cut or a killed machine leaves the old
    file or the whole new one, never an empty one (a rename alone can reach the disk before
    the data)."""
    # The name is chosen before the file exists, so a Ctrl-C at any point after this line
    # knows what to remove.
    tmp = final.parent / f".{final.stem}.{secrets.token_hex(6)}.partial{final.suffix}"
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # the umask applies
        yield tmp
        _fsync(tmp)
        os.replace(tmp, final)
        _fsync(final.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def plain(value):
    """JSON-able Python values: numpy scalars and arrays to numbers and lists, tuples to
    lists, non-finite floats to None (JSON has no Infinity or NaN)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy
        return plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def to_json(value, indent: int | None = 2) -> str:
    """Strict JSON (allow_nan=False) of `plain(value)`."""
    return json.dumps(plain(value), indent=indent, allow_nan=False)


def write_text_atomic(final: str | os.PathLike, text: str) -> Path | str:
    """`text` at `final` through atomic_path (replaced atomically, or written in place), or on
    stdout for STDOUT; returns `final` (a Path, or STDOUT)."""
    if is_stdout(final):
        write_stdout(text)
        return final
    with atomic_path(final) as path:
        path.write_text(text)
    return Path(final)


def write_stdout(text: str) -> None:
    """`text` on stdout, for a file flag's `-`. A closed pipe is what it is to emit (the rest
    is dropped, the work goes on); any other failure (stdout on a full device) is
    UnwritableError."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except OSError as e:
        _silence_stdout()  # the unwritten rest would fail again in the interpreter's final flush
        raise unwritable(STDOUT, e) from None


class LineLog:
    """Lines appended to a file flag's target as they come (`-`: stdout), for a log that
    must survive a crash midway and so cannot wait for an atomic rename. Opened once, here
    (before the work, so an unwritable target is refused first): a FIFO's reader then gets
    every line, not only those before the first close. Appended: a regular file keeps what
    earlier runs wrote."""

    def __init__(self, target: str | os.PathLike):
        self.target = target
        try:
            self._stream: TextIO = sys.stdout if is_stdout(target) else open(target, "a")
        except OSError as e:
            raise unwritable(target, e) from None

    def write(self, line: str) -> None:
        if is_stdout(self.target):
            write_stdout(line + "\n")
            return
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except OSError as e:
            raise unwritable(self.target, e) from None

    def close(self) -> None:
        if is_stdout(self.target):
            return
        try:
            self._stream.close()
        except OSError as e:
            raise unwritable(self.target, e) from None


# --- stdout, threads, progress -------------------------------------------------------------

def emit(text: str = "") -> None:
    """print() that survives a closed pipe: the rest of the output is dropped, the work
    and the exit code go on."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    # Point fd 1 at /dev/null so neither later prints nor the interpreter's final flush
    # raise again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def free_cores() -> int:
    """Cores this process may use, less the 1-minute load average of the machine (≥ 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return max(1, min(cores, math.floor(cores - load + 0.5)))


def default_threads(threads_pay: bool) -> int:
    """The measured default of every CLI's --threads: one thread unless the work is large
    enough for threads to pay off, and then no more than the cores left free by other
    work. On a busy 2-core machine a second thread made small runs 2–5× slower (torch's
    threads spin while they wait for a core); on an idle one it made large runs 1.5×
    faster (the module docstring has the measurements)."""
    return free_cores() if threads_pay else 1


def set_threads(n: int | None, default: int | None = None) -> int:
    """Set torch's intra-op threads to n, else to `default`, else leave torch's choice.
    Returns the number in use."""
    import torch

    if n is not None or default is not None:
        torch.set_num_threads(n if n is not None else default)
    return torch.get_num_threads()


def progress(total: int | None = None, desc: str = "", enabled: bool | None = None, **kw):
    """A tqdm bar on stderr with rate and ETA, shown only where stderr is a terminal
    (enabled None), always (True) or never (False)."""
    from tqdm.auto import tqdm

    disable = (not sys.stderr.isatty()) if enabled is None else not enabled
    return tqdm(total=total, desc=desc, disable=disable, leave=False, dynamic_ncols=True,
                file=sys.stderr, **kw)


# Off a terminal a long loop says where it is once per this many seconds of wall time: often
# enough that a log shows the run is alive, seldom enough that an hour's log stays short.
HEARTBEAT_SECONDS = 60.0
HEARTBEAT_ENV = "COMPGEN_HEARTBEAT_SECONDS"  # overrides it (tests set 0: a line per update)


def heartbeat_seconds() -> float:
    """The heartbeat's interval: $COMPGEN_HEARTBEAT_SECONDS when it is a number ≥ 0, else
    HEARTBEAT_SECONDS (a wrong value must not stop a long run)."""
    try:
        value = float(os.environ.get(HEARTBEAT_ENV, ""))
    except ValueError:
        return HEARTBEAT_SECONDS
    return value if math.isfinite(value) and value >= 0 else HEARTBEAT_SECONDS


class Heartbeat:
    """Plain lines on stderr where a tqdm bar cannot be seen (stderr is not a terminal):
    "{what}: {unit} k of n, elapsed, ETA[, note]", at most once per `every` seconds. `update(k)`
    takes the count done so far (not an increment) and costs one clock read when no line is
    due, so a training loop may call it every step. The ETA extrapolates this session's rate,
    from the count at `start` (a resumed run's earlier steps took no time here). With `tick`, a
    daemon thread also prints when the count stands still, so one long run of a study is not
    silent for its whole length. A disabled heartbeat (`every` None) prints nothing."""

    def __init__(self, total: int, what: str, unit: str, *, start: int = 0, every: float | None = None,
                 tick: bool = False):
        self.total, self.what, self.unit, self.every = total, what, unit, every
        self.k, self.start, self.note = start, start, ""
        self._began = self._printed = time.monotonic()
        self._lock, self._stop = threading.Lock(), threading.Event()
        if tick and every is not None:
            threading.Thread(target=self._tick, daemon=True).start()

    def update(self, k: int, note: str = "") -> None:
        """`k` done so far; `note` (the running loss, say) ends the line when one is printed."""
        self.k, self.note = k, note
        if self.every is not None and time.monotonic() - self._printed >= self.every:
            self._print()

    def close(self) -> None:
        self._stop.set()

    def _tick(self) -> None:
        # At least a second between checks: an interval of 0 (the tests') must not spin.
        while not self._stop.wait(max(self.every, 1.0)):
            if time.monotonic() - self._printed >= self.every:
                self._print()

    def _print(self) -> None:
        with self._lock:  # the ticker and the loop may both find a line due
            now = time.monotonic()
            self._printed = now
            _stderr(f"{self.what}: {self.unit} {self.k} of {self.total}, {clock(now - self._began)} elapsed, "
                    f"ETA {self._eta(now)}" + (f", {self.note}" if self.note else ""))

    def _eta(self, now: float) -> str:
        done = self.k - self.start
        # A count past its total (a budget in seconds that ran over) has nothing left: ETA 0:00.
        return clock((now - self._began) * max(0, self.total - self.k) / done) if done > 0 else "unknown"


def clock(seconds: float) -> str:
    """Seconds as tqdm writes them: m:ss, or h:mm:ss from an hour."""
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def heartbeat(total: int, what: str, enabled: bool | None = None, *, unit: str = "step", start: int = 0,
              tick: bool = False) -> Heartbeat:
    """The plain-line companion of `progress(total, what, enabled)`: it prints exactly where
    that bar is hidden by default, off a terminal (enabled None); a shown bar (a terminal, or
    True) or --no-progress (False) leave it silent."""
    on = enabled is None and not sys.stderr.isatty()
    return Heartbeat(total, what, unit, start=start, every=heartbeat_seconds() if on else None, tick=tick)


@contextlib.contextmanager
def counting(total: int, what: str, enabled: bool | None = None, *, unit: str = "step"
             ) -> Iterator[Callable[[int], None]]:
    """A tqdm bar where stderr is a terminal and a heartbeat where it is not, fed as one: the
    context gives `count(k)`, which takes the count done so far. For loops that report through
    a callback (the image training's steps, its generation's images)."""
    bar, beat = progress(total, what, enabled, unit=unit), heartbeat(total, what, enabled, unit=unit)

    def count(k: int) -> None:
        bar.update(k - bar.n)
        beat.update(k)

    try:
        yield count
    finally:
        bar.close()
        beat.close()


def note(line: str, enabled: bool | None = None) -> None:
    """One line of news on stderr (a resumed run), unless progress is off (False)."""
    if enabled is not False:
        _stderr(line)


# A note for the Ctrl-C line, from the work that knows how to resume (a study: how many of its
# runs are done); main_of clears it before and after the work.
_INTERRUPT_NOTES: list[Callable[[], str]] = []


@contextlib.contextmanager
def interrupt_note(note_of: Callable[[], str]) -> Iterator[None]:
    """While the block runs, a Ctrl-C line ends with `note_of()`, read when it is printed.
    Deliberately not a try/finally: the note is dropped when the block ends normally, and kept
    when an exception (the KeyboardInterrupt) leaves it, for main_of to print."""
    _INTERRUPT_NOTES.append(note_of)
    yield
    _INTERRUPT_NOTES.remove(note_of)


def _interrupt_tail() -> str:
    try:
        return "".join(f"; {note_of()}" for note_of in _INTERRUPT_NOTES[-1:])
    except Exception:  # the one line must come out whatever a note's state
        return ""


@contextlib.contextmanager
def phase(desc: str, enabled: bool | None = None) -> Iterator[None]:
    """A bar for a phase that has no natural count (building a network): it shows the
    phase's name and elapsed time on a terminal while it runs, redrawn every second by a
    daemon thread (tqdm only redraws on updates)."""
    with progress(1, desc, enabled, bar_format="{desc}: {elapsed}") as bar:
        done = threading.Event()
        if not bar.disable:
            def tick():
                while not done.wait(1.0):
                    bar.refresh()

            threading.Thread(target=tick, daemon=True).start()
        try:
            yield
            bar.update(1)
        finally:
            done.set()


# --- the one main ------------------------------------------------------------------------

def report_work(run: Callable[[object], dict], format_report: Callable[[dict], str]) -> Callable:
    """The `work` of a program whose run is one report: run the configuration, print the report
    (as JSON with its runtime's --json), exit 0."""
    def work(config) -> int:
        report = run(config)
        emit(to_json(report) if config.runtime.json else format_report(report))
        return EXIT_OK
    return work


def main_of(prog: str, parse: Callable[[list[str]], object], work: Callable[[object], int],
            argv: list[str] | None = None) -> int:
    """Parse, then work, and turn every way of ending into its exit code (see the module
    docstring). `parse` raises UsageError for bad input and must not start the work;
    `work` returns 0 or 1 and may raise UsageError for what only the work can find out."""
    interrupted, winding_down = _catch_every_interrupt(), False
    _INTERRUPT_NOTES.clear()  # a note left by an earlier main_of in this process (the tests)
    _tolerate_unencodable()
    try:
        args = parse(sys.argv[1:] if argv is None else list(argv))
        code = work(args)
        if interrupted.is_set():  # a Ctrl-C that Python swallowed (see _catch_every_interrupt)
            raise KeyboardInterrupt
        return code
    except UsageError as e:
        # --help cannot help with a full disk or a closed FIFO.
        _stderr(f"{prog}: error: {e}" + ("" if isinstance(e, UnwritableError) else " (see --help)"))
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Once interrupted, the process only winds down: a SIGINT tripped again before it
        # ends (seen in CI) would otherwise surface after main() as an unhandled
        # KeyboardInterrupt, and Python would end the process by the signal, not exit 130.
        winding_down = True
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        _stderr(f"{prog}: interrupted; no output file was left half-written{_interrupt_tail()}")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except MemoryError:
        _stderr(f"{prog}: internal error: ran out of memory although the sizes passed the memory "
                "check; please report this with the command line")
        return EXIT_INTERNAL
    except Exception:
        traceback.print_exc()
        _stderr(f"{prog}: internal error (a bug, not your input); please report the traceback above")
        return EXIT_INTERNAL
    finally:
        _INTERRUPT_NOTES.clear()
        if not winding_down:
            _restore_interrupts()


# Characters the help and the reports use (ε, √, ×, –, ≥, …, ², ·): a stream that cannot
# encode them (PYTHONIOENCODING=ascii, a C locale's terminal) writes them escaped.
_SAMPLE_TEXT = "ε√×–≥…²·→"


def _tolerate_unencodable() -> None:
    """Make stdout and stderr write what their encoding cannot represent as backslash escapes
    (`\u03b5`) instead of raising UnicodeEncodeError, which ended `--help` and every finished
    report on an ASCII stream as an internal error. Only a stream that would fail is changed,
    and only its error handler."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding or not hasattr(stream, "reconfigure"):
            continue
        try:
            _SAMPLE_TEXT.encode(encoding)
        except UnicodeEncodeError:
            with contextlib.suppress(OSError, ValueError):
                stream.reconfigure(errors="backslashreplace")
        except LookupError:
            pass


_SAVED_INTERRUPTS: list = []


def _catch_every_interrupt() -> threading.Event:
    """An Event set by every SIGINT, which still raises KeyboardInterrupt as Python's own
    handler does. Python swallows an exception raised while it runs a weakref callback or a
    __del__ (the garbage collector, during matplotlib's drawing, say), printing "Exception
    ignored in …" and going on: main_of then finds the Event set when the work returns and
    ends as interrupted, and the swallowed KeyboardInterrupt prints nothing (seen once in CI:
    a figure run that was sent Ctrl-C exited 0). Only in the main thread (where signals are
    delivered); restored when main_of returns other than by Ctrl-C."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        return interrupted

    def on_sigint(signum, frame):
        interrupted.set()
        raise KeyboardInterrupt

    previous_hook = sys.unraisablehook

    def unraisable(hook_args):
        if not issubclass(hook_args.exc_type, KeyboardInterrupt):
            previous_hook(hook_args)

    _SAVED_INTERRUPTS.append((signal.signal(signal.SIGINT, on_sigint), previous_hook))
    sys.unraisablehook = unraisable
    return interrupted


def _restore_interrupts() -> None:
    """Python's SIGINT handler and unraisable hook as they were before main_of (for callers
    that run several CLIs in one process: the tests)."""
    while _SAVED_INTERRUPTS:
        handler, hook = _SAVED_INTERRUPTS.pop()
        signal.signal(signal.SIGINT, handler)
        sys.unraisablehook = hook


def exit(code: int) -> None:
    """The end of `python -m <cli>`: sys.exit(code), except after Ctrl-C, where the
    interpreter's teardown is skipped (files are already whole): in CI a run that had
    printed its one line and returned 130 still ended by SIGINT during that teardown."""
    if code == EXIT_INTERRUPTED:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _stderr(line: str) -> None:
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def check_device(text: str) -> None:
    """UsageError unless training can run on `text` here (torch is imported only for a
    device other than the default cpu)."""
    if text == "cpu":
        return
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise UsageError(f"--device {text!r} is not a device name; use cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {text!r}: only cpu and cuda are supported")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {text}: no CUDA device is available here; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device {text}: there are only {torch.cuda.device_count()} CUDA devices here")
