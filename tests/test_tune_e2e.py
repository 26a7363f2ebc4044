"""One real tune -> compile -> onnxruntime check through the CLI, then resume on a copy."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import ANY

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from run_files import journal

import onnx_models
from cli_args import both_builds, tune_args
from tune_orchestrator.cli.commands import main
from tune_orchestrator.run import session as session_module
from tune_orchestrator.rundir import RunDir
from tune_orchestrator.rundir.durability import checkpointed_spend
from tune_orchestrator.rundir.restore import spend_so_far

# Every test here runs a whole tune or reads one (the module's `tuned` fixture, ~20 s).
pytestmark = pytest.mark.slow


def records(run: Path) -> list[str]:
    return (run / "database_tuning_record.json").read_text().splitlines()


def defaults(run: Path) -> int:
    """Default schedules recorded: the database holds these beside the trials."""
    return len({e["task"] for e in journal(run) if e["type"] == "baseline" and e["record_key"]})


def orchestrate(model: Path, out: Path, budget: str, config: Path) -> SimpleNamespace:
    """`orchestrate --budget B --target llvm --config C --out O MODEL`, which must succeed."""
    result = CliRunner().invoke(main, tune_args(model, out, config, budget=budget))
    assert result.exit_code == 0, result.output + (
        repr(result.exception) if result.exception else ""
    )
    return result


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, fast_config):
    base = tmp_path_factory.mktemp("e2e")
    model = onnx_models.tiny_cnn(base / "twins.onnx", twin_convs=True)
    out = base / "run"
    with both_builds():  # these tests read the comparison of the two
        result = orchestrate(model, out, "16trials", fast_config)
    return SimpleNamespace(
        model=model,
        out=out,
        stdout=result.stdout,
        report=json.loads((out / "report.json").read_text()),
    )


def test_the_summary_tells_latency_speedup_trials_time_and_where(tuned):
    out = tuned.stdout
    assert "tuning twins for llvm" in out
    assert "\nSummary (twins on llvm (" in out and "as the finished run's report" not in out
    assert "end-to-end latency" in out and "untuned ->" in out
    # The verdict printed is the report's, with its figure (which verdict a real run lands on
    # is up to the machine; test_shipping.py and test_report.py force each one).
    summary = tuned.report["summary"]
    verdict = {
        "faster": f"({summary['speedup']:.2f}x faster)",
        "slower": f"({1 / (summary['speedup'] or 1):.2f}x slower); model.so is the untuned build",
        "no change": "tuned (no change: the timings overlap)",
    }
    assert verdict[summary["change"]] in out
    assert (
        "  model.so            the "
        f"{summary['shipped']} build, outputs match onnxruntime (checked on this host)"
    ) in out
    assert "median of 3 timings each, in turn at the end: untuned" in out
    assert "  schedules           " in out and "of 5 tasks run tuned schedules" in out
    assert "outputs             match onnxruntime" in out
    assert "trials              16 in 2 rounds" in out
    assert f"run directory       {tuned.out}" in out
    assert "stopped because     trial budget reached: 16 of 16" in out
    # The build pool's start-up, which a first round waits on, is told beside the measurement.
    ready = tuned.report["measurement"]["builders_ready_s"]
    assert ready["started"] >= 1 and ready["ready"] == ready["started"]
    assert 0 < ready["first"] <= ready["last"]
    assert (
        f"{ready['started']} building workers started with the run; {ready['ready']} ready, "
        "the first after "
    ) in out


def test_the_run_directory_holds_database_journal_config_report_and_library(tuned):
    out = tuned.out
    for name in (
        "database_workload.json",
        "database_tuning_record.json",
        "journal.jsonl",
        "config.json",
        "report.json",
        "model.so",
    ):
        assert (out / name).is_file(), name
    assert defaults(out) == len(tuned.report["tasks"])
    assert len(records(out)) == 16 + defaults(out)
    kinds = [e["type"] for e in journal(out)]
    assert kinds[0] == "session" and kinds[-1] == "session_end"
    assert kinds.count("round") == 2 and "untuned" in kinds and "stopped" in kinds
    assert kinds.index("stopped") < kinds.index("compared")
    assert (out / "logs" / "untuned.so").is_file()  # kept for the comparison of a resume
    assert kinds.count("baseline") == len(tuned.report["tasks"])
    config = json.loads((out / "config.json").read_text())
    assert config["fingerprint"]["model_sha256"] == tuned.report["model"]["sha256"]
    assert config["settings"]["tune"]["trials_per_round"] == 8  # the config file reached the run


def test_the_report_adds_up(tuned):
    report = tuned.report
    summary = report["summary"]
    assert summary["trials"] == 16 == sum(t["trials"] for t in report["tasks"])
    assert summary["check_ok"] is True and report["tuned"]["check"]["max_rel_error"] < 1e-4
    assert summary["measured_ratio"] == pytest.approx(
        summary["untuned_latency_s"] / summary["tuned_latency_s"]
    )
    claimed = 1.0 if summary["change"] == "no change" else summary["measured_ratio"]
    assert summary["speedup"] == report["comparison"]["speedup"] == claimed
    tuned_tasks = [t for t in report["tasks"] if t["trials"]]
    assert tuned_tasks and all(t["best_s"] > 0 and t["untuned_s"] > 0 for t in tuned_tasks)
    # each task runs the faster of its default and its best tuned schedule
    for t in report["tasks"]:
        faster_tuned = t["best_s"] is not None and t["best_s"] < t["untuned_s"]
        assert t["schedule"] == ("tuned" if faster_tuned else "default"), t
    assert summary["kept_default"] == [t["name"] for t in tuned_tasks if t["schedule"] == "default"]
    # the end-of-run comparison is the summary's, and its verdict follows the spread
    comparison = report["comparison"]
    u, t = comparison["untuned"], comparison["tuned"]
    assert report["untuned"]["latency"] == u and report["tuned"]["latency"] == t
    assert u["repeats"] == t["repeats"] == 3 and "start_latency" in report["untuned"]
    assert (
        summary["change"]
        == comparison["change"]
        == (
            "faster"
            if t["max_s"] < u["min_s"]
            else "slower"
            if t["min_s"] > u["max_s"]
            else "no change"
        )
    )
    assert summary["shipped"] == ("untuned" if summary["change"] == "slower" else "tuned")
    assert summary["shipped_checked"] is True and summary["mismatch_library"] is None
    assert set(report["spend"]["phases"]) >= {
        "import",
        "untuned",
        "search",
        "build",
        "measure",
        "compile",
        "check",
    }


def test_the_library_loads_and_matches_onnxruntime(tuned):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tuned.out / "model.so")), tvm.cpu())
    x = np.random.default_rng(7).standard_normal((1, 3, 8, 8)).astype("float32")
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    ref = ort.InferenceSession(str(tuned.model), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_stock_compile_relax_finds_our_records(tuned, capfd):
    """An unmodified TVM user: from_onnx, the two inference passes, compile_relax."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir import meta_schedule as ms

    config = json.loads((tuned.out / "config.json").read_text())
    target = tvm.target.Target(config["target"]["tvm"])
    mod = from_onnx(onnx.load(tuned.model), shape_dict={"x": [1, 3, 8, 8]}, dtype_dict="float32")
    mod = relax.transform.CanonicalizeBindings()(relax.transform.DecomposeOpsForInference()(mod))
    names = [t["name"] for t in tuned.report["tasks"]]
    capfd.readouterr()
    empty = ms.database.MemoryDatabase()
    ms.relax_integration.compile_relax(empty, mod, target, params=None, enable_warning=True)
    warnings = capfd.readouterr().err
    for name in names:  # proves the warnings are captured at all
        assert f"Tuning record is not found for primfunc: {name}\n" in warnings
    database = ms.database.JSONDatabase(work_dir=str(tuned.out))
    ms.relax_integration.compile_relax(database, mod, target, params=None, enable_warning=True)
    warnings = capfd.readouterr().err
    for name in names:  # tuned tasks and untuned ones: each has at least its default record
        assert f"Tuning record is not found for primfunc: {name}\n" not in warnings


def test_resume_measures_nothing_twice_and_counts_earlier_spend(tuned, tmp_path, fast_config):
    run = tmp_path / "run"
    shutil.copytree(tuned.out, run)
    before = records(run)
    first_wall = tuned.report["spend"]["wall_s"]
    result = orchestrate(tuned.model, run, "24trials", fast_config)
    assert (
        "resuming" in result.stdout
        and "16 trials spent before count against the budget" in result.stdout
    )
    after = records(run)
    assert after[: len(before)] == before  # earlier records untouched
    assert len(after) == 24 + defaults(run)
    assert len({(json.loads(r)[0], json.dumps(json.loads(r)[1][0])) for r in after}) == len(
        after
    )  # no candidate twice, no default schedule twice
    kinds = [e["type"] for e in journal(run)]
    assert kinds.count("session") == 2 and kinds.count("untuned") == 1  # baselines are not redone
    report = json.loads((run / "report.json").read_text())
    assert report["summary"]["trials"] == 24 and report["sessions"] == 2
    assert report["spend"]["wall_s"] > first_wall


def test_a_resume_says_what_earlier_sessions_spent_not_what_its_own_start_took(
    tuned, tmp_path, fast_config
):
    run = tmp_path / "run"
    shutil.copytree(tuned.out, run)
    before = checkpointed_spend(RunDir(run), spend_so_far(journal(run))).wall_s
    args = tune_args(tuned.model, run, fast_config, "--json", budget="24trials")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    (started,) = [e for e in events if e["event"] == "run_started"]
    assert started["resumed"] and started["spent_s"] == before and started["trials"] == 16


@pytest.mark.parametrize("shipped", [True, False], ids=["finished", "no-model-left"])
def test_a_resume_short_of_its_final_phase_keeps_what_was_measured_and_says_so(
    tuned, tmp_path, fast_config, shipped, monkeypatch
):
    run = tmp_path / "run"
    shutil.copytree(tuned.out, run)
    if not shipped:
        (run / "model.so").unlink()
    else:  # the same command again is told from the journal, before anything is read back

        def read_back(*args):
            raise AssertionError("the database was read back")

        monkeypatch.setattr(session_module, "open_database", read_back)
    before = records(run)
    spent = tuned.report["spend"]["wall_s"]
    budget = f"{math.ceil(spent) + 1}s"  # a second more than the first session spent
    result = CliRunner().invoke(main, tune_args(tuned.model, run, fast_config, budget=budget))
    if shipped:  # the same command again: answered as at a trial budget reached, exit 0
        assert result.exit_code == 0, result.output  # exit 3 read as a failure in pipelines
        line = result.stdout.splitlines()[0]
        assert line.startswith(
            f"stopped: the run already finished and would stop again at once: budget {budget} "
            "leaves too little to tune further; model.so is what it shipped, nothing was changed"
        ), line
        assert line.endswith("or more to tune further)") and "(give --budget " in line
    else:
        assert result.exit_code == 3, result.output
        (line,) = result.stderr.strip().splitlines()
        assert "too small to compile and check the 16 candidates measured earlier" in line
        assert "nothing was tuned" not in line
    assert records(run) == before  # refused before any work: the run directory is as it was
    assert (run / "model.so").is_file() == shipped


def test_rerunning_a_finished_run_spends_nothing_more(tuned, tmp_path, fast_config):
    run = tmp_path / "run"
    shutil.copytree(tuned.out, run)
    result = orchestrate(tuned.model, run, "16trials", fast_config)
    assert len(records(run)) == 16 + defaults(run)
    assert "stopped because     trial budget reached: 16 of 16" in result.stdout
    assert not any(e["type"] == "round" for e in journal(run)[len(journal(tuned.out)) :])


def test_a_resume_records_again_the_default_schedules_a_crash_lost(tuned, tmp_path, fast_config):
    run = tmp_path / "run"
    shutil.copytree(tuned.out, run)
    lines = records(run)
    trials = [line for line in lines if len(json.loads(line)[1][0][0]) > 1]
    assert len(lines) - len(trials) == defaults(run)  # a CPU default only looks up the root
    (run / "database_tuning_record.json").write_text("".join(f"{t}\n" for t in trials))
    before = journal(run)
    orchestrate(tuned.model, run, "16trials", fast_config)
    after = journal(run)[len(before) :]
    assert sorted(records(run)) == sorted(lines)  # the same records again, no more
    restated = [e for e in after if e["type"] == "baseline"]
    assert len(restated) == defaults(run) and all(e["record_key"] for e in restated)
    assert not any(e["type"] in ("round", "untuned") for e in after)  # nothing re-measured
    assert json.loads((run / "report.json").read_text())["summary"]["trials"] == 16


def test_the_real_report_validates_and_comes_in_every_form(tuned):
    import jsonschema

    from tune_orchestrator.budget.report import schema

    jsonschema.validate(tuned.report, schema())
    for name in (
        "report.md",
        "report.html",
        "plots/convergence.png",
        "plots/phases.png",
        "plots/tasks.png",
    ):
        assert (tuned.out / name).stat().st_size > 0, name
    assert tuned.report["budget"]["limits"][0]["spent"] == 16
    assert len(tuned.report["convergence"]) == 3  # untuned, then one point per round
    assert tuned.report["price"]["source"].startswith("configs/prices.toml")
    made = tuned.report["provenance"]
    assert made["command"].startswith("orchestrate --budget 16trials --target llvm")
    assert made["gpu"] is None and made["started"] <= made["ended"]
    rounds = (tuned.out / "rounds.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in rounds] == [["round", "task"], ["1", ANY], ["2", ANY]]


def test_estimate_learns_round_costs_from_earlier_runs(tuned, fast_config, two_cores):
    args = [
        "estimate",
        tuned.model,
        "--target",
        "llvm",
        "--config",
        fast_config,
        "--runs-dir",
        tuned.out.parent,
        "--budget",
        "10s",
        "--budget",
        "10min",
    ]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert (
        "twins on llvm" in out and " per inference, outputs match onnxruntime on 3 samples" in out
    )
    assert "rounds of 8 candidates" in out and "(round costs from 1 earlier run(s))" in out
    assert [
        line.split(":")[0].strip() for line in out.splitlines() if "of the attainable gain" in line
    ] == [
        "90% of the attainable gain",
        "95% of the attainable gain",
        "99% of the attainable gain",
    ]
    assert "trust: rough" in out and "; the tuning curve: built-in curve" in out
    assert "every run: import" in out and "(measured now)" in out
    assert "--budget 10s: refused up front; give --budget 1min or more" in out
    (ten,) = [line for line in out.splitlines() if "--budget 10min: ~" in line]
    assert " trials in " in ten and "x)" in ten  # trials, rounds, and the latency reached
    assert "search" in out.split(ten)[1].splitlines()[1]  # its phases on the next line


def test_pipelined_rounds_measure_every_candidate_once(tmp_path, fast_config):
    """Pipelining is for GPUs; forced on here, it must still keep every record once."""
    model = onnx_models.tiny_cnn(tmp_path / "twins.onnx", twin_convs=True)
    config = tmp_path / "pipelined.toml"
    config.write_text(
        fast_config.read_text().replace("[measure]\n", '[measure]\npipeline = "on"\n')
    )
    run = tmp_path / "run"
    orchestrate(model, run, "24trials", config)
    lines = records(run)
    assert len(lines) == 24 + defaults(run)
    assert len({(json.loads(r)[0], json.dumps(json.loads(r)[1][0])) for r in lines}) == len(lines)
    rounds = [e for e in journal(run) if e["type"] == "round"]
    assert sum(e["measured"] + e["failed"] for e in rounds) == 24


def read_back(tuned):
    """The run's target, tasks, database and what it learned of each record
    (rundir/learned.py)."""
    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.targets import resolve_target
    from tune_orchestrator.model.tasks import extract_tasks
    from tune_orchestrator.rundir.database import RunDatabase
    from tune_orchestrator.rundir.learned import LearnedFile

    target = resolve_target("llvm").target
    model = fuse_for_tuning(import_to_relax(load_model(tuned.model)), target)
    database = RunDatabase(tuned.out / RunDir.WORKLOAD_DB, tuned.out / RunDir.RECORD_DB)
    learned = LearnedFile.for_target(tuned.out / RunDir.LEARNED, target).read()
    return SimpleNamespace(
        target=target, tasks=extract_tasks(model, target), database=database, learned=learned
    )


def test_the_run_keeps_the_key_and_features_of_each_record_it_measured(tuned):
    """What a resume reads instead of replaying each record: the key of the schedule its
    trace gives, and the features the cost model learned (those TVM extracts from it)."""
    from tvm.s_tir.meta_schedule import TuneContext

    from tune_orchestrator.model.tasks import structural_key
    from tune_orchestrator.predictor import store_features

    run = read_back(tuned)
    stored = list(run.database.each_stored())
    trials = [s for s in stored if s.digest in run.learned]
    assert len(trials) == len(run.learned) == 16  # every trial; no default schedule
    built = sum(e["built"] for e in journal(tuned.out) if e["type"] == "round")
    assert sum(n.features is not None for n in run.learned.values()) == built > 0
    for s in trials:
        _, candidate = s.replay()
        note = run.learned[s.digest]
        assert note.key == structural_key(candidate.sch.mod)
        if note.features is not None:
            context = TuneContext(mod=s.workload.mod, target=run.target)
            (extracted,) = store_features(context, [candidate])
            np.testing.assert_array_equal(note.features, extracted)


def test_a_resume_replays_of_what_the_run_kept_only_its_searches_parents(tuned, monkeypatch):
    """Read back from learned.jsonl, a run resumes as from replaying every record: the same
    measured keys, counts, bests, parents and learned model; the traces replayed are the
    default schedules' and the parents' (9 ms each on the example model's convolutions, on
    two threads here)."""
    from tune_orchestrator.predictor import Predictor
    from tune_orchestrator.rundir import database as database_module
    from tune_orchestrator.rundir.restore import Known, restore
    from tune_orchestrator.search.cost_model import SharedCostModel

    run = read_back(tuned)
    replays = []
    replayed = database_module.replayed
    monkeypatch.setattr(
        database_module, "replayed", lambda *args: replays.append(1) or replayed(*args)
    )

    def restored(known):
        replays.clear()
        predictor = Predictor()
        got = restore(
            run.tasks,
            journal(tuned.out),
            run.database,
            cost_model=SharedCostModel(predictor),
            target=run.target,
            parents=2,
            known=known,
            threads=2,
        )
        keys = {i: [(keyed(c), s) for c, s in b] for i, b in got.bests.items()}
        states = [(s.trials, s.failures, s.best_s) for s in got.states]
        facts = (got.measured, states, keys, sorted(got.default_records))
        return facts, predictor._data, len(replays)

    def keyed(candidate):
        from tune_orchestrator.model.tasks import structural_key

        return structural_key(candidate.sch.mod)

    every, learned_every, all_replays = restored(Known())
    kept, learned_kept, few = restored(Known(learned=run.learned))
    assert kept == every
    assert all_replays == len(list(run.database.each_stored()))
    assert few == defaults(tuned.out) + sum(len(b) for b in every[2].values()) < all_replays
    assert learned_kept.keys() == learned_every.keys()
    for workload, (rows, latencies) in learned_every.items():
        assert learned_kept[workload][1] == latencies  # no build failed in this run
        for a, b in zip(learned_kept[workload][0], rows, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_warm_start_from_a_run_learns_what_it_kept_without_reading_it_into_tvm(
    tuned, monkeypatch
):
    """--warm-start RUN: the records whose features the run kept are learned from them;
    only the others (its default schedules) are read into TVM and extracted."""
    from tune_orchestrator import predictor as predictor_module
    from tune_orchestrator.predictor import Predictor

    run = read_back(tuned)
    read = []
    extract = predictor_module.record_features
    monkeypatch.setattr(
        predictor_module,
        "record_features",
        lambda records, *args, **kwargs: read.extend(records) or extract(records, *args, **kwargs),
    )
    model = Predictor(min_samples=10_000)
    used = predictor_module.warm_start([model], tuned.out, run.target)
    assert used.startswith(f"{16 + len(read)} records of ")
    assert len(read) == defaults(tuned.out)
    assert model.warm and model.samples == 16 + len(read)


def test_a_run_whose_every_search_fails_exits_1_and_a_resume_searches_again(
    tuned, tmp_path, fast_config, monkeypatch
):
    """Every task's search raised (as with a seed TVM cannot take): the untuned build shipped
    with exit code 0, which a pipeline took for a run that found nothing better."""
    import jsonschema

    from tune_orchestrator.events import schema
    from tune_orchestrator.search import TaskSearch

    def propose(self, wanted=None):
        raise RuntimeError("Check failed: an internal error of TVM's")

    run = tmp_path / "run"
    with monkeypatch.context() as broken:
        broken.setattr(TaskSearch, "propose", propose)
        result = CliRunner().invoke(main, tune_args(tuned.model, run, fast_config, "--json"))
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [
        "tuning ran nothing: no candidate ran, every task is retired: search failed 3 times in "
        "a row: Check failed: an internal error of TVM's; model.so is the untuned build. A "
        f"broken compiler or device, or a bug of ours: see {run / 'report.md'}; once mended, "
        "run the same command to go on"
    ]
    events = [json.loads(line) for line in result.stdout.splitlines()]
    for event in events:
        jsonschema.validate(event, schema())
    (stopped,) = [e for e in events if e["event"] == "stopped"]
    assert stopped["stop"] == "nothing-ran"
    assert events[-1]["event"] == "finished" and events[-1]["exit_code"] == 1
    summary = json.loads((run / "report.json").read_text())["summary"]
    assert summary["stop"] == "nothing-ran" and summary["trials"] == 0
    assert summary["default_schedules"] and (run / "model.so").is_file()
    # Mended: the tasks retired for their searches' failures are searched again.
    orchestrate(tuned.model, run, "8trials", fast_config)
    summary = json.loads((run / "report.json").read_text())["summary"]
    assert summary["trials"] == 8 and summary["stop"] == "trials"


def test_cores_tvm_leaves_idle_are_a_warning_of_the_run(tuned, tmp_path, fast_config, monkeypatch):
    """Where host.idle_cores finds them (which depends on the host: conftest keeps tests'
    runs from asking), the run warns once, in the output and the report."""
    said = "TVM's runtime runs each kernel on 1 of the 2 cores here: ..."
    monkeypatch.setattr(session_module, "idle_cores", lambda: said)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(tuned.model, run, fast_config))
    assert result.exit_code == 0, result.output
    assert result.stderr.count(f"warning: {said}") == 1
    assert json.loads((run / "report.json").read_text())["warnings"] == [said]
