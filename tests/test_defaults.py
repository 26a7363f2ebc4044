"""Default schedules as database records: what stock `compile_relax` makes of them, and what
the search and a resumed run make of them."""

from __future__ import annotations

import re

import pytest
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.database import TuningRecord

from tune_orchestrator import deploy
from tune_orchestrator.config import Settings
from tune_orchestrator.model.defaults import (
    SearchView,
    default_schedule,
    deployed_schedule,
    hex_key,
    record_default,
)
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import extract_tasks, structural_key
from tune_orchestrator.run.measuring import untuned_workload
from tune_orchestrator.rundir.restore import restore
from tune_orchestrator.search import TaskSearch

TARGETS = ["llvm", "nvidia/nvidia-h100"]


class Compiled:
    """The code of one model compiled against a database: one entry per function."""

    def __init__(self, relax_mod, target, database):
        executable = deploy.compile_model(relax_mod, target.target, database)
        if target.device_type == "cuda":
            source = executable.mod.imports[0].imports[0].inspect_source("")
            pattern = r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\('
        else:
            source = executable.mod.imports[0].inspect_source("ll")
            pattern = r"define [^@]*@(\w+)\("
        source = re.sub(r"0x[0-9a-f]+", "0x", source)  # addresses in LLVM metadata
        starts = [(m.group(1), m.start()) for m in re.finditer(pattern, source)]
        bounds = [s for _, s in starts[1:]] + [len(source)]
        self.functions = {
            name: source[start:end] for (name, start), end in zip(starts, bounds, strict=True)
        }

    def of(self, task_name):
        return {k: v for k, v in self.functions.items() if k.startswith(task_name)}


@pytest.fixture(scope="module", params=TARGETS)
def model(request, tmp_path_factory):
    import onnx_models

    target = resolve_target(request.param, build_only=True)
    path = onnx_models.tiny_cnn(tmp_path_factory.mktemp("defaults") / "twins.onnx", twin_convs=True)
    relax_mod = import_to_relax(load_model(path))
    tasks = extract_tasks(fuse_for_tuning(relax_mod, target.target), target.target)
    untuned = Compiled(relax_mod, target, ms.database.MemoryDatabase())
    return target, relax_mod, tasks, untuned


def candidate(task, target):
    """One schedule MetaSchedule's search space gives the task."""
    from tune_orchestrator import _tvm

    _tvm.load_tensor_intrinsics()
    ctx = ms.TuneContext(
        mod=task.workload,
        target=target,
        space_generator="post-order-apply",
        search_strategy="replay-trace",
        task_name=task.name,
        num_threads=2,
    )
    ctx.pre_tuning(
        max_trials=4,
        num_trials_per_iter=4,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    return ctx.generate_measure_candidates()[0]


def test_the_default_schedule_leaves_the_workload_alone(model):
    target, _, tasks, _ = model
    before = [structural_key(t.workload) for t in tasks]
    for task in tasks:
        default_schedule(task, target)
        untuned_workload(task, target)
    assert [structural_key(t.workload) for t in tasks] == before


def test_recorded_defaults_compile_to_the_untuned_kernels(model, tmp_path):
    """Replaying each recorded default trace gives the kernel dlight (GPU) or the plain
    lowering (CPU) gives: the model compiled with only default records is the untuned one."""
    target, relax_mod, tasks, untuned = model
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    for task in tasks:
        default = default_schedule(task, target)
        assert default.recordable, task.name
        record_default(database, task, default, [1e-5], target.target)
    assert all(
        database.query_tuning_record(t.workload, target.target, t.name) is not None for t in tasks
    )
    assert Compiled(relax_mod, target, database).functions == untuned.functions


@pytest.mark.slow
@pytest.mark.parametrize("tuned_s, expected", [(2e-5, "default"), (5e-6, "tuned")])
def test_the_faster_of_default_and_tuned_is_compiled(model, tmp_path, tuned_s, expected):
    target, relax_mod, tasks, untuned = model
    task = next(t for t in tasks if "conv2d" in t.name)
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    record_default(database, task, default_schedule(task, target), [1e-5], target.target)
    mc = candidate(task, target.target)
    workload = database.commit_workload(task.workload)
    database.commit_tuning_record(
        TuningRecord(mc.sch.trace, workload, [tuned_s], target.target, mc.args_info)
    )
    compiled = Compiled(relax_mod, target, database)
    assert compiled.of(task.name) and (compiled.of(task.name) == untuned.of(task.name)) == (
        expected == "default"
    )
    assert deployed_schedule(best_s=tuned_s, default_s=1e-5, recorded=True) == expected


def test_the_search_never_sees_a_default_record(model, tmp_path, fast_config):
    """TVM's evolutionary search seeds its population from the database; fed a dlight trace,
    the search of a GPU reduction aborts. Through the view it proposes as if the record were
    not there."""
    target, _, tasks, _ = model
    task = next(t for t in tasks if t.name == "mean")
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    record = record_default(database, task, default_schedule(task, target), [1e-7], target.target)
    view = SearchView(database, [record])
    workload = database.commit_workload(task.workload)
    assert len(database.get_top_k(workload, 5)) == 1 and view.get_top_k(workload, 5) == []
    search = TaskSearch(
        task,
        target=target.target,
        settings=Settings.load(fast_config),
        database=view,
        cost_model=ms.cost_model.XGBModel(num_warmup_samples=0),
        rand_state=1,
        threads=2,
        proposals=8,
    )
    proposed = search.propose()
    assert proposed
    default_key = default_schedule(task, target).key
    assert all(structural_key(mc.sch.mod) != default_key for mc in proposed)
    mc = proposed[0]
    view.commit_tuning_record(TuningRecord(mc.sch.trace, search.workload, [1e-6], target.target))
    assert len(database.get_all_tuning_records()) == 2  # commits reach the database


@pytest.mark.slow
def test_a_resumed_run_knows_its_default_records_and_counts_no_trial(model, tmp_path):
    target, _, tasks, _ = model
    conv, mean, matmul = (
        next(t for t in tasks if n in t.name) for n in ("conv2d", "mean", "matmul")
    )
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    default = default_schedule(conv, target)
    record_default(database, conv, default, [2e-6, 4e-6], target.target)
    mc = candidate(conv, target.target)
    database.commit_tuning_record(
        TuningRecord(mc.sch.trace, database.commit_workload(conv.workload), [5e-6], target.target)
    )
    journal = [
        {"type": "session"},
        {
            "type": "baseline",
            "task": conv.index,
            "latency_s": 3e-6,
            "run_secs": [2e-6, 4e-6],
            "record_key": hex_key(default.key),
        },
        {  # measured and journaled, but killed before its record was committed
            "type": "baseline",
            "task": mean.index,
            "latency_s": 1e-7,
            "run_secs": [1e-7],
            "record_key": hex_key(default_schedule(mean, target).key),
        },
        # from a run directory older than default records
        {"type": "baseline", "task": matmul.index, "latency_s": 2e-8},
    ]
    restored = restore(
        tasks,
        journal,
        ms.database.JSONDatabase(work_dir=str(tmp_path)),
        cost_model=ms.cost_model.XGBModel(num_warmup_samples=0),
        target=target.target,
    )
    state = restored.states[conv.index]
    assert state.trials == 1 and state.best_s == 5e-6 and state.baseline_s == 3e-6
    assert set(restored.default_records) == {conv.index}
    assert default.key in restored.measured[conv.index]  # never proposed for measuring
    assert restored.unrecorded == {mean.index: [1e-7], matmul.index: [2e-8]}
    assert restored.trials == 1
