"""The import graph flows one way: theory ← constructions.tasks ← constructions ← verify ←
verify.learning ← verify.studies ← verify.images ← paper_figures. Read from the source (ast), so a
wrong-way import fails here, not in a user's circular-import traceback.

Inside verify, the theorem's checks (bound, check, measure, …) know nothing of training or
studies; the command-line entry points `verify.sgd` and `verify.study` are thin modules that
only call into verify.learning and verify.studies, and verify.bench times both sides."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEARNING_AND_STUDIES = {"verify.learning", "verify.studies", "verify.sgd", "verify.study", "verify.bench",
                        "verify.kernel"}
# Each layer, innermost first: the packages its modules may import from this project, and
# the ones inside those that they may not.
LAYERS = [
    ("theory", {"theory"}, set()),
    ("constructions/tasks", {"theory", "constructions.tasks"}, set()),
    ("constructions", {"theory", "constructions"}, set()),
    ("verify", {"theory", "constructions", "verify"}, LEARNING_AND_STUDIES | {"verify.images"}),
    ("verify/learning", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES - {"verify.learning"} | {"verify.images"}),
    # The task families sit under the training loop and verify.sgd, which ask them for
    # everything family-specific: they may use the metrics, never the loop or the CLI.
    ("verify/learning/families", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES - {"verify.learning"}
     | {"verify.images", "verify.learning.sgd_program", "verify.learning.train", "verify.learning.pack",
        "verify.learning.speed"}),
    ("verify/studies", {"theory", "constructions", "verify"},
     LEARNING_AND_STUDIES - {"verify.learning", "verify.studies"} | {"verify.images"}),
    # The image experiment sits beside the studies: it may use the learning side and the
    # studies' provenance helpers, never the entry points.
    ("verify/images", {"theory", "constructions", "verify"}, {"verify.sgd", "verify.study", "verify.bench"}),
    ("paper_figures", {"theory", "constructions", "verify", "paper_figures"}, set()),
]
# The entry points and the benchmark, which reach into the learning side on purpose.
ENTRY_POINTS = {"verify/sgd.py", "verify/study.py", "verify/bench.py", "verify/kernel.py"}
PROJECT = ("theory", "constructions", "verify", "paper_figures", "tests")


def project_imports(path: Path) -> set[str]:
    """Every module of this project that the file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
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


def test_the_check_catches_a_wrong_way_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from verify.cli import UsageError\n")
    assert not allowed(next(iter(project_imports(bad))), LAYERS[1][1])
    bad.write_text("from verify.studies.store import RunStore\n")
    _, may_import, may_not = LAYERS[4]  # verify/learning
    assert not allowed(next(iter(project_imports(bad))), may_import, may_not)
    bad.write_text("from verify.learning.metrics import rmse\n")
    _, may_import, may_not = LAYERS[3]  # verify (the theorem's checks)
    assert not allowed(next(iter(project_imports(bad))), may_import, may_not)
