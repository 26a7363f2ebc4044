"""The prior shipped with the package (orchestrator/prior.py): it loads with this TVM, scores
a cold run's search until the run's own model is ready, and is used only where nothing else
started the model, on x86-64 CPU targets."""

from __future__ import annotations

import dataclasses
import json
import platform

import numpy as np
import pytest
from click.testing import CliRunner
from test_sisters import proposed
from test_transfer_replay import conv

from cli_args import tune_args
from tune_orchestrator import _tvm
from tune_orchestrator.cli.commands import main
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import measure_candidate, structural_key
from tune_orchestrator.predictor import Predictor, store_features
from tune_orchestrator.prior import about, load_prior, prior_for
from tune_orchestrator.search.cost_model import SharedCostModel, throughput

x86 = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="the prior is for x86-64 CPUs"
)


@pytest.fixture(scope="module")
def cpu():
    return resolve_target("llvm")


@x86
def test_the_shipped_prior_loads_with_this_tvm_and_says_what_it_learned_from(cpu):
    path = prior_for(cpu)
    assert path is not None and path.is_file()
    assert load_prior(path).booster is not None
    learned = about(path)
    assert learned["samples"] > 1000 and learned["trained_on"]
    # Corpus models only (benchmarks/models.py): no benchmark model's shapes are in it.
    assert all(source["run"].startswith("prior") for source in learned["trained_on"])


def test_there_is_no_prior_for_a_gpu_or_a_simulated_device(cpu):
    assert prior_for(dataclasses.replace(cpu, device_type="cuda")) is None
    assert prior_for(dataclasses.replace(cpu, simulated=True)) is None


@x86
def test_the_search_scores_with_the_prior_until_its_own_model_is_ready_then_beside_it(cpu):
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    workload = conv()
    _tvm.load_tensor_intrinsics(cpu.target)
    context = TuneContext(mod=workload, target=cpu.target, task_name="prior")
    schedules = [measure_candidate(sch) for sch in proposed(workload, cpu.target, 24)]
    model = SharedCostModel(Predictor(), warmup=len(schedules))
    assert not np.array_equal(model.predict(context, schedules), model.predict(context, schedules))
    model.prior = load_prior(prior_for(cpu))
    features = store_features(context, schedules)
    expected = throughput(model.prior, features)
    assert np.allclose(model.predict(context, schedules), expected)  # not at random
    # Once the run has measured `warmup` candidates, its own model scores them.
    latencies = [1e-4 * (1 + structural_key(c.sch.mod) % 97 / 10) for c in schedules]
    model.add(context, schedules, [RunnerResult([t], None) for t in latencies])
    model.fit()
    own = throughput(model.predictor, features)
    assert np.allclose(model.predict(context, schedules), own)
    assert not np.allclose(own, expected)
    # With a prior weight, both score: the prior as `prior_weight` measurements against the
    # run's own (here as many as it measured, so half each).
    model.prior_weight = len(schedules)
    assert np.allclose(model.predict(context, schedules), np.sqrt(own * expected))


@x86
def test_a_cold_run_s_search_starts_on_the_prior_and_the_report_says_so(
    tiny_model, tmp_path, fast_config
):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(tiny_model, out, fast_config, "--no-library"))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["search"]["prior"] == "llvm-x86_64.json"
    assert "ranked by the prior shipped with the package" in (out / "report.md").read_text()
    # Resumed with more trials, it has its own measurements: no prior.
    more = tune_args(tiny_model, out, fast_config, "--no-library", budget="16trials")
    assert CliRunner().invoke(main, more).exit_code == 0
    assert json.loads((out / "report.json").read_text())["search"]["prior"] is None


@x86
def test_no_prior_where_the_library_or_the_settings_say_otherwise(
    tiny_model, tmp_path, fast_config
):
    library = tmp_path / "library"
    first, second, off = tmp_path / "first", tmp_path / "second", tmp_path / "off"
    for out in (first, second):  # the second run starts on the first one's records
        args = tune_args(tiny_model, out, fast_config, "--library", library)
        assert CliRunner().invoke(main, args).exit_code == 0
    assert json.loads((second / "report.json").read_text())["search"]["prior"] is None
    config = tmp_path / "off.toml"
    config.write_text(fast_config.read_text().replace("[search]\n", "[search]\nprior = false\n"))
    args = tune_args(tiny_model, off, config, "--no-library")
    assert CliRunner().invoke(main, args).exit_code == 0
    assert json.loads((off / "report.json").read_text())["search"]["prior"] is None
