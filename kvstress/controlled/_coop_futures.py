"""``concurrent.futures`` thread executors on the baton, built from the cooperative basics.

The real ``ThreadPoolExecutor`` runs its work in real threads that wait on a real queue, and a
real ``Future`` parks its waiter on a real ``Condition``. Under the baton a pool that hands its
reset to an executor then runs part of its code where the scheduler cannot see it (the offer
happens at some real moment while virtual time stands still), or blocks a controlled thread's
OS thread while the scheduler thinks it runs: a correct pool looks like it lost a block. These
run the work in controlled threads, wait on ``_coop.Condition``, and keep the standard
library's interface, states and errors (``concurrent.futures.CancelledError``,
``TimeoutError``, ``InvalidStateError``).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from kvstress.controlled import _coop, _coop_queue

_PENDING, _RUNNING, _CANCELLED, _FINISHED = "PENDING", "RUNNING", "CANCELLED", "FINISHED"
_DONE = (_CANCELLED, _FINISHED)


class Future(concurrent.futures.Future):  # type: ignore[type-arg]
    """``concurrent.futures.Future``: a result that a worker sets and waiters park for. A
    subclass of the real one, so that what checks for one (``asyncio.wrap_future``) takes it;
    every method is this one's."""

    def __init__(self) -> None:  # the real __init__ makes a real Condition: not called
        self._cond = _coop.Condition(_coop.Lock())
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Future], object]] = []
        self._watchers: list[_coop.Condition] = []  # wait()/as_completed() callers to notify

    def __repr__(self) -> str:
        """As the standard library's (a message about the code's future names no stand-in)."""
        state = self._state.lower()
        if self._state == _FINISHED:
            if self._exception is not None:
                return f"<Future at {id(self):#x} state={state} raised {type(self._exception).__name__}>"
            return f"<Future at {id(self):#x} state={state} returned {type(self._result).__name__}>"
        return f"<Future at {id(self):#x} state={state}>"

    def cancel(self) -> bool:
        """Cancel unless running or done; True if it is cancelled now."""
        with self._cond:
            if self._state in (_RUNNING, _FINISHED):
                return False
            if self._state == _CANCELLED:
                return True
            self._state = _CANCELLED
        self._settled()
        return True

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def running(self) -> bool:
        return self._state == _RUNNING

    def done(self) -> bool:
        return self._state in _DONE

    def set_running_or_notify_cancel(self) -> bool:
        """For executors: False if it was cancelled, else mark it running (True)."""
        with self._cond:
            if self._state == _CANCELLED:
                return False
            if self._state != _PENDING:
                raise RuntimeError(f"Future in unexpected state: {self._state}")
            self._state = _RUNNING
            return True

    def set_result(self, result: Any) -> None:
        self._finish(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        self._finish(None, exception)

    def _finish(self, result: Any, exception: BaseException | None) -> None:
        with self._cond:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result, self._exception, self._state = result, exception, _FINISHED
        self._settled()

    def _settled(self) -> None:
        with self._cond:
            self._cond.notify_all()
            waiters, self._watchers = self._watchers, []
        for waiter in waiters:
            with waiter:
                waiter.notify_all()
        for callback in self._callbacks:
            try:
                callback(self)
            except Exception:  # as the real one: a failing callback is logged, not raised
                logging.getLogger("concurrent.futures").exception("exception calling callback for %r", self)

    def add_done_callback(self, fn: Callable[[Future], object]) -> None:
        with self._cond:
            if self._state not in _DONE:
                self._callbacks.append(fn)
                return
        fn(self)

    def _wait(self, timeout: float | None) -> None:
        with self._cond:
            if not self._cond.wait_for(self.done, timeout):
                raise TimeoutError

    def result(self, timeout: float | None = None) -> Any:
        """The result, waiting up to ``timeout`` s; raises what the call raised."""
        self._wait(timeout)
        if self._state == _CANCELLED:
            raise concurrent.futures.CancelledError
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What the call raised (None if it returned), waiting up to ``timeout`` s."""
        self._wait(timeout)
        if self._state == _CANCELLED:
            raise concurrent.futures.CancelledError
        return self._exception


class ThreadPoolExecutor:
    """``concurrent.futures.ThreadPoolExecutor``: up to ``max_workers`` controlled threads take
    the submitted calls in order; a thread starts when a call finds none idle."""

    _counter = itertools.count()

    def __init__(
        self,
        max_workers: int | None = None,
        thread_name_prefix: str = "",
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        if max_workers is None:
            max_workers = min(32, (os.cpu_count() or 1) + 4)
        if max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix or f"ThreadPoolExecutor-{next(self._counter)}"
        self._initializer, self._initargs = initializer, initargs
        self._work: _coop_queue.SimpleQueue = _coop_queue.SimpleQueue()
        self._lock = _coop.Lock()
        self._threads: list[_coop.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Schedule ``fn(*args, **kwargs)``; its Future."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future = Future()
            self._work.put((future, fn, args, kwargs))
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._max_workers:
                name = f"{self._prefix}_{len(self._threads)}"
                thread = _coop.Thread(target=self._worker, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()
            return future

    def _worker(self) -> None:
        if self._initializer is not None:
            self._initializer(*self._initargs)
        while True:
            item = self._work.get()
            if item is None:
                self._work.put(None)  # wake the next worker to stop too
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as error:
                    future.set_exception(error)
                else:
                    future.set_result(result)
            del item, future
            with self._lock:
                self._idle += 1

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[Any]:
        """``fn`` over the iterables, results in order (each waited up to ``timeout`` overall)."""
        futures = [self.submit(fn, *args) for args in zip(*iterables, strict=False)]
        deadline = None if timeout is None else _coop.monotonic() + timeout

        def results() -> Iterator[Any]:
            for future in futures:
                left = None if deadline is None else max(0.0, deadline - _coop.monotonic())
                yield future.result(left)

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more submissions; with ``cancel_futures`` the queued calls are cancelled; with
        ``wait`` this returns once the workers are done."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while not self._work.empty():
                    item = self._work.get_nowait()
                    if item is not None:
                        item[0].cancel()
            self._work.put(None)
        if wait:
            for thread in list(self._threads):
                thread.join()

    def __enter__(self) -> ThreadPoolExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown(wait=True)


class DoneAndNotDoneFutures(NamedTuple):
    """What ``wait`` returns, as the standard library's does."""

    done: set[Future]
    not_done: set[Future]


FIRST_COMPLETED = concurrent.futures.FIRST_COMPLETED
FIRST_EXCEPTION = concurrent.futures.FIRST_EXCEPTION
ALL_COMPLETED = concurrent.futures.ALL_COMPLETED


def wait(
    fs: Iterable[Future], timeout: float | None = None, return_when: str = ALL_COMPLETED
) -> DoneAndNotDoneFutures:
    """``concurrent.futures.wait`` for cooperative futures: (done, not_done) sets."""
    futures = set(fs)
    waiter = _coop.Condition(_coop.Lock())

    def enough() -> bool:
        done = [f for f in futures if f.done()]
        if return_when == FIRST_COMPLETED:
            return bool(done)
        if return_when == FIRST_EXCEPTION and any(
            not f.cancelled() and f._exception is not None for f in done
        ):
            return True
        return len(done) == len(futures)

    with waiter:
        for future in futures:
            with future._cond:
                if not future.done():
                    future._watchers.append(waiter)
        waiter.wait_for(enough, timeout)
    done = {f for f in futures if f.done()}
    return DoneAndNotDoneFutures(done, futures - done)


def as_completed(fs: Iterable[Future], timeout: float | None = None) -> Iterator[Future]:
    """``concurrent.futures.as_completed`` for cooperative futures."""
    pending = set(fs)
    deadline = None if timeout is None else _coop.monotonic() + timeout
    while pending:
        left = None if deadline is None else deadline - _coop.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError(f"{len(pending)} (of {len(pending)}) futures unfinished")
        done, pending = wait(pending, left, FIRST_COMPLETED)
        if not done:
            raise TimeoutError(f"{len(pending)} (of {len(pending)}) futures unfinished")
        yield from done
