"""The threaded pool keeps every rule of the pool protocol."""

from __future__ import annotations

import threading
import time

import pytest
import structlog
import torch

from kvstress import BlockState, InvalidTransition, PoolExhausted, ThreadedBlockPool
from kvstress.pool._storage import HOST_COPY_MAX_BYTES, BlockStorage


def make(num_blocks: int = 4, shape: tuple[int, ...] = (2, 3)) -> ThreadedBlockPool:
    return ThreadedBlockPool(num_blocks, shape)


def test_acquire_gives_zeroed_acquired_block_with_refcount_one() -> None:
    """A fresh block is ACQUIRED, refcount 1, all zeros, of the pool's shape and device."""
    pool = make()
    block = pool.acquire()
    assert block is not None
    assert block.state is BlockState.ACQUIRED
    assert block.refcount == 1
    assert block.data.shape == (2, 3)
    assert block.data.device.type == "cpu"
    assert torch.count_nonzero(block.data) == 0


def test_blocks_are_views_of_one_preallocated_tensor() -> None:
    """Every block's data is a view into the one storage tensor, at its own offset."""
    pool = make(3, (4,))
    base = pool.storage.data_ptr()
    blocks = [pool.acquire(0) for _ in range(3)]
    offsets = sorted(b.data.data_ptr() - base for b in blocks if b is not None)
    assert offsets == [0, 16, 32]
    assert all(b is not None and b.data._base is pool.storage for b in blocks)


def test_device_none_means_cuda_when_available_else_cpu() -> None:
    """device=None resolves to CUDA only when torch sees a GPU."""
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert make().device.type == expected


def test_ids_are_fixed_and_in_range() -> None:
    """Ids run 0..num_blocks-1 and the free queue starts in id order."""
    pool = make(5)
    assert pool.free_ids() == [0, 1, 2, 3, 4]
    assert sorted(b.id for b in (pool.acquire(0) for _ in range(5)) if b is not None) == [0, 1, 2, 3, 4]


def test_free_queue_is_fifo() -> None:
    """A released block goes to the back of the free queue."""
    pool = make(3)
    first = pool.acquire()
    assert first is not None
    pool.release(first)
    assert pool.free_ids() == [1, 2, 0]


def test_timeout_zero_tries_once() -> None:
    """timeout=0 on an empty pool returns None at once."""
    pool = make(1)
    assert pool.acquire() is not None
    start = time.monotonic()
    assert pool.acquire(0) is None
    assert time.monotonic() - start < 0.5


def test_timeout_returns_none_not_before_the_deadline() -> None:
    """A timed-out acquire returns None, never before its timeout has elapsed."""
    pool = make(1)
    pool.acquire()
    start = time.monotonic()
    assert pool.acquire(0.05) is None
    assert time.monotonic() - start >= 0.05


def test_waiting_acquire_parks_instead_of_spinning() -> None:
    """A thread waiting 0.3 s for a block uses little CPU time (it parks on a condition)."""
    pool = make(1)
    pool.acquire()
    used: list[float] = []

    def wait() -> None:
        cpu0 = time.thread_time()
        pool.acquire(0.3)
        used.append(time.thread_time() - cpu0)

    t = threading.Thread(target=wait)
    t.start()
    t.join(5)
    assert used and used[0] < 0.05


def test_waiter_is_woken_by_release() -> None:
    """A waiter with a long timeout gets the block soon after another thread releases it."""
    pool = make(1)
    held = pool.acquire()
    assert held is not None
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(pool.acquire(10)))
    t.start()
    time.sleep(0.05)
    start = time.monotonic()
    assert pool.release(held)
    t.join(5)
    assert got and got[0] is not None
    assert time.monotonic() - start < 1.0


def test_acquire_without_timeout_waits_for_a_release() -> None:
    """timeout=None waits without limit until a block is released."""
    pool = make(1)
    held = pool.acquire()
    assert held is not None
    threading.Timer(0.05, pool.release, args=(held,)).start()
    block = pool.acquire(None)
    assert block is not None and block.id == held.id


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), "1", True])
def test_bad_timeout_is_a_value_error_naming_it(bad: object) -> None:
    """A negative, NaN or non-number timeout raises ValueError naming timeout and the value."""
    with pytest.raises(ValueError, match=r"timeout.*got"):
        make().acquire(bad)  # type: ignore[arg-type]


def test_mark_in_use_moves_acquired_to_in_use() -> None:
    """mark_in_use takes ACQUIRED to IN_USE."""
    pool = make()
    block = pool.acquire()
    assert block is not None
    pool.mark_in_use(block)
    assert block.state is BlockState.IN_USE


def test_mark_in_use_twice_is_an_invalid_transition() -> None:
    """IN_USE -> IN_USE is refused with a message naming block, state and transition."""
    pool = make()
    block = pool.acquire()
    assert block is not None
    pool.mark_in_use(block)
    with pytest.raises(InvalidTransition, match=r"block 0 is IN_USE; mark_in_use \(ACQUIRED -> IN_USE\)"):
        pool.mark_in_use(block)
    assert isinstance(InvalidTransition(0, "FREE", "x"), ValueError)


def test_mark_in_use_after_release_is_refused() -> None:
    """A stale handle cannot mark a block that was returned to the pool."""
    pool = make(1)
    block = pool.acquire()
    assert block is not None
    pool.release(block)
    with pytest.raises(InvalidTransition, match="block 0 is FREE"):
        pool.mark_in_use(block)
    pool.acquire()  # the same block, a new tenancy
    with pytest.raises(InvalidTransition, match="stale handle"):
        pool.mark_in_use(block)
    assert block.state is BlockState.ACQUIRED


def test_retain_shares_and_last_release_returns() -> None:
    """retain adds a reference; only the release that drops the last one returns the block."""
    pool = make(2)
    block = pool.acquire()
    assert block is not None
    pool.mark_in_use(block)
    pool.retain(block)
    assert block.refcount == 2
    assert pool.release(block) is False
    assert block.refcount == 1 and block.state is BlockState.IN_USE
    assert pool.free_count() == 1
    assert pool.release(block) is True
    assert block.state is BlockState.FREE and block.refcount == 0
    assert pool.free_count() == 2


def test_retain_on_a_block_not_held_raises() -> None:
    """retain on a released block raises InvalidTransition and changes nothing."""
    pool = make()
    block = pool.acquire()
    assert block is not None
    pool.release(block)
    with pytest.raises(InvalidTransition):
        pool.retain(block)
    assert block.refcount == 0


def test_release_resets_the_data_before_the_next_acquire() -> None:
    """Data written by one holder is zero when the block is handed out again."""
    pool = make(1)
    block = pool.acquire()
    assert block is not None
    pool.mark_in_use(block)
    block.data.fill_(7.0)
    pool.release(block)
    again = pool.acquire()
    assert again is not None and again.id == block.id
    assert torch.count_nonzero(again.data) == 0


@pytest.mark.parametrize(
    ("block_shape", "under_lock"), [((2,), True), ((HOST_COPY_MAX_BYTES // 4 + 1,), False)]
)
def test_reset_happens_strictly_before_the_offer(
    monkeypatch: pytest.MonkeyPatch, block_shape: tuple[int, ...], under_lock: bool
) -> None:
    """While the block is being zeroed it is RELEASING and not yet in the free queue; a short
    host reset runs under the lock, a large one outside it."""
    pool = ThreadedBlockPool(2, block_shape)
    block = pool.acquire()
    assert block is not None
    seen: list[tuple[BlockState, bool, int, bool]] = []
    storage_class = type(pool._storage)
    original = storage_class.reset

    def spying_reset(storage: BlockStorage, block_id: int) -> None:
        core = pool._core  # read without the lock, which the reset may hold
        seen.append((core.state(block_id), block_id in core.free_ids(), core.free_count, pool._lock.locked()))
        original(storage, block_id)

    monkeypatch.setattr(storage_class, "reset", spying_reset)
    assert pool.release(block)
    assert seen == [(BlockState.RELEASING, False, 1, under_lock)]
    assert block.id in pool.free_ids()


def test_double_release_changes_nothing_and_is_counted_and_logged() -> None:
    """A second release returns False, leaves the pool as it was, counts and warns."""
    pool = make(2)
    block = pool.acquire()
    assert block is not None
    assert pool.release(block)
    before = (pool.free_ids(), pool.free_count())
    with structlog.testing.capture_logs() as logs:
        assert pool.release(block) is False
    assert (pool.free_ids(), pool.free_count()) == before
    assert pool.metrics()["double_release_count"] == 1
    assert [e["event"] for e in logs] == ["double_release"]
    assert logs[0]["log_level"] == "warning" and logs[0]["block"] == block.id


def test_stale_release_does_not_touch_the_next_tenant() -> None:
    """A release through an old handle, after the block was taken again, is a double release."""
    pool = make(1)
    old = pool.acquire()
    assert old is not None
    pool.release(old)
    new = pool.acquire()
    assert new is not None and new.id == old.id
    assert pool.release(old) is False
    assert new.state is BlockState.ACQUIRED and new.refcount == 1
    assert pool.metrics()["double_release_count"] == 1


def test_refcount_never_goes_negative() -> None:
    """Repeated releases leave the refcount at 0."""
    pool = make(1)
    block = pool.acquire()
    assert block is not None
    for _ in range(3):
        pool.release(block)
    assert block.refcount == 0


def test_release_of_a_foreign_object_is_a_value_error() -> None:
    """Releasing something this pool did not hand out raises ValueError naming block."""
    pool, other = make(), make()
    foreign = other.acquire()
    with pytest.raises(ValueError, match="block must be a Block handed out by this pool"):
        pool.release(foreign)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block must be"):
        pool.release("block 0")  # type: ignore[arg-type]


def test_counter_matches_queue_and_states_when_quiet() -> None:
    """free_count == len(free_ids) == number of FREE blocks after a mix of operations."""
    pool = make(6)
    blocks = [pool.acquire(0) for _ in range(4)]
    assert all(b is not None for b in blocks)
    pool.retain(blocks[0])  # type: ignore[arg-type]
    for b in blocks[:3]:
        pool.release(b)  # type: ignore[arg-type]
    free_states = sum(1 for info in pool.dump() if info.state is BlockState.FREE)
    assert pool.free_count() == len(pool.free_ids()) == free_states == 4


def test_context_manager_releases_on_exception() -> None:
    """with pool.block() releases the block even when the body raises."""
    pool = make(1)
    with pytest.raises(RuntimeError), pool.block(1) as block:
        pool.mark_in_use(block)
        raise RuntimeError("boom")
    assert pool.free_count() == 1
    assert block.state is BlockState.FREE


def test_context_manager_raises_pool_exhausted_on_timeout() -> None:
    """with pool.block(timeout) raises PoolExhausted (a TimeoutError) when none comes."""
    pool = make(1)
    pool.acquire()
    with pytest.raises(PoolExhausted), pool.block(0.01):
        pass
    assert issubclass(PoolExhausted, TimeoutError)


def test_metrics_report_the_seeds_five() -> None:
    """metrics() has free and acquired counts, wait P50/P99, double releases, leak suspects."""
    pool = make(2)
    a = pool.acquire()
    pool.acquire()
    assert pool.acquire(0.02) is None
    pool.release(a)  # type: ignore[arg-type]
    m = pool.metrics()
    assert m["free_count"] == 1 and m["acquired_count"] == 1
    assert m["acquire_wait_p50_s"] == 0.0
    assert m["acquire_wait_p99_s"] >= 0.02
    assert m["double_release_count"] == 0 and m["leak_suspect_count"] == 0
    assert m["acquire_timeout_count"] == 1


def test_dump_shows_every_block_with_holder() -> None:
    """dump() lists each block's state, refcount, holder and queue membership."""
    pool = make(2)
    block = pool.acquire()
    assert block is not None
    infos = pool.dump()
    assert [i.id for i in infos] == [0, 1]
    assert infos[0].state is BlockState.ACQUIRED and infos[0].refcount == 1
    assert infos[0].holder is not None and "MainThread" in infos[0].holder
    assert not infos[0].in_free_queue and infos[1].in_free_queue
    assert infos[1].holder is None and infos[1].held_for_s is None


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        ((0, (2,)), {}, "num_blocks"),
        ((-3, (2,)), {}, "num_blocks"),
        ((2.0, (2,)), {}, "num_blocks"),
        ((2, ()), {}, "block_shape"),
        ((2, (2, 0)), {}, "block_shape"),
        ((2, "ab"), {}, "block_shape"),
        ((2, (2,)), {"dtype": "float32"}, "dtype"),
        ((2, (2,)), {"device": "nonsense"}, "device"),
        ((2, (2,)), {"leak_threshold": -1}, "leak_threshold"),
        ((2, (2,)), {"leak_sample_rate": 0}, "leak_sample_rate"),
    ],
)
def test_constructor_misuse_names_the_argument(args: tuple, kwargs: dict, named: str) -> None:
    """Bad constructor arguments raise ValueError naming the argument and the value."""
    with pytest.raises(ValueError, match=rf"^{named} .*got"):
        ThreadedBlockPool(*args, **kwargs)
