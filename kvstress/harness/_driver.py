"""The pool driver: performs protocol operations for named holders and checks every answer.

The driver sees the pool only through the protocol, so it works on any pool, ours or a user's.
Each operation is written once, as a coroutine: on an async pool it runs as a task on the
example's event loop; on a threaded pool it runs on the holder's own thread, where it never
suspends. Either way the caller waits with a bound, so a hung pool is a ``hang``, never a hung
harness.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import anyio
import torch

from kvstress import checkers
from kvstress._violation import BlockRecord, InvariantViolation
from kvstress.checkers import TimingPolicy
from kvstress.harness._cpu import gc_wall_seconds, thread_cpu_without_gc, watch_gc
from kvstress.harness._history import History
from kvstress.harness._ledger import Ledger
from kvstress.harness._runner import CallHung, LoopThread, Suspensions, ThreadWorker, run_to_completion
from kvstress.pool._state import BlockState
from kvstress.pool._validate import check_block_shape, check_dtype, check_num_blocks

T = TypeVar("T")
PROTOCOL = ("num_blocks", "acquire", "mark_in_use", "retain", "release", "free_count", "free_ids")
BACKENDS = ("asyncio", "trio")


class PoolSetupError(ValueError):
    """The factory cannot build a pool with these arguments, or built one that lacks the protocol."""


def is_async_factory(factory: object) -> bool | None:
    """Whether a pool class has a coroutine ``acquire``; None when the factory is not a class."""
    if isinstance(factory, type) and hasattr(factory, "acquire"):
        return inspect.iscoroutinefunction(factory.acquire)
    return None


class PoolDriver:
    """Drives one pool for one run: operations, per-operation checks, quiescent checks, dumps."""

    def __init__(
        self,
        factory: Callable[..., Any],
        *,
        num_blocks: int = 4,
        block_shape: Sequence[int] = (2, 4),
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        backend: str = "asyncio",
        backend_options: dict[str, Any] | None = None,
        timing: TimingPolicy | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.num_blocks = check_num_blocks(num_blocks)
        self.block_shape = check_block_shape(block_shape)
        self.timing = timing or TimingPolicy()
        self.backend = backend
        self.virtual_time = bool(backend_options and "clock" in backend_options)
        watch_gc()
        self.history = History()
        self.ledger = Ledger(self.num_blocks)
        self.sequential = True
        self.failed = False
        self._workers: dict[str, ThreadWorker] = {}
        self._scopes: dict[str, Any] = {}
        self.loop: LoopThread | None = None
        args = (self.num_blocks, self.block_shape)
        kwargs = {"dtype": check_dtype(dtype), "device": device}
        if is_async_factory(factory):
            self.loop = LoopThread(backend, backend_options)
            self.pool = self._build(lambda: self.loop.call(lambda: factory(*args, **kwargs), 30), factory)  # type: ignore[union-attr]
        else:
            self.pool = self._build(lambda: factory(*args, **kwargs), factory)
        self.is_async = inspect.iscoroutinefunction(self.pool.acquire)
        if self.is_async and self.loop is None:
            self.loop = LoopThread(backend, backend_options)
        self.backoff_bound = self.timing.backoff_bound_of(self.pool)

    # -- operations, as the state machines call them (sync, bounded) --------------------------

    def acquire(self, holder: str, timeout: float | None) -> int | None:
        """acquire(timeout) for ``holder``; the block id, or None."""
        return self._dispatch(holder, lambda: self.op_acquire(holder, timeout), self._bound(timeout))

    def mark_in_use(self, holder: str, block_id: int) -> None:
        """mark_in_use on a block ``holder`` acquired."""
        self._dispatch(holder, lambda: self.op_mark(holder, block_id), self._bound(0))

    def write_canary(self, holder: str, block_id: int) -> None:
        """Fill the block with a value unique to this write (the holder's canary)."""
        self._dispatch(holder, lambda: self.op_write(holder, block_id), self._bound(0))

    def verify_canary(self, holder: str, block_id: int) -> None:
        """Check that the canary written into the block is intact."""
        self._dispatch(holder, lambda: self.op_verify(holder, block_id), self._bound(0))

    def share(self, holder: str, block_id: int, to_holder: str) -> None:
        """retain the block and hand the new reference to ``to_holder``."""
        self._dispatch(holder, lambda: self.op_share(holder, block_id, to_holder), self._bound(0))

    def release(self, holder: str, block_id: int) -> bool:
        """Verify the canary, then release one of ``holder``'s references."""
        return self._dispatch(holder, lambda: self.op_release(holder, block_id), self._bound(0))

    def double_release(self, holder: str, block_id: int) -> None:
        """Release a block nobody holds: it must answer False and change nothing."""
        self._dispatch(holder, lambda: self.op_double_release(holder, block_id), self._bound(0))

    def misuse(self, holder: str, block_id: int, operation: str) -> None:
        """retain or mark_in_use on a block nobody holds: it must raise."""
        self._dispatch(holder, lambda: self.op_misuse(holder, block_id, operation), self._bound(0))

    def check_quiet(self) -> None:
        """The consistency and conservation checks, with no operation in flight."""
        self._dispatch("harness", self.op_check_quiet, self._bound(0))

    def probe_wakeup(self, waiter: str, releaser: str, block_id: int, cancel: bool = False) -> int | None:
        """A waiter parks on an exhausted pool; ``releaser`` frees the last reference to a block;
        the waiter must get a block within the backoff bound plus slack. With ``cancel`` (async
        pools), the waiter is cancelled right after the release wakes it."""
        patience = self.backoff_bound + 2 * self.timing.slack + 0.2
        bound = self._bound(patience) + self.timing.hang_bound
        self.sequential = False
        try:
            return self._dispatch(
                "harness",
                lambda: self.op_probe_wakeup(waiter, releaser, block_id, patience, cancel),
                bound,
            )
        finally:
            self.sequential = True

    def run_batch(self, programs: Sequence[Sequence[tuple[str, Any]]]) -> None:
        """Run small programs concurrently, one holder each, then check the pool."""
        holders = [f"b{i}" for i in range(len(programs))]
        budget = sum(self._step_cost(step) for program in programs for step in program)
        bound = budget + self.timing.hang_bound
        self.sequential = False
        try:
            if self.loop is not None:
                self._dispatch("batch", lambda: self._batch_tasks(holders, programs), bound)
            else:
                self._batch_threads(holders, programs, bound)
        finally:
            self.sequential = True
        for holder in holders:
            for block_id in self.ledger.held_by(holder):
                while holder in self.ledger.holders_of(block_id):
                    self.release(holder, block_id)
        self._guard(lambda: checkers.check_release_accounting(self.ledger.ended, self.ledger.returned))
        self.check_quiet()

    def drain(self) -> None:
        """With nothing held: every block can be handed out, once each, and no more; then returned."""
        for holder in {h for t in self.ledger.open.values() for h in t.holders}:
            for block_id in self.ledger.held_by(holder):
                while holder in self.ledger.holders_of(block_id):
                    self.release(holder, block_id)
        taken = [self.acquire("drain", 0) for _ in range(self.num_blocks + 1)]
        for got in taken:
            if got is not None:
                self.release("drain", got)
        self.check_quiet()

    def close(self) -> None:
        """Let the runner threads go (stuck ones are abandoned: they are daemons)."""
        for worker in self._workers.values():
            worker.close()
        if self.loop is not None:
            self.loop.close()

    # -- the operations themselves (coroutines; see the module docstring) ----------------------

    async def op_acquire(self, holder: str, timeout: float | None) -> int | None:
        """acquire, then: a valid id nobody holds, ACQUIRED, refcount 1, zeros, timing."""
        index = self.history.begin(holder, "acquire", {"timeout": timeout}, self._now())
        cpu0, start, gc0 = self._cpu(), self._now(), gc_wall_seconds()
        block, suspensions = await self._call(index, "acquire", self.pool.acquire, timeout, count=True)
        elapsed, cpu = self._now() - start, self._cpu_since(cpu0)
        elapsed -= self._gc_since(gc0)
        observed: dict[str, Any] = {"elapsed_s": elapsed}
        if block is None:
            self.history.end(index, self._now(), "info", None, observed)
            checkers.check_timeout(timeout, False, elapsed, self.backoff_bound, self.timing)
            checkers.check_parking(elapsed, cpu, suspensions, self.timing)
            free = self.num_blocks - len(self.ledger.open)
            if self.sequential and free > 0:
                raise InvariantViolation(
                    "lost-block",
                    f"acquire(timeout={timeout}) returned None although {free} block(s) are held by "
                    f"nobody and every release has returned",
                )
            return None
        block_id = self._read(index, block, "id")
        clash = self.ledger.take(holder, block_id, block) if isinstance(block_id, int) else ()
        observed["state"], observed["refcount"] = self._state(block).name, self._refcount(block)
        self.history.end(index, self._now(), "ok", block_id, observed)
        checkers.check_acquired(block_id, self.num_blocks, clash.holders if clash else ())
        checkers.check_zeroed(block_id, self._read(index, block, "data"))
        checkers.check_fresh_state(block_id, BlockState[observed["state"]], observed["refcount"])
        checkers.check_timeout(timeout, True, elapsed, self.backoff_bound, self.timing)
        checkers.check_parking(elapsed, cpu, suspensions, self.timing)
        return int(block_id)

    async def op_mark(self, holder: str, block_id: int) -> None:
        """mark_in_use, then: IN_USE."""
        handle = self.ledger.handles[block_id]
        index = self.history.begin(holder, "mark_in_use", {"block": block_id}, self._now())
        await self._call(index, "mark_in_use", self.pool.mark_in_use, handle)
        self.history.end(index, self._now(), "ok")
        self.ledger.open[block_id].marked = True
        checkers.check_state(block_id, self._state(handle), BlockState.IN_USE, "mark_in_use")

    async def op_write(self, holder: str, block_id: int) -> None:
        """Write a fresh canary over the whole block."""
        canary = self.ledger.next_canary()
        index = self.history.begin(holder, "write", {"block": block_id, "canary": canary}, self._now())
        self._read(index, self.ledger.handles[block_id], "data").fill_(canary)
        self.ledger.open[block_id].canary = canary
        self.history.end(index, self._now(), "ok")

    async def op_verify(self, holder: str, block_id: int) -> None:
        """The canary is intact."""
        tenancy = self.ledger.open[block_id]
        if tenancy.canary is None:
            return
        index = self.history.begin(holder, "verify", {"block": block_id}, self._now())
        data = self._read(index, self.ledger.handles[block_id], "data")
        self.history.end(index, self._now(), "ok")
        checkers.check_canary(block_id, data, tenancy.canary, holder)

    async def op_share(self, holder: str, block_id: int, to_holder: str) -> None:
        """retain, then (alone) refcount + 1."""
        handle = self.ledger.handles[block_id]
        index = self.history.begin(holder, "retain", {"block": block_id, "for": to_holder}, self._now())
        await self._call(index, "retain", self.pool.retain, handle)
        self.history.end(index, self._now(), "ok")
        tenancy = self.ledger.share(block_id, to_holder)
        if self.sequential:
            checkers.check_refcount(block_id, self._refcount(handle), tenancy.total_refs, "retain")

    async def op_release(self, holder: str, block_id: int) -> bool:
        """Verify the canary, release; alone: True exactly for the last reference, refcount - 1."""
        await self.op_verify(holder, block_id)
        handle = self.ledger.handles[block_id]
        last = self.ledger.give_up(holder, block_id)
        index = self.history.begin(holder, "release", {"block": block_id}, self._now())
        returned, _ = await self._call(index, "release", self.pool.release, handle, count=True)
        self.history.end(index, self._now(), "ok", returned)
        if returned is True:
            with self.ledger.lock:
                self.ledger.returned[block_id] += 1
        if self.sequential:
            checkers.check_release_result(block_id, returned, last)
            if not last:
                remaining = self.ledger.open[block_id].total_refs
                checkers.check_refcount(block_id, self._refcount(handle), remaining, "release")
        return bool(returned)

    async def op_double_release(self, holder: str, block_id: int) -> None:
        """Release a block nobody holds: False, and the queue and counter unchanged."""
        handle = self.ledger.handles[block_id]
        before = (self.pool.free_count(), list(self.pool.free_ids()))
        index = self.history.begin(holder, "release", {"block": block_id, "double": True}, self._now())
        returned, _ = await self._call(index, "release", self.pool.release, handle, count=True)
        self.history.end(index, self._now(), "ok", returned)
        after = (self.pool.free_count(), list(self.pool.free_ids()))
        checkers.check_double_release(block_id, returned, before, after)

    async def op_misuse(self, holder: str, block_id: int, operation: str) -> None:
        """retain or mark_in_use on a block nobody holds must raise."""
        handle = self.ledger.handles[block_id]
        state = self._state(handle)
        index = self.history.begin(holder, operation, {"block": block_id, "misuse": True}, self._now())
        try:
            getattr(self.pool, operation)(handle)
        except Exception as exc:
            self.history.end(index, self._now(), "raised", f"{type(exc).__name__}: {exc}")
            return
        self.history.end(index, self._now(), "ok")
        checkers.check_misuse_raised(block_id, operation, False, state)

    async def op_check_quiet(self) -> None:
        """Queue, counter, conservation, states and refcounts of held blocks."""
        index = self.history.begin("harness", "check", {}, self._now())
        free_count = await self._call(index, "free_count", self.pool.free_count)
        free_ids = list(await self._call(index, "free_ids", self.pool.free_ids))
        self.history.end(index, self._now(), "ok", {"free_count": free_count, "free_ids": free_ids})
        states = {b: self._state(h) for b, h in self.ledger.handles.items()}
        held = {b: t.holders for b, t in self.ledger.open.items()}
        checkers.check_queue(free_ids, self.num_blocks, states)
        checkers.check_held_not_queued(free_ids, held)
        checkers.check_conservation(self.num_blocks, held, free_ids)
        free_states = sum(states.get(b, BlockState.FREE) is BlockState.FREE for b in range(self.num_blocks))
        checkers.check_counter(free_count, free_ids, free_states)
        for block_id, tenancy in self.ledger.open.items():
            expected = BlockState.IN_USE if tenancy.marked else BlockState.ACQUIRED
            checkers.check_state(block_id, states[block_id], expected, f"{tenancy.holders} took it")
            handle = self.ledger.handles[block_id]
            checkers.check_refcount(
                block_id, self._refcount(handle), tenancy.total_refs, "the last operation"
            )
        for block_id, handle in self.ledger.handles.items():
            if block_id not in held and self._refcount(handle) < 0:
                checkers.check_refcount(block_id, self._refcount(handle), 0, "its last release")
        checkers.check_release_accounting(self.ledger.ended, self.ledger.returned)

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
        if self.loop is not None:
            return await self._probe_on_loop(waiter, releaser, block_id, patience, park, cancel)

        def wait() -> tuple[int | None, float]:
            return run_to_completion(self.op_acquire(waiter, patience)), self._now()

        future = self._worker(waiter).submit(wait)
        time.sleep(park)
        self._worker(releaser).call(
            lambda: run_to_completion(self.op_release(releaser, block_id)), self._bound(0)
        )
        freed_at, gc0 = self._now(), gc_wall_seconds()
        try:
            result, answered_at = future.result(timeout=self._bound(patience))
        except TimeoutError:
            self._worker(waiter).stuck = True
            raise CallHung(f"{waiter}: acquire(timeout={patience:g}) did not return") from None
        waited = answered_at - freed_at - self._gc_since(gc0)
        checkers.check_woken(result is not None, waited, self.backoff_bound, self.timing)
        return result

    async def _probe_on_loop(
        self, waiter: str, releaser: str, block_id: int, patience: float, park: float, cancel: bool
    ) -> int | None:
        # With ``cancel``, the releaser cancels the waiter right after waking it, before it
        # runs: a pool that takes the block and then yields loses it (the check_quiet that
        # follows finds it neither held nor free).
        got: list[int | None] = []
        answered_at: list[float] = []
        scope = anyio.CancelScope()

        async def wait() -> None:
            with scope:
                got.append(await self.op_acquire(waiter, patience))
                answered_at.append(self._now())

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(park)
                await self.op_release(releaser, block_id)
                freed_at, gc0 = self._now(), gc_wall_seconds()
                if cancel:
                    scope.cancel()
        except BaseExceptionGroup as group:
            raise _first_violation(group) from None
        if cancel or not got:
            return got[0] if got else None
        waited = answered_at[0] - freed_at - self._gc_since(gc0)
        checkers.check_woken(got[0] is not None, waited, self.backoff_bound, self.timing)
        return got[0]

    # -- batches ------------------------------------------------------------------------------

    async def run_program(self, holder: str, program: Sequence[tuple[str, Any]]) -> None:
        """One batch worker's program. Steps: acquire(timeout) (+ mark, write), release,
        share(peer), verify, pause(n), cancel(peer) (async: cancel the peer's acquire in flight)."""
        for kind, arg in program:
            mine = self.ledger.held_by(holder)
            if kind == "acquire":
                block_id = None
                with anyio.CancelScope() if self.loop is not None else _NO_SCOPE as scope:
                    self._scopes[holder] = scope
                    block_id = await self.op_acquire(holder, arg)
                self._scopes.pop(holder, None)
                if block_id is not None:
                    await self.op_mark(holder, block_id)
                    await self.op_write(holder, block_id)
            elif kind == "cancel":
                peer_scope = self._scopes.get(f"b{arg}")
                if peer_scope is not None and peer_scope is not _NO_SCOPE:
                    peer_scope.cancel()
            elif kind == "release" and mine:
                await self.op_release(holder, mine[-1])
            elif kind == "share" and mine:
                await self.op_share(holder, mine[-1], f"b{arg}")
            elif kind == "verify" and mine:
                await self.op_verify(holder, mine[-1])
            elif kind == "pause":
                await self._pause(arg)

    async def _batch_tasks(self, holders: list[str], programs: Sequence[Sequence[tuple[str, Any]]]) -> None:
        try:
            async with anyio.create_task_group() as tg:
                for holder, program in zip(holders, programs, strict=True):
                    tg.start_soon(self.run_program, holder, program)
        except BaseExceptionGroup as group:
            raise _first_violation(group) from None

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
            except InvariantViolation as violation:
                raise self._with_context(violation) from None
            except TimeoutError:
                self._worker(holder).stuck = True
                raise self._hang(holder, bound) from None

    # -- plumbing -----------------------------------------------------------------------------

    def _dispatch(self, holder: str, make: Callable[[], Coroutine[Any, Any, T]], bound: float) -> T:
        if self.failed:
            raise RuntimeError("the driver already found a violation; start a new one")
        try:
            if self.loop is not None:
                result: T = self.loop.call(make, bound)
                return result
            return self._worker(holder).call(lambda: run_to_completion(make()), bound)
        except InvariantViolation as violation:
            raise self._with_context(violation) from None
        except CallHung:
            raise self._hang(holder, bound) from None

    def _guard(self, check: Callable[[], None]) -> None:
        try:
            check()
        except InvariantViolation as violation:
            raise self._with_context(violation) from None

    def _hang(self, holder: str, bound: float) -> InvariantViolation:
        pending = [op for op in self.history.snapshot() if op.outcome == "pending"]
        what = ", ".join(op.describe().rsplit(" -> ", 1)[0] for op in pending) or f"{holder}'s operation"
        return self._with_context(
            InvariantViolation(
                "hang", f"{what} did not return within {bound:.3g} s (deadlock or endless loop)"
            )
        )

    def _with_context(self, violation: InvariantViolation) -> InvariantViolation:
        self.failed = True
        if violation.history:
            return violation
        return violation.with_context(self.history.snapshot(), self.dump())

    def dump(self) -> tuple[BlockRecord, ...]:
        """Every block as seen through the protocol and the ledger (bounded: never hangs)."""
        queued = _bounded(lambda: set(self.pool.free_ids()), 1.0)
        records = []
        for block_id in range(self.num_blocks):
            handle = self.ledger.handles.get(block_id)
            state, refcount = "unseen", None
            if handle is not None:
                raw = _bounded(lambda h=handle: (h.state, h.refcount), 0.5)  # type: ignore[misc]
                if raw is not None:
                    state = _state_name(raw[0])
                    refcount = raw[1] if isinstance(raw[1], int) else None
            records.append(
                BlockRecord(
                    block_id,
                    state,
                    refcount,
                    self.ledger.holders_of(block_id),
                    None if queued is None else block_id in queued,
                )
            )
        return tuple(records)

    def _build(self, make: Callable[[], Any], factory: object) -> Any:
        name = getattr(factory, "__qualname__", repr(factory))
        try:
            pool = make()
        except CallHung:
            raise PoolSetupError(f"{name}(...) did not return within 30 s") from None
        except Exception as exc:
            raise PoolSetupError(
                f"{name}({self.num_blocks}, {self.block_shape}, dtype=..., device=...) raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        missing = [m for m in PROTOCOL if not hasattr(pool, m)]
        if missing:
            raise PoolSetupError(f"{name} built {type(pool).__name__}, which lacks {', '.join(missing)}")
        if pool.num_blocks != self.num_blocks:
            raise PoolSetupError(
                f"{name} built a pool of {pool.num_blocks} blocks, asked for {self.num_blocks}"
            )
        return pool

    async def _call(
        self, index: int, what: str, method: Callable[..., Any], *args: Any, count: bool = False
    ) -> Any:
        """Call a pool method (awaiting it if it is a coroutine); an exception is a crash."""
        suspensions = None
        try:
            result = method(*args)
            if inspect.iscoroutine(result):
                waiter = Suspensions(result)
                result = await waiter
                suspensions = waiter.count
            elif isinstance(result, Awaitable):
                result = await result
        except Exception as exc:
            self.history.end(
                index,
                self._now(),
                "raised",
                f"{type(exc).__name__}: {exc}",
                {"traceback": traceback.format_exc(limit=8)},
            )
            raise InvariantViolation(
                "crash", f"{what}({', '.join(map(repr, args))}) raised {type(exc).__name__}: {exc}"
            ) from exc
        except BaseException:  # cancelled: it may or may not have taken effect
            self.history.end(index, self._now(), "info", "cancelled")
            raise
        return (result, suspensions) if count else result

    def _read(self, index: int, block: Any, attribute: str) -> Any:
        try:
            return getattr(block, attribute)
        except Exception as exc:
            raise InvariantViolation(
                "crash", f"reading block.{attribute} raised {type(exc).__name__}: {exc}"
            ) from exc

    def _state(self, block: Any) -> BlockState:
        raw = block.state
        try:
            return BlockState(int(raw))
        except (TypeError, ValueError):
            raise InvariantViolation("crash", f"block.state is {raw!r}, not a BlockState") from None

    def _refcount(self, block: Any) -> int:
        raw = block.refcount
        if not isinstance(raw, int):
            raise InvariantViolation("crash", f"block.refcount is {raw!r}, not an int")
        return raw

    def _now(self) -> float:
        return anyio.current_time() if self.loop is not None else time.monotonic()

    def _gc_since(self, gc0: float) -> float:
        """Wall seconds of garbage collection since ``gc0``; none counts on a virtual clock."""
        return 0.0 if self.virtual_time else gc_wall_seconds() - gc0

    def _cpu(self) -> float | None:
        return None if self.loop is not None else thread_cpu_without_gc()

    def _cpu_since(self, cpu0: float | None) -> float | None:
        return None if cpu0 is None else thread_cpu_without_gc() - cpu0

    async def _pause(self, n: int) -> None:
        for _ in range(n):
            if self.loop is not None:
                await anyio.sleep(0)
            else:
                time.sleep(0)

    def _bound(self, timeout: float | None) -> float:
        return (timeout or 0.0) + self.backoff_bound + self.timing.slack + self.timing.hang_bound

    def _step_cost(self, step: tuple[str, Any]) -> float:
        kind, arg = step
        return float(arg or 0.0) + self.backoff_bound + self.timing.slack if kind == "acquire" else 0.01

    def _worker(self, holder: str) -> ThreadWorker:
        worker = self._workers.get(holder)
        if worker is None:
            worker = self._workers[holder] = ThreadWorker(holder)
        return worker


class _NoScope:
    """Stands in for a cancel scope where there is no event loop (threads cannot be cancelled)."""

    def __enter__(self) -> _NoScope:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SCOPE = _NoScope()


def _first_violation(group: BaseExceptionGroup[Any]) -> BaseException:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_violation(exc)
        if isinstance(exc, InvariantViolation):
            return exc
    return group.exceptions[0]


def _state_name(raw: object) -> str:
    try:
        return BlockState(int(raw)).name  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return repr(raw)


def _bounded(fn: Callable[[], T], bound: float) -> T | None:
    """Run ``fn`` on a throwaway daemon thread; None if it raises or overruns ``bound``."""
    box: list[T] = []

    def run() -> None:
        with contextlib.suppress(Exception):  # a dump must never fail the report it belongs to
            box.append(fn())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    return box[0] if box else None
