import errno
import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tune_orchestrator.errors import InputError
from tune_orchestrator.rundir import RunDir


def test_journal_entries_are_appended_and_read_back(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
        run.append({"type": "round", "round": 1})
        assert [e["type"] for e in run.journal()] == ["session", "round"]
        assert all(e["v"] == 1 for e in run.journal())


def test_a_torn_last_line_is_cut_on_open_so_the_next_entries_stay_readable(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
        with open(run[RunDir.JOURNAL], "a") as fh:
            fh.write('{"v":1,"type":"round","rou')  # killed mid-write
        assert [e["type"] for e in run.journal()] == ["session"]  # a reader skips it
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:  # the next session
        assert run.repairs == ["cut a torn last line (26 bytes) from journal.jsonl"]
        run.append({"type": "round"})
        run.append({"type": "stopped"})
        assert [e["type"] for e in run.journal()] == ["session", "round", "stopped"]
        assert b'"rou' in (run[RunDir.LOGS] / "repairs.log").read_bytes()  # kept aside
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        assert run.repairs == []  # nothing more to mend


def test_entries_glued_to_torn_bytes_are_recovered_and_real_damage_refused(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
    with open(tmp_path / "run" / RunDir.JOURNAL, "a") as fh:  # an append after a torn tail
        fh.write('{"v":1,"type":"rou' + '{"v":1,"type":"round"}\n' + '{"v":1,"type":"stopped"}')
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        assert run.repairs == [
            "took the entry out of torn bytes at line 2 of journal.jsonl",
            "ended the last line of journal.jsonl",
        ]
        assert [e["type"] for e in run.journal()] == ["session", "round", "stopped"]
        with open(run[RunDir.JOURNAL], "a") as fh:
            fh.write('not json\n{"v":1,"type":"round"}\n')
        with pytest.raises(InputError, match="is corrupt at line 4"):
            run.journal()


def test_bytes_that_are_not_text_are_damage_like_any_other(tmp_path):
    """A journal or config.json holding bytes that are not UTF-8 (garbled by a crash) raised
    UnicodeDecodeError: exit 1 with a traceback, on resume and in `estimate`, which reads the
    journals of every earlier run under runs/."""
    from tune_orchestrator.forecast.earlier import earlier_runs

    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
        with open(run[RunDir.JOURNAL], "ab") as fh:
            fh.write(b'\xff\xfe{"v":1')  # a torn last line
        assert [e["type"] for e in run.journal()] == ["session"]
        with open(run[RunDir.JOURNAL], "ab") as fh:
            fh.write(b'\n{"v":1,"type":"round"}\n')
        with pytest.raises(InputError, match="journal.jsonl is corrupt at line 2"):
            run.journal()
        assert earlier_runs(tmp_path) == []  # passed over, as a run that cannot be read
        run[RunDir.CONFIG].write_bytes(b"\xff\xfe\n")
        with pytest.raises(InputError, match="config.json .*; the run directory is damaged"):
            run.read_json(RunDir.CONFIG)


@pytest.mark.parametrize(
    "line, refused",
    [
        (
            '{"v":2,"type":"session"}',
            "line 2 is of journal version 2; this tune-orchestrator reads 1",
        ),
        ('{"v":1,"type":"round","spend":"lots"}', "wrong type (spend = 'lots')"),
        ('{"v":1,"type":"baseline","latency_s":"fast"}', "wrong type (latency_s = 'fast')"),
        ('{"v":1,"type":"round","spend":{"wall_s":"1m"}}', "wrong type (spend.wall_s = '1m')"),
        ('{"v":1,"type":"round","trials":true}', "wrong type (trials = True)"),
        ("[1, 2]", "line 2 is not a journal entry"),
    ],
)
def test_a_journal_line_of_a_newer_version_or_changed_by_hand_is_refused_by_line(
    tmp_path, line, refused
):
    """They were resumed as if written by this version: some silently, some to a TypeError."""
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
        with open(run[RunDir.JOURNAL], "a") as fh:
            fh.write(line + "\n")
        with pytest.raises(InputError, match=re.escape(refused)):
            run.journal()


def test_json_files_are_replaced_atomically_and_readable(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.write_json("report.json", {"a": 1})
        run.write_json("report.json", {"a": 2})
        assert json.loads(run["report.json"].read_text()) == {"a": 2}
        assert oct(run["report.json"].stat().st_mode & 0o777) == "0o644"
        files = sorted(p.name for p in run.path.iterdir())
        assert files == [".lock", "config.json", "logs", "report.json"]


def test_one_owner_at_a_time(tmp_path):
    first = RunDir.open(tmp_path / "run", fingerprint={})
    with pytest.raises(InputError, match="in use by another run in this process; wait for it"):
        RunDir.open(tmp_path / "run", fingerprint={})
    first.close()
    RunDir.open(tmp_path / "run", fingerprint={}).close()  # free again
    # Another process holds it as RunDir does: an exclusive flock, its pid in the file.
    hold = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
        "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); "
        "os.pwrite(fd, str(os.getpid()).encode(), 0); "
        "print('held', flush=True); sys.stdin.read()"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", hold, str(tmp_path / "run" / ".lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline() == "held\n"
        with pytest.raises(
            InputError, match=f"in use by another orchestrate process \\(pid {other.pid}\\)"
        ):
            RunDir.open(tmp_path / "run", fingerprint={})
    finally:
        other.communicate("")


@pytest.mark.parametrize("name", [RunDir.JOURNAL, RunDir.LOGS, "logs/repairs.log", ".lock"])
def test_a_run_directory_writes_through_no_symbolic_link(tmp_path, name):
    """In a folder a team shares, a link someone else put among a run's files would have the
    next user's run append where it points (their journal lines at the end of any file)."""
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        run.append({"type": "session"})
    link, target = tmp_path / "run" / name, tmp_path / "elsewhere"
    if link.exists():  # the link leads to the very file or folder it replaces
        os.replace(link, target)
    else:
        target.write_text("someone's notes\n")
    link.symlink_to(target)
    before = target.read_bytes() if target.is_file() else sorted(os.listdir(target))
    with pytest.raises(InputError, match=f"^{link} is a symbolic link \\(to {target}\\); "):
        RunDir.open(tmp_path / "run", fingerprint={})
    assert before == (target.read_bytes() if target.is_file() else sorted(os.listdir(target)))


def test_an_append_follows_no_link_made_after_the_run_opened(tmp_path):
    from tune_orchestrator.rundir.atomic import open_append

    (tmp_path / "notes").write_text("someone's notes\n")
    (tmp_path / "journal.jsonl").symlink_to(tmp_path / "notes")
    with pytest.raises(InputError, match="journal.jsonl is a symbolic link"):
        open_append(tmp_path / "journal.jsonl")
    assert (tmp_path / "notes").read_text() == "someone's notes\n"


def test_resume_requires_the_same_fingerprint(tmp_path):
    fingerprint = {"model_name": "m", "model_sha256": "1"}
    with RunDir.open(tmp_path / "run", fingerprint=fingerprint) as run:
        assert not run.resumed
        run.write_json(RunDir.CONFIG, {"fingerprint": fingerprint})
    with RunDir.open(tmp_path / "run", fingerprint=fingerprint) as run:
        assert run.resumed
    # The same bytes under another file name (moved, renamed) are the same model: it was
    # refused as "a different model_name".
    with RunDir.open(tmp_path / "run", fingerprint={**fingerprint, "model_name": "m2"}) as run:
        assert run.resumed
    with pytest.raises(InputError, match="different model_sha256"):
        RunDir.open(tmp_path / "run", fingerprint={"model_name": "m", "model_sha256": "2"})


def test_a_new_folder_is_resumable_from_its_open_on(tmp_path):
    RunDir.open(tmp_path / "run", fingerprint={"x": 1}).close()  # killed right after
    with RunDir.open(tmp_path / "run", fingerprint={"x": 1}) as run:
        assert run.resumed
    with pytest.raises(InputError, match="different x"):
        RunDir.open(tmp_path / "run", fingerprint={"x": 2})


def test_a_folder_with_only_what_a_killed_first_open_leaves_is_still_new(tmp_path):
    folder = tmp_path / "run"
    (folder / "logs").mkdir(parents=True)
    for leftover in (".lock", ".write-test-k2j3", ".config.json.x8a1"):
        (folder / leftover).write_text("")
    with RunDir.open(folder, fingerprint={"x": 1}) as run:
        assert not run.resumed
        assert sorted(p.name for p in folder.iterdir()) == [".lock", "config.json", "logs"]
    (folder / ".report.md.a1b2").write_text("half")  # a report killed while written
    with RunDir.open(folder, fingerprint={"x": 1}):
        assert not (folder / ".report.md.a1b2").exists()


def test_another_tvm_is_refused_with_the_fix_and_older_folders_resume(tmp_path):
    made = {"model_name": "m", "tvm": "0.26.0"}
    RunDir.open(tmp_path / "run", fingerprint=made).close()
    with pytest.raises(
        InputError,
        match=r"made with TVM 0\.26\.0 and this is TVM 0\.27\.0.*"
        r"pip install apache-tvm==0\.26\.0, or give another --out",
    ):
        RunDir.open(tmp_path / "run", fingerprint={**made, "tvm": "0.27.0"})
    RunDir.open(tmp_path / "old", fingerprint={"model_name": "m"}).close()  # no version kept
    RunDir.open(tmp_path / "old", fingerprint={"model_name": "m", "tvm": "0.27.0"}).close()


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_run_directory_on_a_file_system_without_locks_is_one_clear_line(
    tmp_path, monkeypatch, code
):
    """On a network mount that cannot lock files (NFS without its lock daemon, some SMB and
    FUSE mounts) flock fails with ENOLCK or EOPNOTSUPP: that was a traceback and exit 1."""

    def cannot(fd, how):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", cannot)
    with pytest.raises(InputError, match="is on a file system that cannot lock files"):
        RunDir.open(tmp_path / "run", fingerprint={})


def test_estimate_passes_over_earlier_runs_this_user_may_not_read(tmp_path):
    """A colleague's runs under ./runs, a folder or a journal private to them: `estimate`,
    which reads every earlier run's journal there, ended in a PermissionError traceback."""
    import shutil
    import tempfile

    from other_users import ALICE, as_user, can_switch_users
    from tune_orchestrator.forecast.earlier import earlier_runs

    runs = Path(tempfile.mkdtemp(prefix="runs-"))  # pytest's own tmp is its owner's alone
    runs.chmod(0o755)
    for name in ("closed", "open", "private"):
        with RunDir.open(runs / name, fingerprint={}) as run:
            run.append({"type": "session"})
    try:
        if os.geteuid() != 0:
            (runs / "closed").chmod(0o000)
            (runs / "private" / RunDir.JOURNAL).chmod(0o000)
            found = earlier_runs(runs)
        elif can_switch_users():
            (runs / "closed").chmod(0o700)
            (runs / "private" / RunDir.JOURNAL).chmod(0o600)
            found = as_user(ALICE, earlier_runs, runs)
        else:
            pytest.skip("root may read anything and cannot act as another user here")
    finally:
        (runs / "closed").chmod(0o755)
        shutil.rmtree(runs)
    assert [[e["type"] for e in journal] for journal in found] == [["session"]]
