"""Cooperative primitives once no run is in progress: plain primitives for real threads.

A pool built during an explored test (a session-scoped fixture first set up there) keeps the
cooperative locks and conditions it was built with; the plain tests after it drive it from real
threads, which must block and wake as with ``threading``'s own (a blind user's unmarked test
failed with "Condition.wait() outside a controlled thread would wait forever")."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from kvstress import ThreadedBlockPool
from kvstress.controlled import _coop, run_threads
from kvstress.schedulers import RandomScheduler

JOIN_S = 10.0  # a bound on a thread that must finish, never a timing assertion


def _start(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def test_a_lock_held_by_a_real_thread_makes_another_wait_for_its_release() -> None:
    lock, order = _coop.Lock(), []
    assert lock.acquire()

    def other() -> None:
        with lock:
            order.append("other")

    thread = _start(other)
    time.sleep(0.05)
    order.append("first releases")
    lock.release()
    thread.join(JOIN_S)
    assert order == ["first releases", "other"] and not lock.locked()
    assert lock.acquire(timeout=0.01)
    assert not lock.acquire(timeout=0.01)  # held by this thread: a Lock is not reentrant
    lock.release()


def test_an_rlock_is_reentrant_for_its_owner_only() -> None:
    lock = _coop.RLock()
    with lock, lock:
        got: list[bool] = []
        thread = _start(lambda: got.append(lock.acquire(timeout=0.02)))
        thread.join(JOIN_S)
        assert got == [False]
    with pytest.raises(RuntimeError):
        lock.release()


def test_a_condition_wakes_a_real_waiter_and_times_out_without_a_notify() -> None:
    cond, items, got = _coop.Condition(_coop.Lock()), list[int](), list[object]()

    def consumer() -> None:
        with cond:
            got.append(cond.wait_for(lambda: items, timeout=JOIN_S))

    thread = _start(consumer)
    time.sleep(0.05)
    with cond:
        items.append(1)
        cond.notify()
    thread.join(JOIN_S)
    assert got == [[1]]
    with cond:
        started = time.monotonic()
        assert cond.wait(0.02) is False
        assert time.monotonic() - started >= 0.02


def test_a_semaphore_and_an_event_block_until_another_real_thread_acts() -> None:
    semaphore, event, got = _coop.Semaphore(0), _coop.Event(), []
    thread = _start(lambda: got.append((semaphore.acquire(timeout=JOIN_S), event.wait(JOIN_S))))
    time.sleep(0.05)
    semaphore.release()
    event.set()
    thread.join(JOIN_S)
    assert got == [(True, True)]
    assert semaphore.acquire(timeout=0.01) is False and _coop.Event().wait(0.01) is False


def test_a_lock_a_finished_run_left_held_still_refuses_to_wait_for_ever() -> None:
    """Held by a controlled thread of a run that is over: no one will give it up."""
    lock = _coop.Lock()
    lock._locked, lock._owner = True, SimpleNamespace(name="b0", tid=1)  # type: ignore[assignment]
    assert lock.acquire(False) is False
    with pytest.raises(RuntimeError, match="would wait forever"):
        lock.acquire()


def test_a_pool_built_in_a_controlled_run_serves_real_threads_after_it() -> None:
    pool = run_threads(
        lambda: ThreadedBlockPool(2, (2,)), RandomScheduler(seed=0), modules=[ThreadedBlockPool]
    )
    assert isinstance(pool._not_empty, _coop.Condition)  # built cooperative
    held = [pool.acquire(0), pool.acquire(0)]
    got: list[object] = []
    waiters = [_start(lambda: got.append(pool.acquire(JOIN_S))) for _ in range(2)]
    time.sleep(0.05)
    for block in held:
        assert block is not None
        pool.release(block)
    for thread in waiters:
        thread.join(JOIN_S)
    assert len(got) == 2 and all(block is not None for block in got)
    assert pool.free_count() == 0
