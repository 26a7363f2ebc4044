"""Driving MetaSchedule's evolutionary search for one task, sized to the round.

TVM's `generate_measure_candidates` rebuilds its state on every call: it replays the best
database records through the postprocessors, samples a fresh random population of
`population_size` (512) schedules, evolves it `genetic_num_iters` (4) times with the cost model
scoring every schedule of every generation, and then marks everything it returns as measured.
Here its two building blocks are called directly (`SampleInitPopulation`,
`EvolveWithCostModel`), so that a round costs what it needs:

- the population is sized to the candidates a round needs (`population_per_candidate`);
- the parents of a round are the task's fastest measured schedules (held in memory, no replay),
  the previous round's proposals, and only as many fresh random samples as are missing; a
  task's first search, with no parents, proposes its fresh samples themselves, ranked;
- every design space whose fastest schedule is close to the best stays in play (spaces.py):
  its fastest are parents, and each round proposes its best-ranked schedule;
- what it proposes and the loop does not measure waits in the proposal pool (pool.py);
- on GPU targets, a schedule whose loop nest already shows it over the GPU's limits is turned
  away before TVM lowers it to find out (gpu_precheck.py);
- with `late_verify`, the evolution runs in a second context whose postprocessors leave
  out VerifyGPUCode, which lowers every schedule it checks: only what the search would
  propose is lowered and checked, best first, until a round's worth passes. Fresh samples
  still pass every check: they are most of what a large convolution's search rejects, and
  the precheck does not catch all of it;
- and what TVM's strategy keeps of its evolutions is let go every `_HELD_MOST` schedules
  (see `_forget`): left alone, it is the one thing a long run's memory grows with.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from typing import Any

from .. import _tvm
from ..config import Settings
from ..model.tasks import Task, measure_candidate, structural_key
from . import spaces
from .gpu_precheck import VERIFY, space_generator

_SAMPLE = "s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation"
_EVOLVE = "s_tir.meta_schedule.SearchStrategyEvolutionarySearchEvolveWithCostModel"
# Searches in a row that find nothing new before a task's space counts as exhausted.
_EMPTY_LIMIT = 3
# With the late check, the evolution ranks this many times a round's candidates: on vggish's
# 512-channel convolution a third of its picks failed VerifyGPUCode (search_cost.py, 11-25).
_RANKED = 3
# With other design spaces in play, the evolution ranks this many times a round's candidates,
# so that each space's best guess is among them (the ranking costs nothing more to search).
_SPACE_RANKED = 4
# A fresh sample this large that drew every schedule in it twice or more shows the task's
# whole design space (`TaskSearch._whole_space`).
_WHOLE_SAMPLED = 32
# A round that cuts a task's best by less than this share did not move it.
_STALL_GAIN = 0.01
# TVM's evolution keeps every schedule it returns, its whole IRModule, for as long as its
# strategy lives (to leave them out of later evolutions): ~50 KB each on a CUDA convolution,
# three a candidate with the late check, 2.5 MB a round of 16 (long_run.py, 11-28). Past this
# many, a task's strategies start afresh; `_seen` still keeps any schedule from being proposed
# twice.
_HELD_MOST = 256


@dataclasses.dataclass
class SearchTimes:
    """Where search time went (seconds). Postprocessing runs inside sampling and mutation (TVM
    applies it to every schedule it makes, in C++), so it is part of those two."""

    sampling: float = 0.0  # fresh random schedules: replay with new decisions, postprocess
    mutation: float = 0.0  # the evolution without scoring: mutate, postprocess, keep the best
    prediction: float = 0.0  # the cost model scoring each generation (features excluded)
    features: float = 0.0  # feature extraction, once per schedule
    searches: int = 0
    proposed: int = 0
    prechecked: int = 0  # schedules the GPU precheck turned away before TVM lowered them
    verify: float = 0.0  # VerifyGPUCode on the evolution's picks (late_verify)
    invalid: int = 0  # picks it rejected, dropped unproposed

    def add(self, other: SearchTimes) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in vars(self).items()}


def population_size(settings: Settings, proposals: int) -> int:
    """The evolution's population for rounds that need `proposals` candidates."""
    s = settings.search
    if s.population:
        return s.population
    return max(s.min_population, min(s.max_population, s.population_per_candidate * proposals))


def most_parents(settings: Settings) -> int:
    """The most measured schedules a task's search keeps as parents, whatever its round: as
    `TaskSearch.learn` keeps them, for the largest population a round can have."""
    largest = population_size(settings, 1 << 30)
    return max(1, int(largest * settings.search.init_measured_ratio))


def evolutionary_search(settings: Settings, population: int) -> Any:
    """MetaSchedule's EvolutionarySearch with the [search] settings."""
    from tvm.s_tir import meta_schedule as ms

    s = settings.search
    return ms.search_strategy.EvolutionarySearch(
        population_size=population,
        init_measured_ratio=s.init_measured_ratio,
        init_min_unmeasured=1,  # how many fresh samples a round needs is decided here
        genetic_num_iters=s.genetic_num_iters,
        genetic_mutate_prob=s.genetic_mutate_prob,
        genetic_max_fail_count=s.genetic_max_fail_count,
        eps_greedy=s.eps_greedy,
    )


class TaskSearch:
    """One task's search: a TuneContext with an EvolutionarySearch, driven round by round."""

    def __init__(
        self,
        task: Task,
        *,
        target: Any,
        settings: Settings,
        database: Any,
        cost_model: Any,
        rand_state: int,
        threads: int,
        proposals: int,
    ) -> None:
        import tvm_ffi
        from tvm.s_tir import meta_schedule as ms

        _tvm.load_tensor_intrinsics(target)
        s = settings.search
        self.population = population_size(settings, proposals)
        self._strategy = evolutionary_search(settings, self.population)
        self.task = task
        space, self._precheck = (
            space_generator(task.workload, target) if s.gpu_precheck else ("post-order-apply", None)
        )
        self.ctx = ms.TuneContext(
            mod=task.workload,
            target=target,
            space_generator=space,
            search_strategy=self._strategy,
            task_name=task.name,
            rand_state=rand_state,
            num_threads=threads,
            logger=_tvm.quiet_logger(),
        )
        self._spaces = self.ctx.generate_design_space()
        # No design space makes a decision: each is one schedule, the whole space.
        self._fixed = not any(len(space.trace.decisions) for space in self._spaces)
        self.ctx.pre_tuning(
            max_trials=1 << 30,
            num_trials_per_iter=proposals,
            design_spaces=self._spaces,
            database=database,
            cost_model=cost_model,
        )
        self._evolution, self._verifiers = self._strategy, []
        if self._precheck is not None and s.late_verify:
            self._evolution, verifier = self._late_verify(
                settings, target, database, cost_model, rand_state, threads, proposals
            )
            self._verifiers = [verifier] + [verifier.clone() for _ in range(threads - 1)]
        self._settings, self._database = settings, database
        # Per population: (the strategy that samples, the one that evolves); see _sized.
        self._by_population = {self.population: (self._strategy, self._evolution)}
        self.workload = database.commit_workload(task.workload)
        self.proposals = proposals
        self.eps_greedy = s.eps_greedy
        self.elite_share = s.init_measured_ratio
        self._model = cost_model
        self._sample = tvm_ffi.get_global_func(_SAMPLE)
        self._evolve = tvm_ffi.get_global_func(_EVOLVE)
        self._start_bookkeeping()

    def _start_bookkeeping(self) -> None:
        """What the search keeps between rounds, empty before the first."""
        self.times = SearchTimes()
        self.last = SearchTimes()  # the last search alone
        self.exhausted = False
        # (seconds, schedule, design space), fastest first
        self._elites: list[tuple[float, Any, int]] = []
        self._recent: list[Any] = []  # the last round's proposals: next round's parents
        self._seen: set[int] = set()  # structural keys of everything proposed
        self.explored: set[int] = set()  # structural keys of the last search's random picks
        self._empty = 0
        self._stalls = 0  # rounds in a row that did not move the best by _STALL_GAIN
        self.restarts = 0
        self.shared: set[int] = set()  # structural keys of schedules its sisters offered
        self.shared_best = 0  # times one of those became the task's best
        self._held = 0  # schedules TVM's evolution strategies hold since they last started
        self.forgotten = 0  # times they were started afresh

    def _late_verify(
        self,
        settings: Settings,
        target: Any,
        database: Any,
        cost_model: Any,
        rand_state: int,
        threads: int,
        proposals: int,
    ) -> tuple[Any, Any]:
        """A strategy that evolves with every postprocessor but VerifyGPUCode, in a context
        of its own (TVM binds a strategy's postprocessors when its context is made); and the
        context's own VerifyGPUCode, set to the target's limits, for the picks."""
        from tvm.s_tir import meta_schedule as ms

        space, _ = space_generator(
            self.task.workload, target, verify=False, counts_with=self._precheck
        )
        strategy = evolutionary_search(settings, self.population)
        ctx = ms.TuneContext(
            mod=self.task.workload,
            target=target,
            space_generator=space,
            search_strategy=strategy,
            task_name=self.task.name,
            rand_state=rand_state + 1 if rand_state >= 0 else rand_state,
            num_threads=threads,
            logger=_tvm.quiet_logger(),
        )
        ctx.pre_tuning(
            max_trials=1 << 30,
            num_trials_per_iter=proposals,
            design_spaces=self._spaces,
            database=database,
            cost_model=cost_model,
        )
        self._evolution_ctx = ctx  # the strategy holds its context by a raw pointer
        verifier = next(p for p in self.ctx.space_generator.postprocs if type(p).__name__ == VERIFY)
        return strategy, verifier

    def propose(self, wanted: int | None = None) -> list[Any]:
        """New candidates (MeasureCandidates), the most promising first, plus a share of
        random ones (eps-greedy); empty when nothing new was found. After a few empty searches
        in a row, when no valid schedule can be sampled at all, or when the whole space is
        proposed at once (`_whole_space`), `exhausted` is set."""
        self.explored = set()
        if self.exhausted:
            return []
        wanted = wanted or self.proposals
        self._sized(population_size(self._settings, wanted))
        parents = self._parents()
        prechecked = self._prechecked()
        start = time.perf_counter()
        fresh, whole = self._fresh(max(self.population - len(parents), 8), wanted)
        sampled = time.perf_counter()
        if not fresh and not parents:  # no valid schedule can be sampled: nothing to search
            self.exhausted = True
            return []
        if whole is not None:  # the sample holds the whole space: no evolution can add to it
            return self._propose_whole(whole, sampled - start, self._prechecked() - prechecked)
        scored_before = self._scoring_times()
        # Unverified, some of the evolution's bests fail the late check: more of them wait.
        ranked = wanted * _RANKED if self._verifiers else wanted
        playing = spaces.in_play(self._elites)
        asked = ranked * _SPACE_RANKED if len(playing) > 1 else ranked
        seen = self._proposed_before()
        if seen is not None:  # the parents come back too
            asked += len(parents)
        bests, ran_evolution = self._bests(parents, fresh, asked, wanted)
        evolved = time.perf_counter()
        scored = {k: v - scored_before.get(k, 0.0) for k, v in self._scoring_times().items()}
        picks, invalid, self.explored = self._picks(
            bests, fresh, playing, wanted, check=ran_evolution
        )
        verified = time.perf_counter()
        prediction, features = scored.get("predict", 0.0), scored.get("features", 0.0)
        mutation = max(0.0, evolved - sampled - prediction - features)
        self.last = SearchTimes(
            sampled - start,
            mutation,
            prediction,
            features,
            1,
            len(picks),
            self._prechecked() - prechecked,
            verified - evolved if self._verifiers else 0.0,
            invalid,
        )
        self.times.add(self.last)
        self._recent = self._news(bests, seen)[:ranked]
        if self._held >= _HELD_MOST:
            self._forget()
        if not picks:
            self._empty += 1
            self.exhausted = self._empty >= _EMPTY_LIMIT
            return []
        self._empty = 0
        return [measure_candidate(s) for s in picks]

    def _propose_whole(self, whole: list[Any], sampling_s: float, prechecked: int) -> list[Any]:
        """The whole design space as the search's last proposals, random picks the filter lets
        through unjudged: no evolution, and the search is exhausted."""
        self.last = SearchTimes(sampling_s, searches=1, proposed=len(whole), prechecked=prechecked)
        self.times.add(self.last)
        self.exhausted, self.explored = True, {structural_key(s.mod) for s in whole}
        self._seen |= self.explored
        return [measure_candidate(s) for s in whole]

    def _fresh(self, count: int, wanted: int) -> tuple[list[Any], list[Any] | None]:
        """`count` fresh random schedules, and `_whole_space` of them; fewer when a first draw
        already shows the whole space (one draw can take a second on a large fused kernel)."""
        first = min(count, 2 * len(self._spaces) if self._fixed else _WHOLE_SAMPLED)
        fresh = list(self._sample(self._strategy, first))
        whole = self._whole_space(fresh, wanted)
        if whole is None and count > first:
            fresh += self._sample(self._strategy, count - first)
            whole = self._whole_space(fresh, wanted)
        return fresh, whole

    def _whole_space(self, fresh: list[Any], wanted: int) -> list[Any] | None:
        """The unproposed schedules of the task's whole design space, when these fresh samples
        show all of it and they fit in one round (None otherwise). An injective kernel's space
        often holds one to five schedules: sampling draws them again and again, and the
        evolution finds nothing new in them, search after search. The samples show all of it
        when no design space makes a decision (`_fixed`) and each was drawn, or when
        `_WHOLE_SAMPLED` or more draws drew no schedule only once: the Good-Turing estimate of
        the share of the space a sample missed is the share of its draws seen once."""
        drawn: dict[int, list[Any]] = {}
        for sch in fresh:
            drawn.setdefault(structural_key(sch.mod), []).append(sch)
            if len(drawn) > wanted + len(self._seen):  # more new schedules than the round takes
                return None
        every = self._fixed and len(drawn) >= len(self._spaces)
        unseen = len(fresh) < _WHOLE_SAMPLED or any(len(same) == 1 for same in drawn.values())
        if not every and unseen:
            return None
        unproposed = [same[0] for key, same in drawn.items() if key not in self._seen]
        return unproposed if len(unproposed) <= wanted else None

    def _bests(
        self, parents: list[Any], fresh: list[Any], asked: int, wanted: int
    ) -> tuple[list[Any], bool]:
        """The search's candidates, the most promising first, and whether the evolution ran
        (its picks then wait for the late check): `asked` of its bests; in a first search
        (nothing measured or proposed to go on from) the fresh samples, ranked (`_ranked`),
        and the evolution's only where they are fewer than `wanted` (most of a GPU
        convolution's fail the checks)."""
        bests = self._ranked(fresh) if not parents and not self._elites else []
        if len({structural_key(sch.mod) for sch in bests}) >= wanted:
            return bests, False
        evolution = list(self._evolve(self._evolution, parents + fresh, asked))
        self._held += len(evolution)
        return bests + evolution, True

    def _ranked(self, fresh: list[Any]) -> list[Any]:
        """A task's first search: its fresh samples, the cost model's best first (at random
        before it is trained). The evolution's bests would be mutants of a few of them: in
        the example model's first rounds of 64, 14-25 of a convolution's candidates were one
        decision from another one scored at random, 43-51 scored by a model trained on other
        tasks. A first round of independent draws sees more of the space, and the evolution
        takes over from its fastest. Fresh samples passed every check already."""
        scores = self._model.predict(self.ctx, [measure_candidate(s) for s in fresh])
        order = sorted(range(len(fresh)), key=lambda i: -float(scores[i]))
        return [fresh[i] for i in order]

    def _proposed_before(self) -> set[int] | None:
        """When TVM's state holds nothing proposed before (it started afresh, or the first
        round came from fresh samples, not from its evolution), the keys of everything
        proposed: its evolution returns them again, the parents first (None otherwise)."""
        return set(self._seen) if self._held == 0 and self._seen else None

    @staticmethod
    def _news(bests: list[Any], seen: set[int] | None) -> list[Any]:
        """The evolution's bests less those proposed before (`seen`): no round's recent
        parents again."""
        if seen is None:
            return bests
        return [sch for sch in bests if structural_key(sch.mod) not in seen]

    def _sized(self, population: int) -> None:
        """Search with a population of `population` from now on: a small round searches a
        small population. TVM fixes a strategy's population when it is made, so each size gets
        its strategies once, bound to this task's contexts."""
        if population not in self._by_population:
            strategies = []
            late = self._evolution is not self._strategy  # the evolution has its own context
            for ctx in [self.ctx, self._evolution_ctx] if late else [self.ctx]:
                strategy = evolutionary_search(self._settings, population)
                strategy._initialize_with_tune_context(ctx)
                strategy.pre_tuning(1 << 30, population, self._spaces, self._database, self._model)
                strategies.append(strategy)
            self._by_population[population] = (strategies[0], strategies[-1])
        self._strategy, self._evolution = self._by_population[population]
        self.population = population

    def _forget(self) -> None:
        """Start TVM's evolution strategies afresh, dropping every schedule their state holds.
        That state also kept the schedules they returned out of their next evolutions; the
        next search asks for as many more as it has parents, which come back first."""
        for _, evolution in self._by_population.values():
            evolution.post_tuning()
            evolution.pre_tuning(1 << 30, self.proposals, self._spaces, self._database, self._model)
        self._held = 0
        self.forgotten += 1

    def _prechecked(self) -> int:
        return sum(self._precheck.rejected.values()) if self._precheck is not None else 0

    def _scoring_times(self) -> dict[str, float]:
        """The cost model's time in this thread so far (TVM's XGBModel does not say)."""
        times = getattr(self._model, "thread_times", None)
        return times() if times is not None else {}

    @property
    def best_s(self) -> float | None:
        """Seconds of the fastest measured schedule the search goes on from (None: none)."""
        return self._elites[0][0] if self._elites else None

    def fastest(self) -> list[tuple[float, Any]]:
        """The fastest measured (seconds, schedule) the search goes on from, fastest first."""
        return [(secs, sch) for secs, sch, _ in self._elites]

    def learn(self, measured: list[tuple[Any, float]]) -> None:
        """Remember the fastest measured schedules (MeasureCandidate, seconds; inf: failed)
        as parents for the next rounds, and whether the round moved the task's best."""
        before = self.best_s
        ranked = self._elites + [
            (secs, mc.sch, spaces.space_of(mc.sch)) for mc, secs in measured if secs < float("inf")
        ]
        ranked.sort(key=lambda e: e[0])
        self._elites = spaces.keep(ranked, most_parents(self._settings))
        if self.best_s is not None and self.best_s != before and self.shared:
            self.shared_best += structural_key(self._elites[0][1].mod) in self.shared
        if before is not None and measured:
            improved = self.best_s is not None and self.best_s < before * (1.0 - _STALL_GAIN)
            self._stalls = 0 if improved else self._stalls + 1

    def _parents(self) -> list[Any]:
        """The evolution's parents: the fastest measured schedules and the last round's
        proposals; after `restart_after` stalled rounds, only the two fastest (the rest of the
        population is fresh random samples: the search starts again)."""
        after = self._settings.search.restart_after
        if after and self._stalls >= after:
            self._stalls = 0
            self.restarts += 1
            return [sch for _, sch, _ in self._elites[:2]]
        elites = spaces.parents(self._elites, int(self.population * self.elite_share))
        return elites + self._recent[: self.population // 2]

    def _picks(
        self, bests: list[Any], fresh: list[Any], playing: list[int], wanted: int, check: bool
    ) -> tuple[list[Any], int, set[int]]:
        """The round's picks (`_with_random`), each other design space in play with one of
        its own first; another space's pick is exploration too, which the filter does not
        veto: it joins the random picks' keys."""
        head = wanted - int(wanted * self.eps_greedy)
        ordered, moved = spaces.every_space_first(
            bests, fresh, playing, head, lambda sch: structural_key(sch.mod) not in self._seen
        )
        picks, invalid, explored = self._with_random(ordered, fresh, wanted, check)
        chosen = {id(sch) for sch in picks}
        explored |= {structural_key(s.mod) for s in ordered[:moved] if id(s) in chosen}
        return picks, invalid, explored

    def _with_random(
        self, bests: list[Any], fresh: list[Any], wanted: int, check: bool
    ) -> tuple[list[Any], int, set[int]]:
        """The evolution's bests, with an `eps_greedy` share of the places given to fresh
        random schedules (exploration the cost model cannot veto); none proposed twice. With
        the late check and `check`, the bests are checked as their turn comes, as many at once
        as places are left, and those that fail are dropped; returns the picks, how many were
        dropped, and the structural keys of the random ones."""
        picks: list[Any] = []
        dropped = 0
        randoms: set[int] = set()

        def take(source: Any, upto: int, verify: bool, random: bool) -> None:
            nonlocal dropped
            while len(picks) < upto:
                batch = []
                for sch in source:
                    key = structural_key(sch.mod)
                    if key not in self._seen:
                        self._seen.add(key)  # picked or failed, it is not proposed again
                        batch.append((sch, key))
                        if len(batch) == upto - len(picks):
                            break
                if not batch:
                    return
                passed = self._verify([sch for sch, _ in batch]) if verify else [True] * len(batch)
                for (sch, key), ok in zip(batch, passed, strict=True):
                    if ok:
                        picks.append(sch)
                        if random:
                            randoms.add(key)
                dropped += passed.count(False)

        ranked = iter(bests)
        take(ranked, wanted - int(wanted * self.eps_greedy), check, False)
        take(iter(fresh), wanted, False, True)
        take(ranked, wanted, check, False)
        return picks, dropped, randoms

    def _verify(self, batch: list[Any]) -> list[bool]:
        """VerifyGPUCode's verdict on each schedule (all pass without the late check), on up to
        one thread per verifier: TVM lowers without holding Python's lock."""
        n = min(len(self._verifiers), len(batch))
        if n == 0:
            return [True] * len(batch)
        if n == 1:
            return [self._verifiers[0].apply(sch) for sch in batch]
        with concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="verify") as pool:
            shares = pool.map(
                lambda i: [self._verifiers[i].apply(sch) for sch in batch[i::n]], range(n)
            )
            passed: list[bool] = [False] * len(batch)
            for i, share in enumerate(shares):
                passed[i::n] = share
        return passed
