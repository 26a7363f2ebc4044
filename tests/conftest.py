"""Shared fixtures: tiny models and a configuration that tunes them in seconds."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' $XDG_CACHE_HOME: one folder for the whole session (matplotlib keeps its
    font cache there too, built once)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _no_user_cache(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's cache: the tuning library's default root follows
    $XDG_CACHE_HOME, here a folder of the test session (subprocesses inherit it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))


@pytest.fixture(scope="session")
def fast_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "fast.toml"
    path.write_text(FAST_CONFIG)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return onnx_models.tiny_cnn(tmp_path_factory.mktemp("models") / "tiny.onnx")
