"""A finished run asked again: where it would stop before its first round, the session does
nothing and answers with the report the run wrote.

A run that stopped on diminishing returns, at its trial budget or with every task retired,
asked again with the same command (or, having stopped paying, with a larger budget), used to
read everything back, stop before its first round, and then compile, check and time the same
database again (10-50 s) to ship the model it had shipped. Whether it would stop again is the
stopping rules' own decision up front: a trial budget's on the trials the journal counts; the
early stop's on the run's curve (the journal's points) and the new budget, where the run
stopped paying: the tasks' side of that decision (floors, catching up with a peer) did not
stand in its way then, and cannot have changed when nothing else did: the settings other than
the budget, the price, the check's samples, the measuring machine. A run that retired every
task retires each again as it is read back. And a budget of time, money or energy that the
up-front check would refuse (too little left for a round after what the run spent) is
answered so too, with the budget that would tune further.

A run resumed to measure elsewhere than its earlier sessions did (on this host rather than
their RPC fleet), or with another library (after --no-library), is told so: its timings and
records join theirs all the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tune_orchestrator.budget import Decision, Ledger, StoppingRule
from tune_orchestrator.budget.base import BUDGET, STOPPED_PAYING, TASKS_DONE, TRIALS

from .. import exits
from ..errors import InputError
from ..rundir import RunDir
from ..rundir.restore import journal_points
from .failing import search_failed
from .reporting import foreign_report

# Why a run would stop again at once, and what the user can do about it.
WHAT_TO_DO = {
    STOPPED_PAYING: "add --no-early-stop to spend the budget anyway",
    TRIALS: "give a budget of more trials to tune further",
    TASKS_DONE: "no task has anything left to search; --fresh starts the run over",
}


def stops_again(
    rule: StoppingRule, ledger: Ledger, journal: Sequence[Mapping[str, Any]]
) -> Decision | None:
    """The stopping rules' decision up front, on the run's curve and this session's budget,
    where it stops the run at its trial budget, or stops it paying as its last session did;
    the last session's, where it ended with every task retired and the rules would go on
    (restore retires each task again: every retirement is journaled before that stop), but
    for a task whose search kept failing, which is searched again; else None."""
    last = last_stop(journal)
    before = ledger.history
    ledger.history = journal_points(journal)
    try:
        decision = rule.decide(ledger)
    finally:
        ledger.history = before
    # A task retired because its search kept failing is searched again (rundir/restore.py).
    if not decision.stop and last.get("code") == TASKS_DONE and not _search_failed(journal):
        return Decision(True, str(last.get("reason") or "every task is retired"), TASKS_DONE)
    if not decision.stop or decision.code not in WHAT_TO_DO:
        return None
    if decision.code == STOPPED_PAYING and last.get("code") != STOPPED_PAYING:
        return None  # then the tasks it would wait on are not known
    return decision


def last_stop(journal: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The journal's last "stopped" entry: why the run's last tuning stopped ({}: none)."""
    return next((e for e in reversed(journal) if e.get("type") == "stopped"), {})


def _search_failed(journal: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a task's last retirement, the one restore reads back, was for its failing
    search."""
    last = {e.get("task"): e.get("reason") for e in journal if e.get("type") == "task_retired"}
    return any(search_failed(str(reason)) for reason in last.values())


def same_run(earlier: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether two sessions' config.json records ask for the same run, budgets aside."""
    return _unbudgeted(earlier) == _unbudgeted(now)


def _unbudgeted(record: Mapping[str, Any]) -> dict[str, Any]:
    """A config.json record without what may change between sessions of one run: its budget,
    where the model file was read from (the fingerprint holds its contents), where the
    check's samples were (earlier_report compares the samples the report was checked on) and
    where it measured and what it read (a finished run's answer is the same)."""
    varying = ("budget", "model", "check_inputs", "resumed_with")
    out = {k: v for k, v in record.items() if k not in varying}
    settings = dict(out.get("settings") or {})
    settings["tune"] = {k: v for k, v in (settings.get("tune") or {}).items() if k != "budget"}
    out["settings"] = settings
    return out


def spent(budget: str, minimum: str) -> tuple[Decision, str]:
    """Where the up-front check would refuse `budget` (it covers no further round after what
    the run spent), the stop and what the user can do: the run's answer, as at a trial
    budget reached, not a refusal (exit 3), which a pipeline running the same command again
    took for a failure."""
    return (
        Decision(True, f"budget {budget} leaves too little to tune further", BUDGET),
        f"give --budget {minimum} or more to tune further",
    )


def moved(earlier: Any, now: Mapping[str, Any]) -> list[str]:
    """Warnings where this session (`now`, its config.json record) measures on another machine
    or reads another library than the earlier sessions (`earlier`, the record they left)."""
    was = earlier.get("resumed_with") if isinstance(earlier, dict) else None
    if not isinstance(was, dict):  # a first session, or the record of an older version
        return []
    this, said = now["resumed_with"], []
    if (was.get("rpc"), was.get("rpc_key")) != (this["rpc"], this["rpc_key"]):
        said.append(
            f"the run's earlier sessions measured on {_machine(was)} and this one measures on "
            f"{_machine(this)}: its timings are compared with theirs as one device's (give "
            "the command they ran to measure where they did)"
        )
    if was.get("library") is not None and this["library"] is not None:
        if was["library"] != this["library"]:
            said.append(
                f"the run's earlier sessions ran {_library(was['library'])} and this one runs "
                f"{_library(this['library'])}"
            )
    return said


def _machine(where: Mapping[str, Any]) -> str:
    if where.get("rpc"):
        return f"the RPC fleet at {where['rpc']} (key {where.get('rpc_key')})"
    return "this host"


def _library(root: str | bool) -> str:
    return f"with the library at {root}" if root else "without the library (--no-library)"


def answer(decision: Decision, to_do: str | None = None) -> str:
    """What the user is told; `to_do`: what they can do, where WHAT_TO_DO does not say."""
    return (
        f"the run already finished and would stop again at once: {decision.reason}; model.so is "
        f"what it shipped, nothing was changed ({to_do or WHAT_TO_DO[decision.code]})"
    )


def earlier_report(run: RunDir, samples: str | None) -> dict[str, Any] | None:
    """The report the run's last session wrote, where it is one of this version, its run ended
    with exit code 0 and its tuned build was checked on the same `samples` (their source;
    None: this session would check nothing, as a simulated GPU's runs do not); else None."""
    from ..api import Result

    try:
        report = run.read_json(RunDir.REPORT)
        if foreign_report(report) is not None:
            return None
        ok = Result.from_report(report).exit_code == exits.OK
    except (InputError, AttributeError, KeyError, TypeError):  # unreadable, or fields missing
        return None
    checked_on = ((report.get("tuned") or {}).get("check") or {}).get("inputs")
    return report if ok and (samples is None or checked_on == samples) else None


def records_kept(run: RunDir, journal: Sequence[Mapping[str, Any]], trials: int) -> bool:
    """Whether the run's database holds a line for each of the `trials` the journal counts and
    each default schedule it recorded. One lost since (its file cut back, as by a power cut
    after the run ended) is put back only by going the whole way."""
    defaults = {
        e.get("task") for e in journal if e.get("type") == "baseline" and e.get("record_key")
    }
    try:
        with open(run[RunDir.RECORD_DB], "rb") as fh:
            lines = sum(1 for line in fh if line.strip())
    except OSError:
        return False
    return lines >= trials + len(defaults)
