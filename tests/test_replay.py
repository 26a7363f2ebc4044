"""The simulated GPU against real ones: its calibration comes from a committed real run's report,
and replaying the other committed real runs on it gives what they reported."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pytest

from tune_orchestrator.measure import MeasureInput, SimulatedEngine, SimulatedGpu
from tune_orchestrator.measure.replay import EMERGENT, calibration, compare, rounds, up_front

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
# Every real GPU run's report: add each new one here (and recalibrate from the newest).
REAL_RUNS = [
    "orchestrate-vggish-cuda-3min-nvidia-h100-2026-11-26.json",
    "orchestrate-vggish-cuda-4min-nvidia-h200-2026-11-26.json",
    "orchestrate-vggish-cuda-3min-gpu-e2e-nvidia-h100-2026-11-27.json",
]


def calibration_file(name: str = "nvidia-h100") -> dict:
    path = resources.files("tune_orchestrator.measure").joinpath("calibration", f"{name}.json")
    return json.loads(path.read_text())


def report(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def test_the_calibration_is_what_its_real_report_gives():
    committed = calibration_file()
    source = report(Path(committed["source"]).name)
    assert source["target"]["device"] == committed["device"]
    assert calibration(source) == pytest.approx(committed["simulated_gpu"], rel=1e-3)


def checking_runs() -> list[str]:
    """The real runs that check the calibration: on its card, other than its source."""
    committed = calibration_file()
    return [
        name
        for name in REAL_RUNS
        if name != Path(committed["source"]).name
        and report(name)["target"]["device"] == committed["device"]
    ]


def test_another_real_run_on_the_card_checks_the_calibration():
    assert checking_runs()


@pytest.mark.parametrize("name", checking_runs())
def test_replaying_another_real_run_gives_what_it_reported(name):
    real = report(name)
    gpu = SimulatedGpu.calibrated("nvidia-h100")
    runs = [compare(real, gpu, seed) for seed in range(3)]
    for figure in EMERGENT:
        simulated = sum(r[figure]["simulated"] for r in runs) / len(runs)
        assert simulated == pytest.approx(runs[0][figure]["real"], rel=0.3), figure


def test_a_replay_measures_each_untuned_kernel_alone_then_every_first_round_unraced():
    real = report(REAL_RUNS[0])
    calls, latency = rounds(real)
    tuned = [t for t in real["tasks"] if t["trials"]]
    untuned = [t for t in real["tasks"] if t["untuned_s"]]
    assert [len(c) for c, _ in calls[: len(untuned)]] == [1] * len(untuned)
    firsts = calls[len(untuned) : len(untuned) + len(tuned)]
    assert all(best is None for _, best in firsts)
    assert all(best is not None for _, best in calls[len(untuned) + len(tuned) :])
    assert sum(len(c) for c, _ in calls) == len(untuned) + sum(t["trials"] for t in tuned)
    assert all(math.isfinite(s) and s > 0 for s in latency.values())


def test_the_engine_a_report_came_from_is_read_from_its_workers_start():
    assert up_front(report(REAL_RUNS[0])["measurement"])  # 16 started before the first
    assert up_front(report(REAL_RUNS[1])["measurement"])  # reports before workers_ready_s
    assert not up_front(report(REAL_RUNS[2])["measurement"])  # one, the rest on demand


def test_a_worker_pays_its_first_job_once_and_warm_workers_wait_until_ready():
    item = [MeasureInput("c.so", (("float32", (4,)),))]

    def seconds(gpu: SimulatedGpu, jobs: int, **engine_args) -> float:
        engine = SimulatedEngine(gpu, fixed_dop=1, warm=1, **engine_args)
        for _ in range(jobs):
            engine.measure(item)
        return engine.virtual_s

    plain = seconds(SimulatedGpu(), 4)
    assert seconds(SimulatedGpu(first_job_s=2.0), 4) == pytest.approx(plain + 2.0, abs=0.05)
    assert seconds(SimulatedGpu(), 4, ready_s=3.0) == pytest.approx(plain + 3.0, abs=0.05)
    started = SimulatedEngine(SimulatedGpu(first_job_s=2.0), fixed_dop=1, warm=4)
    for _ in range(4):  # the pool hands each job to the process idle longest
        started.measure(item)
    assert started.virtual_s == pytest.approx(plain + 8.0, abs=0.1)
