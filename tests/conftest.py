"""Shared fixtures: tiny models and a configuration that tunes them in seconds."""

from __future__ import annotations

import sys
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
    from tune_orchestrator import targets

    real = targets.host_cores
    for name, module in list(sys.modules.items()):
        if name.startswith("tune_orchestrator") and getattr(module, "host_cores", None) is real:
            monkeypatch.setattr(module, "host_cores", lambda: 2)
