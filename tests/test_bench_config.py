"""The workload config: defaults, and every bad field refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from kvstress.bench import FreshAlloc, LoadSpec, OverloadPolicy, WorkloadConfig
from kvstress.capacity import load_card

TINY = load_card("tiny")


def test_defaults_queue_on_a_planned_pool() -> None:
    """By default the pool is planned, the policy is queue, and the per-request cap is the pool's size."""
    config = WorkloadConfig(TINY, LoadSpec(max_tokens=256))
    assert (config.pool_blocks, config.memory_cap_bytes, config.device) == (None, None, None)
    assert (config.policy, config.fresh, config.queue_timeout_s) == (
        OverloadPolicy.QUEUE,
        FreshAlloc.ZEROS,
        0.2,
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"card": "tiny"}, "card must be a ModelCard"),
        ({"load": {}}, "load must be a LoadSpec"),
        (
            {"load": LoadSpec(max_tokens=257)},
            "max_tokens must be at most the card's max_context 256, got 257",
        ),
        ({"pool_blocks": 0}, "pool_blocks must be an int >= 1"),
        ({"policy": "queue"}, "policy must be a OverloadPolicy ('queue', 'truncate', 'reject'), got 'queue'"),
        ({"fresh": "zeros"}, "fresh must be a FreshAlloc"),
        ({"queue_timeout_s": 0}, "queue_timeout_s must be a finite number > 0"),
        ({"max_attempts": 0}, "max_attempts must be an int >= 1"),
        ({"sink_blocks": 0}, "sink_blocks"),
        ({"window_blocks": 1.5}, "window_blocks"),
        ({"memory_cap_bytes": 0}, "memory_cap_bytes must be an int >= 1"),
        ({"device": 0}, "device must be None or a device name"),
        ({"tracemalloc": 1}, "tracemalloc must be a bool"),
    ],
)
def test_bad_fields_are_refused_by_name(fields: dict[str, Any], says: str) -> None:
    """Each bad field raises ValueError naming it, what was expected and what came."""
    arguments: dict[str, Any] = {"card": TINY, "load": LoadSpec(max_tokens=256), **fields}
    with pytest.raises(ValueError) as caught:
        WorkloadConfig(**arguments)
    assert says in str(caught.value)
