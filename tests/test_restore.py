"""Resume bookkeeping against a real database: what was measured is recognised again."""

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.database import TuningRecord

from tune_orchestrator.config import Settings
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import extract_tasks, structural_key
from tune_orchestrator.run.loop import FAILED_RUN_SECS
from tune_orchestrator.rundir.restore import Known, restore, spend_so_far
from tune_orchestrator.search import TaskSearch


def conv_search(tiny_model, fast_config, database, *, proposals: int, cost_model=None):
    """The tiny model's target and tasks, its convolution, and a search of it committing to
    `database`."""
    target = resolve_target("llvm").target
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(load_model(tiny_model)), target), target)
    conv = next(t for t in tasks if "conv2d" in t.name)
    search = TaskSearch(
        conv,
        target=target,
        settings=Settings.load(fast_config),
        database=database,
        cost_model=cost_model or ms.cost_model.RandomModel(),
        rand_state=1,
        threads=2,
        proposals=proposals,
    )
    return target, tasks, conv, search


def test_records_read_back_from_disk_give_the_keys_of_the_proposed_candidates(
    tmp_path, tiny_model, fast_config
):
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    target, tasks, conv, search = conv_search(
        tiny_model, fast_config, database, proposals=8,
        cost_model=ms.cost_model.XGBModel(num_warmup_samples=0),
    )  # fmt: skip
    proposed = search.propose()
    assert proposed
    for i, mc in enumerate(proposed):
        run_secs = [FAILED_RUN_SECS] if i == 0 else [1e-3 * (i + 1)]
        database.commit_tuning_record(
            TuningRecord(mc.sch.trace, search.workload, run_secs, target, mc.args_info)
        )

    journal = [
        {"type": "session"},
        {
            "type": "round",
            "task": conv.index,
            "best_s": 2e-3,
            "spend": {"wall_s": 12.5, "trials": 7, "rounds": 1, "phases": {}},
        },
    ]
    reopened = ms.database.JSONDatabase(work_dir=str(tmp_path))
    restored = restore(
        tasks,
        journal,
        reopened,
        cost_model=ms.cost_model.XGBModel(num_warmup_samples=0),
        target=target,
    )

    assert restored.measured[conv.index] == {structural_key(mc.sch.mod) for mc in proposed}
    state = restored.states[conv.index]
    assert state.trials == len(proposed) and state.failures == 1
    assert state.best_s == 2e-3  # the failed record does not count as fast
    assert state.history == [2e-3] and restored.sessions == 1
    assert spend_so_far(journal).wall_s == 12.5
    assert restored.trials == len(proposed)
    # The search goes on from what ran, fastest first; the failed record is no parent.
    bests = restored.bests[conv.index]
    assert [secs for _, secs in bests] == [1e-3 * (i + 1) for i in range(1, len(proposed))]
    assert [structural_key(mc.sch.mod) for mc, _ in bests] == [
        structural_key(mc.sch.mod) for mc in proposed[1:]
    ]
    fewer = restore(
        tasks, journal, reopened, cost_model=ms.cost_model.RandomModel(), target=target, parents=2
    )
    assert [secs for _, secs in fewer.bests[conv.index]] == [2e-3, 3e-3]


def test_a_record_that_no_longer_replays_is_set_aside_and_counted(
    tmp_path, tiny_model, fast_config
):
    from tune_orchestrator.run.skipped import Skipped
    from tune_orchestrator.rundir import RunDir
    from tune_orchestrator.rundir.durability import open_database

    run = RunDir.open(tmp_path / "run", fingerprint={})
    database = run.database()
    target, tasks, conv, search = conv_search(tiny_model, fast_config, database, proposals=4)
    other = next(t for t in tasks if "conv2d" not in t.name)
    good, alien = search.propose()[:2]
    database.commit_tuning_record(
        TuningRecord(good.sch.trace, search.workload, [1e-3], target, good.args_info)
    )
    # A conv schedule filed under another task's workload: its trace cannot replay there, and
    # TVM's own reader fails on the whole file.
    elsewhere = database.commit_workload(other.workload)
    database.commit_tuning_record(
        TuningRecord(alien.sch.trace, elsewhere, [1e-3], target, alien.args_info)
    )
    warned = []
    skipped = Skipped(warned.append)
    restored = restore(
        tasks,
        [],
        open_database(run, skipped),
        cost_model=ms.cost_model.RandomModel(),
        target=target,
        skipped=skipped,
    )
    assert skipped.to_dict() == {"run_records": 1}
    assert len(warned) == 1 and "logs/unreplayable.jsonl" in warned[0]
    assert restored.states[conv.index].trials == 1 and restored.states[other.index].trials == 0
    assert len((run[RunDir.LOGS] / "unreplayable.jsonl").read_text().splitlines()) == 1
    run.close()


def test_a_resume_relearns_records_whose_features_the_library_kept_without_extracting(
    tmp_path, tiny_model, fast_config, monkeypatch
):
    """Extracting a record's features again costs ~5 ms; the library keeps those of the
    records a run added (library/features.py), and a resumed run relearns from them."""
    import numpy as np

    from tune_orchestrator.predictor import Predictor
    from tune_orchestrator.rundir.database import RunDatabase
    from tune_orchestrator.search import cost_model as cost_model_module

    files = (tmp_path / "database_workload.json", tmp_path / "database_tuning_record.json")
    database = RunDatabase(*files)
    target, tasks, conv, search = conv_search(tiny_model, fast_config, database, proposals=6)
    for i, mc in enumerate(search.propose()):
        run_secs = [1e-3 * (i + 1)]
        database.commit_tuning_record(
            TuningRecord(mc.sch.trace, search.workload, run_secs, target, mc.args_info)
        )
    reopened = RunDatabase(*files)
    digests = [stored.digest for stored in reopened.each_stored()]
    kept = {d: (conv.key, np.full((1, 3), i, np.float32)) for i, d in enumerate(digests)}

    def no_extraction(*args, **kwargs):
        raise AssertionError("features extracted again")

    monkeypatch.setattr(cost_model_module, "store_features", no_extraction)
    predictor = Predictor()
    journal = [{"type": "session"}]
    shared = cost_model_module.SharedCostModel(predictor)
    restore(tasks, journal, reopened, cost_model=shared, target=target, known=Known(library=kept))
    ((rows, _),) = predictor._data.values()
    assert sorted(float(m[0, 0]) for m in rows) == list(range(len(digests)))
