"""Pools whose acquire raises an exception that is awkward to print."""

from __future__ import annotations

from typing import Any

from pools._simple import SimpleThreadedPool


class _Unprintable(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("no text for you")


class UnprintableErrorPool(SimpleThreadedPool):
    """BUG: acquire raises an exception whose ``str()`` raises."""

    def acquire(self, timeout: float | None = None) -> Any:
        raise _Unprintable


class HugeErrorPool(SimpleThreadedPool):
    """BUG: acquire raises an exception with a message of a megabyte."""

    def acquire(self, timeout: float | None = None) -> Any:
        raise RuntimeError("X" * (1 << 20))
