"""Correct async pools written the ordinary way on trio's own primitives (trio only).

A Semaphore and a deque, a CapacityLimiter and a deque, a memory channel whose buffer holds
the free blocks, and a Condition over a deque. trio's primitives are fair: a release hands its
unit straight to the first waiter. Timeouts are ``trio.move_on_after`` on trio's clock; 0 tries once.
"""

from __future__ import annotations

import math
from typing import Any

import trio

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._ledger import BlockLedger


class TrioSemaphorePool(BlockLedger):
    """A deque of free blocks guarded by ``trio.Semaphore(num_blocks)``."""

    backoff_bound = 0.0
    backends = ("trio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._units = trio.Semaphore(self.num_blocks)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        if timeout == 0:
            try:
                self._units.acquire_nowait()
            except trio.WouldBlock:
                return None
            return self._taken(self._free.popleft())
        with trio.move_on_after(math.inf if timeout is None else timeout):
            await self._units.acquire()
            return self._taken(self._free.popleft())
        return None

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and hand the unit on."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._units.release()
        return True


class TrioCapacityLimiterPool(BlockLedger):
    """A deque guarded by a ``trio.CapacityLimiter(num_blocks)``, borrowed on behalf of each
    block's own token so that any task may give it back."""

    backoff_bound = 0.0
    backends = ("trio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limiter = trio.CapacityLimiter(self.num_blocks)
        self._tokens: dict[int, object] = {}

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        token = object()
        if timeout == 0:
            try:
                self._limiter.acquire_on_behalf_of_nowait(token)
            except trio.WouldBlock:
                return None
            return self._take(token)
        with trio.move_on_after(math.inf if timeout is None else timeout):
            await self._limiter.acquire_on_behalf_of(token)
            return self._take(token)
        return None

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


class TrioChannelPool(BlockLedger):
    """The free blocks sit in a trio memory channel's buffer: acquire receives one, release
    sends it back. A mirror deque gives the snapshot, changed with no checkpoint between it
    and the channel."""

    backoff_bound = 0.0
    backends = ("trio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._send, self._receive = trio.open_memory_channel[Block](math.inf)
        for block in self._free:  # the ledger's deque mirrors the primitive's contents
            self._send.send_nowait(block)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """The channel's next block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        if timeout == 0:
            try:
                return self._got(self._receive.receive_nowait())
            except trio.WouldBlock:
                return None
        with trio.move_on_after(math.inf if timeout is None else timeout):
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
        """Blocks in the channel's buffer."""
        return self._receive.statistics().current_buffer_used


class TrioConditionPool(BlockLedger):
    """A deque under a ``trio.Condition``: a waiter waits on it until the deque has a block;
    release queues the block, then takes the condition's lock to notify one waiter (so the
    block is on offer before release returns, and the lock's checkpoint may cancel a release
    that already took effect)."""

    backoff_bound = 0.0
    backends = ("trio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = trio.Condition()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        async with self._cond:
            if not self._free and timeout != 0:
                with trio.move_on_after(math.inf if timeout is None else timeout):
                    while not self._free:
                        await self._cond.wait()
            if not self._free:
                return None
            return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue, then notify one waiter."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        async with self._cond:
            self._cond.notify()
        return True
