"""kvstress.audit under a real client: the paged BlockManager uses an audited pool without a finding."""

from __future__ import annotations

import contextlib
import random

import kvstress
from kvstress.paged import BlockManager, PagingPolicy
from kvstress.paged._machine import prompt_kv, token_kv

CARD = kvstress.load_card("tiny")
SHAPE = CARD.block_shape(2)
TOKEN_SHAPE = (2, CARD.layers, CARD.kv_heads, CARD.head_dim)


def test_block_manager_on_an_audited_pool_is_silent() -> None:
    """Allocate, fork, copy-on-write appends, prefix reuse and frees, seeded: close() passes."""
    bare = kvstress.pool_for_model(kvstress.ThreadedBlockPool, CARD, 24, block_tokens=2, device="cpu")
    rng = random.Random(7)
    with kvstress.audit(bare, queue_check_every=4) as pool:
        manager = BlockManager(pool, SHAPE, policy=PagingPolicy(queue_timeout_s=0))
        tables = []
        for step in range(120):
            roll = rng.random()
            if roll < 0.35 and len(tables) < 4:
                prompt = [rng.randint(1, 3) for _ in range(rng.randint(1, 5))]
                with contextlib.suppress(kvstress.PoolExhausted):  # a server turns the request away
                    tables.append((manager.allocate(prompt, prompt_kv(prompt, TOKEN_SHAPE)), prompt))
            elif roll < 0.5 and 0 < len(tables) < 4:
                table, tokens = rng.choice(tables)
                tables.append((manager.fork(table), list(tokens)))
            elif roll < 0.8 and tables:
                table, tokens = rng.choice(tables)
                with contextlib.suppress(kvstress.PoolExhausted):
                    table.append_token(step, token_kv([*tokens, step], TOKEN_SHAPE))
                    tokens.append(step)
            elif tables:
                table, _ = tables.pop(rng.randrange(len(tables)))
                manager.free(table)
        for table, _ in tables:
            manager.free(table)
        manager.clear_cache()
        assert pool.free_count() == 24
