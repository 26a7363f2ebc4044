"""Run events: one dict per step, for `on_event` callbacks and the `--json` stream.

Every event carries `schema`, `version`, `event` and `time` (Unix seconds); the fields of each
kind are in `orchestrator/events.schema.json`:

    run_started  tasks  untuned_tasks  library_round  compiled  round  task_retired  warning
    stopped  compared  shipped  finished
    refused (instead of all the others: the budget was refused before any work)
"""

from __future__ import annotations

import json
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
    """Stamps events and hands them to every subscriber, in order."""

    def __init__(self, *subscribers: Callback | None) -> None:
        self.subscribers = [s for s in subscribers if s is not None]

    def __call__(self, event: str, **fields: Any) -> None:
        stamped = {
            "schema": SCHEMA,
            "version": VERSION,
            "event": event,
            "time": time.time(),
            **fields,
        }
        for subscriber in self.subscribers:
            subscriber(stamped)


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
