"""A long run stays healthy: what it keeps per candidate or per round is capped
(docs/how-it-works.md, Long runs; benchmarks/long_run.py measures the rest)."""

from __future__ import annotations

import numpy as np
import pytest

from tune_orchestrator.predictor import Predictor


def _spy_on_training(model: Predictor, monkeypatch) -> list[np.ndarray]:
    """The feature rows each fit trains on."""
    seen: list[np.ndarray] = []
    train = model._train

    def spied(xs, y, query):
        seen.append(np.concatenate(xs))
        return train(xs, y, query)

    monkeypatch.setattr(model, "_train", spied)
    return seen


def test_a_refit_trains_on_at_most_max_samples_however_many_were_measured(monkeypatch):
    """A refit costs in proportion to its samples, once a round on the loop's thread: over
    a two-GPU-hour run's 10,000-20,000 measurements it would outgrow the round."""
    rng = np.random.default_rng(0)
    model = Predictor(max_samples=64)
    trained = _spy_on_training(model, monkeypatch)
    for _ in range(10):
        for workload in ("w", "v"):
            x = rng.normal(size=(32, 1, 6)).astype(np.float32)
            model.add(workload, x, 1e-4 * np.exp(x[:, 0, 0]))
        model.fit()
    assert model.samples == 640  # every measurement counted
    assert model.held == 64
    assert [len(rows) for rows in trained][-1] == 64
    assert max(len(rows) for rows in trained) == 64


def test_the_cap_drops_the_oldest_and_keeps_each_workloads_fastest(monkeypatch):
    """Targets are ratios to the workload's best: its fastest must stay, however old."""
    model = Predictor(max_samples=32)
    trained = _spy_on_training(model, monkeypatch)
    x = np.arange(48, dtype=np.float32).reshape(48, 1, 1)  # a sample's feature: its age
    latency = 2e-4 - 1e-6 * x[:, 0, 0]  # newer ones a little faster
    latency[0] = 1e-5  # but the oldest is the fastest
    model.add("w", x[:24], latency[:24])
    model.add("w", x[24:], latency[24:])
    model.fit()
    ages = set(trained[-1][:, 0].tolist())
    assert 0.0 in ages  # the fastest
    assert 47.0 in ages and 17.0 in ages  # the newest
    assert not ages & {1.0, 16.0}  # the oldest others went first
    assert len(ages) == 32


def test_a_cap_below_what_each_workload_keeps_is_refused():
    with pytest.raises(ValueError, match="max_samples must be at least 16 but got 8"):
        Predictor(max_samples=8)


def test_an_engine_keeps_a_bounded_record_of_its_timings_and_the_same_busy_share(monkeypatch):
    """Each timed window stays until it is counted; a long run's are counted as it goes."""
    from tune_orchestrator.measure import MeasureInput, SimulatedEngine, SimulatedGpu, _figures

    def measured(keep: int) -> SimulatedEngine:
        monkeypatch.setattr(_figures, "KEEP_WINDOWS", keep)
        engine = SimulatedEngine(SimulatedGpu(seed=1), gpus=2)
        for r in range(6):
            engine.measure(
                [MeasureInput(f"r{r}-{i}.so", (("float32", (16,)),)) for i in range(200)]
            )
        return engine

    capped, whole = measured(100), measured(10**9)
    assert max(len(w) for w in whole.figures.windows) >= 550
    assert max(len(w) for w in capped.figures.windows) <= 250
    assert capped.stats()["busy_per_gpu"] == pytest.approx(whole.stats()["busy_per_gpu"])
    assert capped.stats()["repeats"] == whole.stats()["repeats"]
