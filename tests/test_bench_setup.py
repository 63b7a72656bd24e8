"""Resolving a config: the planned pool, the per-request cap, the stream's shape, devices refused."""

from __future__ import annotations

import pytest
import torch

from kvstress.bench import LoadSpec, WorkloadConfig, request_stream
from kvstress.bench._setup import resolve
from kvstress.capacity import load_card, plan

TINY = load_card("tiny")


def test_the_pool_is_planned_for_the_concurrency_at_the_p99_length() -> None:
    """With no pool_blocks, kvstress.plan sizes the pool for concurrency x the steady P99 length."""
    load = LoadSpec(requests=100, concurrency=4, max_tokens=256, burst=30)
    stream = request_stream(load)
    setup = resolve(WorkloadConfig(TINY, load, device="cpu"), stream)
    assert setup.pool_sized_by == "plan" and setup.planned_seq_len is not None
    assert setup.pool_blocks == plan(TINY, concurrency=4, seq_len=setup.planned_seq_len).n_pool
    assert setup.pool_bytes == setup.pool_blocks * setup.block_bytes == setup.memory_cap_bytes
    assert setup.tokens_requested == sum(request.tokens for request in stream)
    assert setup.burst_demand_blocks == sum(-(-r.tokens // 16) for r in stream if r.phase.value == "burst")
    assert (setup.device, setup.cap_enforced_by, setup.requests) == ("cpu", "budget", 130)


def test_a_given_pool_and_cap_are_kept() -> None:
    """pool_blocks and memory_cap_bytes, when given, are used as they are."""
    load = LoadSpec(requests=10, max_tokens=64)
    setup = resolve(WorkloadConfig(TINY, load, pool_blocks=9, memory_cap_bytes=1234), request_stream(load))
    assert (setup.pool_blocks, setup.pool_sized_by, setup.planned_seq_len) == (9, "given", None)
    assert setup.memory_cap_bytes == 1234


def test_a_pool_smaller_than_the_longest_request_is_refused() -> None:
    """No policy could complete a request longer than the pool, so the config is refused up front."""
    load = LoadSpec(requests=50, max_tokens=256)
    with pytest.raises(
        ValueError, match=r"pool_blocks must hold the longest request \(256 tokens, 16 blocks\)"
    ):
        resolve(WorkloadConfig(TINY, load, pool_blocks=15), request_stream(load))


@pytest.mark.parametrize("device", ["meta", "cuda"])
def test_unusable_devices_are_refused(device: str) -> None:
    """Only cpu and an available cuda are served."""
    load = LoadSpec(requests=2, max_tokens=64)
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match=rf"^device must .*'{device}"):
        resolve(WorkloadConfig(TINY, load, device=device), request_stream(load))
