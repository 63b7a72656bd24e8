"""trio-native pools on a memory channel of free blocks, and a release that awaits its send.

trio's ``send`` raises at its first checkpoint when its scope is already cancelled, without
yielding: a release called from an unshielded cleanup path (inside a cancelled scope) is
cancelled there. ``ChannelPool`` sends with ``send_nowait`` and never awaits in release;
``FreeThenSendPool`` marks the block FREE and then awaits ``send`` (BUG): cancelled there, the
block is neither held nor queued (a blind tester's twin, clean on three seeds before the state
machine released from cancelled scopes).
"""

from __future__ import annotations

from typing import Any

import trio

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class ChannelPool(BlockLedger):
    """The free blocks travel through a trio memory channel; ``free_ids`` mirrors it."""

    backends = ("trio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._send, self._receive = trio.open_memory_channel[Block](self.num_blocks)
        for block in self._free:
            self._send.send_nowait(block)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        try:
            if timeout == 0:
                block = self._receive.receive_nowait()
            else:
                with trio.move_on_after(float("inf") if timeout is None else timeout):
                    block = await self._receive.receive()
                    return self._out(block)
                return None
        except trio.WouldBlock:
            return None
        return self._out(block)

    def _out(self, block: Block) -> Block:
        self._free.remove(block)
        return self._taken(block)

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._send.send_nowait(block)
        return True


class FreeThenSendPool(ChannelPool):
    """Marks the block FREE and queues its id, then awaits ``send`` (BUG): cancelled there, the
    block is FREE, listed, and never comes out of the channel."""

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        await self._send.send(block)
        return True
