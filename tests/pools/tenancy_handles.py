"""A lock-and-condition pool that gives each tenancy a handle of its own (a generation stamp,
as ours and vLLM's block handles do), so a handle whose tenancy has ended is told from the next
holder's; and a twin whose retain forgets to look (a blind sweep's ``GenerationStaleRetainPool``:
a retain through a stale handle shares the next holder's block, whose last release then never
frees it).
"""

from __future__ import annotations

import weakref
from typing import Any

from kvstress import BlockState
from kvstress.mutants import Block, CondvarPool
from kvstress.mutants._block import HELD


class Handle:
    """One tenancy of one block: its id, memory, state and refcount read through to the block."""

    __slots__ = ("block", "generation")

    def __init__(self, block: Block, generation: int) -> None:
        self.block = block
        self.generation = generation

    @property
    def id(self) -> int:
        return self.block.id

    @property
    def data(self) -> Any:
        return self.block.data

    @property
    def state(self) -> Any:
        return self.block.state

    @property
    def refcount(self) -> int:
        return self.block.refcount


class TenancyHandlePool(CondvarPool):
    """CondvarPool behind a handle per tenancy; every call through a stale one is refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._generations = [0] * self.num_blocks

    def _take(self) -> Handle:  # type: ignore[override]
        block = super()._take()  # under the pool's lock
        self._generations[block.id] += 1
        return Handle(block, self._generations[block.id])

    def _current(self, handle: Handle) -> Block:
        if handle.generation != self._generations[handle.block.id]:
            raise ValueError(f"block {handle.id}: a stale handle (tenancy {handle.generation})")
        return handle.block

    def mark_in_use(self, block: Handle) -> None:  # type: ignore[override]
        with self._lock:
            held = self._current(block)
            if held.state is not BlockState.ACQUIRED:
                raise ValueError(f"mark_in_use needs ACQUIRED, got block {held.id} {held.state.name}")
            held.state = BlockState.IN_USE

    def retain(self, block: Handle) -> None:  # type: ignore[override]
        with self._lock:
            self._share(self._current(block))

    def _share(self, held: Block) -> None:
        if held.state not in HELD or held.refcount < 1:
            raise ValueError(f"retain needs a held block, got block {held.id} {held.state.name}")
        held.refcount += 1

    def release(self, block: Handle) -> bool:  # type: ignore[override]
        with self._lock:
            if block.generation != self._generations[block.id]:
                return False  # a double release through a stale handle: refused
            return self._drop(block.block)


class StaleRetainPool(TenancyHandlePool):
    """retain does not look at the handle's tenancy: through a stale handle it shares the next
    holder's block, and that holder's last release then never frees it."""

    def retain(self, block: Handle) -> None:  # type: ignore[override]
        with self._lock:
            self._share(block.block)  # BUG: self._current(block) not checked


class GuardedHandle(Handle):
    """A handle that can carry a finalizer (a weak reference to it)."""

    __slots__ = ("__weakref__",)


class FinalizerGuardPool(TenancyHandlePool):
    """A leak guard, as connection pools keep one: each handle has a ``weakref.finalize`` that,
    when the handle is dropped with its tenancy still open, gives the block back; after a proper
    release it finds the tenancy over and does nothing. The finalizer takes the pool's lock, so
    whoever drops the last reference to a handle must not be holding up the pool's lock holder
    (a harness that dropped one under a lock of its own deadlocked the process)."""

    def _take(self) -> Handle:  # type: ignore[override]
        plain = super()._take()
        handle = GuardedHandle(plain.block, plain.generation)
        weakref.finalize(handle, self._reclaim, plain.block, plain.generation)
        return handle

    def _reclaim(self, block: Block, generation: int) -> None:
        with self._lock:
            if generation != self._generations[block.id] or block.refcount < 1:
                return  # released properly
            block.refcount = 1
            self._drop(block)
