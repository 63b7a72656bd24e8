"""Cooperative stand-ins for the standard library's blocking primitives, on the baton's clock.

Each has the interface and semantics of its ``threading``/``time`` namesake, but blocking hands
the baton to another controlled thread instead of parking in the OS, timeouts run on virtual
time, and every acquire or wait is a scheduling point. Releases wake every waiter, which then
race for the primitive in the scheduler's order: that covers every order the OS could choose.

Outside a controlled thread, while a run is in progress (the harness reading the pool between
steps), they behave as plain uncontended primitives: blocking there on one held by a controlled
thread would wait forever, so it raises RuntimeError instead. Once no run is in progress they
are plain primitives for real threads, blocking included (``_OUTSIDE``): a pool built during an
explored test (a session fixture first set up there) goes on working in the plain tests after
it. A lock still held by a controlled thread of a run that is over is never given up, so
blocking on it raises as well.
"""

from __future__ import annotations

import asyncio
import re
import threading as _threading
import time as _time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from kvstress.controlled._baton import ControlledThread, ThreadAborted, ThreadController, active_controller
from kvstress.controlled._loop import later

T = TypeVar("T")


_OUTSIDE = _threading.Condition(_threading.Lock())
"""Guards every primitive's state while no run is in progress, and is what real threads wait on
there: each change notifies it (a primitive of a finished run is rarely used so; one condition
for all keeps a primitive free of a real lock of its own)."""
_outside_waiting = 0  # real threads waiting on _OUTSIDE; a change notifies only when some are


def _limit(blocking: bool, timeout: float | None) -> float | None:
    """An acquire's timeout, validated as ``threading.Lock.acquire`` does; None: no limit."""
    if timeout is None or timeout == -1:
        return None
    if not blocking:
        raise ValueError("can't specify a timeout for a non-blocking call")
    if timeout < 0:
        raise ValueError("timeout value must be a non-negative number")
    return timeout


def _outside_deadline(blocking: bool, timeout: float | None) -> float | None:
    """The real deadline of a blocking call outside a run."""
    limit = _limit(blocking, timeout)
    return None if limit is None else _time.monotonic() + limit


def _wait_outside(ready: Callable[[], bool], deadline: float | None) -> bool:
    """With ``_OUTSIDE`` held: wait until ``ready()`` or the (real) deadline; ``ready()``'s last
    value."""
    global _outside_waiting
    _outside_waiting += 1
    try:
        while not ready():
            remaining = None if deadline is None else deadline - _time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            _OUTSIDE.wait(remaining)
        return True
    finally:
        _outside_waiting -= 1


def _changed_outside() -> None:
    """A primitive's state changed: wake the real threads waiting outside a run, if any."""
    if _outside_waiting:
        with _OUTSIDE:
            _OUTSIDE.notify_all()


def _here() -> tuple[ThreadController | None, ControlledThread | None]:
    controller = active_controller()
    return controller, (controller.me() if controller is not None else None)


def _deadline(controller: ThreadController, blocking: bool, timeout: float | None) -> float | None:
    """The virtual deadline of an acquire."""
    limit = _limit(blocking, timeout)
    return None if limit is None else later(controller.now, limit)


def _name(kind: str) -> str:
    controller = active_controller()
    return f"{kind}#{controller.serial() if controller is not None else 0}"


class _Primitive:
    """What every primitive shares: a name, its waiters and how to wake them."""

    def __init__(self, kind: str) -> None:
        self._name = _name(kind)
        self._waiters: list[ControlledThread] = []

    def describe(self) -> str:
        return self._name

    def holder(self) -> int | None:
        return None

    def _wait(self, controller: ThreadController, me: ControlledThread, deadline: float | None) -> bool:
        self._waiters.append(me)
        woken = controller.block(me, self, deadline)
        if not woken and me in self._waiters:
            self._waiters.remove(me)
        return woken

    def _wake_all(self) -> None:
        controller = active_controller()
        waiters, self._waiters = self._waiters, []
        if controller is not None:
            for thread in waiters:
                controller.wake(thread)
            controller.published()
        _changed_outside()

    def __repr__(self) -> str:
        return f"<cooperative {self.describe()}>"


class Lock(_Primitive):
    """``threading.Lock``: any thread may release it."""

    def __init__(self) -> None:
        super().__init__("Lock")
        self._owner: ControlledThread | None = None
        self._locked = False
        self._real_owner: int | None = None  # the real thread's ident, where one outside a run holds it

    def describe(self) -> str:
        owner = f" held by {self._owner.name}" if self._owner is not None else ""
        return f"{self._name}{owner}"

    def holder(self) -> int | None:
        return self._owner.tid if self._owner is not None else None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        controller, me = _here()
        if controller is None:
            return self._acquire_real(blocking, timeout)
        if me is None:
            return self._acquire_outside(blocking)
        controller.yield_point()
        deadline = _deadline(controller, blocking, timeout)
        while self._locked:
            if (not blocking or not self._wait(controller, me, deadline)) and self._locked:
                return False
        self._locked, self._owner = True, me
        return True

    def _acquire_outside(self, blocking: bool) -> bool:
        if not self._locked:
            self._locked, self._real_owner = True, _threading.get_ident()
            return True
        if not blocking:
            return False
        raise RuntimeError(
            f"{self.describe()} is held, and this thread is not a controlled one: it would wait forever"
        )

    def _acquire_real(self, blocking: bool, timeout: float | None) -> bool:
        """No run in progress: a real thread's acquire, which waits for another real thread's
        release (not for a controlled thread's: its run is over)."""
        deadline = _outside_deadline(blocking, timeout)
        with _OUTSIDE:
            if self._locked and self._owner is not None:
                return self._acquire_outside(blocking)  # raises when blocking
            if (blocking and not _wait_outside(lambda: not self._locked, deadline)) or self._locked:
                return False
            self._locked, self._owner, self._real_owner = True, None, _threading.get_ident()
            return True

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("release unlocked lock")
        self._locked, self._owner, self._real_owner = False, None, None
        self._wake_all()

    def locked(self) -> bool:
        return self._locked

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None and issubclass(kind, ThreadAborted) and not self._is_owned(_here()[1]):
            # The run is over and this thread unwinds from a Condition.wait that could not take
            # the lock back (no thread may be scheduled any more): nothing of its to release.
            return
        self.release()

    # What a Condition needs from its lock.
    def _release_save(self) -> int:
        self.release()
        return 1

    def _acquire_restore(self, saved: int) -> None:
        self.acquire()

    def _is_owned(self, me: ControlledThread | None) -> bool:
        if me is None and self._real_owner is not None:
            return self._locked and self._real_owner == _threading.get_ident()
        return self._locked and (me is None or self._owner is me)


class RLock(Lock):
    """``threading.RLock``: reentrant; only the owner may release."""

    def __init__(self) -> None:
        super().__init__()
        self._name = self._name.replace("Lock", "RLock")
        self._count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        _, me = _here()
        if self._mine(me) and (me is not None or self._count):
            self._count += 1
            return True
        if super().acquire(blocking, timeout):
            self._count = 1
            return True
        return False

    def release(self) -> None:
        _, me = _here()
        if not self._mine(me):
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if self._count == 0:
            super().release()

    def _mine(self, me: ControlledThread | None) -> bool:
        """Held by the calling thread: a controlled one, or a real one outside a run."""
        if not self._locked or self._owner is not me:
            return False
        return me is not None or self._real_owner in (None, _threading.get_ident())

    def _release_save(self) -> int:
        count, self._count = self._count, 1
        self.release()
        return count

    def _acquire_restore(self, saved: int) -> None:
        self.acquire()
        self._count = saved


_REAL_LOCKS = (type(_threading.Lock()), type(_threading.RLock()))


class _LockLike:
    """A lock of the pool's own (any object with ``acquire`` and ``release``, such as a wrapper
    around a cooperative lock) under a Condition, as ``threading.Condition`` takes one: its own
    ``_release_save``, ``_acquire_restore`` and ``_is_owned`` where it has them, else owned
    when a non-blocking acquire fails."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.acquire = lock.acquire
        self.release = lock.release

    def __enter__(self) -> Any:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _release_save(self) -> Any:
        own = getattr(self.lock, "_release_save", None)
        if own is not None:
            return own()
        self.release()
        return None

    def _acquire_restore(self, saved: Any) -> None:
        own = getattr(self.lock, "_acquire_restore", None)
        if own is not None:
            own(saved)
        else:
            self.acquire()

    def _is_owned(self, me: ControlledThread | None) -> bool:
        own = getattr(self.lock, "_is_owned", None)
        if own is not None:
            return bool(own())
        if self.acquire(False):
            self.release()
            return False
        return True


class Condition(_Primitive):
    """``threading.Condition`` over a cooperative lock (an RLock when none is given), another
    Condition's lock (``Condition(Condition())``, as threading allows), or a lock-like object of
    the pool's own."""

    def __init__(self, lock: Any = None) -> None:
        super().__init__("Condition")
        if isinstance(lock, Condition):
            lock = lock._lock  # threading's Condition takes the other's lock methods as its own
        elif isinstance(lock, _REAL_LOCKS):
            raise TypeError(
                f"a controlled run's Condition needs a cooperative lock, got a real "
                f"{type(lock).__name__} made where kvstress does not reach (by a module it does not "
                "patch, or through _thread): make it with the threading module, in the pool's code"
            )
        elif lock is not None and not isinstance(lock, Lock):
            lock = _LockLike(lock)
        self._lock: Lock | _LockLike = lock if lock is not None else RLock()
        self.acquire = self._lock.acquire
        self.release = self._lock.release
        self._real_waiters: list[list[bool]] = []  # real threads waiting outside a run

    def describe(self) -> str:
        return f"notify on {self._name}"

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._lock.__exit__(kind, *exc)

    def wait(self, timeout: float | None = None) -> bool:
        controller, me = _here()
        if not self._lock._is_owned(me):
            raise RuntimeError("cannot wait on un-acquired lock")
        if controller is None:
            return self._wait_real(timeout)
        if me is None:
            raise RuntimeError(f"{self._name}.wait() outside a controlled thread would wait forever")
        deadline = None if timeout is None else later(controller.now, max(0.0, timeout))
        saved = self._lock._release_save()
        try:
            return self._wait(controller, me, deadline)
        finally:
            self._lock._acquire_restore(saved)

    def _wait_real(self, timeout: float | None) -> bool:
        """No run in progress: wait, as a real thread, for a real thread's notify."""
        notified = [False]
        deadline = None if timeout is None else _time.monotonic() + max(0.0, timeout)
        with _OUTSIDE:
            self._real_waiters.append(notified)
        saved = self._lock._release_save()
        try:
            with _OUTSIDE:
                if not _wait_outside(lambda: notified[0], deadline):
                    self._real_waiters.remove(notified)
                return notified[0]
        finally:
            self._lock._acquire_restore(saved)

    def wait_for(self, predicate: Callable[[], T], timeout: float | None = None) -> T:
        controller = active_controller()
        end = None
        result = predicate()
        while not result:
            if timeout is not None:
                now = controller.now if controller is not None else _time.monotonic()
                end = now + timeout if end is None else end
                if end - now <= 0:
                    break
                self.wait(end - now)
            else:
                self.wait()
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        _, me = _here()
        if not self._lock._is_owned(me):
            raise RuntimeError("cannot notify on un-acquired lock")
        controller = active_controller()
        woken, self._waiters = self._waiters[:n], self._waiters[n:]
        if controller is not None:
            for thread in woken:
                controller.wake(thread)
        if self._real_waiters:
            with _OUTSIDE:
                for notified in self._real_waiters[:n]:
                    notified[0] = True
                del self._real_waiters[:n]
                _OUTSIDE.notify_all()

    def notify_all(self) -> None:
        self.notify(max(len(self._waiters), len(self._real_waiters)))


class Semaphore(_Primitive):
    """``threading.Semaphore``."""

    def __init__(self, value: int = 1) -> None:
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        super().__init__("Semaphore")
        self._value = value

    def describe(self) -> str:
        return f"{self._name} (value {self._value})"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        controller, me = _here()
        if controller is None:  # no run in progress: a real thread, waiting for a real release
            deadline = _outside_deadline(blocking, timeout)
            with _OUTSIDE:
                if (blocking and not _wait_outside(lambda: self._value > 0, deadline)) or not self._value:
                    return False
                self._value -= 1
                return True
        if me is None:
            if self._value > 0:
                self._value -= 1
                return True
            if not blocking:
                return False
            raise RuntimeError(f"{self._name} is at 0 outside a controlled thread: it would wait forever")
        controller.yield_point()
        deadline = _deadline(controller, blocking, timeout)
        while self._value == 0:
            if (not blocking or not self._wait(controller, me, deadline)) and self._value == 0:
                return False
        self._value -= 1
        return True

    def release(self, n: int = 1) -> None:
        if n < 1:
            raise ValueError("n must be one or more")
        if active_controller() is None:
            with _OUTSIDE:
                self._value += n
        else:
            self._value += n
        self._wake_all()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class BoundedSemaphore(Semaphore):
    """``threading.BoundedSemaphore``: releasing past the initial value raises ValueError."""

    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self._initial = value

    def release(self, n: int = 1) -> None:
        if self._value + n > self._initial:
            raise ValueError("Semaphore released too many times")
        super().release(n)


class Event(_Primitive):
    """``threading.Event``."""

    def __init__(self) -> None:
        super().__init__("Event")
        self._flag = False

    def describe(self) -> str:
        return f"{self._name} to be set"

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        self._wake_all()

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        controller, me = _here()
        if controller is None:  # no run in progress: a real thread, waiting for a real set()
            deadline = None if timeout is None else _time.monotonic() + max(0.0, timeout)
            with _OUTSIDE:
                return _wait_outside(lambda: self._flag, deadline)
        if me is None:
            if self._flag:
                return True
            raise RuntimeError(f"{self._name}.wait() outside a controlled thread would wait forever")
        controller.yield_point()
        if self._flag:
            return True
        # Woken means set() ran: True even if clear() ran before this thread did, as in threading.
        deadline = None if timeout is None else later(controller.now, max(0.0, timeout))
        return self._wait(controller, me, deadline)


class _Sleep:
    """What a sleeping thread waits for: only its deadline, which a scheduler with
    ``fires_timers`` may let come while other threads are still runnable (``ThreadController``)."""

    fires_early = True

    def __init__(self, until: float) -> None:
        self.until = until

    def describe(self) -> str:
        return f"sleep until {self.until:g} s"

    def holder(self) -> int | None:
        return None


def sleep(secs: float) -> None:
    """``time.sleep`` on virtual time; ``sleep(0)`` is a scheduling point."""
    controller, me = _here()
    if controller is None or me is None:
        _time.sleep(secs)
        return
    if secs < 0:
        raise ValueError("sleep length must be non-negative")
    if secs == 0:
        controller.yield_point()
        return
    until = later(controller.now, secs)
    while controller.now < until:
        controller.block(me, _Sleep(until), until)


def excused_seconds() -> float:
    """Virtual seconds the calling controlled thread spent runnable while time jumped for a
    sleeper (``ThreadController``); on a controlled event loop, the seconds it jumped for a timer
    fired early while callbacks were ready (``ControlledEventLoop.kv_excused``); in a trio run,
    the seconds its clock ran with real time (``trio_real_seconds``); 0.0 otherwise."""
    _, me = _here()
    if me is not None:
        return me.excused
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        from kvstress.controlled._thread_work import trio_real_seconds

        return trio_real_seconds()  # a trio run's clock, while it ran with real time
    excused = getattr(loop, "kv_excused", 0.0)
    return excused if isinstance(excused, float) else 0.0


def _clock() -> float:
    controller = active_controller()
    return controller.now if controller is not None else _time.monotonic()


def monotonic() -> float:
    """Virtual seconds."""
    return _clock()


def monotonic_ns() -> int:
    """Virtual nanoseconds."""
    return int(_clock() * 1e9)


EPOCH = float(int(_time.time()))
"""The thread baton's wall epoch, in whole seconds: ``time.time()`` and ``datetime.now()`` in a
controlled thread read this plus virtual time."""


def time() -> float:
    """Wall-clock seconds: the epoch at import plus virtual seconds (outside a controlled
    thread: the real wall clock)."""
    controller = active_controller()
    return _time.time() if controller is None else EPOCH + controller.now


def time_ns() -> int:
    """Wall-clock nanoseconds on the virtual clock."""
    return int(time() * 1e9)


class Thread:
    """``threading.Thread`` whose ``start()`` makes a controlled thread (subclassing ``run`` works)."""

    def __init__(
        self,
        group: None = None,
        target: Callable[..., Any] | None = None,
        name: str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        daemon: bool | None = None,
    ) -> None:
        self._target, self._args, self._kwargs = target, args, kwargs or {}
        # None: the controller names it t<N> on start, so that names (the keys of a deadlock's
        # wait-for graph, a step limit's culprit) stay distinct.
        self._name = name
        self.daemon = bool(daemon)
        self._thread: ControlledThread | None = None

    @property
    def name(self) -> str:
        """The name given, else the controller's ``t<N>`` once started (``Thread`` before)."""
        if self._name is not None:
            return self._name
        return self._thread.name if self._thread is not None else "Thread"

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    def run(self) -> None:
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def start(self) -> None:
        controller = active_controller()
        if self._thread is not None:
            raise RuntimeError("threads can only be started once")
        if controller is None:
            raise RuntimeError(
                "a thread of a module kvstress makes cooperative started outside a controlled run: "
                "an explored test's fixtures run before its schedule does, so a thread a fixture "
                "starts cannot be scheduled; start it in the test itself"
            )
        # Recorded before the scheduling point: the thread, or another, may run first and join it.
        self._thread = controller.start_thread(self.run, self._name, daemon=self.daemon, started_by_code=True)
        controller.yield_point()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is None:
            raise RuntimeError("cannot join thread before it is started")
        _join(self._thread, timeout)

    def is_alive(self) -> bool:
        return self._thread is not None and not self._thread.finished

    @property
    def ident(self) -> int | None:
        return self._thread.ident if self._thread is not None else None


def _join(thread: ControlledThread, timeout: float | None) -> None:
    controller, me = _here()
    if controller is None or me is None:
        # A thread its run left unfinished (that run's finding says why) is never run again:
        # a join returns at once, as for a daemon at exit (``concurrent.futures`` joins its
        # workers at exit, and a traceback there was noise after the finding). One of a run
        # still in progress would wait forever.
        if not thread.finished and not thread.left:
            raise RuntimeError(f"joining {thread.name} outside a controlled thread would wait forever")
        return
    controller.yield_point()
    deadline = None if timeout is None else later(controller.now, max(0.0, timeout))
    while not thread.finished:
        if not controller.block(me, thread, deadline):
            return


# -- subclasses of the real threading.Thread -----------------------------------------------------
# A class written ``class Worker(threading.Thread)`` took the real Thread as its base when its
# module was imported, before any run. While a run lasts, ``threading.Thread``'s own start, join
# and is_alive follow these functions (``_patch`` installs them): a controlled thread that starts
# an instance of a class from a named module starts a controlled thread running its ``run``;
# every other start (the harness's threads, a library's helper) is the real one.

FOLLOWED: dict[type, int] = {}
"""Thread subclasses of the named modules of the runs in progress -> how many runs named them."""
_REAL_START = _threading.Thread.start
_REAL_JOIN = _threading.Thread.join
_REAL_IS_ALIVE = _threading.Thread.is_alive
_STARTED: weakref.WeakKeyDictionary[_threading.Thread, ControlledThread] = weakref.WeakKeyDictionary()


def thread_start(self: _threading.Thread) -> None:
    """``threading.Thread.start`` during a run."""
    controller, me = _here()
    if controller is None or me is None or not any(cls in FOLLOWED for cls in type(self).__mro__):
        _REAL_START(self)
        return
    if self in _STARTED:
        raise RuntimeError("threads can only be started once")
    _STARTED[self] = controller.start_thread(
        self.run, _given_name(self), daemon=self.daemon, started_by_code=True
    )
    controller.yield_point()


_DEFAULT_NAME = re.compile(r"Thread-\d+( \(.*\))?")


def _given_name(thread: _threading.Thread) -> str | None:
    """The name the code gave its ``Thread`` subclass (``super().__init__(name="evictor")``: it
    read as ``kvstress-t1`` in findings, a blind user's), or None for threading's own default
    (``Thread-3 (run)``), which the controller replaces with ``t<N>``."""
    name = thread.name
    return None if _DEFAULT_NAME.fullmatch(name) else name


def thread_join(self: _threading.Thread, timeout: float | None = None) -> None:
    """``threading.Thread.join`` during a run."""
    thread = _STARTED.get(self)
    if thread is None:
        _REAL_JOIN(self, timeout)
    else:
        _join(thread, timeout)


def thread_is_alive(self: _threading.Thread) -> bool:
    """``threading.Thread.is_alive`` during a run."""
    thread = _STARTED.get(self)
    return _REAL_IS_ALIVE(self) if thread is None else not thread.finished
