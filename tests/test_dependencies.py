"""The declared dependency ranges hold what the code uses: the Ray the install brings is in the
studies extra's range and has the private modules verify.studies.ray_cluster reads; a Ray
without one is refused in one line."""

from importlib import metadata
from pathlib import Path

import pytest

from verify.cli import UsageError

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def test_the_installed_ray_is_in_the_declared_range_and_has_the_private_modules_read():
    pytest.importorskip("ray")
    from packaging.requirements import Requirement

    from verify.studies import ray_cluster

    (ray_requirement,) = [Requirement(r) for r in EXTRAS["studies"] if r.startswith("ray")]
    assert Requirement(ray_cluster.RAY_RANGE) == ray_requirement  # one range, said in the error too
    assert metadata.version("ray") in ray_requirement.specifier
    # The floor: the lowest Ray that passes tests/test_cluster.py (2.55.0; 2.54.0 does not).
    assert ray_requirement.specifier.contains("2.55.0") and not ray_requirement.specifier.contains("2.54.0")
    read = ("ray._private.services", "ray._private.ray_constants", "ray.core.generated.ray_client_pb2")
    for module in read:
        assert ray_cluster.ray_private(module).__name__ == module


def test_a_ray_without_a_private_module_is_refused_in_one_line():
    pytest.importorskip("ray")
    from verify.studies import ray_cluster

    with pytest.raises(UsageError) as e:
        ray_cluster.ray_private("ray._private.no_such_module")
    assert "\n" not in str(e.value) and ray_cluster.RAY_RANGE in str(e.value)


def test_every_extra_the_code_imports_is_declared():
    assert any(r.startswith("scikit-learn") for r in EXTRAS["images"])  # the probe
    assert any(r.startswith("llm") for r in EXTRAS["llm"])  # the llm judge
