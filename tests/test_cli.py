"""The CLI's answer to bad input: one line naming the problem and the fix, exit code 2."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import onnx_models
from devices import GPU
from other_users import ALICE, as_user, can_switch_users
from tune_orchestrator import InputError
from tune_orchestrator.cli.commands import main
from tune_orchestrator.rundir import RunDir


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def fails_with_one_line(args: list, needle: str) -> None:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


@pytest.fixture
def models(tmp_path):
    tiny = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    data = tiny.read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 3])
    (tmp_path / "notes.onnx").write_text("not a model\n")
    (tmp_path / "empty.onnx").write_bytes(b"")
    onnx_models.tiny_cnn(tmp_path / "dyn.onnx", batch="N")
    onnx_models.with_operator(tmp_path / "det.onnx", "Det")
    onnx_models.with_operator(tmp_path / "custom.onnx", "MyOp", domain="com.example")
    (tmp_path / "unknown_key.toml").write_text("[tune]\nbudgte = '5min'\n")
    x = np.zeros((1, 3, 8, 8), "float32")
    np.savez(tmp_path / "other_name.npz", input=x)
    np.savez(tmp_path / "extra.npz", x=x, mask=x)
    np.savez(tmp_path / "wrong_shape.npz", x=np.zeros((1, 3, 9, 9), "float32"))
    np.savez(tmp_path / "wrong_dtype.npz", x=x.astype("float64"))
    (tmp_path / "notes.npz").write_text("x = 1\n")
    (tmp_path / "earlier").mkdir()  # a run directory, given as the model to go on with it
    config = {"model": {"path": "/models/net.onnx"}, "budget": "5min", "fingerprint": {}}
    (tmp_path / "earlier" / "config.json").write_text(json.dumps(config))
    (tmp_path / "simulated").mkdir()  # a --simulate run's directory names its database so
    (tmp_path / "simulated" / "SIMULATED_database_tuning_record.json").write_text("[0, {}]\n")
    return tmp_path


@pytest.mark.parametrize(
    "args, needle",
    [
        (["missing.onnx"], "model file missing.onnx does not exist"),
        (["empty.onnx"], "is empty (0 bytes)"),
        (["cut.onnx"], "cut.onnx"),
        (
            ["https://example.com/models/net.onnx"],
            "model https://example.com/models/net.onnx is a URL; tune-orchestrator reads a "
            "local file: download it first",
        ),
        (
            ["earlier"],
            "earlier is a run directory, not a model; to go on with that run, give its model and "
            "the directory as --out: orchestrate --budget 5min --out earlier /models/net.onnx",
        ),
        (["notes.onnx"], "is not an ONNX model"),
        (["det.onnx"], "does not support: Det"),
        (["custom.onnx"], "com.example.MyOp"),
        (["dyn.onnx"], "give them with --input-shape x:1x3x8x8"),
        (["--input-shape", "x=1x3", "dyn.onnx"], "is not NAME:DIMS"),
        (["--input-shape", "z:1x3x8x8", "dyn.onnx"], "its inputs are: x"),
        (["--input-shape", "x:10000000000x3x8x8", "dyn.onnx"], "needs more than the"),
        (["--budget", "5 parsecs", "tiny.onnx"], "unknown unit 'parsecs'"),
        (
            ["--budget", "2gpu-h", "--target", "llvm", "tiny.onnx"],
            "units that apply: s, min, h, trials",
        ),
        (["--budget", "200kJ", "--target", "llvm", "tiny.onnx"], "needs NVML on a GPU run"),
        (["--target", "foo", "tiny.onnx"], "unknown target 'foo'"),
        (["--filter", "magic", "tiny.onnx"], "unknown filter 'magic'; choose one of: xgb, none"),
        (["--config", "unknown_key.toml", "tiny.onnx"], "unknown key [tune] budgte"),
        (["--frobnicate", "tiny.onnx"], "No such option '--frobnicate'"),
        (["--trials-per-round", "0", "tiny.onnx"], "0 is not in the range x>=1"),
        (["--library", "", "tiny.onnx"], "'--library': an empty path (an unset variable?)"),
        (["--out", "", "tiny.onnx"], "Invalid value for '--out': an empty path"),
        ([""], "Invalid value for 'MODEL': an empty path"),
        (["--min-gain", "nan", "tiny.onnx"], "'--min-gain': nan is not a number in (0, 1)"),
        (["--price", "-3", "tiny.onnx"], "--price must be a finite, non-negative number"),
        (["--price", "inf", "tiny.onnx"], "of US dollars per hour, not inf"),
        (["--price", "nan", "tiny.onnx"], "of US dollars per hour, not nan"),
        (
            ["--check-inputs", "other_name.npz", "tiny.onnx"],
            "--check-inputs other_name.npz has no array for input 'x'; name one array after each "
            "input of the model: x",
        ),
        (
            ["--check-inputs", "extra.npz", "tiny.onnx"],
            "--check-inputs extra.npz holds 'mask', which the model does not take; its inputs are: x",
        ),
        (
            ["--check-inputs", "wrong_shape.npz", "tiny.onnx"],
            "'x' has shape (1, 3, 9, 9) but the model's input is (1, 3, 8, 8) (or N samples of "
            "it, (N, 1, 3, 8, 8))",
        ),
        (
            ["--check-inputs", "wrong_dtype.npz", "tiny.onnx"],
            "'x' is float64 but the model's input is float32; save it as float32",
        ),
        (
            ["--check-inputs", "notes.npz", "tiny.onnx"],
            "--check-inputs notes.npz is not an .npz file",
        ),
        (["--check-inputs", "none.npz", "tiny.onnx"], "--check-inputs none.npz does not exist"),
        (
            ["--warm-start", "simulated", "tiny.onnx"],
            "--warm-start simulated is a --simulate run: its timings came from a simulated GPU",
        ),
        (  # taken for a predictor.json: xgboost's "Invalid model format" followed
            ["--warm-start", "simulated/SIMULATED_database_tuning_record.json", "tiny.onnx"],
            "is a file of a run's database; give the run directory that holds it: --warm-start "
            "simulated",
        ),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(models, monkeypatch, args, needle):
    monkeypatch.chdir(models)
    fails_with_one_line(args, needle)
    assert not (models / "runs").exists()  # nothing was started


def test_a_path_with_a_tilde_no_shell_expanded_names_the_path_meant(models, monkeypatch):
    """`orchestrate "~/models/net.onnx"` (quoted) said the file does not exist, with no word on
    why; `--out "~/runs/m"` made a folder named ~ in the current directory and ran there."""
    from tune_orchestrator import tune

    monkeypatch.setenv("HOME", str(models))
    monkeypatch.chdir(models)
    meant = "~ is a shell's, not expanded inside quotes"
    fails_with_one_line(["~/tiny.onnx"], f"~/tiny.onnx: {meant}; give {models / 'tiny.onnx'}")
    out = ["--out", "~/runs/m", "tiny.onnx"]
    fails_with_one_line(out, f"'--out': ~/runs/m: {meant}; give {models / 'runs' / 'm'}")
    with pytest.raises(InputError, match=f"out ~/runs/m: {meant} or by the Python API; give"):
        tune("tiny.onnx", "8trials", target="llvm", out="~/runs/m")
    assert not (models / "~").exists()


@pytest.mark.parametrize("batch, refused", [(20000, True), (10000, False)])
def test_a_batch_too_large_for_this_hosts_memory_is_refused(models, monkeypatch, batch, refused):
    """`--input-shape x:100000000x3x8x8` ended with numpy's MemoryError and a traceback as the
    check's samples were drawn; a batch whose samples fit but whose tensors did not, with the
    kernel's OOM killer (exit 137, not a word). Here the memory is 80 MiB: three samples of
    x (15.4 MB each at 20000) fit; with the convolution's output (20.5 MB) held twice, not."""
    from tune_orchestrator import host

    monkeypatch.setattr(host, "host_memory", lambda: 80 << 20)
    monkeypatch.chdir(models)
    args = ["--budget", "8trials", "--target", "llvm", "--input-shape", f"x:{batch}x3x8x8"]
    if refused:
        fails_with_one_line(
            [*args, "dyn.onnx"],
            "running the model needs more than the 80 MiB of memory here: its inputs take 14.6 "
            f"MiB a sample (x: {batch}x3x8x8 float32), 3 samples held at once, its largest "
            "tensor as it runs takes 19.5 MiB and its weights 0.461 KiB; give smaller dynamic "
            "dimensions with --input-shape",
        )
        estimate = ["estimate", "--target", "llvm", "--input-shape", "x:50000x3x8x8", "dyn.onnx"]
        fails_with_one_line(estimate, "36.6 MiB a sample (x: 50000x3x8x8 float32), 1 sample")
        return
    result = CliRunner().invoke(main, [*args, "--build-only", "dyn.onnx"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("fails", ["bad input", "bad value", "internal"])
def test_with_json_a_run_that_ends_in_an_error_ends_its_events_with_one(models, monkeypatch, fails):
    """A pipeline reading the --json stream got nothing on stdout for bad input, and no word
    of an internal error: only an exit code. A value click itself refuses (a budget's unit)
    is bad input too."""
    import jsonschema

    from tune_orchestrator.events import schema

    monkeypatch.chdir(models)
    if fails == "internal":
        monkeypatch.setattr("tune_orchestrator.api.run", _failed_after_the_disk_filled)
    model = "missing.onnx" if fails == "bad input" else "tiny.onnx"
    budget = "5parsecs" if fails == "bad value" else "1min"
    result = CliRunner().invoke(main, ["--json", "--budget", budget, model])
    (line,) = result.stdout.splitlines()
    event = json.loads(line)
    jsonschema.validate(event, schema())
    assert event["event"] == "error" and event["exit_code"] == result.exit_code
    assert result.exit_code == (1 if fails == "internal" else 2)
    assert f"error: {event['reason']}" in result.stderr  # the line stderr got


def test_with_json_a_model_tvm_cannot_import_leaves_nothing_but_events_on_stdout(models):
    """TVM's importer printed the failing operator's inputs (three lines of Relax) on stdout,
    ahead of the error event a pipeline parses."""
    path = onnx_models.sliced_by_input(models / "sliced.onnx")
    result = CliRunner().invoke(main, ["--json", "--budget", "1min", str(path)])
    assert result.exit_code == 2
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["reason"].startswith(f"TVM cannot import {path}")


@pytest.mark.skipif(GPU, reason="checks the behaviour on a host without a GPU")
@pytest.mark.parametrize("rtol", ["inf", "nan", "0", "1.5"])
def test_a_tolerance_from_the_environment_that_passes_anything_or_nothing_is_refused(
    models, monkeypatch, rtol
):
    """ORCHESTRATE_CHECK_RTOL=inf once shipped a model whose output had the wrong shape."""
    monkeypatch.chdir(models)
    monkeypatch.setenv("ORCHESTRATE_CHECK_RTOL", rtol)
    fails_with_one_line(
        ["--budget", "1min", "--target", "llvm", "tiny.onnx"],
        f"[check] rtol must be a relative tolerance in (0, 1), e.g. 1e-3, but got {float(rtol)}",
    )
    assert not (models / "runs").exists()


def _out_of_space(*_args, **_kwargs):
    """A full disk as the run met it: the predictor's save failed, then the checkpoint too."""
    try:
        raise RuntimeError("FileStream.Write incomplete")  # xgboost's words for it
    except RuntimeError:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from None


def _failed_after_the_disk_filled(*_args, **_kwargs):
    try:
        _out_of_space()
    except OSError as exc:
        raise RuntimeError("could not save the model") from exc


def _out_of_space_writing(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "runs/x/journal.jsonl")


def _out_of_space_building(*_args, **_kwargs):  # a build worker, or the model's compile
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tempfile.gettempdir())


@pytest.mark.parametrize(
    "fails",
    [_out_of_space, _failed_after_the_disk_filled, _out_of_space_writing, _out_of_space_building],
)
def test_a_full_disk_is_one_line_that_says_to_free_space_and_resume(models, monkeypatch, fails):
    """It was an internal error with a 100-line traceback; the run resumes once there is room.
    Where the error names no file (a compiler's or linker's words), either disk it wrote on."""
    monkeypatch.setattr("tune_orchestrator.api.run", fails)
    result = CliRunner().invoke(main, ["--budget", "1min", str(models / "tiny.onnx")])
    assert result.exit_code == 1
    where = {
        _out_of_space_writing: "writing runs/x/journal.jsonl; free some space (or give --out on "
        "another disk)",
        _out_of_space_building: f"in the temporary folder {tempfile.gettempdir()}; free some "
        "space there (or set TMPDIR to a folder on a disk with room)",
    }.get(
        fails,
        "on the disk of the run directory or of the temporary folder "
        f"{tempfile.gettempdir()}; free some space there (or give --out, or TMPDIR, on another "
        "disk)",
    )
    assert result.stderr.splitlines() == [
        f"error: No space left on device {where} and run the same command again: the run "
        "resumes where it stopped"
    ]


def test_a_temporary_folder_filled_before_the_final_compile_stops_the_run_to_resume(
    models, tmp_path, monkeypatch
):
    """Room at the start is no promise at the end: LLVM's abort as it exported the model
    ended the run with no line and no report."""
    from tune_orchestrator import host
    from tune_orchestrator.deploy import builds

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    full = {"armed": True, "now": False}
    real_usage, real_build = shutil.disk_usage, builds.ModelBuilds.build

    def usage(path):
        full_now = full["now"] and Path(path) == folder
        return real_usage(path)._replace(free=8 << 10) if full_now else real_usage(path)

    def build(self, database, ledger, label, *, timed):
        full["now"] = full["armed"] and label == builds.TUNED
        return real_build(self, database, ledger, label, timed=timed)

    monkeypatch.setattr(host.shutil, "disk_usage", usage)
    monkeypatch.setattr(builds.ModelBuilds, "build", build)
    out = tmp_path / "run"
    args = ["--budget", "8trials", "--no-library", "--out", str(out), str(models / "tiny.onnx")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [
        f"error: 8 KiB free where compiling the model writes ~32 MiB in the temporary folder "
        f"{folder}; free some space there (or set TMPDIR to a folder on a disk with room) and "
        "run the same command again: the run resumes where it stopped"
    ]
    assert not (out / "model.so").exists()
    full.update(armed=False, now=False)  # room made
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary["trials"] == 8 and summary["shipped_checked"] is True  # none tuned twice


def test_a_run_directory_removed_mid_run_is_one_line(models, monkeypatch):
    """`rm -rf` or a cleanup job took the run directory as the run wrote its files: three
    chained tracebacks."""
    from tune_orchestrator.run import session

    def removed_first(run, *args):
        shutil.rmtree(run.path)
        return save_waiting(run, *args)

    save_waiting = session.save_waiting
    monkeypatch.setattr(session, "save_waiting", removed_first)
    out = models / "scratch" / "run"
    args = ["--budget", "8trials", "--out", str(out), str(models / "tiny.onnx")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {out} was removed while this command was writing {out}/")
    assert lines[0].endswith("; run the command again")


def test_a_model_with_nothing_to_tune_is_compiled_and_checked_on_a_small_budget(tmp_path):
    """It was refused at 1 minute, for a first round of a task it does not have."""
    model = onnx_models.identity(tmp_path / "identity.onnx")
    out = tmp_path / "run"
    args = ["--budget", "20s", "--target", "llvm", "--no-library", "--out", out, model]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert "stopped because     the model has no operators to tune" in result.stdout
    assert "0 tasks: nothing to tune\n" in result.stdout  # not "0 tasks: " and nothing
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary["stop"] == "nothing-to-tune" and summary["shipped_checked"] is True
    estimate = CliRunner().invoke(main, ["estimate", "--target", "llvm", str(model)])
    assert estimate.exit_code == 0, estimate.output
    assert "0 tasks" in estimate.stdout and "no device here" not in estimate.stdout
    # No forecast of rounds, trials and gains it would never run ("0 trials ... -> 1.00x").
    assert "nothing to tune" in estimate.stdout
    assert "rounds" not in estimate.stdout and "--budget" not in estimate.stdout


def test_cuda_without_a_gpu_is_refused(models, monkeypatch):
    monkeypatch.chdir(models)
    fails_with_one_line(["--target", "cuda", "tiny.onnx"], "needs an NVIDIA GPU to measure on")


def test_out_must_be_a_new_empty_or_run_directory_and_is_left_alone(models):
    (models / "afile").write_text("keep me")
    fails_with_one_line(["--out", models / "afile", models / "tiny.onnx"], "is a file")
    mine = models / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    before = snapshot(mine)
    fails_with_one_line(
        ["--out", mine, models / "tiny.onnx"], "already holds other files (thesis.tex)"
    )
    assert snapshot(mine) == before
    assert (models / "afile").read_text() == "keep me"


def test_a_run_directory_of_another_model_is_refused_untouched(models):
    other = models / "other_run"
    with RunDir.open(other, fingerprint={"model_name": "resnet", "model_sha256": "abc"}) as run:
        run.write_json(
            RunDir.CONFIG, {"fingerprint": {"model_name": "resnet", "model_sha256": "abc"}}
        )
        run.append({"type": "session"})
    before = snapshot(other)
    fails_with_one_line(
        ["--out", other, models / "tiny.onnx"],
        "holds a run with a different model_name, model_sha256, inputs, target (model resnet); "
        "give another --out to start a new run, or add --fresh to set that one aside and start "
        "over",
    )  # a pipeline that re-tunes each new export into one --out is told how
    assert snapshot(other) == before


@pytest.mark.parametrize("config", ["[]", '{"fingerprint": 5}', "{}"])
def test_a_run_directory_whose_config_holds_no_fingerprint_is_called_damaged(models, config):
    damaged = models / "damaged_run"
    with RunDir.open(damaged, fingerprint={"model_name": "resnet"}) as run:
        run.append({"type": "session"})
    (damaged / RunDir.CONFIG).write_text(config)
    before = snapshot(damaged)
    fails_with_one_line(
        ["--out", damaged, models / "tiny.onnx"], "holds no run's fingerprint; the run directory"
    )
    assert snapshot(damaged) == before


def test_workers_start_before_the_import_and_an_import_failure_leaves_no_run_folder(
    models, monkeypatch
):
    """The build and measuring workers import TVM while the model is imported; a model TVM
    then cannot import is still one line and exit 2, with no run folder left behind."""
    from tune_orchestrator.errors import InputError
    from tune_orchestrator.model import importer as model_module
    from tune_orchestrator.run import measuring

    order = []
    start = measuring.RunPools.__init__

    def starts(self, *args, **kwargs):
        order.append("workers")
        start(self, *args, **kwargs)

    def cannot_import(model):
        order.append("import")
        raise InputError(f"TVM cannot import {model.path}: (stand-in); simplify the model")

    monkeypatch.setattr(measuring.RunPools, "__init__", starts)
    monkeypatch.setattr(model_module, "import_to_relax", cannot_import)
    fails_with_one_line(["--out", models / "run", models / "tiny.onnx"], "TVM cannot import")
    assert order == ["workers", "import"]
    assert not (models / "run").exists()


def test_a_run_directory_in_use_is_refused(models):
    busy = models / "busy"
    with RunDir.open(busy, fingerprint={}):
        fails_with_one_line(
            ["--out", busy, models / "tiny.onnx"], "is in use by another run in this process"
        )


def test_a_file_named_runs_where_runs_go_without_out_is_refused_as_such(models, monkeypatch):
    """It said "cannot write to --out runs/tiny-<time>" to a user who gave no --out."""
    monkeypatch.chdir(models)
    (models / "runs").write_text("my notes\n")
    fails_with_one_line(
        ["--budget", "1min", "--target", "llvm", "tiny.onnx"],
        "runs here is a file, so runs/<model>-<time>, where a run goes without --out, cannot be "
        "made; give --out DIR",
    )
    assert (models / "runs").read_text() == "my notes\n"


def test_unwritable_out_is_refused(monkeypatch):
    # As root, whom no mode stops, the CLI runs as another user (in a forked child): the model
    # and the folder sit where that user may read them, unlike pytest's own tmp_path.
    home = Path(tempfile.mkdtemp(prefix="unwritable-out-"))
    home.chmod(0o755)
    model = onnx_models.tiny_cnn(home / "tiny.onnx")
    model.chmod(0o644)
    locked = home / "locked"
    locked.mkdir(mode=0o555)  # readable by all, writable by none but root
    args = ["--out", locked / "run", model]
    try:
        if can_switch_users():
            _import_what_a_run_imports()  # the other user may not read this Python's files
            (home / "cache").mkdir()
            os.chown(home / "cache", ALICE, ALICE)
            monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))  # that user's own
            as_user(ALICE, fails_with_one_line, args, "choose a writable directory")
        elif _can_write(locked):
            pytest.skip("running as a user who can write anywhere and cannot become another")
        else:
            fails_with_one_line(args, "choose a writable directory")
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)
        shutil.rmtree(home)


@pytest.fixture
def no_home(monkeypatch):
    """HOME unset and a user id the password database does not know (`env -i` in a container
    run as an arbitrary user)."""
    import pwd

    def unknown(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", unknown)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


@pytest.mark.parametrize("command", ["tune", "estimate"])
def test_a_user_without_a_home_directory_is_told_to_set_one(tmp_path, no_home, command):
    """TVM's import raised "Could not determine home directory", with a traceback and exit 1."""
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = ["--budget", "8trials", "--out", tmp_path / "run"] if command == "tune" else []
    fails_with_one_line([command, *out, model], "set HOME (or XDG_CACHE_HOME) to a folder")
    assert not (tmp_path / "run").exists()


def test_the_estimate_api_without_a_home_directory_says_what_to_set(no_home):
    """Its module imports TVM: the import raised RuntimeError("Could not determine home
    directory") from inside TVM."""
    with pytest.raises(InputError, match="set HOME"):
        from tune_orchestrator import estimate  # noqa: F401


@pytest.mark.parametrize("where", ["out", "out's parent", "runs"])
def test_a_folder_linked_to_nothing_is_named(models, monkeypatch, where):
    """A symbolic link to a disk not mounted, or a scratch folder cleaned: --out got "File
    exists; choose a writable directory", and ./runs so made the run hang, looking for a free
    name for ever."""
    link = models / "scratch"
    link.symlink_to(models / "unmounted")
    monkeypatch.chdir(models)
    if where == "runs":
        link = models / "runs"
        link.symlink_to("unmounted")
        out = []
    else:
        out = ["--out", link if where == "out" else link / "run"]
    fails_with_one_line(
        ["--budget", "8trials", *out, models / "tiny.onnx"],
        f"{link} is a symbolic link to {os.readlink(link)}, which does not exist",
    )
    assert not (models / "unmounted").exists()


@pytest.mark.parametrize("out", [None, "run"], ids=["runs", "relative --out"])
def test_a_deleted_current_directory_is_named(models, monkeypatch, out):
    """Another shell or a cleanup job removed the folder the user stands in: a traceback
    (FileNotFoundError from os.getcwd)."""
    gone = models / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    given = [] if out is None else ["--out", out]
    fails_with_one_line(
        ["--budget", "8trials", *given, models / "tiny.onnx"], "the current directory was deleted"
    )


def test_claiming_a_name_under_a_link_to_nothing_fails_rather_than_hangs(tmp_path):
    import signal

    from tune_orchestrator.run.prepare import claim

    (tmp_path / "runs").symlink_to(tmp_path / "unmounted")

    def hung(*_):
        raise TimeoutError("claim kept looking for a free name")

    signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        with pytest.raises(FileExistsError):
            claim(tmp_path / "runs" / "tiny-20261207-010000")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_out_inside_a_file_is_refused_and_the_file_kept(models):
    # The refusal an unwritable --out gets, provoked in a way that holds for root as well.
    notes = models / "notes.txt"
    notes.write_text("keep me\n")
    fails_with_one_line(
        ["--out", notes / "run", models / "tiny.onnx"], "Not a directory; choose a writable"
    )
    fails_with_one_line(["--out", notes, models / "tiny.onnx"], "is a file")
    assert notes.read_text() == "keep me\n"


def _import_what_a_run_imports() -> None:
    import tune_orchestrator.events  # noqa: F401
    import tune_orchestrator.model.tasks  # noqa: F401
    import tune_orchestrator.run.session  # noqa: F401


def _can_write(folder: Path) -> bool:
    try:
        (folder / ".probe").write_text("")
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def test_help_shows_the_commands_a_user_types():
    for args in (["--help"], []):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and result.stderr == ""
        assert "orchestrate --budget 5min model.onnx" in result.stdout
    tune_help = CliRunner().invoke(main, ["--budget", "5min", "--help"]).output
    for option in ("--budget", "--target", "--out", "--input-shape", "--build-only", "--config"):
        assert option in tune_help


def test_version_and_the_essentials_of_tune_in_the_top_level_help():
    from importlib import metadata

    version = CliRunner().invoke(main, ["--version"])
    assert version.exit_code == 0
    assert version.stdout.strip() == f"orchestrate {metadata.version('tune-orchestrator')}"
    top = CliRunner().invoke(main, ["--help"]).stdout
    assert all(option in top for option in ("--budget BUDGET", "--target", "--out", "--json"))


def test_tunes_options_come_in_groups_with_their_defaults():
    text = CliRunner().invoke(main, ["tune", "--help"]).stdout
    headings = ["Essentials:", "Run control:", "What earlier runs learned:", "Devices and fleet:"]
    assert [text.index(h) for h in headings] == sorted(text.index(h) for h in headings)
    essentials = text[text.index("Essentials:") : text.index("Run control:")]
    assert "--budget" in essentials and "--gpus" not in essentials
    assert "[default: 10min]" in " ".join(text.split())  # the packaged budget, not hidden
    assert "configs/default.toml" not in text  # a path a pip user does not have


@pytest.mark.parametrize(("typed", "meant"), [("estmate", "estimate"), ("reprot", "report")])
def test_a_mistyped_command_is_named_not_taken_for_a_model(typed, meant):
    result = CliRunner().invoke(main, [typed, "x.onnx"])
    assert result.exit_code == 2
    assert f"No such command '{typed}'. Did you mean '{meant}'?" in result.stderr


def test_a_file_named_like_a_command_is_still_the_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    onnx_models.tiny_cnn(tmp_path / "tune.onnx").rename(tmp_path / "tunes")
    result = CliRunner().invoke(main, ["tunes", "--budget", "1s"])
    assert "No such command" not in result.stderr  # went to tune, which refused the budget
    assert result.exit_code == 3


def test_fresh_starts_over_and_keeps_the_earlier_run_aside(models, fast_config):
    out = models / "run"
    args = ["--build-only", "--config", str(fast_config), "--out", str(out)]
    first = CliRunner().invoke(main, [*args, str(models / "tiny.onnx")])
    assert first.exit_code == 0, first.output
    resumed = CliRunner().invoke(main, [*args, str(models / "tiny.onnx")])
    assert resumed.stdout.splitlines()[0].startswith(f"resuming {out}")
    journal = (out / "journal.jsonl").read_text()
    fresh = CliRunner().invoke(main, [*args, "--fresh", str(models / "tiny.onnx")])
    assert fresh.exit_code == 0, fresh.output
    (aside,) = [p for p in models.iterdir() if p.name.startswith("run.")]
    assert (aside / "journal.jsonl").read_text() == journal  # nothing the user had is lost
    assert "resuming" not in fresh.stdout and f"now {aside}" in fresh.stderr


def test_runs_started_in_the_same_second_without_out_get_a_directory_each(
    models, fast_config, monkeypatch
):
    """The default runs/<model>-<time> was chosen when the run was described and made when it
    opened, seconds later: a second run started in the same second (another seed, in
    parallel) took the first's directory, "in use by another orchestrate process" (exit 2),
    or resumed it once it had finished."""
    from tune_orchestrator.run import prepare

    monkeypatch.chdir(models)
    describe = prepare.describe
    taken = []

    def described_then_overtaken(*args, **kwargs):
        given = describe(*args, **kwargs)
        given.invocation.out.mkdir(parents=True)  # the other run makes it meanwhile
        (given.invocation.out / "journal.jsonl").write_text("")
        taken.append(given.invocation.out)
        return given

    monkeypatch.setattr(prepare, "describe", described_then_overtaken)
    args = ["--build-only", "--config", str(fast_config), "tiny.onnx"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (other,) = taken
    assert (
        f"run directory: {other}-2" in result.stdout and (models / f"{other}-2/model.so").exists()
    )
    assert [p.name for p in (models / other).iterdir()] == ["journal.jsonl"]  # not touched


def test_fresh_refuses_a_run_still_working_and_moves_nothing(models, fast_config):
    out = models / "run"
    with RunDir.open(out, fingerprint={"model_name": "tiny"}):  # another process's live run
        before = snapshot(out)
        fails_with_one_line(
            [
                "--build-only",
                "--config",
                fast_config,
                "--out",
                out,
                "--fresh",
                models / "tiny.onnx",
            ],
            "is in use by another run in this process",
        )
        assert snapshot(out) == before
        assert [p.name for p in models.iterdir() if p.name.startswith("run")] == ["run"]


@pytest.mark.skipif(GPU, reason="checks building for a GPU on a host without one")
def test_build_only_compiles_for_a_gpu_on_a_host_without_one(models, fast_config):
    out = models / "h100"
    result = CliRunner().invoke(
        main,
        [
            "--build-only",
            "--target",
            "nvidia/nvidia-h100",
            "--config",
            str(fast_config),
            "--out",
            str(out),
            str(models / "tiny.onnx"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (out / "model.so").stat().st_size > 0
    report = json.loads((out / "report.json").read_text())
    assert report["build_only"] is True and report["summary"]["trials"] == 0
    assert report["target"]["tvm"]["kind"] == "cuda" and report["target"]["tvm"]["arch"].startswith(
        "sm_90"
    )
    assert "no device here to run it" in result.stdout
    # A new --out holds no records: the summary does not let "the tuned build" mislead.
    assert "schedules           TVM's defaults: the run directory holds no tuned records" in (
        result.stdout
    )
    assert "model.so            the build with TVM's default schedules (no task runs a tuned" in (
        result.stdout
    )
    assert report["summary"]["default_schedules"] is True


def test_the_budget_clock_starts_with_the_command_not_with_a_shell_that_execd_it(monkeypatch):
    import time

    import psutil

    import tune_orchestrator as orchestrator
    from tune_orchestrator.cli.commands import process_started

    now = time.time()
    monkeypatch.setattr(orchestrator, "IMPORTED", time.monotonic())
    # Started 1 s before the import: the interpreter's start counts.
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: now - 1.0)
    assert orchestrator.IMPORTED - process_started() == pytest.approx(1.0, abs=0.2)
    # Started 150 s before (a shell ran `pip install` first, then exec'd us): from the import.
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: now - 150.0)
    assert process_started() == orchestrator.IMPORTED


@pytest.mark.parametrize("command", ["tune", "estimate"])
def test_a_temporary_folder_without_room_is_refused_before_anything_is_written(
    models, tmp_path, monkeypatch, command
):
    # LLVM ends the whole process when the temporary folder's disk fills as it writes a build
    # ("LLVM ERROR: IO failure on output stream"): no line, no report, a run directory left.
    from tune_orchestrator import host

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    real = shutil.disk_usage
    monkeypatch.setattr(
        host.shutil,
        "disk_usage",
        lambda path: real(path)._replace(free=8 << 10) if Path(path) == folder else real(path),
    )
    out = tmp_path / "run"
    args = ["--out", out] if command == "tune" else ["--runs-dir", tmp_path / "runs"]
    fails_with_one_line(
        [command, "--budget", "1min", *args, models / "tiny.onnx"],
        f"the temporary folder {folder} has 8 KiB free and the run writes up to ~32 MiB there "
        "(TVM builds every candidate and the model in it); free some space there, or set "
        "TMPDIR to a folder on a disk with room",
    )
    assert not out.exists() and list(folder.iterdir()) == []
