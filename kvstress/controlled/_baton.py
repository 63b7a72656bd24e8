"""The baton: real threads, one running at a time, the scheduler choosing which, on virtual time.

Every controlled thread is a real OS thread that parks on its own lock whenever it does not
hold the baton. At a *scheduling point* (a line of a traced module, the store of a
read-modify-write inside one line: see ``rmw_points``, or a cooperative primitive: see
``_coop``) the running thread asks the scheduler which runnable thread goes next and, if it
is another, releases that thread's lock and parks on its own. So exactly one controlled thread
runs at any time and the order is the scheduler's, decision by decision.

A thread blocked in a cooperative primitive is not runnable until the primitive wakes it or its
deadline passes. Time is virtual: ``now`` moves when no thread is runnable, and then jumps to
the earliest deadline. A scheduler with ``fires_timers`` (random) may also pick a *sleeping*
thread due within ``FIRE_HORIZON`` while others are runnable (or any timed wait of a thread the
code under test started: a ``threading.Timer``, a reaper), until a thread has run
``EARLY_FIRE_STEPS`` at one instant: time jumps to its wake-up, as when an OS preempts the
others and the sleeper's timer fires. A poller can then wake inside another thread's window
(between offering a block and zeroing it), and a timer thread inside a release, which they
never could if time waited for every thread to block. Each thread left runnable (or blocked,
perhaps on a runnable one) through such a jump is credited the jump (``excused``): the timing
checks do not blame an operation for time it spent ready to run but not chosen. If no thread is
runnable and none has a deadline, that is a deadlock, reported with the wait-for graph.
``max_steps`` bounds the scheduling points at one instant of virtual time (a spin never lets
time move; a wait that sleeps between polls does), ``max_time`` bounds virtual time itself (a
wait that outlives every timeout), and a watchdog on the caller's thread reports a thread that
keeps the baton for ``stall_timeout`` wall seconds without reaching a scheduling point (blocked
in a real lock, a C call, an untraced spin). Whatever the program does, ``run`` returns or raises.
"""

from __future__ import annotations

import _thread
import contextlib
import dis
import gc
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection
from types import CodeType, FrameType
from typing import Any, Protocol

from kvstress._load import load_factor
from kvstress.controlled._chain import beside
from kvstress.controlled._errors import (
    SchedulerExhausted,
    SchedulerMisbehaved,
    StepLimitExceeded,
    StuckThread,
    ThreadDeadlock,
    TimeLimitExceeded,
)
from kvstress.controlled._foreign import ThreadWatch
from kvstress.controlled._loop import (
    EARLY_FIRE_STEPS,
    FAIRNESS_BOUND,
    FIRE_HORIZON,
    FOREIGN_POLL_S,
    REAL_CLOCK_HINT,
    late_offers,
)
from kvstress.controlled._quiet import quiet_lines
from kvstress.schedulers import ALL_TIMERS, Scheduler
from kvstress.schedulers._schedule import TIMER_LANE

_OS_START = threading.Thread.start

DEFAULT_THREAD_STEPS = 200_000
"""Scheduling points an execution may pass at one instant of virtual time before ``StepLimitExceeded``."""

DEFAULT_STALL_TIMEOUT = 5.0
OUTSIDE_WAIT_S = 1.0
"""Real seconds the baton waits, with no controlled thread runnable, for a thread outside the run
that is at work to wake one (``_woken_from_outside``)."""
DAEMON_HORIZON = 3600.0
"""Virtual seconds (without ``max_time``) that time may jump for daemon threads alone, while the
other threads stay blocked: past it they are deadlocked."""
_STALL_TICK = 0.25  # seconds: the most one look of the supervisor counts towards a stall
"""Wall seconds a thread may keep the baton without a scheduling point before ``StuckThread``."""

_ABORT_STEPS = 10_000  # lines an aborted thread may run while unwinding before it is aborted again

_ACTIVE: ThreadController | None = None
_ACTIVE_LOCK = threading.Lock()


class HarnessLock:
    """A real lock for kvstress's own bookkeeping (a history, a ledger), taken with ``with``.

    While a controlled thread holds one, it passes no scheduling point. Code can run inside the
    section that the section never calls: a finalizer or a weak reference's callback of the
    pool's (the garbage collector runs them wherever it starts, a dropped last reference right
    there), reaching the pool's cooperative primitives. A switch there would leave the lock held
    while another controlled thread blocks on it for real, beyond the baton's sight: a hang
    found in a correct pool. Outside a controlled run it is a plain lock.
    """

    __slots__ = ("_lock",)

    def __init__(self, *, reentrant: bool = False) -> None:
        self._lock = threading.RLock() if reentrant else threading.Lock()

    def __enter__(self) -> HarnessLock:
        me = _running()
        if me is not None:
            me.holding += 1
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        me = _running()
        if me is not None:
            me.holding -= 1


def _running() -> ControlledThread | None:
    """The controlled thread running this code, if a run is in progress and this is one."""
    controller = _ACTIVE
    return None if controller is None else controller.me()


def _collecting(phase: str, info: dict[str, Any]) -> None:
    """A ``gc.callbacks`` hook: no switch while a collection runs on a controlled thread. The
    finalizers it calls (``__del__``, weak references' callbacks: a pool that stops its worker
    when it is collected) run wherever the collection started, inside kvstress's bookkeeping or
    an earlier execution's leftovers; a switch in there is one no real scheduler makes."""
    me = _running()
    if me is not None:
        me.holding += 1 if phase == "start" else -1


class ThreadAborted(BaseException):
    """Unwinds a controlled thread once its run is over (another thread failed, or a deadlock)."""


class Waitable(Protocol):
    """What a thread can block on: it says what it is and which thread, if any, holds it."""

    def describe(self) -> str:
        """A short description for the wait-for graph, e.g. ``Lock#2 held by t1``."""

    def holder(self) -> int | None:
        """The id of the thread that must act for the waiter to go on, when one is known."""


class IoReady:
    """A wait on the outside world (a file descriptor a byte may be written to): the baton polls
    ``ready`` at every decision while a thread waits on it, and makes the thread runnable once
    it answers True. Nothing else wakes it but its deadline."""

    __slots__ = ("_what", "ready")

    def __init__(self, ready: Callable[[], bool], what: str) -> None:
        self.ready = ready
        self._what = what

    def describe(self) -> str:
        return self._what

    def holder(self) -> int | None:
        return None


class ControlledThread:
    """One controlled thread's record. Only the baton holder changes any of it.

    Invariants: ``waiting is None`` unless the thread is blocked; a blocked thread has a
    ``deadline`` (virtual seconds) or None for an untimed wait; ``finished`` is final.
    """

    __slots__ = (
        "_wake", "aborted", "daemon", "deadline", "error", "excused", "finished", "holding", "ident",
        "left", "name", "ready_since", "result", "started_by_code", "target", "tid", "timed_out",
        "waiting",
    )  # fmt: skip

    def __init__(self, tid: int, name: str, target: Callable[[], Any], daemon: bool = False) -> None:
        self.tid = tid
        self.name = name
        self.target = target
        self.daemon = daemon  # a background worker the code under test started (see _pick)
        self.started_by_code = False  # by ``Thread.start`` in the code under test
        self.ident: int | None = None
        self.waiting: Waitable | None = None
        self.deadline: float | None = None
        self.timed_out = False
        self.excused = 0.0  # virtual seconds it was runnable while time jumped for a sleeper
        # Where early timers may fire: the virtual time since which it has been runnable, run
        # or not (None while blocked; see ``_sleepers``).
        self.ready_since: float | None = None
        self.finished = False
        self.aborted = False
        # Its run ended with it unfinished (abandoned beside a stuck thread, or parked when the
        # run was cut short): no one will ever run it again.
        self.left = False
        self.holding = 0  # harness locks held (``HarnessLock``): no switch meanwhile
        self.result: Any = None
        self.error: BaseException | None = None
        self._wake = _thread.allocate_lock()
        self._wake.acquire()  # held: the thread parks on it until handed the baton

    def describe(self) -> str:
        """What a thread joining this one waits for (a ``Waitable``)."""
        return f"join({self.name})"

    def holder(self) -> int | None:
        """The thread that must act for a joiner to go on: this one, by finishing."""
        return self.tid

    @property
    def runnable(self) -> bool:
        """Neither finished nor blocked."""
        return not self.finished and self.waiting is None

    def __repr__(self) -> str:
        return f"<ControlledThread t{self.tid} {self.name!r}>"


class ThreadController:
    """One execution of a scheduler over controlled threads; see the module docstring.

    ``trace_files`` are the source files whose every line is a scheduling point. ``steps``
    counts scheduling points, ``decisions`` the times the scheduler was asked (two or more
    threads runnable) and ``switches`` the handoffs of the baton.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        trace_files: Collection[str] = (),
        max_steps: int = DEFAULT_THREAD_STEPS,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        start_time: float = 0.0,
        max_time: float | None = None,
    ) -> None:
        if type(max_steps) is not int or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r} ({type(max_steps).__name__})")
        if not isinstance(stall_timeout, int | float) or not stall_timeout > 0:
            raise ValueError(f"stall_timeout must be a number of seconds > 0, got {stall_timeout!r}")
        self.scheduler = scheduler
        self.trace_files = frozenset(trace_files)
        self._tracers: dict[CodeType, Callable[[FrameType, str, object], Any]] = {}
        self.hot = False  # the scheduling point being passed is inside a lost-update window
        self._hints = hasattr(scheduler, "hot")  # the scheduler takes the hint (PCT)
        # And parks and publications too (delay): see ``published``.
        self._broad_hints = bool(getattr(scheduler, "broad_hints", False))
        self._published = False  # a thread released a lock, a semaphore or set an event since
        self._tells_woken = hasattr(scheduler, "woken")  # and the task just woken (delay)
        # A hand-over no scheduler chose (the running thread blocked, one other could run) is
        # told to a scheduler that notes them (the report's switch points).
        self._notes_handovers = hasattr(scheduler, "handed_over")
        self._was_runnable: list[int] = []
        self._was_known = 0  # threads started by the decision before (a new one is not woken)
        self._timer_levels()
        self._late_timers = bool(getattr(scheduler, "late_timers", False))  # see ``_late_jump``
        self.max_steps = max_steps
        self.stall_timeout = float(stall_timeout)
        if max_time is not None and not (isinstance(max_time, int | float) and max_time > 0):
            raise ValueError(f"max_time must be None or a number of virtual seconds > 0, got {max_time!r}")
        self.max_time = max_time
        self.now = self._origin = float(start_time)
        self._instant_steps = 0  # scheduling points since virtual time last moved
        self.steps = 0
        self.decisions = 0
        self.switches = 0
        self.threads: list[ControlledThread] = []
        self._watch: ThreadWatch | None = None  # threads started outside the run, during it
        self.current: ControlledThread | None = None
        self.failure: BaseException | None = None
        self.aborting = False
        self._serials = 0
        self._starved: dict[int, int] = {}  # runnable thread -> decisions passed over in a row
        self._done = threading.Event()

    # -- for the cooperative primitives ------------------------------------------------------

    def me(self) -> ControlledThread | None:
        """The controlled thread running this code, or None on any other thread."""
        current = self.current
        if current is not None and current.ident == _thread.get_ident():
            return current
        return None

    def serial(self) -> int:
        """A fresh number for naming a primitive in messages (``Lock#3``)."""
        self._serials += 1
        return self._serials

    def yield_point(self) -> None:
        """A scheduling point: the scheduler may hand the baton to another runnable thread."""
        me = self.current  # self.me(), inline: this runs at every scheduling point
        if me is None or me.ident != _thread.get_ident() or me.holding:
            return
        self.steps += 1
        self._instant_steps += 1
        if self.aborting:
            if self._instant_steps > _ABORT_STEPS:
                raise ThreadAborted
            return
        if self._instant_steps > self.max_steps:
            self._fail_here(StepLimitExceeded(self._step_limit_message(me), me.name))
        nxt = self._pick(me)
        if nxt is not None and nxt is not me:  # None only once every thread finished
            self._handoff(me, nxt)

    def block(self, me: ControlledThread, waitable: Waitable, deadline: float | None) -> bool:
        """Park ``me`` on ``waitable`` until ``wake`` (True) or virtual ``deadline`` passes (False)."""
        if self.aborting:
            raise ThreadAborted
        if deadline is not None and deadline <= self.now:
            # Already due (a zero timeout): it times out at once, as in the OS, instead of
            # waiting until every other thread is blocked for time to move.
            return False
        me.waiting, me.deadline, me.timed_out = waitable, deadline, False
        nxt = self._pick(me)
        if self.aborting:  # the last foreground thread finished: a daemon unwinds
            raise ThreadAborted
        if nxt is not None and nxt is not me:
            self._handoff(me, nxt)
        return not me.timed_out

    def published(self) -> None:
        """A thread released a lock or a semaphore, or set an event: for a scheduler that takes
        broad hints (``broad_hints``), the next decision is warm (its ``warm``). Between two
        critical sections of one thread, a check made in the first goes stale before the second
        acts on it."""
        self._published = self._broad_hints

    def wake(self, thread: ControlledThread) -> None:
        """Make a blocked thread runnable again (it runs when the scheduler picks it)."""
        thread.waiting, thread.deadline = None, None

    def spawn(self, target: Callable[[], Any], name: str | None = None) -> ControlledThread:
        """Start a controlled thread running ``target()``; a scheduling point for the caller."""
        thread = self.start_thread(target, name)
        self.yield_point()
        return thread

    def start_thread(
        self,
        target: Callable[[], Any],
        name: str | None = None,
        daemon: bool = False,
        *,
        started_by_code: bool = False,
    ) -> ControlledThread:
        """``spawn`` without the scheduling point, for a caller that must record the thread before
        another thread can run (``Thread.start``). ``name=None`` names it ``t<N>``. A ``daemon``
        is a background worker: the execution ends without it (see ``_pick``).
        ``started_by_code``: the code under test started it (its timed waits may fire early,
        see ``_sleepers``)."""
        me = self.me()
        if me is None:
            raise RuntimeError("spawn() must be called from a controlled thread (inside run_threads)")
        # No switch until the thread runs: code a collection starts in here (a finalizer of the
        # pool's) could hand the baton to the new thread before its OS thread exists.
        me.holding += 1
        try:
            thread = self._start(target, name, daemon)
        finally:
            me.holding -= 1
        thread.started_by_code = started_by_code
        return thread

    # -- the execution -------------------------------------------------------------------------

    def _timer_levels(self) -> None:
        self._fires_timers = int(getattr(self.scheduler, "fires_timers", 0))  # a Schedule.timers level
        # An explored test's sleepers-only level: early timers bounded per runnable thread.
        self._bounded_sleepers = 0 < self._fires_timers < ALL_TIMERS

    def run(self, main: Callable[[], Any]) -> Any:
        """Run ``main()`` as controlled thread 0 of a new execution; return its result or raise.

        Raises what the first failing thread raised, ``ThreadDeadlock``, ``StepLimitExceeded``,
        ``StuckThread``, or ``SchedulerExhausted`` when the scheduler has no execution left.
        """
        global _ACTIVE
        if not self.scheduler.new_execution():
            raise SchedulerExhausted(f"{type(self.scheduler).__name__} has no execution left to run")
        self._timer_levels()  # a scheduler may change it per execution (PCT)
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                raise RuntimeError("another controlled thread run is in progress in this process")
            _ACTIVE = self
        # Only for the run: a hook left in every collection of the process is traced by other
        # tools too (frontrun's DPOR deadlocked inside it, in a process that imported kvstress).
        gc.callbacks.append(_collecting)
        self._watch = ThreadWatch()
        try:
            first = self._start(main, "main")
            self.current = first
            first._wake.release()
            try:
                self._supervise()
            except BaseException:  # Ctrl-C in the supervisor: unwind the threads before leaving
                self._interrupt()
                raise
        finally:
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(_collecting)
            with _ACTIVE_LOCK:
                _ACTIVE = None
            for thread in self.threads:
                thread.left = not thread.finished
        if self.failure is not None:
            raise self.failure
        return first.result

    def _start(self, target: Callable[[], Any], name: str | None, daemon: bool = False) -> ControlledThread:
        thread = ControlledThread(len(self.threads), name or f"t{len(self.threads)}", target, daemon)
        self.threads.append(thread)
        # The name the code under test gave its thread, as ``threading.current_thread().name``
        # reads it there (a log line, a per-thread registry); else one a stack dump tells apart.
        os_name = name if name and thread.tid else f"kvstress-t{thread.tid}"
        os_thread = threading.Thread(target=self._bootstrap, args=(thread,), name=os_name, daemon=True)
        if self._watch is not None:
            self._watch.ignore(os_thread)
        _OS_START(os_thread)  # the real start, even while Thread.start follows subclasses (_coop)
        return thread

    def _woken_from_outside(self) -> bool:
        """With no controlled thread runnable: while a thread outside the run is at work (a
        library's own, started during it: anyio's blocking portal runs its event loop in one),
        wait for it, up to ``OUTSIDE_WAIT_S`` of real time, to wake a controlled thread (a
        future it completes, a condition it notifies) before time moves or the run is called a
        deadlock: a correct test whose main thread waited on the portal was a deadlock at
        schedule 1 (a blind user's). Such a run is not replayed exactly. False at once where no
        such thread is at work (the usual case: nothing is started outside the run)."""
        watch = self._watch
        if watch is None:
            return False
        watch.look_for_new()
        if not watch:
            return False
        until, first = time.monotonic() + OUTSIDE_WAIT_S, True
        while watch.at_work(first) and time.monotonic() < until:
            time.sleep(FOREIGN_POLL_S)
            first = False
            if any(not t.finished and t.waiting is None for t in self.threads):
                return True
        return any(not t.finished and t.waiting is None for t in self.threads)

    @property
    def thread_watch(self) -> ThreadWatch | None:
        """The threads started outside the run while it is on (None before it starts)."""
        return self._watch

    def _outside(self) -> tuple[str, ...]:
        """The threads started since the run began that it does not control, still alive (a
        library's own: anyio's blocking portal runs its event loop in one): what a deadlock's
        message names, since a wait for one of them is a wait the schedule cannot see."""
        return () if self._watch is None else self._watch.names()

    def _bootstrap(self, me: ControlledThread) -> None:
        me.ident = _thread.get_ident()
        me._wake.acquire()
        if self.trace_files:
            sys.settrace(beside(self._trace_call, sys.gettrace()))
        try:
            if self.aborting:
                raise ThreadAborted
            me.result = me.target()
        except ThreadAborted:
            pass
        except BaseException as error:
            me.error = error
            self._record(error)
        finally:
            sys.settrace(None)
            self._finish(me)

    def _finish(self, me: ControlledThread) -> None:
        me.finished = True
        for other in self.threads:
            if other.waiting is me:  # joiners wait on the thread itself
                self.wake(other)
        if not self.aborting:
            try:
                nxt = self._pick(me)
            except ThreadAborted:
                nxt = None
            if nxt is not None and not self.aborting:
                self._pass_to(nxt)
                return
        if self.aborting:
            self._abort_next()
        else:
            self._done.set()

    def _supervise(self) -> None:
        """Wait for the execution to end; report a thread that keeps the baton without progress.

        The bound is load-aware, so a loaded machine does not turn a slow thread into a false
        hang: a stall is counted in ticks of at most ``_STALL_TICK`` (a supervisor that the OS
        did not run for a while counts only one tick for the gap), against ``stall_timeout``
        times how far the machine's cores are oversubscribed (``load_factor``).
        """
        seen, stalled, last = -1, 0.0, time.monotonic()
        while not self._done.wait(0.05):
            now = time.monotonic()
            tick, last = min(now - last, _STALL_TICK), now
            progress = self.steps + self.switches
            if progress != seen:
                seen, stalled = progress, 0.0
                continue
            stalled += tick
            if stalled > self.stall_timeout and stalled > self.stall_timeout * load_factor():
                self._report_stuck()
                return

    def _interrupt(self, grace: float = 2.0) -> None:
        """Abort the execution from outside (the supervisor was interrupted): the running thread
        unwinds at its next scheduling point and hands the baton on, until every thread has. Waits
        ``grace`` seconds at most, so that none is still inside the pool (or inside torch, whose C++
        frames abort the process when the interpreter ends a daemon thread there) at exit."""
        self.aborting = True
        self._done.wait(grace)

    def _report_stuck(self) -> None:
        holder = self.current
        frames = sys._current_frames()
        frame = frames.get(holder.ident) if holder is not None and holder.ident is not None else None
        where = "".join(traceback.format_stack(frame, limit=6)) if frame is not None else "(no stack)\n"
        self._record(
            StuckThread(
                f"thread {holder.name if holder else '?'} kept running for {self.stall_timeout:g} s "
                "without reaching a scheduling point (a real lock or I/O, a C call, or a spin "
                f"outside the traced modules); its thread is abandoned. It was at:\n{where}"
            )
        )
        self.aborting = True  # the parked threads stay parked: only the stuck one could run them

    # -- choosing and handing over -------------------------------------------------------------

    def _pick(self, me: ControlledThread) -> ControlledThread | None:
        """The thread to run next after ``me``: a scheduler choice, a time jump, or a deadlock.

        Daemon threads (background workers the code under test started: housekeeping, a reaper)
        are scheduled like any other, but the execution ends, as a Python process does, once
        every other thread has finished: the daemons left are unwound (None is returned).
        """
        # Plain loops, no comprehension: this runs at every scheduling point, and on a traced
        # thread each nested function call is a trace event too.
        runnable = []
        live = False
        now = self.now
        oldest = now  # since when the longest-runnable thread has been runnable (``_sleepers``)
        bounded = self._bounded_sleepers  # kept only where it bounds early timers
        for thread in self.threads:
            if not thread.finished:
                live = live or not thread.daemon
                waiting = thread.waiting
                if waiting is None or (type(waiting) is IoReady and waiting.ready()):
                    if waiting is not None:  # its descriptor is ready
                        thread.waiting, thread.deadline = None, None
                    runnable.append(thread.tid)
                    if bounded:
                        since = thread.ready_since
                        if since is None:
                            thread.ready_since = now
                        elif since < oldest:
                            oldest = since
                elif bounded:
                    thread.ready_since = None
        if not live:
            if not self.aborting:
                self.aborting, self._instant_steps = True, 0  # no failure: the run is over
            return None
        if not runnable and self._woken_from_outside():
            return self._pick(me)
        if not runnable:
            runnable = self._advance_time()
            oldest = self.now  # the threads it woke are runnable from now
            if bounded:
                for tid in runnable:
                    self.threads[tid].ready_since = oldest
            if not runnable:
                if all(t.finished for t in self.threads):
                    return None
                daemons_timed = any(t.deadline is not None for t in self.threads if not t.finished)
                self._fail_here(ThreadDeadlock(self.now, self._wait_for(), daemons_timed, self._outside()))
        early = self._fires_timers and self._instant_steps < EARLY_FIRE_STEPS
        sleepers = self._sleepers(oldest) if early else []
        choices = sorted(runnable + sleepers) if sleepers else runnable
        hot, self.hot = self.hot, False
        warm, self._published = self._published, False
        if self._tells_woken:
            was, self._was_runnable, woken = self._was_runnable, runnable, None
            known, self._was_known = self._was_known, len(self.threads)
            for tid in runnable:
                if tid not in was and tid != me.tid and tid < known:
                    woken = tid
                    break
        if len(choices) == 1:
            if self._notes_handovers and choices[0] != me.tid and me.waiting is not None:
                self.scheduler.handed_over(me.tid, choices[0])  # type: ignore[attr-defined]
            return self.threads[choices[0]]
        if self._hints:
            self.scheduler.hot = hot  # type: ignore[attr-defined]
        if self._broad_hints:
            self.scheduler.warm = warm  # type: ignore[attr-defined]
        if self._tells_woken:
            self.scheduler.woken = woken  # type: ignore[attr-defined]
        starved = self._starved
        tid = -1
        for other in runnable:
            if starved.get(other, 0) >= FAIRNESS_BOUND:
                tid = other
                break
        try:
            if tid < 0:
                tid = self.scheduler.next_task(choices, me.tid)
        except BaseException as error:
            self._fail_here(error)
        passed_over = {}
        for other in runnable:
            if other != tid:
                passed_over[other] = starved.get(other, 0) + 1
        self._starved = passed_over
        if tid not in choices:
            self._fail_here(
                SchedulerMisbehaved(
                    f"{type(self.scheduler).__name__}.next_task returned {tid!r}, not one of the "
                    f"threads it was offered {choices}"
                )
            )
        self.decisions += 1
        if tid in sleepers:
            self._fire(self.threads[tid])
        return self.threads[tid]

    def _sleepers(self, waiting_since: float) -> list[int]:
        """The threads whose timer is due next and may fire ahead of the runnable ones (timers
        fire in deadline order, and not past the run's time limit): a plain sleep of a thread
        not a daemon, and any timed wait (a sleep, a lock, an event, a condition, a queue) of a
        thread the code under test started, daemons included (a ``threading.Timer``, a
        reaper's tick). A harness thread's timed wait on a primitive never comes early: it
        bounds how long the harness waits for an answer. In an explored test (sleepers only),
        no timer fires early more than ``FIRE_HORIZON`` past ``waiting_since``, since when the
        longest-runnable thread has been runnable without blocking: an OS keeps a ready thread
        off the CPU for a time slice or two, and gives it a slice of its own, in which a few lines
        take microseconds. Jumps one after another, each with one step of that thread between
        them, added up to more, and a test's own assertions cannot credit them (a blind user's
        watchdog, a few lines from the end of its abort, was kept 8 ms while 2 ms sleeps kept
        ending, under a 5 ms horizon); past it, the thread runs until it blocks before time
        moves again. A pool's fuzzing keeps the horizon from now: its checks credit the jumps,
        and shadow found a late zero test on 7 of 60 seeds with chains, 2 without."""
        every = self._fires_timers >= ALL_TIMERS  # else daemons' timers keep out (``SLEEPERS``)
        timed = [
            t
            for t in self.threads
            if not t.finished and (every or not t.daemon) and t.deadline is not None and t.waiting is not None
        ]
        if not timed:
            return []
        when = min(t.deadline for t in timed if t.deadline is not None)
        past_limit = self.max_time is not None and when > self._origin + self.max_time
        # An explored test's sleepers (below ALL_TIMERS) are bounded from the longest-runnable
        # thread's start; a pool's fuzzing credits every jump to the operations it passes over
        # (``excused``), and its chains of jumps reach races the bounded ones missed (shadow).
        since = self.now if every else waiting_since
        if when - since > FIRE_HORIZON or past_limit:
            return []
        return [
            t.tid
            for t in timed
            if t.deadline == when
            and ((every and t.started_by_code) or (not t.daemon and getattr(t.waiting, "fires_early", False)))
        ]

    def _fire(self, sleeper: ControlledThread) -> None:
        """Jump to ``sleeper``'s wake-up while other threads are runnable (see the module's
        docstring), and fire every timer due by then. Each thread not in a plain sleep is
        credited the jump: a runnable one sat ready but unchosen, and a blocked one may be
        waiting for one of those (a lock's holder, a notify to come), as on an OS that preempts
        a lock holder."""
        when = sleeper.deadline
        assert when is not None
        if when > self.now:
            for thread in self.threads:
                if not thread.finished and not getattr(thread.waiting, "fires_early", False):
                    thread.excused += when - self.now
            # The step bound still counts: time moved for a timer, not because every thread
            # waited, and a spin beside a ticking background thread must still end.
            self.now = when
        for thread in self.threads:
            if thread.waiting is not None and thread.deadline is not None and thread.deadline <= self.now:
                thread.waiting, thread.deadline, thread.timed_out = None, None, True

    def _advance_time(self) -> list[int]:
        timed = [t for t in self.threads if t.waiting is not None and t.deadline is not None]
        if not timed:
            return []
        when = min(t.deadline for t in timed if t.deadline is not None)
        horizon = self._origin + (DAEMON_HORIZON if self.max_time is None else self.max_time)
        if all(t.daemon for t in timed) and when > horizon:
            # Only background workers wait on time (a housekeeping period) and past the horizon:
            # the threads of the run are blocked for good, a deadlock, not a wait past a timeout.
            return []
        if self.max_time is not None and when > self._origin + self.max_time:
            self._fail_here(
                TimeLimitExceeded(
                    f"virtual time would pass {self.max_time:g} s (the next deadline is {when:g} s): "
                    "a thread keeps waiting or polling long past every timeout it was given "
                    + REAL_CLOCK_HINT
                )
            )
        if self._late_timers:
            when = self._late_jump(when, timed)
        if when > self.now:
            self.now = when
            self._instant_steps = 0  # the step bound is per instant: time moved
        for thread in timed:
            if thread.deadline is not None and thread.deadline <= self.now:
                thread.waiting, thread.deadline, thread.timed_out = None, None, True
        return [t.tid for t in self.threads if t.runnable]

    def _late_jump(self, when: float, timed: list[ControlledThread]) -> float:
        """Where time jumps with ``late_timers`` (an explored test), as on the controlled loop:
        ``when`` (the earliest deadline), or, as the scheduler picks (``TIMER_LANE + i``), a later
        deadline within ``LATE_WINDOW`` (and the time limit), so that the waits due before it end
        late, all at once, and the scheduler orders those threads. A reaper's abort due a hair
        before a worker's last sleep ends can then come after it, inside the worker's window."""
        limit = None if self.max_time is None else self._origin + self.max_time
        offered = late_offers(when, (t.deadline for t in timed if t.deadline is not None), limit)
        if len(offered) < 2:
            return when
        lanes = [TIMER_LANE + index for index in range(len(offered))]
        try:
            lane = self.scheduler.next_task(lanes, None)
        except BaseException as error:
            self._fail_here(error)
        if lane not in lanes:
            self._fail_here(
                SchedulerMisbehaved(
                    f"{type(self.scheduler).__name__}.next_task returned {lane!r}, not one of the "
                    f"timers it was offered {lanes}"
                )
            )
        self.decisions += 1
        return offered[lane - TIMER_LANE]

    def _handoff(self, me: ControlledThread, nxt: ControlledThread) -> None:
        self._pass_to(nxt)
        me._wake.acquire()
        if self.aborting:
            raise ThreadAborted

    def _pass_to(self, nxt: ControlledThread) -> None:
        self.current = nxt
        self.switches += 1
        nxt._wake.release()

    def _abort_next(self) -> None:
        """Hand the baton to the next live thread to unwind it, or end the execution."""
        for thread in self.threads:
            if not thread.finished and not thread.aborted:
                thread.aborted = True
                self._pass_to(thread)
                return
        self._done.set()

    def _record(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
        self.aborting = True
        self._instant_steps = 0  # from here it counts the unwinding

    def _fail_here(self, error: BaseException) -> Any:
        self._record(error)
        raise ThreadAborted

    # -- messages ------------------------------------------------------------------------------

    def _wait_for(self) -> dict[str, tuple[str, str | None]]:
        """Each blocked thread -> (what it waits for, the thread that must act, if known)."""
        graph: dict[str, tuple[str, str | None]] = {}
        for thread in self.threads:
            waiting = thread.waiting
            if thread.finished or waiting is None:
                continue
            holder = waiting.holder()
            graph[thread.name] = (
                waiting.describe(),
                None if holder is None else self.threads[holder].name,
            )
        return graph

    def _step_limit_message(self, me: ControlledThread) -> str:
        frame = _outer_traced_frame(sys._getframe(1), self.trace_files)
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
        return (
            f"the controlled threads passed {self.max_steps} scheduling points at virtual time "
            f"{round(self.now, 9):g} s without time moving: a spin or a livelock (thread {me.name} was "
            f"running{where}), or, where you call run_threads yourself, a program longer than its "
            "max_steps"
        )

    # -- the trace hook ------------------------------------------------------------------------

    def _trace_call(self, frame: FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if code.co_filename not in self.trace_files:
            return None
        tracer = self._tracers.get(code)
        if tracer is None:
            tracer = self._tracers[code] = self._tracer_for(code)
        if tracer is not self._trace_line and rmw_points(code):
            frame.f_trace_opcodes = True
            frame.f_trace = tracer  # needed on 3.13 for opcode events to start in this frame
        return tracer

    def _trace_line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            self.yield_point()
        return self._trace_line

    def _tracer_for(self, code: CodeType) -> Callable[[FrameType, str, object], Any]:
        """The local trace function for ``code``: a point at each line, and at each
        read-modify-write store; points inside a lost-update window are marked hot, and inside
        a check-then-park window too for a scheduler that asks (``broad_hints``)."""
        points, hot = rmw_points(code), hot_lines(code)
        if self._broad_hints:
            hot = hot | park_lines(code)
        quiet = quiet_lines(code)
        if not points and not hot and not quiet:
            return self._trace_line
        yield_point = self.yield_point

        def trace(frame: FrameType, event: str, arg: object) -> Any:
            if event == "line":
                line = frame.f_lineno
                if line in quiet:
                    return trace  # no point: the line touches nothing another thread sees
                self.hot = line in hot
                yield_point()
            elif event == "opcode" and frame.f_lasti in points:
                self.hot = True
                yield_point()
            return trace

        return trace


_LOADS_OF = {
    "STORE_ATTR": ("LOAD_ATTR", "LOAD_METHOD"),
    "STORE_GLOBAL": ("LOAD_GLOBAL",),
    "STORE_DEREF": ("LOAD_DEREF", "LOAD_CLASSDEREF"),
    "STORE_NAME": ("LOAD_NAME",),
}
_SUBSCRIPT_STORES = ("STORE_SUBSCR", "DELETE_SUBSCR")
_rmw_cache: dict[CodeType, frozenset[int]] = {}


def rmw_points(code: CodeType) -> frozenset[int]:
    """The offsets of the stores in ``code`` that write back, in the same line, a location the
    line has read: ``self.count += 1``, ``block.refcount = max(block.refcount - 1, 0)``,
    ``counts[i] -= 1``. Each is a scheduling point of its own, just before the store.

    A line is one scheduling point, but one line can race with itself: CPython may switch
    threads between the load and the store (a free-threaded build always can; a GIL build when
    the line calls Python code, as a property or ``__iadd__`` does), and another thread's
    update in between is lost. Other stores gain nothing from a point of their own: the line's
    own point already orders them against every other thread's accesses.
    """
    found = _rmw_cache.get(code)
    if found is None:
        found = _rmw_cache[code] = _find_rmw_points(code)
    return found


def _find_rmw_points(code: CodeType) -> frozenset[int]:
    points: set[int] = set()
    line: int | None = None
    loaded: set[tuple[str, object]] = set()
    subscripted = False
    for instruction in dis.get_instructions(code):
        where = instruction.positions.lineno if instruction.positions is not None else None
        if where is not None and where != line:
            line, loaded, subscripted = where, set(), False
        name = instruction.opname
        if name == "BINARY_SUBSCR" or (name == "BINARY_OP" and instruction.argrepr == "[]"):
            subscripted = True
        elif name in _SUBSCRIPT_STORES:
            if subscripted:
                points.add(instruction.offset)
        elif name in _LOADS_OF:
            if any((load, instruction.argval) in loaded for load in _LOADS_OF[name]):
                points.add(instruction.offset)
        else:
            loaded.add((name, instruction.argval))
    return frozenset(points)


_hot_cache: dict[CodeType, frozenset[int]] = {}

MUTATORS = frozenset(
    {
        "append", "appendleft", "pop", "popleft", "popitem", "remove", "discard", "add", "clear",
        "insert", "extend", "extendleft", "update", "setdefault", "put", "put_nowait", "get_nowait",
        "rotate", "sort", "reverse", "heappush", "heappop",
    }
)  # fmt: skip
"""Method names taken for a change of the container they are called on (by name: a heuristic)."""
PARKERS = frozenset({"wait", "wait_for"})
"""Method names taken for a park: a thread waits there for another's notify (a condition's or
an event's wait)."""
_METHOD_LOADS = ("LOAD_METHOD", "LOAD_ATTR")  # 3.11 loads a method with LOAD_METHOD, 3.12 with LOAD_ATTR
_CALLABLE_LOADS = (*_METHOD_LOADS, "LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF")


def is_cas_name(name: str) -> bool:
    """Whether a callable's name reads as a compare-and-set (``cas``, ``_cas_head``,
    ``compare_and_swap``, ``compareAndSet``, ``compare_exchange``): Python has no CAS, so a
    lock-free design writes one, and names it so."""
    lowered = name.lower()
    return "compare" in lowered or "cas" in lowered.split("_")


def hot_lines(code: CodeType) -> frozenset[int]:
    """The lines of ``code`` inside a lost-update window: after a line that reads an attribute,
    up to and including a later line that stores the same attribute (``count = b.refcount`` ...
    ``b.refcount = count + 1``) or calls a mutating method on it (``if self._free:`` ...
    ``self._free.popleft()``: check-then-act), or calls a compare-and-set (``is_cas_name``:
    ``head = self._head`` ... ``self._cas_head(head, head.next)``, where a stale read makes the
    compare pass wrongly, ABA). Another thread's write in between is lost, so a scheduler that
    takes hints (PCT) spends a change point among these. A heuristic, by name: a window over
    another object's attribute of the same name is a false lead, never a false alarm."""
    found = _hot_cache.get(code)
    if found is None:
        loads: dict[str, list[int]] = {}
        stores: dict[str, list[int]] = {}
        loaded = None  # the attribute the previous instruction loaded, if it did
        for instruction in dis.get_instructions(code):
            line = instruction.positions.lineno if instruction.positions is not None else None
            name = instruction.argval if isinstance(instruction.argval, str) else None
            if line is not None and name is not None:
                if instruction.opname in _CALLABLE_LOADS and is_cas_name(name):
                    for attribute in list(loads):  # a CAS stores what was read before it
                        stores.setdefault(attribute, []).append(line)
                if instruction.opname in _METHOD_LOADS and name in MUTATORS and loaded is not None:
                    # ``self._free.popleft()``: a check of ``self._free`` before it is a window too
                    stores.setdefault(loaded, []).append(line)
                elif instruction.opname == "LOAD_ATTR":
                    loads.setdefault(name, []).append(line)
                elif instruction.opname == "STORE_ATTR":
                    stores.setdefault(name, []).append(line)
            loaded = name if instruction.opname == "LOAD_ATTR" else None
        hot: set[int] = set()
        for name, load_lines in loads.items():
            for store in stores.get(name, ()):
                first = min(load_lines)
                if first < store:
                    hot.update(range(first + 1, store + 1))
        found = _hot_cache[code] = frozenset(hot)
    return found


_park_cache: dict[CodeType, frozenset[int]] = {}


def park_lines(code: CodeType) -> frozenset[int]:
    """The lines of ``code`` inside a check-then-park window: after the first line that reads an
    attribute or calls a method, up to a ``wait`` (``block = self._scan()`` ...
    ``self._cond.wait()``), or up to the latest ``with`` on the waited object before it, from
    where a notifier is shut out until the wait. A release that lands in the window finds
    nobody parked yet, and a waiter that does not look again under the condition's lock sleeps
    beside a free block (a lost wake-up). A heuristic, by name, as ``hot_lines``; kept apart
    from it because a correct waiter's loop makes these windows in every acquire, where a
    scheduler that spends one change point among hot decisions (PCT) would spread it thinner."""
    found = _park_cache.get(code)
    if found is None:
        loaded = None  # the attribute the previous instruction loaded, if it did
        first_read: int | None = None  # the first line that reads an attribute or calls a method
        parks: list[tuple[int, str | None]] = []  # (a wait's line, the object waited on)
        entered: dict[str | None, list[int]] = {}  # the lines of each ``with self.<attribute>:``
        for instruction in dis.get_instructions(code):
            line = instruction.positions.lineno if instruction.positions is not None else None
            name = instruction.argval if isinstance(instruction.argval, str) else None
            if instruction.opname == "BEFORE_WITH" and loaded is not None and line is not None:
                entered.setdefault(loaded, []).append(line)
            elif line is not None and name is not None and instruction.opname in _METHOD_LOADS:
                if first_read is None:
                    first_read = line
                elif name in PARKERS:
                    parks.append((line, loaded))
            loaded = name if instruction.opname == "LOAD_ATTR" else None
        lines: set[int] = set()
        for park, waited in parks:
            assert first_read is not None  # a wait is noted only after it
            end = max((at for at in entered.get(waited, ()) if first_read < at <= park), default=park)
            lines.update(range(first_read + 1, end + 1))
        found = _park_cache[code] = frozenset(lines)
    return found


def active_controller() -> ThreadController | None:
    """The controller of the run in progress in this process, if any."""
    return _ACTIVE


def _outer_traced_frame(frame: FrameType | None, files: frozenset[str]) -> FrameType | None:
    while frame is not None and frame.f_code.co_filename not in files:
        frame = frame.f_back
    return frame
