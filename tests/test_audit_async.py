"""kvstress.audit on async pools (asyncio and trio): planted usage bugs caught, correct use silent."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import kvstress
from kvstress import AsyncAuditedPool, AuditedBlock, InvariantViolation
from kvstress.mutants import ORDINARY_POOLS, AsyncConditionPool, backends_of

BACKENDS = ["asyncio", "trio"]
TASKS, STEPS, BLOCKS = 4, 120, 3


def run(backend: str, body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body, backend=backend)


def audited(num_blocks: int = 2) -> AsyncAuditedPool:
    pool = kvstress.audit(kvstress.AsyncBlockPool(num_blocks, (2, 4)))
    assert isinstance(pool, AsyncAuditedPool)
    return pool


async def take(pool: AsyncAuditedPool, timeout: float | None = 0) -> AuditedBlock:
    block = await pool.acquire(timeout)
    assert block is not None
    return block


# -- planted usage bugs -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_double_release_is_caught_and_the_pool_untouched(backend: str) -> None:
    """A second release of one reference raises double-release; the pool counts nothing."""

    async def body() -> None:
        pool = audited()
        block = await take(pool)
        await pool.release(block)
        with pytest.raises(InvariantViolation, match="a double release") as caught:
            await pool.release(block)
        assert caught.value.invariant == "double-release"
        assert pool.metrics()["double_release_count"] == 0

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stale_handle_release_retain_and_mark_are_refused(backend: str) -> None:
    """Through a handle whose tenancy ended: release, retain and mark_in_use are all refused."""

    async def body() -> None:
        pool = audited(1)
        old = await take(pool)
        await pool.release(old)
        new = await take(pool)
        with pytest.raises(InvariantViolation, match="another holder's block"):
            await pool.release(old)
        for name in ("retain", "mark_in_use"):
            with pytest.raises(InvariantViolation, match="stale handle") as caught:
                getattr(pool, name)(old)
            assert caught.value.invariant == "illegal-transition"
        assert new.refcount == 1 and new.state is kvstress.BlockState.ACQUIRED

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_after_release_is_caught_at_the_next_acquire(backend: str) -> None:
    """A view kept past release and written: the next acquire names a use after release."""

    async def body() -> None:
        pool = audited(1)
        block = await take(pool)
        view = block.data
        await pool.release(block)
        view.fill_(2.0)
        with pytest.raises(InvariantViolation, match="use after release") as caught:
            await pool.acquire(0)
        assert caught.value.invariant == "dirty-read"

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_with_lists_a_leak_with_its_task_and_stack(backend: str) -> None:
    """Leaving ``async with audit(pool)`` with a block held: lost-block, the task and the line."""

    async def leaky_handler(pool: AsyncAuditedPool) -> None:
        block = await take(pool)
        block.data.fill_(1.0)  # ...and the handler returns without releasing

    async def body() -> None:
        with pytest.raises(InvariantViolation, match="never came back") as caught:
            async with audited() as pool, anyio.create_task_group() as group:
                group.start_soon(leaky_handler, pool, name="handler-3")
        assert caught.value.invariant == "lost-block"
        assert "in leaky_handler" in caught.value.message
        assert "(a caller bug;" in caught.value.message  # whose fault it is, as every message says
        # The stack is the handler's: not the event loop's frames that stepped its task.
        assert "asyncio" + os.sep not in caught.value.message
        if backend == "asyncio":
            assert "acquired by handler-3" in caught.value.message

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_close_and_async_with_pass_on_correct_use(backend: str) -> None:
    """close() and ``async with`` are silent when every block came back; block() works."""

    async def body() -> None:
        async with audited() as pool:
            async with pool.block(0) as block:
                pool.mark_in_use(block)
                block.data.fill_(1.0)
            blocks = [await take(pool), await take(pool)]
            assert await pool.release_many(blocks) == [True, True]
        other = audited()
        await other.release(await take(other))
        other.close()

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_calls_after_close_raise_value_error(backend: str) -> None:
    """After close(), acquire, release and release_many raise ValueError naming the call."""

    async def body() -> None:
        pool = audited()
        held = await take(pool)
        await pool.release(held)
        pool.close()
        with pytest.raises(ValueError, match=r"^acquire called on a closed audit"):
            await pool.acquire(0)
        with pytest.raises(ValueError, match=r"^release called on a closed audit"):
            await pool.release(held)
        with pytest.raises(ValueError, match=r"^release_many called on a closed audit"):
            await pool.release_many([held])
        with pytest.raises(ValueError, match=r"^mark_in_use called on a closed audit"):
            pool.mark_in_use(held)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cancelled_acquire_leaves_no_false_leak(backend: str) -> None:
    """An acquire cancelled while it waits is recorded as such; close() finds nothing."""

    async def body() -> None:
        pool = audited(1)
        block = await take(pool)
        with anyio.move_on_after(0.01):
            await pool.acquire(None)
        await pool.release(block)
        pool.close()
        assert [op.outcome for op in pool.history()] == ["ok", "info", "ok"]

    run(backend, body)


# -- silent under concurrent tasks ----------------------------------------------------------------


async def worker(pool: AsyncAuditedPool, rng: random.Random, handoff: list[AuditedBlock]) -> None:
    """A seeded program of correct protocol calls; some references are released by another task."""
    held: list[AuditedBlock] = []
    for _ in range(STEPS):
        roll = rng.random()
        if roll < 0.35 and len(held) < 2:
            block = await pool.acquire(rng.choice([0, 0, 0.002]))
            if block is not None:
                if rng.random() < 0.5:
                    pool.mark_in_use(block)
                block.data.fill_(float(rng.randint(1, 9)))
                held.append(block)
        elif roll < 0.45 and held:
            block = rng.choice(held)
            pool.retain(block)
            handoff.append(block)
        elif roll < 0.55 and handoff:
            await pool.release(handoff.pop(0))
        elif held:
            await pool.release(held.pop(rng.randrange(len(held))))
        else:
            await anyio.sleep(0)
    for block in held:
        await pool.release(block)


def async_pools() -> list[tuple[str, Callable[[], Any], str]]:
    cases: list[tuple[str, Callable[[], Any], str]] = []
    ours: list[tuple[str, Callable[[], Any]]] = [
        ("AsyncBlockPool", lambda: kvstress.AsyncBlockPool(BLOCKS, (2, 4))),
        (
            "AsyncTieredBlockPool",
            lambda: kvstress.AsyncTieredBlockPool(BLOCKS, (2, 4), core_blocks=1, idle_shrink_s=0.0),
        ),
    ]
    for name, factory in ours:
        cases += [(name, factory, backend) for backend in BACKENDS]
    for cls in (AsyncConditionPool, *ORDINARY_POOLS):
        for backend in backends_of(cls):
            cases.append((cls.__name__, lambda cls=cls: cls(BLOCKS, (2, 4)), backend))
    return cases


def case_id(value: object) -> str:
    return value if isinstance(value, str) else ""


@pytest.mark.parametrize(("name", "factory", "backend"), async_pools(), ids=case_id)
def test_silent_on_correct_pools_under_tasks(name: str, factory: Callable[[], Any], backend: str) -> None:
    """Four tasks share blocks and hand references across: no violation, and close() passes."""

    async def body() -> None:
        pool = kvstress.audit(factory(), queue_check_every=8)
        assert isinstance(pool, AsyncAuditedPool), name
        handoff: list[AuditedBlock] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for i in range(TASKS):
                    group.start_soon(worker, pool, random.Random(i), handoff)
        for block in handoff:
            await pool.release(block)
        pool.close()

    run(backend, body)


def test_task_cancel_of_a_waiting_acquire_is_recorded_and_silent() -> None:
    """asyncio's Task.cancel() on an acquire parked in the pool: recorded, no leak, no finding."""

    async def body() -> None:
        pool = audited(1)
        held = await take(pool)
        waiter = asyncio.get_running_loop().create_task(pool.acquire(None))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await pool.release(held)
        again = await take(pool)
        await pool.release(again)
        pool.close()
        acquires = [op for op in pool.history() if op.name == "acquire"]
        assert [op.outcome for op in acquires] == ["ok", "info", "ok"]
        assert acquires[1].result == "asyncio.CancelledError"

    run("asyncio", body)


def test_an_explored_run_names_the_violation_a_dead_task_hit_not_the_deadlock_after() -> None:
    """A worker task dies of a double release and the test then waits for it forever: the
    explored failure is the violation at the faulty call, with the deadlock noted after it."""

    async def main() -> None:
        pool = kvstress.audit(kvstress.AsyncBlockPool(1, (2,)))
        done = asyncio.Event()

        async def worker() -> None:
            block = await pool.acquire()
            assert block is not None
            await pool.release(block)
            await pool.release(block)  # the bug: raises here, and the task dies
            done.set()

        task = asyncio.create_task(worker())
        await done.wait()
        await task

    with pytest.raises(InvariantViolation) as caught:
        kvstress.explore(main, schedules=3, seed=0)
    assert caught.value.invariant == "double-release"
    assert any("then failed with Deadlock" in note for note in caught.value.__notes__)


def test_a_plain_with_on_an_audited_async_pool_says_to_use_async_with() -> None:
    """A blind user wrote ``with kvstress.audit(AsyncBlockPool(...))`` and read Python's bare
    "does not support the context manager protocol"."""
    audited = kvstress.audit(kvstress.AsyncBlockPool(2, (2, 4)))
    with pytest.raises(TypeError, match=r"async with kvstress\.audit"), audited:
        pass
    audited.close()


class _MixedFlavourPool:
    """An async pool (coroutine ``acquire``) whose ``release`` is a plain call and whose
    ``retain`` is a coroutine, as the protocol allows: the audit's calls take the same shapes."""

    def __init__(self, num_blocks: int, block_shape: tuple[int, ...]) -> None:
        self.inner = kvstress.ThreadedBlockPool(num_blocks, block_shape)
        self.num_blocks = num_blocks

    async def acquire(self, timeout: float | None = None) -> Any:
        return self.inner.acquire(0 if timeout is None else min(timeout, 0))

    def release(self, block: Any) -> bool:
        return self.inner.release(block)

    async def retain(self, block: Any) -> None:
        self.inner.retain(block)

    def mark_in_use(self, block: Any) -> None:
        self.inner.mark_in_use(block)

    def free_count(self) -> int:
        return self.inner.free_count()

    def free_ids(self) -> list[int]:
        return self.inner.free_ids()


def test_an_async_pool_with_a_plain_release_is_audited_in_its_own_shapes() -> None:
    """An async pool's plain ``release`` stays plain through the audit (its callers do not await
    it), and a coroutine ``retain`` stays a coroutine: awaiting the pool's plain release raised
    TypeError after the block had gone back, and the audit then blamed the correct pool for a
    shared block (a blind sweep)."""

    async def main() -> None:
        async with kvstress.audit(_MixedFlavourPool(2, (2, 4))) as pool:
            block = await pool.acquire(0)
            await pool.retain(block)
            assert pool.release(block) is False  # one reference left: a plain answer, no await
            assert pool.release(block) is True
            again = await pool.acquire(0)
            other = await pool.acquire(0)
            assert {again.id, other.id} == {0, 1}
            assert pool.release(again) is True and pool.release(other) is True

    asyncio.run(main())


def test_trio_tasks_of_one_function_are_told_apart() -> None:
    """trio names a task after its function: two workers' leaks both read "acquired by
    ...worker" (a blind tester's). The first keeps the name, the second is ``#2``."""

    async def main() -> str:
        audited = kvstress.audit(kvstress.AsyncBlockPool(2, (2,)))

        async def worker() -> None:
            await audited.acquire(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(worker)
            tg.start_soon(worker)
        with pytest.raises(InvariantViolation) as caught:
            audited.close()
        return str(caught.value).splitlines()[0]

    said = anyio.run(main, backend="trio")
    assert "<locals>.worker;" in said and "<locals>.worker#2;" in said, said
