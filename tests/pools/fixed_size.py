"""Correct pools that will not be built larger than asked, in the two ways a user's may: one
refuses any size but the one it was designed for, one ignores the size it is given."""

from __future__ import annotations

from typing import Any

from tests.pools._simple import SimpleThreadedPool


class OnlyTwoBlocksPool(SimpleThreadedPool):
    """Raises for any size but two (a pool sized to a fixed device allocation)."""

    def __init__(self, num_blocks: int, *args: Any, **kwargs: Any) -> None:
        if num_blocks != 2:
            raise ValueError(f"this pool has exactly 2 blocks, got num_blocks={num_blocks}")
        super().__init__(num_blocks, *args, **kwargs)


class AlwaysTwoBlocksPool(SimpleThreadedPool):
    """Builds two blocks whatever it is asked for."""

    def __init__(self, num_blocks: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(2, *args, **kwargs)
