"""What a run spends whatever its budget: the untuned baseline, compiling, checking and timing
the model, the report; and what a first round costs before one has been timed.

Forecast before any work from the tasks and the target, so that a budget which cannot cover
the fixed phases is refused up front and the final phase is kept back from the start.
`orchestrate estimate` and the tuning run use the same figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tune_orchestrator.budget.ledger import RoundCost

from ..config import Settings
from ..deploy.timing import Timing
from ..model.tasks import Task

# Fitted to eleven models of 4-138 tasks on the 2-core VM (llvm, znver4, 2026-11-26: a
# 16-trial run of each, benchmarks/results/fixed_phases-before-recalibration-*.json, checked
# by a second run in fixed_phases-vm-2core-2026-11-26.json) and to a lent H200 (cuda, a 4 min
# vggish run). A forecast under spends the baseline and then finds no room to tune; one far
# over (the padded figures before were 1.4-25x what the phases took) refuses budgets that
# would have fitted.
#
# The untuned baseline builds and times each task's default schedule: 0.19 s a task on the
# VM's CPU; 3.07 s a task on the H200 host, where each measuring worker made a CUDA context.
# Its base was 1.7 s, mostly the workers' start; they start before the model's import now, and
# the baseline took 1.2-1.9 s less (fixed_phases-vm-2core-f-2026-11-27.json: 1.4 s on the
# example's 6 tasks, 27.3 s on the DenseNet-like model's 138).
UNTUNED_BASE_S = 0.6
UNTUNED_TASK_S = {"cpu": 0.2, "cuda": 3.0}
# The baseline runs each default kernel about this many times (a first run, three repeats).
UNTUNED_RUNS = 5
# Compiling the model runs the Relax passes over the whole graph, folding each batch
# normalization into its convolution's weights, then generates each task's kernel once. Per
# compile on the VM: 0.23 s, 0.054 s a task, 0.063 s a convolution and 0.27 s a batch
# normalization of the ONNX graph; fitted on two runs of the eleven models
# (fixed_phases-before-recalibration-vm-2core-2026-11-26.json, fixed_phases-vm-2core-2026-11-26.json),
# it forecast a third (fixed_phases-vm-2core-c-2026-11-27.json) within 11% on all eleven, where
# a forecast from what the import took missed by up to 122% (an import of 2.2-3.8 s for the
# same small model). CUDA's kernels take 0.65 s a task (15 tasks, 10.9 s a compile on the H200
# host, 10.8 s on the H100 host).
COMPILE_BASE_S = 0.23
COMPILE_TASK_S = {"cpu": 0.054, "cuda": 0.65}
COMPILE_OP_S = {"Conv": 0.063, "BatchNormalization": 0.27}
# Untuned end-to-end throughput, FLOP/s: TVM's default CPU schedules run on one thread, so
# not scaled by cores (1.3-2.7 GFLOP/s on the CNNs above, 2.0 on the ResNet-18-like model;
# a model of many small or depthwise kernels runs slower than its FLOPs say, which the check's
# per-task term covers); per GPU for cuda. 3 GFLOP/s with the check's terms below is the fit
# of both runs of the eleven models.
UNTUNED_FLOPS = {"cpu": 3e9, "cuda": 20e9}
# Before a baseline was measured, what the first round's candidates are guessed to cost each
# (the baselines above took 0.2-3.1 s a task).
CANDIDATE_GUESS_S = 3.0
# Rendering report.json, report.md, report.html and the plots, and writing them out: 0.8-1.3
# s on the models of up to 71 tasks, 1.1-1.6 s on the DenseNet-like one's 138 (its tables).
REPORT_BASE_S = 0.9
REPORT_TASK_S = 0.003
# What a model's check and a model's timing pay beyond its latency: onnxruntime's session,
# which grows with the graph, and the inputs; the timer's set-up and first call. Two checks and
# three timings took 2.1 s on the smallest models. Fitted with UNTUNED_FLOPS on both runs
# above: every fixed phase within 30% on 10 of the 11 models in each (the MobileNet-V2-like
# one's check, its depthwise kernels slower than their FLOPs say, is 33-44% under).
CHECK_BASE_S = 0.05
CHECK_TASK_S = 0.002
TIMING_BASE_S = 0.3
# A first round's search and learning before one was timed here: what every round pays
# whatever its population (setting the task's search up, learning after it), plus the search
# on 2 host cores at TVM's population of 512 and 3 genetic iterations. A first round is a
# first touch of the smallest size (16 candidates, population 64): on the 2-core VM its wall
# less building and measuring took 1.5-5.1 s (llvm, 13 runs of five models in the transfer
# and vs_vanilla benchmarks, 2026-11-26); cuda (vggish, real builds, timings simulated, first
# rounds of 64 at population 128) 46.4 s on the 2-core VM, 30.6 s of it waiting on the next
# round's search and builds, which a pipelined round prepares while it measures and the
# simulated GPU measured in ~1 s, and 24.3-28.6 s on a 16-core H200 host, where a real 4 min
# run's first round of 42 took 9.8 s. With the forecast's margin on top: a budget is refused
# up front when it cannot pay for this, so a guess far over refuses budgets that would tune.
ROUND_BASE_S = {"cpu": 4.0, "cuda": 30.0}
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
# The search is sized to its round, so a smaller round searches for less (RoundCosts.guessed):
# in a 5 min resnet50ish run (2026-12-06, 28 tasks, 22 first rounds of 10-16) a round's search
# and learning took 0.47-0.78 s, about a quarter of a round of 64's; charged 4.0 s each, the
# first estimate forecast 208-240 trials where runs had 316-337 (docs/benchmarks.md).
ROUND_S_ON_2_CORES, ROUND_S_CANDIDATES = 4.0, 64
CANDIDATE_VS_BASELINE = {"cpu": 0.5, "cuda": 0.1}
ROUND_FIXED_SPLIT = {"search": 0.93, "learn": 0.07}
ROUND_CANDIDATE_SPLIT = {"build": 0.6, "measure": 0.4}
# Once the untuned model is compiled and checked, the run keeps back this multiple of its
# compile time, plus its check and timing twice over (the tuned and the untuned model are
# timed in turn), the report and a margin, for the final phase.
RESERVE_FACTOR, RESERVE_MARGIN_S = 1.5, 2.0
# Once rounds have made the model faster, the tuned model's check and timing are kept at its
# kernels' estimated latency (the sum of its tasks' best times, scaled to the untuned model's
# end-to-end latency) times this: shipped models ran 1.00-1.05x their estimate.
TUNED_LATENCY_MARGIN = 2.0


@dataclasses.dataclass(frozen=True)
class FixedCosts:
    """Seconds of the phases every run pays (a resumed run skips those already done)."""

    untuned_s: float  # every task's default schedule built and measured
    compile_s: float  # one compile of the model
    check_s: float  # one run of the model checked against onnxruntime
    timing_s: float  # one model's end-to-end timing
    report_s: float

    @property
    def final_s(self) -> float:
        """Compile and check the tuned model, time it against the untuned one, report."""
        return self.compile_s + self.check_s + 2 * self.timing_s + self.report_s

    def to_dict(self) -> dict[str, float]:
        return {
            "untuned_s": self.untuned_s,
            "compile_s": self.compile_s,
            "check_s": self.check_s,
            "timing_s": self.timing_s,
            "report_s": self.report_s,
            "final_s": self.final_s,
        }


def report_s(tasks: int) -> float:
    """Seconds to write the report of a model of `tasks` tasks."""
    return REPORT_BASE_S + REPORT_TASK_S * tasks


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
    graph_ops: Mapping[str, int],
) -> FixedCosts:
    """The fixed phases of a run of `tasks` on this target, before any of them is timed;
    `graph_ops`: how many nodes of each op type the ONNX graph has (model.op_counts)."""
    latency = untuned_latency_s(tasks, device_type) if device_present else 0.0
    untuned_task = UNTUNED_TASK_S.get(device_type, UNTUNED_TASK_S["cpu"])
    compile_task = COMPILE_TASK_S.get(device_type, COMPILE_TASK_S["cpu"])
    passes = COMPILE_BASE_S + sum(s * graph_ops.get(op, 0) for op, s in COMPILE_OP_S.items())
    return FixedCosts(
        untuned_s=UNTUNED_BASE_S + untuned_task * len(tasks) + UNTUNED_RUNS * latency
        if device_present
        else 0.0,
        compile_s=passes + compile_task * len(tasks),
        # the model, and onnxruntime about as long
        check_s=CHECK_BASE_S + CHECK_TASK_S * len(tasks) + 2 * latency,
        timing_s=timing_s(latency, timing) if device_present else 0.0,
        report_s=report_s(len(tasks)),
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


def first_round(
    settings: Settings, *, proposals: int, cores: int, device_type: str, per_candidate_s: float
) -> RoundCost:
    """A first round's cost as a run forecasts it before it has timed one, up front and in the
    run alike: the search of the population `proposals` need, and per candidate what a task's
    default schedule took to build and measure in the baseline (baseline_task_s)."""
    search = first_round_s(settings, proposals=proposals, cores=cores, device_type=device_type)
    return RoundCost(search, per_candidate_s, 0)


def smallest_round(settings: Settings) -> int:
    """The fewest candidates a round under a time-like limit may have (BudgetLimits.min_round
    for the run's round size): what a budget accepted up front must pay for."""
    return max(1, settings.tune.trials_per_round // 4)


def upfront_first_round_s(
    settings: Settings,
    *,
    tasks: int,
    untuned_s: float,
    gpus: int,
    filtered: bool,
    device_type: str,
) -> float | None:
    """The first round, forecast up front as the run forecasts it before timing one
    (first_round, at the smallest round size a budget may start, with the ledger's margin, as
    Ledger.forecast_round gives it, each candidate costing what a default schedule took in a
    baseline of `untuned_s` over `tasks`): what `upfront_minimum_s` adds to the fixed phases.
    None for a model with no task: it has no first round."""
    from tune_orchestrator.budget import Ledger

    from ..host import host_cores
    from ..run.loop import first_proposals

    if tasks < 1:
        return None
    cost = first_round(
        settings,
        proposals=first_proposals(settings, gpus=gpus, filtered=filtered),
        cores=host_cores(),
        device_type=device_type,
        per_candidate_s=baseline_task_s(untuned_s, tasks),
    )
    size = smallest_round(settings)
    return Ledger.FORECAST_MARGIN * (cost.fixed_s + cost.per_candidate_s * size)


def upfront_minimum_s(
    fixed: FixedCosts, *, baseline: bool, untuned_model: bool, first_round: float | None
) -> float:
    """Seconds a budget must leave before any work: the fixed phases still to pay before
    tuning (the baseline and the untuned model unless an earlier session measured them), then
    a first round's search and what the run keeps back for the final phase while it tunes (the
    run decides its rounds against the same figures, so a budget under their sum spends the
    fixed phases and tunes nothing); or, for a resumed run with nothing more to search (None),
    the final phase."""
    start = fixed.untuned_s if baseline else 0.0
    if untuned_model:
        start += fixed.compile_s + fixed.check_s + fixed.timing_s
    if first_round is None:
        return start + fixed.final_s
    return (
        start
        + first_round
        + reserve_s(fixed.compile_s, fixed.check_s + fixed.timing_s, fixed.report_s)
    )


def baseline_task_s(untuned_s: float, tasks: int) -> float:
    """Seconds one task's default schedule took to build and measure in a baseline that took
    `untuned_s` (0: not measured); the baseline also pays the build workers' start, so never
    more than the guess."""
    if not untuned_s or tasks < 1:
        return CANDIDATE_GUESS_S
    return min(untuned_s / tasks, CANDIDATE_GUESS_S)


def reserve_s(compile_s: float, check_s: float, report: float) -> float:
    """Seconds kept back for the final phase once the untuned model took `compile_s` to
    compile and `check_s` to check and time, and the report is expected to take `report`."""
    return RESERVE_FACTOR * compile_s + 2 * check_s + report + RESERVE_MARGIN_S


@dataclasses.dataclass(frozen=True)
class FinalReserve:
    """What a run keeps back for its final phase once the untuned model was compiled, checked
    and timed here, as tuning makes the model faster. reserve_s keeps the untuned model's
    check and timing twice, as if the tuned model were as slow; at the end the untuned model
    is timed again as before, but the tuned one is checked and timed at its own latency (on a
    ResNet-50 on 2 cores: 36 s of checking and timing the untuned model, 25 s for both at the
    end). Never more than reserve_s."""

    compile_s: float  # the untuned model's compile
    check_s: float  # its check and timing
    latency_s: float  # its end-to-end seconds per inference
    kernels_s: float  # its kernels' seconds, as the run estimates them (the curve's start)
    report_s: float
    timing: Timing

    def at(self, kernels_s: float) -> float:
        """Seconds kept back once the run estimates the model's kernels at `kernels_s`."""
        faster = min(1.0, kernels_s / self.kernels_s) if self.kernels_s > 0 else 1.0  # no kernels
        tuned_s = self.latency_s * faster
        # The untuned model timed again, and the tuned one checked (on the samples it ran
        # the untuned one on, onnxruntime's outputs kept): no longer than the untuned's
        # check and timing; then the tuned model timed.
        final = self.check_s + timing_s(TUNED_LATENCY_MARGIN * tuned_s, self.timing)
        return min(
            reserve_s(self.compile_s, self.check_s, self.report_s),
            RESERVE_FACTOR * self.compile_s + final + self.report_s + RESERVE_MARGIN_S,
        )
