"""The pooled path: block-by-block writes, and each overload policy on a pool the test has drained."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kvstress.bench import LoadSpec, Outcome, OverloadPolicy, Phase, Request, WorkloadConfig
from kvstress.bench._pooled import PooledPath
from kvstress.capacity import load_card, pool_for_model
from kvstress.pool import Block, BlockState, ThreadedBlockPool

TINY = load_card("tiny")  # 16-token blocks


def _pool(blocks: int) -> ThreadedBlockPool:
    return pool_for_model(ThreadedBlockPool, TINY, blocks)


def _path(pool: ThreadedBlockPool, policy: OverloadPolicy, **serving: Any) -> PooledPath:
    config = WorkloadConfig(TINY, LoadSpec(max_tokens=256), policy=policy, **serving)
    return PooledPath(pool, config)


def _request(tokens: int) -> Request:
    return Request(index=3, phase=Phase.STEADY, tokens=tokens, hold_s=0.0)


def _take(pool: ThreadedBlockPool, count: int) -> list[Block]:
    taken = [pool.acquire(0) for _ in range(count)]
    assert all(block is not None for block in taken)
    return [block for block in taken if block is not None]


def test_a_request_writes_its_tokens_block_by_block_and_returns_them() -> None:
    """40 tokens take 3 blocks (16, 16, 8) with no wait, and all 3 are back in the pool after."""
    pool = _pool(8)
    result = _path(pool, OverloadPolicy.QUEUE).serve(_request(40), 0.0)
    assert (result.outcome, result.tokens_written, result.attempts) == (Outcome.COMPLETED, 40, 1)
    assert (result.waits, result.timeouts, result.truncations) == (0, 0, 0)
    assert pool.free_count() == 8 and pool.metrics()["acquired_count"] == 0


def test_the_blocks_hold_the_request_while_it_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """During the hold the request's blocks are IN_USE and hold its K/V in the first token slots."""
    pool = _pool(4)
    seen: list[int] = []

    def look(hold_s: float) -> None:  # the hold, when the request has written everything
        in_use = [info.id for info in pool.dump() if info.state is BlockState.IN_USE]
        seen.extend(int(pool.storage[block_id].count_nonzero()) for block_id in in_use)

    monkeypatch.setattr(time, "sleep", look)
    _path(pool, OverloadPolicy.QUEUE).serve(_request(20), 0.0)
    per_token = 2 * TINY.layers * TINY.kv_heads * TINY.head_dim
    assert sorted(seen) == [4 * per_token, 16 * per_token]


def test_reject_fails_at_once_and_gives_back_what_it_held() -> None:
    """Reject: the first empty acquire rejects the request, counted, and its blocks go back."""
    pool = _pool(4)
    _take(pool, 2)
    result = _path(pool, OverloadPolicy.REJECT).serve(_request(48), 0.0)
    assert (result.outcome, result.tokens_written, result.waits, result.timeouts) == (
        Outcome.REJECTED,
        32,
        1,
        0,
    )
    assert pool.free_count() == 2


def test_queue_waits_for_a_release() -> None:
    """Queue: a request that finds the pool empty waits, and completes when a block comes back."""
    pool = _pool(2)
    (held,) = _take(pool, 1)
    threading.Timer(0.05, pool.release, [held]).start()
    result = _path(pool, OverloadPolicy.QUEUE, queue_timeout_s=30.0).serve(_request(32), 0.0)
    assert (result.outcome, result.tokens_written, result.waits, result.timeouts) == (
        Outcome.COMPLETED,
        32,
        1,
        0,
    )
    assert pool.free_count() == 2


def test_queue_gives_up_after_max_attempts_and_counts_the_redone_tokens() -> None:
    """Queue: each timed-out attempt is preempted (its tokens redone); after max_attempts it gives up."""
    pool = _pool(1)
    path = _path(pool, OverloadPolicy.QUEUE, queue_timeout_s=0.01, max_attempts=3)
    result = path.serve(_request(32), 0.0)
    assert (result.outcome, result.attempts, result.timeouts, result.waits) == (Outcome.GAVE_UP, 3, 3, 3)
    assert (result.tokens_written, result.tokens_redone) == (0, 48)
    assert pool.free_count() == 1


def test_truncate_gives_back_the_oldest_middle_blocks_and_counts_them() -> None:
    """Truncate: 8 blocks on a pool of 6 keep the sink and the window, cutting two blocks, counted."""
    pool = _pool(6)
    path = _path(pool, OverloadPolicy.TRUNCATE, sink_blocks=1, window_blocks=2)
    result = path.serve(_request(128), 0.0)
    assert (result.outcome, result.tokens_written, result.attempts) == (Outcome.COMPLETED, 128, 1)
    assert (result.truncations, result.tokens_truncated, result.waits, result.timeouts) == (2, 32, 2, 0)
    assert pool.free_count() == 6


def test_truncate_queues_when_nothing_can_be_cut() -> None:
    """Truncate: a request no longer than sink + window cannot be cut, so it waits as the queue does."""
    pool = _pool(1)
    path = _path(pool, OverloadPolicy.TRUNCATE, queue_timeout_s=0.01, max_attempts=2)
    result = path.serve(_request(32), 0.0)
    assert (result.outcome, result.truncations, result.timeouts, result.tokens_redone) == (
        Outcome.GAVE_UP,
        0,
        2,
        32,
    )
    assert pool.free_count() == 1
