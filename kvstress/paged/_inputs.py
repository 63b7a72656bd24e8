"""The paged layer's input checks: each raises ValueError naming the argument and what it got."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvstress._checks import got


def check_block_shape(block_shape: object) -> tuple[int, int, int, int, int]:
    """``(2, layers, block_tokens, kv_heads, head_dim)`` of ints >= 1."""
    expected = "(2, layers, block_tokens, kv_heads, head_dim) of ints >= 1"
    if not isinstance(block_shape, Sequence) or len(block_shape) != 5:
        raise ValueError(f"block_shape must be {expected}, got {got(block_shape)}")
    dims = tuple(block_shape)
    if dims[0] != 2 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"block_shape must be {expected}, got {got(dims)}")
    return dims


def check_tokens(tokens: object) -> list[int]:
    """A list of int token ids (a sequence, not a string)."""
    if not isinstance(tokens, Sequence) or isinstance(tokens, str | bytes):
        raise ValueError(f"prompt_tokens must be a sequence of ints, got {got(tokens)}")
    for token in tokens:
        if isinstance(token, bool) or not isinstance(token, int):
            raise ValueError(f"token ids must be ints, got {got(token)}")
    return list(tokens)


def check_kv(name: str, kv: object, shape: tuple[int, ...]) -> None:
    """A tensor of exactly ``shape``."""
    if not isinstance(kv, torch.Tensor) or tuple(kv.shape) != shape:
        shown = tuple(kv.shape) if isinstance(kv, torch.Tensor) else got(kv)
        raise ValueError(f"{name} must be a tensor of shape {shape}, got {shown}")
