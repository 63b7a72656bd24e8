"""``audit(pool)``: the audited proxy of the flavour the pool is (see ``kvstress.audit``)."""

from __future__ import annotations

import inspect
from typing import Any, overload

from kvstress.audit._async import AsyncAuditedPool
from kvstress.audit._threaded import AuditedPool
from kvstress.pool import AsyncBlockPool, ThreadedBlockPool


@overload
def audit(
    pool: ThreadedBlockPool,
    *,
    history: int = ...,
    stack_limit: int = ...,
    queue_check_every: int | None = ...,
) -> AuditedPool: ...
@overload
def audit(
    pool: AsyncBlockPool,
    *,
    history: int = ...,
    stack_limit: int = ...,
    queue_check_every: int | None = ...,
) -> AsyncAuditedPool: ...
@overload
def audit(
    pool: Any,
    *,
    history: int = ...,
    stack_limit: int = ...,
    queue_check_every: int | None = ...,
) -> Any: ...
def audit(
    pool: Any,
    *,
    history: int = 1000,
    stack_limit: int = 10,
    queue_check_every: int | None = None,
) -> Any:
    """An audited proxy of ``pool``: ``AsyncAuditedPool`` when its acquire is a coroutine,
    ``AuditedPool`` otherwise (typed so for our pools; ``Any`` for other pools).

    ``history``: how many of the latest operations a violation carries. ``stack_limit``: frames
    kept of each acquire's stack, for leak reports (0: none). ``queue_check_every``: calls
    between two full reads of the free queue at quiet points (default ``4 * num_blocks``); the
    O(1) counter check runs at every quiet point. Raises ValueError for an object that lacks
    the protocol or a bad argument.
    """
    acquire = getattr(pool, "acquire", None)
    kind = AsyncAuditedPool if acquire is not None and inspect.iscoroutinefunction(acquire) else AuditedPool
    return kind(pool, history=history, stack_limit=stack_limit, queue_check_every=queue_check_every)
