"""The run directory: one owner, an append-only journal, atomic writes, resume checks."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from . import faults
from .atomic import NOT_WRITABLE, linked, open_append, sync_dir, write_atomic
from .mending import mend_journal

JOURNAL_VERSION = 1

# The journal's fields that resuming computes with, and the types this version writes them as.
_NUMBER = (int, float)
_COUNT_FIELDS = ("task", "round", "trials", "measured", "failed")
_SECONDS_FIELDS = ("latency_s", "best_s", "round_best_s", "model_latency_s", "seconds")
_SPEND_FIELDS = ("wall_s", "device_h", "core_h", "usd", "energy_j", "trials", "rounds")


def cannot_write(path: Path, why: str) -> str:
    """The line for a run directory this user cannot write (`why`: a read-only file system,
    another user's folder): every command that opens one locks it and writes its files."""
    return (
        f"{path} cannot be written by you ({why}), and a run directory is locked and written "
        f"by every command that opens it; copy it somewhere you can write (cp -r {path} COPY) "
        "and give the copy"
    )


def entry_problem(entry: Any) -> str | None:
    """What makes a journal line unreadable to this version (it parsed as JSON); None if
    nothing does. The journal is only ever appended to by this code: a line that fails here
    was written by a newer version, or changed by hand."""
    if not isinstance(entry, dict):
        return "is not a journal entry (not a JSON object)"
    version = entry.get("v")
    if not isinstance(version, int) or version > JOURNAL_VERSION:
        return f"is of journal version {version!r}; this tune-orchestrator reads {JOURNAL_VERSION}"
    spend = entry.get("spend", {})
    wrong = _wrong(entry, _COUNT_FIELDS, int) + _wrong(entry, _SECONDS_FIELDS, _NUMBER)
    if not isinstance(spend, dict):
        wrong.append(f"spend = {spend!r}")
    else:
        wrong += _wrong(spend, _SPEND_FIELDS, _NUMBER, prefix="spend.")
    if wrong:
        return f"has a value of the wrong type ({', '.join(wrong[:3])})"
    return None


def _wrong(
    fields: Mapping[str, Any],
    names: Sequence[str],
    kinds: type | tuple[type, ...],
    prefix: str = "",
) -> list[str]:
    """`name = value` for each of `names` set (not None) to anything but `kinds` (a bool is no
    number here)."""
    return [
        f"{prefix}{name} = {fields[name]!r}"
        for name in names
        if fields.get(name) is not None
        and (not isinstance(fields[name], kinds) or isinstance(fields[name], bool))
    ]


def other_run(pid: str) -> str:
    """Who holds a lock whose holder wrote `pid`: another run of this process (two tune()
    calls in one pipeline's threads) or another process."""
    if pid == str(os.getpid()):
        return "another run in this process"
    return f"another orchestrate process (pid {pid})"


class RunInUse(InputError):
    """The run directory is locked by a run still working in it (`owner`: its pid)."""

    def __init__(self, message: str, *, owner: str) -> None:
        super().__init__(message)
        self.owner = owner


class RunDir:
    """Files of one run. `open()` creates or resumes it and takes an exclusive lock."""

    CONFIG = "config.json"
    JOURNAL = "journal.jsonl"
    REPORT = "report.json"
    REPORT_MD = "report.md"
    REPORT_HTML = "report.html"
    ROUNDS_CSV = "rounds.csv"  # one line per round, from the journal, for spreadsheets
    PLOTS = "plots"
    LIBRARY = "model.so"
    # A tuned build whose outputs differ from onnxruntime's: kept for a bug report, never
    # deployed (model.so is then the untuned build, or absent).
    MISMATCH = "model.tuned-MISMATCH.so"
    WORKLOAD_DB = "database_workload.json"
    RECORD_DB = "database_tuning_record.json"
    LEARNED = "learned.jsonl"  # what the run learned of each record (learned.py)
    LOGS = "logs"
    _LOCK = ".lock"
    # Files a run writes before its config; a folder holding only these is still "new".
    _OWN_EARLY = {_LOCK, LOGS}
    # The crash point (faults.py) of each file written whole.
    _POINTS = {
        CONFIG: "config",
        "spend.json": "spend",
        "waiting.jsonl": "waiting",
        REPORT: "report",
        REPORT_MD: "report",
        REPORT_HTML: "report",
        ROUNDS_CSV: "report",
    }
    # A simulated run's database and library carry the word, so that stock TVM pointed at the
    # folder finds no records and nobody deploys a library tuned on simulated timings.
    _SIMULATED = {
        WORKLOAD_DB: "SIMULATED_database_workload.json",
        RECORD_DB: "SIMULATED_database_tuning_record.json",
        LIBRARY: "model-SIMULATED.so",
    }

    def __init__(self, path: Path, *, simulated: bool = False) -> None:
        self.path = path
        self.simulated = simulated
        self._lock_fd: int | None = None
        self.resumed = False
        self.repairs: list[str] = []  # what opening it mended after a crash

    def __getitem__(self, name: str) -> Path:
        return self.path / (self._SIMULATED.get(name, name) if self.simulated else name)

    def database(self) -> Any:
        """The run's MetaSchedule database (JSONDatabase's files; database.py)."""
        from .database import RunDatabase

        files = {"workload": self[self.WORKLOAD_DB], "record": self[self.RECORD_DB]}
        return faults.database(RunDatabase(files["workload"], files["record"]), files)

    @classmethod
    def open(
        cls, path: str | Path, *, fingerprint: Mapping[str, Any], simulated: bool = False
    ) -> RunDir:
        """Create a new run directory or resume one made for the same model and target."""
        run = cls(Path(path), simulated=simulated)
        existing = run._prepare_folder()
        run._lock()
        try:
            if existing:
                run._check_fingerprint(fingerprint)
                run.resumed = True
                run.repairs = mend_journal(run.path / cls.JOURNAL, run.path / cls.LOGS)
            else:  # resumable from here on, whatever ends this process next
                run.write_json(cls.CONFIG, {"fingerprint": dict(fingerprint)})
            run._remove_temps()
            (run.path / cls.LOGS).mkdir(exist_ok=True)
        except BaseException:
            run.close()
            raise
        return run

    @classmethod
    def open_existing(cls, path: str | Path) -> RunDir:
        """Open a run directory that must exist already (for reading and re-rendering)."""
        run = cls(Path(path))
        if not run.path.exists():
            raise InputError(f"{run.path} does not exist; give the --out of a run")
        if not (run.path / cls.CONFIG).is_file():
            raise InputError(
                f"{run.path} is not a run directory (no {cls.CONFIG}); give the --out of a run"
            )
        run.simulated = run.recorded_simulated()
        run._lock()
        run.resumed = True
        return run

    @classmethod
    def move_aside(cls, path: Path) -> Path | None:
        """--fresh: the run directory at `path` is renamed <path>.<time> (nothing is deleted),
        holding its lock, so a run still working in it is refused (InputError) rather than
        moved; the new name, or None when there was none."""
        if not (path / cls.CONFIG).is_file():
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside, n = path.with_name(f"{path.name}.{stamp}"), 1
        while aside.exists():
            n += 1
            aside = path.with_name(f"{path.name}.{stamp}-{n}")
        run = cls(path)
        run._lock()
        try:
            path.rename(aside)
        finally:
            run.close()
        sync_dir(path.parent)
        return aside

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- journal -------------------------------------------------------------------------

    def append(self, entry: Mapping[str, Any]) -> None:
        """Append one journal entry and force it to disk before returning."""
        line = (json.dumps({"v": JOURNAL_VERSION, **entry}, separators=(",", ":")) + "\n").encode()
        path = self.path / self.JOURNAL
        new = not path.exists()
        faults.before("journal", path, line, append=True)
        with open_append(path) as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        if new:
            sync_dir(self.path)
        faults.after("journal")

    def journal(self) -> list[dict[str, Any]]:
        """All complete journal entries; a torn last line (a write cut by a crash) is dropped."""
        path = self.path / self.JOURNAL
        if not path.exists():
            return []
        lines = path.read_bytes().split(b"\n")  # bytes: a line a crash garbled may not be text
        entries = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:  # not JSON, or not UTF-8
                if number == len(lines):  # the last line, without its newline: torn write
                    break
                raise InputError(
                    f"{path} is corrupt at line {number}; resume from a copy of the run, "
                    "or start a new run with another --out"
                ) from None
            problem = entry_problem(entry)
            if problem is not None:
                raise InputError(
                    f"{path} line {number} {problem}: resume the run with the tune-orchestrator "
                    "that wrote it, or start over with --fresh (this run is kept aside)"
                )
            entries.append(entry)
        return entries

    # -- whole files -------------------------------------------------------------------

    def write_json(self, name: str, data: Any) -> Path:
        """Write a JSON file atomically (see write_text)."""
        return self.write_text(name, json.dumps(data, indent=2) + "\n")

    def write_text(self, name: str, text: str) -> Path:
        """Write a file atomically: a reader sees the old or the new file, never a mix."""
        return write_atomic(self.path / name, text.encode(), point=self._POINTS.get(name))

    def recorded_simulated(self) -> bool:
        """Whether the run in this folder was made with --simulate (its config says so)."""
        if not (self.path / self.CONFIG).is_file():
            return False
        config = self.read_json(self.CONFIG)
        fingerprint = config.get("fingerprint") if isinstance(config, dict) else None
        return bool(isinstance(fingerprint, dict) and fingerprint.get("simulated"))

    def read_json(self, name: str, fix: str = "the run directory is damaged") -> Any:
        """The JSON file `name`; InputError naming it and `fix` where it cannot be read."""
        path = self.path / name
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
            raise InputError(f"cannot read {path} ({exc}); {fix}") from None

    # -- internals -----------------------------------------------------------------------

    def _prepare_folder(self) -> bool:
        """Make sure the folder exists and is ours; True if it holds an earlier run."""
        path = self.path
        if path.exists() and not path.is_dir():
            raise InputError(f"--out {path} is a file; give a directory for the run")
        if path.is_dir():
            self._check_links()
            names = [p.name for p in path.iterdir()]
            if self.CONFIG in names:
                return True
            foreign = [n for n in names if n not in self._OWN_EARLY and not self._own_temp(n)]
            if foreign:
                raise InputError(
                    f"--out {path} already holds other files ({', '.join(sorted(foreign)[:3])}"
                    f"{', ...' if len(foreign) > 3 else ''}); give a new or empty directory"
                )
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-")
            probe.close()
        except OSError as exc:
            raise InputError(
                f"cannot write to --out {path}: {exc.strerror}; choose a writable directory"
            ) from None
        return False

    def _check_links(self) -> None:
        """Refuse a symbolic link among the run's files and in its folders (appending follows
        one; a whole-file write would replace it). --out itself may be one: the user's own."""
        for folder in (self.path, self.path / self.LOGS, self.path / self.PLOTS):
            for entry in folder.iterdir() if folder.is_dir() else ():
                if entry.is_symlink():
                    raise InputError(linked(entry))

    def _own_temp(self, name: str) -> bool:
        """A temporary file a run left behind when it was killed while writing."""
        ours = (
            *self._POINTS,
            self.JOURNAL,
            self.LIBRARY,
            "predictor.json",
            "filter.json",
            "write-test-",
        )
        return name.startswith(".") and any(name[1:].startswith(n) for n in ours)

    def _remove_temps(self) -> None:
        for entry in self.path.iterdir():
            if self._own_temp(entry.name) and entry.is_file():
                entry.unlink(missing_ok=True)

    def _lock(self) -> None:
        # Its mode is the umask's, as the journal's and the database's are: a team that shares
        # run directories (umask 002, a group folder) resumes each other's runs.
        try:
            fd = os.open(self.path / self._LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputError(linked(self.path / self._LOCK)) from None
            if exc.errno not in NOT_WRITABLE:
                raise
            raise InputError(cannot_write(self.path, exc.strerror)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise RunInUse(
                    f"run directory {self.path} is in use by {other_run(owner)}; wait for it to "
                    "finish or choose another --out",
                    owner=owner,
                ) from None
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):  # some network mounts
                raise InputError(
                    f"{self.path} is on a file system that cannot lock files ({exc.strerror}), "
                    "and a run directory is locked by whoever uses it; use one on a local disk"
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _check_fingerprint(self, fingerprint: Mapping[str, Any]) -> None:
        config = self.read_json(self.CONFIG)
        theirs = config.get("fingerprint") if isinstance(config, dict) else None
        if not isinstance(theirs, dict):  # valid JSON, not what a run writes
            raise InputError(
                f"{self.path / self.CONFIG} holds no run's fingerprint; the run directory is "
                "damaged: restore it from a copy, or give another --out to start a new run"
            )
        if "tvm" not in theirs and "tvm" in fingerprint:
            # made before the fingerprint kept TVM's version: resumed as before
            theirs = {**theirs, "tvm": fingerprint.get("tvm")}
        if theirs.get("model_sha256") and theirs["model_sha256"] == fingerprint.get("model_sha256"):
            # the same model under another file name: moved, renamed, or copied to another host
            theirs = {**theirs, "model_name": fingerprint.get("model_name")}
        if theirs == json.loads(json.dumps(fingerprint)):
            return
        differs = [k for k in {**theirs, **fingerprint} if theirs.get(k) != fingerprint.get(k)]
        if differs == ["tvm"]:
            raise InputError(
                f"{self.path} was made with TVM {theirs['tvm']} and this is TVM "
                f"{fingerprint['tvm']}, whose search may not replay its records; resume it with "
                f"pip install apache-tvm=={theirs['tvm']}, or give another --out"
            )
        if differs == ["simulated"]:
            was = "a SIMULATED run" if theirs.get("simulated") else "a run on a real device"
            fix = "add --simulate" if theirs.get("simulated") else "leave out --simulate"
            raise InputError(f"{self.path} holds {was}; {fix} to resume it, or give another --out")
        what = ", ".join(differs)
        raise InputError(
            f"{self.path} holds a run with a different {what or 'setup'} "
            f"(model {theirs.get('model_name', '?')}); "
            "give another --out to start a new run, or add --fresh to set that one aside and "
            "start over"
        )
