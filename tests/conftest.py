"""Shared fixtures: tiny models and a configuration that tunes them in seconds."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import onnx_models

FAST_CONFIG = """\
[tune]
trials_per_round = 8
[search]
population = 64
genetic_num_iters = 2
cost_model_warmup = 0
[measure]
repeat = 2
min_repeat_ms = 5
[check]
latency_repeat = 3
latency_min_repeat_ms = 10
"""


@pytest.fixture(scope="session", autouse=True)
def _matplotlib_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """matplotlib's font cache, built once for the session whatever $XDG_CACHE_HOME is."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MPLCONFIGDIR", str(tmp_path_factory.mktemp("matplotlib")))
        yield


@pytest.fixture(scope="session", autouse=True)
def _no_idle_cores_warning() -> Iterator[None]:
    """Runs warn where TVM's runtime leaves cores idle (host.idle_cores): whether it does
    depends on the host (its hyper-threads, an OMP_NUM_THREADS set), so no test's run in
    this process asks; test_host's tests call it with their own."""
    from tune_orchestrator.run import session

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(session, "idle_cores", lambda: None)
        yield


@pytest.fixture(scope="module", autouse=True)
def _library_per_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test writes to the user's cache, and no test module sees records of another: the
    tuning library's default root follows $XDG_CACHE_HOME, one folder per module for its
    module fixtures (autouse, so set before them; subprocesses inherit it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(autouse=True)
def cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own $XDG_CACHE_HOME: a run in one test never reuses another's records."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder


@pytest.fixture(scope="session")
def fast_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "fast.toml"
    path.write_text(FAST_CONFIG)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return onnx_models.tiny_cnn(tmp_path_factory.mktemp("models") / "tiny.onnx")


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """host_cores() answers 2 wherever the package calls it, so that forecasts (and the
    budgets they suggest) read as on the 2-core machine the expected texts come from."""
    from tune_orchestrator import host

    real = host.host_cores
    for name, module in list(sys.modules.items()):
        if name.startswith("tune_orchestrator") and getattr(module, "host_cores", None) is real:
            monkeypatch.setattr(module, "host_cores", lambda: 2)
