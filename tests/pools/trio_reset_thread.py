"""trio pools whose released blocks are zeroed by a thread of the pool's own, fed by a
``queue.SimpleQueue``, which hands each back with the run's ``TrioToken.run_sync_soon``; a
waiter parks in a ``ParkingLot`` and takes the block the offer left it.

The seeded trio run's clock jumped to a waiter's timeout, and past the checks' settle time,
while the thread had the block in hand: correct pools of this design were reported on every
seed (``lost-block``, ``lost-wakeup``, a blind user's), and their buggy twins the same way.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any

import trio

from kvstress import BlockState
from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger
from pools._busy import busy_for
from pools._worker import reset_worker


class TrioResetThreadPool(BlockLedger):
    """Correct: the thread zeroes the block, then offers it on the run."""

    backoff_bound = 0.0
    backends = ("trio",)
    nap = 0.0  # real seconds the thread sleeps before it zeroes
    work = 0.0  # real seconds of CPU work the thread does before it zeroes
    work_after = 0.0  # ... after it marked the block FREE, before it hands it back

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lot = trio.lowlevel.ParkingLot()
        self._jobs: queue.SimpleQueue[tuple[trio.lowlevel.TrioToken, Block] | None] = queue.SimpleQueue()
        work = (weakref.ref(self), self._jobs, "_in_thread", trio.RunFinishedError)
        threading.Thread(target=reset_worker, args=work, daemon=True).start()
        weakref.finalize(self, self._jobs.put, None).atexit = False

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            while not self._free:
                if timeout == 0:
                    return None
                await self._lot.park()
            return self._taken(self._free.popleft())
        return None

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._jobs.put((trio.lowlevel.current_trio_token(), block))
        return True

    def _in_thread(self, token: trio.lowlevel.TrioToken, block: Block) -> None:
        if self.nap:
            time.sleep(self.nap)
        if self.work:
            busy_for(self.work)
        self._reset(block)
        if self.work_after:
            busy_for(self.work_after)
        token.run_sync_soon(self._offer, block)

    def _offer(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._free.append(block)
        self._lot.unpark()


class TrioNappingResetThreadPool(TrioResetThreadPool):
    """Correct, as ``TrioResetThreadPool``; its thread sleeps 1 ms before it zeroes (to batch)."""

    nap = 0.001


class TrioSlowResetThreadPool(TrioResetThreadPool):
    """Correct, as ``TrioResetThreadPool``; its thread works 0.15 s of real time on each block
    before it zeroes it, longer than the checks' settle time (a large block zeroed on the CPU;
    a thread starved of a core on a loaded machine, as in a CI run where this design's napping
    twin was reported ``lost-block`` once)."""

    work = 0.15


class TrioSlowHandBackPool(TrioResetThreadPool):
    """Correct, as ``TrioResetThreadPool``; its thread marks the block FREE as it zeroes it, then
    works 0.15 s before it hands it back: the block reads neither RELEASING nor queued meanwhile
    (as when a thread is starved of a core between the two: its napping twin was reported
    ``lost-block`` once in a CI run)."""

    work_after = 0.15


class TrioSlowResetLosesBlockPool(TrioSlowResetThreadPool):
    """As ``TrioSlowResetThreadPool``, but the thread drops the block after its work (BUG): the
    wait for a late offer ends when the thread stops working, and the block is found lost."""

    expected = ("lost-block", "lost-wakeup")

    def _in_thread(self, token: trio.lowlevel.TrioToken, block: Block) -> None:
        busy_for(self.work)


class TrioSpinningLosesBlockPool(TrioResetThreadPool):
    """The thread drops the block and spins for the pool's whole life (BUG): a thread at work
    all along holds a late offer's wait for ``SUBMITTED_WAIT_S`` at most, and is then let be.
    It spins until ``stop_spinning`` is set (a test's end), 3 s at most."""

    expected = ("lost-block", "lost-wakeup")
    stop_spinning = threading.Event()

    def _in_thread(self, token: trio.lowlevel.TrioToken, block: Block) -> None:
        busy_for(3.0, until=self.stop_spinning)


class TrioResetThreadWakesNoonePool(TrioResetThreadPool):
    """The offer queues the block and wakes no waiter (BUG): a parked acquire waits on."""

    expected = ("lost-wakeup",)

    def _offer(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._free.append(block)
