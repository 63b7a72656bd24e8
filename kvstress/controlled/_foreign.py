"""Threads the code under test starts for itself, and whether one of them is working now.

A pool may zero its released blocks on a thread of its own (a reset worker fed by a
``queue.Queue``) that offers each back on the loop with ``call_soon_threadsafe`` or
``run_coroutine_threadsafe``. The controlled loop runs on virtual time and cannot see into that
thread: with nothing ready it moved time on at once, a quiet check waited out its settle bound
in no real time at all, and a correct pool was reported as losing the block (a blind sweep's
design). So a thread started while a controlled loop exists is watched (``ThreadWatch``; seen in
``threading.enumerate()``, no patch of ``Thread.start``), and an idle loop does not move virtual
time while one is at work:
it waits in real time, as a real loop's clock would run on meanwhile.

"At work" is read from the kernel (Linux's ``/proc``; elsewhere no thread is ever seen at work,
and time moves on as before): a thread is at work when it is running or runnable (state ``R``,
or ``D``, in the kernel), or when it has run since it was last seen parked, until it has been
seen to take no CPU time at all for ``STILL_S`` while the loop's thread waited without the
interpreter lock. A thread that waits on a lock, a condition, a queue, a selector or a sleep is
parked: the kernel has put it to sleep and it takes no CPU time. A thread that waits for the
interpreter lock sleeps too, and takes no CPU time while the loop's thread runs steps: judged by
two looks with steps between them, it read as parked with its work in hand (a correct pool's
reset thread, then a lost wake-up, once in a CI run). Stillness counts only while the loop's thread
waits, so such a thread takes the lock meanwhile, runs, and is seen.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from kvstress._load import STARVED_CAP as STARVED_CAP
from kvstress._load import schedstat

PARKED_STATES = frozenset(b"STtZXPI")
"""Kernel thread states of a thread that is not running and not about to (sleeping, stopped,
dead, parked, idle). ``R`` (running or runnable) and ``D`` (in an uninterruptible wait: disk
I/O, a device) count as at work."""

STILL_S = 2e-4
"""How long a thread that has run must take no CPU time, while the loop's thread waits without
the interpreter lock, before it counts as parked: one waiting for the lock gets it as soon as the
loop's thread lets go, and runs. Short, because a thread that wakes more often than this (a
housekeeping thread's poll) reads as at work, and the idle loop waits for it in real time until
it is let be (``SUBMITTED_WAIT_S``)."""

_TASKS = "/proc/self/task"

GATED_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
"""The threads that have run a call the run gates (``kvstress.controlled._gated``: an
executor's or anyio's worker): never watched. Their gated work runs in windows the loop waits
for, and between calls such a worker only goes back to its queue: watched, it was seen at work
as it did, and an idle loop let virtual time follow real time for it (a run's timers then fired
at other points from one run to the next, and dfs diverged). The threads themselves, not their
idents: the OS gives a dead thread's ident to a new one (a pool's own reset thread, then not
watched, was called a deadlock)."""

_adopted: Callable[[], Iterable[threading.Thread]] = tuple
"""The threads, started before it, that a loop made now watches too (``adopting``)."""


@contextmanager
def adopting(threads: Callable[[], Iterable[threading.Thread]]) -> Iterator[None]:
    """Loops made inside watch ``threads()`` (read as each loop is made) as if started since: the
    code's own threads started earlier (a pytest fixture's pool, built before the loop that runs
    the test, starts its reset worker in its constructor)."""
    global _adopted
    outer, _adopted = _adopted, threads
    try:
        yield
    finally:
        _adopted = outer


def watching_possible() -> bool:
    """Whether this platform shows threads' states and CPU times (``/proc/self/task``)."""
    return os.path.isdir(_TASKS)


def _sample(native_id: int) -> tuple[int, int, int] | None:
    """(state byte, CPU nanoseconds so far, nanoseconds spent waiting for a core so far) of a
    thread of this process; None once it is gone."""
    try:
        with open(f"{_TASKS}/{native_id}/stat", "rb") as stat:
            line = stat.read()
    except OSError:
        return None
    times = schedstat(native_id)
    # "pid (comm) S ...": the name may hold spaces and parentheses, the state follows the last ")".
    end = line.rfind(b")")
    if times is None or end < 0 or end + 2 >= len(line):
        return None
    return line[end + 2], *times


class ThreadWatch:
    """The threads started since one loop was made, and what each last showed.

    Invariant: per watched thread, ``_ran`` holds the CPU time it had when last looked at,
    ``_parked`` the CPU time it had when it was last found parked (absent: never, or it ran
    since it was), and ``_still_for`` how long it has taken no CPU time while the loop's thread
    waited without the interpreter lock (the time between looks with steps between them does
    not count: a thread waiting for the lock takes no CPU time then either). A thread is
    dropped once it has ended (or let be). ``_known`` is every thread seen so far: those alive
    as the loop was made are never watched (a pool of an earlier run, pytest's), unless adopted
    (``adopting``).
    """

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._ran: dict[threading.Thread, int] = {}
        self._parked: dict[threading.Thread, int] = {}
        self._still_for: dict[threading.Thread, float] = {}
        self._looked: float | None = None  # real time of the last look
        self._queued: dict[threading.Thread, int] = {}  # ns waiting for a core, at the last look
        self._starved = 0.0  # seconds the least-starved thread at work waited for a core, last look
        # Since the last look that found no thread at work (or ``restart``): real seconds in
        # which a thread at work could run (``at_work_within``), and when that began.
        self._busy_for: float | None = None
        self._busy_since = self._busy_looked = 0.0
        self._enabled = watching_possible()
        self._known: set[threading.Thread] = (
            set(threading.enumerate()).difference(_adopted()) if self._enabled else set()
        )

    def look_for_new(self) -> None:
        """Watch the threads started since the last look (the code's own: a reset worker)."""
        if not self._enabled:
            return
        for thread in threading.enumerate():
            if thread not in self._known:
                self._known.add(thread)
                if thread is not threading.current_thread():
                    self._threads.append(thread)
        if GATED_THREADS and self._threads:
            self._threads = [thread for thread in self._threads if thread not in GATED_THREADS]

    def ignore(self, thread: threading.Thread) -> None:
        """Never watch ``thread`` (a controlled thread's own OS thread)."""
        self._known.add(thread)

    def names(self) -> tuple[str, ...]:
        """The names of the watched threads still alive, sorted (for a message)."""
        self.look_for_new()
        return tuple(sorted(thread.name for thread in self._threads if thread.is_alive()))

    def let_be(self) -> None:
        """Stop watching the threads at work now: each has worked for ``SUBMITTED_WAIT_S`` on
        end (a thread that spins or polls for the pool's whole life), and an idle loop would
        otherwise wait that long at every turn."""
        self._threads = [thread for thread in self._threads if not self._at_work_now(thread)]

    def _at_work_now(self, thread: threading.Thread) -> bool:
        seen = _sample(thread.native_id) if thread.native_id is not None else None
        return seen is not None and (seen[0] not in PARKED_STATES or self._ran.get(thread) != seen[1])

    def __bool__(self) -> bool:
        return bool(self._threads)

    def at_work(self, first: bool = True) -> bool:
        """Whether a watched thread is working now (see the module's docstring). ``first``: the
        loop's thread may have run steps since the last look; ``first=False``: it has waited
        without the interpreter lock since, and that wait counts toward a thread's stillness.
        Costs two small reads of ``/proc`` per watched thread."""
        now = time.perf_counter()
        waited = 0.0 if first or self._looked is None else now - self._looked
        self._looked = now
        busy = False
        starved: float | None = None
        for thread in list(self._threads):
            if thread in GATED_THREADS:
                self._forget(thread)  # became a gated call's worker since the last look
                continue
            seen = _sample(thread.native_id) if thread.native_id is not None else None
            if seen is None or not thread.is_alive():
                self._forget(thread)
                continue
            state, ran, queued = seen
            moved = self._ran.get(thread) != ran
            self._ran[thread] = ran
            waited_for_core = (queued - self._queued.get(thread, queued)) / 1e9
            self._queued[thread] = queued
            if state not in PARKED_STATES or moved:
                self._parked.pop(thread, None)
                self._still_for[thread] = 0.0
                busy = True
                starved = waited_for_core if starved is None else min(starved, waited_for_core)
            elif self._parked.get(thread) == ran:
                continue  # found parked before, and has not run since
            else:
                still = self._still_for.get(thread, 0.0) + waited
                self._still_for[thread] = still
                if still >= STILL_S:
                    self._parked[thread] = ran
                else:
                    busy = True
                    starved = 0.0
        self._starved = starved or 0.0
        return busy

    def at_work_within(self, limit: float, first: bool = True) -> bool:
        """``at_work``, for ``limit`` seconds at most: once a thread has been seen at work at
        every look for longer (since the last look that found none, or ``restart``), the threads
        at work are let be (``let_be``) and this is False. A host's idle wait for the code's own
        thread uses it, so that a thread that polls or spins for the pool's whole life holds an
        idle run up once, not at every turn. The time a thread at work spent waiting for a core
        does not count (up to ``STARVED_CAP`` times ``limit`` of real time): starved on a loaded
        machine, a correct pool's reset thread was let be with a block in hand (``lost-block``)."""
        if not self.at_work(first):
            self._busy_for = None
            return False
        now = time.perf_counter()
        if self._busy_for is None:
            self._busy_for, self._busy_since, self._busy_looked = 0.0, now, now
            return True
        self._busy_for += max(0.0, now - self._busy_looked - self._starved)
        self._busy_looked = now
        if self._busy_for > limit or now - self._busy_since > limit * STARVED_CAP:
            self.let_be()
            self._busy_for = None
            return False
        return True

    def restart(self) -> None:
        """Count ``at_work_within``'s limit from the next look on (a new wait of the host's)."""
        self._busy_for = None

    def _forget(self, thread: threading.Thread) -> None:
        self._threads.remove(thread)
        self._ran.pop(thread, None)
        self._queued.pop(thread, None)
        self._parked.pop(thread, None)
        self._still_for.pop(thread, None)


class OffersDue:
    """The blocks a run expects back from the code's own thread (``expect_offer`` on the
    controlled loop and on trio's gates): a released block the harness saw RELEASING as its
    release returned comes back while ``pending()`` is True, until ``within`` more seconds of
    the run's clock at most. While one is due, an idle run waits for it in real time, its clock
    following, as for a thread at work; each host decides what that wait is."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._offers: list[tuple[Callable[[], bool], float]] = []  # (pending, until)

    def expect(self, pending: Callable[[], bool], within: float) -> None:
        self._offers.append((pending, self._now() + within))

    def due(self, at_work: Callable[[], bool] | None = None) -> bool:
        """Whether an offer expected is still due: pending, and in time. ``at_work``: whether a
        thread of the code's own is at work now, asked when an offer is done or late: while one
        is, every offer stays due (the host bounds how long), as the thread may have the block
        in hand, working on it, or runnable and waiting for a core, even past the block's
        leaving RELEASING (a thread that marks it FREE, then hands it back)."""
        if not self._offers:
            return False
        now = self._now()
        offers = [(pending, until) for pending, until in self._offers if now < until and pending()]
        if len(offers) < len(self._offers) and at_work is not None and at_work():
            return True
        self._offers = offers
        return bool(offers)

    def clear(self) -> None:
        self._offers.clear()

    def __bool__(self) -> bool:
        return bool(self._offers)


def outside_threads_watched() -> bool:
    """Whether the controlled run in progress here (a controlled loop running in this thread, or
    the thread baton) watches a thread it does not control: one the code started, whose waits
    keep real time (a pool's allocator thread timing waiters out with ``queue.get(timeout=)``,
    anyio's blocking portal). A timeout such a thread keeps passes in real time while the run's
    clock may stand still: an acquire judged early on virtual time alone was a false
    ``timeout-early`` on correct pools (a blind user's)."""
    import asyncio

    from kvstress.controlled._baton import active_controller

    controller = active_controller()
    watch: ThreadWatch | None = getattr(controller, "thread_watch", None) if controller is not None else None
    if watch is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        watch = getattr(loop, "thread_watch", None)
    if not isinstance(watch, ThreadWatch):
        return False
    watch.look_for_new()
    return bool(watch)
