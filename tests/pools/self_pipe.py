"""Threaded pools whose waiters park on the outside world: a pipe of their own, written to by a
release (the self-pipe trick), waited on through ``selectors`` or ``select.select``.

``SelfPipePool`` is correct: a waiter registers its pipe under the pool's lock in the same
section where it finds nothing free, and a release writes to every registered pipe. On the
baton the wait used to be a real syscall on a virtual clock: a correct pool was a busy-wait.
``SelfPipeLateRegisterPool`` registers its pipe in a second lock section (BUG): a release in
between writes to nobody, and the waiter sleeps out its timeout with a block free.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class SelfPipePool(BlockLedger):
    """Free blocks in a deque under a lock; each waiter waits on a pipe of its own."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._pipes: set[int] = set()  # the write ends of the waiters' pipes

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        try:
            with self._lock:
                if self._free:
                    return self._taken(self._free.popleft())
                if timeout == 0:
                    return None
                self._register(write_end)
            return self._wait(read_end, write_end, timeout)
        finally:
            with self._lock:
                self._pipes.discard(write_end)
            os.close(read_end)
            os.close(write_end)

    def _register(self, write_end: int) -> None:
        self._pipes.add(write_end)

    def _wait(self, read_end: int, write_end: int, timeout: float | None) -> Block | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._parking(read_end) as park:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                park(remaining)
                self._drain(read_end)
                with self._lock:
                    if self._free:
                        return self._taken(self._free.popleft())

    @contextlib.contextmanager
    def _parking(self, read_end: int) -> Iterator[Callable[[float | None], object]]:
        """How a waiter parks until its pipe is readable or ``remaining`` seconds pass."""
        with selectors.DefaultSelector() as selector:
            selector.register(read_end, selectors.EVENT_READ)
            yield selector.select

    @staticmethod
    def _drain(read_end: int) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(read_end, 4096)

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._lock:
            self._free.append(block)
            for write_end in self._pipes:
                os.write(write_end, b"x")
        return True


class SelectCallPool(SelfPipePool):
    """The same, waiting with ``select.select`` instead of a selector: correct."""

    @contextlib.contextmanager
    def _parking(self, read_end: int) -> Iterator[Callable[[float | None], object]]:
        yield lambda remaining: select.select([read_end], [], [], remaining)


class PollObjectPool(SelfPipePool):
    """The same, waiting on a ``select.poll()`` object (milliseconds): correct."""

    @contextlib.contextmanager
    def _parking(self, read_end: int) -> Iterator[Callable[[float | None], object]]:
        poller = select.poll()
        poller.register(read_end, select.POLLIN)
        # whole milliseconds, rounded up: the pool may return up to 1 ms past its deadline
        yield lambda remaining: poller.poll(None if remaining is None else math.ceil(remaining * 1000))


class EpollPool(SelfPipePool):
    """The same, waiting on a ``select.epoll`` object (seconds), closed by ``with``: correct."""

    @contextlib.contextmanager
    def _parking(self, read_end: int) -> Iterator[Callable[[float | None], object]]:
        with select.epoll() as poller:
            poller.register(read_end, select.EPOLLIN)
            yield lambda remaining: poller.poll(-1 if remaining is None else remaining)


class EdgeEpollPool(SelfPipePool):
    """The same on an edge-triggered ``epoll``: each write is reported once, and the waiter
    drains its pipe after each wake-up: correct."""

    @contextlib.contextmanager
    def _parking(self, read_end: int) -> Iterator[Callable[[float | None], object]]:
        with select.epoll() as poller:
            poller.register(read_end, select.EPOLLIN | select.EPOLLET)
            yield lambda remaining: poller.poll(-1 if remaining is None else remaining)


class SelfPipeLateRegisterPool(SelfPipePool):
    """Registers its pipe only after the lock section that found nothing free (BUG): a release in
    between writes to no pipe of its, and it sleeps out its timeout with a block free."""

    def _register(self, write_end: int) -> None:
        return None

    def _wait(self, read_end: int, write_end: int, timeout: float | None) -> Block | None:
        with self._lock:
            self._pipes.add(write_end)
        return super()._wait(read_end, write_end, timeout)


_WAIT = object()  # a waiter registered: sleep, then look again


class SocketPairPool(BlockLedger):
    """Each waiter sleeps in ``recv(1)`` on a socket pair of its own, with the socket's timeout
    set to what is left of its own; a release sends a byte to every registered waiter. Correct:
    a waiter registers in the lock section where it finds nothing free, and a byte sent after
    that stays in its socket until read."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._waiters: set[socket.socket] = set()  # the sending ends

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        receiver, sender = socket.socketpair()
        sender.setblocking(False)
        try:
            while True:
                found, left = self._look(sender, deadline)
                if found is not _WAIT:
                    return found  # type: ignore[return-value]
                self._sleep(receiver, sender, left)
        finally:
            with self._lock:
                self._waiters.discard(sender)
            receiver.close()
            sender.close()

    def _look(self, sender: socket.socket, deadline: float | None) -> tuple[object, float | None]:
        """A free block; None past the deadline; else ``_WAIT``, registered, and the time left."""
        with self._lock:
            if self._free:
                return self._taken(self._free.popleft()), None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None, None
            self._register(sender)
            return _WAIT, left

    def _register(self, sender: socket.socket) -> None:
        self._waiters.add(sender)

    def _sleep(self, receiver: socket.socket, sender: socket.socket, left: float | None) -> None:
        receiver.settimeout(left)
        with contextlib.suppress(TimeoutError):
            receiver.recv(64)

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._lock:
            self._free.append(block)
            for sender in self._waiters:
                with contextlib.suppress(BlockingIOError):
                    sender.send(b"x")
        return True


class SocketPairLateRegisterPool(SocketPairPool):
    """Registers its socket in a second lock section (BUG): a release in between sends to
    nobody, and the waiter sleeps out its timeout beside a free block."""

    def _register(self, sender: socket.socket) -> None:
        return None

    def _sleep(self, receiver: socket.socket, sender: socket.socket, left: float | None) -> None:
        with self._lock:
            self._waiters.add(sender)
        super()._sleep(receiver, sender, left)
