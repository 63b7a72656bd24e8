"""The audit of an async pool (asyncio or trio): the protocol's calls, each checked against the ledger."""

from __future__ import annotations

import asyncio
import inspect
import types
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import anyio

from kvstress._errors import PoolExhausted
from kvstress.audit._block import AuditedBlock
from kvstress.audit._core import CLOSE_POLL_S, CLOSE_SETTLE_S, AuditCore


class AsyncAuditedPool(AuditCore):
    """An async pool behind an audit: the same protocol, every call checked (``kvstress.audit``).

    ``acquire``, ``release`` and ``release_many`` are coroutines, as the pool's are. No ledger
    update awaits: each runs whole between two of the pool's awaits, so tasks never see the
    ledger half-changed.
    """

    def __init__(self, pool: Any, **options: Any) -> None:
        super().__init__(pool, **options)
        self._trio_names = TaskNames()
        # An async pool's release (and release_many) may be a plain call (docs/protocol.md):
        # then so is the audit's, as the pool's callers call it; the threaded audit's checks.
        from kvstress.audit._threaded import AuditedPool

        if not inspect.iscoroutinefunction(getattr(pool, "release", None)):
            self.release = types.MethodType(AuditedPool.release, self)  # type: ignore[method-assign]
        many = getattr(pool, "release_many", None)
        if many is not None and not inspect.iscoroutinefunction(many):
            self.release_many = types.MethodType(AuditedPool.release_many, self)  # type: ignore[method-assign]
        # And retain or mark_in_use may be coroutines: then so are the audit's.
        if inspect.iscoroutinefunction(getattr(pool, "retain", None)):
            self.retain = self._retain_awaited  # type: ignore[method-assign,assignment]
        if inspect.iscoroutinefunction(getattr(pool, "mark_in_use", None)):
            self.mark_in_use = self._mark_in_use_awaited  # type: ignore[method-assign,assignment]

    async def _retain_awaited(self, block: AuditedBlock) -> None:
        __tracebackhide__ = True
        await self._use_awaited(block, "retain")

    async def _mark_in_use_awaited(self, block: AuditedBlock) -> None:
        __tracebackhide__ = True
        await self._use_awaited(block, "mark_in_use")

    async def _use_awaited(self, block: AuditedBlock, name: str) -> None:
        """``retain`` or ``mark_in_use`` where the pool's is a coroutine."""
        __tracebackhide__ = True
        lease, op = self._begin_use(block, name)
        try:
            await getattr(self.pool, name)(lease.inner)
        except BaseException as error:
            self._use_raised(lease, op, name, error)
            raise
        self._end_use(lease, op, name)

    def _holder(self) -> str:
        return _task_name(self._trio_names)

    async def acquire(self, timeout: float | None = None) -> AuditedBlock | None:
        """The pool's acquire; the block must be nobody's and all zero."""
        __tracebackhide__ = True
        op, holder = self._begin_acquire(timeout)
        try:
            inner = await _maybe(self.pool.acquire(timeout))
        except BaseException as error:
            self._failed(op, error)
            raise
        return self._end_acquire(op, holder, inner)

    @property
    def acquire_many(self) -> Callable[..., Any]:
        """The pool's acquire_many, audited: each of the ``n`` blocks is checked as ``acquire``
        checks its block. Absent (AttributeError) where the pool has none."""
        if getattr(self.pool, "acquire_many", None) is None:
            raise AttributeError("acquire_many")
        return self._acquire_many

    async def _acquire_many(self, n: int, timeout: float | None = None) -> list[AuditedBlock] | None:
        __tracebackhide__ = True
        op, holder = self._begin_acquire_many(n, timeout)
        try:
            inners = await _maybe(self.pool.acquire_many(n, timeout))
        except BaseException as error:
            self._failed(op, error)
            raise
        return self._end_acquire_many(op, holder, inners)

    async def release(self, block: AuditedBlock) -> bool:
        """The pool's release, refused (InvariantViolation) through a stale handle."""
        __tracebackhide__ = True
        lease, op = self._begin_release(block)
        try:
            returned = await _maybe(self.pool.release(lease.inner))
        except BaseException as error:
            self._release_raised(lease, op, error)
            raise
        self._end_release(lease, op, returned)
        return bool(returned)

    async def release_many(self, blocks: Sequence[AuditedBlock]) -> list[bool]:
        """Each block released as ``release`` would, with the pool's own ``release_many`` where it
        has one (one call, so one reset for all); a stale handle refuses the whole call."""
        __tracebackhide__ = True
        self.check_open("release_many")
        many = getattr(self.pool, "release_many", None)
        if many is None:
            return [await self.release(block) for block in blocks]
        begun = self._begin_many(blocks)
        try:
            answers = list(await _maybe(many([lease.inner for lease, _ in begun])))
        except BaseException as error:
            for lease, op in begun:
                self._release_raised(lease, op, error)
            raise
        for (lease, op), returned in zip(begun, answers, strict=True):
            self._end_release(lease, op, returned)
        return [bool(answer) for answer in answers]

    def retain(self, block: AuditedBlock) -> None:
        """The pool's retain, refused (InvariantViolation) through a stale handle."""
        __tracebackhide__ = True
        lease, op = self._begin_use(block, "retain")
        try:
            self.pool.retain(lease.inner)
        except BaseException as error:
            self._use_raised(lease, op, "retain", error)
            raise
        self._end_use(lease, op, "retain")

    def mark_in_use(self, block: AuditedBlock) -> None:
        """The pool's mark_in_use, refused (InvariantViolation) through a stale handle."""
        __tracebackhide__ = True
        lease, op = self._begin_use(block, "mark_in_use")
        try:
            self.pool.mark_in_use(lease.inner)
        except BaseException as error:
            self._use_raised(lease, op, "mark_in_use", error)
            raise
        self._end_use(lease, op, "mark_in_use")

    def free_count(self) -> int:
        """The pool's own counter (not audited: a read)."""
        self.check_open("free_count")
        count: int = self.pool.free_count()
        return count

    def free_ids(self) -> list[int]:
        """The pool's free queue (not audited: a read)."""
        self.check_open("free_ids")
        return list(self.pool.free_ids())

    @asynccontextmanager
    async def block(self, timeout: float | None = None) -> AsyncIterator[AuditedBlock]:
        """``async with audited.block(timeout) as b:`` acquires, and always releases, through the
        audit. Raises PoolExhausted when no block comes within ``timeout``."""
        __tracebackhide__ = True
        acquired = await self.acquire(timeout)
        if acquired is None:
            raise PoolExhausted(f"no free block within {timeout} s ({self.num_blocks} blocks, all held)")
        try:
            yield acquired
        finally:
            await self.release(acquired)

    def __enter__(self) -> AsyncAuditedPool:
        raise TypeError(
            "an audited async pool is closed with `async with kvstress.audit(pool) as audited:` "
            "(or `audited.close()`), not a plain `with`"
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ always raises
        __tracebackhide__ = True
        return None

    async def aclose(self) -> None:
        """``close()``, and then wait, up to ``CLOSE_SETTLE_S`` on the loop's clock, for the
        blocks released through the audit that the pool has not queued yet (a reset task or
        thread may finish a release after it returned): ``lost-block`` for those that never
        arrive. ``async with`` ends with it; a plain ``close()`` cannot wait, and leaves them."""
        __tracebackhide__ = True
        if not self._close_checks():
            return
        missing = self.not_back()
        if not missing:
            return
        start = anyio.current_time()
        pause, longest = CLOSE_POLL_S
        while missing and anyio.current_time() - start < CLOSE_SETTLE_S:
            await anyio.sleep(pause)
            pause = min(2 * pause, longest)
            missing = self.not_back()
        if missing:
            raise self.never_back(missing, CLOSE_SETTLE_S)

    async def __aenter__(self) -> AsyncAuditedPool:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        __tracebackhide__ = True
        if kind is None:
            await self.aclose()
        else:
            self._close_quietly()

    def __repr__(self) -> str:
        return f"<AsyncAuditedPool of {self.pool!r}>"


async def _maybe(result: Any) -> Any:
    """``result`` awaited where it is awaitable: an async pool's call may be a plain one."""
    return await result if inspect.isawaitable(result) else result


def _task_name(trio_names: TaskNames) -> str:
    """The running task's name: asyncio's own where the loop is asyncio (``Task-N`` unless the
    code named it), anyio's record elsewhere, told apart where several share it."""
    try:
        task: Any = asyncio.current_task()
    except RuntimeError:  # no asyncio loop runs here: trio
        task = None
    if task is not None:
        return str(task.get_name())
    info = anyio.get_current_task()
    return trio_names.name(info.id, info.name or "task")


class TaskNames:
    """trio names a task after its function: every worker of a nursery that runs one function was
    "acquired by server.prefix_cache.warm.<locals>.worker", whichever it was (a blind tester's).
    The first task of a name keeps it; the n-th other is ``name#n``."""

    def __init__(self) -> None:
        self._given: dict[int, str] = {}
        self._count: dict[str, int] = {}

    MOST = 10_000
    """Task ids remembered at most (a long test starts a task per request); past it, the first
    task of each name again keeps it, and the count goes on."""

    def name(self, ident: int, name: str) -> str:
        if len(self._given) >= self.MOST:
            self._given.clear()
        given = self._given.get(ident)
        if given is None or not given.startswith(name):  # a new task, or an id reused by another
            seen = self._count[name] = self._count.get(name, 0) + 1
            given = self._given[ident] = name if seen == 1 else f"{name}#{seen}"
        return given
