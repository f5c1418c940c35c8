"""The import graph flows one way: theory ← constructions.tasks ← constructions ← verify ←
paper_figures. Read from the source (ast), so a wrong-way import fails here, not in a
user's circular-import traceback."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each layer, innermost first, and the packages its modules may import from this project.
LAYERS = [
    ("theory", {"theory"}),
    ("constructions/tasks", {"theory", "constructions.tasks"}),
    ("constructions", {"theory", "constructions"}),
    ("verify", {"theory", "constructions", "verify"}),
    ("paper_figures", {"theory", "constructions", "verify", "paper_figures"}),
]
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


def allowed(module: str, prefixes: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("folder, may_import", LAYERS, ids=[f for f, _ in LAYERS])
def test_each_layer_imports_only_the_layers_below_it(folder, may_import):
    files = sorted((ROOT / folder).glob("*.py"))
    assert files, folder
    wrong = {f"{p.relative_to(ROOT)} imports {m}" for p in files for m in project_imports(p)
             if not allowed(m, may_import)}
    assert not wrong, sorted(wrong)


def test_the_check_catches_a_wrong_way_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from verify.cli import UsageError\n")
    assert not allowed(next(iter(project_imports(bad))), LAYERS[1][1])
