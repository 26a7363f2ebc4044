"""Two users' runs on one host: one user's run, then another user's run while the first holds
its device claim, then the first user's again; every run must exit 0 and the second must be told
that the first is measuring on the same device.

    sudo python benchmarks/two_users.py [--user nobody] [--label vm-2core]

Needs root (to run as the other user, with setpriv) and an interpreter the other user can
execute: a Python under a home folder of mode 0700 (such as /root/.pyenv) is not one. Each run
tunes the bundled example model for `--budget 16trials` in a folder of its own, with its own
tuning library; the lock files under the temp folder are the ones every user's runs share.
Figures go to benchmarks/results/two_users-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT

MODEL = ROOT / "examples" / "smallcnn.onnx"


def orchestrate(workdir: Path, name: str, user: pwd.struct_passwd | None) -> subprocess.Popen:
    """A tuning run in `workdir/name`, as `user` (None: this one)."""
    out = workdir / name
    env = {**os.environ, "XDG_CACHE_HOME": str(workdir / f"{name}-cache")}
    env["MPLCONFIGDIR"] = env["HOME"] = str(workdir / f"{name}-home")
    args = [sys.executable, "-m", "tune_orchestrator", "--budget", "16trials", "--target", "llvm",
            "--out", str(out), "-q", str(MODEL)]  # fmt: skip
    if user is not None:
        args = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                *args]  # fmt: skip
    log = open(workdir / f"{name}.log", "w")  # noqa: SIM115 - closed by the caller's wait
    return subprocess.Popen(args, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", default="nobody")
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the second run is made as another user (setpriv)")
    other = pwd.getpwnam(args.user)
    workdir = Path(tempfile.mkdtemp(prefix="two-users-"))
    workdir.chmod(0o1777)  # every user writes its own run folder here
    try:
        first = orchestrate(workdir, "first", None)
        time.sleep(0.5)  # the first run's claim is taken as it starts measuring; not a stand-in
        second = orchestrate(workdir, "second", other)
        codes = {"first": first.wait(), "second": second.wait()}
        third = orchestrate(workdir, "third", None)
        codes["third"] = third.wait()
        logs = {name: (workdir / f"{name}.log").read_text() for name in codes}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    told = "is measuring on cpu" in logs["second"] or "is measuring on cpu" in logs["first"]
    result = {
        "date": str(dt.date.today()),
        "host": platform.node(),
        "other_user": args.user,
        "exit_codes": codes,
        "told_of_the_other": told,
        "tails": {name: log[-1500:] for name, log in logs.items() if codes[name] != 0},
    }
    out = ROOT / "benchmarks" / "results" / f"two_users-{args.label}-{dt.date.today()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    ok = all(code == 0 for code in codes.values())
    print(f"exit codes {codes}; the overlapping run was told of the other: {told}")
    print(f"{'passed' if ok else 'FAILED'}; raw figures: {out.relative_to(ROOT)}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
