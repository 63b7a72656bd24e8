"""The exceptions kvstress raises, one per kind of fault, so callers can tell whose fault it is."""

from __future__ import annotations


class InvalidTransition(ValueError):
    """A block operation that its life cycle forbids: the caller misused the pool.

    Carries the block id, the state the block was in and the attempted transition,
    so the message says exactly what was refused.
    """

    def __init__(self, block_id: int, state: str, attempted: str, why: str = "") -> None:
        self.block_id = block_id
        self.state = state
        self.attempted = attempted
        detail = f": {why}" if why else ""
        super().__init__(f"block {block_id} is {state}; {attempted} refused{detail}")


class PoolExhausted(TimeoutError):
    """No block could be had within the timeout (the 429 of a serving layer)."""
