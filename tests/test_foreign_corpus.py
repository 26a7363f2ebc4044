"""The corpus of broken, foreign and hostile files a run reads: each case damages one file of a
finished run (its tuning library, run directory or a --warm-start source), then runs the real
CLI. A file the user did not name degrades the run: exit 0, the file's kind counted in the
report's `skipped`, no traceback. Files named on the command line that cannot be used at all
(--warm-start FILE) end the run with one line and exit 2: tests/corpus/manifest.toml."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import onnx_models
from cli_args import tune_args
from tune_orchestrator.cli.commands import main
from tune_orchestrator.library.files import RECORDS, WORKLOADS
from tune_orchestrator.run.skipped import KINDS

pytestmark = pytest.mark.slow  # a tune to damage (~20 s), then one short run per case
EVIL = "pragma_import_llvm"


@dataclasses.dataclass(frozen=True)
class Earlier:
    """A finished run of the tiny model, and the tuning library it filled."""

    model: Path
    run: Path
    library: Path  # <root>/<target key>


@pytest.fixture(scope="module")
def earlier(tmp_path_factory, fast_config) -> Earlier:
    base = tmp_path_factory.mktemp("earlier")
    model = onnx_models.tiny_cnn(base / "tiny.onnx")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(base / "cache"))
        result = CliRunner().invoke(main, tune_args(model, base / "run", fast_config))
    assert result.exit_code == 0, result.output
    report = json.loads((base / "run" / "report.json").read_text())
    return Earlier(model, base / "run", Path(report["library"]["path"]))


# -- damage -------------------------------------------------------------------------------


def rows(folder: Path) -> list[list]:
    """A database's record lines: [workload line, record]."""
    return [json.loads(line) for line in (folder / RECORDS).read_text().splitlines()]


def append(folder: Path, *lines: str) -> None:
    with open(folder / RECORDS, "a") as fh:
        fh.write("".join(lines))


def fastest(folder: Path) -> list:
    return min(rows(folder), key=lambda row: sum(row[1][1]) / len(row[1][1]))


KEEP = object()


def changed(row: list, *, secs=KEEP, target=KEEP, trace=KEEP) -> str:
    """The record line `row` with its run times, target or trace replaced."""
    record = list(row[1])
    for i, value in ((0, trace), (1, secs), (2, target)):
        if value is not KEEP:
            record[i] = value
    return json.dumps([row[0], record]) + "\n"


def hostile(trace: list) -> list:
    """The trace with an Annotate that would link LLVM IR into the kernel, on its root block
    (which every schedule keeps: the trace still replays)."""
    insts, decisions = trace
    root = next(i[3][0] for i in insts if i[0] == "GetSBlock" and i[2][0] == "root")
    evil = ["Annotate", [root, json.dumps("define void @f() { ret void }")], [EVIL], []]
    return [[*insts, evil], decisions]


def foreign_target(row: list) -> dict:
    """A CUDA target, as a record tuned for one holds it (TVM reads it without a GPU)."""
    return {
        "kind": "cuda", "tag": "", "keys": ["cuda", "gpu"], "arch": "sm_80",
        "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32,
    }  # fmt: skip


def unreadable_workloads(folder: Path) -> int:
    """Every workload line replaced by a module this TVM cannot read (another version's);
    how many records name them."""
    shelf = [json.loads(line) for line in (folder / WORKLOADS).read_text().splitlines()]
    bogus = [[key, "eyJub2RlcyI6IFt7InR5cGUiOiAidGlyLlByaW1GdW5jVjkifV19"] for key, _ in shelf]
    (folder / WORKLOADS).write_text("".join(json.dumps(w) + "\n" for w in bogus))
    return len(rows(folder))


def parked(run: Path) -> list[str]:
    """waiting.jsonl lines, as save_waiting writes them, for the run's measured records."""
    session = next(
        json.loads(line)
        for line in (run / "journal.jsonl").read_text().splitlines()
        if '"type":"session"' in line
    )
    index = {t["key"]: t["index"] for t in session["tasks"]}
    shelf = [json.loads(line) for line in (run / WORKLOADS).read_text().splitlines()]
    lines = []
    for line, record in rows(run):
        key = f"{int(shelf[line][0]):016x}"
        entry = {"task": index[key], "task_key": key, "record": [record[0], None, *record[2:]]}
        lines.append(json.dumps(entry))
    return lines


def park(run: Path, bad: str) -> None:
    """Two good parked candidates, then `bad`."""
    (run / "waiting.jsonl").write_text("\n".join([*parked(run)[:2], bad]) + "\n")


# -- the cases: each damages a file and says what the run must count ---------------------
# "library": the tuning library (a copy in the test's cache), read by a new run;
# "run": a copy of the finished run, resumed; "warm": a copy given to a new run as --warm-start.


def run_secs_empty(library: Path) -> dict[str, int]:
    append(library, changed(fastest(library), secs=[]))
    return {"library_records": 1}


def run_secs_null(library: Path) -> dict[str, int]:
    append(library, changed(fastest(library), secs=None))
    return {"library_records": 1}


def run_secs_a_number(library: Path) -> dict[str, int]:
    append(library, changed(fastest(library), secs=2))
    return {"library_records": 1}


def run_secs_negative(library: Path) -> dict[str, int]:
    append(library, changed(fastest(library), secs=[-1e-9]))  # it would rank first
    return {"library_records": 1}


def record_not_a_list(library: Path) -> dict[str, int]:
    append(library, json.dumps([fastest(library)[0], 5]) + "\n")
    return {"library_records": 1}


def torn_line(library: Path) -> dict[str, int]:
    line = changed(fastest(library))
    append(library, line[: len(line) // 2])
    return {"library_records": 1}


def other_target(library: Path) -> dict[str, int]:
    row = fastest(library)
    append(library, changed(row, target=foreign_target(row)))
    return {"library_records": 1}


def other_tvm_instruction(library: Path) -> dict[str, int]:
    row = fastest(library)
    insts, decisions = row[1][0]
    trace = [[["SamplePerfectTileV2", *insts[0][1:]], *insts[1:]], decisions]
    append(library, changed(row, trace=trace))
    return {"library_records": 1}


def other_tvm_workloads(library: Path) -> dict[str, int]:
    return {"library_records": unreadable_workloads(library)}


def hostile_library_trace(library: Path) -> dict[str, int]:
    row = fastest(library)  # the fastest: reuse would measure it first
    append(library, changed(row, secs=[s / 10 for s in row[1][1]], trace=hostile(row[1][0])))
    return {"unsafe_traces": 1}


def library_root_is_a_file(library: Path) -> dict[str, int]:
    shutil.rmtree(library.parent)
    library.parent.write_text("not a folder\n")
    return {"library_files": 1}


def waiting_truncated(run: Path) -> dict[str, int]:
    park(run, parked(run)[2][:100])
    return {"waiting": 1}


def waiting_for_other_tasks(run: Path) -> dict[str, int]:
    entry = json.loads(parked(run)[2])
    park(run, json.dumps({**entry, "task_key": "0123456789abcdef"}))
    return {"waiting": 1}


def waiting_hostile(run: Path) -> dict[str, int]:
    entry = json.loads(parked(run)[2])
    record = [hostile(entry["record"][0]), *entry["record"][1:]]
    park(run, json.dumps({**entry, "record": record}))
    return {"unsafe_traces": 1}


def filter_state_truncated(run: Path) -> dict[str, int]:
    text = (run / "filter.json").read_text()
    (run / "filter.json").write_text(text[: len(text) // 2])
    return {"filter_state": 1}


def warm_corrupt_records(source: Path) -> dict[str, int]:
    row = rows(source)[-1]
    lines = (source / RECORDS).read_text().splitlines(keepends=True)
    lines[1] = lines[1][: len(lines[1]) // 3] + "\n"  # torn in the middle of the file
    (source / RECORDS).write_text("".join(lines))
    append(source, changed(row, target=foreign_target(row)))
    return {"warm_start_records": 2}


def warm_other_tvm(source: Path) -> dict[str, int]:
    return {"warm_start": 1, "warm_start_records": unreadable_workloads(source)}


def warm_hostile(source: Path) -> dict[str, int]:
    row = fastest(source)
    append(source, changed(row, trace=hostile(row[1][0])))
    return {"unsafe_traces": 1}


CASES = [
    ("library", run_secs_empty),
    ("library", run_secs_null),
    ("library", run_secs_a_number),
    ("library", run_secs_negative),
    ("library", record_not_a_list),
    ("library", torn_line),
    ("library", other_target),
    ("library", other_tvm_instruction),
    ("library", other_tvm_workloads),
    ("library", hostile_library_trace),
    ("library", library_root_is_a_file),
    ("run", waiting_truncated),
    ("run", waiting_for_other_tasks),
    ("run", waiting_hostile),
    ("run", filter_state_truncated),
    ("warm", warm_corrupt_records),
    ("warm", warm_other_tvm),
    ("warm", warm_hostile),
]


@pytest.mark.parametrize("where, damage", CASES, ids=[d.__name__ for _, d in CASES])
def test_a_broken_foreign_or_hostile_file_is_counted_and_the_run_goes_on(
    where, damage, earlier, cache_home, fast_config, tmp_path
):
    library = cache_home / "tune-orchestrator" / "library" / earlier.library.name
    shutil.copytree(earlier.library, library)
    out, options, budget = tmp_path / "out", [], "8trials"
    if where == "library":
        expected = damage(library)
    elif where == "run":
        shutil.copytree(earlier.run, out)
        expected = damage(out)
        budget = "16trials"  # resumed to tune on: the run it finished at 8 would stop at once
    else:
        shutil.copytree(earlier.run, tmp_path / "warm")
        expected = damage(tmp_path / "warm")
        options = ["--warm-start", str(tmp_path / "warm")]

    args = tune_args(earlier.model, out, fast_config, *options, budget=budget)
    result = CliRunner().invoke(main, args)

    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "Traceback" not in result.output
    report = json.loads((out / "report.json").read_text())
    assert not [w for w in report["warnings"] if "please report it" in w]  # no bug of ours met
    assert report["skipped"] == expected
    told = [w for w in report["warnings"] if w.startswith("skipped ")]
    assert len(told) == len(expected)  # one warning per kind, with its first reason
    assert all(any(w.startswith(f"skipped {KINDS[kind]}: ") for w in told) for kind in expected)
    measured = (out / RECORDS).read_text()
    assert EVIL not in measured  # a hostile trace is never built, measured or recorded
