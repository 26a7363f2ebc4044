"""The cost report: JSON that validates against its schema, Markdown, HTML that parses, plots."""

from __future__ import annotations

import datetime as dt
import json
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from tune_orchestrator.api import Result
from tune_orchestrator.budget import Ledger, parse_budget
from tune_orchestrator.budget.render import describe_coverage, document, markdown, to_html
from tune_orchestrator.budget.report import (
    Notes,
    Outcome,
    RunFacts,
    TaskWork,
    make_report,
    schema,
    task_row,
)
from tune_orchestrator.budget.units import fmt_latency
from tune_orchestrator.cli.commands import check_failed_message, main
from tune_orchestrator.cli.printer import Printer
from tune_orchestrator.deploy.timing import Latency, change, claimed_speedup
from tune_orchestrator.errors import InputError
from tune_orchestrator.events import schema as events_schema
from tune_orchestrator.forecast.earlier import journal_observations
from tune_orchestrator.provenance import provenance
from tune_orchestrator.run.reporting import rerender, write_report
from tune_orchestrator.rundir import RunDir


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


PROVENANCE = {
    "started": "2025-03-01T09:00:00+00:00",
    "ended": "2025-03-01T09:50:00+00:00",
    "package": "0.1.0",
    "tvm": "0.27.0.post1",
    "python": "3.11.7",
    "host": {"name": "gpu-7", "cpu": "AMD EPYC 9654 96-Core Processor", "cores": 16},
    "gpu": {"name": "NVIDIA H100 80GB HBM3", "driver": "550.54.15"},
    "command": "orchestrate --budget 2gpu-h m.onnx",
}


def synthetic_report(
    run_dir: Path,
    *,
    tuned_s: float = 1.3e-3,
    kept_default: bool = False,
    untouched: float = 0.0,
    shipment: dict | None = None,
) -> dict:
    """A finished GPU run of two tasks (and with `untouched`, a third holding that share of
    the model that got no trials), spend driven by a fake clock; the tuned model timed in turn
    with the untuned one at 4.1 ms (4.0-4.3 ms): `tuned_s` +-0.1 ms."""
    clock = Clock()
    ledger = Ledger(clock=clock, devices=1, usd_per_hour=2.99)
    ledger.record_point(4e-3)
    for i, latency in enumerate([2.5e-3, 1.6e-3, 1.3e-3, 1.22e-3, 1.2e-3]):
        with ledger.phase("search" if i % 2 else "measure"):
            clock.now += 600.0
        ledger.charge_round(trials=64, seconds=600.0, fixed_s=200.0)
        ledger.record_point(latency)
    tasks = [
        task_row(
            name="conv",
            index=0,
            weight=2,
            flops=1e9,
            work=TaskWork(
                trials=192,
                failures=3,
                rounds=3,
                proposed=400,
                filtered=150,
                built=190,
                waiting=58,
                spend_s=1800.0,
            ),
            untuned_s=1.5e-3,
            best_s=0.45e-3,
            retired=None,
            schedule="tuned",
            share=0.75,
        ),
        task_row(
            name="dense",
            index=1,
            weight=1,
            flops=1e8,
            work=TaskWork(
                trials=128,
                failures=0,
                rounds=2,
                spend_s=1200.0,
            ),
            untuned_s=1e-3,
            best_s=1.2e-3 if kept_default else 0.3e-3,
            retired="plateau: ...",
            schedule="default" if kept_default else "tuned",
            share=0.25 - untouched,
        ),
    ]
    if untouched:
        tasks.append(
            task_row(
                name="pool",
                index=2,
                weight=1,
                flops=1e6,
                work=TaskWork(
                    trials=0,
                    failures=0,
                    rounds=0,
                    spend_s=0.0,
                ),
                untuned_s=0.1e-3,
                best_s=None,
                retired=None,
                schedule="default",
                share=untouched,
            )  # fmt: skip
        )
    compiled = {
        "compile_s": 12.0,
        "check_s": 3.0,
        "check": {
            "status": "matched",
            "max_rel_error": 1e-6,
            "rtol": 1e-3,
            "outputs": 1,
            "samples": 3,
            "inputs": "3 random samples (seeds 0-2, integers 0..9)",
            "reason": None,
            "ok": True,
        },
        "latency": {
            "median_s": tuned_s,
            "min_s": tuned_s - 1e-4,
            "max_s": tuned_s + 1e-4,
            "repeats": 10,
            "runs_per_timing": 12,
        },
    }
    untuned = {
        **compiled,
        "latency": {"median_s": 4.1e-3, "min_s": 4e-3, "max_s": 4.3e-3, "repeats": 10},
        "start_latency": {"median_s": 5.9e-3, "min_s": 5e-3, "max_s": 7e-3, "repeats": 10},
    }
    timed = Latency((4e-3, 4.1e-3, 4.3e-3)), Latency((tuned_s - 1e-4, tuned_s + 1e-4))
    verdict = change(*timed)
    comparison = {
        "change": verdict,
        "speedup": claimed_speedup(verdict, *timed),
        "measured_ratio": 4.1e-3 / tuned_s,
        "shipped": "untuned" if verdict == "slower" else "tuned",
        "repeats": 10,
        "untuned": untuned["latency"],
        "tuned": compiled["latency"],
    }
    shipment = {
        "shipped": comparison["shipped"],
        "shipped_checked": True,
        "checked_on": "this host",
        "unchecked_reason": None,
        "mismatch_library": None,
        "check_status": "matched",
        "tuned_not_shipped": None,
        **(shipment or {}),
    }
    paths = {
        k: str(run_dir / k)
        for k in (
            "run_dir",
            "database_workload",
            "database_tuning_record",
            "library",
            "journal",
            "config",
            "report",
            "report_md",
        )
    }
    paths["library"] = str(run_dir / "model.so")  # as a run names it
    facts = RunFacts(
        model={
            "path": "m.onnx",
            "name": "m",
            "sha256": "0" * 64,
            "inputs": [{"name": "x", "shape": [1], "dtype": "float32"}],
            "outputs": ["y"],
        },
        target={
            "spec": "cuda",
            "description": "cuda sm_90 (NVIDIA H100 80GB HBM3)",
            "device": "NVIDIA H100 80GB HBM3",
            "tvm": {"kind": "cuda"},
        },
        settings={},
        budget=parse_budget("2gpu-h"),
        price={"usd_per_hour": 2.99, "source": "configs/prices.toml"},
        build_only=False,
        sessions=1,
        paths=paths,
        provenance=PROVENANCE,
    )
    outcome = Outcome(
        untuned=untuned,
        tuned=compiled,
        comparison=comparison,
        shipment=shipment,
        stop_reason="stopped at 0.833 of 2 GPU-h ($2.49): ...",
    )
    notes = Notes(
        candidate_filter={
            "name": "xgb",
            "warm_start": False,
            "samples": 454,
            "recall_target": 0.9,
            "threshold": 0.828125,
            "seconds": 0.09,
            "total": {
                "proposed": 535,
                "kept": 480,
                "rejected": 55,
                "audited": 13,
                "false_negatives": 0,
                "top_kept": 29.2,
                "top_total": 29.2,
                "recall": 1.0,
            },
            "tasks": {},
        },
    )
    return make_report(
        facts, outcome, tasks=tasks, spend=ledger.snapshot(), curve=ledger.history, notes=notes
    )


def test_a_report_validates_and_renders_to_markdown_html_and_plots(tmp_path):
    report = synthetic_report(tmp_path)
    jsonschema.validate(report, schema())
    assert report["summary"]["device_h"] == pytest.approx(3000 / 3600)
    assert report["summary"]["usd"] == pytest.approx(3000 / 3600 * 2.99)
    assert report["phases"]["idle"] == pytest.approx(0.0)
    assert report["measuring_share"] == pytest.approx(0.6)
    assert report["forecast"]["left"] == pytest.approx(2 - 3000 / 3600)
    assert 0 <= report["forecast"]["gain"] < 0.05  # the curve has flattened
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        written = write_report(run, report)
        html_text = written["html"].read_text()
        md = written["markdown"].read_text()
    assert (
        "| conv | 2 | 75.0% | 400 | 150 | 190 | 192 | 58 | 1.5 ms | 450 us | 3.33x | tuned |" in md
    )
    assert "2 of 2 tasks tuned." in md
    assert "(**3.15x faster**)" in md and "$2.49" in md
    assert "10 timings each: untuned 4 ms-4.3 ms, tuned 1.2 ms-1.4 ms" in md
    assert (
        "xgb kept 480 of 535 offered (90%), the best-ranked 83% of a round at the end; audits "
        "(13 of 55 rejected measured) put its recall of each round's top 10% at 100%, with 0 "
        "false negatives" in md
    )
    assert "<h2>Filter</h2>" in html_text
    images = ImageCollector.collect(html_text)
    assert set(images) == {"plots/convergence.png", "plots/phases.png", "plots/tasks.png"}
    for image in images:
        assert (tmp_path / "run" / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(written["json"].read_text()) == report


class ImageCollector(HTMLParser):
    """Parses an HTML page strictly enough to fail on broken markup; collects image sources."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag not in ("meta", "br"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    @classmethod
    def collect(cls, text: str) -> list[str]:
        parser = cls()
        parser.feed(text)
        parser.close()
        assert not parser.open, parser.open
        return parser.images


def test_the_wait_for_background_rounds_says_what_the_background_spent(tmp_path):
    """On a GPU run the next round is searched and built while one is measured: most search
    time is then not in the `search` phase but behind `ahead`, and the report says so."""
    from tune_orchestrator.budget.render import document, markdown

    report = synthetic_report(tmp_path)
    report["phases"]["ahead"] = 300.0
    report["overlapped"] = {"search": 470.0, "build": 260.0, "filter": 0.01, "ahead": 10.0}
    md = markdown(document(report), {}, tmp_path)
    assert (
        "| ahead (waiting for rounds prepared in the background, where the run spent search "
        "8m00s, build 4m20s) | 5m00s | 10.0% |" in md
    )
    report["overlapped"] = {}
    assert "| ahead | 5m00s | 10.0% |" in markdown(document(report), {}, tmp_path)


def test_the_filter_line_says_when_the_filter_has_not_judged_yet():
    from tune_orchestrator.budget.render import describe_filter

    total = {"proposed": 64, "kept": 64, "rejected": 0, "audited": 0, "false_negatives": 0}
    stats = {"name": "xgb", "threshold": None, "seconds": 0.01, "total": total}
    assert describe_filter(stats) == (
        "xgb kept 64 of 64 offered (100%); not calibrated yet, so everything offered was kept"
    )
    assert describe_filter({"name": "none"}) is None


def test_the_filter_line_counts_one_false_negative_in_the_singular():
    from tune_orchestrator.budget.render import describe_filter

    total = {"proposed": 64, "kept": 40, "rejected": 24, "audited": 5, "false_negatives": 1}
    total["recall"] = 0.9
    stats = {"name": "xgb", "threshold": 0.6, "seconds": 0.5, "total": total}
    assert "at 90%, with 1 false negative; own time" in describe_filter(stats)
    assert "aiming" not in describe_filter({**stats, "recall_target": 0.9, "recall_aimed_at": 0.9})
    total.update(recall_interval=[0.5512, 1.0], rounds=[[1.3, 1.3]] * 6)
    assert "at 90% (90% interval 55%-100% over 6 audited rounds), with 1 false" in (
        describe_filter(stats)
    )
    total["recall_interval"] = None  # fewer than two audited rounds
    assert "at 90%, with 1 false negative" in describe_filter(stats)
    stats.update(recall_target=0.9, recall_aimed_at=0.94)
    assert "round at the end (aiming at 94% of its top after rounds that kept less than 90%)" in (
        describe_filter(stats)
    )
    stats["costs"] = {"ranking": "gain_per_second", "build_samples": 300}
    stats["costs"].update(predicted_timeouts_dropped=3, timeout_s=5.0)
    assert "than 90%), ranked by expected gain per second (300 builds timed), 3 predicted " in (
        describe_filter(stats)
    )
    assert "to build past the 5-s timeout left unbuilt; audits" in describe_filter(stats)
    del stats["costs"]
    total["explored"] = 3
    assert describe_filter(stats).startswith(
        "xgb kept 40 of 64 offered (62%), 3 of them the search's random picks, kept unjudged, "
        "the best-ranked 60% of a round at the end"
    )


def test_report_command_renders_again_and_refuses_what_is_not_a_run(tmp_path):
    report = synthetic_report(tmp_path)
    run_dir = tmp_path / "run"
    with RunDir.open(run_dir, fingerprint={}) as run:
        run.write_json(RunDir.CONFIG, {"fingerprint": {}})
        write_report(run, report)
    (run_dir / "report.md").unlink()
    (run_dir / "plots" / "tasks.png").unlink()
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert (run_dir / "report.md").is_file() and (run_dir / "plots" / "tasks.png").is_file()
    with pytest.raises(InputError, match="is not a run directory"):
        rerender(tmp_path)
    # A typo: it was "not a run directory (no config.json)".
    with pytest.raises(InputError, match=r"/missing does not exist; give the --out of a run$"):
        rerender(tmp_path / "missing")


@pytest.mark.parametrize(
    "change, refused",
    [
        ({"version": 99}, "is a report of version 99; this tune-orchestrator renders version 1"),
        ({"convergence": None}, "lacks 'convergence': it was edited or cut short; orchestrate "),
    ],
)
def test_report_command_refuses_a_report_of_another_version_or_one_cut_short(
    tmp_path, change, refused
):
    """Both were an internal error (KeyError: 'convergence') with a traceback."""
    report = synthetic_report(tmp_path)
    run_dir = tmp_path / "run"
    with RunDir.open(run_dir, fingerprint={}) as run:
        run.write_json(RunDir.CONFIG, {"fingerprint": {}})
        report.update(change)
        report = {k: v for k, v in report.items() if v is not None}
        run.write_json(RunDir.REPORT, report)
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and refused in result.stderr
    assert "Traceback" not in result.stderr


def test_a_torn_report_of_a_finished_run_is_written_again_by_the_command_it_names(
    tmp_path, fast_config, monkeypatch
):
    """It said "the run directory is damaged", with no way out named; then "resume the run
    (orchestrate --out RUN)", which lacked the model and, the run's budget spent, was
    refused with nothing written. A dynamic model's command lacked its --input-shape (and
    was refused for it), a run on real samples its --check-inputs, one at a price its --price."""
    import shlex

    import numpy as np

    import onnx_models
    from cli_args import tune_args

    run_dir, folder = tmp_path / "run", tmp_path / "models"
    folder.mkdir()
    model = onnx_models.tiny_cnn(folder / "dyn.onnx", batch="N")
    np.savez(folder / "samples.npz", x=np.ones((1, 3, 8, 8), dtype="float32"))
    given = ["--input-shape", "x:1x3x8x8", "--check-inputs", "samples.npz", "--price", "2.5"]
    monkeypatch.chdir(folder)  # the files named as a user in their folder names them
    tuned = CliRunner().invoke(main, tune_args(Path(model.name), run_dir, fast_config, *given))
    assert tuned.exit_code == 0, tuned.output
    settings = json.loads((run_dir / "config.json").read_text())["settings"]
    text = (run_dir / "report.json").read_text()
    (run_dir / "report.json").write_text(text[: len(text) // 2])
    monkeypatch.chdir(tmp_path)  # elsewhere now
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: cannot read {run_dir / 'report.json'} (")
    assert "Traceback" not in result.stderr
    fix = result.stderr.split("it was cut short or edited; ", 1)[1]
    words = shlex.split(fix.split(" writes it again from the run's records")[0])
    variables, command = words[: words.index("orchestrate")], words[words.index("orchestrate") :]
    # fast_config's settings, which the run had from --config, given again without the file
    assert variables == [
        "ORCHESTRATE_SEARCH_POPULATION=64", "ORCHESTRATE_SEARCH_GENETIC_NUM_ITERS=2",
        "ORCHESTRATE_SEARCH_COST_MODEL_WARMUP=0", "ORCHESTRATE_MEASURE_REPEAT=2",
        "ORCHESTRATE_MEASURE_MIN_REPEAT_MS=5", "ORCHESTRATE_CHECK_LATENCY_REPEAT=3",
        "ORCHESTRATE_CHECK_LATENCY_MIN_REPEAT_MS=10",
    ]  # fmt: skip
    assert command == [
        "orchestrate", "--budget", "8trials", "--target", "llvm", "--trials-per-round", "8",
        "--input-shape", "x:1x3x8x8", "--check-inputs", str(folder / "samples.npz"),
        "--price", "2.5", "--build-only", "--out", str(run_dir), str(model),
    ]  # fmt: skip
    again = CliRunner().invoke(main, command[1:], env=dict(v.split("=", 1) for v in variables))
    assert again.exit_code == 0, again.output
    assert json.loads((run_dir / "config.json").read_text())["settings"] == settings
    after = json.loads((run_dir / "report.json").read_text())
    assert after["summary"]["trials"] == 8 and after["tasks"]  # the earlier session's trials
    assert after["tuned"]["check"]["inputs"] == f"1 sample(s) from {folder / 'samples.npz'}"
    assert after["price"]["usd_per_hour"] == 2.5
    assert after["summary"]["stop_reason"] == (
        "build only: nothing was tuned (the run's tuning had stopped: trial budget reached: 8 of 8)"
    )
    assert CliRunner().invoke(main, ["report", str(run_dir)]).exit_code == 0


def test_journal_observations_give_each_task_its_share_of_its_final_gain():
    journal = [
        {"type": "baseline", "task": 0, "latency_s": 10.0},
        {"type": "round", "task": 0, "best_s": 4.0, "measured": 60, "failed": 4},
        {"type": "round", "task": 0, "best_s": 2.5, "measured": 64, "failed": 0},
        {"type": "round", "task": 0, "best_s": 2.0, "measured": 64, "failed": 0},
        {"type": "baseline", "task": 1, "latency_s": 1.0},
        {"type": "round", "task": 1, "best_s": 0.5, "measured": 64, "failed": 0},  # one round only
    ]
    assert journal_observations(journal) == [(64, 0.75), (128, 0.9375)]


@pytest.mark.parametrize(
    "tuned_s, headline, line",
    [
        (1.3e-3, "(**3.15x faster**)", "(3.15x faster)"),
        (4.15e-3, "(**no change: the timings overlap**)", "(no change: the timings overlap)"),
        (
            5e-3,
            "(**1.22x slower**; model.so is the untuned build)",
            "(1.22x slower); model.so is the untuned build",
        ),
    ],
)
def test_report_and_summary_claim_a_change_only_beyond_the_spread(
    tmp_path, capsys, tuned_s, headline, line
):
    report = synthetic_report(tmp_path, tuned_s=tuned_s, kept_default=True)
    jsonschema.validate(report, schema())
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        md = write_report(run, report)["markdown"].read_text()
    assert headline in md
    assert "1 tuned task(s) kept their default schedule, faster than every candidate: dense" in md
    result = Result.from_report(report)
    assert result.change == report["summary"]["change"] and result.kept_default == ("dense",)
    assert result.untuned_latency["max_s"] == 4.3e-3 and result.tuned_latency["repeats"] == 10
    Printer(quiet=True, tty=False).summary(result)
    out = capsys.readouterr().out
    assert f"4.1 ms untuned -> {fmt_latency(tuned_s)} tuned {line}" in out
    assert "median of 10 timings each, in turn at the end: untuned 4 ms-4.3 ms" in out
    assert (
        "schedules           1 of 2 tasks run tuned schedules; 1 tuned kept the default "
        "schedule, faster than every candidate: dense" in out
    )


def test_the_report_says_how_much_of_the_model_is_in_tasks_never_tuned(tmp_path):
    report = synthetic_report(tmp_path, untouched=0.05)
    assert report["summary"]["tasks_tuned"] == 2
    assert report["summary"]["untouched_share"] == pytest.approx(0.05)
    jsonschema.validate(report, schema())
    assert "2 of 3 tasks tuned; the 1 never tuned hold 5.0% of the model's kernel time." in (
        markdown(document(report), {}, tmp_path)
    )
    assert describe_coverage({"tasks_tuned": 3, "untouched_share": 0.0}, 3) == "3 of 3 tasks tuned."


def finished_event(result: Result) -> dict:
    """The `finished` event of `result`, as tune() emits it."""
    return {
        "schema": "tune-orchestrator/event",
        "version": 1,
        "event": "finished",
        "time": 0.0,
        "result": json.loads(json.dumps(result.to_dict())),
        "exit_code": result.exit_code,
    }


def test_a_change_within_the_spread_is_speedup_1_in_report_result_event_and_text(tmp_path):
    report = synthetic_report(tmp_path, tuned_s=4.15e-3)  # 4.05-4.25 ms against 4.0-4.3 ms
    summary = report["summary"]
    assert summary["change"] == "no change" and summary["speedup"] == 1.0
    assert summary["measured_ratio"] == pytest.approx(4.1e-3 / 4.15e-3)  # kept, as measured
    jsonschema.validate(report, schema())
    result = Result.from_report(report)
    assert (result.change, result.speedup) == ("no change", 1.0)
    assert result.measured_ratio == summary["measured_ratio"]
    event = finished_event(result)
    jsonschema.validate(event, events_schema())
    assert event["result"]["speedup"] == 1.0 and event["result"]["change"] == "no change"
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        written = write_report(run, report)
    for text in (written["markdown"].read_text(), written["html"].read_text()):
        assert "no change: the timings overlap" in text and "0.99x" not in text


DIFFERS_CHECK = {
    "status": "differs",
    "max_rel_error": 0.5,
    "rtol": 1e-3,
    "outputs": 1,
    "samples": 3,
    "inputs": "3 random samples (seeds 0-2, integers 0..9)",
    "reason": "max relative error 5.00e-01 > rtol 0.001 (output 'y', sample 0)",
    "ok": False,
}


def test_a_tuned_build_whose_outputs_differ_says_what_shipped_everywhere(tmp_path, capsys):
    aside = str(tmp_path / "run" / "model.tuned-MISMATCH.so")
    why = (
        "its outputs differ from onnxruntime's (max relative error 5.00e-01 > rtol 0.001 "
        f"(output 'y', sample 0)); kept aside as {aside}, not to deploy"
    )
    shipment = {"shipped": "untuned", "mismatch_library": aside, "check_status": "differs"}
    report = synthetic_report(tmp_path, shipment={**shipment, "tuned_not_shipped": why})
    report["tuned"]["check"] = DIFFERS_CHECK
    report["summary"]["check_ok"] = False
    jsonschema.validate(report, schema())
    result = Result.from_report(report)
    assert result.exit_code == 4 and result.shipped == "untuned"
    assert result.mismatch_library == Path(aside)
    jsonschema.validate(finished_event(result), events_schema())
    assert check_failed_message(result).startswith(
        f"the tuned model failed its output check and was not shipped: {why}; model.so is the "
        "untuned build, whose outputs match; see "
    )
    said = (
        "the untuned build, outputs match onnxruntime (checked on this host); not the tuned "
        f"build: {why}"
    )
    assert f"model.so: {said}." in markdown(document(report), {}, tmp_path)
    Printer(quiet=True, tty=False).summary(result)
    assert f"  model.so            {said}\n" in capsys.readouterr().out


def test_when_no_build_matches_exit_4_says_no_model_so_was_written(tmp_path, capsys):
    why = "its outputs differ from onnxruntime's (...); kept aside as model.tuned-MISMATCH.so"
    report = synthetic_report(
        tmp_path,
        shipment={"shipped": "none", "shipped_checked": False, "checked_on": None,
                  "mismatch_library": str(tmp_path / "model.tuned-MISMATCH.so"),
                  "check_status": "differs", "tuned_not_shipped": why},
    )  # fmt: skip
    report["tuned"]["check"] = DIFFERS_CHECK
    report["summary"]["check_ok"] = False
    jsonschema.validate(report, schema())
    result = Result.from_report(report)
    assert result.exit_code == 4
    assert "; no model.so was written: no build passed its output check;" in (
        check_failed_message(result)
    )
    Printer(quiet=True, tty=False).summary(result)
    out = capsys.readouterr().out
    assert (
        f"  model.so            NOT WRITTEN: no build passed its output check; the tuned build: {why}"
        in out
    )
    assert str(result.paths["library"]) not in out


def test_a_tuned_build_that_could_not_be_checked_exits_5_whatever_shipped(tmp_path):
    """A fleet unreachable at the end: the untuned build, checked before, ships; not exit 0."""
    why = "its outputs could not be checked: the RPC fleet is unreachable (...)"
    report = synthetic_report(
        tmp_path,
        shipment={"shipped": "untuned", "check_status": "unchecked", "tuned_not_shipped": why},
    )
    report["tuned"]["check"] = {**DIFFERS_CHECK, "status": "unchecked", "ok": None}
    report["summary"]["check_ok"] = None
    jsonschema.validate(report, schema())
    result = Result.from_report(report)
    assert result.exit_code == 5 and result.tuned_not_shipped == why
    jsonschema.validate(finished_event(result), events_schema())
    assert "once the fleet answers, --build-only with the same --rpc" in check_failed_message(
        result
    )


def test_an_unchecked_model_so_says_so_and_why(tmp_path, capsys):
    why = "no CUDA device here and no RPC fleet (--rpc) to run it on"
    report = synthetic_report(
        tmp_path, shipment={"shipped_checked": False, "checked_on": None, "unchecked_reason": why}
    )
    jsonschema.validate(report, schema())
    result = Result.from_report(report)
    assert result.shipped_checked is False and result.unchecked_reason == why
    assert result.exit_code == 0
    Printer(quiet=True, tty=False).summary(result)
    assert (
        "  model.so            the tuned build, UNCHECKED, its outputs were never compared "
        f"with onnxruntime's: {why}\n"
    ) in capsys.readouterr().out


def test_the_report_says_when_with_what_where_and_by_which_command_it_was_made(tmp_path):
    report = synthetic_report(tmp_path)
    jsonschema.validate(report, schema())
    line = (
        "Run 2025-03-01T09:00:00+00:00 to 2025-03-01T09:50:00+00:00 by `orchestrate --budget "
        "2gpu-h m.onnx`, with tune-orchestrator 0.1.0, TVM 0.27.0.post1, Python 3.11.7 on gpu-7 "
        "(AMD EPYC 9654 96-Core Processor, 16 cores), GPU NVIDIA H100 80GB HBM3 (driver "
        "550.54.15)."
    )
    assert f"\n\n{line}\n\n" in markdown(document(report), {}, tmp_path)
    assert f"<p><small>{line}</small></p>" in to_html(document(report), {}, tmp_path)
    # In a container limited to 2 CPUs, where the run set TVM's threads to match.
    report["provenance"]["host"].update(cores=2, cpu_quota=2, tvm_threads="2")
    jsonschema.validate(report, schema())
    on = "on gpu-7 (AMD EPYC 9654 96-Core Processor, 2 cores, a CPU quota of 2, TVM_NUM_THREADS=2)"
    assert on in markdown(document(report), {}, tmp_path)
    del report["provenance"]  # a report written before reports carried it renders still
    assert "Run " not in markdown(document(report), {}, tmp_path)


def test_the_warnings_are_in_the_report_a_person_reads_not_only_in_report_json(tmp_path):
    """A second run measuring beside this one, a run directory mended after a crash: said once
    on stderr, then only in report.json."""
    report = synthetic_report(tmp_path)
    report["warnings"] = [
        "another orchestrate process measures on cpu during this run: the measurements of both "
        "runs are disturbed"
    ]
    jsonschema.validate(report, schema())
    said = "Warning: another orchestrate process measures on cpu during this run"
    assert said in markdown(document(report), {}, tmp_path)
    assert said in to_html(document(report), {}, tmp_path)


def test_provenance_reads_versions_host_and_driver_and_names_the_api_or_command(monkeypatch):
    import platform
    from importlib.metadata import version

    import tvm

    from tune_orchestrator.measure import telemetry

    class Nvml:
        def nvmlSystemGetDriverVersion(self):
            return b"550.54.15"

    monkeypatch.setattr(telemetry, "_nvml", Nvml)
    made = provenance(started="2025-03-01T09:00:00+00:00", command=None, gpu=None, local_gpu=True)
    jsonschema.validate({"provenance": made}, {"properties": schema()["properties"]})
    assert made["command"] == "python API" and made["gpu"] is None
    assert made["started"] == "2025-03-01T09:00:00+00:00"
    assert dt.datetime.fromisoformat(made["ended"]).utcoffset() == dt.timedelta(0)
    assert (made["package"], made["tvm"], made["python"]) == (
        version("tune-orchestrator"),
        tvm.__version__,
        platform.python_version(),
    )
    assert made["host"]["cores"] >= 1 and made["host"]["cpu"] and made["host"]["name"]
    argv = ["orchestrate", "--budget", "5 min", "m.onnx"]
    local = provenance(started="", command=argv, gpu="NVIDIA H100", local_gpu=True)
    assert local["command"] == "orchestrate --budget '5 min' m.onnx"
    assert local["gpu"] == {"name": "NVIDIA H100", "driver": "550.54.15"}
    fleet = provenance(started="", command=argv, gpu="NVIDIA H100", local_gpu=False)
    assert fleet["gpu"] == {"name": "NVIDIA H100", "driver": None}  # not known from here


def test_the_cli_hands_its_command_line_to_the_run(tmp_path, monkeypatch):
    from tune_orchestrator import api

    seen = {}

    def fake_run(model, budget, **options):
        seen.update(options)
        raise InputError("stop here")

    monkeypatch.setattr(api, "run", fake_run)
    args = ["--budget", "5min", str(tmp_path / "m.onnx")]
    assert CliRunner().invoke(main, args).exit_code == 2
    assert seen["command"] == ["orchestrate", *args]


def test_the_tasks_table_runs_by_share_and_folds_the_tasks_never_tuned(tmp_path):
    report = synthetic_report(tmp_path, untouched=0.05)
    report["tasks"] = [*reversed(report["tasks"]), {**report["tasks"][2], "index": 3, "share": 0.0}]
    md = markdown(document(report), {}, tmp_path)
    table = md.split("## Tasks\n\n")[1].split("\n\n")[0].splitlines()
    assert [row.split(" | ")[0] for row in table[2:4]] == ["| conv", "| dense"]
    assert table[4] == "| 2 tasks never tuned, holding 5.0% of the model's kernel time |" + (
        "  |" * 13
    )
    assert len(table) == 5 and "| pool |" not in md
    html_text = to_html(document(report), {}, tmp_path)
    assert (
        '<tr><td colspan="14" style="text-align:left">2 tasks never tuned, holding 5.0% of the '
        "model&#x27;s kernel time</td></tr>\n</table>" in html_text
    )
    ImageCollector.collect(html_text)  # still well formed
    report["tasks"][0]["share"] = None  # the share of a task never tuned is unknown
    assert "| 2 tasks never tuned, holding an unknown share of the model's kernel time |" in (
        markdown(document(report), {}, tmp_path)
    )


def test_the_convergence_plot_is_in_end_to_end_terms(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tune_orchestrator.budget.grammar import WALL
    from tune_orchestrator.budget.render.plots import _convergence, end_to_end_scale

    report = synthetic_report(tmp_path)  # kernels 4 ms untuned, the model 4.1 ms end to end
    assert end_to_end_scale(report) == pytest.approx(4.1e-3 / 4e-3)
    fig, ax = plt.subplots()
    _convergence(ax, report, WALL)
    curve, untuned = ax.get_lines()[0], ax.get_lines()[-1]
    assert curve.get_ydata()[0] == pytest.approx(4.1)  # starts on the untuned model's line
    assert curve.get_ydata()[-1] == pytest.approx(1.2 * 4.1 / 4)
    assert list(untuned.get_ydata()) == pytest.approx([4.1, 4.1])
    tuned = ax.collections[-1].get_offsets()[0]
    assert list(tuned) == pytest.approx([50.0, 1.3])  # at the stop, as timed at the end
    assert ax.get_ylabel() == "end-to-end latency, ms"
    plt.close(fig)
    report["tasks"][1]["untuned_s"] = None  # no untuned kernel time: the estimate as it is
    assert end_to_end_scale(report) is None


def test_rounds_csv_has_a_line_per_round_of_the_journal(tmp_path):
    report = synthetic_report(tmp_path)
    spend = {"wall_s": 61.5, "device_h": 0.017, "usd": None, "energy_j": None, "trials": 64}
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session", "session": 0})
        for n, (task, best) in enumerate([(0, 0.9e-3), (1, None)], start=1):
            run.append(
                {"type": "round", "round": n, "task": task, "task_key": f"k{task}", "trials": 64,
                 "measured": 60, "failed": 4, "best_s": best, "round_best_s": best,
                 "model_latency_s": 3.2e-3, "seconds": 30.25, "spend": spend,
                 "early_stop_waits": task == 1}
            )  # fmt: skip
        written = write_report(run, report)
    lines = written["rounds"].read_text().splitlines()
    assert written["rounds"] == tmp_path / "run" / "rounds.csv"
    assert lines == [
        "round,task,task_index,trials,measured,failed,best_s,round_best_s,model_latency_s,"
        "round_s,wall_s,trials_so_far,device_h,usd,energy_j,early_stop_waits",
        "1,conv,0,64,60,4,0.0009,0.0009,0.0032,30.25,61.5,64,0.017,,,False",
        "2,dense,1,64,60,4,,,0.0032,30.25,61.5,64,0.017,,,True",
    ]


def journal_rounds(run: RunDir, latencies: list[float], spend) -> None:
    """Rounds of one task in `run`'s journal, the model at each latency, `spend` so far."""
    for number, latency in enumerate(latencies, start=1):
        round_ = {"type": "round", "task": 0, "round": number, "measured": 16, "failed": 0}
        run.append(
            {**round_, "best_s": latency, "model_latency_s": latency, "spend": spend.to_dict()}
        )


def test_the_command_that_resumes_a_killed_run_leaves_the_library_alone_as_the_run_did(
    tmp_path, fast_config, cache_home
):
    """A run with --no-library (a cold benchmark's side) was named a command without it: the
    resume read the library, handing the run other runs' schedules, and added its records."""
    import shlex

    import onnx_models
    from cli_args import tune_args

    run_dir, model = tmp_path / "run", onnx_models.tiny_cnn(tmp_path / "net.onnx")
    tuned = CliRunner().invoke(main, tune_args(model, run_dir, fast_config, "--no-library"))
    assert tuned.exit_code == 0, tuned.output
    (run_dir / "report.json").unlink()  # killed before writing it
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 2, result.output
    command = result.stderr.split("with the command that started it (", 1)[1]
    words = shlex.split(command.split(") to finish it", 1)[0])
    assert words[words.index("--no-library") + 1] == "--out"
    env = dict(v.split("=", 1) for v in words[: words.index("orchestrate")])  # fast_config's
    again = CliRunner().invoke(main, words[words.index("orchestrate") + 1 :], env=env)
    assert again.exit_code == 0, again.output
    assert (run_dir / "report.json").is_file()
    assert not (cache_home / "tune-orchestrator" / "library").exists()


def test_the_command_that_resumes_a_killed_run_measures_where_it_did(tmp_path, monkeypatch):
    """It named neither the run's library root (a resume read and filled the default one), nor
    its GPUs, parallelism, RPC fleet, warm start or MLflow: it measured elsewhere, otherwise
    paced, and logged nowhere."""
    from tune_orchestrator.library.files import default_root

    local = {
        "library": "/data/libraries", "gpus": [0, 2], "parallelism": 3, "rpc": None,
        "rpc_key": None, "warm_start": "/runs/earlier",
        "mlflow": {"uri": None, "experiment": "tune-orchestrator"},
    }  # fmt: skip
    fleet = {"library": str(default_root()), "gpus": None, "parallelism": None,
             "rpc": "head:9190", "rpc_key": "h100", "warm_start": None,
             "mlflow": {"uri": "http://mlflow:5000", "experiment": "h100s"}}  # fmt: skip
    runs = [
        ("local", local, "--library /data/libraries --gpus 0,2 --parallelism 3 "
         "--warm-start /runs/earlier --mlflow"),
        ("fleet", fleet, "--rpc head:9190 --rpc-key h100 --mlflow-uri http://mlflow:5000 "
         "--mlflow-experiment h100s"),  # this process's default root: not named
    ]  # fmt: skip
    for name, given, options in runs:
        with RunDir.open(tmp_path / name, fingerprint={}) as run:
            config = {"model": {"path": "/net.onnx"}, "budget": "1gpu-h", "resumed_with": given}
            run.write_json(RunDir.CONFIG, {"fingerprint": {}, **config})
        result = CliRunner().invoke(main, ["report", str(tmp_path / name)])
        assert result.exit_code == 2, result.output
        assert f"(orchestrate --budget 1gpu-h {options} --out {tmp_path / name} /" in result.stderr
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another"))  # a report asked elsewhere
    result = CliRunner().invoke(main, ["report", str(tmp_path / "fleet")])
    assert f"--library {fleet['library']} --rpc head:9190" in result.stderr


def test_report_of_a_run_still_working_says_so_with_its_progress(tmp_path):
    """It said "in use by another orchestrate process; ... or choose another --out", advice
    for starting a run, not for reading one."""
    from tune_orchestrator.budget.ledger import Spend

    run_dir = tmp_path / "run"
    with RunDir.open(run_dir, fingerprint={}) as run:  # a run at work (in this process)
        run.write_json(RunDir.CONFIG, {"fingerprint": {}})
        journal_rounds(run, [9e-4, 5.2e-4], Spend(wall_s=41.0, trials=96, rounds=2))
        result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {run_dir} is still being tuned (this process): 2 rounds, 96 trials and 41.0s "
        "spent, the model ~520 us by its tasks' best so far; its report is written when the "
        "run stops (SIGINT or SIGTERM stop it after the current round, with the report)\n"
    )


def test_report_of_a_run_killed_before_its_first_report_says_what_it_did_and_how_to_resume(
    tmp_path,
):
    """It said "no session has finished; resume the run with orchestrate --out", without the
    model or budget that resuming takes, or what the run had done."""
    from tune_orchestrator.budget.ledger import Spend

    run_dir, model = tmp_path / "my run", tmp_path / "models" / "net.onnx"
    with RunDir.open(run_dir, fingerprint={}) as run:  # then killed: no report
        config = {"fingerprint": {}, "model": {"path": str(model)}, "budget": "2gpu-h"}
        run.write_json(RunDir.CONFIG, config)
        journal_rounds(run, [8e-4] * 3, Spend(wall_s=75.0, trials=48, rounds=3))
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {run_dir} has no report yet: its session stopped before writing one (killed, "
        "or its machine went down) after 3 rounds, 48 trials and 1m15s spent, the model ~800 us "
        "by its tasks' best; resume it with the command that started it (orchestrate --budget "
        f"2gpu-h --out '{run_dir}' {model}) to finish it and write one\n"
    )


def test_the_command_that_resumes_a_killed_run_names_its_target_and_simulation(tmp_path):
    """Without them the command named was refused: another target's fingerprint, or "holds a
    SIMULATED run; add --simulate"."""
    run_dir = tmp_path / "run"
    with RunDir.open(run_dir, fingerprint={"simulated": True}, simulated=True) as run:
        config = {
            "fingerprint": {"simulated": True},
            "model": {"path": "/models/net.onnx"},
            "budget": "1gpu-h",
            "target": {"spec": "nvidia/nvidia-h100"},
        }
        run.write_json(RunDir.CONFIG, config)
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert (
        f"(orchestrate --budget 1gpu-h --target nvidia/nvidia-h100 --simulate --out {run_dir} "
        "/models/net.onnx)" in result.stderr
    )
