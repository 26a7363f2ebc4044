"""The RPC engine: candidates measured on a fleet registered with a TVM RPC tracker.

TVM's tracker and servers are the existing machinery for this (servers registered under one
key form a pool); MetaSchedule's RPCRunner uploads each artifact to a server, times it there
and returns the result. Only the tracker the user named is ever contacted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .base import Engine, MeasureInput, Measurement, short_error
from .local import TimerConfig


def parse_tracker(address: str) -> tuple[str, int]:
    """`host:port` -> (host, port); ValueError naming the form otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--rpc {address!r} is not HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


def tracker_keys(host: str, port: int) -> dict[str, int]:
    """Server keys registered with the tracker and how many servers each has (free or busy)."""
    from tvm import rpc

    summary = rpc.connect_tracker(host, port).summary()
    counts: dict[str, int] = {}
    for info in summary.get("server_info", []):
        key = str(info.get("key", "")).split(":")[-1]
        counts[key] = counts.get(key, 0) + 1
    return counts


def evaluator_config(timer: TimerConfig) -> Any:
    """MetaSchedule's EvaluatorConfig for our timer settings."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    return EvaluatorConfig(
        number=timer.number,
        repeat=timer.repeat,
        min_repeat_ms=timer.min_repeat_ms,
        enable_cpu_cache_flush=timer.cpu_cache_flush,
    )


def runner_inputs(inputs: Sequence[MeasureInput], device_type: str) -> list[Any]:
    """MetaSchedule RunnerInputs for built artifacts (what its runners take)."""
    from tvm.s_tir.meta_schedule.arg_info import TensorInfo
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    return [
        RunnerInput(
            item.artifact,
            device_type,
            [TensorInfo(dtype, list(shape)) for dtype, shape in item.args],
        )
        for item in inputs
    ]


class RpcEngine(Engine):
    """Measures on the servers registered under `key` with the tracker at host:port."""

    def __init__(
        self,
        *,
        tracker: str,
        key: str,
        device_type: str = "cpu",
        timer: TimerConfig | None = None,
        timeout_s: float = 60.0,
        workers: int | None = None,
    ) -> None:
        """`workers`: candidates in flight at once; default one per server under `key`."""
        from tvm.s_tir.meta_schedule.runner import RPCConfig, RPCRunner

        host, port = parse_tracker(tracker)
        if workers is None:
            workers = max(1, tracker_keys(host, port).get(key, 0))
        self.workers = workers
        self.device_type = device_type
        self.tracker, self.key = (host, port), key
        self._runner = RPCRunner(
            RPCConfig(
                tracker_host=host,
                tracker_port=port,
                tracker_key=key,
                session_timeout_sec=int(timeout_s),
            ),
            evaluator_config=evaluator_config(timer or TimerConfig()),
            max_workers=workers,
        )

    def measure(
        self,
        inputs: Sequence[MeasureInput],
        on_result: Callable[[int, Measurement], None] | None = None,
        best_s: float | None = None,
    ) -> list[Measurement]:
        futures = self._runner.run(runner_inputs(inputs, self.device_type))
        results = []
        for index, future in enumerate(futures):
            try:
                outcome = future.result()
            except Exception as exc:  # the session broke: this candidate's result
                m = Measurement(None, f"RPC measurement failed: {short_error(exc)}")
            else:
                if outcome.error_msg:
                    m = Measurement(
                        None, f"RPC measurement failed: {short_error(outcome.error_msg)}"
                    )
                else:
                    m = Measurement(tuple(float(s) for s in outcome.run_secs))
            results.append(m)
            if on_result is not None:
                on_result(index, m)
        return results

    def stats(self) -> dict[str, object]:
        return {
            **super().stats(),
            "tracker": f"{self.tracker[0]}:{self.tracker[1]}",
            "key": self.key,
            "in_flight": self.workers,
        }
