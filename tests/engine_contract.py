"""The conformance checks every Engine passes (local, simulated, CUDA, RPC), so that no engine
drifts from the contract the tuning loop relies on."""

from __future__ import annotations

import json

from tune_orchestrator.measure import Engine, MeasureInput


def check_engine_contract(engine: Engine, good: list[MeasureInput], bad: MeasureInput) -> None:
    """`good` holds two candidates that run, `bad` one that fails."""
    inputs = [good[0], bad, good[1]]
    arrived = []
    results = engine.measure(inputs, on_result=lambda i, m: arrived.append((i, m)))
    # one Measurement per input, in order; each reported once, as it came
    assert len(results) == 3
    assert sorted(i for i, _ in arrived) == [0, 1, 2]
    assert all(results[i] is m for i, m in arrived)
    # failures are data with a message, not exceptions
    assert [m.ok for m in results] == [True, False, True]
    assert results[1].error and results[1].run_secs is None
    for m in (results[0], results[2]):
        assert m.run_secs and all(0 < s < 1 for s in m.run_secs)
        assert m.finite is True
    assert engine.measure([]) == []
    stats = engine.stats()
    assert stats["engine"] == type(engine).__name__ and stats["device"] in ("cpu", "cuda")
    json.dumps(stats)  # report.json holds it
