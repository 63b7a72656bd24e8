"""Bounded, seeded smoke stress: many holders, few blocks, canaries, shares, double releases."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator

import anyio
import pytest
import torch

from kvstress import AsyncBlockPool, Block, ThreadedBlockPool

pytestmark = pytest.mark.stress
SEED = 20261129


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    """Switch threads every few microseconds so interleavings vary."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def check_quiescent(pool: ThreadedBlockPool | AsyncBlockPool) -> None:
    assert pool.free_count() == len(pool.free_ids()) == pool.num_blocks
    assert sorted(pool.free_ids()) == list(range(pool.num_blocks))
    assert pool.metrics()["acquired_count"] == 0
    assert torch.count_nonzero(pool.storage) == 0


def holder_turn(rng: random.Random, pool: ThreadedBlockPool, canary: float, errors: list[str]) -> None:
    block = pool.acquire(timeout=rng.choice([0, 0.001, 0.5]))
    if block is None:
        return
    if torch.count_nonzero(block.data):
        errors.append(f"dirty block {block.id}")
    pool.mark_in_use(block)
    block.data.fill_(canary)
    if rng.random() < 0.3:
        pool.retain(block)
        pool.release(block)
    if not bool((block.data == canary).all()):
        errors.append(f"canary overwritten in block {block.id}")
    if not pool.release(block):
        errors.append(f"release of held block {block.id} returned False")
    if rng.random() < 0.1 and pool.release(block):
        errors.append(f"double release of block {block.id} returned True")


def test_threaded_pool_survives_contention(tiny_switch_interval: None) -> None:
    """4 threads x 300 turns over 3 blocks: no dirty read, no shared block, all blocks back."""
    pool = ThreadedBlockPool(3, (4, 8))
    errors: list[str] = []

    def worker(index: int) -> None:
        rng = random.Random(SEED + index)
        for _ in range(300):
            holder_turn(rng, pool, float(index + 1), errors)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert errors == []
    check_quiescent(pool)


@pytest.mark.anyio
async def test_async_pool_survives_contention_and_cancellation() -> None:
    """8 tasks x 200 turns over 3 blocks, with cancelled acquires: every block comes back clean."""
    pool = AsyncBlockPool(3, (4, 8))
    errors: list[str] = []

    async def turn(rng: random.Random, canary: float) -> None:
        block: Block | None = None
        with anyio.move_on_after(rng.choice([0.0, 0.0005, 0.01])):
            block = await pool.acquire(timeout=rng.choice([None, 0, 0.002]))
        if block is None:
            return
        if torch.count_nonzero(block.data):
            errors.append(f"dirty block {block.id}")
        pool.mark_in_use(block)
        block.data.fill_(canary)
        await anyio.sleep(rng.choice([0, 0, 0.0005]))
        if not bool((block.data == canary).all()):
            errors.append(f"canary overwritten in block {block.id}")
        with anyio.CancelScope() as scope:
            if rng.random() < 0.2:
                scope.cancel()  # a release in a cancelled scope must still complete
            if not await pool.release(block):
                errors.append(f"release of held block {block.id} returned False")

    async def worker(index: int) -> None:
        rng = random.Random(SEED + index)
        for _ in range(200):
            await turn(rng, float(index + 1))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for index in range(8):
                tg.start_soon(worker, index)
    assert errors == []
    check_quiescent(pool)
