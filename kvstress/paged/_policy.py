"""What the paged layer does when the pool has no free block: queue, truncate or reject."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kvstress._checks import check_timeout, got


class Degradation(StrEnum):
    """The three answers to an exhausted pool (after the prefix cache has given back what it can).

    ``queue``: wait up to ``queue_timeout_s`` for a block, then raise PoolExhausted.
    ``truncate``: give back the sequence's blocks between its first ``sink_blocks`` (StreamingLLM's
    attention sinks) and its last ``window_blocks``, counted in the metrics, then queue.
    ``reject``: raise PoolExhausted at once (the serving layer's 429).
    """

    QUEUE = "queue"
    TRUNCATE = "truncate"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class PagingPolicy:
    """The degradation policy a BlockManager is built with; frozen, so it is visible and fixed.

    ``queue_timeout_s`` is seconds (None: wait without limit, 0: try once); it applies to
    ``queue`` and to ``truncate`` once truncation has given back what it could.
    """

    mode: Degradation = Degradation.QUEUE
    queue_timeout_s: float | None = 0.2
    sink_blocks: int = 1
    window_blocks: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.mode, Degradation):
            names = [m.value for m in Degradation]
            raise ValueError(f"mode must be a Degradation, one of {names}, got {got(self.mode)}")
        check_timeout(self.queue_timeout_s)
        for name in ("sink_blocks", "window_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {got(value)}")
        if self.mode is Degradation.TRUNCATE and self.window_blocks < 1:
            raise ValueError(
                f"window_blocks must be >= 1 with mode truncate (the block being written), "
                f"got {got(self.window_blocks)}"
            )

    def as_dict(self) -> dict[str, str | float | int | None]:
        """A flat, JSON-ready form (shown in the manager's metrics)."""
        return {
            "mode": self.mode.value,
            "queue_timeout_s": self.queue_timeout_s,
            "sink_blocks": self.sink_blocks,
            "window_blocks": self.window_blocks,
        }
