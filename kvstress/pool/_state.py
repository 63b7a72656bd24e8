"""The block life cycle: FREE -> ACQUIRED -> IN_USE -> RELEASING -> FREE (and ACQUIRED -> RELEASING)."""

from __future__ import annotations

from enum import IntEnum


class BlockState(IntEnum):
    """Where a block is in its life cycle. Values are fixed: they are stored as bytes."""

    FREE = 0
    ACQUIRED = 1
    IN_USE = 2
    RELEASING = 3


LEGAL_TRANSITIONS: frozenset[tuple[BlockState, BlockState]] = frozenset(
    {
        (BlockState.FREE, BlockState.ACQUIRED),
        (BlockState.ACQUIRED, BlockState.IN_USE),
        (BlockState.IN_USE, BlockState.RELEASING),
        (BlockState.ACQUIRED, BlockState.RELEASING),
        (BlockState.RELEASING, BlockState.FREE),
    }
)

HELD_STATES: frozenset[BlockState] = frozenset({BlockState.ACQUIRED, BlockState.IN_USE})


def is_legal(old: BlockState, new: BlockState) -> bool:
    """Whether the protocol allows a block to move from ``old`` to ``new``."""
    return (old, new) in LEGAL_TRANSITIONS
