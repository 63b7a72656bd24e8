"""Condition-based pools whose Condition's lock is not a plain Lock, as threading allows:
another Condition (``Condition(Condition())``: the two share the inner one's lock), or a lock
class of the pool's own that wraps one. Correct pools, and a twin that notifies nobody.
"""

from __future__ import annotations

import threading
from typing import Any

from kvstress.mutants import CondvarPool, SilentReleasePool


class NestedConditionPool(CondvarPool):
    """Waiters park on a Condition made over the pool's other Condition."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        outer = threading.Condition(threading.Lock())
        self._lock = outer  # type: ignore[assignment]
        self._not_empty = threading.Condition(outer)


class CountingLock:
    """A lock class of one's own: a Lock (``inner``, or a new one) that counts its
    acquisitions (acquire, release and the with-statement only, as a lock wrapper usually has)."""

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner if inner is not None else threading.Lock()
        self.taken = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._inner.acquire(blocking, timeout)
        self.taken += got
        return got

    def release(self) -> None:
        self._inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class WrappedLockPool(CondvarPool):
    """Waiters park on a Condition made over a lock class of the pool's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = CountingLock()  # type: ignore[assignment]
        self._not_empty = threading.Condition(self._lock)


class NestedSilentReleasePool(SilentReleasePool):
    """The nested-Condition pool whose release notifies nobody: a waiter sleeps beside a free block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        outer = threading.Condition(threading.Lock())
        self._lock = outer  # type: ignore[assignment]
        self._not_empty = threading.Condition(outer)
