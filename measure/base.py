"""The measurement seams: a Builder turns candidates into artifacts, an Engine times them.

Everything that can fail for one candidate comes back as data with its message; exceptions
are kept for bugs.
"""

from __future__ import annotations

import abc
import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Any

# One kernel argument: (dtype, shape), e.g. ("float32", (1, 3, 32, 32)).
ArgSpec = tuple[str, tuple[int, ...]]


@dataclasses.dataclass(frozen=True)
class BuildInput:
    """A scheduled TIR module to compile for `target` (both TVM objects)."""

    mod: Any
    target: Any


@dataclasses.dataclass(frozen=True)
class Build:
    """The outcome of one build: an artifact path, or the error that prevented it."""

    artifact: str | None
    error: str | None = None
    seconds: float = 0.0  # a timed-out build: its timeout
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclasses.dataclass(frozen=True)
class MeasureInput:
    """A built artifact and the arguments its entry function takes. `label` is for simulated
    devices (e.g. the task and candidate a simulated latency belongs to); engines that run the
    artifact ignore it."""

    artifact: str
    args: tuple[ArgSpec, ...]
    label: Any = None


@dataclasses.dataclass(frozen=True)
class Measurement:
    """Seconds per run for each repeat, or the error that prevented timing."""

    run_secs: tuple[float, ...] | None
    error: str | None = None
    finite: bool | None = None  # the arguments held no NaN / Inf after the run (None: unknown)
    dop: int = 1  # how many candidates were timed at once (1: in isolation)
    raced: bool = False  # cut short: clearly slower than the task's best after a few repeats

    def __post_init__(self) -> None:
        if (self.run_secs is None) == (self.error is None):
            raise ValueError("a Measurement has either run_secs or an error, not both")
        if self.run_secs is not None and not self.run_secs:
            raise ValueError("run_secs cannot be empty")

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def can_lead(self) -> bool:
        """Whether it may stand as the best that later candidates are raced against: timed,
        and no NaN or Inf written."""
        return self.ok and self.finite is not False

    @property
    def mean_s(self) -> float:
        """Mean seconds per run over the repeats (what the database ranks records by);
        infinity for a failed measurement."""
        return statistics.fmean(self.run_secs) if self.run_secs else float("inf")


class Builder(abc.ABC):
    """Compiles candidates; one Build per input, in order."""

    @abc.abstractmethod
    def build(
        self, inputs: Sequence[BuildInput], until: Callable[[], bool] | None = None
    ) -> list[Build]:
        """One Build per input, in order; once `until()` is true no more builds start (those
        started finish) and only the Builds of the inputs before the first not started are
        returned."""

    def release(self, builds: Sequence[Build]) -> None:
        """Called once the artifacts of `builds` have been measured and are not needed."""

    def stats(self) -> dict[str, Any]:
        """For the report: how this builder's workers started."""
        return {}

    def close(self) -> None:
        """Release workers and temporary files."""

    def __enter__(self) -> Builder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Engine(abc.ABC):
    """Times built candidates on the device; one Measurement per input, in order."""

    #: "cpu" or "cuda": where the engine measures.
    device_type: str = "cpu"

    @abc.abstractmethod
    def measure(
        self,
        inputs: Sequence[MeasureInput],
        on_result: Callable[[int, Measurement], None] | None = None,
        best_s: float | None = None,
    ) -> list[Measurement]:
        """Time every input; `on_result(i, measurement)` is called as each result arrives,
        so the caller can make it durable before the next one is timed. A parallel engine
        re-times in isolation any result faster than `best_s` (the task's best so far) before
        reporting it; serial engines time in isolation anyway."""

    def stats(self) -> dict[str, object]:
        """For the report: how this engine measured."""
        return {"engine": type(self).__name__, "device": self.device_type}

    def close(self) -> None:
        """Release workers."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def short_error(error: BaseException | str, limit: int = 400) -> str:
    """One line of an error: the last line after a traceback, otherwise the first line."""
    text = str(error).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(error).__name__ if isinstance(error, BaseException) else "unknown error"
    line = lines[-1] if "Traceback" in text else lines[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def floating(dtype: str) -> bool:
    """Whether `dtype` names a floating-point type: float16/32/64 or bfloat16."""
    return dtype.startswith(("float", "bfloat"))
