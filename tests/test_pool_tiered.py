"""The tiered pool: the protocol, growth under load, shrink when idle, the bound, and its planted bugs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import tiered_mutants
import torch
from hypothesis.stateful import run_state_machine_as_test
from machine_settings import ci, hunt
from tiered_mutants import BROKEN_TIERED, ChurningTieredPool, TickingTieredPool

import kvstress
from kvstress import BlockState, TimingPolicy
from kvstress._violation import InvariantViolation
from kvstress.controlled import run_threads
from kvstress.pool._block import Block
from kvstress.pool._tiered import TieredBlockPool
from kvstress.pool._tiered_storage import SegmentedStorage
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler

CI = ci(20)
HUNT = hunt(CI, 100)


class Clocked(TieredBlockPool):
    """A tiered pool on a clock the test sets by hand."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.clock = 0.0

    def _now(self) -> float:
        return self.clock


def held(pool: TieredBlockPool, count: int) -> list[Block]:
    """``count`` blocks acquired at once (no waiting)."""
    blocks = [pool.acquire(0) for _ in range(count)]
    assert all(b is not None for b in blocks)
    return [b for b in blocks if b is not None]


def test_defaults_preallocate_half_and_nothing_elastic() -> None:
    """core_blocks defaults to half (at least 1); only the core's memory exists at start."""
    pool = TieredBlockPool(10, (2, 3), device="cpu")
    assert pool.core_blocks == 5 and pool.grow_blocks == 2
    assert pool.storage.shape == (5, 2, 3)
    metrics = pool.metrics()
    assert metrics["elastic_blocks"] == 0 and metrics["memory_bytes"] == 5 * 6 * 4
    assert pool.free_ids() == list(range(10)) and pool.free_count() == 10
    assert TieredBlockPool(1, (2,)).core_blocks == 1


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"core_blocks": 0}, "core_blocks"),
        ({"core_blocks": 9}, "core_blocks"),
        ({"core_blocks": True}, "core_blocks"),
        ({"grow_blocks": 0}, "grow_blocks"),
        ({"idle_shrink_s": -1.0}, "idle_shrink_s"),
        ({"idle_shrink_s": float("nan")}, "idle_shrink_s"),
    ],
)
def test_bad_tier_arguments_are_refused_by_name(options: dict[str, Any], named: str) -> None:
    """A bad tier argument raises ValueError naming it and the value received."""
    with pytest.raises(ValueError, match=named) as info:
        TieredBlockPool(8, (2,), **options)
    assert repr(next(iter(options.values()))) in str(info.value)


def test_light_load_stays_in_the_core() -> None:
    """Acquire-release cycles below the core's size never touch an elastic id."""
    pool = TieredBlockPool(8, (2,), core_blocks=3, grow_blocks=1)
    seen = set()
    for _ in range(20):
        blocks = held(pool, 3)
        seen |= {b.id for b in blocks}
        for b in blocks:
            pool.release(b)
    assert seen == {0, 1, 2}
    assert pool.metrics()["elastic_grow_count"] == 0


def test_the_elastic_tier_grows_a_segment_at_a_time_under_load() -> None:
    """Past the core, each new segment is allocated on first use, zeroed; lowest ids first."""
    pool = TieredBlockPool(9, (2, 2), core_blocks=3, grow_blocks=2, idle_shrink_s=60)
    blocks = held(pool, 4)
    assert [b.id for b in blocks] == [0, 1, 2, 3]
    assert pool.metrics()["elastic_blocks"] == 2 and pool.metrics()["elastic_grow_count"] == 1
    blocks += held(pool, 2)
    assert [b.id for b in blocks[4:]] == [4, 5]
    assert pool.metrics()["elastic_blocks"] == 4 and pool.metrics()["elastic_grow_count"] == 2
    assert all(torch.count_nonzero(b.data) == 0 and b.state is BlockState.ACQUIRED for b in blocks)
    assert pool.free_ids() == [6, 7, 8]


def test_a_whole_segment_idle_long_enough_is_given_back() -> None:
    """After idle_shrink_s with all its blocks free, the next acquire or release frees a segment."""
    pool = Clocked(4, (2,), core_blocks=2, grow_blocks=2, idle_shrink_s=5.0)
    blocks = held(pool, 4)
    for b in blocks[2:]:
        pool.release(b)
    pool.clock = 4.9
    pool.release(blocks[0])
    assert pool.metrics()["elastic_blocks"] == 2  # not idle long enough
    pool.clock = 5.0
    pool.release(blocks[1])
    metrics = pool.metrics()
    assert metrics["elastic_blocks"] == 0 and metrics["elastic_shrink_count"] == 1
    assert metrics["elastic_peak_blocks"] == 2
    again = held(pool, 3)[2]  # the third block is elastic again: a fresh segment
    assert again.id == 2 and torch.count_nonzero(again.data) == 0
    assert pool.metrics()["elastic_grow_count"] == 2


def test_a_segment_with_a_block_lent_is_never_given_back() -> None:
    """One lent block keeps its segment, and its holder's data, however long the rest idle."""
    pool = Clocked(5, (2,), core_blocks=1, grow_blocks=4, idle_shrink_s=1.0)
    blocks = held(pool, 5)
    keeper = blocks[3]
    keeper.data.fill_(7.0)
    for b in blocks[:3] + blocks[4:]:
        pool.release(b)
    for step in range(1, 4):
        pool.clock = 100.0 * step
        pool.release(held(pool, 1)[0])
    assert pool.metrics()["elastic_blocks"] == 4 and pool.metrics()["elastic_shrink_count"] == 0
    assert torch.equal(keeper.data, torch.full((2,), 7.0))
    pool.release(keeper)
    pool.clock = 500.0
    pool.release(held(pool, 1)[0])
    assert pool.metrics()["elastic_blocks"] == 0


class _SpyStorage(SegmentedStorage):
    """Records, at each reset, whether the block was already back in the free queue."""

    pool: TieredBlockPool
    offered_before_reset: list[bool]

    def reset(self, block_id: int) -> None:
        type(self).offered_before_reset.append(block_id in type(self).pool.free_ids())
        super().reset(block_id)


def test_elastic_blocks_are_reset_strictly_before_they_are_offered() -> None:
    """A released elastic block is zeroed while still out of the queue; its next tenant reads zeros."""
    pool = TieredBlockPool(3, (4,), core_blocks=1, grow_blocks=2, idle_shrink_s=60)
    _SpyStorage.pool, _SpyStorage.offered_before_reset = pool, []
    pool._storage = _SpyStorage(3, 1, 2, (4,), pool.dtype, pool.device)
    blocks = held(pool, 3)
    for b in blocks:
        b.data.fill_(3.0)
    for b in reversed(blocks):
        pool.release(b)
    assert _SpyStorage.offered_before_reset == [False, False, False]
    again = held(pool, 3)
    assert [b.id for b in again] == [0, 1, 2]
    assert all(torch.count_nonzero(b.data) == 0 for b in again)


def test_the_lent_total_never_exceeds_num_blocks() -> None:
    """Exhausted at num_blocks; with 6 threads hammering 4 blocks, lent and memory stay bounded."""
    pool = TieredBlockPool(4, (2,), core_blocks=1, grow_blocks=1, idle_shrink_s=0)
    blocks = held(pool, 4)
    assert pool.acquire(0) is None and pool.acquire(0.001) is None
    for b in blocks:
        pool.release(b)
    lent, peak, guard = [0], [0], threading.Lock()

    def worker() -> None:
        for _ in range(60):
            block = pool.acquire(0.05)
            if block is None:
                continue
            with guard:
                lent[0] += 1
                peak[0] = max(peak[0], lent[0])
            with guard:
                lent[0] -= 1
            pool.release(block)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= peak[0] <= 4
    assert pool.metrics()["elastic_peak_blocks"] <= 3 and pool.free_count() == 4


class _NoMemoryStorage(SegmentedStorage):
    def lend(self, block_id: int) -> None:
        if self.segment_of(block_id) >= 0:
            raise torch.OutOfMemoryError("no memory for a segment")
        super().lend(block_id)


def test_a_segment_that_cannot_be_allocated_puts_the_block_back() -> None:
    """Out of memory while growing: acquire raises, and the block is FREE and queued again."""
    pool = TieredBlockPool(2, (2,), core_blocks=1)
    pool._storage = _NoMemoryStorage(2, 1, 1, (2,), pool.dtype, pool.device)
    first = held(pool, 1)[0]
    with pytest.raises(torch.OutOfMemoryError):
        pool.acquire(0)
    assert pool.free_ids() == [1] and pool.free_count() == 1 and pool.dump()[1].state is BlockState.FREE
    assert pool.metrics()["acquired_count"] == 1
    pool.release(first)


def test_virtual_time_of_a_controlled_run_drives_the_shrink() -> None:
    """Under run_threads, a 30 s idle sleep costs no wall time and the segment goes back."""

    def main() -> dict[str, float | int]:
        pool = TieredBlockPool(2, (2,), core_blocks=1, idle_shrink_s=30.0)
        blocks = held(pool, 2)
        for b in blocks:
            pool.release(b)
        time.sleep(30.0)
        pool.release(held(pool, 1)[0])
        return pool.metrics()

    metrics = run_threads(main, RandomScheduler(seed=1), modules=[TieredBlockPool, __name__])
    assert metrics["elastic_shrink_count"] == 1 and metrics["elastic_blocks"] == 0


CORRECT = [TieredBlockPool, ChurningTieredPool, TickingTieredPool]


@pytest.mark.parametrize("factory", CORRECT, ids=lambda f: f.__name__)
def test_state_machine_is_silent_on_the_tiered_pool(factory: type) -> None:
    """kvstress' own state machine, derandomized, finds nothing on the correct tiered pools."""
    run_state_machine_as_test(kvstress.pool_machine(factory), settings=CI)


@pytest.mark.parametrize("factory", CORRECT, ids=lambda f: f.__name__)
def test_controlled_schedules_find_nothing_on_the_tiered_pool(factory: type) -> None:
    """Seeded random and PCT interleavings of the scenarios are clean."""
    for scheduler in (RandomScheduler(seed=11), PCTScheduler(depth=3, seed=5)):
        result = search(ScenarioConfig(factory, False, num_blocks=3), scheduler, max_executions=40)
        assert result.failure is None, result.failure.describe()


@pytest.mark.parametrize("factory", BROKEN_TIERED, ids=lambda f: f.__name__)
def test_state_machine_names_each_planted_tier_bug(factory: type) -> None:
    """Each planted tier bug fails the state machine with one of its expected ids."""
    machine = kvstress.pool_machine(factory, timing=TimingPolicy(hang_bound=1.0))
    with pytest.raises(InvariantViolation) as info:
        run_state_machine_as_test(machine, settings=HUNT)
    assert info.value.invariant in factory.expected, info.value.details()


@pytest.mark.parametrize("factory", BROKEN_TIERED, ids=lambda f: f.__name__)
def test_controlled_schedules_find_each_planted_tier_bug(factory: type) -> None:
    """Seeded random interleavings find each planted tier bug too."""
    config = ScenarioConfig(factory, False, num_blocks=3)
    result = search(config, RandomScheduler(seed=3), max_executions=200, shrink=False)
    assert result.failure is not None
    assert result.failure.violation.invariant in factory.expected, result.failure.describe()


def test_mutants_module_lists_every_broken_pool() -> None:
    """BROKEN_TIERED holds every pool with an ``expected`` id in the mutants module."""
    planted = {v for v in vars(tiered_mutants).values() if isinstance(v, type) and hasattr(v, "expected")}
    assert planted == set(BROKEN_TIERED)


def test_release_many_spans_the_tiers_and_settles_each_segment() -> None:
    """Blocks from the core and an elastic segment come back zeroed in one call, and the
    segment's lent count drops to zero, as with one release at a time."""
    pool = TieredBlockPool(4, (3,), core_blocks=2, grow_blocks=2)
    blocks = [pool.acquire(0) for _ in range(4)]
    for block in blocks:
        assert block is not None
        block.data.fill_(5.0)
    assert pool.metrics()["elastic_blocks"] == 2
    assert pool.release_many(blocks) == [True, True, True, True]  # type: ignore[arg-type]
    assert pool.free_count() == 4 and pool._storage.lent_in(0) == 0
    again = [pool.acquire(0) for _ in range(4)]
    assert all(b is not None and torch.count_nonzero(b.data) == 0 for b in again)
