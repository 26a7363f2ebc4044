import json
import os

import pytest

from tune_orchestrator.errors import InputError
from tune_orchestrator.rundir import RunDir


def test_journal_entries_are_appended_and_read_back(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
        run.append({"type": "round", "round": 1})
        assert [e["type"] for e in run.journal()] == ["session", "round"]
        assert all(e["v"] == 1 for e in run.journal())


def test_a_torn_last_line_is_dropped_but_a_corrupt_middle_is_refused(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
        with open(run[RunDir.JOURNAL], "a") as fh:
            fh.write('{"type": "round", "rou')  # killed mid-write
        assert [e["type"] for e in run.journal()] == ["session"]
        with open(run[RunDir.JOURNAL], "a") as fh:
            fh.write('\n{"type": "round"}\n')
        with pytest.raises(InputError, match="is corrupt at line 2"):
            run.journal()


def test_json_files_are_replaced_atomically_and_readable(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.write_json("report.json", {"a": 1})
        run.write_json("report.json", {"a": 2})
        assert json.loads(run["report.json"].read_text()) == {"a": 2}
        assert oct(run["report.json"].stat().st_mode & 0o777) == "0o644"
        assert sorted(p.name for p in run.path.iterdir()) == [".lock", "logs", "report.json"]


def test_one_owner_at_a_time(tmp_path):
    first = RunDir.open(tmp_path / "run", fingerprint={})
    with pytest.raises(
        InputError, match=f"in use by another orchestrate process \\(pid {os.getpid()}\\)"
    ):
        RunDir.open(tmp_path / "run", fingerprint={})
    first.close()
    RunDir.open(tmp_path / "run", fingerprint={}).close()  # free again


def test_resume_requires_the_same_fingerprint(tmp_path):
    fingerprint = {"model_name": "m", "model_sha256": "1"}
    with RunDir.open(tmp_path / "run", fingerprint=fingerprint) as run:
        assert not run.resumed
        run.write_json(RunDir.CONFIG, {"fingerprint": fingerprint})
    with RunDir.open(tmp_path / "run", fingerprint=fingerprint) as run:
        assert run.resumed
    with pytest.raises(InputError, match="different model_sha256"):
        RunDir.open(tmp_path / "run", fingerprint={"model_name": "m", "model_sha256": "2"})


def test_a_folder_with_only_our_early_files_is_still_new(tmp_path):
    RunDir.open(tmp_path / "run", fingerprint={}).close()  # crashed before writing its config
    with RunDir.open(tmp_path / "run", fingerprint={"x": 1}) as run:
        assert not run.resumed
