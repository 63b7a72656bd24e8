"""Degradation policies: queue, truncate (counted, never silent) and reject, and their validation."""

from __future__ import annotations

import pytest
import torch

import kvstress
from kvstress.paged import BlockManager, Degradation, PagingPolicy
from kvstress.paged._machine import prompt_kv, token_kv

SHAPE = (2, 2, 2, 2, 8)
TOKEN_SHAPE = (2, 2, 2, 8)


def manager(policy: PagingPolicy, num_blocks: int = 4) -> BlockManager:
    """A manager without prefix caching over a small pool (so nothing is evictable)."""
    pool = kvstress.ThreadedBlockPool(num_blocks, SHAPE, device="cpu")
    return BlockManager(pool, SHAPE, policy=policy, prefix_caching=False)


def fill(m: BlockManager, tokens: list[int]) -> kvstress.paged.BlockTable:
    """Allocate ``tokens`` with the model's K/V."""
    return m.allocate(tokens, prompt_kv(tokens, TOKEN_SHAPE))


def test_reject_raises_pool_exhausted_at_once_and_counts_it() -> None:
    """reject: an append needing a block from a full pool raises PoolExhausted; the table is unchanged."""
    m = manager(PagingPolicy(Degradation.REJECT))
    table = fill(m, [1, 2, 3, 4, 5, 6, 7, 8])
    with pytest.raises(kvstress.PoolExhausted, match="policy reject"):
        table.append_token(9, token_kv([*range(1, 9), 9], TOKEN_SHAPE))
    assert table.num_tokens == 8
    assert m.metrics()["rejections"] == 1


def test_queue_waits_its_timeout_then_raises() -> None:
    """queue: a full pool is waited on for queue_timeout_s, then PoolExhausted (counted)."""
    m = manager(PagingPolicy(Degradation.QUEUE, queue_timeout_s=0.01))
    table = fill(m, [1, 2, 3, 4, 5, 6, 7, 8])
    with pytest.raises(kvstress.PoolExhausted, match=r"within 0\.01 s"):
        table.append_token(9, token_kv([*range(1, 9), 9], TOKEN_SHAPE))
    assert m.metrics()["queue_timeouts"] == 1


def test_truncate_keeps_sinks_and_window_and_counts_it() -> None:
    """truncate: the blocks between the sink and the window go back; the metrics count them."""
    m = manager(PagingPolicy(Degradation.TRUNCATE, queue_timeout_s=0, sink_blocks=1, window_blocks=1))
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    table = fill(m, tokens)
    table.append_token(9, token_kv([*tokens, 9], TOKEN_SHAPE))
    kept = [1, 2, 7, 8, 9]
    assert table.token_ids() == kept
    expected = torch.cat(
        [
            prompt_kv(tokens, TOKEN_SHAPE)[:, :, [0, 1, 6, 7]],
            token_kv([*tokens, 9], TOKEN_SHAPE).unsqueeze(2),
        ],
        dim=2,
    )
    assert torch.equal(table.kv(), expected)
    metrics = m.metrics()
    assert (metrics["truncations"], metrics["truncated_blocks"], metrics["truncated_tokens"]) == (1, 2, 4)
    assert table.truncated_tokens == 4
    assert m.pool.free_count() == 1  # 2 given back, 1 taken


def test_truncate_never_cuts_a_prompt_being_allocated() -> None:
    """A prompt that does not fit is refused (PoolExhausted), not truncated, and nothing is kept."""
    m = manager(PagingPolicy(Degradation.TRUNCATE, queue_timeout_s=0, sink_blocks=1, window_blocks=1))
    with pytest.raises(kvstress.PoolExhausted):
        fill(m, list(range(10)))
    assert m.metrics()["truncations"] == 0
    assert m.pool.free_count() == m.pool.num_blocks


def test_policy_is_visible_in_metrics() -> None:
    """metrics() names the policy and its parameters."""
    m = manager(PagingPolicy(Degradation.TRUNCATE, sink_blocks=2, window_blocks=3))
    metrics = m.metrics()
    assert (metrics["policy_mode"], metrics["policy_sink_blocks"], metrics["policy_window_blocks"]) == (
        "truncate",
        2,
        3,
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"mode": "queue"}, "mode must be a Degradation"),
        ({"queue_timeout_s": -1}, "timeout must be None or seconds >= 0"),
        ({"sink_blocks": -1}, "sink_blocks must be an int >= 0, got -1"),
        ({"window_blocks": True}, "window_blocks must be an int >= 0, got True"),
        ({"mode": Degradation.TRUNCATE, "window_blocks": 0}, "window_blocks must be >= 1 with mode truncate"),
    ],
)
def test_bad_policy_raises_value_error(options: dict[str, object], match: str) -> None:
    """A bad policy field raises ValueError naming it, what was expected and what came."""
    with pytest.raises(ValueError, match=match):
        PagingPolicy(**options)  # type: ignore[arg-type]


def test_policy_is_frozen() -> None:
    """A policy cannot be changed after the manager is built."""
    policy = PagingPolicy()
    with pytest.raises(AttributeError):
        policy.mode = Degradation.REJECT  # type: ignore[misc]
