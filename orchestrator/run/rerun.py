"""A finished run asked again: where more spending still stops paying, the session does
nothing and answers with the report the run wrote.

A run that stopped on diminishing returns, resumed with the same command or a larger budget,
used to read everything back, stop before its first round, and then compile, check and time
the same database again (10-50 s) to ship the model it had shipped. Whether it would stop
again is the early stop's own decision on the run's curve (the journal's points) and the new
budget; the tasks' side of that decision (floors, catching up with a peer) did not stand in
its way when the run stopped, and cannot have changed when nothing else did: the settings
other than the budget, the price, the check's samples, the measuring machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tune_orchestrator.budget import Decision, Ledger, StoppingRule
from tune_orchestrator.budget.base import STOPPED_PAYING
from tune_orchestrator.budget.report import schema

from .. import exits
from ..errors import InputError
from ..rundir import RunDir
from ..rundir.restore import journal_points


def stops_again(
    rule: StoppingRule, ledger: Ledger, journal: Sequence[Mapping[str, Any]]
) -> Decision | None:
    """The early stop's decision on the run's curve and this session's budget, where the run's
    last session stopped paying and it would stop so again; else None."""
    last = next((e for e in reversed(journal) if e.get("type") == "stopped"), None)
    if last is None or last.get("code") != STOPPED_PAYING:
        return None
    before = ledger.history
    ledger.history = journal_points(journal)
    try:
        decision = rule.decide(ledger)
    finally:
        ledger.history = before
    return decision if decision.stop and decision.code == STOPPED_PAYING else None


def same_run(earlier: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether two sessions' config.json records ask for the same run, budgets aside."""
    return _unbudgeted(earlier) == _unbudgeted(now)


def _unbudgeted(record: Mapping[str, Any]) -> dict[str, Any]:
    """A config.json record without what may change between sessions of one run: its budget
    and where the model file was read from (the fingerprint holds its contents)."""
    out = {k: v for k, v in record.items() if k not in ("budget", "model")}
    settings = dict(out.get("settings") or {})
    settings["tune"] = {k: v for k, v in (settings.get("tune") or {}).items() if k != "budget"}
    out["settings"] = settings
    return out


def answer(decision: Decision) -> str:
    """What the user is told."""
    return (
        f"the run already finished and would stop again at once: {decision.reason}; model.so is "
        "what it shipped, nothing was changed (add --no-early-stop to spend the budget anyway)"
    )


def earlier_report(run: RunDir, samples: str) -> dict[str, Any] | None:
    """The report the run's last session wrote, where it is one of this version, its run ended
    with exit code 0 and its tuned build was checked on the same `samples` (their source);
    else None."""
    from ..api import Result

    known = schema()["properties"]
    try:
        report = run.read_json(RunDir.REPORT)
        if report.get("schema") != known["schema"]["const"]:
            return None
        if report.get("version") != known["version"]["const"]:
            return None
        ok = Result.from_report(report).exit_code == exits.OK
    except (InputError, AttributeError, KeyError, TypeError):  # unreadable, or not a report
        return None
    checked_on = ((report.get("tuned") or {}).get("check") or {}).get("inputs")
    return report if ok and checked_on == samples else None
