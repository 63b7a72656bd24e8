"""An async pool whose timed-out waiter leaves the queue one turn of the loop after its call
returned, as poolboy's does: the caller's timeout sends a cancel message (``call_soon``) that
the pool handles on its next turn, and a block released in between goes to the stale waiter
entry, then straight back (to the next waiter, or the free list).

Correct: no block is lost, and it is back within a turn. A try-once in that turn finds none
free; the linearizability check called it a lost wake-up (a blind user's rebuild of poolboy).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import torch

from kvstress import BlockState, InvalidTransition

_HELD = (BlockState.ACQUIRED, BlockState.IN_USE)


class _Block:
    __slots__ = ("data", "id", "refcount", "state")

    def __init__(self, block_id: int, data: torch.Tensor) -> None:
        self.id, self.data, self.state, self.refcount = block_id, data, BlockState.FREE, 0


class LateCancelPool:
    """A free deque and a FIFO queue of waiters, each handed a block by the call that frees one."""

    backoff_bound = 0.0

    def __init__(
        self, num_blocks: int, block_shape: Any, *, dtype: Any = torch.float32, device: Any = None
    ) -> None:
        self.num_blocks = num_blocks
        memory = torch.zeros((num_blocks, *block_shape), dtype=dtype, device=device)
        self._free = deque(_Block(i, memory[i]) for i in range(num_blocks))
        self._waiting: deque[asyncio.Future[_Block]] = deque()

    async def acquire(self, timeout: float | None = None) -> _Block | None:
        if self._free:
            block = self._free.popleft()
            block.state, block.refcount = BlockState.ACQUIRED, 1
            return block
        if timeout == 0:
            return None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Block] = loop.create_future()
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(waiter)  # the pool's answer: never cancelled
        except TimeoutError:
            loop.call_soon(self._cancel_waiting, waiter)
            return None
        except BaseException:
            loop.call_soon(self._cancel_waiting, waiter)
            raise

    def _cancel_waiting(self, waiter: asyncio.Future[_Block]) -> None:
        """The cancel message, a turn later: out of the queue, or the block it got goes on."""
        if waiter in self._waiting:
            self._waiting.remove(waiter)
        elif waiter.done():
            self._offer(waiter.result())

    def _offer(self, block: _Block) -> None:
        """A block its holder gave up: reset, then to the first waiter (still held), or free."""
        block.data.zero_()
        if self._waiting:
            block.state, block.refcount = BlockState.ACQUIRED, 1
            self._waiting.popleft().set_result(block)
        else:
            block.state, block.refcount = BlockState.FREE, 0
            self._free.append(block)

    async def release(self, block: _Block) -> bool:
        if block.state not in _HELD or block.refcount < 1:
            return False
        block.refcount -= 1
        if block.refcount:
            return False
        block.state = BlockState.RELEASING
        self._offer(block)
        return True

    def mark_in_use(self, block: _Block) -> None:
        if block.state is not BlockState.ACQUIRED:
            raise InvalidTransition(block.id, block.state.name, "mark_in_use (ACQUIRED -> IN_USE)")
        block.state = BlockState.IN_USE

    def retain(self, block: _Block) -> None:
        if block.state not in _HELD or block.refcount < 1:
            raise InvalidTransition(block.id, block.state.name, "retain", "only a held block can be shared")
        block.refcount += 1

    def free_count(self) -> int:
        return len(self._free)

    def free_ids(self) -> list[int]:
        return [block.id for block in self._free]


class LateCancelLeakPool(LateCancelPool):
    """BUG: the cancel message forgets the block handed to the stale entry."""

    def _cancel_waiting(self, waiter: asyncio.Future[_Block]) -> None:
        if waiter in self._waiting:
            self._waiting.remove(waiter)
