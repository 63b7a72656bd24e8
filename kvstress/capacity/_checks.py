"""Argument checks for the capacity API: each error names the argument, what was expected and what came."""

from __future__ import annotations

import math


def got(value: object) -> str:
    """How an error message shows the value received: its repr and its type."""
    return f"{value!r} ({type(value).__name__})"


def positive_int(name: str, value: object) -> int:
    """An int >= 1 (bool refused: ``True`` is an int to Python, never a count to us)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {got(value)}")
    return value


def non_negative_number(name: str, value: object) -> int | float:
    """A finite int or float >= 0 (bool refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {got(value)}")
    return value


def positive_number(name: str, value: object) -> int | float:
    """A finite int or float > 0 (bool refused)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {got(value)}")
    return value


def non_empty_str(name: str, value: object) -> str:
    """A string with something other than whitespace in it."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {got(value)}")
    return value
