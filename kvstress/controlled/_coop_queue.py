"""Cooperative ``queue`` classes: the standard library's contracts over the cooperative Condition.

The standard ``queue.Queue`` reads its timeouts from a ``time.monotonic`` bound when ``queue``
was imported, so it cannot run on the baton's virtual clock; these classes keep its interface
and its ``_init/_qsize/_put/_get`` hooks (LifoQueue and PriorityQueue are those hooks), and
raise the standard ``queue.Empty`` and ``queue.Full``.
"""

from __future__ import annotations

import heapq
import queue as _queue
from collections import deque
from typing import Any

from kvstress.controlled._coop import Condition, Lock, monotonic


class Queue:
    """``queue.Queue``."""

    def __init__(self, maxsize: int = 0) -> None:
        self.maxsize = maxsize
        self._init(maxsize)
        self.mutex = Lock()
        self.not_empty = Condition(self.mutex)
        self.not_full = Condition(self.mutex)
        self.all_tasks_done = Condition(self.mutex)
        self.unfinished_tasks = 0

    def task_done(self) -> None:
        with self.all_tasks_done:
            unfinished = self.unfinished_tasks - 1
            if unfinished < 0:
                raise ValueError("task_done() called too many times")
            if unfinished == 0:
                self.all_tasks_done.notify_all()
            self.unfinished_tasks = unfinished

    def join(self) -> None:
        with self.all_tasks_done:
            while self.unfinished_tasks:
                self.all_tasks_done.wait()

    def qsize(self) -> int:
        with self.mutex:
            return self._qsize()

    def empty(self) -> bool:
        with self.mutex:
            return not self._qsize()

    def full(self) -> bool:
        with self.mutex:
            return 0 < self.maxsize <= self._qsize()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self.not_full:
            if self.maxsize > 0:
                self._wait_until(
                    self.not_full, lambda: self._qsize() < self.maxsize, block, timeout, _queue.Full
                )
            self._put(item)
            self.unfinished_tasks += 1
            self.not_empty.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self.not_empty:
            self._wait_until(self.not_empty, self._qsize, block, timeout, _queue.Empty)
            item = self._get()
            self.not_full.notify()
            return item

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def _wait_until(
        self, cond: Condition, ready: Any, block: bool, timeout: float | None, error: type[Exception]
    ) -> None:
        if not block:
            if not ready():
                raise error
            return
        if timeout is None:
            while not ready():
                cond.wait()
            return
        if timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        end = monotonic() + timeout
        while not ready():
            remaining = end - monotonic()
            if remaining <= 0.0:
                raise error
            cond.wait(remaining)

    def _init(self, maxsize: int) -> None:
        self.queue: Any = deque()

    def _qsize(self) -> int:
        return len(self.queue)

    def _put(self, item: Any) -> None:
        self.queue.append(item)

    def _get(self) -> Any:
        return self.queue.popleft()


class LifoQueue(Queue):
    """``queue.LifoQueue``."""

    def _init(self, maxsize: int) -> None:
        self.queue = []

    def _get(self) -> Any:
        return self.queue.pop()


class PriorityQueue(Queue):
    """``queue.PriorityQueue``."""

    def _init(self, maxsize: int) -> None:
        self.queue = []

    def _put(self, item: Any) -> None:
        heapq.heappush(self.queue, item)

    def _get(self) -> Any:
        return heapq.heappop(self.queue)


class SimpleQueue(Queue):
    """``queue.SimpleQueue``: unbounded, no task tracking."""

    def __init__(self) -> None:
        super().__init__(0)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self.not_empty:
            self._put(item)
            self.not_empty.notify()
