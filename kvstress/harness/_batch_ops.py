"""The harness's operations for ``acquire_many``, an optional protocol member: checked wherever
a pool has it, skipped where it does not.

What any correct ``acquire_many(n, timeout)`` promises, however it waits (FIFO-fair or not):
it returns ``n`` distinct fresh blocks or None, and None takes nothing (all or nothing); a
try-once with ``n`` blocks held by nobody, alone, is not None; a batch waiter is not left
waiting while ``n`` blocks sit free; a cancelled call holds nothing. Nothing here asks for an
order among waiters, so a pool that serves batches and single acquires in any order passes.
"""

from __future__ import annotations

from typing import Any

from kvstress import checkers
from kvstress._violation import InvariantViolation
from kvstress.harness._operations import Operations


class BatchOperations(Operations):
    """``acquire_many`` for named holders, checked as it returns; the batch wake-up probe."""

    @property
    def has_acquire_many(self) -> bool:
        """Whether the pool has the optional ``acquire_many``."""
        return callable(getattr(self.pool, "acquire_many", None))

    async def op_acquire_many(self, holder: str, n: int, timeout: float | None) -> list[int] | None:
        """acquire_many, then: None, or n distinct valid ids nobody holds, each ACQUIRED with
        refcount 1 and zeros; timing as acquire's; alone, a try-once with n free is not None."""
        index = self.history.begin(holder, "acquire_many", {"n": n, "timeout": timeout}, self._stamp())
        start, excused0 = self._now(), self._excused_now()
        blocks = await self._call(index, "acquire_many", self.pool.acquire_many, n, timeout)
        returned = self._stamp()  # before the blocks' fields are read (see ``op_acquire``)
        elapsed = self._now() - start
        excused = self._excused_since(excused0)
        busy = elapsed - excused
        observed = {"elapsed_s": elapsed, **({"excused_s": excused} if excused > 0 else {})}
        if blocks is None:
            self.history.end(index, returned, "info", None, observed)
            checkers.check_timeout(timeout, False, elapsed, busy, self.backoff_bound, self.timing)
            free = self.num_blocks - len(self.ledger.open)
            if self.sequential and timeout == 0 and free >= n and not await self._excused_refusal(index):
                raise InvariantViolation(
                    "lost-block",
                    f"acquire_many({n}, timeout=0) returned None although {free} block(s) are held "
                    f"by nobody and every release has returned",
                )
            return None
        ids = self._batch_ids(index, n, blocks)
        for block_id, block in zip(ids, blocks, strict=True):
            clash = self.ledger.take(holder, block_id, block)
            checkers.check_acquired(block_id, self.num_blocks, clash.holders if clash else ())
        self.history.end(index, returned, "ok", ids, observed)
        for block_id, block in zip(ids, blocks, strict=True):
            checkers.check_zeroed(block_id, self._read(index, block, "data"))
            checkers.check_fresh_state(block_id, self._state(block), self._refcount(block))
        checkers.check_timeout(timeout, True, elapsed, busy, self.backoff_bound, self.timing)
        return ids

    def _batch_ids(self, index: int, n: int, blocks: Any) -> list[int]:
        """The ids of a batch; a batch that is not n distinct valid blocks is a finding."""
        try:
            listed = list(blocks)
        except TypeError:
            listed = None
        if listed is None or len(listed) != n:
            got = "a non-sequence" if listed is None else f"{len(listed)} block(s)"
            self.history.end(index, self._stamp(), "ok", repr(blocks)[:200])
            raise InvariantViolation(
                "lost-block", f"acquire_many({n}) returned {got}: a batch is all n blocks or None"
            )
        ids = [self._read(index, block, "id") for block in listed]
        if len(set(ids)) != len(ids):
            self.history.end(index, self._stamp(), "ok", ids)
            raise InvariantViolation("shared-block", f"acquire_many({n}) returned one block twice: {ids}")
        return ids
