"""A face over another pool (``self._inner``): the plain protocol calls pass straight through."""

from __future__ import annotations

from typing import Any


class InnerFront:
    """``mark_in_use``, ``retain``, ``free_count`` and ``free_ids`` of ``self._inner``."""

    _inner: Any

    def mark_in_use(self, block: Any) -> None:
        self._inner.mark_in_use(block)

    def retain(self, block: Any) -> None:
        self._inner.retain(block)

    def free_count(self) -> int:
        return int(self._inner.free_count())

    def free_ids(self) -> list[int]:
        return list(self._inner.free_ids())
