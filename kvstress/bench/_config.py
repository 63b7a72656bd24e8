"""How a workload is served: the model, the pool, the overload policy and the per-request path's cap."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kvstress._checks import got, positive_int, positive_number
from kvstress.bench._load import LoadSpec
from kvstress.capacity import ModelCard


class OverloadPolicy(StrEnum):
    """What the pooled path does when the pool has no free block (the seed's section 4.4).

    ``queue``: wait up to the queue timeout; a request that times out gives back what it
    holds and starts again (preempted), up to ``max_attempts`` times. ``truncate``: give back
    the oldest block between the first ``sink_blocks`` and the last ``window_blocks``
    (StreamingLLM's attention sink plus a recent window) and reuse it; queue when nothing can
    be cut. ``reject``: fail the request at once (the serving layer's 429).
    """

    QUEUE = "queue"
    TRUNCATE = "truncate"
    REJECT = "reject"


class FreshAlloc(StrEnum):
    """The per-request path's tensor: ``torch.zeros`` (as clean as a pooled block) or ``torch.empty``."""

    ZEROS = "zeros"
    EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """One workload run: ``load`` replayed on ``card``'s KV geometry through both paths.

    ``pool_blocks`` None asks ``kvstress.plan`` for the pool that serves ``load.concurrency``
    requests of the stream's P99 length. ``device`` None is CUDA when available, else CPU.
    ``memory_cap_bytes`` is the memory the per-request path may hold at once (None: as much as
    the pool takes), emulating a device of that size: on CPU an allocation past it is counted
    as out of memory; on CUDA the caching allocator is capped and raises a real one.
    ``queue_timeout_s`` bounds each wait of the queue and truncate policies. Raises ValueError
    naming a bad field.
    """

    card: ModelCard
    load: LoadSpec = field(default_factory=LoadSpec)
    block_tokens: int = 16
    pool_blocks: int | None = None
    device: str | None = None
    policy: OverloadPolicy = OverloadPolicy.QUEUE
    queue_timeout_s: float = 0.2
    max_attempts: int = 20
    sink_blocks: int = 1
    window_blocks: int = 4
    memory_cap_bytes: int | None = None
    fresh: FreshAlloc = FreshAlloc.ZEROS
    tracemalloc: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.card, ModelCard):
            raise ValueError(f"card must be a ModelCard, got {got(self.card)}")
        if not isinstance(self.load, LoadSpec):
            raise ValueError(f"load must be a LoadSpec, got {got(self.load)}")
        if self.load.max_tokens > self.card.max_context:
            raise ValueError(
                f"max_tokens must be at most the card's max_context {self.card.max_context}, "
                f"got {self.load.max_tokens}"
            )
        positive_int("block_tokens", self.block_tokens)
        if self.pool_blocks is not None:
            positive_int("pool_blocks", self.pool_blocks)
        if self.device is not None and not isinstance(self.device, str):
            raise ValueError(f"device must be None or a device name, got {got(self.device)}")
        _member("policy", OverloadPolicy, self.policy)
        _member("fresh", FreshAlloc, self.fresh)
        positive_number("queue_timeout_s", self.queue_timeout_s)
        positive_int("max_attempts", self.max_attempts)
        positive_int("sink_blocks", self.sink_blocks)
        positive_int("window_blocks", self.window_blocks)
        if self.memory_cap_bytes is not None:
            positive_int("memory_cap_bytes", self.memory_cap_bytes)
        if not isinstance(self.tracemalloc, bool):
            raise ValueError(f"tracemalloc must be a bool, got {got(self.tracemalloc)}")


def _member(name: str, kind: type[StrEnum], value: object) -> None:
    if not isinstance(value, kind):
        choices = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"{name} must be a {kind.__name__} ({choices}), got {got(value)}")
