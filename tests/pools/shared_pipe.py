"""Threaded pools whose waiters all sleep in ``select`` on one pipe, written to once per block
offered: a byte is a wake-up, and a waiter reads one byte per wake-up and looks at the free
list before it parks again or gives up, so no byte is ever lost to a waiter that takes nothing.

``SharedPipePool`` is correct. ``SharedPipeDrainsPool`` reads every pending byte at each
wake-up (BUG: "they are only hints"): woken once as two blocks come back in a row, a waiter
takes up both wake-ups and one block, and a waiter that looked at the free list just before
they came back parks on an empty pipe beside the other block until its deadline.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class SharedPipePool(BlockLedger):
    """Free blocks in a deque under a lock; one pipe shared by every waiter (see the module)."""

    threaded = True
    backoff_bound = 0.0
    chunk = 1  # bytes a wake-up reads

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._read_end, self._write_end = os.pipe()
        os.set_blocking(self._read_end, False)
        os.set_blocking(self._write_end, False)

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._free:
                    return self._taken(self._free.popleft())
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            readable, _, _ = select.select([self._read_end], [], [], remaining)
            if readable:
                with contextlib.suppress(BlockingIOError):  # another waiter took the byte
                    os.read(self._read_end, self.chunk)

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._lock:
            self._free.append(block)
        with contextlib.suppress(BlockingIOError):  # the pipe is full: wake-ups are pending
            os.write(self._write_end, b"x")
        return True

    def close(self) -> None:
        for end in (self._read_end, self._write_end):
            with contextlib.suppress(OSError):
                os.close(end)


class SharedPipeDrainsPool(SharedPipePool):
    """BUG: each wake-up reads every pending byte, another waiter's wake-ups too."""

    chunk = 4096
