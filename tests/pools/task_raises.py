"""An async pool whose own helper task dies with an exception nobody awaits."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kvstress import AsyncBlockPool


class HelperTaskRaisesPool(AsyncBlockPool):
    """BUG: each release starts a bookkeeping task that raises (asyncio only logs it)."""

    async def release(self, block: Any) -> bool:
        released = await super().release(block)
        asyncio.get_running_loop().create_task(self._account())
        return released

    async def _account(self) -> None:
        raise RuntimeError("bookkeeping failed")


class HelperCallbackRaisesPool(AsyncBlockPool):
    """BUG: each release schedules a callback that raises."""

    async def release(self, block: Any) -> bool:
        released = await super().release(block)
        asyncio.get_running_loop().call_soon(self._account)
        return released

    def _account(self) -> None:
        raise RuntimeError("bookkeeping failed")


class ShieldedProbePool(AsyncBlockPool):
    """BUG (a blind tester's): each acquire first awaits a probe through ``asyncio.shield`` and
    ignores its failure; an acquire cancelled mid-probe leaves the probe running alone, and
    what it raises then nobody reads (asyncio logs "Task exception was never retrieved")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probes = 0

    async def _probe(self) -> None:
        await asyncio.sleep(0)
        self._probes += 1
        if self._probes % 2:
            raise RuntimeError("probe failed")

    async def _probed(self) -> None:
        with contextlib.suppress(RuntimeError):
            await asyncio.shield(self._probe())

    async def acquire(self, timeout: float | None = None) -> Any:
        await self._probed()
        return await super().acquire(timeout)


class ShieldedProbeReadPool(ShieldedProbePool):
    """The fix: the probe's task reads its own outcome when it ends, awaited or not."""

    async def _probed(self) -> None:
        probe = asyncio.ensure_future(self._probe())
        probe.add_done_callback(lambda task: task.cancelled() or task.exception())
        with contextlib.suppress(RuntimeError):
            await asyncio.shield(probe)
