"""Correct async pools written the ordinary way on anyio's primitives (asyncio and trio).

A Semaphore and a deque, a CapacityLimiter and a deque, a Condition, and a memory object
stream whose buffer holds the free blocks. Timeouts are ``anyio.move_on_after`` on the loop's
clock; 0 tries once.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._ledger import BlockLedger


class AnyioSemaphorePool(BlockLedger):
    """A deque of free blocks guarded by ``anyio.Semaphore(num_blocks)``.

    ``acquire`` takes a unit and then yields before it takes its block, so a unit may be held
    by an acquire that has no block yet: a try-once meanwhile fails with a block queued.
    """

    backoff_bound = 0.0
    backends = ("asyncio", "trio")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._units = anyio.Semaphore(self.num_blocks)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        if timeout == 0:
            try:
                self._units.acquire_nowait()
            except anyio.WouldBlock:
                return None
        else:
            with anyio.move_on_after(timeout):
                await self._units.acquire()
                return self._taken(self._free.popleft())
            return None
        return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and give the unit back."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._units.release()
        return True


class AnyioCapacityLimiterPool(BlockLedger):
    """A deque guarded by an ``anyio.CapacityLimiter(num_blocks)``, borrowed for each block.

    A limiter knows its borrowers: a block carries the token it was borrowed for (its own
    object), so any task may give it back.
    """

    backoff_bound = 0.0
    backends = ("asyncio", "trio")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limiter = anyio.CapacityLimiter(self.num_blocks)
        self._tokens: dict[int, object] = {}

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        token = object()
        if timeout == 0:
            try:
                self._limiter.acquire_on_behalf_of_nowait(token)
            except anyio.WouldBlock:
                return None
        else:
            with anyio.move_on_after(timeout):
                await self._limiter.acquire_on_behalf_of(token)
                return self._take(token)
            return None
        return self._take(token)

    def _take(self, token: object) -> Block:
        block = self._free.popleft()
        self._tokens[block.id] = token
        return self._taken(block)

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and give the token back."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._limiter.release_on_behalf_of(self._tokens.pop(block.id))
        return True


class AnyioStreamPool(BlockLedger):
    """The free blocks sit in the buffer of an anyio memory object stream: acquire receives
    one, release sends it back. A mirror deque gives the snapshot (streams keep theirs to
    themselves), changed with no await between it and the stream."""

    backoff_bound = 0.0
    backends = ("asyncio", "trio")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        send, receive = anyio.create_memory_object_stream[Block](math.inf)
        self._send: MemoryObjectSendStream[Block] = send
        self._receive: MemoryObjectReceiveStream[Block] = receive
        for block in self._free:  # the ledger's deque mirrors the primitive's contents
            self._send.send_nowait(block)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """The stream's next block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        if timeout == 0:
            try:
                block = self._receive.receive_nowait()
            except anyio.WouldBlock:
                return None
            return self._got(block)
        with anyio.move_on_after(timeout):
            return self._got(await self._receive.receive())
        return None

    def _got(self, block: Block) -> Block:
        self._free.remove(block)
        return self._taken(block)

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset and send it back."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._put(block)
        return True

    def _put(self, block: Block) -> None:
        self._send.send_nowait(block)  # an unbounded buffer: never blocks
        self._free.append(block)

    def free_count(self) -> int:
        """Blocks in the stream's buffer."""
        return self._receive.statistics().current_buffer_used


class AnyioConditionPool(BlockLedger):
    """A deque under an ``anyio.Condition``; a release notifies one waiter, and a waiter that is
    cancelled after its notify passes it on."""

    backoff_bound = 0.0
    backends = ("asyncio", "trio")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = anyio.Condition()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        with anyio.move_on_after(None if timeout == 0 else timeout):
            async with self._cond:
                while not self._free:
                    if timeout == 0:
                        return None
                    try:
                        await self._cond.wait()
                    except BaseException:
                        if self._free:
                            self._cond.notify()
                        raise
                return self._taken(self._free.popleft())
        return None

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and notify. Shielded: it completes."""
        with anyio.CancelScope(shield=True):
            async with self._cond:
                if not self._last_reference(block):
                    return False
                self._reset(block)
                self._free.append(block)
                self._cond.notify()
        return True
