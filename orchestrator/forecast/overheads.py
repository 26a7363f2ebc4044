"""What a run spends whatever its budget: the untuned baseline, compiling, checking and timing
the model, the report; and what a first round costs before one has been timed.

Forecast before any work from the tasks and the target, so that a budget which cannot cover
the fixed phases is refused up front and the final phase is kept back from the start.
`orchestrate estimate` and the tuning run use the same figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..config import Settings
from ..deploy.timing import Timing
from ..tasks import Task

# The untuned baseline builds and times each task's default schedule; compiling the model
# builds every task's kernel once, however often the model calls it. Measured by
# `orchestrate estimate` on nine models (2-core VM, llvm, znver3, 2026-11-26: 4-28 tasks,
# 4 MFLOP-15 GFLOP): the baseline 0.4-0.9 s a task (vggish's heavy kernels 3.9 s), a compile
# 0.13-1.08 s a task; on an H200 host (cuda, vggish, 15 tasks) the baseline 3.07 s a task (each
# measuring worker makes a CUDA context) and a compile about 0.5 s a task. Padded: a guess too
# high refuses budgets that would have fitted, one too low spends the baseline and then stops.
UNTUNED_BASE_S = 2.0
UNTUNED_TASK_S = {"cpu": 1.0, "cuda": 3.0}
# The baseline runs each default kernel about this many times (a first run, three repeats).
UNTUNED_RUNS = 5
COMPILE_BASE_S = 3.0
COMPILE_TASK_S = 1.2
# Untuned end-to-end throughput, FLOP/s: TVM's default CPU schedules run on one thread, so
# not scaled by cores (measured 1.3-2.7 GFLOP/s on the seven CNNs and the transformer above,
# alike with 1 and 2 threads; the MLP's 4 MFLOP took 11 ms, which only the timings' floor
# covers); per GPU for cuda. Low on purpose: a heavy model's check and timings are forecast
# from it.
UNTUNED_FLOPS = {"cpu": 1.0e9, "cuda": 20e9}
# Before a baseline was measured, what the first round's candidates are guessed to cost each
# (the baselines above took 0.4-3.9 s a task).
CANDIDATE_GUESS_S = 3.0
# Rendering report.json, report.md, report.html and the plots, and writing them out.
REPORT_S = 4.0
# What a model's check and a model's timing pay whatever its latency (onnxruntime's session and
# the inputs; the timer's set-up and first call). Of the nine models above, the small ones'
# checks (0.1 s) and timings (0.7-1.2 s) took more than their latency accounts for (mlpish's
# timing 0.9 s, forecast 0.5 s without this; tinybert's 1.1 s, 0.5 s).
CHECK_BASE_S = 0.2
TIMING_BASE_S = 0.6
# A first round's search and learning before one was timed here: what every round pays
# whatever its population (setting the task's search up, learning after it), plus the search
# on 2 host cores at TVM's population of 512 and 3 genetic iterations. The first rounds of
# population 128 (a round of 64), their wall less building and measuring: llvm 5.4-12.9 s on
# the 2-core VM (seven models, 61 runs of the filter benchmark, 2026-11-25/26; sampling and
# mutation 0.5-5.1 s of it, registering the tensor intrinsics ~4 s, ~1.4 s since CPU runs
# leave CUDA's out); cuda (vggish, real builds, timings simulated) 46.4 s on the 2-core VM,
# 30.6 s of it waiting on the next round's search and builds, which a pipelined round
# prepares while it measures and the simulated GPU measured in ~1 s, and 24.3-28.6 s on a
# 16-core H200 host, where a real 4 min run's first round of 42 took 9.8 s. Padded as the
# fixed phases are, with the forecast's margin on top; one figure for both (15 s and 40 s)
# was twice the slowest CPU round and under CUDA's.
ROUND_BASE_S = {"cpu": 7.0, "cuda": 30.0}
SEARCH_S_ON_2_CORES = {"cpu": 20.0, "cuda": 80.0}
# What `estimate` expects a round to cost before any run here was timed (the run's own
# first-round guess above is padded so as never to overshoot; these are typical). Measured by
# benchmarks/estimate_accuracy.py on the 2-core VM (2026-11-23, three models, 3 min runs): a
# candidate 0.32-0.69 times what one task's default schedule took to build and measure in the
# baseline (which pays the build workers' start and builds one candidate per task), 35-58% of
# it measuring. Search and learning a round of 64, since the search is sized to the round and
# shares one model with the filter: about 3.7-3.8 s on the two CNNs and 0.8 s on the MLP (the
# same runs at c4dfa71, 2026-11-25, rounds counted as trials / 64), 5.4-5.7 s in three
# 512-trial smallcnn runs later that day on a slower VM (untuned 8.6-9.5 ms against 6.2 ms);
# learning 4-7% of it on the CNNs, 15-17% on the MLP. On a GPU the baseline costs far more per
# task than a candidate does (each measuring worker makes a CUDA context): in the real 4 min
# vggish run on a lent H200 (16-core host, 2026-11-26,
# benchmarks/results/orchestrate-vggish-cuda-4min-nvidia-h200-2026-11-26.json) the baseline
# took 3.07 s a task and a candidate 0.32 s of building and measuring in the foreground (338
# in 107 s), 0.10 of it; the CPU ratio would have forecast 1.5 s. One run: still a guess.
ROUND_S_ON_2_CORES = 4.0
CANDIDATE_VS_BASELINE = {"cpu": 0.5, "cuda": 0.1}
ROUND_FIXED_SPLIT = {"search": 0.93, "learn": 0.07}
ROUND_CANDIDATE_SPLIT = {"build": 0.6, "measure": 0.4}
# Once the untuned model is compiled and checked, the run keeps back this multiple of its
# compile time, plus its check and timing twice over (the tuned and the untuned model are
# timed in turn), the report and a margin, for the final phase.
RESERVE_FACTOR, RESERVE_MARGIN_S = 1.5, 2.0


@dataclasses.dataclass(frozen=True)
class FixedCosts:
    """Seconds of the phases every run pays (a resumed run skips those already done)."""

    untuned_s: float  # every task's default schedule built and measured
    compile_s: float  # one compile of the model
    check_s: float  # one run of the model checked against onnxruntime
    timing_s: float  # one model's end-to-end timing
    report_s: float = REPORT_S

    @property
    def final_s(self) -> float:
        """Compile and check the tuned model, time it against the untuned one, report."""
        return self.compile_s + self.check_s + 2 * self.timing_s + self.report_s

    def minimum_s(self, *, baseline: bool, untuned_model: bool) -> float:
        """The fixed phases still to pay: the baseline and the untuned model unless an
        earlier session measured them, and the final phase."""
        start = self.compile_s + self.check_s + self.timing_s if untuned_model else 0.0
        return (self.untuned_s if baseline else 0.0) + start + self.final_s

    def to_dict(self) -> dict[str, float]:
        return {
            "untuned_s": self.untuned_s,
            "compile_s": self.compile_s,
            "check_s": self.check_s,
            "timing_s": self.timing_s,
            "report_s": self.report_s,
            "final_s": self.final_s,
        }


def untuned_latency_s(tasks: Sequence[Task], device_type: str) -> float:
    """A guess of the untuned model's seconds per inference from its FLOPs."""
    return sum(t.weight * t.flops for t in tasks) / UNTUNED_FLOPS.get(
        device_type, UNTUNED_FLOPS["cpu"]
    )


def timing_s(latency_s: float, timing: Timing) -> float:
    """Seconds `time_models` spends on one model of `latency_s`: setting up, a first run to
    size the timings, then as many timings as fit in `timing.max_s`."""
    per_timing = max(latency_s, timing.min_repeat_ms / 1e3)
    return TIMING_BASE_S + latency_s + timing.repeats(per_timing) * per_timing


def forecast_fixed(
    tasks: Sequence[Task],
    *,
    device_type: str,
    device_present: bool,
    timing: Timing,
) -> FixedCosts:
    """The fixed phases of a run of `tasks` on this target, before any of them is timed."""
    latency = untuned_latency_s(tasks, device_type) if device_present else 0.0
    per_task = UNTUNED_TASK_S.get(device_type, UNTUNED_TASK_S["cpu"])
    return FixedCosts(
        untuned_s=UNTUNED_BASE_S + per_task * len(tasks) + UNTUNED_RUNS * latency
        if device_present
        else 0.0,
        compile_s=COMPILE_BASE_S + COMPILE_TASK_S * len(tasks),
        check_s=CHECK_BASE_S + 2 * latency,  # the model, and onnxruntime about as long
        timing_s=timing_s(latency, timing) if device_present else 0.0,
    )


def search_s(*, population: int, genetic_iters: int, cores: int, device_type: str) -> float:
    """A guess of a first round's search and learning seconds, before any round was timed."""
    scale = (population / 512) * (max(1, genetic_iters) / 3)
    base = ROUND_BASE_S.get(device_type, ROUND_BASE_S["cpu"])
    search = SEARCH_S_ON_2_CORES.get(device_type, SEARCH_S_ON_2_CORES["cpu"])
    return base + search * scale * 2 / max(1, cores)


def first_round_s(settings: Settings, *, proposals: int, cores: int, device_type: str) -> float:
    """search_s for the population a first round of `proposals` searches with."""
    from ..search.strategy import population_size

    return search_s(
        population=population_size(settings, proposals),
        genetic_iters=settings.search.genetic_num_iters,
        cores=cores,
        device_type=device_type,
    )


def upfront_first_round_s(
    settings: Settings, *, gpus: int, filtered: bool, device_type: str
) -> float:
    """A first round's search, forecast up front as the run will forecast it before timing
    one (first_round_s for the rounds the settings and `gpus` make, the ledger's margin on
    top): what `upfront_minimum_s` weighs against the fixed phases."""
    from tune_orchestrator.budget import Ledger

    from ..loop import first_proposals
    from ..targets import host_cores

    proposals = first_proposals(settings, gpus=gpus, filtered=filtered)
    return Ledger.FORECAST_MARGIN * first_round_s(
        settings, proposals=proposals, cores=host_cores(), device_type=device_type
    )


def upfront_minimum_s(
    fixed: FixedCosts, *, baseline: bool, untuned_model: bool, first_round: float | None
) -> tuple[float, bool]:
    """Seconds a budget must leave before any work, and whether the first round set them: the
    fixed phases still to pay, or a first round's search (None: a round was timed before a
    resume) with the final phase, whichever is more. Not their sum: each is padded on its own,
    and the sum would refuse an llvm minute on the example model that tunes 21-41 trials."""
    phases = fixed.minimum_s(baseline=baseline, untuned_model=untuned_model)
    if first_round is None or first_round + fixed.final_s <= phases:
        return phases, False
    return first_round + fixed.final_s, True


def baseline_task_s(untuned_s: float, tasks: int) -> float:
    """Seconds one task's default schedule took to build and measure in a baseline that took
    `untuned_s` (0: not measured); the baseline also pays the build workers' start, so never
    more than the guess."""
    if not untuned_s or tasks < 1:
        return CANDIDATE_GUESS_S
    return min(untuned_s / tasks, CANDIDATE_GUESS_S)


def reserve_s(compile_s: float, check_s: float) -> float:
    """Seconds kept back for the final phase once the untuned model took `compile_s` to
    compile and `check_s` to check and time."""
    return RESERVE_FACTOR * compile_s + 2 * check_s + REPORT_S + RESERVE_MARGIN_S
