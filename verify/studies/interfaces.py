"""What the study side asks of the modules it runs and reads, declared once.

- A **program** (a study's `program:`, verify.sgd's verify.learning.sgd_program unless it names
  another; grids.PROGRAMS lists them) turns one grid point into a result, through a typed
  configuration of its own, a frozen dataclass that checks itself (verify.sgd's
  verify.learning.run_config.SgdRun, verify.kernel's kernel_vs_sgd.KernelRun,
  verify.images.train's verify.images.image_run.ImageRun; each built from a grid point
  directly, never through argv):
  `config_of(params)` (a grid point's configuration, refused in one line before any work),
  `run_config(config)` (the resolved settings a run's key hashes), `from_key(key, place)` (the
  configuration of a stored key, to run at a verify.cli.RunPlace, or with no place to
  replay), `run(config)` (the report, JSON-able), `command_line(config)` (its flags, for
  people) and, for the parameters a study may set, `build_parser` and `RUNTIME` (the flags
  that change no result). It may define `behaviour` (verify.studies.behaviour's record of a
  run: a few numbers any change to its training or scoring moves), `memory_bytes(config)` (a
  run's peak memory, which the Ray engine holds for it: verify.studies.engines), `own_parameters` (which
  of a grid point's parameters apply to its run) and `STUDY_PARAMETERS` (parameters that are
  not flags: verify.sgd's width and depth); a program that runs in packs (grids.Program.packs)
  defines `check_pack_grid(configs)`, its refusal of a grid it cannot pack.
- A **report** module (a program's `report`) reads a study's store back: `effects_table`,
  `write_table`, `format_markdown` and `export_csv`; it may define `format_compact` (the
  table → the README's block; verify.studies.summary's own lines otherwise).
- An **analysis** module (a study file's `analysis:`, e.g. width-vs-M's verify.studies.width)
  adds its own section below the effects table: `analyse_runs` (the done runs → plain data)
  and `format_analysis` (that data → markdown; `compact=True` for the README's block).

tests/test_study_interfaces.py holds every program, report and analysis module named in
grids.PROGRAMS and the study files to these protocols.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class StudyProgram(Protocol):
    RUNTIME: tuple[str, ...]

    def build_parser(self): ...

    def config_of(self, params: dict): ...

    def from_key(self, config: dict, place=None): ...

    def run_config(self, config) -> dict: ...

    def run(self, config) -> dict: ...

    def command_line(self, config) -> list[str]: ...


@runtime_checkable
class StudyReport(Protocol):
    def effects_table(self, study: str, scale: str, out: Path, keys: set[str] | None = None,
                      fingerprint: str | None = None) -> dict: ...

    def write_table(self, table: dict, out: Path) -> None: ...

    def format_markdown(self, table: dict) -> str: ...

    def export_csv(self, out: Path, path: Path | str) -> int: ...


@runtime_checkable
class StudyAnalysis(Protocol):
    def analyse_runs(self, runs: list[dict]) -> dict: ...

    def format_analysis(self, analysis: dict, compact: bool = False) -> str: ...
