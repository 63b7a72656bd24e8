"""Search for a failing interleaving, shrink its schedule, and replay it from its string.

``search`` runs execution after execution of a scheduler until one fails, the scheduler is
exhausted (for DFS: a proof up to its bound) or the budget is spent. A failure is shrunk
before it is reported: the schedule is cut to the shortest prefix after which running without
preemption still fails the same way, then each remaining switch is dropped where the failure
survives without it. The result replays exactly with ``replay`` (or ``ReplayScheduler``).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass

from kvstress._violation import BlockRecord, InvariantViolation, Operation
from kvstress.controlled import SchedulerExhausted
from kvstress.scenarios._execution import ExecutionRecord, ScenarioConfig, run_execution
from kvstress.scenarios._programs import Scenario
from kvstress.scenarios._switches import Switch, record_switches
from kvstress.scenarios._table import interleaving_table
from kvstress.schedulers import (
    RANDOM_DRAW,
    GuidedScheduler,
    ReplayScheduler,
    Schedule,
    ScheduleDivergence,
    Scheduler,
)

SHRINK_BUDGET_S = 2.0
"""Wall seconds a search spends shrinking a failure's schedule, at most."""


@dataclass(frozen=True)
class ScenarioFailure:
    """A failing execution: what failed, the schedule that replays it, and its history."""

    violation: InvariantViolation
    schedule: Schedule
    scenario: Scenario
    history: tuple[Operation, ...]
    failed_op: int | None = None  # the operation whose check failed, when one did
    blocks: tuple[BlockRecord, ...] = ()
    blocks_at: str = ""  # the moment ``blocks`` show
    switch_points: tuple[Switch, ...] | None = None  # where each worker was paused; None: not recorded

    @property
    def switches(self) -> int:
        """Decisions in the schedule that ran another task than the one before."""
        tasks = [c for c in self.schedule.choices if c != RANDOM_DRAW]
        return sum(1 for a, b in itertools.pairwise(tasks) if a != b)

    def table(self) -> str:
        """The interleaving, one column per worker (see ``interleaving_table``)."""
        return interleaving_table(self.history, self.scenario.workers, self.failed_op, self.switch_points)

    def describe(self) -> str:
        """The violation, the programs, the interleaving table and the replay string."""
        return "\n".join(
            [
                str(self.violation),
                "programs:",
                *(f"  {line}" for line in self.scenario.describe().splitlines()),
                "interleaving:",
                self.table(),
                f"schedule: {self.schedule}",
            ]
        )


@dataclass(frozen=True)
class SearchResult:
    """What a search saw: executions run, whether the scheduler ran out, and the failure if any.

    ``elapsed_s`` counts the search up to the failing execution (shrinking excluded).
    """

    executions: int
    exhausted: bool
    elapsed_s: float
    failure: ScenarioFailure | None = None
    operations: int = 0  # operations the executions performed, the failing one's included


def search(
    config: ScenarioConfig,
    scheduler: Scheduler,
    *,
    max_executions: int | None = None,
    budget_s: float | None = None,
    shrink: bool = True,
) -> SearchResult:
    """Run executions until one fails, the scheduler is exhausted, or a limit is reached.

    At least one of ``max_executions`` and ``budget_s`` (wall seconds) must be given.
    """
    if max_executions is None and budget_s is None:
        raise ValueError("search needs max_executions or budget_s (or both), got neither")
    if max_executions is not None and (type(max_executions) is not int or max_executions < 1):
        raise ValueError(f"max_executions must be an int >= 1, got {max_executions!r}")
    if budget_s is not None and not budget_s > 0:
        raise ValueError(f"budget_s must be a number of seconds > 0, got {budget_s!r}")
    start = time.monotonic()
    done = operations = 0
    while max_executions is None or done < max_executions:
        if budget_s is not None and time.monotonic() - start >= budget_s:
            break
        try:
            record = run_execution(config, scheduler)
        except SchedulerExhausted:
            return SearchResult(done, True, time.monotonic() - start, operations=operations)
        done += 1
        operations += len(record.history)
        if record.failure is not None:
            elapsed = time.monotonic() - start
            failure = _failure(record, scheduler.schedule())
            if shrink:
                failure = shrink_failure(config, failure)
            failure = with_switch_points(config, failure)
            return SearchResult(done, False, elapsed, failure, operations)
    return SearchResult(done, False, time.monotonic() - start, operations=operations)


def replay(config: ScenarioConfig, schedule: Schedule | str) -> ScenarioFailure | None:
    """Run ``schedule`` once more; the failure it leads to, or None when it passes.

    ``ScheduleDivergence`` when the run does not follow it (another pool or configuration).
    """
    scheduler = ReplayScheduler(schedule)
    record = run_execution(config, scheduler)
    if not scheduler.finished and record.failure is None:
        raise ScheduleDivergence(
            f"the run ended after {scheduler.choices_so_far} of the schedule's "
            f"{len(scheduler.replayed.choices)} choices: it was recorded from another program"
        )
    return None if record.failure is None else _failure(record, scheduler.schedule())


def with_switch_points(config: ScenarioConfig, failure: ScenarioFailure) -> ScenarioFailure:
    """``failure`` with its switch points, from one more exact replay of its schedule under the
    recorder (trio runs have none: see ``unavailable``)."""
    if config.is_async and config.backend == "trio":
        return failure
    return dataclasses.replace(failure, switch_points=record_switches(config, failure.schedule))


def shrink_failure(
    config: ScenarioConfig, failure: ScenarioFailure, *, budget_s: float = SHRINK_BUDGET_S
) -> ScenarioFailure:
    """A failure with the same invariant and no more switches between tasks (usually far fewer),
    if one is found within ``budget_s``; else ``failure`` itself."""
    deadline = time.monotonic() + budget_s
    best = failure
    guide = list(failure.schedule.choices)

    def attempt(choices: list[int]) -> ScenarioFailure | None:
        if time.monotonic() > deadline:
            return None
        scheduler = GuidedScheduler(choices, failure.schedule.seed, failure.schedule.strategy)
        record = run_execution(config, scheduler)
        if record.failure is None or record.failure.invariant != failure.violation.invariant:
            return None
        return _failure(record, scheduler.schedule())

    # The shortest prefix that still fails (the search assumes longer prefixes fail too; the
    # answer is checked, so a wrong guess only costs shrinking).
    low, high = 0, len(guide)
    while low < high and time.monotonic() < deadline:
        middle = (low + high) // 2
        found = attempt(guide[:middle])
        if found is not None and found.switches <= best.switches:
            best, high = found, middle
        else:
            low = middle + 1
    # Then drop switches one at a time, latest first.
    choices = list(best.schedule.choices)
    for at in range(len(choices) - 1, 0, -1):
        if time.monotonic() > deadline:
            break
        if at >= len(choices):
            continue  # a shorter run replaced the choices (it ended sooner without a switch)
        previous = _previous_task(choices, at)
        if choices[at] == RANDOM_DRAW or previous is None or choices[at] == previous:
            continue
        found = attempt([*choices[:at], previous, *choices[at + 1 :]])
        if found is not None and found.switches < best.switches:
            best, choices = found, list(found.schedule.choices)
    return best


def _previous_task(choices: list[int], at: int) -> int | None:
    for choice in reversed(choices[:at]):
        if choice != RANDOM_DRAW:
            return choice
    return None


def _failure(record: ExecutionRecord, schedule: Schedule) -> ScenarioFailure:
    assert record.failure is not None
    scenario = record.scenario if record.scenario is not None else Scenario(())
    failed_op = record.ops.failed_op if record.ops is not None else None
    return ScenarioFailure(
        record.failure, schedule, scenario, record.history, failed_op, record.blocks, record.blocks_at
    )
