"""A shared host: every user's runs proceed, see each other on a device and share each GPU's
timed window; a lock folder or file that is unsafe is not used, and nothing is truncated
through a link planted where a lock file goes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli_args import tune_args
from other_users import ALICE, BOB, AsUser, as_user, can_switch_users, events
from tune_orchestrator.cli.commands import main
from tune_orchestrator.measure import lockfiles
from tune_orchestrator.measure._window import DeviceWindow, WindowBusy
from tune_orchestrator.measure.cuda import window_path
from tune_orchestrator.rundir.durability import DeviceClaim


@pytest.fixture
def host_tmp(monkeypatch):
    """A temp dir as /tmp is (world-writable, sticky), which every user's runs use here."""
    base = Path(tempfile.mkdtemp(prefix="host-tmp-"))
    base.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    monkeypatch.setattr(lockfiles, "HOST_TMP", base)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def two_users():
    if not can_switch_users():
        pytest.skip("needs root (with CAP_SETUID) to run code as two other users")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- two users on one host ------------------------------------------------------------------


def _claim() -> tuple[str | None, str]:
    with DeviceClaim("cpu") as claim:
        return claim.shared_with, str(claim.path)


def _claim_and_hold(held, release) -> str | None:
    with DeviceClaim("cpu") as claim:
        held.set()
        release.wait(30)
        return claim.shared_with


def _held_by(uid: int, first_umask: int = 0o022) -> tuple[AsUser, object]:
    held, release = events(2)
    holder = AsUser(uid, _claim_and_hold, held, release, umask=first_umask)
    assert held.wait(30)
    return holder, release


def test_two_users_runs_both_claim_a_device_and_see_each_other(host_tmp, two_users):
    # Alice's umask would have made the folder hers alone (0700): it no longer matters.
    alice, release = _held_by(ALICE, first_umask=0o077)
    try:
        bob_sees, path = as_user(BOB, _claim)
    finally:
        release.set()
    assert alice.result() is None
    assert bob_sees == str(alice.pid)  # Bob's run warns that Alice's is measuring
    assert Path(path).parent == host_tmp / "tune-orchestrator"
    assert as_user(BOB, _claim) == (None, path)  # released
    # Bob holds the claim in Alice's file, read-only: he could not write his pid there.
    bob, release = _held_by(BOB)
    try:
        assert as_user(ALICE, _claim) == ("unknown", path)
    finally:
        release.set()
    assert bob.result() is None


def _claim_in(tmpdir: str, held=None, release=None) -> tuple[str | None, str]:
    """A device claim by a process whose TMPDIR is `tmpdir`."""
    tempfile.tempdir = tmpdir
    with DeviceClaim("cpu") as claim:
        if held is not None:
            held.set()
            release.wait(30)
        return claim.shared_with, str(claim.path)


def test_runs_whose_tmpdirs_differ_see_each_other_on_a_device(host_tmp, two_users, tmp_path):
    # pam_tmpdir gives each user a TMPDIR of their own, a batch system each job.
    own = {}
    for uid in (ALICE, BOB):
        own[uid] = tmp_path / str(uid)
        own[uid].mkdir()
        os.chown(own[uid], uid, -1)
    held, release = events(2)
    alice = AsUser(ALICE, _claim_in, str(own[ALICE]), held, release)
    try:
        assert held.wait(30)
        bob_sees, path = as_user(BOB, _claim_in, str(own[BOB]))
    finally:
        release.set()
    assert bob_sees == str(alice.pid)
    assert alice.result() == (None, path)
    assert Path(path).parent == host_tmp / "tune-orchestrator"


def _timed(wait_s: float) -> tuple[str, str]:
    path = window_path(0)
    try:
        with DeviceWindow(path).timed(wait_s=wait_s):
            return "timed", path
    except WindowBusy:
        return "busy", path


def _hold_window(held, release) -> str:
    path = window_path(0)
    with DeviceWindow(path).timed():
        held.set()
        release.wait(30)
    return path


def test_two_users_share_a_gpus_timed_window(host_tmp, two_users):
    held, release = events(2)
    alice = AsUser(ALICE, _hold_window, held, release, umask=0o077)
    try:
        assert held.wait(30)
        assert as_user(BOB, _timed, 0.2)[0] == "busy"  # one timing at a time, across users
    finally:
        release.set()
    path = alice.result()
    assert as_user(BOB, _timed, 5.0) == ("timed", path)


def test_another_users_folder_writable_by_all_without_the_sticky_bit_is_not_used(host_tmp):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder to another user")
    shared = host_tmp / "tune-orchestrator"
    shared.mkdir()
    os.chown(shared, ALICE, ALICE)
    shared.chmod(0o777)
    skipped: list[str] = []
    path = Path(window_path(0, on_skip=skipped.append))
    assert path.parent == host_tmp / f"tune-orchestrator-{os.geteuid()}"
    assert "writable by other users without the sticky bit" in skipped[0]
    assert list(shared.iterdir()) == []


# -- what one user's own runs rely on -------------------------------------------------------


def test_the_shared_folder_is_sticky_and_writable_by_all_whatever_the_umask(host_tmp):
    shared = host_tmp / "tune-orchestrator"
    shared.mkdir(mode=0o755)  # as an earlier version made it: this user's, others locked out
    umask = os.umask(0o077)
    try:
        path = Path(window_path(0))
    finally:
        os.umask(umask)
    assert path.parent == shared and mode(shared) == 0o1777
    assert mode(path) == mode(Path(f"{path}.gate")) == 0o644  # other users open them to lock


@pytest.mark.parametrize("planted", ["link to a file", "link to a folder", "fifo"])
def test_what_is_planted_at_a_lock_path_is_not_used_and_nothing_is_truncated(host_tmp, planted):
    victim = host_tmp / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("keep me\n")
    shared = host_tmp / "tune-orchestrator"
    if planted == "link to a folder":
        shared.symlink_to(victim)
    else:
        shared.mkdir(mode=0o1777)
        lock = shared / "device-cpu.lock"
        lock.symlink_to(victim / "notes.txt") if planted == "link to a file" else os.mkfifo(lock)
    skipped: list[str] = []
    with DeviceClaim("cpu", on_skip=skipped.append) as first:
        assert first.shared_with is None  # the claim goes on, in this user's own folder
        with DeviceClaim("cpu") as second:
            assert second.shared_with == str(os.getpid())  # this user's runs still meet
    assert first.path.parent == host_tmp / f"tune-orchestrator-{os.geteuid()}"
    assert mode(first.path.parent) == 0o700
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt"]
    assert (victim / "notes.txt").read_text() == "keep me\n"
    why = {"link to a file": "is a symbolic link", "fifo": "is not a regular file"}
    assert why.get(planted, "is a symbolic link or not a directory") in skipped[0]
    assert "where other users' runs do not look" in skipped[0]


@pytest.mark.slow
def test_a_run_with_a_link_at_its_device_claim_proceeds_and_counts_it(
    host_tmp, tiny_model, fast_config, tmp_path
):
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me\n")
    shared = host_tmp / "tune-orchestrator"
    shared.mkdir(mode=0o1777)
    (shared / "device-cpu.lock").symlink_to(victim)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(tiny_model, out, fast_config))
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "keep me\n"
    assert json.loads((out / "report.json").read_text())["skipped"] == {"lock_files": 1}
    assert "device-cpu.lock is a symbolic link" in result.stderr


class _NoWorkers:
    """A worker pool that starts nothing: this test is about where the window's lock goes."""

    def __init__(self, **kwargs):
        self.ready_s: list[float] = []

    def start(self, count: int) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_gpu_window_that_cannot_be_shared_is_counted_from_the_runs_pools(
    host_tmp, monkeypatch, tmp_path
):
    from types import ModuleType, SimpleNamespace

    from tune_orchestrator.config import Settings
    from tune_orchestrator.measure import cuda
    from tune_orchestrator.run import measuring

    monkeypatch.setitem(sys.modules, "cupy", ModuleType("cupy"))  # what CudaEngine imports
    monkeypatch.setattr(cuda, "cuda_available", lambda: True)
    monkeypatch.setattr(cuda, "WorkerPool", _NoWorkers)
    monkeypatch.setattr(measuring, "make_builder", lambda settings, logs, fleet: _NoWorkers())
    shared = host_tmp / "tune-orchestrator"
    shared.mkdir(mode=0o1777)
    (shared / "window-0.lock.gate").symlink_to(tmp_path / "elsewhere")
    gpu = SimpleNamespace(device_type="cuda", device_present=True, simulated=False)
    with measuring.RunPools(Settings.load(), gpu, tmp_path, measuring.Fleet(gpus=[0])) as pools:
        assert isinstance(pools.engine, cuda.CudaEngine)
    assert (
        len(pools.lock_files) == 1
        and "window-0.lock.gate is a symbolic link" in pools.lock_files[0]
    )
    assert not (tmp_path / "elsewhere").exists()
