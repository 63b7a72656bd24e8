"""One slice of a fuzzing budget, per strategy: run it for a while and say what it found.

Strategies: ``contract`` (one fixed sequential program of misuse: see ``_contract``), ``pct``
and ``random`` (controlled scenarios: threads under the baton, async pools on the controlled
loop, or seeded trio), ``machine`` (the Hypothesis state machine: sequential rules, misuse,
double release and concurrent batches on real threads or a real loop) and ``stress``
(free-running threads or tasks, with noise). A slice is seeded, so a finding carries what
replays it.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as seed_machine
from hypothesis.database import ExampleDatabase, InMemoryExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from kvstress import _flight
from kvstress._violation import BlockRecord, InvariantViolation, Operation
from kvstress.fuzz._contract import ladder, run_contract, run_history
from kvstress.fuzz._target import FuzzTarget, builds_at, machine_for
from kvstress.machines import PoolMachine
from kvstress.machines._program import shortened
from kvstress.scenarios import ScenarioConfig, search, stress
from kvstress.scenarios._execution import has_member
from kvstress.scenarios._motifs import churn, motifs
from kvstress.scenarios._search import ScenarioFailure, SearchResult
from kvstress.scenarios._switches import Switch
from kvstress.scenarios._table import interleaving_table
from kvstress.schedulers import DelayBoundedScheduler, PCTScheduler, RandomScheduler

STRATEGIES = ("contract", "delay", "pct", "random", "machine", "stress", "history")
SHORT_STRESS_S = 0.5
"""A stress slice shorter than this runs only the motifs: one drawn scenario waits out its
timeouts for longer than the whole slice."""
DELAY_BOUND = 2  # delays per interleaving of a motif
DELAY_FIRST = 4
"""Executions per motif in the delay strategy's opening round: each motif's first plans, hot or
cold, before any motif's hot round (a race that needs one cold delay, at a time jump, falls to
it in the first second)."""
DELAY_HOT_FIRST = 16
"""Executions per motif in the first pass of the delay strategy's hot round (hot plans only, a
delay inside a just-woken task's run first): a hand-off race in the last motifs does not wait
for every earlier motif's whole hot round."""
DELAY_HOT_CAP = 64
"""Executions per motif in the delay strategy's hot round, both passes, which run hot plans only."""
OPENING_GRACE_S = 4.0
"""The most wall seconds the fuzz loop lets a slice run past its length to finish the delay
strategy's opening round (see ``run_slice``'s ``grace_s``): its few dozen executions take 0.3 s
here and 2.5 s on a machine three times slower and loaded, and a race the opening finds must not
wait a whole cycle of the mix there (CI missed the timed-out notify so, at 15 executions/s)."""
DELAY_CAP = 16
"""Executions per motif in the delay strategy's first round after the hot one; each later round
doubles it."""
MOTIF_EVERY = 4
"""In the ``random`` strategy, one execution in this many runs a motif (the rest run drawn
scenarios)."""
_HOT_ROUNDS = (1, 2)  # the two passes that run hot plans only; round 0 is the opening
PCT_DEPTH = 3  # change points of PCT on drawn scenarios
CHURN_DEPTH = 5
"""PCT's depth on the churn motif, which its slices after the lead give every other execution:
a race that needs a take paused across another worker's whole tenancy and its next take (a
fill counter kept after a next-fit scan missed, mallocMC PR #61) needs four or five preemptions
of a two-worker program some fifty steps long. Measured on that rebuild, executions to the find
on seeds 0-4: depth 3 found 2 of 5 within 800, depth 4 5 of 5 (28-645), depth 5 5 of 5
(112-512); the drawn scenarios, the other strategies and the free-running stress missed it for
30 s."""
MACHINE_HANG_BOUND = 1.0  # seconds; a hung pool costs this per hang, and shrinking replays it
MACHINE_EXAMPLES = 10  # examples per Hypothesis run within a slice
MACHINE_SHRINK_CAP_S = 10.0
"""The most wall seconds shrinking one machine finding may take, whatever budget is left: each
shrink step replays the example on a real loop or real threads, a hang at its full bound."""


AT_THE_CHECK = "as the failing check ran (the driver reads them the moment a check fails)"

_Runner = Callable[["FuzzTarget", int, float, "float | None"], "SliceResult"]
"""One strategy's slice: (target, seed, budget_s, shrink_s) -> what it ran and found."""


@dataclass(frozen=True)
class Finding:
    """A violation and everything a report needs from the slice that found it."""

    violation: InvariantViolation
    strategy: str
    seed: int
    elapsed_s: float  # within the slice
    kind: str  # "scenario", "stress" or "machine": how to replay it
    schedule: str | None = None
    history: tuple[Operation, ...] = ()
    blocks: tuple[BlockRecord, ...] = ()
    failed_op: int | None = None
    scenario: Any = None
    table: str | None = None
    program: str | None = None
    reproduction: dict[str, int] | None = None
    switches: tuple[Switch, ...] | None = None  # where each worker was paused (controlled runs)
    blocks_at: str | None = None  # the moment ``blocks`` show
    options: dict[str, Any] = field(default_factory=dict)  # what replay needs beyond the seed
    num_blocks: int | None = None  # the pool's size, where not the slice's (the history's ladder)


@dataclass
class SliceResult:
    """Executions and operations the slice ran, and its finding if any."""

    executions: int = 0
    operations: int = 0
    finding: Finding | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    exhausted: bool = False  # the strategy has nothing left to run in this fuzzing run

    def took(self, found: SearchResult, strategy: str, seed: int, began: float, **options: Any) -> bool:
        """Count a search's executions into the slice's; True, with its finding kept, when it
        failed (``began``: when, into the slice, it started; shrinking is not counted)."""
        self.executions += found.executions
        self.operations += found.operations
        if found.failure is None:
            return False
        self.finding = scenario_finding(found.failure, strategy, seed, began + found.elapsed_s, **options)
        return True


def scenario_config(target: FuzzTarget) -> ScenarioConfig:
    """The controlled-scenario configuration for ``target``."""
    return ScenarioConfig(
        target.factory,
        target.is_async,
        num_blocks=target.num_blocks,
        block_shape=target.block_shape,
        backend=target.backend,
        modules=(target.factory, *target.pool_modules),
    )


def run_slice(
    strategy: str,
    target: FuzzTarget,
    seed: int,
    budget_s: float,
    shrink_s: float | None = None,
    memo: dict[str, Any] | None = None,
    grace_s: float = 0.0,
) -> SliceResult:
    """Run ``strategy`` on ``target`` for about ``budget_s`` wall seconds.

    ``shrink_s`` caps the wall seconds the state machine may spend shrinking a finding into a
    short program (default: what is left of ``budget_s``; at least one second, at most
    ``MACHINE_SHRINK_CAP_S``). A fuzz run stops at its first finding, so it gives what is left of
    its whole budget: a report's program is then much shorter (31 steps against 9, measured on
    AsyncShieldedReleaseYieldPool). The controlled strategies shrink a schedule within their own
    cap, and stress does not shrink.

    ``memo`` carries a strategy's progress from one slice to the next of the same run (the
    delay strategy's searches go on where they stopped); without it each slice starts afresh.
    ``grace_s`` is how long the slice may run past ``budget_s`` to finish the delay strategy's
    opening round, which is cut only on a machine too slow to run it within the slice.
    """
    if strategy == "delay":
        return _delay(target, seed, budget_s, {} if memo is None else memo, grace_s)
    if strategy == "random":
        return _random(target, seed, budget_s, memo)
    if strategy == "pct":
        if steered_by_seed(target) and memo is not None and "pct-churn" in memo:
            return _random(target, seed, budget_s, memo)  # past its lead: see steered_by_seed
        return _pct(target, seed, budget_s, memo)
    if strategy == "history":
        return _history(target, seed, budget_s, memo)
    runner = _RUNNERS.get(strategy)
    if runner is None:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return runner(target, seed, budget_s, shrink_s)


def steered_by_seed(target: FuzzTarget) -> bool:
    """A trio pool's runs are seeded, not steered: a scheduler gives each one a seed for trio's
    own batch orders, and has no choice at its steps. PCT's priorities and change points then
    come to nothing, and its slices after the lead run as ``random``'s (drawn scenarios and,
    every few, a motif): a blind tester's rebuilt anyio #1075 on trio (a notify taken by a
    waiter being cancelled, another waiting) fell to random's motifs in 0.8-1.9 s and was missed
    in 20 s on two of three seeds by the default mix, whose PCT slices ran drawn scenarios
    alone. The lead stays drawn scenarios only: the shallow races of the corpus's trio mutants
    fall to it in 0.01-0.1 s, where a motif pass first took them to 0.04-0.4 s."""
    return target.is_async and target.backend == "trio"


@dataclass
class _MotifTurn:
    """Which motif a controlled strategy runs next, carried from one of its slices to the next."""

    programs: tuple[Any, ...]
    next: int = 0
    passes: int = 0  # whole passes over the motifs so far


def _random(target: FuzzTarget, seed: int, budget_s: float, memo: dict[str, Any] | None) -> SliceResult:
    """``random`` for about ``budget_s``: the motifs once each, back to back, at the start of
    the strategy's first slice in the run; then drawn scenarios, and every ``MOTIF_EVERY``-th
    execution a motif, in turn. A drawn scenario lines two calls up on one block now and then; a
    motif does it every time, and a few random schedules of one are the short test a developer
    runs against a pool (two releases of a shared block race at once under most of them). Each
    motif has its own scheduler, seeded from the slice's, and the drawn search's schedules do
    not depend on the motifs'. PCT runs drawn scenarios only: its lead slice finds the shallow
    races of a drawn scenario in its first tenth of a second, and a motif pass there, measured,
    cost those seconds."""
    config = scenario_config(target)
    memo = {} if memo is None else memo
    turn = memo.get("random-motifs")
    if not isinstance(turn, _MotifTurn):
        turn = memo["random-motifs"] = _MotifTurn(target_motifs(target))
    drawn = RandomScheduler(seed=seed)
    per_motif: dict[int, RandomScheduler] = {}
    start = time.monotonic()
    result = SliceResult()
    while (left := budget_s - (time.monotonic() - start)) > 0:
        at, turn.next = turn.next, (turn.next + 1) % len(turn.programs)
        first_pass = turn.passes == 0
        turn.passes += turn.next == 0
        scheduler = per_motif.get(at) or per_motif.setdefault(at, RandomScheduler(seed=_motif_seed(seed, at)))
        began = time.monotonic() - start
        # A schedule is shrunk within search's own cap (SHRINK_BUDGET_S).
        motif = replace(config, scenario=turn.programs[at])
        found = search(motif, scheduler, max_executions=1, budget_s=left)
        if result.took(found, "random", seed, began, fixed_scenario=True):
            return result
        left = budget_s - (time.monotonic() - start)
        if first_pass or left <= 0:
            continue  # the first pass runs the motifs back to back
        began = time.monotonic() - start
        found = search(config, drawn, max_executions=MOTIF_EVERY - 1, budget_s=left)
        if result.took(found, "random", seed, began):
            return result
    return result


def _pct(target: FuzzTarget, seed: int, budget_s: float, memo: dict[str, Any] | None) -> SliceResult:
    """PCT (depth ``PCT_DEPTH``) over drawn scenarios for about ``budget_s``. Its first slice in
    a run (the mix's lead) runs only those: the shallow races of a drawn scenario fall to it in
    its first tenth of a second. Each later slice gives every other execution to the churn motif
    under a deeper PCT (``CHURN_DEPTH``; one scheduler for the run, so its step count carries
    over): a race needing four or five preemptions of two workers has room there."""
    config = scenario_config(target)
    drawn = PCTScheduler(depth=PCT_DEPTH, seed=seed)
    memo = {} if memo is None else memo
    deep = memo.get("pct-churn")
    start = time.monotonic()
    result = SliceResult()
    if not isinstance(deep, PCTScheduler):
        memo["pct-churn"] = PCTScheduler(depth=CHURN_DEPTH, seed=_motif_seed(seed, 0))
        result.took(search(config, drawn, budget_s=budget_s), "pct", seed, 0.0)
        return result
    churned = replace(config, scenario=churn(target.num_blocks))
    for scenario, scheduler, options in itertools.cycle(
        ((config, drawn, {}), (churned, deep, {"fixed_scenario": True}))
    ):
        left = budget_s - (time.monotonic() - start)
        if left <= 0:
            break
        began = time.monotonic() - start
        # A schedule is shrunk within search's own cap (SHRINK_BUDGET_S).
        if result.took(
            search(scenario, scheduler, max_executions=1, budget_s=left), "pct", seed, began, **options
        ):
            break
    return result


def target_motifs(target: FuzzTarget, *, virtual: bool = True) -> tuple[Any, ...]:
    """The motifs for ``target``'s pool: its size and flavour, and the batch calls it has."""
    return motifs(
        target.num_blocks,
        target.is_async,
        virtual=virtual,
        batch=has_member(target.factory, "acquire_many"),
        release_batch=has_member(target.factory, "release_many"),
    )


def _motif_seed(seed: int, motif: int) -> int:
    """The seed of motif ``motif``'s scheduler in a slice seeded ``seed``: apart from it and from
    the other motifs'."""
    return (seed * 1_000_003 + 7_919 * (motif + 1)) % (1 << 63)


def scenario_finding(
    failure: ScenarioFailure, strategy: str, seed: int, elapsed_s: float, **options: Any
) -> Finding:
    """A controlled scenario's failure as a finding; ``options`` go to the report's config."""
    return Finding(
        failure.violation,
        strategy,
        seed,
        elapsed_s,
        "scenario",
        schedule=str(failure.schedule),
        history=failure.history,
        blocks=failure.blocks,
        failed_op=failure.failed_op,
        scenario=failure.scenario.to_json(),
        table=failure.table(),
        switches=failure.switch_points,
        blocks_at=failure.blocks_at or None,
        options=options,
    )


@dataclass
class _MotifSearch:
    """The delay strategy's progress in one run: a search per motif, and the round."""

    searches: list[tuple[ScenarioConfig, DelayBoundedScheduler]]
    round: int = 0
    next: int = 0  # the motif the next slice starts with


def _delay(
    target: FuzzTarget, seed: int, budget_s: float, memo: dict[str, Any], grace_s: float
) -> SliceResult:
    """Delay-bounded search over the motifs, round-robin, going on where the previous slice of
    the run left it. The opening round runs each motif's first ``DELAY_FIRST`` plans; the hot
    round its one-delay hot plans (a switch at a hinted decision: a lost-update or
    check-then-act window), in two passes over the motifs (``DELAY_HOT_FIRST`` runs each, then
    up to ``DELAY_HOT_CAP`` in all), or, for a motif without hints (async pools give none), its
    next ``DELAY_CAP`` plans; the slice that runs them ends with them (into the grace);
    then each round gives every motif twice the executions of the last, from ``DELAY_CAP``.
    Once every motif is exhausted (every interleaving with up to ``DELAY_BOUND`` delays has
    run), a slice returns at once."""
    state = memo.get("delay")
    if not isinstance(state, _MotifSearch):
        base = scenario_config(target)
        programs = target_motifs(target)
        # In their order, smallest first (fewest hot plans before the next motif's): nothing
        # here is random, so the seed does not enter.
        # The woken-first base too: the baton and the controlled loop say who was woken.
        searches = [
            (replace(base, scenario=m), DelayBoundedScheduler(DELAY_BOUND, woken_first=True))
            for m in programs
        ]
        state = memo["delay"] = _MotifSearch(searches)
    start = time.monotonic()
    result = SliceResult()
    # A slice that starts the opening or the hot round ends with the hot round: they are cheap.
    first_rounds = state.round <= _HOT_ROUNDS[-1]
    while state.searches:
        # The opening and hot rounds may run into the grace; the rest ends with the slice's length.
        left = budget_s + (grace_s if first_rounds else 0.0) - (time.monotonic() - start)
        if left <= 0 or (first_rounds and state.round > _HOT_ROUNDS[-1]):
            break
        config, scheduler = state.searches[state.next]
        hot_only = state.round in _HOT_ROUNDS
        scheduler.max_cold, scheduler.max_delays = (0, 1) if hot_only else (None, None)
        cap = (
            (DELAY_FIRST, DELAY_HOT_FIRST, DELAY_HOT_CAP - DELAY_HOT_FIRST)[state.round]
            if first_rounds
            else DELAY_CAP << min(state.round - 3, 16)
        )
        began = time.monotonic() - start
        found = search(config, scheduler, max_executions=cap, budget_s=left)
        no_hints = found.failure is None and found.executions <= 1 and not scheduler.exhausted
        if state.round == _HOT_ROUNDS[0] and no_hints:
            # No hint in this motif (none on the controlled loop, none in code without a
            # lost-update window): its first cold plans come now, not a whole cycle later.
            result.executions += found.executions
            result.operations += found.operations
            scheduler.max_cold = scheduler.max_delays = None
            left = budget_s - (time.monotonic() - start)
            began = time.monotonic() - start
            found = search(config, scheduler, max_executions=DELAY_CAP, budget_s=max(left, 1e-3))
        if result.took(found, "delay", seed, began, fixed_scenario=True):
            return result
        if scheduler.exhausted:
            del state.searches[state.next]
        else:
            state.next += 1
        if state.next >= len(state.searches):
            state.next, state.round = 0, state.round + 1
    result.exhausted = not state.searches
    return result


def _stress(target: FuzzTarget, seed: int, budget_s: float, shrink_s: float | None) -> SliceResult:
    # Free-running failures are not shrunk: shrink_s does not apply.
    # Re-runs that measure the reproduction rate share the slice's budget (at least one second):
    # a hang costs its whole bound per re-run, and the fuzzing budget is the user's.
    result = stress(
        scenario_config(target),
        seed=seed,
        budget_s=budget_s,
        replays=5,
        replay_budget_s=max(1.0, budget_s),
        fixed=target_motifs(target, virtual=False),
        fixed_only=budget_s < SHORT_STRESS_S,
    )
    failure = result.failure
    if failure is None:
        return SliceResult(result.executions, result.operations)
    finding = Finding(
        failure.violation,
        "stress",
        failure.seed,
        result.elapsed_s,
        "stress",
        history=failure.history,
        blocks=failure.blocks,
        scenario=failure.scenario.to_json(),
        # The history on the real clock, in the order calls returned: how the free-running
        # threads or tasks met (a report printed none of it).
        table=interleaving_table(failure.history, failure.scenario.workers, failure.failed_op),
        reproduction={"reproduced": failure.reproduced, "replays": failure.replays},
        failed_op=failure.failed_op,
        blocks_at="when the run ended (free-running: the other threads did not stop at the check)",
        options={"fixed_scenario": True} if failure.fixed else {},
    )
    return SliceResult(result.executions, result.operations, finding)


def machine_settings(database: ExampleDatabase | None = None, phases: tuple[Phase, ...] = ()) -> settings:
    """Hypothesis settings for a fuzzing slice: seeded from outside, no deadline.

    ``database`` keeps the best failing example found so far, so that a shrink cut short by its
    budget still leaves a program to report; ``phases`` defaults to generate and shrink.
    """
    return settings(
        max_examples=MACHINE_EXAMPLES,
        stateful_step_count=30,
        deadline=None,
        derandomize=False,
        database=database,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        phases=list(phases or (Phase.generate, Phase.shrink)),
    )


class _ShrinkBudgetSpent(KeyboardInterrupt):
    """Raised by the machine once shrinking has had its time, and caught by ``run_machine``.

    Hypothesis ends a run on ``KeyboardInterrupt`` at once, recording nothing about the example
    it interrupts; any other exception would be taken for a failure (and shrunk too) or for
    flaky data generation. What was shrunk so far stays in the run's example database. A real
    Ctrl-C is a plain ``KeyboardInterrupt``, not this class, so it still ends the harness.
    """


class _SearchBudgetSpent(KeyboardInterrupt):
    """Raised by the machine at the start of an example once the search has had its time with
    nothing found, and caught by ``run_machine`` (see ``_ShrinkBudgetSpent`` for the class)."""


@dataclass
class _MachineClock:
    """Until when the search may start examples, when it found its violation, and how long
    shrinking may take after that."""

    shrink_s: float
    search_until: float = math.inf
    found_at: float | None = None

    def found(self) -> None:
        if self.found_at is None:
            self.found_at = time.monotonic()

    def check(self) -> None:
        if self.found_at is None:
            if time.monotonic() > self.search_until:
                raise _SearchBudgetSpent
        elif time.monotonic() - self.found_at > self.shrink_s:
            raise _ShrinkBudgetSpent


@dataclass
class MachineCounts:
    """The examples a machine run started, and the operations they made, for progress."""

    examples: int = 0
    operations: int = 0


def _timed(
    machine: type[PoolMachine], clock: _MachineClock, seed: int, counts: MachineCounts | None = None
) -> type[PoolMachine]:
    """``machine`` seeded by ``seed`` (Hypothesis' public ``@seed``) and cut off by ``clock``;
    ``counts`` counts its examples and their operations."""

    class Timed(machine):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            clock.check()  # every example after the first violation is a shrink step
            _flight.execution_started()
            if counts is not None:
                counts.examples += 1
            super().__init__()

        def teardown(self) -> None:
            if counts is not None:
                counts.operations += len(self.driver.history.snapshot())
            super().teardown()

        def _do(self, step: Callable[[], Any]) -> Any:
            result = super()._do(step)
            if self.violation is not None:
                clock.found()
            return result

    Timed.__name__ = Timed.__qualname__ = machine.__name__  # the program reads "state = XMachine()"
    return seed_machine(seed)(Timed)


def run_machine(
    target: FuzzTarget,
    seed: int,
    shrink_s: float = 5.0,
    batches: bool = True,
    search_ended: list[float] | None = None,
    counts: MachineCounts | None = None,
    search_s: float = math.inf,
    shrink: bool = True,
) -> InvariantViolation | None:
    """One seeded Hypothesis run of the state machine; the violation it ends with, if any.

    No example starts past ``search_s`` wall seconds (a run's ten examples take seconds of real
    time, and a fuzzing budget is the user's); ``None`` then, as for a run that found nothing.
    ``shrink=False`` (a replay, which only asks whether the violation recurs) skips shrinking.

    Shrinking is capped at ``shrink_s`` wall seconds (Hypothesis' own cap is 300 s, and every
    shrink step of a concurrency bug replays real threads), so a slice keeps to its budget: past
    the cap the machine stops Hypothesis, and the smallest failing example found so far is
    replayed from the run's example database to report it. ``search_ended`` gets the monotonic
    time at which the violation was found: the time to detect, as the controlled strategies
    count it, excludes shrinking.
    """
    machine = machine_for(target, MACHINE_HANG_BOUND, batches)
    clock = _MachineClock(shrink_s, time.monotonic() + search_s)
    found = _hypothesis_run(machine, clock, seed, counts, shrink, search_ended)
    if found is None or not shrink:
        return found
    return shortened(machine, found, SHORTEN_CAP_S, time.monotonic)


SHORTEN_CAP_S = 3.0
"""Wall seconds spent cutting steps out of a machine finding's program once Hypothesis has shrunk
it (``shortened``): each try runs the program twice, milliseconds for sequential steps."""


def _hypothesis_run(
    machine: type[PoolMachine],
    clock: _MachineClock,
    seed: int,
    counts: MachineCounts | None,
    shrink: bool,
    search_ended: list[float] | None,
) -> InvariantViolation | None:
    """``run_machine``'s Hypothesis run, cut off by ``clock``."""
    timed = _timed(machine, clock, seed, counts)
    database = InMemoryExampleDatabase()
    try:
        try:
            phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
            return _run_as_test(timed, machine_settings(database, phases))
        except _SearchBudgetSpent:
            return None
        except _ShrinkBudgetSpent:
            # Replay the smallest failure kept so far; it may not recur (a race), and then the
            # search found nothing that replays.
            clock.shrink_s = math.inf
            return _run_as_test(timed, machine_settings(database, (Phase.reuse,)))
        except Flaky:
            # The pool's answers on real threads steered the draws, and Hypothesis could not
            # run an example the same way twice (FlakyStrategyDefinition, a loaded CI machine):
            # no verdict from Hypothesis, and no crash of the run. A failure found first is
            # replayed from the examples kept, as after the shrink cap; else nothing was found.
            if clock.found_at is None:
                return None
            clock.shrink_s = math.inf
            try:
                return _run_as_test(timed, machine_settings(database, (Phase.reuse,)))
            except Flaky:
                return None
        except KeyboardInterrupt:
            if clock.found_at is None:
                raise
            # Ctrl-C while shrinking: the failure found is reported as far as it was shrunk,
            # not lost (a blind tester's interrupted run wrote no report for a found bug).
            clock.shrink_s = math.inf
            found = _run_as_test(timed, machine_settings(database, (Phase.reuse,)))
            if found is None:
                raise
            return found
    finally:
        if search_ended is not None and clock.found_at is not None:
            search_ended.append(clock.found_at)


def _run_as_test(machine: type[PoolMachine], hypothesis_settings: settings) -> InvariantViolation | None:
    try:
        run_state_machine_as_test(machine, settings=hypothesis_settings)
    except InvariantViolation as violation:
        return violation
    except BaseExceptionGroup as group:  # a flaky failure: it did not recur on replay
        matched: BaseException | None = group.split(InvariantViolation)[0]
        while isinstance(matched, BaseExceptionGroup):
            matched = matched.exceptions[0]
        if isinstance(matched, InvariantViolation):
            return matched
        raise
    return None


def machine_program(violation: BaseException) -> str | None:
    """The program Hypothesis attached to ``violation``: ``state = ...`` to ``state.teardown()``.

    Hypothesis heads it with a line of its own ("Falsifying example:", or "Failing test case:
    <state machine>" in later releases) and may follow it with hints; both are dropped.
    """
    lines = "\n".join(getattr(violation, "__notes__", [])).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("state = ")), None)
    if start is None:
        return None
    end = next((i for i in range(start, len(lines)) if lines[i] == "state.teardown()"), len(lines) - 1)
    return "\n".join(lines[start : end + 1])


def _machine(target: FuzzTarget, seed: int, budget_s: float, shrink_s: float | None) -> SliceResult:
    start = time.monotonic()
    # What is left of the whole budget: a run may go on past its slice (cutting each slice's run
    # short would keep the machine to Hypothesis' first, smallest examples), never past that.
    shrink_total = budget_s if shrink_s is None else shrink_s
    result = SliceResult()
    run = 0
    while run == 0 or time.monotonic() - start < budget_s:
        run_seed = seed + run
        # Runs alternate: the sequential contract alone (quick examples: misuse, double
        # release, timeouts), then with concurrent batches on real threads (slow examples).
        batches = run % 2 == 1
        shrink_left = min(MACHINE_SHRINK_CAP_S, max(1.0, shrink_total - (time.monotonic() - start)))
        ended: list[float] = []
        counts = MachineCounts()
        violation = run_machine(
            target,
            run_seed,
            shrink_s=shrink_left,
            batches=batches,
            search_ended=ended,
            counts=counts,
            search_s=shrink_total - (time.monotonic() - start),
        )
        run += 1
        result.executions += counts.examples
        result.operations += counts.operations
        if violation is not None:
            found_at = (ended[0] if ended else time.monotonic()) - start
            result.finding = Finding(
                violation,
                "machine",
                run_seed,
                found_at,
                "machine",
                history=violation.history,
                blocks=violation.blocks,
                program=machine_program(violation) or violation.program,
                table=_history_table(violation.history),
                options={"batches": batches},
                blocks_at=AT_THE_CHECK,
            )
            return result
    return result


def _history_table(history: tuple[Operation, ...]) -> str | None:
    """A run's history as the interleaving table, one column per caller in order of first call
    (the state machine's runs are not scheduled: the table is the order calls returned)."""
    if not history:
        return None
    workers = list(dict.fromkeys(op.worker for op in history if op.worker != "harness"))
    return interleaving_table(history, workers)


def _contract(target: FuzzTarget, seed: int, budget_s: float, shrink_s: float | None) -> SliceResult:
    return _fixed(target, seed, "contract", run_contract)


def _history(target: FuzzTarget, seed: int, budget_s: float, memo: dict[str, Any] | None) -> SliceResult:
    """The long history on ``target``'s pool, the first time; then, in that slice while
    ``budget_s`` lasts and in each later one (``memo``: the steps left), the steps of its ladder
    (``kvstress.fuzz._contract.ladder``) on the sizes the factory builds: the contract on every
    size, smallest first, then the long history on each (a later slice runs one step at least).
    The contracts come first, being quick: a bitmap that loses its last word at 64 blocks fails
    the first try-once there, and waited behind the long histories of four smaller sizes (a
    blind user's, missed at ``--budget 10`` on a loaded machine). A finding names the size it
    came at; the slice is exhausted once the ladder is."""
    memo = {} if memo is None else memo
    start = time.monotonic()
    if "history-ladder" in memo:
        result, ran = SliceResult(), False
    else:
        sizes = ladder(target)
        memo["history-ladder"] = [(size, step) for step in ("contract", "history") for size in sizes]
        memo["history-builds"] = {}
        result, ran = _fixed(target, seed, "history", run_history), True
    steps: list[tuple[int, str]] = memo["history-ladder"]
    builds: dict[int, bool] = memo["history-builds"]
    while result.finding is None and steps and (not ran or time.monotonic() - start < budget_s):
        size, strategy = steps.pop(0)
        if size not in builds:
            builds[size] = builds_at(target, size)
        if not builds[size]:
            continue  # a pool that refuses the size (or ignores it) keeps to its own: no finding
        ran = True
        runner = run_contract if strategy == "contract" else run_history
        more = _fixed(replace(target, num_blocks=size), seed, strategy, runner, start)
        result.executions += more.executions
        result.operations += more.operations
        if more.finding is not None:
            result.finding = replace(more.finding, num_blocks=size)
    result.exhausted = not steps
    return result


def _fixed(
    target: FuzzTarget,
    seed: int,
    strategy: str,
    run: Callable[[FuzzTarget], tuple[InvariantViolation | None, str]],
    start: float | None = None,
) -> SliceResult:
    """One fixed program: the budget and shrinking do not apply, nor the seed but as a label.
    ``start``: the slice's start, where it ran other programs first (the finding's time)."""
    start = time.monotonic() if start is None else start
    violation, program = run(target)
    if violation is None:
        return SliceResult(1, len(program.splitlines()) - 2)
    finding = Finding(
        violation,
        strategy,
        seed,  # the slice's, as every finding says one (its fixed program needs none to replay)
        time.monotonic() - start,
        "contract",
        history=violation.history,
        blocks=violation.blocks,
        program=program,
        blocks_at=AT_THE_CHECK,
    )
    return SliceResult(1, len(violation.history), finding)


_RUNNERS: dict[str, _Runner] = {
    "contract": _contract,
    "machine": _machine,
    "stress": _stress,
}
