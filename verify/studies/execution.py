"""One run, or one pack of runs, of a study's program, in whatever process executes it (a Ray
worker, or the driver's own): its result with the code that made it and its behaviour record.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from verify.cli import UsageError
from verify.studies import behaviour, provenance
from verify.studies.grids import DEFAULT_PROGRAM, PROGRAMS

# ----------------------------------------------------------------------------- one run

def _run_argv(argv: tuple[str, ...], run_dir: str, device: str, checkpoint_minutes: float | None,
              program: str = DEFAULT_PROGRAM, log: tuple[str, ...] = ()) -> list[str]:
    """A run's command line as the driver runs it: quiet, one thread, on `device`, writing
    into run_dir (verify.sgd's checkpoints, verify.images.train's saved pipeline), and with
    `log` (the --log flags of a program that tracks) named by its folder, the run's key."""
    every = [] if checkpoint_minutes is None else ["--checkpoint-minutes", str(checkpoint_minutes)]
    tracked = [*log, "--log-name", Path(run_dir).name] if log else []
    return [*argv, "--no-progress", "--threads", "1", "--device", device,
            PROGRAMS[program].run_dir_flag, run_dir, *every, *tracked]


def _failure(e: BaseException, start: float, code: dict) -> dict:
    if isinstance(e, UsageError):  # a grid point the program cannot run (a split it cannot build, say)
        return dict(status="failed", error=str(e), seconds=time.perf_counter() - start, **code)
    tail = "".join(traceback.format_exception(e)[-3:]).strip()
    return dict(status="failed", error=f"{type(e).__name__}: {e}\n{tail}",
                seconds=time.perf_counter() - start, **code)


def run_pack(argvs: list[tuple[str, ...]], run_dirs: list[str], device: str = "cpu",
             checkpoint_minutes: float | None = None, log: tuple[str, ...] = ()) -> list[dict]:
    """Runs of one student's shape trained as one pack (verify.sgd.run_packed), in whatever
    process executes it: run_one's result for each, in order. A pack fails as a whole (each
    of its runs stored as failed with the error); only Ctrl-C escapes."""
    code = dict(version=provenance.code_version(), fingerprint=provenance.code_fingerprint())
    from verify.learning import sgd

    start = time.perf_counter()
    try:
        args = [sgd.parse_args(_run_argv(a, d, device, checkpoint_minutes, log=log))
                for a, d in zip(argvs, run_dirs, strict=True)]
        reports = sgd.run_packed(args)
        # Each run's record as a run of its own computes it: the code's behaviour, not the pack's.
        records = [behaviour.record(DEFAULT_PROGRAM, a) for a in argvs]
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any failure is stored, and the study goes on
        return [_failure(e, start, code)] * len(argvs)
    seconds = time.perf_counter() - start
    return [dict(status="done", report=r, seconds=seconds, behaviour=b, **code)
            for r, b in zip(reports, records, strict=True)]


def run_one(argv: tuple[str, ...], run_dir: str, device: str = "cpu",
            checkpoint_minutes: float | None = None, program: str = DEFAULT_PROGRAM,
            log: tuple[str, ...] = ()) -> dict:
    """One run of `program`, in whatever process executes it (a Ray worker, or this one),
    writing into run_dir. Returns {"status": "done", "report": …} or {"status":
    "failed", "error": …}, with the version and fingerprint of the code in this process (a
    Ray worker's own: a cluster node with other code is recorded as such) and the run's
    behaviour record (verify.studies.behaviour); only Ctrl-C escapes."""
    code = dict(version=provenance.code_version(), fingerprint=provenance.code_fingerprint(program))
    module = PROGRAMS[program].load()

    start = time.perf_counter()
    try:
        args = module.parse_args(_run_argv(argv, run_dir, device, checkpoint_minutes, program, log))
        report = module.run(args)
        seconds = time.perf_counter() - start  # the run's own time, without its behaviour record's
        return dict(status="done", report=report, seconds=seconds, behaviour=behaviour.record(program, argv),
                    **code)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any failure is stored, and the study goes on
        return _failure(e, start, code)
