"""An asyncio event loop whose scheduler picks every next callback, on virtual time.

The stock loop runs all ready callbacks in FIFO order and sleeps in ``select`` until the next
timer. This loop runs one callback at a time and asks the scheduler which: ready callbacks are
grouped into lanes, one lane per asyncio task (its steps and wake-ups, numbered 1, 2, ... in
creation order, and the plain callbacks its steps queue with ``call_soon``: on any asyncio loop
those run before the task's next step) and lane 0 for the other plain callbacks (timers, future
callbacks queued outside a task's step). Each lane stays FIFO; which lane goes next is the
scheduler's choice, asked only when two or more lanes are ready. Time is virtual: ``time()``
only moves when nothing is ready, and then jumps to the earliest timer, so ``asyncio.sleep(30)``
costs microseconds and lands at exactly +30.

Because lanes interleave freely, this loop runs orders that plain asyncio's FIFO would produce
only under some I/O timing. A program that relies on the FIFO itself (for example, "after
``sleep(0)`` every task made ready before me has run") can fail here and never in plain
asyncio; such reliance breaks as soon as timing changes.

How, through public methods only: ``call_soon``, ``call_at`` and ``call_soon_threadsafe`` keep
their callbacks in this loop's own lanes and timer heap (asyncio's tasks and futures schedule
through them), and one pump callback, handed to the stock loop's ``call_soon``, runs the chosen
callbacks a batch at a time. Between batches the stock loop polls its selector without waiting,
so real I/O and calls from other threads still arrive. Not controlled: threads (``to_thread``,
``run_in_executor``) and real I/O. When nothing is ready and no timer is pending (I/O polled
once more), ``Deadlock`` is raised.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import heapq
import inspect
import itertools
import linecache
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar, TypeVarTuple

from kvstress.controlled._errors import (
    Deadlock,
    SchedulerExhausted,
    SchedulerMisbehaved,
    StepLimitExceeded,
    TimeLimitExceeded,
)
from kvstress.controlled._foreign import OffersDue, ThreadWatch
from kvstress.controlled._gated import (
    GatedWork,
    Why,
    WorkState,
    call_name,
    work_of_this_thread,
)
from kvstress.controlled._thread_work import following_thread_work
from kvstress.schedulers import ALL_TIMERS, Scheduler
from kvstress.schedulers._schedule import TIMER_LANE

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

DEFAULT_MAX_STEPS = 1_000_000
"""Callbacks the loop may run at one instant of virtual time before ``StepLimitExceeded``."""

CREEP_AFTER = 1_000
"""Steps at one instant of virtual time after which time moves one float a step, as a real
clock moves between steps (the step bound, ``max_steps``, still counts them: a spin is still
found). A deadline recomputed each round as ``timeout - (now - start)`` can be a few 1e-17 s
away (0.05 - (0.3 - 0.25)); ``asyncio.timeout`` puts it at now (an absolute ``call_at``), it
fires at once, and on a standing clock the next round computes the same: a correct pool spun
into a busy-wait finding. Runs that do not stay this long at one instant keep exact times."""

FAIRNESS_BOUND = 1_000
"""Decisions a ready task (or thread) may be passed over in a row before it runs regardless.

Strategies with strict priorities (PCT) can starve a task forever, which no real scheduler
does; code that polls until another task acts (anyio re-delivering a cancellation with
``call_soon`` until the task takes it, a spin lock) then spins forever under control though it
ends on a real loop. After this many pass-overs the starved one runs without asking the
scheduler. The choice is a function of the run so far, so replay and DFS see the same one.
"""

FIRE_HORIZON = 0.005
"""Virtual seconds a timer may fire ahead of runnable threads or ready tasks (``fires_timers``):
an OS keeps a ready thread waiting for a time slice or two, and a loop its ready callbacks
behind a step that runs long, not for seconds. A poller's backoff falls within it; a longer
sleep (a test ordering its threads or tasks) still ends only once everything waits."""
EARLY_FIRE_STEPS = 2_000
"""Scheduling points (or callbacks) since virtual time last moved with everything waiting, after
which no timer fires ahead of what is runnable: a thread or task still running then is spinning
(the longest run between two such moves measured on the corpus's polling and timer pools was
under 1,000), and a timer's jump must not let its deadline pass for it, which would hide the
spin."""
LATE_WINDOW = 0.002
"""Virtual seconds a timer may fire late on the controlled loop (``late_timers``: an explored
test's schedules). When nothing is ready, time jumps to the next timer, or to any later one due
within this window, and every timer due by then fires at once, the scheduler ordering the tasks
they wake: a real loop fires a timer this late behind a step that runs long or a collection
pause, so a task's short await (a 2 ms prefill) can end after a cancel due just past it. Timers
never fire early here (that is ``fires_timers``, for a pool's fuzzing): a test's ready tasks all run before
time moves, as the test's own short sleeps expect."""

REPORTED = "kvstress_reported"
"""The attribute an explored run sets on the violation it reports: the task that died of it
does not log it again as "Task exception was never retrieved" (``call_exception_handler``)."""

AFTER_VIOLATION_S = 60.0
"""Virtual seconds a run with a time limit goes on after an audit's violation (see
``_kv_after_violation``): time for a test that expects the violation to finish its own way."""

REAL_CLOCK_HINT = (
    "(or keeps its deadline on a clock that stays real: time.monotonic, perf_counter, time and "
    "clock_gettime, and their _ns forms, are virtual in the modules kvstress controls, but not in "
    "a module imported inside a function, nor a C extension's clock; kvstress.explore and the "
    "kvstress_explore marker take such a module in modules=[...])"
)
"""What a time-limit error adds: the usual cause besides a real wait past every timeout."""

THREAD_WAIT_S = 10.0
"""Real seconds an idle loop waits for a call running in a thread before it calls it a deadlock."""
SUBMITTED_WAIT_S = 1.0
"""Real seconds an idle loop waits for work the code submitted to a ``ThreadPoolExecutor`` of its
own (a reset that offers its block back with ``call_soon_threadsafe``) before it lets virtual
time move without it: such work may also be a worker that runs for the pool's whole life."""
FOREIGN_POLL_S = 2e-4
"""Real seconds between two looks at the threads the code started (``ThreadWatch``) while an idle
loop waits for one at work; virtual time follows real time meanwhile."""

PUMP_BATCH = 256
"""Callbacks the pump runs before it hands back to the stock loop for one I/O poll."""

_PURGE_MIN_TIMERS = 100  # below this many timers, cancelled ones are left in the heap

# A scheduled callback: its handle (what the caller holds: cancel, cancelled), then what runs.
_Entry = tuple[asyncio.Handle, Callable[..., object], tuple[Any, ...], contextvars.Context]


def late_offers(when: float, deadlines: Iterable[float], limit: float | None) -> list[float]:
    """The instants a jump of virtual time to ``when`` (the next deadline) may go to instead with
    late timers: ``when`` and each later distinct deadline within ``LATE_WINDOW`` of it and not
    past ``limit`` (the run's time limit, None: none), in order. One offer: no choice to make."""
    horizon = when + LATE_WINDOW if limit is None else min(when + LATE_WINDOW, limit)
    return sorted({when, *(deadline for deadline in deadlines if when < deadline <= horizon)})


def later(now: float, seconds: float) -> float:
    """The virtual instant ``seconds`` after ``now``: at least the next float after ``now`` when
    ``seconds > 0``. A timeout recomputed as ``timeout - (now - start)`` leaves a remainder such
    as 1.4e-17 where a real clock would have moved on; added to ``now`` it rounds back to
    ``now``, time never moves, and the waiter would spin for ever on a correct pool. And never
    short as read back: ``now + seconds`` may round down, so that ``later - now`` is a hair under
    ``seconds`` (0.003999999999999997 for a sleep of 0.004), and a test of the caller's own that
    a sleep lasts at least its length, true of every real clock, would fail."""
    if seconds <= 0:
        return now + seconds
    when = now + seconds
    while when - now < seconds:
        when = math.nextafter(when, math.inf)
    return when if when > now else math.nextafter(now, math.inf)


class ControlledEventLoop(asyncio.SelectorEventLoop):
    """An event loop for one execution of ``scheduler``; see the module docstring.

    Creating the loop starts the execution (``scheduler.new_execution()``) and raises
    ``SchedulerExhausted`` when there is none left. ``max_steps`` bounds the callbacks run at one
    instant of virtual time (``StepLimitExceeded``: a spin never lets time move); ``max_time``
    (virtual seconds from the start, None: unbounded) bounds time itself (``TimeLimitExceeded``).
    ``start_time`` is where virtual time starts, in seconds.

    ``steps`` counts callbacks run and ``decisions`` the times the scheduler was asked.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        start_time: float = 0.0,
        max_time: float | None = None,
    ) -> None:
        # This loop's own fields carry a _kv prefix: the stock loop's private names are its own.
        self.kv_contended = False
        """Whether the step running now was chosen over another ready task or callback (see
        ``contended_step``)."""
        self._kv_ready: collections.deque[_Entry] = collections.deque()
        self._kv_inbox: collections.deque[_Entry] = collections.deque()  # from other threads
        self._kv_timers: list[tuple[float, int, asyncio.TimerHandle, _Entry]] = []
        self._kv_order = itertools.count()
        self._kv_live_timers = 0  # timers in the heap at the last purge: the next is due at twice
        self._kv_armed = False
        self._kv_stopping = False
        self._kv_polled = False  # idle once already: I/O had its poll
        self._kv_threads = 0  # calls running in a thread (run_in_executor, anyio's) not yet back
        # Work submitted to an executor from this loop's thread, not yet done, and those of it
        # the loop stopped waiting for (long-lived): both under the lock (workers take theirs
        # out as they finish).
        self._kv_submitted: set[concurrent.futures.Future[Any]] = set()
        self._kv_submitted_stale: set[concurrent.futures.Future[Any]] = set()
        self._kv_tasks_named = 0  # unnamed tasks of this run so far (``create_task``)
        # Every task made, where a caller asks for them (a list): a fuzzing run reads those of
        # the pool's own that died, for its finding's message.
        self.tasks_made: list[asyncio.Task[Any]] | None = None
        self._kv_submit_lock = threading.Lock()
        self._kv_real: float | None = None  # while work is out in threads: real time last read
        self._kv_watch = ThreadWatch()  # threads started since this loop was made, watched at idle
        self._kv_offers = OffersDue(lambda: self._kv_now)  # expect_offer
        self._kv_foreign = False  # an idle loop is waiting for one of them now
        self._kv_woken = threading.Event()  # set by each call from another thread
        self._kv_error: BaseException | None = None
        self._kv_origin: dict[asyncio.Handle, int] = {}  # a plain callback a task queued -> its lane
        # Calls out to threads run at the scheduler's choice (``GatedWork``): the lanes they
        # were given, those not done, and those set loose (counted as work out in threads).
        self._kv_work_lanes: dict[int, str] = {}  # lane -> what the thread runs
        self._kv_gated: list[GatedWork] = []
        self._kv_loose: list[GatedWork] = []
        self._kv_stalled: collections.deque[GatedWork] = collections.deque()  # no worker yet
        self._kv_no_gates = False  # closing: calls out to threads run as they come
        self._kv_thread: int | None = None  # the thread running the loop
        self.kv_gated_submit = False
        """True while a gated call is handed to its executor (``ThreadPoolExecutor.submit``'s
        wrapper then leaves it to the loop's own count)."""
        super().__init__()  # first: BaseEventLoop.__del__ needs its fields even if we raise below
        # In debug mode (-X dev, PYTHONASYNCIODEBUG) a callback's duration is read on this
        # loop's clock, virtual: the pump that moves it read as slow, hundreds of warnings a run.
        self.slow_callback_duration = math.inf
        try:
            _check_options(max_steps, start_time)
            if not scheduler.new_execution():
                raise SchedulerExhausted(f"{type(scheduler).__name__} has no execution left to run")
        except BaseException:
            self.close()
            raise
        self.scheduler = scheduler
        self.deadlock_note: Callable[[], str] | None = None
        """What the run adds to a deadlock's message, read as the deadlock is found (the
        scenarios: the acquires in flight with a timeout nothing would end)."""
        self.foreign_patience = SUBMITTED_WAIT_S
        """Real seconds an idle loop, with no timer left and a thread of the code's own alive,
        waits for that thread to call back before it calls the wait a deadlock: a thread that
        keeps a caller's timeout (a worker in ``queue.get(timeout=)`` or a threaded pool's
        timed wait) is parked until its timeout, and answers then. A run that gives its calls
        longer timeouts than this sets it longer (the scenarios: their longest timeout)."""
        self.max_steps = max_steps
        self.steps = 0
        self.decisions = 0
        self.max_time = max_time
        from kvstress.audit._core import violations_mark  # here: the audit imports this module

        self._kv_violations = violations_mark  # read at time jumps (``_kv_after_violation``)
        self._kv_audit_mark = violations_mark()  # audits' violations before this run
        self._kv_violated_at: float | None = None  # when this run first saw one
        self._kv_now = self._kv_start = float(start_time)
        self._kv_seen_elsewhere = self._kv_now  # the latest ``time_elsewhere`` answer
        self._kv_budget = max_steps
        # Invariant: lane ids are never reused; a task's entry goes when it is done.
        self._lanes: dict[asyncio.Future[Any], int] = {}
        self._next_lane = 1
        self._current: int | None = None
        self._scheduler_failed = False
        self._starved: dict[int, int] = {}  # ready lane -> decisions it was passed over in a row
        self._kv_running: Callable[..., object] | None = None  # the callback running now
        # The lane of a plain callback that queued itself again as it ran (a retry loop: anyio
        # re-delivering a cancellation until the task takes it): it yields at the next choice.
        self._kv_spun: int | None = None
        self._tells_woken = hasattr(scheduler, "woken")  # the scheduler takes the hint (delay)
        self._notes_handovers = hasattr(scheduler, "handed_over")  # a report's switch recorder
        # Whether a timer due within FIRE_HORIZON is a choice beside the ready lanes.
        self._early_timers = int(getattr(scheduler, "fires_timers", 0)) >= ALL_TIMERS
        # An explored test's schedule (``late_timers``): timers may fire late, and new tasks
        # start in the order they were made (``_in_creation_order``).
        self._late_timers = bool(getattr(scheduler, "late_timers", False))
        self._kv_started: set[int] = set()  # the lanes that have run a step
        self.kv_excused = 0.0
        """Virtual seconds time jumped for a timer fired early, while callbacks were ready: an
        operation in flight meanwhile is not blamed for them (``excused_seconds``)."""
        self._was_ready: set[int] = set()  # the lanes ready at the step before
        self._was_known = self._next_lane  # lanes made by then (a new task is not woken)

    # -- the public surface asyncio's tasks and futures schedule through ------------------------

    def time(self) -> float:
        """Virtual time in seconds: moves only when nothing is ready, to the next timer."""
        return self._kv_now

    def time_elsewhere(self) -> float:
        """Virtual time as a thread other than the loop's reads it: while work is out in threads
        virtual time runs with real time (``_kv_follow_real``), up to this instant, not only up
        to the loop's last look (it may wait seconds in one look for an executor's call). Never
        less than an earlier answer: the loop moves the two fields apart."""
        now, since = self._kv_now, self._kv_real
        if since is not None:
            now += max(0.0, time.perf_counter() - since)
        self._kv_seen_elsewhere = now = max(now, self._kv_seen_elsewhere)
        return now

    def call_soon(
        self, callback: Callable[[*Ts], object], *args: *Ts, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        """Queue ``callback(*args)`` in its lane; the scheduler decides when it runs."""
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        entry = _entry(self, callback, args, context)
        if self._current and not isinstance(getattr(callback, "__self__", None), asyncio.Task):
            # A plain callback a task's step queues runs before that task's next step in every
            # asyncio run (one FIFO queue): it joins the task's lane. A timeout that is already
            # due (``timeout_at`` a past deadline) or a cancel scope's delivery then lands at
            # the task's next await, as it does on a real loop.
            self._kv_origin[entry[0]] = self._current
        if callback == self._kv_running and not isinstance(getattr(callback, "__self__", None), asyncio.Task):
            # A plain callback that queued itself again (a task's own step is no retry: a
            # yielding task keeps its turn, as PCT's strategy wants).
            self._kv_spun = self._kv_origin.get(entry[0]) or self._lane_of(callback)
        self._kv_ready.append(entry)
        self._kv_arm()
        return entry[0]

    def call_later(
        self,
        delay: float,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """Run ``callback(*args)`` ``delay`` virtual seconds from now: at least the next instant
        when ``delay > 0`` (a remainder such as 1.4e-17, added to now, rounds back to now, and
        a waiter that sleeps it out again and again would never let time move)."""
        return self.call_at(later(self._kv_now, delay), callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """Run ``callback(*args)`` once virtual time reaches ``when``."""
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        ctx = context if context is not None else contextvars.copy_context()
        timer = asyncio.TimerHandle(when, callback, args, self, ctx)
        heapq.heappush(self._kv_timers, (when, next(self._kv_order), timer, (timer, callback, args, ctx)))
        self._kv_arm()
        return timer

    def call_soon_threadsafe(
        self, callback: Callable[[*Ts], object], *args: *Ts, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        """From another thread: queued for the loop's thread, which is woken."""
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        work = work_of_this_thread()
        if work is not None and work.loop is not self:
            work = None
        answering = None if work is None else work.calling_back(callback)
        entry = _entry(self, callback if answering is None else answering, args, context)
        self._kv_inbox.append(entry)  # deque.append is atomic
        resume = work is not None and work.posted(calls_back=answering is not None)  # its window ends
        self._kv_woken.set()
        super().call_soon_threadsafe(self._kv_arm)
        if resume:
            assert work is not None
            work.resume()  # its next window comes once the loop has run the callback
        return entry[0]

    def run_in_executor(
        self, executor: concurrent.futures.Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        """The stock call, counted until it is back: while one is out, virtual time runs with
        real time (``_kv_follow_real``), and with nothing else ready the loop waits for it in
        real time, up to the next timer, instead of calling the wait a deadlock."""
        thread_pool = executor is None or isinstance(executor, concurrent.futures.ThreadPoolExecutor)
        work = self.gated_work(call_name(func)) if thread_pool else None
        if work is None:
            self.thread_work_begins()
            future = super().run_in_executor(executor, func, *args)
            self._kv_threads += 1
            future.add_done_callback(self._kv_thread_back)
            return future
        # Submitted now, as the stock loop does (an executor shut down before the call's turn
        # came must not refuse it): its thread waits at its gate for the turn.
        self.kv_gated_submit = True
        try:
            future = super().run_in_executor(executor, work.wrap(func), *args)  # type: ignore[arg-type]
        finally:
            self.kv_gated_submit = False
        future.add_done_callback(lambda _: work.abandon())
        self.hand(work)
        return future

    def gated_work(self, name: str = "call") -> GatedWork | None:
        """A call out to a thread, to run at the scheduler's choice once ``hand`` is called (see
        ``kvstress.controlled._gated``); None where calls run as they come: off the loop's
        thread, or as the loop closes."""
        if self._kv_no_gates or self.is_closed() or threading.get_ident() != self._kv_thread:
            return None
        work = GatedWork(self, name, self.time_elsewhere)
        work.on_arrival = self._kv_woken.set
        work.loop_mark = self._kv_mark
        work.answer_via = self._kv_answer
        return work

    def _kv_answer(self, work: GatedWork, call: Callable[[], object]) -> object:
        """A callback a call's thread handed the loop in its window (``GatedWork.calling_back``):
        the call is ready again once it has run, what it asked for there."""
        try:
            return call()
        finally:
            self._kv_queue_window(work, None)

    def _kv_mark(self) -> object:
        """For a thread at its gate: the step the loop is in while it runs a callback of the
        code's own (not a call's window), else None (``GatedWork._wait_turn``)."""
        running = self._kv_running
        if running is None or running == self._kv_window:
            return None
        return self.steps

    def hand(self, work: GatedWork) -> None:
        """The call is handed to its thread: a lane of its own, ready now."""
        work.lane = self._next_lane
        self._next_lane += 1
        self._kv_work_lanes[work.lane] = work.name
        gated = self._kv_gated
        if len(gated) >= 64 and not len(gated) & (len(gated) - 1):  # at 64, 128, 256...
            # those done need no gate freed at close (a run of many calls)
            gated[:] = [other for other in gated if other.state is not WorkState.DONE]
        gated.append(work)
        self._kv_queue_window(work, None)

    def _kv_queue_window(self, work: GatedWork, when: float | None) -> None:
        window = self._kv_window
        handle = self.call_soon(window, work) if when is None else self.call_at(when, window, work)
        assert work.lane is not None
        self._kv_origin[handle] = work.lane

    def _kv_window(self, work: GatedWork) -> None:
        """The scheduler picked a call out to a thread: run it to its next scheduling point."""
        began = time.perf_counter()
        if self._kv_no_gates:
            self._kv_set_loose(work, began)
            return
        if work.abandoned and work.ident is None:
            work.drop()  # cancelled before its thread began: it may never begin
            return
        if work.state is WorkState.DONE:
            return  # it let itself loose while the loop was stuck, and is back
        why = work.run_window()
        credit = 0.0 if why is None else work.credit()
        if credit:
            # The thread waited on the real clock in its window (a real timed wait): its real
            # time on the loop's clock too, credited as real time's jitter.
            self._kv_now += credit
            self.kv_excused += credit
            self._kv_budget = self.max_steps
        if why is Why.STALLED:
            self._kv_stalled.append(work)
        elif why is None:
            if work.state is WorkState.LOOSE:
                self._kv_set_loose(work, work.window_began)
        elif why is Why.POSTED and self._kv_stalled:
            # Done: its worker is free for the call that has waited longest for one.
            self._kv_queue_window(self._kv_stalled.popleft(), None)
        elif why is Why.SLEEP:
            seconds = work.sleep_for
            self._kv_queue_window(work, later(self._kv_now, seconds) if seconds > 0 else None)

    def _kv_set_loose(self, work: GatedWork, since: float) -> None:
        """Count work set loose as out in a thread from ``since`` (its window's real time counts)."""
        work.loosen()
        self._kv_loose.append(work)
        self.thread_work_begins()
        assert self._kv_real is not None
        if since > 0:  # a window's start (none: it let itself loose before its window)
            self._kv_real = min(self._kv_real, since)

    def _kv_requeue_arrived(self) -> bool:
        """Nothing else to run: the calls whose thread has begun since they stalled are ready."""
        arrived = [work for work in self._kv_stalled if work.arrived.is_set()]
        for work in arrived:
            self._kv_stalled.remove(work)
            self._kv_queue_window(work, None)
        return bool(arrived)

    def _wait_for_arrival(self) -> bool:
        """Nothing to run and no timer: wait up to ``THREAD_WAIT_S`` of real time for a stalled
        call's thread to begin (a worker freed by work outside the schedule). True: one did, or
        something came back."""
        began = time.perf_counter()
        while time.perf_counter() - began < THREAD_WAIT_S:
            if self._kv_requeue_arrived():
                return True
            if self._kv_woken.wait(FOREIGN_POLL_S) and self._kv_inbox:
                return True
            self._kv_woken.clear()
        return False

    def _kv_loose_out(self) -> bool:
        """Whether work set loose is still out (done work is dropped from the count)."""
        loose = self._kv_loose
        if loose and any(work.state is WorkState.DONE for work in loose):
            loose[:] = [work for work in loose if work.state is not WorkState.DONE]
        return bool(loose)

    async def shutdown_default_executor(self, *args: Any, **kwargs: Any) -> None:
        """The stock call (a thread joins the executor's), counted as ``run_in_executor``'s are."""
        with self.thread_work():
            await super().shutdown_default_executor(*args, **kwargs)

    def _kv_thread_back(self, future: asyncio.Future[Any]) -> None:
        self._kv_threads -= 1

    @contextlib.contextmanager
    def thread_work(self) -> Iterator[None]:
        """Count work sent to a thread by other means (anyio's worker threads) until the block
        ends, as ``run_in_executor``'s calls are counted."""
        self.thread_work_begins()
        self._kv_threads += 1
        try:
            yield
        finally:
            self._kv_threads -= 1

    def submitted(self, future: concurrent.futures.Future[Any]) -> None:
        """Count work submitted to an executor from this loop's thread until it is done: an idle
        loop waits for it (up to ``SUBMITTED_WAIT_S`` of real time) before virtual time moves,
        as a real loop's clock would not run ahead of a reset that takes microseconds."""
        with self._kv_submit_lock:
            self._kv_submitted.add(future)
        future.add_done_callback(self._kv_submitted_back)

    def _kv_submitted_back(self, future: concurrent.futures.Future[Any]) -> None:
        with self._kv_submit_lock:  # in the worker's thread, or this one if it was done
            self._kv_submitted.discard(future)
            self._kv_submitted_stale.discard(future)
        self._kv_woken.set()

    def _kv_submissions_pending(self) -> bool:
        with self._kv_submit_lock:
            return len(self._kv_submitted) > len(self._kv_submitted_stale)

    def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        """Create a task and give it the next lane id (creation order is stable per run). An
        unnamed task is named as asyncio names it, ``Task-<n>``, but counting this run's tasks
        only: asyncio's count runs on across a process's loops, so a replay's report named the
        holders ``Task-2`` where the search's had said ``Task-62`` (a blind user's)."""
        if kwargs.get("name") is None:
            self._kv_tasks_named += 1
            kwargs["name"] = f"Task-{self._kv_tasks_named}"
        task = super().create_task(coro, **kwargs)
        self._lane_of_task(task)
        if self.tasks_made is not None:
            self.tasks_made.append(task)
        return task

    def run_forever(self) -> None:
        """Run until ``stop()``, at most ``max_steps`` callbacks per instant of virtual time; a
        deadlock, a spin or a scheduler's error ends it by raising."""
        self._kv_budget = self.max_steps
        self._kv_stopping = False
        self._kv_error = None
        self._kv_arm()
        self._kv_thread = threading.get_ident()
        _RUNNING.append(self)
        try:
            with following_thread_work():
                super().run_forever()
        finally:
            _RUNNING.remove(self)
        error, self._kv_error = self._kv_error, None
        if error is not None:
            raise error

    def stood_still(self) -> str | None:
        """A note for a failure raised after the loop ran more than ``CREEP_AFTER`` steps at one
        instant of virtual time (None otherwise): time moves when every task waits, so a loop
        that always has a task ready keeps it still, and a failure it leads to (a guard of the
        code's own counting steps, a timeout that never fires) says nothing of why (a blind
        team's engine loop, which never slept between its steps, under pct)."""
        steps = self.max_steps - self._kv_budget
        if steps <= CREEP_AFTER:
            return None
        return (
            f"kvstress: virtual time had stood at {round(self._kv_now - self._kv_start, 9):g} s for "
            f"the last {steps:,} steps of the controlled loop. It moves only when every task "
            "waits (on a timer, an event, a lock, a queue): a task that is always ready (a loop "
            "that never sleeps between its rounds) keeps it still, so timeouts do not fire, and a "
            "strategy that favours one task (pct) can keep the others from running. An await of "
            "a short asyncio.sleep in such a loop's idle round lets time move"
        )

    @property
    def thread_watch(self) -> ThreadWatch:
        """The threads started since this loop was made (a reset worker), watched at idle."""
        return self._kv_watch

    def stop(self) -> None:
        """Stop once the callback running now returns (the pump runs no other after it)."""
        self._kv_stopping = True
        super().stop()

    def close(self) -> None:
        """Close the loop and drop what was still queued. A thread the code started that is at
        work is first given up to ``SUBMITTED_WAIT_S`` to hand its work back, so that it does
        not find the loop closed (a reset worker's ``call_soon_threadsafe`` raises then, and
        the thread dies with a traceback after every run). A task that never began (a run
        stopped by a finding, a limit, or before its cancelled tasks unwound) has its coroutine
        closed: dropped, it printed "coroutine ... was never awaited" at some later collection."""
        if not self.is_closed() and self._kv_watch:
            began, first = time.perf_counter(), True
            while self._kv_watch.at_work(first) and time.perf_counter() - began < SUBMITTED_WAIT_S:
                time.sleep(FOREIGN_POLL_S)
                first = False
        if not self.is_closed():
            self._kv_free_gates()
            self._kv_run_done_callbacks()
            for task in asyncio.all_tasks(self):
                coro = task.get_coro()
                if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                    coro.close()
        super().close()
        self._kv_ready.clear()
        self._kv_inbox.clear()
        self._kv_timers.clear()
        self._kv_origin.clear()
        self._kv_offers.clear()

    def _kv_free_gates(self) -> None:
        """Let every call out to a thread still waiting for its turn run as it comes: the loop is
        closing, and a thread left at its gate would wait for ever (a worker of anyio's or of an
        executor, which the interpreter joins at exit)."""
        self._kv_no_gates = True
        for work in self._kv_gated:
            if work.state is WorkState.QUEUED:
                work.loosen(real_sleep=False)  # the run is over: a sleep it is in ends now
        self._kv_gated.clear()

    def _kv_run_done_callbacks(self) -> None:
        """Run the callbacks still queued that are not a task's steps, oldest first: the done
        callbacks of a task that ended as the loop was stopped. The stock loop runs every
        callback of the iteration that stops it; the pump stops after the one that asked, and a
        scheduler that chose the shutdown's own steps first left the rest to be dropped here.
        anyio's worker threads end by such a callback (``root_task.add_done_callback(worker.stop)``):
        dropped, they waited for work for ever and the interpreter never exited (a blind user's
        explored tests on ``anyio.to_thread``)."""
        queued = [*self._kv_ready, *self._kv_inbox]
        self._kv_ready.clear()
        self._kv_inbox.clear()
        for handle, callback, args, context in queued:
            if handle.cancelled() or _is_task_step(callback):
                continue
            try:
                context.run(callback, *args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # as the stock loop treats a callback's exception
                self.call_exception_handler(
                    {"message": f"Exception in callback {callback!r}", "exception": exc, "handle": handle}
                )

    # -- the pump -------------------------------------------------------------------------------

    def _kv_arm(self) -> None:
        if not self._kv_armed and not self.is_closed():
            self._kv_armed = True
            super().call_soon(self._kv_pump)

    def _kv_pump(self) -> None:
        """Run up to ``PUMP_BATCH`` chosen callbacks; a control error stops the loop and is
        raised from ``run_forever`` (raised here, the stock loop would only log it)."""
        self._kv_armed = False
        try:
            for _ in range(PUMP_BATCH):
                if self._kv_stopping or not self._kv_step():
                    break
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as error:
            self._kv_error = error
            self.stop()
            return
        if not self._kv_stopping:
            self._kv_arm()

    def _kv_step(self) -> bool:
        """One iteration; False to give the stock loop its I/O poll first."""
        if self._kv_real is not None:
            self._kv_follow_real()
        inbox, ready = self._kv_inbox, self._kv_ready
        while inbox:
            ready.append(inbox.popleft())
        if self._kv_timers:
            self._fire_due_timers()
        if not ready:
            return self._idle()
        self._kv_polled = False
        if self._kv_budget <= 0:
            culprit = next((t.get_name() for t, lane in self._lanes.items() if lane == self._current), None)  # type: ignore[attr-defined]
            now = round(self._kv_now, 9)  # crept a few floats from 0, it would read 9e-320
            raise StepLimitExceeded(
                f"the controlled loop ran {self.max_steps} callbacks at virtual time {now:g} s "
                f"without time moving: a livelock or a spin (task {culprit!r} ran last), or, where "
                "you call run_controlled yourself, a program longer than its max_steps",
                culprit,
            )
        entry = self._choose(ready)
        if entry is None:
            return True
        self._kv_budget -= 1
        self.steps += 1
        if self.max_steps - self._kv_budget > CREEP_AFTER:
            self._kv_now = math.nextafter(self._kv_now, math.inf)  # see CREEP_AFTER
        handle, callback, args, context = entry
        self._kv_running = callback
        try:
            context.run(callback, *args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # what the stock loop does with a callback's exception
            self.call_exception_handler(
                {"message": f"Exception in callback {callback!r}", "exception": exc, "handle": handle}
            )
        finally:
            self._kv_running = None
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, asyncio.Task) and owner.done():
            self._lanes.pop(owner, None)
        return True

    def _choose(self, ready: collections.deque[_Entry]) -> _Entry | None:
        """Take the oldest callback of the lane the scheduler picks (None: look again)."""
        if self._scheduler_failed:
            self.kv_contended = False
            entry = ready.popleft()
            self._kv_origin.pop(entry[0], None)
            return None if entry[0].cancelled() else entry
        heads = self._lane_heads(ready)
        if heads is None:
            return None
        if self._late_timers:
            heads = self._in_creation_order(heads)
        if self._tells_woken:
            self._tell_woken(heads)
        self.kv_contended = len(heads) > 1
        when = self._early_timer() if self._early_timers else None
        if when is not None:
            lane = self._ask_fairly([*sorted(heads), TIMER_LANE])
            if lane == TIMER_LANE:
                self._fire_early(when)
                return None  # look again: the timer's callbacks are ready too
        elif len(heads) == 1:
            lane = next(iter(heads))
            if self._notes_handovers and self._current is not None and lane != self._current:
                # The task that ran last awaited (it is not ready), and this lane was the only
                # one that could run: no choice, but a hand-over a report shows ("blocked at").
                self.scheduler.handed_over(self._current, lane)  # type: ignore[attr-defined]
        else:
            lane = self._ask_fairly(sorted(heads))
        self._current = lane
        self._kv_started.add(lane)
        index = heads[lane]
        if index == 0:
            entry = ready.popleft()
        else:
            entry = ready[index]
            del ready[index]
        self._kv_origin.pop(entry[0], None)
        return entry

    def _in_creation_order(self, heads: dict[int, int]) -> dict[int, int]:
        """``heads`` less every task that has not run yet but the first created (an explored
        test's schedule): a loop runs a new task's first step in the order the tasks were made
        (``call_soon``'s FIFO), and a test that starts its clients in order may rely on it.
        Everything after a task's first step is the strategy's to order."""
        works = self._kv_work_lanes
        waiting = [lane for lane in heads if lane > 0 and lane not in self._kv_started and lane not in works]
        if len(waiting) < 2:
            return heads
        first = min(waiting)
        return {lane: index for lane, index in heads.items() if lane == first or lane not in waiting}

    def _next_timer(self) -> float | None:
        """When the next live timer is due (cancelled ones at the head are dropped); None: none."""
        timers = self._kv_timers
        while timers and timers[0][2].cancelled():
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def _early_timer(self) -> float | None:
        """When the next live timer is due, where it may fire ahead of the ready callbacks: within
        ``FIRE_HORIZON``, within ``max_time``, and before ``EARLY_FIRE_STEPS`` at this instant
        (a pool's fuzzing only: its checks credit the jump, ``kv_excused``)."""
        when = self._next_timer()
        if when is None or self.max_steps - self._kv_budget >= EARLY_FIRE_STEPS:
            return None
        if when - self._kv_now > FIRE_HORIZON or (
            self.max_time is not None and when > self._kv_start + self.max_time
        ):
            return None
        return when

    def _fire_early(self, when: float) -> None:
        """Jump to ``when`` with callbacks still ready, as a loop does behind a long step, and
        make every timer due by then ready. The step bound still counts: time moved for a timer,
        not because nothing was ready, and a spin beside a ticking timer must still end."""
        if when > self._kv_now:
            self.kv_excused += when - self._kv_now
            self._kv_now = when
        self._fire_due_timers()

    def _tell_woken(self, heads: dict[int, int]) -> None:
        """Tell the scheduler which task the step before woke, if one: the first ready lane that
        was not ready then, is a task's, is not the one that ran, and was known by then (a task
        just created is not woken). As the thread baton tells it of a notified waiter."""
        was, known, woken = self._was_ready, self._was_known, None
        for lane in heads:  # in the order they became ready
            if lane not in was and lane != self._current and 0 < lane < known:
                woken = lane
                break
        self._was_ready, self._was_known = set(heads), self._next_lane
        self.scheduler.woken = woken  # type: ignore[attr-defined]

    def _lane_heads(self, ready: collections.deque[_Entry]) -> dict[int, int] | None:
        """Each ready lane -> the index of its oldest callback; None after dropping cancelled ones."""
        heads: dict[int, int] = {}
        for index, entry in enumerate(ready):
            if entry[0].cancelled():
                for dead in [entry for entry in ready if entry[0].cancelled()]:
                    ready.remove(dead)
                    self._kv_origin.pop(dead[0], None)
                return None  # the indexes moved
            lane = self._kv_origin.get(entry[0]) or self._lane_of(entry[1])
            if lane not in heads:
                heads[lane] = index
        return heads

    def _ask_fairly(self, runnable: list[int]) -> int:
        starved = self._starved
        spun, self._kv_spun = self._kv_spun, None
        others = [lane for lane in runnable if lane != spun] if spun in runnable else []
        overdue = [lane for lane in runnable if starved.get(lane, 0) >= FAIRNESS_BOUND]
        if others:
            # A retry that queued itself again yields, as on a stock loop (one FIFO queue: what
            # else is ready runs first); a strict-priority strategy (PCT) otherwise ran it again
            # and again up to the fairness bound, a thousand steps for each anyio cancellation.
            # Not the scheduler's choice: a function of the run, so replay and DFS agree.
            lane = max(others, key=lambda other: starved.get(other, 0))
        else:
            lane = overdue[0] if overdue else self._ask(runnable)
        self._starved = {other: starved.get(other, 0) + 1 for other in runnable if other != lane}
        return lane

    def _ask(self, runnable: list[int]) -> int:
        """The scheduler's pick among two or more ready lanes, checked."""
        try:
            lane = self.scheduler.next_task(runnable, self._current)
            if lane not in runnable:
                raise SchedulerMisbehaved(
                    f"{type(self.scheduler).__name__}.next_task returned {lane!r}, not one of the "
                    f"runnable tasks {runnable}"
                )
        except BaseException:
            # From here on plain FIFO, so asyncio.Runner can still cancel the tasks and close.
            self._scheduler_failed = True
            raise
        self.decisions += 1
        return lane

    def task_of_lane(self, lane: int | None) -> asyncio.Task[Any] | None:
        """The live task running in ``lane`` (a ``next_task`` id), or None (plain callbacks, or done)."""
        found = next((task for task, number in self._lanes.items() if number == lane), None)
        return found if isinstance(found, asyncio.Task) else None

    def work_of_lane(self, lane: int | None) -> str | None:
        """What a call out to a thread runs, for its lane (``hand``); None for any other lane."""
        return self._kv_work_lanes.get(lane) if lane is not None else None

    def _lane_of(self, callback: Callable[..., object]) -> int:
        # A task's steps and wake-ups are its bound methods; anything else is a plain callback.
        owner = getattr(callback, "__self__", None)
        if not isinstance(owner, asyncio.Task):
            return 0
        lane = self._lanes.get(owner)
        return lane if lane is not None else self._lane_of_task(owner)

    def _lane_of_task(self, task: asyncio.Future[Any]) -> int:
        lane = self._lanes.get(task)
        if lane is None:
            lane = self._lanes[task] = self._next_lane
            self._next_lane += 1
        return lane

    def _idle(self) -> bool:
        """Nothing is ready: wait for calls out in threads, let the stock loop poll I/O once,
        then jump to the next timer, else it is a deadlock. False when the poll comes first."""
        self._kv_woken.clear()  # before the counts are read: a call back after it sets it again
        if self._kv_stalled and self._kv_requeue_arrived():
            return True
        threads = self._kv_threads or self._kv_loose_out()
        if threads or self._kv_submissions_pending():
            waited = self._wait_for_threads(THREAD_WAIT_S if threads else SUBMITTED_WAIT_S)
            if waited is None:
                return True  # something came back: run it
            if not waited and threads:
                now, out = (
                    round(self._kv_now, 9),
                    self._kv_threads + len(self._kv_loose),
                )
                raise Deadlock(
                    f"at virtual time {now:g} nothing is ready, and {out} call(s) "
                    f"run in a thread (run_in_executor, to_thread, anyio's) did not come back within "
                    f"{THREAD_WAIT_S:g} s of real time"
                )
            if not waited:
                with self._kv_submit_lock:  # still running: long-lived, time moves on without them
                    self._kv_submitted_stale = set(self._kv_submitted)
        self._kv_watch.look_for_new()  # a thread the code started since (a reset worker)
        if self._kv_watch:
            waited = self._wait_for_foreign()
            if waited is None:
                return True  # something came back: run it
        when = self._next_timer()
        if when is None and self._kv_stalled and self._wait_for_arrival():
            return True
        if when is None:
            if not self._kv_polled:
                self._kv_polled = True  # finished I/O or a thread's call may still come in
                return False
            if self._kv_watch and self._wait_for_parked():
                # A thread of the code's own, not seen at work (just handed its work on a loaded
                # machine, not yet on a CPU), answered after all: no deadlock. Only a deadlock
                # beside such a thread pays this wait (a blind user's asyncio front over an
                # allocator thread was a 'hang' on 2 of 2 seeds under load).
                return True
            raise Deadlock(self._deadlock_message())
        if self.max_time is not None:
            self._kv_after_violation(when)
        if self.max_time is not None and when > self._kv_start + self.max_time:
            raise TimeLimitExceeded(
                f"virtual time would pass {self.max_time:g} s (next timer at {when:g} s): something "
                f"keeps waiting or polling long past every timeout it was given {REAL_CLOCK_HINT}. "
                f"{self._waiting_tasks()}"
            )
        if self._late_timers:
            when = self._late_jump(when)
        if when > self._kv_now:
            self._kv_now = when
            self._kv_budget = self.max_steps  # the step bound is per instant: time moved
        self._fire_due_timers()
        return True

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """asyncio's, but for a dead task whose exception the run reported as its failure."""
        if getattr(context.get("exception"), REPORTED, False) and "future" in context:
            return
        super().call_exception_handler(context)

    def _kv_after_violation(self, when: float) -> None:
        """A run with a time limit (an explored test's) ends ``AFTER_VIOLATION_S`` of virtual time
        after an audit raised its violation in it: the task it was raised in has died, and what
        waits for that task (a test awaiting its clients, each awaiting a dead engine) would
        otherwise wait, tick after tick of a watchdog, to the hour's limit (86-118 s of real
        time, a blind user's). The explorer reports the violation, and this as what followed."""
        if self._kv_violated_at is None:
            if self._kv_violations() == self._kv_audit_mark:
                return
            self._kv_violated_at = self._kv_now
        if when > self._kv_violated_at + AFTER_VIOLATION_S:
            raise TimeLimitExceeded(
                f"virtual time would pass {AFTER_VIOLATION_S:g} s after an audit's violation (next "
                f"timer at {when:g} s): the run stopped there. {self._waiting_tasks()}"
            )

    def _wait_for_threads(self, bound: float) -> bool | None:
        """Wait in real time for work out in threads, as a real loop does, and move virtual time
        by the time waited: a thread's work takes time (a test timing ``to_thread`` around a
        5 ms sleep read 0, and a pool waiting in a thread for 0.2 s returned None at once on the
        virtual clock: timeout-early). The wait ends at the next timer's time, as a real loop's
        does. None: something came back; True: the next timer is due first; False: ``bound``
        real seconds passed with no timer to fire."""
        if self._kv_inbox:
            return None
        when = self._next_timer()
        wait = bound if when is None else min(bound, max(0.0, when - self._kv_now))
        back = self._kv_woken.wait(wait)
        self._kv_follow_real()
        if back or self._kv_inbox:
            return None
        return when is not None and self._kv_now >= when

    def _wait_for_foreign(self) -> bool | None:
        """While a thread the code started is at work (``ThreadWatch``), wait for it in real time,
        virtual time following, as ``_wait_for_threads`` waits for an executor's: a reset worker
        fed by a queue hands its block back with ``call_soon_threadsafe``, and a quiet check that
        moved time on without it reported a correct pool as losing the block. None: something
        came back; True: the next timer came due first; False: none is at work (or one has been
        for ``SUBMITTED_WAIT_S``: a thread that works for the pool's whole life is let be)."""
        watch = self._kv_watch
        if not watch.at_work() and not self._kv_offers.due():
            # It may have handed its work back as it finished: run that before time moves.
            return None if self._kv_inbox else False
        self.thread_work_begins()
        self._kv_foreign = True
        watch.restart()  # each idle wait gets the whole bound
        began = time.perf_counter()
        try:
            while True:
                waited = self._wait_for_threads(FOREIGN_POLL_S)  # one look's worth of real time
                # The wait counts toward a thread's stillness (first=False).
                busy = watch.at_work_within(SUBMITTED_WAIT_S, first=False)
                if waited is not False:
                    return waited  # something came back, or the next timer is due
                if not busy and not self._kv_offers.due():
                    return None if self._kv_inbox else False
                if time.perf_counter() - began > SUBMITTED_WAIT_S:
                    return None if self._kv_inbox else False  # offers due, no thread at work
        finally:
            self._kv_foreign = False
            self._kv_follow_real()  # the real time up to now counts; then exact virtual time again

    def expect_offer(self, pending: Callable[[], bool], within: float) -> None:
        """A block released with its offer left to the code's own (the harness saw it RELEASING
        as its release returned) comes back while ``pending()`` is True, for ``within`` more
        virtual seconds at most: while a thread of the code's own is watched, an idle loop waits
        for it in real time, virtual time following, as for a thread at work. Such a thread may
        sleep with the block in hand (a short ``time.sleep`` to batch its resets): asleep in the
        kernel, it read as parked, and time moved to a waiter's timeout without it."""
        self._kv_offers.expect(pending, within)

    def _wait_for_parked(self) -> bool:
        """Wait up to ``foreign_patience`` real seconds for a parked thread of the code's own to
        answer, virtual time following real time: the thread's timed wait runs on the real
        clock, and a deadline it keeps on the loop's clock (``time_elsewhere``) must come (an
        allocator thread waiting for a caller's deadline saw it never come, and the loop then
        called the wait a deadlock). True: something came back."""
        self.thread_work_begins()
        self._kv_foreign = True
        try:
            return self._kv_woken.wait(self.foreign_patience)
        finally:
            self._kv_foreign = False
            self._kv_follow_real()

    def thread_work_begins(self) -> None:
        """Work is about to go out to a thread: from now until all of it is back, virtual time
        runs with real time (``_kv_follow_real``), from before the thread starts, so a thread's
        own real-clock timeout never ends after less virtual time than it waited."""
        if self._kv_real is None:
            self._kv_real = time.perf_counter()

    def _kv_follow_real(self) -> None:
        """While work is out in threads, move virtual time on by the real time since the last
        call: a thread works, waits and times out on the real clock, and a loop's clock runs
        meanwhile (a test timing ``to_thread`` around a 5 ms sleep read 0; a pool waiting in a
        thread with a 0.2 s timeout answered None at once on the virtual clock: timeout-early).
        Real time comes with a real clock's jitter (a timed wait ends a fraction of a millisecond
        late): it is credited to the operations in flight (``kv_excused``), as the checks allow
        it on real time. Runs with no thread work keep exact virtual times."""
        last = self._kv_real
        if last is None:
            return
        now = time.perf_counter()
        if now > last:
            self._kv_now += now - last
            self.kv_excused += now - last
            self._kv_budget = self.max_steps  # the step bound is per instant: time moved
        out = self._kv_threads or self._kv_foreign or self._kv_loose_out() or self._kv_submissions_pending()
        self._kv_real = now if out else None

    def _late_jump(self, when: float) -> float:
        """Where an idle loop jumps with ``late_timers``: ``when`` (the next timer), or, as the
        scheduler picks, a later live timer due within ``LATE_WINDOW`` (and ``max_time``), so
        that the timers before it fire late. One choice per jump, and none where no other timer
        is that close."""
        timers = self._kv_timers
        popped = []  # the heap's head, in order, up to the window's end: put back as they were
        while timers and timers[0][0] <= when + LATE_WINDOW:
            popped.append(heapq.heappop(timers))
        for timer in popped:
            heapq.heappush(timers, timer)
        limit = None if self.max_time is None else self._kv_start + self.max_time
        offered = late_offers(
            when, (deadline for deadline, _, handle, _ in popped if not handle.cancelled()), limit
        )
        if len(offered) < 2:
            return when
        lane = self._ask([TIMER_LANE + index for index in range(len(offered))])
        return offered[lane - TIMER_LANE]

    def _fire_due_timers(self) -> None:
        timers = self._kv_timers
        if len(timers) > max(_PURGE_MIN_TIMERS, 2 * self._kv_live_timers):
            # A run full of cancelled timeouts would otherwise keep every one until its far-off time.
            timers[:] = [timer for timer in timers if not timer[2].cancelled()]
            heapq.heapify(timers)
            self._kv_live_timers = len(timers)
        now = self._kv_now
        while timers and timers[0][0] <= now:
            _, _, timer, entry = heapq.heappop(timers)
            if not timer.cancelled():
                self._kv_ready.append(entry)

    def _waiting_tasks(self) -> str:
        """Where each task waits (the innermost line of its coroutine chain), the first eight: a
        task that waits on a future nobody resolves beside a ticker shows which await it is."""
        where = sorted(f"{task.get_name()!r} at {_suspended_at(task)}" for task in asyncio.all_tasks(self))
        more = f"; and {len(where) - 8} more" if len(where) > 8 else ""
        return f"Tasks waiting: {'; '.join(where[:8]) or 'none'}{more}"

    def _deadlock_message(self) -> str:
        waiting = sorted(
            f"{self._lanes.get(task, '?')} {task.get_name()!r} at {_suspended_at(task)}"
            for task in asyncio.all_tasks(self)
        )
        shown = ", ".join(waiting[:8]) + (f" and {len(waiting) - 8} more" if len(waiting) > 8 else "")
        now = round(self._kv_now, 9)
        note = self.deadlock_note() if self.deadlock_note is not None else ""
        return (
            f"deadlock at virtual time {now:g}: no callback is ready and no timer is pending, "
            f"so nothing can wake the {len(waiting)} waiting tasks ({shown or 'none'}); a lost "
            "wake-up, or a wait on real I/O or a thread, which the controlled loop does not wait for"
            f"{note}"
        )


def _suspended_at(task: asyncio.Task[Any]) -> str:
    """``file.py:57: `await req.fut``` for the innermost coroutine a suspended task awaits in
    that is not the event loop's, a concurrency library's or kvstress's own (the line of the
    pool or the test that waits), else the innermost."""
    return suspended_at(task.get_coro())


def suspended_at(coro: Any) -> str:
    """``_suspended_at`` for a suspended coroutine (an asyncio task's, or a trio task's
    ``coro``)."""
    frames = []
    awaited: Any = coro
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            frames.append(frame)
        inner = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        if inner is None and frame is not None and frame.f_code.co_name == "__await__":
            # An awaitable that drives a coroutine by hand (the harness counts a pool's
            # wake-ups so) holds it as ``coro``: the wait is in there.
            inner = frame.f_locals.get("coro")
            inner = inner if inspect.iscoroutine(inner) else None
        awaited = inner
    if not frames:
        return "(no frame)"
    own = [f for f in frames if not _library_file(f.f_code.co_filename)]
    frame = own[-1] if own else frames[-1]
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" + (f": `{line}`" if line else "")


_LIBRARIES = ("asyncio", "concurrent.futures", "anyio", "trio", "sniffio", "kvstress")


def _library_file(filename: str) -> bool:
    """In the standard library's asyncio or futures, anyio, trio, sniffio or kvstress."""
    for name in _LIBRARIES:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where and filename.startswith(os.path.dirname(where) + os.sep):
            return True
    return False


def _is_task_step(callback: Callable[..., object]) -> bool:
    """Whether ``callback`` steps or wakes a task (its coroutine would run): asyncio's C tasks
    queue wrapper objects, its Python tasks their bound methods."""
    return isinstance(getattr(callback, "__self__", None), asyncio.Task) or type(callback).__name__ in (
        "TaskStepMethWrapper",
        "TaskWakeupMethWrapper",
    )


def _entry(
    loop: asyncio.AbstractEventLoop,
    callback: Callable[..., object],
    args: tuple[Any, ...],
    context: contextvars.Context | None,
) -> _Entry:
    ctx = context if context is not None else contextvars.copy_context()
    return asyncio.Handle(callback, args, loop, ctx), callback, args, ctx


def _check_options(max_steps: int, start_time: float) -> None:
    if type(max_steps) is not int or max_steps < 1:
        raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r} ({type(max_steps).__name__})")
    if not isinstance(start_time, int | float) or not math.isfinite(start_time):
        raise ValueError(f"start_time must be a finite number of seconds, got {start_time!r}")


def controlled_loop_factory(
    scheduler: Scheduler,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    start_time: float = 0.0,
    max_time: float | None = None,
) -> Callable[[], ControlledEventLoop]:
    """A zero-argument loop factory: each call is a new loop and a new execution of ``scheduler``.

    Fits ``asyncio.Runner(loop_factory=...)``, ``anyio.run(..., backend="asyncio",
    backend_options={"loop_factory": ...})`` and pytest-asyncio's
    ``pytest_asyncio_loop_factories`` hook.
    """

    def factory() -> ControlledEventLoop:
        return ControlledEventLoop(scheduler, max_steps=max_steps, start_time=start_time, max_time=max_time)

    return factory


_RUNNING: list[ControlledEventLoop] = []
"""The controlled loops running now, in any thread of this process (one, as a rule)."""


def sole_running_loop() -> ControlledEventLoop | None:
    """The controlled loop running in this process, where exactly one runs (None otherwise):
    the clock a thread of the code's own reads (``loop_clock``)."""
    running = list(_RUNNING)
    return running[0] if len(running) == 1 else None


def current_loop() -> ControlledEventLoop:
    """The running controlled loop (for ``current_loop().scheduler.next_u64()``); else RuntimeError."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, ControlledEventLoop):
        raise RuntimeError(f"the running event loop is a {type(loop).__name__}, not a ControlledEventLoop")
    return loop


def run_controlled(
    main: Callable[[], Coroutine[Any, Any, T]],
    scheduler: Scheduler,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_time: float | None = None,
    note_still: bool = False,
) -> T:
    """Run ``main()`` as one execution of ``scheduler`` with ``asyncio.Runner``; return its result.

    Raises what ``main`` raises, or ``SchedulerExhausted`` when the scheduler has no execution
    left (then ``main`` is never called). ``note_still``: an error raised after the loop stood
    still long gets ``note_stood_still``'s note (an explored test's failure).
    """
    factory = controlled_loop_factory(scheduler, max_steps=max_steps, max_time=max_time)
    with asyncio.Runner(loop_factory=factory) as runner:
        loop = runner.get_loop()  # create the loop (and start the execution) before main() exists
        try:
            return runner.run(main())
        except Exception as error:
            if note_still:
                note_stood_still(loop, error)
            raise


def note_stood_still(loop: object, error: BaseException) -> None:
    """Add ``ControlledEventLoop.stood_still``'s note to ``error``, where ``loop`` is a
    controlled loop that stood still long (not to the step limit's own error, which says so)."""
    stood = getattr(loop, "stood_still", None)
    note = stood() if callable(stood) and not isinstance(error, StepLimitExceeded) else None
    if isinstance(note, str):
        error.add_note(note)


def contended_step(loop: object) -> bool:
    """Whether the step ``loop`` runs now, on a controlled loop, was chosen over another ready
    task or callback. A waiter that polls with ``sleep(0)`` until a callback already queued runs
    (anyio on asyncio waits so for its cancellation to be delivered) wakes once or twice on
    asyncio's first-in-first-out ready queue; a scheduler that keeps choosing the waiter over
    that callback (PCT's priorities, up to ``FAIRNESS_BOUND``) makes it wake a thousand times at
    one instant. Such a wake-up burns no time the loop would have idled: the busy-wait check
    does not count it (``Suspensions``). False for any other loop, or None."""
    return getattr(loop, "kv_contended", False) is True
