"""The GPU precheck turns away only schedules that TVM's own postprocessors reject, and the search
makes the same proposals with it as without it. A CUDA target needs no GPU here: schedules are
made and checked, never built or run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule import _ffi_api

import onnx_models
from tune_orchestrator import _tvm
from tune_orchestrator.budget.render import describe_search
from tune_orchestrator.config import Settings
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import extract_tasks, structural_key
from tune_orchestrator.search import TaskSearch, gpu_precheck
from tune_orchestrator.search.gpu_precheck import FETCH, LANES, space_generator, violation

H100 = "nvidia/nvidia-h100"


@pytest.fixture(scope="module")
def conv_task(tmp_path_factory):
    """A 64-channel 3x3 convolution: most of its random GPU schedules break the H100's limits,
    some by shared memory, some by threads per block."""
    target = resolve_target(H100, build_only=True).target
    _tvm.load_tensor_intrinsics(target)  # as a search does: the tests make contexts of their own
    path = onnx_models.wide_conv(tmp_path_factory.mktemp("precheck") / "conv.onnx", size=16)
    (task,) = extract_tasks(fuse_for_tuning(import_to_relax(load_model(path)), target), target)
    return target, task


def schedules(target, task, samples=60, mutations=60):
    """Fresh random schedules of the task, then mutations of the valid ones, each replayed as
    the search replays them (postprocessors not yet applied)."""
    ctx = ms.TuneContext(
        mod=task.workload,
        target=target,
        space_generator="post-order-apply",
        num_threads=1,
        rand_state=1,
    )
    spaces = ctx.generate_design_space()
    mutators = list(ctx.space_generator.mutator_probs.items())
    for mutator, _ in mutators:
        mutator._initialize_with_tune_context(ctx)

    def replayed(trace, seed):
        sch = s_tir.Schedule(task.workload, seed=seed, debug_mask=0)
        trace.apply_to_schedule(sch, remove_postproc=True)
        return sch

    made = [
        replayed(s_tir.Trace(spaces[i % len(spaces)].trace.insts, {}), i + 1)
        for i in range(samples)
    ]
    parents = [sch for sch in made if passes(ctx, sch.copy())][:5]
    rng = np.random.default_rng(0)
    weights = np.array([float(p) for _, p in mutators])
    for j in range(mutations if parents else 0):
        mutator = mutators[rng.choice(len(mutators), p=weights / weights.sum())][0]
        parent = parents[j % len(parents)].trace.simplified(remove_postproc=True)
        child = _ffi_api.MutatorApply(mutator, parent, j + 1)
        if child is not None:
            made.append(replayed(child, j + 1))
    return ctx, made


def passes(ctx, sch) -> bool:
    """TVM's verdict: every postprocessor of the target accepts the schedule."""
    sch.enter_postproc()
    return all(p.apply(sch) for p in ctx.space_generator.postprocs)


def test_the_precheck_rejects_only_what_tvms_postprocessors_reject(conv_task):
    target, task = conv_task
    ctx, made = schedules(target, task)
    verdicts = []
    for sch in made:
        why = violation(sch.mod["main"], max_shared_bytes=49152, warp_size=32)
        verdicts.append((why, passes(ctx, sch.copy())))
    wrongly = [why for why, ok in verdicts if why and ok]
    rejected = [why for why, ok in verdicts if not ok]
    caught = [why for why in rejected if why]
    assert not wrongly, f"the precheck rejected schedules TVM accepts: {wrongly}"
    assert len(caught) >= 0.8 * len(rejected) > 0
    assert any("shared memory" in why for why in caught)
    assert any("threads per block" in why for why in caught)


def test_the_postprocessor_counts_what_it_turns_away_across_its_clones(conv_task):
    target, task = conv_task
    generator, precheck = space_generator(task.workload, target)
    ctx = ms.TuneContext(mod=task.workload, target=target, space_generator=generator)
    first, second, third = list(ctx.space_generator.postprocs)[:3]
    assert type(first).__name__ == "DisallowDynamicLoop"
    assert second.same_as(precheck)  # before the rewrites and the lowering pay for a schedule
    assert type(third).__name__ == "RewriteCooperativeFetch"
    twin = precheck.clone()  # as TVM makes one per search thread, after reading the target
    _, made = schedules(target, task, samples=20, mutations=0)
    verdicts = [twin.apply(sch) for sch in made]
    expected = [
        violation(sch.mod["main"], max_shared_bytes=49152, warp_size=32) is None for sch in made
    ]
    assert verdicts == expected  # the clone judges by the H100's limits
    assert sum(precheck.rejected.values()) == verdicts.count(False) > 0


def conv_search(conv_task, threads=1, **search):
    """A TaskSearch of the convolution with `search` settings over the defaults (population
    32), a random cost model, 8 proposals a round."""
    target, task = conv_task
    settings = Settings.load(None)
    settings = dataclasses.replace(
        settings, search=dataclasses.replace(settings.search, population=32, **search)
    )
    return TaskSearch(
        task,
        target=target,
        settings=settings,
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(seed=0),
        rand_state=3,
        threads=threads,
        proposals=8,
    )


@pytest.mark.slow
def test_the_search_proposes_the_same_schedules_with_the_precheck(conv_task):
    """Same seed, one thread: the precheck changes what the search pays, not what it finds
    (the late check, which needs the precheck, is off on both sides)."""
    found, counted = {}, {}
    for check in (True, False):
        search = conv_search(conv_task, gpu_precheck=check, late_verify=False)
        found[check] = [[structural_key(mc.sch.mod) for mc in search.propose()] for _ in range(2)]
        counted[check] = search.times.prechecked
    assert found[True] == found[False]
    assert all(len(keys) == 8 for keys in found[True])
    assert counted[True] > 0 and counted[False] == 0


def postproc_names(ctx):
    return [type(p).__name__ for p in ctx.space_generator.postprocs]


@pytest.mark.slow
def test_with_the_late_check_the_evolution_lowers_nothing_and_every_proposal_passes(conv_task):
    search = conv_search(conv_task, threads=2)  # the picks are checked on two threads
    every = postproc_names(search.ctx)  # fresh samples: every check, the precheck too
    assert "VerifyGPUCode" in every and "_PyPostproc" in every
    assert postproc_names(search._evolution_ctx) == [p for p in every if p != "VerifyGPUCode"]
    verify = ms.postproc.VerifyGPUCode()
    verify._initialize_with_tune_context(search.ctx)
    proposed = [mc for _ in range(3) for mc in search.propose()]
    assert len(proposed) == 24
    assert all(verify.apply(mc.sch) for mc in proposed)
    assert search.times.verify > 0


@pytest.mark.slow
def test_picks_that_fail_the_late_check_are_dropped_counted_and_never_proposed(conv_task):
    search = conv_search(conv_task)
    failed = set()

    class EveryOther:
        calls = 0

        def apply(self, sch):
            self.calls += 1
            if self.calls % 2:
                return True
            failed.add(structural_key(sch.mod))
            return False

    search._verifiers = [EveryOther()]
    proposed = {structural_key(mc.sch.mod) for _ in range(3) for mc in search.propose()}
    assert len(proposed) == 24  # the evolution ranks twice a round: the next best stand in
    assert failed and not failed & proposed
    assert search.times.invalid == len(failed)


def test_without_the_late_check_the_evolution_verifies_every_schedule(conv_task):
    search = conv_search(conv_task, late_verify=False)
    assert not search._verifiers and search._evolution is search._strategy
    search.propose()
    assert search.times.verify == 0 and search.times.invalid == 0


def test_cpu_targets_keep_tvms_postprocessors_as_they_are(conv_task, monkeypatch):
    _, task = conv_task
    printed = []  # a workload's text (~1 ms a task) is read only where a lane check can go
    monkeypatch.setattr(gpu_precheck, "_holds_bfloat16", lambda w: printed.append(w))
    generator, precheck = space_generator(task.workload, resolve_target("llvm").target)
    assert (generator, precheck) == ("post-order-apply", None)
    assert printed == []


def test_the_report_says_how_many_schedules_the_precheck_turned_away():
    search = {"sampling": 1.0, "mutation": 2.0, "searches": 3, "proposed": 96}
    assert "turned away" not in describe_search(search)
    line = describe_search({**search, "prechecked": 120})
    assert (
        "120 schedules over the GPU's limits or CUDA's vector widths turned away unlowered" in line
    )


def test_the_report_says_what_the_late_check_cost_and_dropped():
    search = {"sampling": 1.0, "mutation": 2.0, "searches": 3, "proposed": 96}
    assert "verify" not in describe_search(search)  # CPU targets: no such part
    line = describe_search({**search, "verify": 0.5, "invalid": 7})
    assert "verify 0.5" in line
    assert "7 of the evolution's picks failed VerifyGPUCode, dropped" in line


@pytest.fixture(scope="module")
def bfloat16_conv(tmp_path_factory):
    """A bfloat16 3x3 convolution, 16 channels: a cooperative fetch of 3 lanes makes a vector
    CUDA's code generator refuses ("only support even lane for bfloat16 type")."""
    target = resolve_target(H100, build_only=True).target
    path = onnx_models.half_cnn(tmp_path_factory.mktemp("lanes") / "bf16.onnx", dtype="bfloat16")
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(load_model(path)), target), target)
    return target, next(t for t in tasks if t.name == "conv2d")


@pytest.mark.slow
def test_the_lane_check_turns_away_exactly_the_bfloat16_schedules_that_cannot_build(
    bfloat16_conv,
):
    """3-7 of a round's 16 candidates of a bfloat16 convolution passed every postprocessor and
    then failed to build. Each schedule TVM's postprocessors accept is built: it fails where
    the lane check (right after RewriteCooperativeFetch) refused it, and only there."""
    target, task = bfloat16_conv
    generator, precheck = space_generator(task.workload, target)
    verdicts = []
    for seed in range(1, 61):
        ctx = ms.TuneContext(
            mod=task.workload, target=target, space_generator=generator, rand_state=seed
        )
        postprocs = list(ctx.space_generator.postprocs)
        lanes = [type(p).__name__ for p in postprocs].index(FETCH) + 1
        for sch in ctx.generate_design_space():
            sch.enter_postproc()
            refused, accepted = None, True
            for i, postproc in enumerate(postprocs):
                if i == lanes:
                    refused = not postproc.apply(sch)
                elif not postproc.apply(sch):
                    accepted = False
                    break
            if accepted:
                verdicts.append((refused, builds(sch, target)))
    assert verdicts.count((True, False)) == precheck.rejected[LANES] > 0
    assert set(verdicts) == {(True, False), (False, True)}  # refused: never built; else built


def builds(sch, target) -> bool:
    try:
        tvm.compile(sch.mod, target=target)
    except Exception as exc:  # noqa: BLE001 - the one refusal expected is asserted below
        assert "only support even lane for bfloat16 type" in str(exc), str(exc)
        return False
    return True


def test_only_bfloat16_workloads_get_the_lane_check(conv_task, bfloat16_conv):
    for target, task in (conv_task, bfloat16_conv):
        generator, _ = space_generator(task.workload, target)
        names = [type(p).__name__ for p in generator.postprocs]
        after_fetch = names[names.index(FETCH) + 1]
        assert (after_fetch == "RewriteUnboundBlock") == (task is conv_task[1])
