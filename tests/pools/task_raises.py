"""An async pool whose own helper task dies with an exception nobody awaits."""

from __future__ import annotations

import asyncio
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
