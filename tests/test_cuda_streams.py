"""Reset ordering on CUDA: the reset runs on the pool's stream, and a taker's stream waits for it.

The CUDA tests run only where a device is (scripts/gpu_check.sh runs them on a lent GPU); the
CPU tests pin that nothing of it costs the CPU path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kvstress import InvariantViolation, ThreadedBlockPool
from kvstress.checkers import check_zeroed
from kvstress.pool._storage import StreamOrderedStorage

_Test = Callable[..., Any]


def cuda(test: _Test) -> _Test:
    """Marked ``cuda`` (``pytest -m cuda`` runs these alone) and skipped without a device."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    return pytest.mark.cuda(skip(test))  # type: ignore[no-any-return]


SLOW_RESET_CYCLES = 200_000_000  # about 0.1 s of GPU time queued ahead of the reset


class _NoWaitStorage(StreamOrderedStorage):
    """Planted: hands a block out without making the taker's stream wait for its reset."""

    __slots__ = ()

    def hand_out(self, block_id: int) -> None:
        self._ready.pop(block_id, None)


def test_the_cpu_path_has_no_stream_and_no_events() -> None:
    """On the CPU the reset completes in the call: no stream, no event is ever kept."""
    pool = ThreadedBlockPool(2, (4,), device="cpu")
    block = pool.acquire(0)
    assert block is not None
    pool.release(block)
    storage = pool._storage
    assert storage._stream is None and storage._ready == {}


def _reuse_on_a_side_stream(pool: ThreadedBlockPool) -> None:
    """Fill a block, release it with its reset held back on the pool's stream, take it again on
    another stream and check it there, as a decode step on its own stream would read it."""
    block = pool.acquire(0)
    assert block is not None
    block.data.fill_(1.0)
    stream = pool._storage._stream
    assert stream is not None
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLOW_RESET_CYCLES)  # the reset queued next lands late
    pool.release(block)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        again = pool.acquire(0)
        assert again is not None and again.id == block.id
        check_zeroed(again.id, again.data)
    pool.release(again)
    torch.cuda.synchronize()


@cuda
def test_a_taker_on_another_stream_sees_the_reset() -> None:
    """The taker's stream waits on the reset's event: zeros, however late the reset runs."""
    pool = ThreadedBlockPool(1, (1024, 1024), device="cuda")
    _reuse_on_a_side_stream(pool)


@cuda
def test_skipping_the_wait_is_caught_as_a_dirty_read() -> None:
    """The planted storage does not wait: the taker reads the old tenant's K/V (dirty-read)."""
    pool = ThreadedBlockPool(1, (1024, 1024), device="cuda")
    pool._storage.__class__ = _NoWaitStorage
    with pytest.raises(InvariantViolation) as caught:
        _reuse_on_a_side_stream(pool)
    assert caught.value.invariant == "dirty-read"


@cuda
def test_release_many_is_ordered_the_same_way() -> None:
    """A batched reset is one event for all its blocks; each taker waits on it."""
    pool = ThreadedBlockPool(4, (256, 256), device="cuda")
    blocks = [pool.acquire(0) for _ in range(4)]
    for block in blocks:
        assert block is not None
        block.data.fill_(2.0)
    stream = pool._storage._stream
    assert stream is not None
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLOW_RESET_CYCLES)
    pool.release_many(blocks)  # type: ignore[arg-type]
    with torch.cuda.stream(torch.cuda.Stream()):
        for _ in range(4):
            block = pool.acquire(0)
            assert block is not None
            check_zeroed(block.id, block.data)
    torch.cuda.synchronize()


class _NoWaitManyStorage(StreamOrderedStorage):
    """Planted: hands a batch out without making the taker's stream wait for its reset."""

    __slots__ = ()

    def hand_out_many(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self._ready.pop(block_id, None)


def _batch_reuse_on_a_side_stream(pool: ThreadedBlockPool, launches: list[int]) -> None:
    """A table of 4 blocks is freed with one release_many behind a slow reset, then taken back
    with one acquire_many on another stream: every block must read zeros there."""
    blocks = pool.acquire_many(4, 0)
    assert blocks is not None
    for block in blocks:
        block.data.fill_(3.0)
    stream = pool._storage._stream
    assert stream is not None
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLOW_RESET_CYCLES)
    pool.release_many(blocks)
    launches.append(len(pool._storage._ready))
    with torch.cuda.stream(torch.cuda.Stream()):
        again = pool.acquire_many(4, 0)
        assert again is not None
        for block in again:
            check_zeroed(block.id, block.data)
    torch.cuda.synchronize()


@cuda
def test_acquire_many_waits_on_the_batch_reset_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """One release_many is one reset launch and one event for the 4 blocks; the acquire_many
    that takes them back on a side stream waits on it (every block reads zeros)."""
    pool = ThreadedBlockPool(4, (256, 256), device="cuda")
    on_stream = StreamOrderedStorage._on_stream
    calls: list[list[int]] = []

    def counting(self: StreamOrderedStorage, block_ids: list[int], zero: Callable[[], object]) -> None:
        calls.append(list(block_ids))
        on_stream(self, block_ids, zero)

    monkeypatch.setattr(StreamOrderedStorage, "_on_stream", counting)
    launches: list[int] = []
    _batch_reuse_on_a_side_stream(pool, launches)
    assert calls == [[0, 1, 2, 3]] and launches == [4] and pool._storage._ready == {}


@cuda
def test_a_batch_handed_out_without_waiting_is_caught() -> None:
    """The planted no-wait batch hand-out lets the side stream read the old data: dirty-read."""
    pool = ThreadedBlockPool(4, (1024, 1024), device="cuda")
    pool._storage.__class__ = _NoWaitManyStorage
    with pytest.raises(InvariantViolation) as caught:
        _batch_reuse_on_a_side_stream(pool, [])
    assert caught.value.invariant == "dirty-read"


@cuda
def test_a_release_leaves_the_callers_stream_and_device_as_they_were() -> None:
    """The reset switches to the pool's stream and back: the releaser's current stream (the
    default one, or a side stream it entered) and current device are the same afterwards."""
    pool = ThreadedBlockPool(2, (64, 64), device="cuda")
    device = torch.cuda.current_device()
    default = torch.cuda.current_stream()
    block = pool.acquire(0)
    assert block is not None
    pool.release(block)
    assert torch.cuda.current_stream() == default and torch.cuda.current_device() == device
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        blocks = pool.acquire_many(2, 0)
        assert blocks is not None
        pool.release(blocks[0])
        pool.release_many(blocks[1:])
        assert torch.cuda.current_stream() == side
    assert torch.cuda.current_stream() == default and torch.cuda.current_device() == device
    torch.cuda.synchronize()
    assert pool._storage._stream != default


@cuda
def test_a_scattered_release_many_does_not_wait_for_the_gpu() -> None:
    """A table freed in any order (ids not one run) is reset by an indexed fill whose ids go to
    the device: the host must not wait for the releaser's queued work to finish meanwhile."""
    pool = ThreadedBlockPool(8, (256, 256), device="cuda")
    blocks = [pool.acquire(0) for _ in range(8)]
    # Once first, untimed: the first launch of a kernel loads it (CUDA's lazy loading), which
    # may wait for the device.
    pool.release_many([blocks[i] for i in (7, 2)])  # type: ignore[misc]
    blocks[7], blocks[2] = pool.acquire(0), pool.acquire(0)
    scattered = [blocks[i] for i in (6, 1, 4)]
    for block in scattered:
        assert block is not None
        block.data.fill_(5.0)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(SLOW_RESET_CYCLES)  # the releaser's work still queued: about 0.1 s
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    host = time.perf_counter()
    pool.release_many(scattered)  # type: ignore[arg-type]
    host = time.perf_counter() - host
    torch.cuda.synchronize()
    queued = start.elapsed_time(end) / 1000
    assert host < queued / 4, (host, queued)
    with torch.cuda.stream(torch.cuda.Stream()):
        for _ in range(3):
            block = pool.acquire(0)
            assert block is not None
            check_zeroed(block.id, block.data)
    torch.cuda.synchronize()
