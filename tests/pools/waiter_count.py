"""A pool gated by a counting semaphore of its own, built as a futex-based one is: a value, a
count of registered waiters, and a wait that sleeps only while the value reads 0. A release
posts: it raises the value and wakes a sleeper when the waiter count says there is one.

``PostReadsWaitersFirstPool`` reads the waiter count before it raises the value (the load
hoisted above the increment, glibc bug 12674): a waiter that registers and goes to sleep in
between is not woken, and sleeps beside the free block until its deadline.
``PostReadsWaitersAfterPool`` reads it in the same lock section as the increment."""

from __future__ import annotations

import threading
import time
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._ledger import BlockLedger


class PostReadsWaitersAfterPool(BlockLedger):
    """The semaphore's word (value, waiters) under one lock; its sleepers on a Condition."""

    backoff_bound = 0.0
    threaded = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._list = threading.Lock()
        self._word = threading.Lock()
        self._futex = threading.Condition(self._word)
        self._value = self.num_blocks
        self._waiters = 0

    def _try_down(self) -> bool:
        with self._word:
            if self._value:
                self._value -= 1
                return True
            return False

    def _down(self, timeout: float | None) -> bool:
        if self._try_down():
            return True
        if timeout == 0:
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._word:
            self._waiters += 1
        try:
            while not self._try_down():
                with self._word:
                    if self._value:
                        continue
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._futex.wait(left)
            return True
        finally:
            with self._word:
                self._waiters -= 1

    def _up(self) -> None:
        with self._word:
            self._value += 1
            waiters = self._waiters
        if waiters:
            with self._word:
                self._futex.notify()

    def acquire(self, timeout: float | None = None) -> Block | None:
        if not self._down(timeout):
            return None
        with self._list:
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        with self._list:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
        self._up()
        return True


class PostReadsWaitersFirstPool(PostReadsWaitersAfterPool):
    """Reads the waiter count before the increment (see the module)."""

    def _up(self) -> None:
        waiters = self._waiters  # BUG: read before the value is raised
        with self._word:
            self._value += 1
        if waiters:
            with self._word:
                self._futex.notify()
