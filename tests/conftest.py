"""Hypothesis profiles: `ci` (default, fast, derandomised so a red CI can be replayed) and
`thorough` (many random examples). Select with HYPOTHESIS_PROFILE=thorough pytest."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=20, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The tests evaluate many small tensors: one torch thread is fastest for them, and on a
# machine whose cores are shared (CI runners, parallel jobs) more threads than free cores
# make them up to 10× slower. CLI subprocesses keep torch's default.
import torch  # noqa: E402

torch.set_num_threads(1)

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _own_cache_folder(tmp_path_factory, monkeypatch):
    """Every test's replays of behaviour records (verify.studies.behaviour) are cached in a
    folder of its own: none reads another's verdicts, and none writes into the user's home."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _free_memory_is_not_this_machines(monkeypatch):
    """verify.kernel's parser refuses a solve that would not fit the free memory it reads, and
    CI may share the machine with a study's 2,048-task ladders (9 GiB each): a test that parses
    such a run must not depend on them. The tests of that refusal set the value they need."""
    from verify.learning import kernel_vs_sgd

    monkeypatch.setattr(kernel_vs_sgd, "available_bytes", lambda: 2**40)
