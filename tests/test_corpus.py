"""The bad-input corpus (tests/corpus/manifest.toml): one line, exit 2, nothing changed."""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from run_files import snapshot

import onnx_models
from cli_args import tune_args
from other_users import ALICE, BOB, TEAM, as_user, can_switch_users
from tune_orchestrator.cli.commands import main

CORPUS = Path(__file__).resolve().parent / "corpus"
CASES = tomllib.loads((CORPUS / "manifest.toml").read_text())["case"]

# Every case runs against a copy of a finished run (the module's `finished_run` tune, ~20 s).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, fast_config):
    base = tmp_path_factory.mktemp("corpus")
    good = onnx_models.tiny_cnn(base / "good.onnx")
    run = base / "run"
    result = CliRunner().invoke(main, tune_args(good, run, fast_config))
    assert result.exit_code == 0, result.output
    return good, run


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_corpus_entry_gets_one_clear_line_and_exit_2(
    case, finished_run, tmp_path, monkeypatch
):
    good, finished = finished_run
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    for name, text in case.get("files", {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    if "damage" in case:
        damage = case["damage"]
        path = run / damage["file"]
        lines = path.read_text().splitlines(keepends=True)
        lines[damage["line"] - 1] = damage["text"] + "\n"
        path.write_text("".join(lines))
    places = {
        "{corpus}": str(CORPUS),
        "{good}": str(good),
        "{run}": str(run),
        "{tmp}": str(tmp_path),
    }
    args = []
    for arg in case["args"]:
        for key, value in places.items():
            arg = arg.replace(key, value)
        args.append(arg)
    monkeypatch.chdir(tmp_path)
    before = {"corpus": snapshot(CORPUS), "run": snapshot(run), "tmp": snapshot(tmp_path)}

    result = CliRunner().invoke(main, args, env=case.get("env"))

    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert case["says"] in lines[0], lines[0]
    assert "Traceback" not in result.output and result.stdout == ""
    assert {"corpus": snapshot(CORPUS), "run": snapshot(run), "tmp": snapshot(tmp_path)} == before


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A scratch folder every user may enter (pytest's own is its owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="orchestrate-corpus-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _orchestrate(args: list[str], home: Path) -> tuple[int, str]:
    os.environ.update(HOME=str(home), XDG_CACHE_HOME=str(home), MPLCONFIGDIR=str(home))
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    "where, needle",
    [
        ("out", "is not readable, writable and searchable by you"),  # mode 600: not enterable
        ("out/inner", "cannot reach --out"),  # behind a folder it may not search
    ],
)
def test_an_out_folder_this_user_may_not_enter_gets_one_line_and_exit_2(shared_tmp, where, needle):
    """click lets such an --out through; the run directory used to end in a traceback. Root
    may enter anything: as root, the run is made by another user (tests/other_users.py)."""
    model = onnx_models.tiny_cnn(shared_tmp / "good.onnx")
    out = shared_tmp / "out"
    out.mkdir()
    out.chmod(0o600)
    args = ["--budget", "1min", "--target", "llvm", "--out", str(shared_tmp / where), str(model)]
    try:
        if os.geteuid() != 0:
            code, stderr = _orchestrate(args, shared_tmp)
        elif can_switch_users():
            os.chown(out, ALICE, ALICE)  # its own folder, which it may read but not enter
            # What api.run imports before it checks --out: the other user may not be able to
            # read this Python's own files (under /root), so they are imported here first.
            import tune_orchestrator.api  # noqa: F401
            import tune_orchestrator.run.session  # noqa: F401

            code, stderr = as_user(ALICE, _orchestrate, args, shared_tmp)
        else:
            pytest.skip("root may enter any folder and cannot act as another user here")
    finally:
        out.chmod(0o755)
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and needle in lines[0], stderr
    assert list(out.iterdir()) == []


def test_a_run_directory_this_user_may_read_but_not_write_gets_one_line_and_exit_2(
    finished_run, shared_tmp
):
    """`orchestrate report` on a colleague's run, or on one on a read-only disk, ended in a
    traceback (the lock file could not be opened); resuming it was refused already."""
    good, finished = finished_run
    run = shared_tmp / "run"
    shutil.copytree(finished, run)
    os.chmod(good.parent, 0o755)  # the model, for the resume: readable by the other user
    before = snapshot(run)
    commands = {
        "report": (["report", str(run)], "cannot be written by you (Permission denied)"),
        "resume": (
            ["--budget", "1min", "--out", str(run), str(good)],
            "is not readable, writable and searchable by you",
        ),
    }
    if os.geteuid() != 0:
        for path in (run, run / ".lock"):
            path.chmod(0o555)
        try:
            said = {k: _orchestrate(args, shared_tmp) for k, (args, _) in commands.items()}
        finally:
            run.chmod(0o755)
    elif can_switch_users():
        import tune_orchestrator.api  # noqa: F401  (see the test above)
        import tune_orchestrator.run.reporting  # noqa: F401
        import tune_orchestrator.run.session  # noqa: F401

        said = {
            k: as_user(ALICE, _orchestrate, args, shared_tmp) for k, (args, _) in commands.items()
        }
    else:
        pytest.skip("root may write anything and cannot act as another user here")
    for name, (_, needle) in commands.items():
        code, stderr = said[name]
        lines = stderr.strip().splitlines()
        assert code == 2, (name, stderr)
        assert len(lines) == 1 and needle in lines[0], (name, stderr)
    assert snapshot(run) == before


def test_a_team_member_opens_a_run_another_member_made_in_the_teams_folder(
    finished_run, shared_tmp
):
    """A group folder and umask 002, the usual way a team shares files: the journal and the
    database were group-writable, the lock file its maker's alone (mode 644), so every other
    member was told the run cannot be written by them."""
    if os.geteuid() != 0 or not can_switch_users():
        pytest.skip("needs two users who share a group: root acting as each")
    good, finished = finished_run
    team = shared_tmp / "team"
    team.mkdir()
    os.chown(team, 0, TEAM)
    team.chmod(0o2775)  # new files take the folder's group
    run = team / "run"
    shutil.copytree(finished, run, ignore=shutil.ignore_patterns(".lock"))
    for path in (run, *run.rglob("*")):  # as its maker's umask 002 left it
        os.chown(path, BOB, TEAM)
        path.chmod(path.stat().st_mode | 0o020 | (0o2000 if path.is_dir() else 0))
    import tune_orchestrator.run.reporting  # noqa: F401  (see the tests above)

    said = {
        who: as_user(
            who, _orchestrate, ["report", str(run)], shared_tmp, umask=0o002, groups=(TEAM,)
        )
        for who in (BOB, ALICE)  # the maker first: it makes the lock file
    }
    assert said == {BOB: (0, ""), ALICE: (0, "")}, said
    assert (run / ".lock").stat().st_mode & 0o777 == 0o664


def test_an_out_on_a_read_only_disk_is_named_so(tmp_path, monkeypatch):
    """It was told to `chmod u+rwx` a folder on a read-only file system."""
    from tune_orchestrator.errors import InputError
    from tune_orchestrator.run.prepare import check_out

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setattr(os, "statvfs", lambda path: types.SimpleNamespace(f_flag=os.ST_RDONLY))
    with pytest.raises(InputError, match=r"cannot be written by you \(Read-only file system\)"):
        check_out(out)
