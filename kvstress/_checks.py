"""Argument checks shared across kvstress: each error names the argument, what was expected and what came."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


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


def check_num_blocks(num_blocks: object) -> int:
    """A positive int (bool refused)."""
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
        raise ValueError(f"num_blocks must be an int >= 1, got {got(num_blocks)}")
    return num_blocks


def check_block_shape(block_shape: object) -> tuple[int, ...]:
    """A non-empty sequence of positive ints."""
    if isinstance(block_shape, int) and not isinstance(block_shape, bool):
        block_shape = (block_shape,)
    if not isinstance(block_shape, Sequence) or isinstance(block_shape, str) or not block_shape:
        raise ValueError(f"block_shape must be a non-empty sequence of ints >= 1, got {got(block_shape)}")
    dims = tuple(block_shape)
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"block_shape must hold ints >= 1, got {got(dims)}")
    return dims


def check_dtype(dtype: object) -> torch.dtype:
    """A torch dtype."""
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {got(dtype)}")
    return dtype


def resolve_device(device: object) -> torch.device:
    """None means CUDA when available, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved: torch.device = torch.device(device)  # type: ignore[call-overload]
        return resolved
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must name a torch device, got {got(device)}") from exc


def check_timeout(timeout: object) -> float | None:
    """None (wait without limit) or a finite number of seconds >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError(f"timeout must be None or seconds >= 0, got {got(timeout)}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be None or seconds >= 0, got {got(timeout)}")
    return float(timeout)


def check_batch_size(n: object, num_blocks: int) -> int:
    """A number of blocks to take at once: an int in 0..num_blocks (more could never come)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= num_blocks:
        raise ValueError(f"n must be an int in 0..num_blocks ({num_blocks}), got {got(n)}")
    return n


def check_positive_or_none(name: str, value: object) -> float | None:
    """None, or a finite number > 0 (thresholds and intervals)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be None or a number > 0, got {got(value)}")
    if math.isinf(value):
        raise ValueError(f"{name} must be finite, got {got(value)}")
    return float(value)


PROTOCOL = ("num_blocks", "acquire", "mark_in_use", "retain", "release", "free_count", "free_ids")
"""The members every pool has (docs/protocol.md); all but ``num_blocks`` are called."""


def protocol_gap(pool: object) -> str | None:
    """What keeps ``pool`` from the protocol's shape, as a clause that follows the pool's name in
    a message (", which lacks the protocol's free_ids", " whose free_count is 2 (int), not a
    method: ..."); None when it has every member. Reading a member runs a property's code, as
    the harness's first call would."""
    missing = [name for name in PROTOCOL if not hasattr(pool, name)]
    if missing:
        return f", which lacks the protocol's {', '.join(missing)}"
    for name in PROTOCOL[1:]:
        value = getattr(pool, name)
        if not callable(value):
            return (
                f" whose {name} is {got(value)}, not a method: the harness calls {name}() "
                "(see docs/protocol.md)"
            )
    return None
