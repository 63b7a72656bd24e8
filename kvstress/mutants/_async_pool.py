"""A correct async pool on an anyio Condition: runs on asyncio and on trio, and is cancel-safe."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import anyio
import torch

from kvstress.mutants._block import HELD, Block, allocate, seconds
from kvstress.pool._state import BlockState


class AsyncConditionPool:
    """Async (anyio). Every change happens with ``_cond``'s lock held and no await in between;
    a waiter parks in ``_cond.wait()`` and each returned block notifies one.

    Cancellation: an acquire takes its block with no await after the take (leaving ``async
    with`` releases the lock synchronously), so a cancelled acquire never holds a block; a
    waiter cancelled after a notify passes the wake-up on, so no waiter sleeps beside a free
    block. ``release`` is shielded: once called it completes.

    Invariants, under the lock: ``_free`` holds exactly the FREE blocks, each once, zeroed, and
    ``_count == len(_free)``. Timeouts are seconds on the loop's clock (``anyio.current_time``),
    so virtual clocks drive them; ``None`` waits without limit and ``0`` tries once.
    """

    backoff_bound = 0.0  # waiters park and are notified: no lateness beyond scheduling

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self._blocks = allocate(num_blocks, block_shape, dtype, device)
        self.num_blocks = len(self._blocks)
        self._free: deque[Block] = deque(self._blocks)
        self._count = self.num_blocks
        self._cond = anyio.Condition()

    # -- the protocol ------------------------------------------------------------------------

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A FREE block, returned ACQUIRED with refcount 1 and zeroed; None after ``timeout`` s."""
        deadline = self._deadline(seconds(timeout))
        async with self._cond:
            return await self._take_by(deadline)  # leaving the lock does not yield: nothing lost

    def mark_in_use(self, block: Block) -> None:
        """ACQUIRED -> IN_USE; ValueError from any other state."""
        if block.state is not BlockState.ACQUIRED:
            raise ValueError(f"mark_in_use needs ACQUIRED, got block {block.id} {block.state.name}")
        block.state = BlockState.IN_USE

    def retain(self, block: Block) -> None:
        """One more reference to a held block; ValueError for a block nobody holds."""
        if block.state not in HELD or block.refcount < 1:
            raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
        block.refcount += 1

    async def release(self, block: Block) -> bool:
        """One reference less; True only when this call zeroed the block and queued it again.
        A block nobody holds (a double release) answers False and nothing changes. Shielded."""
        with anyio.CancelScope(shield=True):
            async with self._cond:
                returned = self._drop(block)
        return returned

    def free_count(self) -> int:
        """The free counter, kept beside the queue: O(1)."""
        return self._count

    def free_ids(self) -> list[int]:
        """The free queue's ids, head first (a snapshot)."""
        return [block.id for block in self._free]

    def _deadline(self, timeout: float | None) -> float | None:
        return None if timeout is None else anyio.current_time() + timeout

    # -- with the lock held ------------------------------------------------------------------

    async def _take_by(self, deadline: float | None) -> Block | None:
        """A block once the queue holds one, None once ``deadline`` has passed; no await after
        the take."""
        while not self._free:
            remaining = None if deadline is None else deadline - anyio.current_time()
            if remaining is not None and remaining <= 0:
                return None
            await self._wait(remaining)
        return self._take()

    async def _wait(self, remaining: float | None) -> None:
        """Park until notified or ``remaining`` s pass; the lock is held again on the way out."""
        try:
            with anyio.move_on_after(remaining):
                await self._cond.wait()
        except BaseException:  # cancelled: a notify meant for us must not die with us
            if self._free:
                self._cond.notify()
            raise

    def _take(self) -> Block:
        block = self._free.popleft()
        self._count -= 1
        block.state = BlockState.ACQUIRED
        block.refcount = 1
        return block

    def _drop(self, block: Block) -> bool:
        if not self._unpin(block):
            return False
        self._reset(block)  # strictly before the offer: no acquirer may see the old K/V
        self._offer(block)
        return True

    def _unpin(self, block: Block) -> bool:
        """One reference less; True when it was the last (the block is now RELEASING). A block
        nobody holds is left as it is (False)."""
        if block.state not in HELD or block.refcount < 1:
            return False
        block.refcount -= 1
        if block.refcount > 0:
            return False
        block.state = BlockState.RELEASING
        return True

    def _reset(self, block: Block) -> None:
        block.data.zero_()

    def _offer(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._free.append(block)
        self._count += 1
        self._wake()

    def _wake(self) -> None:
        self._cond.notify()
