"""Two small, correct pools written the way a user might: an object per block, a deque, a counter.

They keep the kvstress pool protocol by a design unlike kvstress' own pools (compact arrays and
a ring), so a checker can be shown to stay silent on a correct pool it was not built around.
``broken.py`` plants one bug in each of their subclasses, through the seams ``_take``,
``_reset``, ``_offer``, ``_wake``, ``_wait`` and ``_until_free``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Sequence

import anyio
import anyio.lowlevel
import torch

from kvstress import BlockState

HELD = (BlockState.ACQUIRED, BlockState.IN_USE)


class Block:
    """One block for the pool's whole life: ``id``, ``data`` (a view of its memory), ``state``, ``refcount``.

    Every tenant gets this same object, so ``state`` and ``refcount`` read through an old handle
    are live. The fields change only under the pool's exclusion.
    """

    __slots__ = ("data", "id", "refcount", "state")

    def __init__(self, block_id: int, data: torch.Tensor) -> None:
        self.id = block_id
        self.data = data
        self.state = BlockState.FREE
        self.refcount = 0

    def __repr__(self) -> str:
        return f"<Block {self.id} {self.state.name} refcount={self.refcount}>"


class _FreeList:
    """The bookkeeping both pools share. Methods starting with ``_`` run under the pool's exclusion."""

    backoff_bound = 0.0  # every release wakes a waiter: no lateness beyond scheduling

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        shape = (block_shape,) if isinstance(block_shape, int) else tuple(block_shape)
        self.num_blocks = num_blocks
        memory = torch.zeros((num_blocks, *shape), dtype=dtype, device=device)
        self._blocks = [Block(i, memory[i]) for i in range(num_blocks)]
        # Invariant: _free holds exactly the FREE blocks, each once, and _count == len(_free).
        self._free: deque[Block] = deque(self._blocks)
        self._count = num_blocks

    def _exclusive(self) -> contextlib.AbstractContextManager[object]:
        """Held around every change; one event loop needs nothing more than not awaiting."""
        return contextlib.nullcontext()

    def retain(self, block: Block) -> None:
        """One more sharer of a held block; raises ValueError on a block that is not held."""
        with self._exclusive():
            if block.state not in HELD or block.refcount < 1:
                raise ValueError(f"retain needs a held block, got block {block.id} in {block.state.name}")
            block.refcount += 1

    def mark_in_use(self, block: Block) -> None:
        """ACQUIRED -> IN_USE; raises ValueError from any other state."""
        with self._exclusive():
            if block.state != BlockState.ACQUIRED:
                raise ValueError(f"mark_in_use needs ACQUIRED, got block {block.id} in {block.state.name}")
            block.state = BlockState.IN_USE

    def free_count(self) -> int:
        """The free counter, kept apart from the queue and read in O(1)."""
        return self._count

    def free_ids(self) -> list[int]:
        """The free queue's ids, head first (a snapshot)."""
        with self._exclusive():
            return [block.id for block in self._free]

    def _take(self) -> Block:
        block = self._free.popleft()
        self._count -= 1
        block.state = BlockState.ACQUIRED
        block.refcount = 1
        return block

    def _drop(self, block: Block) -> bool:
        """One reference less; True only when it was the last and the block is back in the queue."""
        if block.state not in HELD or block.refcount < 1:
            return False  # not held (a double release): change nothing
        block.refcount -= 1
        if block.refcount:
            return False
        block.state = BlockState.RELEASING
        self._reset(block)  # strictly before the offer: no acquirer may see the old K/V
        self._offer(block)
        return True

    def _reset(self, block: Block) -> None:
        block.data.zero_()

    def _offer(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._free.append(block)
        self._count += 1
        self._wake()

    def _wake(self) -> None:
        raise NotImplementedError


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be None or seconds >= 0, got {timeout!r}")


class SimpleThreadedPool(_FreeList):
    """A correct threaded pool: one lock and one condition; a waiter sleeps until a release or its deadline.

    The clock is ``time.monotonic``, looked up at each call so that a controlled run can replace it.
    """

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(num_blocks, block_shape, dtype=dtype, device=device)
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)

    def _exclusive(self) -> contextlib.AbstractContextManager[object]:
        return self._lock

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A FREE block, returned ACQUIRED with refcount 1 and zeroed; None once ``timeout`` s passed."""
        _check_timeout(timeout)
        with self._lock:
            return self._take() if self._until_free(timeout) else None

    def _until_free(self, timeout: float | None) -> bool:
        """With the lock held: True once the queue holds a block, False when ``timeout`` s passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # The queue is looked at after every wake-up, deadline or not: a notify can land on a
        # waiter whose wait has just timed out, and the block it announced must not be left behind.
        while not self._has_free():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._wait(remaining)
        return True

    def _has_free(self) -> bool:
        return bool(self._free)

    def _wait(self, remaining: float | None) -> None:
        self._not_empty.wait(remaining)

    def release(self, block: Block) -> bool:
        """Drop one reference; the last one zeroes the block and returns it (True). Not held: False."""
        with self._lock:
            return self._drop(block)

    def _wake(self) -> None:
        self._not_empty.notify()


class SimpleAsyncPool(_FreeList):
    """A correct async pool on anyio (asyncio or trio): each waiter parks on its own Event.

    Deadlines run on the loop's clock (``anyio.current_time``). A block is taken only after the
    last cancellable await, and a cancelled waiter hands a wake-up it received to the next one,
    so a cancelled acquire never loses a block. ``release`` is shielded: it always completes.
    """

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(num_blocks, block_shape, dtype=dtype, device=device)
        # Invariant: every event in _waiters is unset; _wake removes an event as it sets it.
        self._waiters: deque[anyio.Event] = deque()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A FREE block, returned ACQUIRED with refcount 1 and zeroed; None once ``timeout`` s passed."""
        _check_timeout(timeout)
        await anyio.lowlevel.checkpoint()
        if not await self._until_free(timeout):
            return None
        return self._take()  # no await after the take: a cancellation cannot strike while we hold it

    async def _until_free(self, timeout: float | None) -> bool:
        """True once the queue holds a block, False when ``timeout`` s passed."""
        deadline = None if timeout is None else anyio.current_time() + timeout
        while not self._free:
            remaining = None if deadline is None else deadline - anyio.current_time()
            if remaining is not None and remaining <= 0:
                return False
            await self._wait(remaining)
        return True

    async def _wait(self, remaining: float | None) -> bool:
        """Park until a release wakes this waiter (True) or ``remaining`` s pass (False)."""
        woken = anyio.Event()
        self._waiters.append(woken)
        try:
            with anyio.move_on_after(remaining):
                await woken.wait()
        except BaseException:  # cancelled: a wake-up we cannot use goes to the next waiter
            if not woken.is_set():
                self._waiters.remove(woken)
            elif self._free:
                self._wake()
            raise
        if not woken.is_set():
            self._waiters.remove(woken)
        return woken.is_set()

    async def release(self, block: Block) -> bool:
        """Drop one reference; the last one zeroes the block and returns it (True). Not held: False."""
        with anyio.CancelScope(shield=True):
            returned = self._drop(block)
            await anyio.lowlevel.checkpoint()
        return returned

    def _wake(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()
