"""Seeded, replayable trio runs, through public seams only.

How far control goes: trio runs tasks in batches (all tasks that became runnable since the last
batch) and orders each batch with its own scheduling RNG. trio hands that RNG to Hypothesis
(its ``hypothesis`` plugin, which Hypothesis loads when it is imported, registers it with
``hypothesis.register_random`` and turns trio's deterministic scheduling on), and Hypothesis
seeds every registered RNG at the start of each test it runs and restores it afterwards. So a
trio run inside a Hypothesis test is a function of what it does.

``seeded_trio_run`` runs trio inside a one-example Hypothesis test (or as it is, when a
Hypothesis test is running already: that one seeded the RNG), on ``MockClock(
autojump_threshold=0)`` (virtual time that jumps as soon as every task is blocked). Hypothesis
seeds the RNG the same way for every run, so ``seed`` has to steer it from there. A prelude
picks the state the run starts from (two tasks checkpoint together ``seed % PRELUDE_ORDERS``
times, each time a batch that trio orders with its RNG); then a task of kvstress's own
(``Steering``) that does nothing joins a batch of runnable tasks or stays out, batch by batch,
as the seed draws. trio shuffles each batch with its RNG, one draw per task, so a batch with
the extra task consumes one draw more and every order after it comes out of another part of
the RNG's stream: each seed gives its own sequence of batch orders (the prelude alone gave
``PRELUDE_ORDERS`` runs in all, and an explored test's schedules past them repeated). Same
seed, same interleaving, same failure. That is all: there is no per-step choice, so no PCT, no
bounded search, no schedule string beyond the seed, and only orders within a batch are
reachable. Real I/O, threads and the wall clock stay uncontrolled.

Whether runs are in fact repeatable is checked once per process, by running a small race twice
(a trio release that stopped registering its RNG, or ``HYPOTHESIS_NO_PLUGINS``, would make them
differ); if they differ, runs go on unseeded, with one line on stderr saying so.
"""

from __future__ import annotations

import functools
import math
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, TypeVarTuple

import hypothesis
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from kvstress.controlled._foreign import OffersDue, ThreadWatch
from kvstress.controlled._gated import GatedWork, Why, WorkState
from kvstress.controlled._loop import CREEP_AFTER, SUBMITTED_WAIT_S
from kvstress.controlled._thread_work import (
    following_thread_work,
    trio_credit,
    trio_gates_open,
    trio_work_out,
)
from kvstress.schedulers._base import check_seed

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

PRELUDE_ORDERS = 64
"""How many scheduling-RNG states a seed starts the run from: a prelude takes ``seed %
PRELUDE_ORDERS`` rounds of two checkpointing tasks (a few microseconds each) before the run."""

STEER_NAME = "<kvstress steer>"
"""The name of ``Steering``'s task: a name in angle brackets, as trio's own system tasks have,
so that what counts a run's steps or looks for its tasks at work passes it by."""


def is_steering(task: trio.lowlevel.Task) -> bool:
    """Whether ``task`` is the run's steering task (``STEER_NAME``): kvstress's own, no step of
    the code's, so what counts steps, keeps time or traces the code's tasks passes it by."""
    return task.name == STEER_NAME


_STEER = 0x73_7465_6572  # mixed into the run's seed for the steering draws

_repeatable: bool | None = None  # None: not probed yet in this process


class MovingTime(trio.abc.Instrument):
    """Moves a ``MockClock`` one float forward before each task step once ``CREEP_AFTER`` steps
    ran at one instant, as a real clock moves between steps (the run's step bound still counts
    them: a spin is still found).

    A pool that recomputes its wait each round as ``timeout - (now - start)`` can be left with a
    wait of a few 1e-17 s (float rounding: 0.05 - (0.3 - 0.25)); ``move_on_after`` puts that
    deadline at ``now``, it fires at once, and on a clock that stands still the next round
    computes the same wait again, for ever: a correct pool reported as a spin. Here the clock
    moves, and the wait comes out at zero or less. Runs that do not stay that long at one
    instant keep exact times."""

    def __init__(self, clock: trio.testing.MockClock) -> None:
        self.clock = clock
        self._at = -math.inf  # the instant of the last step
        self._steps = 0  # steps at it

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if is_steering(task):
            return
        now = self.clock.current_time()
        if now != self._at:
            self._at, self._steps = now, 0
            return
        self._steps += 1
        if self._steps > CREEP_AFTER:
            self.clock.jump(math.nextafter(now, math.inf) - now)
            self._at = self.clock.current_time()  # its own move is no new instant


_DRAWS = 0x6B7673_7472  # mixed into the run's seed for the gates' own draws

SLEEP_IN_STEP_S = 0.002
"""The longest ``time.sleep`` a call out to a thread takes inside its window on trio: the run's
``MockClock`` moves on by it, as a loop's clock does behind a step that runs long (the lateness
an explored test's timers are allowed, ``LATE_WINDOW``). A longer one sets the call loose."""


OFFER_POLL_S = 2e-4
"""Real seconds an idle trio run waits between two looks at an offer on its way back
(``ThreadGates.expect_offer``)."""


class ThreadGates(trio.abc.Instrument):
    """Calls out to threads (``trio.to_thread.run_sync``, anyio's on trio) run at a fixed point
    of the run: right after the task step that handed them over, the run waiting while the
    thread runs to its result (``kvstress.controlled._gated``). trio offers no per-step choice,
    so the point is not a strategy's to move; but it is the same in every run of a seed, and so
    are the thread's writes among the steps and the step its result comes back in. A short
    ``time.sleep`` in the thread moves the ``MockClock`` on (``SLEEP_IN_STEP_S``); a longer one,
    or a thread that parks, is set loose, counted as work out in a thread as before. A short
    sleep, or a callback handed to the run before the result (``trio.from_thread.run_sync``),
    ends the window; the next comes once the thread's answer is there (after the next step of
    the task the callback woke: the caller's task, which runs what the thread asked for), right
    then or between later batches of steps, as the run's seed draws (``_later``)."""

    def __init__(self, clock: trio.abc.Clock, seed: int = 0) -> None:
        self.clock = clock if isinstance(clock, trio.testing.MockClock) else None
        self._clock = clock
        self.token: object = None
        self._handed: list[GatedWork] = []
        self._after_step_of: dict[trio.lowlevel.Task, list[GatedWork]] = {}
        # Calls whose next window comes between two batches of steps (``before_io_wait``), each
        # with the count of batches still to let by first: drawn from the run's seed (``_later``).
        self._after_batch: list[tuple[GatedWork, int]] = []
        self._seed = seed
        self._steps = 0  # task steps begun (``_mark``)
        self._in_step = False
        self._draw = random.Random(seed ^ _DRAWS)
        self._offers = OffersDue(self._now)  # expect_offer
        self._watch: ThreadWatch | None = None

    def before_run(self) -> None:
        self._draw = random.Random(self._seed ^ _DRAWS)  # the same draws in every run of the seed
        self.token = trio.lowlevel.current_trio_token()
        self._watch = ThreadWatch()  # the threads the code starts from now on
        trio_gates_open(self.token, self)

    def expect_offer(self, pending: Callable[[], bool], within: float) -> None:
        """A block released with its offer left to the code's own (the harness saw it RELEASING
        as its release returned) comes back while ``pending()`` is True, for ``within`` more
        seconds of the run's clock at most. Where the code has started a thread of its own, the
        run counts the offer as work out in a thread meanwhile (its clock runs with real time,
        and does not jump to the next deadline): such a thread zeroes the block and hands it
        back with ``run_sync_soon`` or ``from_thread``, and the idle run had jumped to a waiter's
        timeout, and past the checks' settle time, without it (correct pools reported on every
        seed, a blind user's). Without such a thread, the offer is a task's, on the run's clock."""
        watch = self._watch
        if watch is None or self.clock is None:
            return
        watch.look_for_new()
        if not watch:
            return
        if not self._offers:
            trio_work_out(self.token, +1)
        self._offers.expect(pending, within)

    def _offers_due(self, first: bool = True) -> bool:
        """Whether an offer ``expect_offer`` was told of is still due: pending and in time, or
        done or late while a thread of the code's own is at work (``first``: the run's thread
        may have run steps since the last look). Such a thread may have the block in hand,
        working on it longer than the checks' settle time, or be starved of a core on a loaded
        machine after it marked the block FREE and before it handed it back (a correct pool's
        ``lost-block``, once in a CI run): it is waited for ``SUBMITTED_WAIT_S`` of real time at
        most, as the asyncio loop waits, then let be (one that polls for the pool's whole life).
        The last offer done counts the run's work back."""
        if not self._offers:
            return False
        watch = self._watch
        at_work = None if watch is None else functools.partial(watch.at_work_within, SUBMITTED_WAIT_S, first)
        if not self._offers.due(at_work):
            trio_work_out(self.token, -1)
            return False
        return True

    def after_run(self) -> None:
        trio_gates_open(self.token, None)
        if self._offers:
            self._offers.clear()
            trio_work_out(self.token, -1)
        waiting = [work for works in self._after_step_of.values() for work in works]
        later = [work for work, _ in self._after_batch]
        for work in (*self._handed, *later, *waiting):  # left at their gates
            work.loosen(real_sleep=False)  # let them run as they come
        self._handed.clear()
        self._after_batch.clear()
        self._after_step_of.clear()

    def gated_work(self, name: str) -> GatedWork:
        """A call out to a thread, run after the step that hands it over (``hand``)."""
        work = GatedWork(self, name, self._now)
        work.answer_via = self._answer
        work.loop_mark = self._mark
        return work

    def _mark(self) -> object:
        """For a thread at its gate: the step the run is in, None between steps (a thread that
        sleeps holding a lock a task then takes on the run's thread waits for a window the
        blocked run cannot give: it lets itself loose, ``GatedWork._wait_turn``)."""
        return self._steps if self._in_step else None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._steps += 1
        self._in_step = True

    def _answer(self, work: GatedWork, call: Callable[[], object]) -> object:
        """A callback the call's thread handed the run in its window (``GatedWork.calling_back``),
        run now: the thread's next window comes once its answer is there. A callback that wakes
        a task (trio's ``from_thread`` in the caller's task: that task runs what the thread asked
        for; a waiter the callback offered a block to) has it there after that task's next step;
        one that wakes none, now, and the thread goes on after the batch of steps runnable now
        (which may take what the callback offered before the thread is done with it)."""
        woken = _Woken()
        trio.lowlevel.add_instrument(woken)
        try:
            return call()
        finally:
            trio.lowlevel.remove_instrument(woken)
            if work.state in (WorkState.LOOSE, WorkState.DONE):
                # It let itself loose while the callback ran (blocked on a lock the thread held
                # as it posted): out in a thread from now on (its call's end counts it back),
                # or the idle run jumped its clock to the next deadline meanwhile.
                if not work.counted:
                    work.counted = True
                    trio_work_out(self.token, +1)
            elif woken.task is None:
                self._later(work)  # the steps runnable now go first
            else:
                self._after_step_of.setdefault(woken.task, []).append(work)

    def _now(self) -> float:
        """The run's clock, read from the call's thread while the run waits for it (or, set
        loose, while the run goes on: a ``MockClock`` is read so from any thread)."""
        return float(self._clock.current_time())

    def hand(self, work: GatedWork) -> None:
        """The call is handed to its thread in the step running now."""
        self._handed.append(work)

    def _later(self, work: GatedWork) -> None:
        """The call's next window comes between two batches of steps: the next, or the one after
        (the run's seed draws which), so that steps made runnable meanwhile (a waiter the thread
        woke) may come before the thread goes on, in some runs."""
        self._after_batch.append((work, self._draw.randrange(2)))

    def before_io_wait(self, timeout: float) -> None:
        """Between two batches of steps: the calls whose thread slept go on to their next
        scheduling point (the run's clock moved by the sleep, so its deadlines have fired). One
        still asleep after that wakes the run at once, so that it does not wait for I/O, nor
        take itself for idle and jump its clock to the next deadline, while the call has work
        left at the time it is at. An offer on its way (``expect_offer``) is waited for in real
        time while the run is idle, a poll at a time, the run woken after each."""
        if self._offers and timeout > 0:
            if self._offers_due():
                time.sleep(OFFER_POLL_S)  # the clock runs with real time meanwhile
                self._offers_due(first=False)  # the wait counts toward a thread's stillness
            # Woken at once either way: to look again, or to wait anew on the clock as it is
            # now (the timeout trio waits out was reckoned in real time while the offer was due).
            trio.lowlevel.current_trio_token().run_sync_soon(_nothing)
        if not self._after_batch:
            return
        due = [work for work, batches in self._after_batch if not batches]
        self._after_batch = [(work, batches - 1) for work, batches in self._after_batch if batches]
        for work in due:
            self._run(work)
        if self._after_batch or self._handed:
            trio.lowlevel.current_trio_token().run_sync_soon(_nothing)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self._in_step = False
        if self._after_step_of:
            for work in self._after_step_of.pop(task, ()):
                if self._draw.random() < 0.5:
                    self._handed.append(work)  # right after the step that has its answer
                else:
                    self._later(work)
        if self._handed:
            handed, self._handed = self._handed, []
            for work in handed:
                self._run(work)

    def _run(self, work: GatedWork) -> None:
        if work.abandoned and work.ident is None:
            work.drop()  # cancelled before its thread began: it may never begin
            return
        if work.state is WorkState.DONE or work.counted:
            return  # it let itself loose meanwhile, and is back (or counted out already)
        while True:
            why = work.run_window()
            credit = 0.0 if why is None or self.clock is None else work.credit()
            if credit and self.clock is not None:
                # A real timed wait in the thread: as long on the run's clock (and credited).
                trio_credit(self.token, credit)
                self.clock.jump(credit)
            if why in (Why.POSTED, Why.CALLED_BACK):
                return  # its result is on its way to the run; or it waits for its answer (``_answer``)
            if why is Why.STALLED:  # trio starts a thread for each call: not seen; run it loose
                why = None
            seconds = work.sleep_for
            if why is Why.SLEEP and self.clock is not None and seconds <= SLEEP_IN_STEP_S:
                if seconds > 0:
                    self.clock.jump(seconds)
                # Its next window after the run's next batch of steps: a deadline the sleep
                # passed fires first (a call its caller abandons on cancel goes on abandoned).
                self._later(work)
                return
            work.loosen()  # a long sleep (real now), or it was set loose already
            work.counted = True
            trio_work_out(self.token, +1)  # the clock runs with real time from now...
            if self.clock is not None and work.window_began > 0:
                # ...and from the window's start: the thread waited on the real clock meanwhile
                # (none began for a call whose thread never arrived: it jumped the clock by the
                # machine's uptime, and a correct run hung at its deadline)
                self.clock.jump(max(0.0, time.perf_counter() - work.window_began))
            return


class Steering(trio.abc.Instrument):
    """Makes a run's ``seed`` pick its batch orders (the module's docstring): before a batch of
    two or more tasks made runnable (whose order trio draws), its task (``STEER_NAME``: it only
    parks again) is made runnable too, or not, as the seed draws; a batch of one has no order to
    draw, and is left alone (an extra step there costs and buys nothing). It never keeps the run
    busy: the run goes idle, and its clock jumps, as it would without. Put it last among the
    run's instruments, so that tasks other instruments wake between batches count."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._draw = random.Random(seed ^ _STEER)
        self.task: trio.lowlevel.Task | None = None
        self._parked = False
        self._scheduled = 0  # tasks made runnable since the last look

    def before_run(self) -> None:
        self._draw = random.Random(self._seed ^ _STEER)  # the same draws in every run of the seed
        self.task, self._parked, self._scheduled = None, False, 0

    async def park(self) -> None:
        """The steering task's body: park, for the whole run (cancelled as the run ends)."""
        self.task = trio.lowlevel.current_task()
        while True:
            self._parked = True  # it parks below, within this step
            await trio.lowlevel.wait_task_rescheduled(_abort_succeeds)

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self._parked = False  # by this instrument, or by the cancellation that ends the run
        else:
            self._scheduled += 1

    def before_io_wait(self, timeout: float) -> None:
        scheduled, self._scheduled = self._scheduled, 0
        if scheduled < 2 or timeout > 0 or not self._parked or self.task is None:
            return  # no order at stake, or nothing runnable: the run may be going idle
        if self._draw.random() < 0.5:
            trio.lowlevel.reschedule(self.task)


def _abort_succeeds(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.SUCCEEDED


def _nothing() -> None:
    """Posted to wake a trio run (``ThreadGates.before_io_wait``)."""


class _Woken(trio.abc.Instrument):
    """The first task a callback wakes, while it runs (``ThreadGates._answer``)."""

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if self.task is None:
            self.task = task


def seeded_trio_run(
    async_fn: Callable[[*Ts], Awaitable[T]],
    *args: *Ts,
    seed: int,
    clock: trio.abc.Clock | None = None,
    instruments: Sequence[trio.abc.Instrument] = (),
) -> T:
    """``trio.run(async_fn, *args)``, its batch orders fixed by ``seed`` (in [0, 2**64)).

    ``clock`` defaults to ``MockClock(autojump_threshold=0)``: virtual time (moved a float a step
    past ``CREEP_AFTER`` steps at one instant: ``MovingTime``). trio's RNG state is
    restored afterwards (Hypothesis restores what it seeded), so other runs are unaffected.
    """
    seed = check_seed(seed)
    if clock is None:
        clock = trio.testing.MockClock(autojump_threshold=0)
        instruments = (*instruments, MovingTime(clock))
    steering = Steering(seed)
    instruments = (*instruments, ThreadGates(clock, seed), steering)

    async def main() -> T:
        trio.lowlevel.spawn_system_task(steering.park, name=STEER_NAME)
        await trio.lowlevel.checkpoint()  # the steering task parks: it can join the first batch
        await _prelude(seed % PRELUDE_ORDERS)
        return await async_fn(*args)

    named_like(main, async_fn)

    def run() -> T:
        with following_thread_work():  # a wait for trio's or anyio's worker threads is counted
            return trio.run(main, clock=clock, instruments=instruments)

    if not _runs_repeat():
        return run()
    return _seeded(run)


def named_like(wrapper: Callable[..., Any], fn: object) -> None:
    """Give ``wrapper`` the module and names of ``fn`` (a partial's function): trio names a
    task after the function it runs, and a block the test's own task took was held by
    "kvstress.controlled._trio.seeded_trio_run.<locals>.main" (a blind user's report)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    for name in ("__module__", "__name__", "__qualname__"):
        value = getattr(fn, name, None)
        if isinstance(value, str):
            setattr(wrapper, name, value)


async def _prelude(rounds: int) -> None:
    """``rounds`` batches of two tasks for trio to order: each draws from its scheduling RNG."""
    if rounds == 0:
        return

    async def stepper() -> None:
        for _ in range(rounds):
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stepper, name="<kvstress prelude>")
        nursery.start_soon(stepper, name="<kvstress prelude>")


def _seeded(run: Callable[[], T]) -> T:
    """``run()`` with trio's scheduling RNG seeded by Hypothesis: inside a one-example test, or
    as is inside a Hypothesis test already running (a nested ``@given`` is refused)."""
    if hypothesis.currently_in_test_context():
        return run()
    _pending.run, _pending.outcome = run, None
    try:
        _one_example()
        outcome = _pending.outcome
    finally:
        _pending.run = _pending.outcome = None
    assert outcome is not None
    ok, value = outcome
    if not ok:
        raise value
    return value


class _Pending(threading.local):
    run: Callable[[], Any] | None = None
    outcome: tuple[bool, Any] | None = None


_pending = _Pending()


@settings(
    database=None,
    max_examples=1,
    phases=[Phase.explicit],
    deadline=None,
    suppress_health_check=list(HealthCheck),
    # Whatever profile is loaded (Hypothesis loads its "ci" one wherever CI is set): derandomize
    # makes each call hash this test's source, which cost every trio execution 0.17 s in CI.
    derandomize=False,
    print_blob=False,
)
@example(None)
@given(st.none())
def _one_example(_: None) -> None:
    """The one-example Hypothesis test ``_seeded`` runs: Hypothesis seeds trio's RNG around it.
    The outcome travels out through ``_pending``, so Hypothesis never sees a failure (it would
    note a "failing explicit example" on the pool's exception)."""
    assert _pending.run is not None
    try:
        _pending.outcome = (True, _pending.run())
    except BaseException as error:
        _pending.outcome = (False, error)


def _runs_repeat() -> bool:
    """Whether two seeded runs of a small race take the same steps (probed once per process);
    said once on stderr when they do not."""
    global _repeatable
    if _repeatable is None:
        _repeatable = _probe() == _probe()
        if not _repeatable:
            print(
                f"kvstress: trio {trio.__version__} runs are not repeatable under Hypothesis (trio's "
                "scheduling RNG is not registered with it; is HYPOTHESIS_NO_PLUGINS set?): trio runs go "
                "on unseeded, so a trio finding may not replay exactly",
                file=sys.stderr,
            )
    return _repeatable


def _probe() -> list[str]:
    trace = TaskStepTrace()

    async def racers() -> None:
        async def racer() -> None:
            for _ in range(8):
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for index in range(6):
                nursery.start_soon(racer, name=f"r{index}")

    _seeded(lambda: trio.run(racers, clock=trio.testing.MockClock(autojump_threshold=0), instruments=[trace]))
    return trace.steps


class TaskStepTrace(trio.abc.Instrument):
    """A trio instrument recording the name of each task as it takes a step (the interleaving)."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        """Record one step of ``task`` (not of the run's steering task: it does nothing)."""
        if not is_steering(task):
            self.steps.append(task.name)
