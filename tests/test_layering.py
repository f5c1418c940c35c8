"""The import graph flows one way: theory ← constructions.tasks ← constructions ← verify (cli) ←
verify.theorem ← verify.learning ← verify.studies ← verify.images ← paper_figures. Read from the
source (ast), so a wrong-way import fails here, not in a user's circular-import traceback.

The theorem's checks (verify.theorem: bound, check, measure, …) know nothing of training or
studies; the command-line entry points `verify.sgd` and `verify.study` are thin modules that
only call into verify.learning and verify.studies, and verify.bench times both sides. The
theorem's old module names (verify.bound, verify.measure, …) are aliases of verify.theorem's
modules, kept for `python -m verify.bound` and a user's imports; no project module imports them.

Inside verify.studies, the command line (verify.studies.commands, run by the `verify.study` entry
point) sits on top: no other module of the package imports it, and no module imports another of
the package inside a function to dodge an import cycle (the few lazy imports that keep a light
module light are listed, each with its reason)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEARNING_AND_STUDIES = {"verify.learning", "verify.studies", "verify.sgd", "verify.study", "verify.bench",
                        "verify.kernel"}
# The theorem's checks, in verify/theorem/; each keeps its old name as an alias (verify/NAME.py).
THEOREM = ("bound", "check", "measure", "instance", "exact_sup", "exact_checks", "sweep", "report", "presets")
OLD_NAMES = {f"verify.{name}" for name in THEOREM}
# The ones that are entry points (python -m verify.NAME runs the module's main()).
THEOREM_ENTRY_POINTS = ("bound", "exact_sup", "sweep")
# Each layer, innermost first: the packages its modules may import from this project, and
# the ones inside those that they may not.
LAYERS = [
    ("theory", {"theory"}, set()),
    ("constructions/tasks", {"theory", "constructions.tasks"}, set()),
    ("constructions", {"theory", "constructions"}, set()),
    # verify/cli.py (and the package's __init__): under every command line.
    ("verify", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES | {"verify.images", "verify.theorem"} | OLD_NAMES),
    ("verify/theorem", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES | {"verify.images"} | OLD_NAMES),
    ("verify/learning", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES - {"verify.learning"} | {"verify.images"} | OLD_NAMES),
    # The task families sit under the training loop and verify.sgd, which ask them for
    # everything family-specific: they may use the metrics, never the loop or the CLI.
    ("verify/learning/families", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES - {"verify.learning"}
     | {"verify.images", "verify.learning.sgd_program", "verify.learning.train", "verify.learning.pack",
        "verify.learning.speed"} | OLD_NAMES),
    # The certification of trained students (verify.certify): it reads the learning side's students
    # and splits, never the studies or the entry points.
    ("verify/certify", {"theory", "constructions", "verify"},
     {"verify.studies", "verify.study", "verify.sgd", "verify.bench", "verify.kernel", "verify.images"}
     | OLD_NAMES),
    ("verify/studies", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES - {"verify.learning", "verify.studies"} | {"verify.images"} | OLD_NAMES),
    # The image experiment sits beside the studies: it may use the learning side and the
    # studies' provenance helpers, never the entry points.
    ("verify/images", {"theory", "constructions", "verify"},
     {"verify.sgd", "verify.study", "verify.bench"} | OLD_NAMES),
    ("paper_figures", {"theory", "constructions", "verify", "paper_figures"}, OLD_NAMES),
]
# The entry points and the benchmark, which reach into the learning side on purpose, and the
# theorem's old names (test_the_old_names_are_aliases).
ENTRY_POINTS = {"verify/sgd.py", "verify/study.py", "verify/bench.py", "verify/kernel.py"} \
    | {f"verify/{name}.py" for name in THEOREM}
PROJECT = ("theory", "constructions", "verify", "paper_figures", "tests")


def project_imports(path: Path) -> set[str]:
    """Every module of this project that the file imports, anywhere in it (`from a import b`
    gives a and a.b: b may be a module, as in `from verify.theorem import presets`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level
                 else [])
        found |= {n for n in names if n.split(".")[0] in PROJECT}
    return found


def allowed(module: str, prefixes: set[str], forbidden: set[str] = frozenset()) -> bool:
    def under(ps):
        return any(module == p or module.startswith(p + ".") for p in ps)
    return under(prefixes) and not under(forbidden)


@pytest.mark.parametrize("folder, may_import, may_not", LAYERS, ids=[f for f, _, _ in LAYERS])
def test_each_layer_imports_only_the_layers_below_it(folder, may_import, may_not):
    files = [p for p in sorted((ROOT / folder).glob("*.py")) if str(p.relative_to(ROOT)) not in ENTRY_POINTS]
    assert files, folder
    wrong = {f"{p.relative_to(ROOT)} imports {m}" for p in files for m in project_imports(p)
             if not allowed(m, may_import, may_not)}
    assert not wrong, sorted(wrong)


def test_every_package_is_in_a_layer():
    packages = {str(p.parent.relative_to(ROOT)) for top in PROJECT[:-1]
                for p in (ROOT / top).rglob("__init__.py")}
    assert packages == {folder for folder, _, _ in LAYERS}


def test_the_entry_points_are_thin():
    """verify.sgd and verify.study hold no code of their own: a main() they import."""
    for name in ("verify/sgd.py", "verify/study.py", "verify/kernel.py"):
        tree = ast.parse((ROOT / name).read_text())
        defined = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        assert not defined, name


def test_the_old_names_are_aliases():
    """verify/NAME.py for each of the theorem's checks holds no code: it imports
    verify.theorem.NAME and stands for it (the same module object), or, for an entry point, runs
    its main()."""
    import importlib

    for name in THEOREM:
        path = ROOT / "verify" / f"{name}.py"
        tree = ast.parse(path.read_text())
        defined = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        assert not defined, path
        imported = project_imports(path) - {"verify", "verify.cli"}
        assert imported == {"verify.theorem", f"verify.theorem.{name}"}, path
        assert importlib.import_module(f"verify.{name}") is importlib.import_module(f"verify.theorem.{name}")
        runs_main = "main()" in path.read_text()
        assert runs_main == (name in THEOREM_ENTRY_POINTS), path


def test_the_check_catches_a_wrong_way_import(tmp_path):
    layer = {folder: (may_import, may_not) for folder, may_import, may_not in LAYERS}
    bad = tmp_path / "bad.py"

    def refused(line: str, folder: str) -> bool:
        bad.write_text(line + "\n")
        return not all(allowed(m, *layer[folder]) for m in project_imports(bad))

    assert refused("from verify.cli import UsageError", "constructions/tasks")
    assert refused("from verify.studies.store import RunStore", "verify/learning")
    assert refused("from verify.learning.metrics import rmse", "verify/theorem")
    assert refused("from verify.theorem.measure import measure_sup_error", "verify")
    assert refused("from verify.measure import measure_sup_error", "verify/learning")  # the old name
    assert refused("from verify import presets", "verify/learning")
    assert not refused("from verify.theorem import presets", "verify/learning")


# ----------------------------------------------------------------------------- inside verify.studies

STUDIES = "verify/studies"
CLI = "verify.studies.commands"
# Function-local imports of another verify.studies module that are not there to break a cycle,
# each with its reason; any other one fails test_no_import_inside_a_function_dodges_a_cycle.
LAZY_STUDIES_IMPORTS = {
    # grids is loaded by every run (execution, provenance); the study analyses (verdicts, with
    # numpy, and the interfaces they satisfy) are loaded only when a study is read, and are not
    # result code (tests/test_images_study.py checks what a run loads).
    ("verify/studies/grids.py", "verify.studies.verdicts"): "keeps a run's imports to result code",
    ("verify/studies/grids.py", "verify.studies.interfaces"): "keeps a run's imports to result code",
}


def _named_modules(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules an import statement names (`from a import b` names a and a.b: b may be a module)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if node.level or not node.module:
        return set()
    return {node.module} | {f"{node.module}.{a.name}" for a in node.names}


def studies_imports(path: Path, *, in_functions: bool = False) -> set[str]:
    """The verify.studies modules the file imports: anywhere, or only inside function bodies (a
    name imported from one, verify.studies.store.RunStore, counts as its module)."""
    tree = ast.parse(path.read_text())
    scopes = ([n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
              if in_functions else [tree])
    return {m for scope in scopes for node in ast.walk(scope) if isinstance(node, ast.Import | ast.ImportFrom)
            for m in _named_modules(node) if m.startswith("verify.studies.")
            for m in [".".join(m.split(".")[:3])]}


def _studies_modules() -> list[Path]:
    """The studies room, and the report modules it loads from other rooms (a program's report)."""
    return sorted((ROOT / STUDIES).glob("*.py")) + [ROOT / "verify" / "images" / "study_report.py"]


def test_only_the_entry_point_imports_the_study_command_line():
    """verify.studies.commands is the command line: the registry of programs, the study files
    and the stores' status live below it (grids, status), so nothing in verify.studies imports it."""
    wrong = sorted(str(p.relative_to(ROOT)) for p in _studies_modules()
                   if p.name != "commands.py" and CLI in studies_imports(p))
    assert not wrong, f"import {CLI}: {wrong}"


def test_no_import_inside_a_function_dodges_a_cycle():
    wrong = sorted(f"{p.relative_to(ROOT)} imports {m} inside a function" for p in _studies_modules()
                   for m in studies_imports(p, in_functions=True)
                   if (str(p.relative_to(ROOT)), m) not in LAZY_STUDIES_IMPORTS)
    assert not wrong, wrong


def test_the_lazy_imports_listed_are_still_there():
    """An allowance that no longer matches an import is dropped from LAZY_STUDIES_IMPORTS."""
    for path, module in LAZY_STUDIES_IMPORTS:
        assert module in studies_imports(ROOT / path, in_functions=True), (path, module)


def test_the_studies_checks_catch_a_cli_import_and_a_local_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from verify.studies import commands as driver\n")
    assert CLI in studies_imports(bad)
    bad.write_text("def f():\n    from verify.studies.commands import PROGRAMS\n    return PROGRAMS\n")
    assert studies_imports(bad, in_functions=True) == {CLI}
    bad.write_text("import ray\nfrom verify.studies import store\n\ndef f():\n    import torch\n")
    assert studies_imports(bad, in_functions=True) == set()
