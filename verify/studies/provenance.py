"""The code a stored result rests on: the project's version and a fingerprint of the modules
that train and score a run of a program (derived from its imports, not listed by hand).
verify.studies.behaviour decides whether a run made under another fingerprint still counts as
current.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
from pathlib import Path

from verify.studies.grids import DEFAULT_PROGRAM, PROGRAMS

# ----------------------------------------------------------------------------- the code a run rests on

PROJECT_PACKAGES = ("theory", "constructions", "verify", "paper_figures")
# The modules that determine a run's result are derived, not listed by hand: every project
# module the program's module (verify.learning.sgd_program for verify.sgd) imports (at module level
# or inside a function), followed transitively
# through the imports written in each module's source, with the packages' __init__ files
# (code_modules() below), so a module a refactor adds or moves is covered without an edit
# here. Today that is verify.learning (sgd, train, metrics, students, families),
# verify.theorem.measure (the sup error) and verify.theorem.presets;
# constructions.shallow, base, names (the construction each run is compared with) and
# constructions.tasks.hyperteacher, encodings, splits, names (teacher, encodings, splits);
# theory.bounds (the certificate). For verify.images.train it is verify.images (the denoiser,
# pipeline, recorder, probes, judge) with constructions.tasks.images and image_setups.
# tests/test_study.py checks that every project module a real run of each student loads is
# among them or below. The theorem's old module names (verify.measure, verify.presets, …) are
# aliases that no run imports, so they are not among them; were one imported, its file would be
# hashed and followed to the verify.theorem module it stands for (so they are not listed below,
# which would stop the walk there). These are left out, because they do not change a stored
# result once its configuration (what the key hashes) is fixed:
NOT_RESULT_CODE = {
    "verify.cli": "argument checks, output, atomic files, progress bars: what the parser "
                  "resolves is the configuration, and the key hashes it",
    "verify.studies.effects": "verify.sgd uses it only to average several seeds on its own command line",
    "verify.studies.commands": "the driver: what it passes a run is the configuration or a runtime setting",
    "verify.studies.grids": "study files and their expansion into configurations, which the key hashes",
    "verify.studies.provenance": "this fingerprint itself",
    "verify.studies.execution": "calls the program with the run's configuration and runtime settings",
    "verify.studies.engines": "where and in what order runs execute, not what they compute",
    "verify.studies.ray_cluster": "joining a Ray cluster",
    "verify.studies.store": "where results are kept, not how they are made",
    "verify.studies.behaviour": "judges whether the installed code reproduces a stored run's behaviour "
                                "record; it makes no result",
    "verify.images.results": "the analysis record's layout and provenance, not its numbers",
    "verify.images.study_report": "the image study's report (analyse's `report` command uses its "
                                  "statistics): it reads results, it makes none",
    "verify.studies": "the package's __init__, a docstring (verify.images.train keys its folder with "
                      "verify.studies.store)",
    "verify.certify": "with its submodules (NOT_RESULT_PACKAGES): verify.sgd calls it only under --certify, "
                      "a runtime setting no stored run has, and then only adds a bracket to a row; it "
                      "changes no number a run stores (so a certify tweak marks no store stale)",
}
# Entries of NOT_RESULT_CODE left out with every module under them, but for a root inside the package
# itself (module_fingerprint("verify.certify.ladder") keys a figure's cache on the certifier's code).
NOT_RESULT_PACKAGES = ("verify.certify",)


def left_out(name: str, root: str) -> bool:
    """Whether module `name` is left out of what `root` rests on (NOT_RESULT_CODE, NOT_RESULT_PACKAGES)."""
    for package in NOT_RESULT_PACKAGES:
        if name == package or name.startswith(package + "."):
            return not (root == package or root.startswith(package + "."))
    return name in NOT_RESULT_CODE
# The fingerprint hashes each module's source text, comments and docstrings included: an edit
# to a comment marks rows as made by other code though their numbers would not change. That
# errs on the side of rerunning, and is simpler and steadier than hashing a normalised syntax
# tree (whose form changes with the Python version).


def _source_file(name: str) -> Path | None:
    """The source file of project module `name` (a package's __init__.py), found from the
    top-level package's own location (the installed one, from a wheel) without importing it;
    None for a name that is not a project module (an attribute `from x import y` named)."""
    import importlib.util

    top, *rest = name.split(".")
    if top not in PROJECT_PACKAGES:
        return None
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return None
    base = Path(spec.origin).parent.joinpath(*rest)
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imported_names(source: str, name: str, is_package: bool) -> set[str]:
    """Every module name the source of module `name` imports, anywhere in it (a name from
    `from a import b` is given as both a and a.b: b may be a module)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = ".".join(package[:len(package) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


@functools.cache
def code_modules(program: str = DEFAULT_PROGRAM) -> dict[str, Path]:
    """The modules a run of `program` rests on (modules_from its module)."""
    return modules_from(PROGRAMS[program].module)


@functools.cache
def module_fingerprint(root: str) -> str:
    """The fingerprint of module `root` and every project module it imports, transitively
    (less NOT_RESULT_CODE): what a cache of its results is keyed by (paper_figures.common)."""
    return _digest(modules_from(root))


def _digest(modules: dict[str, Path]) -> str:
    digest = hashlib.sha256()
    for name, path in modules.items():
        digest.update(f"{name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


@functools.cache
def modules_from(root: str) -> dict[str, Path]:
    """The project modules `root` depends on (itself, what it imports, transitively, less
    NOT_RESULT_CODE and what is under NOT_RESULT_PACKAGES, see left_out), name → source file."""
    found: dict[str, Path] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in found or left_out(name, root):
            continue
        path = _source_file(name)
        if path is None:
            continue
        found[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b runs a/__init__
        todo += sorted(_imported_names(path.read_text(encoding="utf-8"), name, path.name == "__init__.py"))
    return dict(sorted(found.items()))


@functools.cache
def code_fingerprint(program: str = DEFAULT_PROGRAM) -> str:
    """SHA-256 over each module's name and the SHA-256 of its source text, for the modules a
    run of `program` depends on."""
    return _digest(code_modules(program))


@functools.cache
def code_version() -> str:
    """The project's version: the installed distribution's, else pyproject.toml's beside the package."""
    from importlib import metadata

    try:
        return metadata.version("compgen-bound")
    except metadata.PackageNotFoundError:
        pass
    try:
        text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    found = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
    return found.group(1) if found else "unknown"


def short(fingerprint: str | None) -> str:
    return "unknown" if fingerprint is None else fingerprint[:12]
