"""The harness's operations for ``acquire_many`` and ``release_many``, optional protocol members:
checked wherever a pool has them, skipped where it does not.

What any correct ``acquire_many(n, timeout)`` promises, however it waits (FIFO-fair or not):
it returns ``n`` distinct fresh blocks or None, and None takes nothing (all or nothing); a
try-once with ``n`` blocks held by nobody, alone, is not None; a batch waiter is not left
waiting while ``n`` blocks sit free; a cancelled call holds nothing. Nothing here asks for an
order among waiters, so a pool that serves batches and single acquires in any order passes.

``release_many(blocks)`` is ``release`` of each block in one call: each block's release is its
own operation in the history, all begun and ended at the call's two instants (the model then
lets each take effect anywhere within the call, in any order). Its answer, where it is a list
of one bool per block, is held to what ``release`` answers; anything else says nothing, and
the quiet check that follows still finds a block that did not come back.
"""

from __future__ import annotations

import time
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

    @property
    def has_release_many(self) -> bool:
        """Whether the pool has the optional ``release_many``."""
        return callable(getattr(self.pool, "release_many", None))

    async def op_release_many(self, holder: str, block_ids: list[int]) -> None:
        """Verify each canary, then one ``release_many`` of the blocks (distinct, each held by
        ``holder``); alone, each answer is True exactly for a last reference."""
        for block_id in block_ids:
            await self.op_verify(holder, block_id)
        handles = [self.ledger.handles[block_id] for block_id in block_ids]
        lasts = [self.ledger.give_up(holder, block_id) for block_id in block_ids]
        begun = self._stamp()
        indexes = []
        for block_id in block_ids:
            self._count_release()
            indexes.append(self.history.begin(holder, "release", {"block": block_id, "many": True}, begun))
        with self.ledger.lock:
            for block_id in block_ids:
                self.ledger.releasing[block_id] += 1
        try:
            try:
                answer = await self._call(indexes[0], "release_many", self.pool.release_many, handles)
            except BaseException:
                ended = self._stamp()  # the first is ended (raised, or cancelled): the rest alike
                for index in indexes[1:]:
                    self.history.end(index, ended, "info", "release_many did not return")
                raise
            answers, known = _per_block(answer, len(block_ids))
            ended = self._stamp()
            for index, block_id, handle, returned, last in zip(
                indexes, block_ids, handles, answers, lasts, strict=True
            ):
                shown = returned if known else None
                self.history.end(index, ended, "ok", shown, self._offer_deferred(returned and last, handle))
                if (returned is True) if known else last:
                    with self.ledger.lock:
                        counter = self.ledger.returned if known else self.ledger.unanswered
                        counter[block_id] += 1
            if known:
                for block_id, handle, returned, last in zip(block_ids, handles, answers, lasts, strict=True):
                    self._judge_release(block_id, handle, returned, last)
        finally:
            for block_id, handle in zip(block_ids, handles, strict=True):
                self._release_over(block_id, handle)

    async def op_acquire_many(self, holder: str, n: int, timeout: float | None) -> list[int] | None:
        """acquire_many, then: None, or n distinct valid ids nobody holds, each ACQUIRED with
        refcount 1 and zeros; timing as acquire's; alone, a try-once with n free is not None."""
        excused0 = self._excused_now()  # first: see ``op_acquire``
        index = self.history.begin(holder, "acquire_many", {"n": n, "timeout": timeout}, self._stamp())
        start, real0 = self._now(), time.perf_counter()
        blocks = await self._call(index, "acquire_many", self.pool.acquire_many, n, timeout)
        returned = self._stamp()  # before the blocks' fields are read (see ``op_acquire``)
        elapsed = self._now() - start
        excused = self._excused_since(excused0)
        busy = elapsed - excused
        observed = {"elapsed_s": elapsed, **({"excused_s": excused} if excused > 0 else {})}
        if blocks is None:
            self.history.end(index, returned, "info", None, observed)
            waited = self._waited(elapsed, real0)
            checkers.check_timeout(timeout, False, waited, busy, self.backoff_bound, self.timing, batch=n)
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
        checkers.check_timeout(timeout, True, elapsed, busy, self.backoff_bound, self.timing, batch=n)
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


def _per_block(answer: object, count: int) -> tuple[list[bool], bool]:
    """``answer`` as one bool per block, and True; where it is not a list of ``count`` bools
    (the protocol asks no answer of ``release_many``), True for each (a last reference's block
    is then looked at for a deferred offer) and False."""
    if isinstance(answer, list | tuple) and len(answer) == count and all(type(a) is bool for a in answer):
        return list(answer), True
    return [True] * count, False
