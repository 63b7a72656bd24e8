"""``close()`` waits for released blocks on their way back, and calls a block that never arrives
lost.

A pool may finish a release after it returned (a reset thread, a task). The audit counted such a
block as on its way back and never looked again: an audited, explored test passed over a pool
that left a block RELEASING for good (a blind user's rebuild of LMCache #1130, a last release
while the block was pinned). At close nothing is in flight, so the audit waits, up to
``CLOSE_SETTLE_S``, for every block nobody holds to be queued again.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import anyio
import pytest

import kvstress
from kvstress import InvariantViolation
from kvstress.audit import _core
from kvstress.mutants import Block
from kvstress.mutants._ordinary_background import DeferredResetTaskPool, DeferredResetThreadPool


class SlowResetThreadPool(DeferredResetThreadPool):
    """Correct: the reset thread takes 20 ms a block, so a close right after a release finds the
    block not queued yet."""

    def _reset(self, block: Block) -> None:
        time.sleep(0.02)
        super()._reset(block)


class DropsResetThreadPool(DeferredResetThreadPool):
    """BUG: the reset thread zeroes the block and never queues it."""

    def _offer(self, block: Block) -> None:
        with self._cond:
            self._resetting -= 1


class DropsResetTaskPool(DeferredResetTaskPool):
    """BUG: the reset task zeroes the block and never queues it."""

    async def _reset_and_offer(self, block: Block) -> None:
        self._reset(block)


def _use(audited: Any) -> None:
    block = audited.acquire(0)
    assert block is not None
    audited.release(block)


def test_a_block_on_its_way_back_is_waited_for() -> None:
    pool = SlowResetThreadPool(2, (2, 4))
    with kvstress.audit(pool) as audited:
        _use(audited)
        assert audited.not_back() == [0]  # the reset thread still has it
    assert sorted(pool.free_ids()) == [0, 1]


def test_a_block_that_never_comes_back_is_lost_at_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules["kvstress.audit._threaded"], "CLOSE_SETTLE_S", 0.2)
    audited = kvstress.audit(DropsResetThreadPool(2, (2, 4)))
    _use(audited)
    with pytest.raises(InvariantViolation, match="never offered it back") as caught:
        audited.close()
    found = caught.value
    assert found.invariant == "lost-block"
    assert "block 0 (FREE, released by MainThread)" in found.message


@pytest.mark.kvstress_explore(schedules=20, strategy="pct", seed=0)
def test_under_exploration_the_wait_is_on_virtual_time() -> None:
    """Explored, the reset thread is controlled: the close's wait lets it run, and a block that
    never arrives costs virtual seconds only."""
    with kvstress.audit(SlowResetThreadPool(2, (2, 4))) as audited:
        worker = threading.Thread(target=_use, args=(audited,))
        worker.start()
        worker.join()
    dropped = kvstress.audit(DropsResetThreadPool(2, (2, 4)))
    _use(dropped)
    began = time.monotonic()  # virtual here: the test's module is controlled
    with pytest.raises(InvariantViolation, match="never offered it back"):
        dropped.close()
    assert time.monotonic() - began >= _core.CLOSE_SETTLE_S


async def _use_async(audited: Any) -> None:
    block = await audited.acquire(0)
    assert block is not None
    await audited.release(block)


def test_async_with_waits_for_a_reset_task_and_finds_one_that_drops_the_block() -> None:
    async def main() -> str:
        async with kvstress.audit(DeferredResetTaskPool(2, (2, 4))) as audited:
            await _use_async(audited)
        dropped = kvstress.audit(DropsResetTaskPool(2, (2, 4)))
        await _use_async(dropped)
        with anyio.fail_after(_core.CLOSE_SETTLE_S + 5):
            try:
                await dropped.aclose()
            except InvariantViolation as found:
                return found.invariant
        return "clean"

    assert anyio.run(main) == "lost-block"
