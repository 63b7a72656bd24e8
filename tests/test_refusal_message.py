"""A try-once refused beside a block nobody holds says where that block is."""

from __future__ import annotations

import pytest
from pools._simple import SimpleThreadedPool

from kvstress import BlockState, InvariantViolation
from kvstress.harness import PoolDriver


class LeftReleasingPool(SimpleThreadedPool):
    """BUG: the last release marks the block RELEASING and returns True, and never queues it."""

    def release(self, block):  # type: ignore[no-untyped-def]
        with self._lock:
            block.refcount -= 1
            if block.refcount > 0:
                return False
            block.state = BlockState.RELEASING
            return True


def test_a_refused_try_once_names_the_blocks_missing_from_the_queue_and_their_state() -> None:
    """It said only "held by nobody and every release has returned"; a block a release left
    RELEASING (cancelled halfway, in a blind user's pool) read as if the releases were fine."""
    driver = PoolDriver(LeftReleasingPool, num_blocks=1)
    try:
        block = driver.acquire("h0", 0)
        assert block is not None
        driver.release("h0", block)
        with pytest.raises(InvariantViolation) as caught:
            driver.acquire("h1", 0)
    finally:
        driver.close()
    assert caught.value.invariant == "lost-block"
    assert "not in the free queue: block 0 (RELEASING)" in caught.value.message


def test_an_unlinearizable_refusal_is_named_by_the_acquire_refused() -> None:
    """A try-once refused while the block its timed acquire released was free: lost-block. It
    read "a waiting acquire gave up: lost-wakeup" because any timed acquire in the witness (here
    the one that got the block) named it."""
    from kvstress import Operation
    from kvstress.linearize import check_history
    from kvstress.scenarios._execution import unlinearizable

    history = (
        Operation(0, "w0", "acquire", {"timeout": 0.2}, 0.0, 1.0, "ok", 0),
        Operation(1, "w0", "release", {"block": 0}, 2.0, 3.0, "ok", True),
        Operation(2, "w1", "acquire", {"timeout": 0}, 4.0, 5.0, "ok", None),
    )
    result = check_history(history, 1)
    assert result.status == "violation"
    violation = unlinearizable(history, result)
    assert violation.invariant == "lost-block"
    assert "a try-once refused" in violation.message
    waited = (*history[:2], Operation(2, "w1", "acquire", {"timeout": 0.2}, 4.0, 5.0, "ok", None))
    assert unlinearizable(waited, check_history(waited, 1)).invariant == "lost-wakeup"
