"""Measurement settings reach the engines; --gpus, --parallelism and --rpc are checked before
anything runs; the devices a run holds and claims."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from devices import GPU
from tune_orchestrator.cli.commands import main
from tune_orchestrator.config import Settings
from tune_orchestrator.errors import InputError
from tune_orchestrator.measure import DopConfig, TimingPlan
from tune_orchestrator.run.measuring import (
    Fleet,
    make_builder,
    target_and_fleet,
    timer_config,
    timing_plan,
)

# Values unlike every default, so that a setting dropped on the way shows.
MEASURE = {
    "measure.number": 2,
    "measure.gpu_repeat_ms": 0.5,
    "measure.min_repeats": 4,
    "measure.max_repeats": 9,
    "measure.max_rel_ci": 0.02,
    "measure.race": False,
    "measure.race_after": 2,
    "measure.race_margin": 0.3,
    "measure.gpu_l2_flush": True,
}
DOP = {
    "dop.start": 2,
    "dop.max_dop": 12,
    "dop.step": 3,
    "dop.backoff": 0.7,
    "dop.max_rel_error": 0.04,
    "dop.max_failure_rate": 0.2,
    "dop.sample_share": 0.3,
    "dop.target_busy": 0.85,
}


def test_every_gpu_timing_setting_reaches_the_plan():
    plan = timing_plan(Settings.load(overrides=MEASURE), "cuda")
    assert plan == TimingPlan(
        min_repeats=4,
        max_repeats=9,
        max_rel_ci=0.02,
        repeat_ms=0.5,
        min_launches=2,
        race=False,
        race_after=2,
        race_margin=0.3,
        flush_l2=True,
    )


def test_every_build_setting_reaches_the_pool():
    settings = Settings.load(
        overrides={"build.workers": 1, "build.timeout_s": 40.0, "build.adaptive_timeout": 7.0}
    )
    with make_builder(settings, None) as pool:
        assert (pool.workers, pool.max_timeout_s, pool.adaptive_timeout) == (1, 40.0, 7.0)
        assert pool.timeout_s == 40.0  # until enough builds are timed


def test_cpus_here_and_over_rpc_keep_tvms_fixed_repeats_and_race_as_gpus_do():
    overrides = {"measure.repeat": 5, "measure.min_repeat_ms": 20, "measure.race_margin": 0.3}
    settings = Settings.load(overrides=overrides)
    plan = timing_plan(settings, "cpu")
    assert (plan.min_repeats, plan.max_repeats, plan.repeat_ms) == (5, 5, 20)
    assert (plan.race, plan.race_after, plan.race_margin) == (True, 1, 0.3)
    assert timer_config(settings).plan() == plan  # the local engine's, the same
    off = Settings.load(overrides={"measure.race": False})
    assert not timing_plan(off, "cpu").race and not timer_config(off).plan().race


def test_every_dop_setting_reaches_the_controller():
    config = Settings.load(overrides=DOP).dop  # the controller's DopConfig itself
    expected = {key.split(".")[1]: value for key, value in DOP.items()}
    assert {f.name: getattr(config, f.name) for f in dataclasses.fields(DopConfig)} == {
        **dataclasses.asdict(DopConfig()),
        **expected,
    }


@pytest.mark.parametrize(
    "override, message",
    [
        ({"measure.max_repeats": 2}, "[measure] max_repeats must be at least min_repeats"),
        ({"measure.max_rel_ci": 1.0}, "[measure] max_rel_ci must be in (0, 1)"),
        ({"measure.race_margin": -0.5}, "[measure] race_margin cannot be negative"),
        ({"measure.gpu_repeat_ms": -1.0}, "[measure] gpu_repeat_ms cannot be negative"),
        ({"measure.race_after": 0}, "[measure] race_after must be positive"),
        ({"dop.target_busy": 0.0}, "[dop] target_busy must be in (0, 1]"),
        ({"dop.backoff": 1.0}, "[dop] backoff must be in (0, 1)"),
    ],
)
def test_bad_measurement_settings_name_the_problem(override, message):
    with pytest.raises(InputError) as refused:
        Settings.load(overrides=override)
    assert message in str(refused.value)


def test_parallelism_on_a_cpu_target_is_refused_with_where_it_applies():
    with pytest.raises(InputError) as refused:
        target_and_fleet("llvm", parallelism="4")
    message = str(refused.value)
    assert message.startswith("--parallelism applies to GPU targets and RPC fleets (--rpc);")
    assert "\n" not in message
    assert target_and_fleet("llvm")[1] == Fleet()


def test_an_rpc_key_without_a_fleet_is_refused_not_ignored():
    """`--rpc-key x` without --rpc was taken silently and the run measured on this host."""
    with pytest.raises(InputError, match=r"^--rpc-key names the servers of an RPC fleet; give"):
        target_and_fleet("llvm", rpc_key="x")
    assert target_and_fleet("llvm", rpc_key="")[1] == Fleet()


def test_parallelism_on_a_cpu_target_exits_2_before_anything_is_written(tmp_path, tiny_model):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        ["--budget", "8trials", "--target", "llvm", "--parallelism", "4", "--out", str(out)]
        + [str(tiny_model)],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --parallelism applies to GPU targets")
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_chosen_gpus_are_held_claimed_and_metered_each():
    from tune_orchestrator.model.targets import visible_gpus

    if GPU and len(visible_gpus()) < 2:
        pytest.skip("picks GPUs 0 and 1: needs two visible GPUs, or none (build only)")
    resolved, fleet = target_and_fleet("nvidia/nvidia-h100", build_only=True, gpus="0,1")
    assert fleet.gpus == (0, 1) and fleet.devices("cuda") == 2
    claims = fleet.claims("cuda")
    assert len(claims) == 2 and len(set(claims)) == 2 and all(c.startswith("cuda-") for c in claims)
    assert Fleet().claims("cpu") == ["cpu"] and Fleet().devices("cpu") == 0
    assert Fleet(rpc="h:1", rpc_key="k", servers=3).devices("cuda") == 3
    with pytest.raises(InputError, match="^--gpus '0,0': give distinct indices"):
        target_and_fleet("nvidia/nvidia-h100", build_only=True, gpus="0,0")
    with pytest.raises(InputError, match="^--gpus 'one' is not 'all' or a list"):
        target_and_fleet("nvidia/nvidia-h100", build_only=True, gpus="one")
