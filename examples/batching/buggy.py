"""Four realistic usage bugs planted in the batching loop, one subclass each.

Each overrides one method of ``Engine`` with a copy that lacks one line (marked ``BUG``). Each
passes the traffic test on plain asyncio, whose FIFO order runs every client's reaction between
two engine steps; each fails when the same test runs under ``kvstress_explore`` with the pool
behind ``kvstress.audit``, where a reaction can land between two awaits of a step.
"""

from __future__ import annotations

from typing import Any

from engine import Engine, Request, Status


class DoubleReleaseOnAbort(Engine):
    """The abort path releases the table itself, even for a request inside its step, whose
    ``finally`` then releases the same table again (a double release)."""

    async def abort(self, request: Request) -> None:
        if request.status in (Status.FINISHED, Status.ABORTED):
            return
        self._forget(request)
        request.status = Status.ABORTED
        await self._release(request, request.table)  # BUG: in its step, the step frees it too


class DropsBlockOfPreempted(Engine):
    """A block the pool hands to a request that was preempted (or aborted) while it waited is
    neither kept nor given back: it is dropped (a leak)."""

    async def _claim(self, request: Request, block: Any) -> bool:
        if request.status is not Status.RUNNING:
            return False  # BUG: the block just given is never released
        request.table.append(block)
        return True


class PrefixWithoutRetain(Engine):
    """A cached prefix block is shared without ``retain``: when its holder lets go, the block
    returns to the pool under the sharer (a stale handle, then a double release)."""

    def _share_prefix(self, request: Request) -> Any | None:
        return self.prefixes.get(request.prefix) if request.prefix is not None else None  # BUG: no retain


class ForgetsBlocksOnTimeout(Engine):
    """When a client times out while its prompt blocks are being gathered, the admission stops
    and forgets the blocks it was just given (a leak)."""

    async def _abandon(self, request: Request, blocks: list[Any]) -> None:
        return None  # BUG: the blocks are never given back


BUGGY = (DoubleReleaseOnAbort, DropsBlockOfPreempted, PrefixWithoutRetain, ForgetsBlocksOnTimeout)
