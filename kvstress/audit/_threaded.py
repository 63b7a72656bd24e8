"""The audit of a threaded pool: the protocol's calls, each checked against the ledger."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType

from kvstress._errors import PoolExhausted
from kvstress.audit._block import AuditedBlock
from kvstress.audit._core import CLOSE_POLL_S, CLOSE_SETTLE_S, AuditCore
from kvstress.controlled import _coop


class AuditedPool(AuditCore):
    """A threaded pool behind an audit: the same protocol, every call checked (``kvstress.audit``).

    Safe to call from many threads at once: the ledger has its own lock, taken around ledger
    updates only, never across a call into the pool.
    """

    def _holder(self) -> str:
        return threading.current_thread().name

    def acquire(self, timeout: float | None = None) -> AuditedBlock | None:
        """The pool's acquire; the block must be nobody's and all zero."""
        __tracebackhide__ = True
        op, holder = self._begin_acquire(timeout)
        try:
            inner = self.pool.acquire(timeout)
        except BaseException as error:
            self._failed(op, error)
            raise
        return self._end_acquire(op, holder, inner)

    @property
    def acquire_many(self) -> Callable[..., list[AuditedBlock] | None]:
        """The pool's acquire_many, audited: each of the ``n`` blocks is checked as ``acquire``
        checks its block. Absent (AttributeError) where the pool has none."""
        if getattr(self.pool, "acquire_many", None) is None:
            raise AttributeError("acquire_many")
        return self._acquire_many

    def _acquire_many(self, n: int, timeout: float | None = None) -> list[AuditedBlock] | None:
        __tracebackhide__ = True
        op, holder = self._begin_acquire_many(n, timeout)
        try:
            inners = self.pool.acquire_many(n, timeout)
        except BaseException as error:
            self._failed(op, error)
            raise
        return self._end_acquire_many(op, holder, inners)

    def release(self, block: AuditedBlock) -> bool:
        """The pool's release, refused (InvariantViolation) through a stale handle."""
        __tracebackhide__ = True
        lease, op = self._begin_release(block)
        try:
            returned = self.pool.release(lease.inner)
        except BaseException as error:
            self._release_raised(lease, op, error)
            raise
        self._end_release(lease, op, returned)
        return bool(returned)

    def release_many(self, blocks: Sequence[AuditedBlock]) -> list[bool]:
        """Each block released as ``release`` would, with the pool's own ``release_many`` where it
        has one (one call, so one reset for all); a stale handle refuses the whole call."""
        __tracebackhide__ = True
        self.check_open("release_many")
        many = getattr(self.pool, "release_many", None)
        if many is None:
            return [self.release(block) for block in blocks]
        begun = self._begin_many(blocks)
        try:
            answers = list(many([lease.inner for lease, _ in begun]))
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

    @contextmanager
    def block(self, timeout: float | None = None) -> Iterator[AuditedBlock]:
        """``with audited.block(timeout) as b:`` acquires, and always releases, through the audit.

        Raises PoolExhausted when no block comes within ``timeout``.
        """
        __tracebackhide__ = True
        acquired = self.acquire(timeout)
        if acquired is None:
            raise PoolExhausted(f"no free block within {timeout} s ({self.num_blocks} blocks, all held)")
        try:
            yield acquired
        finally:
            self.release(acquired)

    def _wait_back(self) -> None:
        """Poll for the blocks on their way back, on the clock a sleep here runs on: virtual in a
        controlled thread (an explored test: the pool's own reset thread runs meanwhile), real
        elsewhere."""
        __tracebackhide__ = True
        missing = self.not_back()
        if not missing:
            return
        clock = _coop.monotonic if _coop._here()[1] is not None else time.monotonic
        start = clock()
        pause, longest = CLOSE_POLL_S
        while missing and clock() - start < CLOSE_SETTLE_S:
            _coop.sleep(pause)
            pause = min(2 * pause, longest)
            missing = self.not_back()
        if missing:
            raise self.never_back(missing, CLOSE_SETTLE_S)

    def __enter__(self) -> AuditedPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        __tracebackhide__ = True
        if kind is None:
            self.close()
        else:
            self._close_quietly()

    def __repr__(self) -> str:
        return f"<AuditedPool of {self.pool!r}>"
