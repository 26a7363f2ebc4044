"""Run events: one dict per step, for `on_event` callbacks and the `--json` stream.

Every event carries `schema`, `version`, `event` and `time` (Unix seconds); the fields of each
kind are in `orchestrator/events.schema.json`:

    run_started  tasks  untuned_tasks  library_round  compiled  round  task_retired  warning
    stopped  compared  shipped  finished
    refused (instead of all the others: the budget was refused before any work)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import IO, Any

SCHEMA = "tune-orchestrator/event"
VERSION = 1

Event = dict[str, Any]
Callback = Callable[[Event], None]


def schema() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("events.schema.json").read_text())


class Emitter:
    """Stamps events and hands them to every subscriber, in order.

    A subscriber that raises BrokenPipeError writes to a reader that went away (`| head`, a
    pipeline's consumer that died): it gets no more events, and `on_gone` is told why, once
    (the run stops after its round, as on SIGTERM). Any other exception is the caller's.
    """

    GONE = "the reader of the event stream went away (broken pipe)"

    def __init__(
        self, *subscribers: Callback | None, on_gone: Callable[[str], None] | None = None
    ) -> None:
        self.subscribers = [s for s in subscribers if s is not None]
        self.on_gone = on_gone

    def __call__(self, event: str, **fields: Any) -> None:
        stamped = {
            "schema": SCHEMA,
            "version": VERSION,
            "event": event,
            "time": time.time(),
            **fields,
        }
        for subscriber in list(self.subscribers):
            try:
                subscriber(stamped)
            except BrokenPipeError:
                if subscriber in self.subscribers:
                    self.subscribers.remove(subscriber)
                if self.on_gone is not None:
                    self.on_gone(self.GONE)


def onto_stdout(subscriber: Callback) -> Callback:
    """`subscriber`, which writes to stdout, made safe for when stdout's reader goes away: stdout
    is pointed at /dev/null (later writes, and Python's flush at exit, then fail no more) and
    the BrokenPipeError is raised once, for the Emitter."""

    def deliver(event: Event) -> None:
        try:
            subscriber(event)
        except BrokenPipeError:
            with contextlib.suppress(OSError, ValueError):  # no file descriptor: nothing to mend
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, sys.stdout.fileno())
                os.close(null)
            raise

    return deliver


class JsonLines:
    """Writes each event as one line of JSON (and nothing else) to `stream`, flushed."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        line = json.dumps(event, separators=(",", ":"), default=_jsonable)
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)
