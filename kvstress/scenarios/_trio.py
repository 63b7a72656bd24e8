"""One scenario execution on trio: seeded, on virtual time, with the control trio allows.

trio cannot be asked "which task next" per step, so the scheduler supplies one random value per
execution: it draws the scenario and seeds trio's own scheduling RNG (``seeded_trio_run``). The
same schedule string therefore replays the same run, but PCT and bounded search have nothing
to choose here (DFS runs one execution). trio's ``MockClock`` jumps to the next deadline when
every task is idle; two guards stand in for the controlled loop's: a virtual deadline on the
whole run (a deadlock: every task waits for nothing that will come) and a step budget counted
by an instrument (a spin: a task that keeps checkpointing never lets the clock jump).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import trio

from kvstress.controlled import SchedulerExhausted, StepLimitExceeded, seeded_trio_run
from kvstress.controlled._errors import Deadlock
from kvstress.controlled._loop import suspended_at
from kvstress.controlled._thread_work import trio_thread_work
from kvstress.controlled._trio import is_steering
from kvstress.harness._runner import Abandoned, run_on_a_thread
from kvstress.schedulers import Scheduler

_IDLE_WAITS = 200  # consecutive idle I/O waits, clock unmoved, before the run counts as stuck

if TYPE_CHECKING:
    from kvstress.scenarios._execution import ExecutionRecord, ScenarioConfig


class _Guard(trio.abc.Instrument):
    """Cancels the run once its tasks have taken ``limit`` steps (remembering which worker ran
    last), and notes when the run goes idle with no deadline left: nothing can ever wake it."""

    def __init__(self, limit: int, workers: tuple[str, ...]) -> None:
        self.limit = limit
        self.workers = frozenset(workers)
        self.steps = 0
        self.last: str | None = None
        self.scope: trio.CancelScope | None = None
        self.exceeded = False
        self.idle_forever = threading.Event()
        self._stepped = False
        self._idle_at = -math.inf
        self._idle_waits = 0
        self.abandoned = False
        self.hang_at: float | None = None  # the run's time limit, on its clock
        self.waiting: list[str] | None = None  # where the workers waited as it came

    def park(self) -> None:
        """The harness gave up on this run: its thread stops at its next step or idle wait, for
        good. Left alone, an idle run spins (the autojumper wakes again and again on a clock with
        nothing to jump to) and would take a core and the GIL from everything after it."""
        self.abandoned = True

    def _park_if_abandoned(self) -> None:
        if self.abandoned:
            threading.Event().wait()  # nothing sets it: the daemon thread sleeps until exit

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._park_if_abandoned()
        if is_steering(task):
            return  # the run's steering (``seeded_trio_run``): no step of the pool's
        self.steps += 1
        if not task.name.startswith("<"):  # trio's own system tasks (the autojumper) do not count
            self._stepped = True
        if task.name in self.workers:
            self.last = task.name
        if self.waiting is None and self.hang_at is not None and trio.current_time() >= self.hang_at:
            # The time limit's cancellation wakes them: not one has resumed yet.
            self.waiting = _waiting_workers(self.workers)
        if self.steps > self.limit and self.scope is not None and not self.exceeded:
            self.exceeded = True
            self.scope.cancel()

    def before_io_wait(self, timeout: float) -> None:
        # Idle with no deadline left, the autojumper wakes and finds nothing to jump to, again
        # and again, while the clock stands still and no task of ours takes a step.
        self._park_if_abandoned()
        now = trio.current_time()
        if self._stepped or now != self._idle_at or trio_thread_work():  # a thread works for it
            self._idle_waits, self._idle_at = 0, now
        else:
            self._idle_waits += 1
            if self._idle_waits >= _IDLE_WAITS:
                self.idle_forever.set()
        self._stepped = False


def run_trio_execution(config: ScenarioConfig, scheduler: Scheduler, record: ExecutionRecord) -> None:
    """Run the execution; raise what a failing check raised, or a Deadlock/StepLimitExceeded."""
    from kvstress.scenarios._execution import draw_scenario, run_workers

    if not scheduler.new_execution():
        raise SchedulerExhausted(f"{type(scheduler).__name__} has no execution left to run")
    seed = scheduler.next_u64()
    record.scenario = draw_scenario(config, seed)
    budget = _Guard(config.max_steps, record.scenario.workers)
    bound = config.timing.hang_bound + record.scenario.total_timeout

    async def main() -> bool:
        with trio.CancelScope() as scope:
            budget.scope = scope
            budget.hang_at = anyio.current_time() + bound
            with anyio.move_on_after(bound) as timer:
                await run_workers(config, record, anyio.current_time)
            return timer.cancelled_caught
        return False

    hung = _run_abandonable(lambda: seeded_trio_run(main, seed=seed, instruments=[budget]), budget, config)
    if budget.exceeded:
        raise StepLimitExceeded(
            f"the trio run took {config.max_steps} task steps without finishing: a livelock or a "
            f"spin (task {budget.last!r} ran last)",
            budget.last,
        )
    if hung:
        waiting = f" ({', '.join(budget.waiting)})" if budget.waiting else ""
        raise Deadlock(
            f"the trio run did not finish within {bound:g} virtual seconds (the programs' timeouts "
            f"plus the hang bound): tasks wait for something that never comes{waiting}"
        )


def _waiting_workers(workers: frozenset[str]) -> list[str]:
    """``'b1' at pool.py:89: `await entry.ev.wait()``` for each worker task of the run, suspended
    (as the asyncio loop's deadlock message names them: a blind user's trio hang named none)."""
    found: list[str] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task is None:
            continue
        if task.name in workers:
            found.append(f"{task.name!r} at {suspended_at(task.coro)}")
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return sorted(found)


def _run_abandonable(run: Callable[[], bool], guard: _Guard, config: ScenarioConfig) -> bool:
    """Run trio on a daemon thread, so that a run no cancellation can end (a task shielded
    around a wait that never ends) is abandoned instead of hanging the harness: it is reported
    once the run sits idle with no deadline, or after ``stall_timeout`` wall seconds."""
    try:
        return run_on_a_thread(
            run,
            config.stall_timeout,
            name="kvstress-trio",
            idle=guard.idle_forever.is_set,
            interrupt_grace=min(config.stall_timeout, 2.0),  # runs are short: let it end first
        )
    except Abandoned:
        guard.park()
        # Not a guess at the cause: a shielded wait is one, a call into a thread that trio
        # cannot abandon on cancel another (a blind user's pool had no shield, and was told so).
        if guard.idle_forever.is_set():
            raise Deadlock(
                "the trio run is blocked for good: every task waits, no deadline is left, and the "
                "run's own time limit did not end them (a wait cancellation cannot reach: a "
                "shielded scope, or a call out to a thread that is not abandoned on cancel); its "
                "thread is abandoned"
            ) from None
        raise Deadlock(
            f"the trio run did not finish within {config.stall_timeout:g} s of real time, nor "
            "end when cancelled; its thread is abandoned"
        ) from None
