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
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import torch

from kvstress import checkers
from kvstress._blame import MAX_LOOP_ERRORS, loop_error_line, loop_errors_violation
from kvstress._checks import check_block_shape, check_dtype, check_num_blocks, protocol_gap
from kvstress._format import error_text
from kvstress._violation import BlockRecord, InvariantViolation
from kvstress.checkers import TimingPolicy
from kvstress.controlled._patch import own_loop_primitives, resolve_modules, source_files
from kvstress.controlled._reach import reached_modules
from kvstress.harness._cpu import watch_gc, watch_stalls
from kvstress.harness._dump import dump_blocks
from kvstress.harness._history import History
from kvstress.harness._ledger import Ledger
from kvstress.harness._runner import CallHung, LoopThread, ThreadWorker, run_to_completion
from kvstress.harness._scenarios import Scenarios, speaks_anyio

T = TypeVar("T")
BACKENDS = ("asyncio", "trio")


class PoolSetupError(ValueError):
    """The factory cannot build a pool with these arguments, or built one that lacks the protocol."""


def is_async_factory(factory: object) -> bool | None:
    """Whether a pool class has a coroutine ``acquire``; None when the factory is not a class."""
    if isinstance(factory, type) and hasattr(factory, "acquire"):
        return inspect.iscoroutinefunction(factory.acquire)
    return None


class PoolDriver(Scenarios):
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
        if not self.virtual_time:
            watch_stalls()
        self.history = History()
        self.ledger = Ledger(self.num_blocks)
        self.sequential = True
        self.failed = False
        self._workers: dict[str, ThreadWorker] = {}
        self._scopes: dict[str, Any] = {}
        self._newest: dict[str, int] = {}  # each scenario worker's latest block (see rerelease)
        self.loop: LoopThread | None = None
        args = (self.num_blocks, self.block_shape)
        kwargs = {"dtype": check_dtype(dtype), "device": device}
        self._own = contextlib.ExitStack()
        if is_async_factory(factory) and backend == "asyncio":  # this example's loop is a new one
            roots = resolve_modules((factory,))
            self._own.enter_context(own_loop_primitives((*roots, *reached_modules(roots))))
        # What the event loop caught in the pool's own tasks and callbacks: a crash at the next
        # quiet check, as in the controlled runs (it was only printed: a blind user's).
        self.loop_errors: list[str] = []
        self._pool_files: frozenset[str] = frozenset()
        if is_async_factory(factory):
            self._pool_files = source_files(resolve_modules((factory,)))
            self.loop = LoopThread(backend, backend_options, self._loop_error)
            self.pool = self._build(lambda: self.loop.call(lambda: factory(*args, **kwargs), 30), factory)  # type: ignore[union-attr]
        else:
            self.pool = self._build(lambda: factory(*args, **kwargs), factory)
        self.is_async = inspect.iscoroutinefunction(self.pool.acquire)
        self.native_cancel = self.is_async and backend == "asyncio" and not speaks_anyio(self.pool)
        if self.is_async and self.loop is None:
            self.loop = LoopThread(backend, backend_options, self._loop_error)
        self.backoff_bound = self.timing.backoff_bound_of(self.pool)

    # -- operations, as the state machines call them (sync, bounded) --------------------------

    def acquire(self, holder: str, timeout: float | None) -> int | None:
        """acquire(timeout) for ``holder``; the block id, or None."""
        return self._dispatch(holder, lambda: self.op_acquire(holder, timeout), self._bound(timeout))

    def acquire_many(self, holder: str, n: int, timeout: float | None) -> list[int] | None:
        """acquire_many(n, timeout) for ``holder`` (pools that have it); the ids, or None."""
        return self._dispatch(holder, lambda: self.op_acquire_many(holder, n, timeout), self._bound(timeout))

    def acquire_many_task_cancelled(
        self, holder: str, n: int, timeout: float | None, turns: int
    ) -> list[int] | None:
        """acquire_many cancelled by asyncio's ``Task.cancel()`` after ``turns`` turns of the loop."""
        self._need_task_cancel("acquire_many_task_cancelled")
        return self._dispatch(
            holder,
            lambda: self.op_acquire_many_task_cancelled(holder, n, timeout, turns),
            self._bound(timeout),
        )

    def probe_batch_wakeup(
        self, waiter: str, releaser: str, block_ids: list[int], cancel: bool = False
    ) -> list[int] | None:
        """A waiter parks in acquire_many(len(block_ids)) on an exhausted pool; ``releaser``
        frees those blocks (its last references); the waiter must get a batch within the backoff
        bound plus slack. With ``cancel`` (async pools), it is cancelled right after."""
        patience = self.backoff_bound + 2 * self.timing.slack + 0.2
        bound = self._bound(patience) + self.timing.hang_now()
        self.sequential = False
        try:
            return self._dispatch(
                "harness",
                lambda: self.op_probe_batch_wakeup(waiter, releaser, block_ids, patience, cancel),
                bound,
            )
        finally:
            self.sequential = True

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

    def release_many(self, holder: str, block_ids: list[int]) -> None:
        """release_many of ``holder``'s references to ``block_ids`` (pools that have it)."""
        self._dispatch(holder, lambda: self.op_release_many(holder, block_ids), self._bound(0))

    def double_release(self, holder: str, block_id: int) -> None:
        """Release a block nobody holds: it must answer False and change nothing."""
        self._dispatch(holder, lambda: self.op_double_release(holder, block_id), self._bound(0))

    def misuse(self, holder: str, block_id: int, operation: str) -> None:
        """retain or mark_in_use on a block nobody holds: it must raise."""
        self._dispatch(holder, lambda: self.op_misuse(holder, block_id, operation), self._bound(0))

    def stale_use(self, holder: str, block_id: int, operation: str, first: bool = False) -> None:
        """retain, mark_in_use or release through the handle of the block's previous tenancy
        (with ``first``, of its first) while it is held again: it must be refused and change
        nothing."""
        self._dispatch(holder, lambda: self.op_stale_use(holder, block_id, operation, first), self._bound(0))

    @property
    def cancels_tasks(self) -> bool:
        """Whether the ``*_task_cancelled`` steps apply: an async pool on asyncio."""
        return self.is_async and self.backend == "asyncio"

    def acquire_task_cancelled(self, holder: str, timeout: float | None, turns: int) -> int | None:
        """acquire(timeout) for ``holder``, cancelled by asyncio's ``Task.cancel()`` after
        ``turns`` turns of the loop; the block id if it returned first (asyncio pools only)."""
        self._need_task_cancel("acquire_task_cancelled")
        return self._dispatch(
            holder, lambda: self.op_acquire_task_cancelled(holder, timeout, turns), self._bound(timeout)
        )

    def release_task_cancelled(self, holder: str, block_id: int, turns: int) -> None:
        """release of one of ``holder``'s references, cancelled by asyncio's ``Task.cancel()``
        after ``turns`` turns of the loop (asyncio pools only)."""
        self._need_task_cancel("release_task_cancelled")
        self._dispatch(
            holder, lambda: self.op_release_task_cancelled(holder, block_id, turns), self._bound(0)
        )

    @property
    def cancels_scopes(self) -> bool:
        """Whether ``release_in_cancelled_scope`` applies: an async pool cancelled by scopes (on
        trio, or speaking anyio on asyncio), where a cancellation stays pending until its scope
        is left. A pool on asyncio alone sees one ``Task.cancel()``, delivered once."""
        return self.is_async and not self.native_cancel

    def release_in_cancelled_scope(self, holder: str, block_id: int) -> None:
        """release of one of ``holder``'s references from inside a cancel scope already cancelled
        (an unshielded cleanup path); async pools cancelled by scopes only."""
        if not self.cancels_scopes:
            raise ValueError(
                "release_in_cancelled_scope needs an async pool cancelled by scopes (anyio, trio)"
            )
        self._dispatch(holder, lambda: self.op_release_in_cancelled_scope(holder, block_id), self._bound(0))

    def _need_task_cancel(self, step: str) -> None:
        if not self.cancels_tasks:
            flavour = f"an async pool on {self.backend}" if self.is_async else "a threaded pool"
            raise ValueError(f"{step} needs an async pool on asyncio, not {flavour}")

    def check_quiet(self) -> None:
        """The consistency and conservation checks, with no operation in flight; and nothing the
        event loop caught in the pool's own tasks and callbacks."""
        self._dispatch("harness", self.op_check_quiet, self._bound(0))
        if self.loop_errors:
            raise self._with_context(loop_errors_violation(self.loop_errors[:MAX_LOOP_ERRORS]))

    def probe_wakeup(self, waiter: str, releaser: str, block_id: int, cancel: bool = False) -> int | None:
        """A waiter parks on an exhausted pool; ``releaser`` frees the last reference to a block;
        the waiter must get a block within the backoff bound plus slack. With ``cancel`` (async
        pools), the waiter is cancelled right after the release wakes it."""
        patience = self.backoff_bound + 2 * self.timing.slack + 0.2
        bound = self._bound(patience) + self.timing.hang_now()
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
        bound = budget + self.timing.hang_now()
        self.sequential = False
        try:
            if self.loop is not None:
                self._dispatch("batch", lambda: self._batch_tasks(holders, programs), bound)
            else:
                self._batch_threads(holders, programs, bound)
        except InvariantViolation as violation:
            raise self._with_context(violation) from None
        except CallHung:
            raise self._hang("batch", bound) from None
        finally:
            self.sequential = True
        for holder in holders:
            for block_id in self.ledger.held_by(holder):
                while holder in self.ledger.holders_of(block_id):
                    self.release(holder, block_id)
        self._guard(lambda: checkers.check_release_accounting(self.ledger.ended, self.ledger.answered()))
        self.check_quiet()

    def drain(self) -> None:
        """With nothing held: every block can be handed out, once each, and no more; then returned,
        and the pool's optional ``close()`` called."""
        for holder in {h for t in self.ledger.open.values() for h in t.holders}:
            for block_id in self.ledger.held_by(holder):
                while holder in self.ledger.holders_of(block_id):
                    self.release(holder, block_id)
        self._dispatch("harness", self.op_settle, self._bound(0))
        taken = [self.acquire("drain", 0) for _ in range(self.num_blocks + 1)]
        for got in taken:
            if got is not None:
                self.release("drain", got)
        self.check_quiet()
        self._dispatch("harness", self.op_close, self._bound(0))

    def close(self) -> None:
        """Let the runner threads go (stuck ones are abandoned: they are daemons)."""
        for worker in self._workers.values():
            worker.close()
        if self.loop is not None:
            self.loop.close()
        self._own.close()

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

    def _loop_error(self, context: dict[str, Any]) -> bool:
        """The loop's exception handler (``LoopThread``): the pool's error noted, True; else
        False (a cancellation, kvstress's own), for the loop's default handler."""
        line = loop_error_line(context, self._pool_files)
        if line is None or self.failed:
            return line is not None
        self.loop_errors.append(line)
        return True

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
        return dump_blocks(self.pool, self.num_blocks, self.ledger)

    def _build(self, make: Callable[[], Any], factory: object) -> Any:
        name = getattr(factory, "__qualname__", repr(factory))
        try:
            pool = make()
        except CallHung:
            raise PoolSetupError(f"{name}(...) did not return within 30 s") from None
        except Exception as exc:
            raise PoolSetupError(
                f"{name}({self.num_blocks}, {self.block_shape}, dtype=..., device=...) raised "
                f"{error_text(exc)}"
            ) from exc
        gap = protocol_gap(pool)
        if gap is not None:
            raise PoolSetupError(f"{name} built {type(pool).__name__}{gap}")
        if pool.num_blocks != self.num_blocks:
            raise PoolSetupError(
                f"{name} built a pool of {pool.num_blocks} blocks, asked for {self.num_blocks}"
            )
        return pool
