"""Work a controlled asyncio loop hands to a thread, run at a point its scheduler picks.

A call out to a thread (``run_in_executor``, ``asyncio.to_thread``, ``anyio.to_thread.run_sync``)
used to run in real time beside the loop: where its result came back among the tasks' steps, and
where its writes to shared memory fell between them, changed from run to run. A schedule that
failed could then not be replayed (a blind user's serving loop with its decode step in a thread:
2 of 11 replays followed their schedule).

So each such call is a lane of its own, as a task is: ready from the moment it is handed over,
and run when the scheduler picks it. While it runs (a *window*) the loop waits for it, and the
thread runs until its next scheduling point:

- it hands something to the loop (``call_soon_threadsafe``): its result once it has returned,
  which ends the work; before that (``anyio.from_thread.run_sync``, a progress report), it waits
  at its gate until the loop has run what it handed over (``calling_back``), and is then ready
  again: what it asked the loop for is there when its next window begins;
- it sleeps (``time.sleep`` in a module whose clock the run controls): a sleep on the loop's
  virtual clock, as ``asyncio.sleep`` is; the lane is ready again when the loop's time comes to
  its end (``sleep(0)`` yields at once);
- it parks on something else (a lock, a queue, a real timed wait the loop may be needed to end),
  or does not come back within ``WINDOW_BOUND_S``: it is set loose.

Work set *loose* runs on in real time beside the loop, as before (the loop counts it, and virtual
time follows real time until it is back): the run is still correct, only its timing is no longer
the schedule's. A thread's work between two scheduling points takes no virtual time, as a task's
step takes none.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from kvstress.controlled._foreign import GATED_THREADS, PARKED_STATES, _sample

try:
    import resource
except ImportError:  # not on Windows
    _RUSAGE_THREAD: int | None = None
else:
    _RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)  # Linux only

WINDOW_POLL_S = 0.002
"""Real seconds between two looks at a window's thread: parked (no CPU time since the look
before, and asleep in the kernel) twice in a row, it is set loose."""
SLEPT_CREDIT_MIN_S = 3e-4
"""Real seconds a thread must have slept in a window (waited on a lock, a condition, a real
timer: not on a CPU nor for one) before the run's clock is moved on by the window's real time:
a real timed wait in the thread takes its time on the run's clock too (a pool's 0.5 ms wait in
a worker answered None after 0 s of virtual time: a false timeout-early). Below it are the
interpreter lock's hand-overs (0.1 ms seen under load), which would make virtual time differ
from run to run. The harness's own timeouts are 0 or at least 0.5 ms."""
ARRIVAL_S = 0.05
"""Real seconds a window waits for its call's thread to begin before it gives the turn back
(``Why.STALLED``): an executor whose workers are all held by calls asleep in their windows
starts the next call only when one of them is done. The call waits, not ready, until another
call is done (or, with nothing else to run, until its thread begins); its thread waits at its
gate meanwhile, so it still runs at the schedule's choice (each such call cost a second of
real time, set loose at ``WINDOW_BOUND_S``, a blind user's)."""
WINDOW_BOUND_S = 1.0
"""Real seconds a window may last before its thread is set loose (one that never starts: its
executor is full of other work; one that computes or spins that long)."""
STUCK_S = 1.0
"""Real seconds a thread waits at its gate while the loop's thread stays inside one callback of
the code's own (blocked there: ``executor.shutdown(wait=True)`` as a ``with`` block ends, a
``join``) before it lets itself loose: the loop cannot give it its turn, and what blocks the
loop may be waiting for this very thread."""
GATE_LOOK_S = 0.1  # real seconds between two looks at the loop, from a thread at its gate
ANSWER_LOOK_S = 0.01  # the same, for a thread waiting for a callback it handed the loop
ANSWER_STUCK_S = 0.05
"""Real seconds the loop may spend inside a callback a gated thread handed it before the
thread lets itself loose (``GatedWork.resume``)."""


class WorkState(enum.Enum):
    QUEUED = "queued"  # a lane, waiting for the scheduler (or for the end of its sleep)
    RUNNING = "running"  # in its window: the loop waits for it
    LOOSE = "loose"  # runs beside the loop, in real time
    DONE = "done"  # its result is with the loop


class Why(enum.Enum):
    """What ended a window."""

    POSTED = "posted"
    CALLED_BACK = "called back"  # it handed the loop a callback before its result (``calling_back``)
    SLEEP = "sleep"
    STALLED = "stalled"  # its thread did not begin: no free worker


class GatedWork:
    """One call out to a thread, run by the scheduler's choice (see the module docstring).

    Invariants: the thread runs the work's function only while the work is RUNNING or LOOSE;
    ``_turn`` gets one release per window (and one when set loose); ``ident`` is set once the
    thread has begun."""

    def __init__(self, loop: object, name: str, clock: Callable[[], float] | None = None) -> None:
        self.loop = loop
        self.name = name
        self.clock = clock  # the run's clock, as the thread reads it (``time_elsewhere``)
        self.lane: int | None = None  # given when the call is handed over
        self.state = WorkState.QUEUED
        self.ident: int | None = None
        self.native_id: int | None = None
        self.returned = False  # the function has returned (or raised)
        self.why: Why | None = None
        self.sleep_for = 0.0
        self.post_returned = False  # whether the function had returned when it last posted
        self.counted = False  # set loose and counted as out by its host (a trio run's count)
        self.abandoned = False  # its caller stopped waiting for it (cancelled)
        self._real_sleep = True  # set loose in a sleep: the thread sleeps it out for real
        self.window_began = 0.0  # real time the last window began (``perf_counter``)
        self.slept = 0.0  # real seconds the thread slept in its last window (``_Segment``)
        self.ran_for = 0.0  # real seconds from its turn to its scheduling point, that window
        self.held = 0.0  # real seconds the loop's thread spent looking at it, that window
        self.waited = False  # its thread waited with a timeout that window (``timed_wait``)
        self._segment: _Segment | None = None
        self._turn = threading.Semaphore(0)
        self.arrived = threading.Event()  # the thread has begun the call (waits for its turn)
        # Where the loop's thread is: a mark that stays the same while it is stuck in one
        # callback of the code's own, None while it is not in one (``_wait_turn``).
        self.loop_mark: Callable[[], object] | None = None
        self.on_arrival: Callable[[], None] | None = None
        # The host, as a callback the thread handed it in a window runs: it runs it (the call)
        # and gives the work its next window once the thread's answer is there.
        self.answer_via: Callable[[GatedWork, Callable[[], Any]], Any] | None = None
        self.answer_due = False  # its window ended at a callback the loop has not run yet
        self._answer_began: float | None = None  # real time the loop began running that callback
        self._back = threading.Event()
        self._mutex = threading.Lock()  # the state's changes by the thread and by the loop

    # -- the thread's side ----------------------------------------------------------------------

    def wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func``, run at this work's first window."""

        def gated(*args: Any, **kwargs: Any) -> Any:
            self.ident, self.native_id = threading.get_ident(), threading.get_native_id()
            with _lock:
                _works[self.ident] = self
                GATED_THREADS.add(threading.current_thread())
            self.arrived.set()
            if self.on_arrival is not None:
                self.on_arrival()
            self._wait_turn()
            self._segment = _Segment()
            try:
                return func(*args, **kwargs)
            finally:
                self.returned = True

        return gated

    def calling_back(self, callback: Callable[..., Any]) -> Callable[..., Any] | None:
        """In the thread, about to hand the loop ``callback`` before its function has returned
        (``anyio.from_thread.run_sync``, trio's ``from_thread``, a progress report): what to queue
        instead, so that the work's next window comes once the loop has run it (``answer_via``);
        None outside a window (queue ``callback`` itself). Pass ``calls_back=True`` to
        ``posted`` then, and call ``resume`` after waking the loop."""
        if self.state is not WorkState.RUNNING or self.returned or self.answer_via is None:
            return None

        @functools.wraps(callback)
        def answering(*args: Any) -> Any:
            with self._mutex:
                due, self.answer_due = self.answer_due, False
            if not due or self.answer_via is None:  # the work was set loose as it posted
                return callback(*args)
            self._answer_began = time.perf_counter()
            try:
                return self.answer_via(self, functools.partial(callback, *args))
            finally:
                self._answer_began = None

        return answering

    def posted(self, calls_back: bool = False) -> bool:
        """The thread handed the loop a callback (already queued): the window ends. Once the
        function has returned this was its result. Before, the thread waits for its next turn
        when the callback is ``calling_back``'s (True: call ``resume``), else it goes on loose."""
        with self._mutex:
            if self.state is WorkState.RUNNING:
                self.why, self.post_returned = Why.POSTED, self.returned
                if calls_back and not self.returned:
                    self.why = Why.CALLED_BACK
                    self.answer_due = True
                self._end_segment()
                self._back.set()
                return self.why is Why.CALLED_BACK
            if self.state is WorkState.LOOSE and self.returned:
                self.state = WorkState.DONE
                self._forget()
            return False

    def resume(self) -> None:
        """In the thread, after ``posted`` said so: wait for the next window, or let itself loose
        once the loop has been inside the callback for ``ANSWER_STUCK_S`` (blocked there: on a
        lock this thread holds, as a fire-and-forget post made holding it leaves it)."""
        while not self._turn.acquire(timeout=ANSWER_LOOK_S):
            began = self._answer_began
            if began is not None and time.perf_counter() - began >= ANSWER_STUCK_S and self._let_loose():
                break
        self._segment = _Segment()

    def pause(self, seconds: float) -> bool:
        """A sleep in the window: the loop takes it on its own clock; False when the work is not
        in a window (the caller sleeps for real)."""
        with self._mutex:
            if self.state is not WorkState.RUNNING:
                return False
            self.why, self.sleep_for = Why.SLEEP, seconds
            self._end_segment()
            self._back.set()
        self._wait_turn()
        self._segment = _Segment()
        now: WorkState = self.state  # another thread's doing since the check above
        if now is WorkState.LOOSE and self._real_sleep:
            time.sleep(seconds)  # set loose in its sleep: the sleep is real again
        return True

    def _wait_turn(self) -> None:
        """Wait for the loop to give this call its turn, or let it loose (``STUCK_S``)."""
        mark_of = self.loop_mark
        if mark_of is None:
            self._turn.acquire()
            return
        seen: object = None
        since = time.perf_counter()
        while not self._turn.acquire(timeout=GATE_LOOK_S):
            mark, now = mark_of(), time.perf_counter()
            if mark is None or mark != seen:
                seen, since = mark, now
            elif now - since >= STUCK_S and self._let_loose():
                return

    def _let_loose(self) -> bool:
        """In the thread, waiting for a turn the loop cannot give: run on loose, unless a turn
        was given meanwhile (False: take it)."""
        with self._mutex:
            if self.state is not WorkState.QUEUED:
                return False
            self.state, self._real_sleep = WorkState.LOOSE, True
            return True

    def _end_segment(self) -> None:
        """In the thread, at a scheduling point: how long it slept since its turn began."""
        segment, self._segment = self._segment, None
        self.ran_for, self.slept = segment.end() if segment is not None else (0.0, 0.0)

    def credit(self) -> float:
        """Real seconds the run's clock moves for the window that just ended: all of its real
        time, wake-up included, when the thread slept ``SLEPT_CREDIT_MIN_S`` or more in it (a
        real timed wait, which takes its time on the run's clock too); else none. Unless its
        thread waited on a ``threading.Condition`` with a timeout (``waited``), the time the
        loop's thread spent looking at it does not count (``held``: the thread may have waited
        for the interpreter lock that long, the loop's CPU taken by a loaded machine)."""
        slept = self.slept if self.waited else self.slept - self.held
        return self.ran_for if slept >= SLEPT_CREDIT_MIN_S else 0.0

    def _forget(self) -> None:
        with _lock:
            if self.ident is not None and _works.get(self.ident) is self:
                del _works[self.ident]

    # -- the loop's side ------------------------------------------------------------------------

    def run_window(self) -> Why | None:
        """Let the thread run to its next scheduling point and wait for it (see the module
        docstring); None when it was set loose instead (``loosen`` is then the caller's)."""
        self.why, self.slept, self.ran_for, self.held, self.waited = None, 0.0, 0.0, 0.0, False
        self.window_began = 0.0  # none yet: a call that let itself loose is credited from now
        if not self.arrived.wait(ARRIVAL_S):
            return Why.STALLED  # the turn is kept: its thread waits at its gate when it begins
        self._back.clear()
        with self._mutex:
            if self.state is not WorkState.QUEUED:
                return None  # it let itself loose (or is done since): ``_wait_turn``
            self.state = WorkState.RUNNING
        self._turn.release()
        began = self.window_began = time.perf_counter()
        parked = 0
        last_ran: int | None = None
        while not self._back.wait(WINDOW_POLL_S):
            look = time.perf_counter()
            if self._stuck(began, parked):
                if self.loosen():
                    return None
                break  # it reached its scheduling point as it was set loose
            if self.native_id is not None:
                seen = _sample(self.native_id)
                if seen is None:
                    parked = 2  # the thread is gone
                else:
                    state, ran, _ = seen
                    parked = parked + 1 if state in PARKED_STATES and ran == last_ran else 0
                    last_ran = ran
            # This look held the interpreter lock (or waited for it): a loaded machine that takes
            # the loop's CPU meanwhile makes the thread wait for the lock, asleep but not in a
            # real wait of its own (7.7 ms seen: a correct program's dfs diverged, a blind user's).
            self.held += time.perf_counter() - look
        with self._mutex:
            why = self.why
            if why is Why.POSTED and self.post_returned:
                self.state = WorkState.DONE
                self._forget()
            elif why is Why.POSTED:
                self.state = WorkState.LOOSE  # it goes on beside the loop
                return None
            else:  # a sleep, or a callback handed over: the host queues its next window
                self.state = WorkState.QUEUED
        return why

    @staticmethod
    def _stuck(began: float, parked: int) -> bool:
        return parked >= 2 or time.perf_counter() - began > WINDOW_BOUND_S

    def loosen(self, real_sleep: bool = True) -> bool:
        """Let the thread run on its own from now on (its sleeps real again: one it is in now
        too, unless ``real_sleep`` is False, as a run ends); False when it reached a scheduling
        point meanwhile (a window's end: read ``why``)."""
        with self._mutex:
            if self.state is WorkState.RUNNING and self._back.is_set():
                return False
            if self.state in (WorkState.DONE, WorkState.LOOSE):
                return True
            self.state, self._real_sleep = WorkState.LOOSE, real_sleep
        self._turn.release()
        return True

    def abandon(self) -> None:
        """The caller stopped waiting for the call (cancelled): set loose, it is no longer
        counted as out (the count ends with the wait, as the stock loop's does)."""
        with self._mutex:
            self.abandoned = True
            if self.state is WorkState.LOOSE:
                self.state = WorkState.DONE
                self._forget()

    def drop(self) -> None:
        """An abandoned call whose thread never began (its executor dropped it, or anyio's worker
        skipped a call cancelled first): done; a thread that begins after all passes its gate."""
        with self._mutex:
            self.state = WorkState.DONE
        self._turn.release()

    @property
    def out(self) -> bool:
        """Set loose and not back yet."""
        return self.state is WorkState.LOOSE


class _Segment:
    """A thread's run from its turn to its next scheduling point, read in the thread itself:
    real time, its CPU time (``thread_time``: exact, where ``/proc``'s own count lags a running
    thread by up to a tick), its time waiting for a CPU (``/proc``, Linux; 0 elsewhere) and its
    voluntary context switches (``getrusage``, Linux). What is left is the time it slept, if it
    ever blocked: a thread that never gave up its CPU did not sleep, however far real time ran
    ahead of its CPU time (a virtual machine's CPU taken by its host: 0.3-5 ms of 1% of a busy
    machine's windows, a correct program's virtual time moved at random)."""

    __slots__ = ("cpu", "queued", "switches", "wall")

    def __init__(self) -> None:
        self.wall, self.cpu, self.queued = time.perf_counter(), time.thread_time(), _queued()
        self.switches = _blocked()

    def end(self) -> tuple[float, float]:
        """(real seconds since it began, of which slept); the wait for a CPU is read only where
        it decides whether the thread slept long enough to be credited (``GatedWork.credit``)."""
        wall, cpu = time.perf_counter() - self.wall, time.thread_time() - self.cpu
        if wall - cpu < SLEPT_CREDIT_MIN_S:
            return wall, max(0.0, wall - cpu)
        if self.switches is not None and _blocked() == self.switches:
            return wall, 0.0  # it never blocked
        return wall, max(0.0, wall - cpu - (_queued() - self.queued))


def _queued() -> float:
    """Seconds the calling thread has waited for a CPU so far (``/proc/thread-self/schedstat``'s
    second field); 0.0 where it cannot be read."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _blocked() -> int | None:
    """How often the calling thread has blocked so far (its voluntary context switches); None
    where that cannot be read (no ``RUSAGE_THREAD``)."""
    if _RUSAGE_THREAD is None:
        return None
    return resource.getrusage(_RUSAGE_THREAD).ru_nvcsw


_lock = threading.Lock()
_works: dict[int, GatedWork] = {}  # a thread's ident -> the gated work it runs now


def call_name(func: object) -> str:
    """What a call out to a thread runs, for messages: ``asyncio.to_thread``'s partial over
    ``Context.run`` names the function inside it."""
    for _ in range(8):
        if not isinstance(func, functools.partial):
            break
        inner = func.func
        if isinstance(getattr(inner, "__self__", None), contextvars.Context) and func.args:
            func = func.args[0]
        else:
            func = inner
    name = getattr(func, "__qualname__", None)
    return name if isinstance(name, str) else type(func).__name__


def work_of_this_thread() -> GatedWork | None:
    """The gated work the calling thread runs, if any."""
    return _works.get(threading.get_ident())


def timed_wait() -> None:
    """The calling thread waits with a timeout (``threading.Condition.wait``): if it runs a
    gated call, that call's window holds a real timed wait (``GatedWork.credit``)."""
    work = _works.get(threading.get_ident())
    if work is not None:
        work.waited = True


def gated_sleep(seconds: float) -> bool:
    """``time.sleep`` for a thread in a window: True when the loop took it (see ``pause``)."""
    work = _works.get(threading.get_ident())
    if work is None or work.state is not WorkState.RUNNING:
        return False
    if not isinstance(seconds, int | float) or seconds != seconds or seconds < 0:
        return False  # the real sleep raises for it
    return work.pause(float(seconds))
