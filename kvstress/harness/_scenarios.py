"""Concurrent scenarios: a waiter woken by a release, and batches of small programs."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any

import anyio

from kvstress import checkers
from kvstress._violation import InvariantViolation
from kvstress.controlled._reach import class_uses_api
from kvstress.harness._batch_ops import BatchOperations
from kvstress.harness._runner import CallHung, run_to_completion

RERELEASE_TICK = 0.0005
"""Seconds between a ``rerelease`` step's looks at whether its peer's release has begun."""
RERELEASE_POLLS = 20


class Scenarios(BatchOperations):
    """Operations in flight together: the lost-wakeup probes and concurrent batches."""

    _scopes: dict[str, Any]
    _newest: dict[str, int]
    native_cancel: bool = False  # cancel with one Task.cancel(), as asyncio code does (speaks_anyio)

    def _cancel_scope(self) -> Any:
        """What cancels one operation of this pool: the deadline its own callers would set. An
        anyio (or trio) pool is cancelled by an anyio cancel scope, which re-delivers the
        cancellation until the scope is left (level-triggered); a pool written on asyncio alone
        by one ``Task.cancel()``, as ``asyncio.timeout`` and a server dropping a request do
        (edge-triggered). Correct asyncio code relies on the difference: on Python 3.11,
        ``asyncio.wait_for`` around ``Condition.wait`` is interrupted by the second delivery
        while its inner task still re-acquires the lock, and the caller's ``async with`` then
        releases a lock it does not hold."""
        if not self.is_async:
            return _NO_SCOPE
        return TaskCancel() if self.native_cancel else anyio.CancelScope()

    async def op_probe_wakeup(
        self, waiter: str, releaser: str, block_id: int, patience: float, cancel: bool = False
    ) -> int | None:
        """See ``probe_wakeup``. Runs as one task (async) or on the harness thread (threads).

        The released block carries a fresh canary, so a waiter handed it before its reset (the
        seed's reset-after-offer bug) reads stale data and the probe reports a dirty read.
        """
        park = 0.02
        if not self.ledger.open[block_id].marked:
            await self.op_mark(releaser, block_id)
        await self.op_write(releaser, block_id)
        if self.is_async:
            return await self._probe_on_loop(waiter, releaser, block_id, patience, park, cancel)

        def wait() -> tuple[int | None, float]:
            return run_to_completion(self.op_acquire(waiter, patience)), self._now()

        future = self._worker(waiter).submit(wait)
        time.sleep(park)
        self._worker(releaser).call(
            lambda: run_to_completion(self.op_release(releaser, block_id)), self._bound(0)
        )
        freed_at, excused0 = self._now(), self._excused_now()
        try:
            result, answered_at = future.result(timeout=self._bound(patience))
        except TimeoutError:
            self._worker(waiter).stuck = True
            raise CallHung(f"{waiter}: acquire(timeout={patience:g}) did not return") from None
        waited = answered_at - freed_at - self._excused_since(excused0)
        call = f"{waiter}: acquire(timeout={patience:g})"
        checkers.check_woken(result is not None, waited, self.backoff_bound, self.timing, call)
        return result

    async def _probe_on_loop(
        self, waiter: str, releaser: str, block_id: int, patience: float, park: float, cancel: bool
    ) -> int | None:
        # With ``cancel``, the releaser cancels the waiter right after waking it, before it
        # runs: a pool that takes the block and then yields loses it (the check_quiet that
        # follows finds it neither held nor free).
        got: list[int | None] = []
        answered_at: list[float] = []
        scope = self._cancel_scope()

        async def wait() -> None:
            with scope:
                got.append(await self.op_acquire(waiter, patience))
                answered_at.append(self._now())

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(park)
                await self.op_release(releaser, block_id)
                freed_at, excused0 = self._now(), self._excused_now()
                if cancel:
                    scope.cancel()
        except BaseExceptionGroup as group:
            raise first_violation(group) from None
        if cancel or not got:
            return got[0] if got else None
        waited = answered_at[0] - freed_at - self._excused_since(excused0)
        call = f"{waiter}: acquire(timeout={patience:g})"
        checkers.check_woken(got[0] is not None, waited, self.backoff_bound, self.timing, call)
        return got[0]

    async def op_probe_batch_wakeup(
        self, waiter: str, releaser: str, block_ids: list[int], patience: float, cancel: bool
    ) -> list[int] | None:
        """A waiter parks in acquire_many(len(block_ids)) on an exhausted pool; ``releaser``
        frees those blocks; the waiter must get a batch within the backoff bound plus slack (a
        batch waiter left waiting while its n blocks sit free is a ``lost-wakeup``). With
        ``cancel`` (async), the waiter is cancelled right after the releases: it must hold
        nothing, which the quiet check after the step sees."""
        n, park = len(block_ids), 0.02
        if not self.is_async:
            return await self._probe_batch_threads(waiter, releaser, block_ids, patience, park)
        got: list[list[int] | None] = []
        answered_at: list[float] = []
        scope = self._cancel_scope()

        async def wait() -> None:
            with scope:
                got.append(await self.op_acquire_many(waiter, n, patience))
                answered_at.append(self._now())

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(park)
                for block_id in block_ids:
                    await self.op_release(releaser, block_id)
                freed_at, excused0 = self._now(), self._excused_now()
                if cancel:
                    scope.cancel()
        except BaseExceptionGroup as group:
            raise first_violation(group) from None
        if cancel or not got:
            return got[0] if got else None
        waited = answered_at[0] - freed_at - self._excused_since(excused0)
        call = f"{waiter}: acquire_many({n}, timeout={patience:g})"
        checkers.check_woken(got[0] is not None, waited, self.backoff_bound, self.timing, call, n)
        return got[0]

    async def _probe_batch_threads(
        self, waiter: str, releaser: str, block_ids: list[int], patience: float, park: float
    ) -> list[int] | None:
        n = len(block_ids)

        def wait() -> tuple[list[int] | None, float]:
            return run_to_completion(self.op_acquire_many(waiter, n, patience)), self._now()

        future = self._worker(waiter).submit(wait)
        time.sleep(park)
        for block_id in block_ids:
            self._worker(releaser).call(
                lambda b=block_id: run_to_completion(self.op_release(releaser, b)),  # type: ignore[misc]
                self._bound(0),
            )
        freed_at, excused0 = self._now(), self._excused_now()
        try:
            result, answered_at = future.result(timeout=self._bound(patience))
        except TimeoutError:
            self._worker(waiter).stuck = True
            raise CallHung(f"{waiter}: acquire_many({n}, timeout={patience:g}) did not return") from None
        waited = answered_at - freed_at - self._excused_since(excused0)
        call = f"{waiter}: acquire_many({n}, timeout={patience:g})"
        checkers.check_woken(result is not None, waited, self.backoff_bound, self.timing, call, n)
        return result

    async def op_acquire_task_cancelled(self, holder: str, timeout: float | None, turns: int) -> int | None:
        """(asyncio) acquire, cancelled by plain ``Task.cancel()`` once it has had ``turns`` turns
        of the loop; the block id if it returned first, else None.

        A cancelled acquire must hold nothing: a pool that took a block and then yielded,
        shielded or not, loses it, and the quiet check after the step finds it neither held nor
        free (``lost-block``).
        """
        _, block_id = await self._task_cancelled(self.op_acquire(holder, timeout), turns)
        return block_id  # type: ignore[no-any-return]

    async def op_acquire_many_task_cancelled(
        self, holder: str, n: int, timeout: float | None, turns: int
    ) -> list[int] | None:
        """(asyncio) acquire_many, cancelled by plain ``Task.cancel()`` once it has had ``turns``
        turns of the loop; the ids if it returned first. A cancelled batch must hold nothing:
        blocks it took and kept are neither held nor free in the quiet check (``lost-block``)."""
        _, block_ids = await self._task_cancelled(self.op_acquire_many(holder, n, timeout), turns)
        return block_ids  # type: ignore[no-any-return]

    async def op_release_task_cancelled(self, holder: str, block_id: int, turns: int) -> None:
        """(asyncio) release, cancelled by plain ``Task.cancel()`` once it has had ``turns`` turns
        of the loop. Cancelled before it took effect, the reference stays with its holder;
        after, it is gone; a block left half-released is what the quiet check then reports."""
        await self._task_cancelled(self.op_release(holder, block_id), turns)

    async def _task_cancelled(self, operation: Coroutine[Any, Any, Any], turns: int) -> tuple[bool, Any]:
        # Task.cancel() is how asyncio.timeout, wait_for and a server dropping a request cancel,
        # and the one cancellation anyio's shields do not stop. (cancelled?, result if not)
        task = asyncio.ensure_future(operation)
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.wait({task})
        if task.cancelled():
            return True, None
        return False, task.result()  # it returned before the cancellation landed

    # -- batches ------------------------------------------------------------------------------

    async def run_program(self, holder: str, program: Sequence[tuple[str, Any]]) -> None:
        """One batch worker's program. Steps: acquire(timeout) (+ mark, write), release,
        share(peer), verify, pause(n), sleep(seconds), wait(seconds) (until the worker holds a
        block), cancel(peer) (async: cancel the peer's acquire or release in flight)."""
        for kind, arg in program:
            mine = self.ledger.held_by(holder)
            if kind == "acquire":
                block_id = None
                with self._cancel_scope() as scope:
                    self._scopes[holder] = scope
                    block_id = await self.op_acquire(holder, arg)
                self._scopes.pop(holder, None)
                if block_id is not None:
                    self._newest[holder] = block_id
                    await self.op_mark(holder, block_id)
                    await self.op_write(holder, block_id)
            elif kind == "acquire_many" and self.has_acquire_many:
                await self._batch_step(holder, int(arg[0]), None if arg[1] is None else float(arg[1]))
            elif kind == "cancel":
                peer_scope = self._scopes.get(f"b{arg}")
                if peer_scope is not None and peer_scope is not _NO_SCOPE:
                    peer_scope.cancel()
            elif kind == "release" and mine:
                # Cancellable too: a request cancelled while it gives its block back.
                with self._cancel_scope() as scope:
                    self._scopes[holder] = scope
                    await self.op_release(holder, mine[0] if arg == "oldest" else mine[-1])
                self._scopes.pop(holder, None)
            elif kind == "share" and mine:
                await self.op_share(holder, mine[-1], f"b{arg}")
            elif kind == "verify" and mine:
                await self.op_verify(holder, mine[-1])
            elif kind == "pause":
                await self._pause(arg)
            elif kind == "sleep":
                await self._sleep(arg)
            elif kind == "wait" and not mine:
                await self.wait_handed(holder, arg)
            elif kind == "rerelease":
                await self._rerelease(holder, f"b{arg}")
            elif kind == "release_many" and mine and self.has_release_many:
                await self.op_release_many(holder, list(dict.fromkeys(mine)))

    async def _rerelease(self, holder: str, peer: str) -> None:
        """Release ``peer``'s latest block again once the peer's own release of it has begun
        (``_programs``' ``rerelease``), polling for that up to ``RERELEASE_POLLS`` short
        sleeps; nothing if it has not begun by then, or if another tenancy of it is open."""
        block_id = self._newest.get(peer)
        if block_id is None:
            return
        for _ in range(RERELEASE_POLLS):
            with self.ledger.lock:
                begun = block_id not in self.ledger.open or peer not in self.ledger.open[block_id].refs
                taken = block_id in self.ledger.open
            if begun:
                if not taken:
                    await self.op_racing_release(holder, block_id, peer)
                return
            await self._sleep(RERELEASE_TICK)

    async def _batch_step(self, holder: str, n: int, timeout: float | None) -> None:
        """A program's acquire_many: cancellable (async) like its acquire; each block is marked
        in use and given a fresh canary."""
        block_ids = None  # stays so when a peer's cancel ends the call (the scope absorbs it)
        with self._cancel_scope() as scope:
            self._scopes[holder] = scope
            block_ids = await self.op_acquire_many(holder, n, timeout)
        self._scopes.pop(holder, None)
        for block_id in block_ids or ():
            await self.op_mark(holder, block_id)
            await self.op_write(holder, block_id)

    async def _batch_tasks(self, holders: list[str], programs: Sequence[Sequence[tuple[str, Any]]]) -> None:
        try:
            async with anyio.create_task_group() as tg:
                for holder, program in zip(holders, programs, strict=True):
                    tg.start_soon(self.run_program, holder, program)
        except BaseExceptionGroup as group:
            raise first_violation(group) from None

    def _batch_threads(
        self, holders: list[str], programs: Sequence[Sequence[tuple[str, Any]]], bound: float
    ) -> None:
        barrier = threading.Barrier(len(holders))

        def job(holder: str, program: Sequence[tuple[str, Any]]) -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=5)
            run_to_completion(self.run_program(holder, program))

        futures = [
            (h, self._worker(h).submit(lambda h=h, p=p: job(h, p)))  # type: ignore[misc]
            for h, p in zip(holders, programs, strict=True)
        ]
        deadline = time.monotonic() + bound
        for holder, future in futures:
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                self._worker(holder).stuck = True
                raise CallHung(f"{holder}: its batch program did not finish") from None


class TaskCancel:
    """A cancel scope for asyncio code: ``cancel()`` calls ``Task.cancel()`` once on the task
    inside the block (at once if it is in there, else as it enters), and the block absorbs that
    one cancellation as ``asyncio.timeout`` absorbs its own; it uncancels the task either way, so
    a cancellation from elsewhere still propagates."""

    def __init__(self) -> None:
        self._task: asyncio.Task[Any] | None = None
        self._requested = False
        self._fired = False
        self._left = False

    def __enter__(self) -> TaskCancel:
        self._task = asyncio.current_task()
        if self._requested:
            self._fire()
        return self

    def cancel(self) -> None:
        """Cancel the operation in the block, once; a no-op once the block is left."""
        self._requested = True
        if self._task is not None and not self._left:
            self._fire()

    def _fire(self) -> None:
        if not self._fired and self._task is not None:
            self._fired = True
            self._task.cancel()

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> bool:
        self._left = True
        if not self._fired or self._task is None:
            return False
        left = self._task.uncancel()
        return kind is not None and issubclass(kind, asyncio.CancelledError) and left == 0


def speaks_anyio(pool: object) -> bool:
    """Whether the pool's code uses anyio or trio, whose callers cancel it with cancel scopes: its
    class's code refers to them (``class_uses_api``: not merely a module that imports them), or
    it holds one of their objects (a primitive made by a factory and passed in). A pool on asyncio
    alone is cancelled as asyncio code is."""
    cls = type(pool)
    known = _SPEAKS_ANYIO.get(cls)
    if known is None:
        known = _SPEAKS_ANYIO[cls] = class_uses_api(cls, _CANCEL_SCOPE_APIS)
    if known:
        return True
    try:
        held = list(vars(pool).values())
    except TypeError:  # a pool with __slots__ only
        return False
    return any(type(value).__module__.partition(".")[0] in _CANCEL_SCOPE_APIS for value in held)


_SPEAKS_ANYIO: dict[type, bool] = {}


_CANCEL_SCOPE_APIS = frozenset({"anyio", "trio"})


class _NoScope:
    """Stands in for a cancel scope where there is no event loop (threads cannot be cancelled)."""

    def __enter__(self) -> _NoScope:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SCOPE = _NoScope()


def first_violation(group: BaseExceptionGroup[Any]) -> BaseException:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_violation(exc)
        if isinstance(exc, InvariantViolation):
            return exc
    return group.exceptions[0]
