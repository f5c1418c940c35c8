"""One run, or one pack of runs, of a study's program, in whatever process executes it (a Ray
worker, or the driver's own): its result with the code that made it and its behaviour record.
"""

from __future__ import annotations

import time
import traceback

from verify.cli import RunPlace, UsageError
from verify.studies import behaviour, provenance
from verify.studies.grids import DEFAULT_PROGRAM, PROGRAMS

# ----------------------------------------------------------------------------- one run

def _failure(e: BaseException, start: float, code: dict) -> dict:
    if isinstance(e, UsageError):  # a grid point the program cannot run (a split it cannot build, say)
        return dict(status="failed", error=str(e), seconds=time.perf_counter() - start, **code)
    tail = "".join(traceback.format_exception(e)[-3:]).strip()
    return dict(status="failed", error=f"{type(e).__name__}: {e}\n{tail}",
                seconds=time.perf_counter() - start, **code)


def run_pack(configs: list[dict], places: list[RunPlace]) -> list[dict]:
    """Runs of one student's shape (their keys' configurations) trained as one pack
    (verify.sgd.run_packed), each at its place, in whatever process executes it: run_one's
    result for each, in order. A pack fails as a whole (each of its runs stored as failed with
    the error); only Ctrl-C escapes."""
    code = dict(version=provenance.code_version(), fingerprint=provenance.code_fingerprint())
    from verify.learning import sgd_program as sgd

    start = time.perf_counter()
    try:
        reports = sgd.run_packed([sgd.from_key(c, p) for c, p in zip(configs, places, strict=True)])
        # Each run's record as a run of its own computes it: the code's behaviour, not the pack's.
        records = [behaviour.record(DEFAULT_PROGRAM, c) for c in configs]
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any failure is stored, and the study goes on
        return [_failure(e, start, code)] * len(configs)
    seconds = time.perf_counter() - start
    return [dict(status="done", report=r, seconds=seconds, behaviour=b, **code)
            for r, b in zip(reports, records, strict=True)]


def run_one(config: dict, place: RunPlace, program: str = DEFAULT_PROGRAM) -> dict:
    """One run of `program` (its key's configuration), in whatever process executes it (a Ray
    worker, or this one), at `place`. Returns {"status": "done", "report": …} or {"status":
    "failed", "error": …}, with the version and fingerprint of the code in this process (a
    Ray worker's own: a cluster node with other code is recorded as such) and the run's
    behaviour record (verify.studies.behaviour); only Ctrl-C escapes."""
    code = dict(version=provenance.code_version(), fingerprint=provenance.code_fingerprint(program))
    module = PROGRAMS[program].load()

    start = time.perf_counter()
    try:
        args = module.from_key(config, place)
        report = module.run(args)
        seconds = time.perf_counter() - start  # the run's own time, without its behaviour record's
        return dict(status="done", report=report, seconds=seconds,
                    behaviour=behaviour.record(program, config), **code)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any failure is stored, and the study goes on
        return _failure(e, start, code)
