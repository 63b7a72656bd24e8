"""An asyncio event loop whose scheduler picks every next callback, on virtual time.

The stock loop runs all ready callbacks in FIFO order and sleeps in ``select`` until the next
timer. This loop runs one callback per iteration and asks the scheduler which: ready callbacks
are grouped into lanes, one lane per asyncio task (its steps and wake-ups, numbered 1, 2, ... in
creation order) and lane 0 for plain callbacks (future callbacks, timers, ``call_soon``). Each
lane stays FIFO; which lane goes next is the scheduler's choice, asked only when two or more
lanes are ready. Time is virtual: ``time()`` only moves when nothing is ready, and then jumps
to the earliest timer, so ``asyncio.sleep(30)`` costs microseconds and lands at exactly +30.

Because lanes interleave freely, this loop runs orders that plain asyncio's FIFO would produce
only under some I/O timing. A program that relies on the FIFO itself (for example, "after
``sleep(0)`` every task made ready before me has run") can fail here and never in plain
asyncio; such reliance breaks as soon as timing changes.

Not controlled: threads (``to_thread``, ``run_in_executor``) and real I/O. The selector is
polled without waiting; when nothing is ready and no timer is pending, ``Deadlock`` is raised.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import math
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kvstress.controlled._errors import (
    Deadlock,
    SchedulerExhausted,
    SchedulerMisbehaved,
    StepLimitExceeded,
    TimeLimitExceeded,
)
from kvstress.schedulers import Scheduler

T = TypeVar("T")

DEFAULT_MAX_STEPS = 1_000_000
"""Callbacks the loop may run at one instant of virtual time before ``StepLimitExceeded``."""

FAIRNESS_BOUND = 1_000
"""Decisions a ready task (or thread) may be passed over in a row before it runs regardless.

Strategies with strict priorities (PCT) can starve a task forever, which no real scheduler
does; code that polls until another task acts (anyio re-delivering a cancellation with
``call_soon`` until the task takes it, a spin lock) then spins forever under control though it
ends on a real loop. After this many pass-overs the starved one runs without asking the
scheduler. The choice is a function of the run so far, so replay and DFS see the same one.
"""

_PURGE_MIN_TIMERS = 100  # as in BaseEventLoop: below this, cancelled timers are left in the heap
_LOOP_INTERNALS = ("_run_once", "_ready", "_scheduled", "_stopping", "_timer_cancelled_count", "_selector")
_HANDLE_INTERNALS = ("_callback", "_run")
_missing: list[str] | None = None


def asyncio_internals_missing() -> list[str]:
    """The asyncio internals this loop drives that this Python's asyncio lacks ([] when none).

    asyncio has no public seam for choosing the next callback, so the controlled loop subclasses
    the selector loop and runs its ready queue itself; this is the one check of that reach. A
    test fails loudly when a Python release moves them; ``fuzz`` then runs async pools on
    asyncio without the controlled strategies, saying so in one line.
    """
    global _missing
    if _missing is None:
        loop = asyncio.SelectorEventLoop()
        try:
            handle = loop.call_soon(lambda: None)
            _missing = [name for name in _LOOP_INTERNALS if not hasattr(loop, name)]
            _missing += [f"Handle.{name}" for name in _HANDLE_INTERNALS if not hasattr(handle, name)]
        finally:
            loop.close()
    return _missing


class ControlledEventLoop(asyncio.SelectorEventLoop):
    """An event loop for one execution of ``scheduler``; see the module docstring.

    Creating the loop starts the execution (``scheduler.new_execution()``) and raises
    ``SchedulerExhausted`` when there is none left. ``max_steps`` bounds the callbacks run at one
    instant of virtual time (``StepLimitExceeded``: a spin never lets time move); ``max_time``
    (virtual seconds from the start, None: unbounded) bounds time itself (``TimeLimitExceeded``).
    ``start_time`` is where virtual time starts, in seconds.

    ``steps`` counts callbacks run and ``decisions`` the times the scheduler was asked.
    """

    # BaseEventLoop's internals that this loop drives; typeshed does not declare them.
    _ready: collections.deque[asyncio.Handle]
    _scheduled: list[asyncio.TimerHandle]
    _stopping: bool
    _timer_cancelled_count: int
    _selector: selectors.BaseSelector
    _process_events: Callable[[list[tuple[selectors.SelectorKey, int]]], None]

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        start_time: float = 0.0,
        max_time: float | None = None,
    ) -> None:
        super().__init__()  # first: BaseEventLoop.__del__ needs its fields even if we raise below
        try:
            _check_options(max_steps, start_time)
            if not scheduler.new_execution():
                raise SchedulerExhausted(f"{type(scheduler).__name__} has no execution left to run")
        except BaseException:
            self.close()
            raise
        self.scheduler = scheduler
        self.max_steps = max_steps
        self.steps = 0
        self.decisions = 0
        self.max_time = max_time
        self._now = self._start = float(start_time)
        self._budget = max_steps
        # Invariant: lane ids are never reused; a task's entry goes when it is done.
        self._lanes: dict[asyncio.Future[Any], int] = {}
        self._next_lane = 1
        self._current: int | None = None
        self._scheduler_failed = False
        self._starved: dict[int, int] = {}  # ready lane -> decisions it was passed over in a row

    def time(self) -> float:
        """Virtual time in seconds: moves only when nothing is ready, to the next timer."""
        return self._now

    def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        """Create a task and give it the next lane id (creation order is stable per run)."""
        task = super().create_task(coro, **kwargs)
        self._lane_of_task(task)
        return task

    def run_forever(self) -> None:
        """Run until ``stop()``, at most ``max_steps`` callbacks per instant of virtual time."""
        self._budget = self.max_steps
        super().run_forever()

    def _run_once(self) -> None:
        ready = self._ready
        if self._scheduled:
            self._fire_due_timers()
        if not ready:
            if self._stopping:
                return
            self._idle()
            return  # the timers or I/O just made ready are run from the next iteration
        if self._budget <= 0:
            culprit = next((t.get_name() for t, lane in self._lanes.items() if lane == self._current), None)  # type: ignore[attr-defined]
            raise StepLimitExceeded(
                f"the controlled loop ran {self.max_steps} callbacks at virtual time {self._now:g} s "
                f"without time moving: a livelock or a spin (task {culprit!r} ran last), or a longer "
                "program (pass a larger max_steps)",
                culprit,
            )
        handle = self._choose(ready)
        if handle is None:
            return
        self._budget -= 1
        self.steps += 1
        handle._run()
        owner = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
        if isinstance(owner, asyncio.Task) and owner.done():
            self._lanes.pop(owner, None)

    def _choose(self, ready: collections.deque[asyncio.Handle]) -> asyncio.Handle | None:
        """Take the oldest handle of the lane the scheduler picks (None: look again)."""
        if self._scheduler_failed:
            handle = ready.popleft()
            return None if handle.cancelled() else handle
        heads = self._lane_heads(ready)
        if heads is None:
            return None
        lane = next(iter(heads)) if len(heads) == 1 else self._ask_fairly(sorted(heads))
        self._current = lane
        index = heads[lane]
        if index == 0:
            return ready.popleft()
        handle = ready[index]
        del ready[index]
        return handle

    def _lane_heads(self, ready: collections.deque[asyncio.Handle]) -> dict[int, int] | None:
        """Each ready lane -> the index of its oldest handle; None after dropping cancelled handles."""
        heads: dict[int, int] = {}
        for index, handle in enumerate(ready):
            if handle.cancelled():
                for dead in [handle for handle in ready if handle.cancelled()]:
                    ready.remove(dead)
                return None  # the indexes moved
            lane = self._lane_of(handle)
            if lane not in heads:
                heads[lane] = index
        return heads

    def _ask_fairly(self, runnable: list[int]) -> int:
        starved = self._starved
        overdue = [lane for lane in runnable if starved.get(lane, 0) >= FAIRNESS_BOUND]
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

    def _lane_of(self, handle: asyncio.Handle) -> int:
        # A task's steps and wake-ups are its bound methods; anything else is a plain callback.
        owner = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
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

    def _idle(self) -> None:
        """Nothing is ready: take finished I/O, else jump to the next timer, else it is a deadlock."""
        events = self._selector.select(0)
        if events:
            self._process_events(events)
            return
        scheduled = self._scheduled
        while scheduled and scheduled[0].cancelled():
            self._pop_timer()
        if not scheduled:
            raise Deadlock(self._deadlock_message())
        when = scheduled[0].when()
        if self.max_time is not None and when > self._start + self.max_time:
            raise TimeLimitExceeded(
                f"virtual time would pass {self.max_time:g} s (next timer at {when:g} s): something "
                "keeps waiting or polling long past every timeout it was given"
            )
        if when > self._now:
            self._now = when
            self._budget = self.max_steps  # the step bound is per instant: time moved
        self._fire_due_timers()

    def _fire_due_timers(self) -> None:
        scheduled = self._scheduled
        if len(scheduled) > _PURGE_MIN_TIMERS and 2 * self._timer_cancelled_count > len(scheduled):
            self._purge_cancelled_timers()
        now = self._now
        while scheduled and scheduled[0].when() <= now:
            timer = self._pop_timer()
            if not timer.cancelled():
                self._ready.append(timer)

    def _pop_timer(self) -> asyncio.TimerHandle:
        timer = heapq.heappop(self._scheduled)
        timer._scheduled = False  # type: ignore[attr-defined]  # so a late cancel() is not counted
        if timer.cancelled():
            self._timer_cancelled_count -= 1
        return timer

    def _purge_cancelled_timers(self) -> None:
        # A run full of cancelled timeouts would otherwise keep every one until its far-off time.
        live = []
        for timer in self._scheduled:
            if timer.cancelled():
                timer._scheduled = False  # type: ignore[attr-defined]
            else:
                live.append(timer)
        heapq.heapify(live)
        self._scheduled[:] = live
        self._timer_cancelled_count = 0

    def _deadlock_message(self) -> str:
        waiting = sorted(
            f"{self._lanes.get(task, '?')} {task.get_name()!r}" for task in asyncio.all_tasks(self)
        )
        shown = ", ".join(waiting[:8]) + (f" and {len(waiting) - 8} more" if len(waiting) > 8 else "")
        return (
            f"deadlock at virtual time {self._now:g}: no callback is ready and no timer is pending, "
            f"so nothing can wake the {len(waiting)} waiting tasks ({shown or 'none'}); a lost "
            "wake-up, or a wait on real I/O or a thread, which the controlled loop does not wait for"
        )


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
) -> T:
    """Run ``main()`` as one execution of ``scheduler`` with ``asyncio.Runner``; return its result.

    Raises what ``main`` raises, or ``SchedulerExhausted`` when the scheduler has no execution
    left (then ``main`` is never called).
    """
    factory = controlled_loop_factory(scheduler, max_steps=max_steps, max_time=max_time)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.get_loop()  # create the loop (and start the execution) before main() exists
        return runner.run(main())
