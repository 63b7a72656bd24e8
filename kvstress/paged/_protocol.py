"""What the paged layer needs from a pool and its blocks: the synchronous kvstress pool protocol."""

from __future__ import annotations

from typing import Any, Protocol

import torch


class BlockHandle(Protocol):
    """A block as a pool hands it out: a fixed ``id``, its memory ``data`` and a live ``refcount``."""

    @property
    def id(self) -> int: ...

    @property
    def data(self) -> torch.Tensor: ...

    @property
    def refcount(self) -> int: ...


class SyncPool(Protocol):
    """Any synchronous pool keeping the kvstress protocol (ours, CondvarPool, PollingCasPool)."""

    @property
    def num_blocks(self) -> int: ...

    def acquire(self, timeout: float | None = None) -> Any: ...

    def mark_in_use(self, block: Any) -> None: ...

    def retain(self, block: Any) -> None: ...

    def release(self, block: Any) -> bool: ...

    def free_count(self) -> int: ...
